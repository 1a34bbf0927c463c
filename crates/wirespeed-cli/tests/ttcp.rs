//! `wirespeed ttcp` and `wirespeed bench ttcp` end to end: the real binary on loopback (and,
//! as root, across partitions it makes and removes), checked against exact byte counts.

use crate::common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Start `wirespeed ttcp -r --bind 127.0.0.1 -p 0 ARGS...`; returns it with the port it bound.
fn receiver(args: &[&str]) -> Receiver {
    let mut all = vec!["--bind", "127.0.0.1", "-p", "0"];
    all.extend_from_slice(args);
    spawn_cmd_with(&[], "ttcp", "-r", &all)
}

fn transmit(port: u16, args: &[&str]) -> std::process::Output {
    let p = port.to_string();
    let mut all = vec!["ttcp", "-t", "-p", &p];
    all.extend_from_slice(args);
    all.push("127.0.0.1");
    run(&all)
}

fn ok_json(out: &std::process::Output) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "transmitter failed: {err}");
    json(&String::from_utf8_lossy(&out.stdout))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number '{key}' in {v}"))
}

#[test]
fn tcp_end_to_end_counts_every_byte() {
    let _turn = traffic();
    let rx = receiver(&["-l", "8192", "-b", "256K", "--json"]);
    let port = rx.port;
    let tx = ok_json(&transmit(port, &["-l", "10000", "-n", "500", "--json"]));
    let (code, out, err) = finish(rx, Duration::from_secs(15));
    assert_eq!(code, Some(0), "receiver: {err}");
    let r = json(&out);
    assert_eq!(tx["schema"], "wirespeed.ttcp/1");
    assert_eq!((tx["role"].as_str(), r["role"].as_str()), (Some("transmit"), Some("receive")));
    assert_eq!(u(&tx, "bytes"), 5_000_000);
    assert_eq!(u(&r, "bytes"), 5_000_000);
    assert!(u(&tx, "calls") >= 500);
    assert_eq!(r["ended_by"], "eof");
    assert_eq!(r["peer"], tx["local"], "the receiver names the transmitter it served");
    assert!(f(&tx, "mb_per_s") > 0.0 && f(&r, "mb_per_s") > 0.0);
    assert!(tx["delivered_s"].as_f64().is_some(), "the TCP transmitter times delivery too");
    assert_eq!(u(&r["sockbuf"], "requested"), 262144);
    assert!(u(&r["sockbuf"], "granted") >= 262144);
    assert!(tx["sockbuf"]["requested"].is_null(), "no -b on the transmitter: the default");
}

#[test]
fn tcp_text_report_reads_like_ttcp() {
    let _turn = traffic();
    let rx = receiver(&[]);
    let out = transmit(rx.port, &["-n", "100", "-D"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let t = String::from_utf8_lossy(&out.stdout);
    let (code, r, err) = finish(rx, Duration::from_secs(15));
    assert_eq!(code, Some(0), "{err}");
    for (who, text) in [("ttcp-t:", t.as_ref()), ("ttcp-r:", r.as_str())] {
        let line = text.lines().find(|l| l.contains("real seconds")).unwrap_or_else(|| panic!("no rate line:\n{text}"));
        assert!(line.starts_with(who), "{line}");
        assert!(line.contains("819200 bytes in") && line.contains("MB/s") && line.contains("KB/sec"), "{line}");
        assert!(text.contains("I/O calls") && text.contains("% of real time"), "{text}");
    }
    assert!(r.contains("SO_RCVBUF default (no -b)"), "{r}");
}

#[test]
fn udp_at_a_modest_rate_loses_nothing() {
    let _turn = traffic();
    // A 4 MiB receive buffer holds the whole transfer (1000 x 1200 B, about 2.3 MB of kernel
    // memory), so even a receiver starved of CPU by the tests running beside it loses nothing.
    let rx = receiver(&["-u", "-l", "1200", "-b", "4M", "--json"]);
    let tx = ok_json(&transmit(rx.port, &["-u", "-l", "1200", "-n", "1000", "--rate", "10kpps", "--json"]));
    let (code, out, err) = finish(rx, Duration::from_secs(15));
    assert_eq!(code, Some(0), "{err}");
    let r = json(&out);
    assert!(u(&r["sockbuf"], "granted") >= 4 << 20, "the buffer that holds the whole transfer: {r}");
    assert_eq!(u(&tx, "datagrams"), 1000);
    assert_eq!(u(&tx, "bytes"), 1_200_000);
    assert_eq!(u(&r, "datagrams"), 1000, "{r}");
    assert_eq!(u(&r, "bytes"), 1_200_000);
    assert_eq!(u(&r, "sent_datagrams"), 1000);
    assert_eq!(u(&r, "sent_bytes"), 1_200_000);
    assert_eq!(f(&r, "dropped_pct"), 0.0);
    assert_eq!(r["ended_by"], "end marker");
    assert!(r["sent_from"].as_str().unwrap_or("").contains("end marker"), "{r}");
    // Paced: 1000 at 10 kpps is 0.1 s, not the milliseconds of a flat-out loopback send.
    assert!(f(&tx, "real_s") > 0.09, "{tx}");
}

#[test]
fn udp_into_a_tiny_buffer_drops_and_says_how_much() {
    let _turn = traffic();
    // Whether a receiver keeps up with a flat-out sender is the scheduler's business. What makes
    // the drop certain: the receiver is stopped (SIGSTOP, and seen stopped) while the whole
    // transfer is sent, so its minimum-size buffer holds at most a datagram or two; the kernel
    // drops the rest.
    let rx = receiver(&["-u", "-l", "32768", "-b", "1", "--timeout", "1", "--json"]);
    let pid = rx.child.id().to_string();
    sh(&["kill", "-STOP", &pid]);
    let stat = format!("/proc/{pid}/stat");
    let t = Instant::now();
    while !std::fs::read_to_string(&stat).unwrap_or_default().rsplit(')').next().unwrap_or("").starts_with(" T") {
        assert!(t.elapsed() < Duration::from_secs(60), "the receiver did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    let tx = ok_json(&transmit(rx.port, &["-u", "-l", "32768", "-n", "20000", "--json"]));
    sh(&["kill", "-CONT", &pid]);
    let (code, out, err) = finish(rx, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    let r = json(&out);
    let (sent, sent_bytes) = (u(&tx, "datagrams"), u(&tx, "bytes"));
    assert_eq!((sent, sent_bytes), (20000, 20000 * 32768));
    assert!(u(&r["sockbuf"], "granted") < 32768 * 2, "the kernel's minimum buffer, not a large one: {r}");
    let (got, got_bytes) = (u(&r, "datagrams"), u(&r, "bytes"));
    if got == 0 {
        // Whether a data datagram or only the small markers found room is the kernel's
        // business. With no data, a marker proves nothing (it could be anyone's): the receiver
        // ignores it, names it, and claims no drop figure rather than a made-up one.
        assert!(r["dropped_pct"].is_null(), "{r}");
        assert!(u(&r, "stray") >= 1, "the marker that arrived without data is counted: {r}");
        assert!(r["notes"].to_string().contains("none of its data arrived"), "{r}");
        return;
    }
    // Which of the small markers found room is the kernel's business; either says what was sent.
    let from = r["sent_from"].as_str().unwrap_or("");
    assert!(from == "transmitter's end marker" || from == "start marker (the transmitter's plan)", "{r}");
    assert_eq!((u(&r, "sent_datagrams"), u(&r, "sent_bytes")), (sent, sent_bytes));
    assert_eq!(got_bytes, got * 32768);
    assert!(got <= 2, "a one-datagram buffer holds one datagram while its reader is stopped: {r}");
    let want = 100.0 * (sent_bytes - got_bytes) as f64 / sent_bytes as f64;
    assert!((f(&r, "dropped_pct") - want).abs() < 1e-9, "dropped {} vs counts {want}", f(&r, "dropped_pct"));
    assert!(f(&r, "dropped_pct") > 99.9);
}

#[test]
fn udp_receiver_without_markers_times_out_and_uses_n_times_l() {
    let _turn = traffic();
    let rx = receiver(&["-u", "-l", "100", "-n", "10", "--timeout", "0.5", "--json"]);
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..5 {
        s.send_to(&[b'x'; 100], ("127.0.0.1", rx.port)).unwrap();
    }
    let (code, out, err) = finish(rx, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{err}");
    let r = json(&out);
    assert_eq!(r["ended_by"], "timeout");
    // The receiver says which timeout ended it (not the 5 s default); how long the host took to
    // run it is not the program's to promise.
    assert!(r["notes"].to_string().contains("ended after 0.5 s without data"), "{r}");
    assert_eq!(u(&r, "datagrams"), 5);
    assert_eq!(u(&r, "sent_bytes"), 1000);
    assert_eq!(f(&r, "dropped_pct"), 50.0);
    assert!(r["sent_from"].as_str().unwrap_or("").contains("-n x -l"), "{r}");
}

/// The header and rows of the table whose title line starts with `title`: the lines from the
/// last "Socket Buffer Size" header before the title up to it.
fn table<'a>(text: &'a str, title: &str) -> (&'a str, Vec<&'a str>) {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines.iter().position(|l| l.starts_with(title)).unwrap_or_else(|| panic!("no '{title}' in:\n{text}"));
    let start = lines[..end]
        .iter()
        .rposition(|l| l.starts_with("Socket Buffer Size (Bytes)"))
        .unwrap_or_else(|| panic!("no header for '{title}' in:\n{text}"));
    (lines[start], lines[start + 1..end].to_vec())
}

fn label(row: &str) -> &str {
    row.split("  ").next().unwrap_or("").trim()
}

#[test]
fn bench_loopback_prints_tables_4_and_5() {
    let _turn = traffic();
    let dir = TempDir::new("ttcp-bench");
    let out = run(&["bench", "ttcp", "--loopback", "--buffers", "64K,256K", "-n", "200", "-o", dir.path()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("bench ttcp [")).count(), 6, "a progress line per run:\n{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Receiver Command   wirespeed ttcp -r -s -l49152 -b <socket buffer size> -n 200"), "{text}");
    assert!(
        text.contains("Sender Command     wirespeed ttcp -u -t -s -l49152 -b <socket buffer size> -n 200"),
        "{text}"
    );
    let (header, tcp) = table(&text, "Table 4: TCP/IP Performance");
    assert!(header.contains("Transmit") && header.contains("Receive") && !header.contains('%'), "{header}");
    assert_eq!(tcp.iter().map(|l| label(l)).collect::<Vec<_>>(), ["65536", "262144", "default *"], "{text}");
    assert!(tcp.iter().all(|l| l.matches("MB/s").count() == 2 && !l.contains('%')), "{tcp:?}");
    let (header, udp) = table(&text, "Table 5: UDP/IP Performance");
    assert!(header.contains("Transmit") && header.contains("Receive") && header.contains("% data dropped"), "{header}");
    assert_eq!(udp.iter().map(|l| label(l)).collect::<Vec<_>>(), ["65536", "262144", "default *"], "{text}");
    assert!(udp.iter().all(|l| l.matches("MB/s").count() == 2 && l.trim_end().ends_with('%')), "{udp:?}");
    assert!(text.contains("* no -b (the seed's shaded row)"), "the default row is explained:\n{text}");
    // The files: the same text, a CSV line per run, one JSON document.
    let txt = std::fs::read_to_string(dir.0.join("ttcp.txt")).unwrap();
    // What stdout showed, then the closing line every bench ends with.
    let closing = format!("ttcp.txt, ttcp.csv and ttcp.json in {}\n", dir.0.display());
    assert_eq!(format!("{txt}{closing}"), text);
    let csv = std::fs::read_to_string(dir.0.join("ttcp.csv")).unwrap();
    assert_eq!(csv.lines().count(), 7, "{csv}");
    assert!(csv.lines().nth(3).unwrap_or("").starts_with("4,tcp,default,49152,200,"), "{csv}");
    let doc = json(&std::fs::read_to_string(dir.0.join("ttcp.json")).unwrap());
    assert_eq!(doc["schema"], "wirespeed.bench.ttcp/1");
    assert_eq!(doc["where"], "loopback");
    for row in doc["tcp"].as_array().unwrap() {
        assert_eq!(u(&row["receive"], "bytes"), 200 * 49152, "TCP delivers every byte: {row}");
        assert_eq!(u(&row["transmit"], "bytes"), 200 * 49152);
    }
    for row in doc["udp"].as_array().unwrap() {
        let (sent, got) = (u(&row["receive"], "sent_bytes"), u(&row["receive"], "bytes"));
        assert_eq!(sent, u(&row["transmit"], "bytes"));
        let want = 100.0 * (sent - got) as f64 / sent as f64;
        assert!((f(&row["receive"], "dropped_pct") - want).abs() < 1e-9);
    }
    assert_eq!(doc["udp"][0]["sockbuf"], 65536);
    assert!(doc["udp"][2]["sockbuf"].is_null(), "the default row has no -b");
}

#[test]
fn bench_table3_reads_and_writes_every_size() {
    let _turn = traffic();
    let out = run(&["bench", "ttcp", "--loopback", "--table3", "--proto", "none", "--writes", "20", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    let rows = doc["table3"].as_array().expect("table3 rows");
    let sizes: Vec<u64> = rows.iter().map(|r| u(r, "buflen")).collect();
    let want: Vec<u64> = (5..=20).map(|p| 1u64 << p).collect();
    assert_eq!(sizes, want, "32 B to 1 MiB in powers of two, as the seed");
    for r in rows {
        let size = u(r, "buflen");
        assert_eq!(u(&r["receive"], "bytes"), size * 20);
        assert_eq!(u(&r["transmit"], "calls"), 20, "one write per buffer");
        assert!(f(&r["receive"], "mb_per_s") > 0.0);
    }
    assert!(doc["tcp"].as_array().unwrap().is_empty() && doc["udp"].as_array().unwrap().is_empty());
}

fn namespaces_with(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "needs root"]
fn bench_in_partitions_as_root() {
    let _turn = traffic();
    let child = Command::new(bin())
        .args(["bench", "ttcp", "--buffers", "128K", "-n", "300", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("wsttcp{}x", child.id());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["where"], "partitions");
    assert_eq!(doc["tcp"].as_array().unwrap().len(), 2);
    assert_eq!(doc["udp"].as_array().unwrap().len(), 2);
    for row in doc["tcp"].as_array().unwrap() {
        assert_eq!(u(&row["receive"], "bytes"), 300 * 49152);
        assert!(row["receive"]["local"].as_str().unwrap_or("").starts_with("198.19.0.2:"), "{row}");
        assert!(row["receive"]["peer"].as_str().unwrap_or("").starts_with("198.19.0.1:"), "from partition 1: {row}");
    }
    assert!(namespaces_with(&prefix).is_empty(), "partitions left behind: {:?}", namespaces_with(&prefix));
}

#[test]
#[ignore = "needs root"]
fn bench_stopped_by_a_signal_removes_its_partitions() {
    let _turn = traffic();
    let mut child = Command::new(bin())
        .args(["bench", "ttcp", "--buffers", "64K,128K,256K", "-n", "20000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let prefix = format!("wsttcp{}x", child.id());
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    // The first progress line: the partitions exist and a run is behind us.
    while err.read_line(&mut line).unwrap_or(0) > 0 && !line.contains("bench ttcp [1/") {}
    assert!(line.contains("bench ttcp [1/"), "no progress line: {line}");
    assert_eq!(namespaces_with(&prefix).len(), 2, "two partitions while it runs");
    let st = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(st.success());
    let t = Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(t.elapsed() < Duration::from_secs(120), "bench did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut rest);
    assert_eq!(code, Some(1), "stopped runs are a runtime failure: {rest}");
    assert!(rest.contains("stopped by a signal after"), "{rest}");
    let mut out = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out);
    let (_, done) = table(&out, "Table 4: TCP/IP Performance");
    assert!(!done.is_empty() && label(done[0]) == "65536", "the rows measured are still reported:\n{out}");
    assert!(namespaces_with(&prefix).is_empty(), "partitions left behind: {:?}", namespaces_with(&prefix));
}

fn expect_fail(args: &[&str], code: i32, needle: &str, one_line: bool) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: expected '{needle}' in:\n{err}");
    assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
    if one_line {
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected:\n{err}");
    }
}

#[test]
fn bad_input_is_one_line_and_the_right_exit_code() {
    expect_fail(&["ttcp"], 2, "-r to receive", true);
    expect_fail(&["ttcp", "-t", "-r", "127.0.0.1"], 2, "-t and -r together", true);
    expect_fail(&["ttcp", "-t"], 2, "needs the receiver's HOST", true);
    expect_fail(&["ttcp", "-r", "-l", "0"], 2, "-l (buffer length) must be at least 1", true);
    expect_fail(&["ttcp", "-t", "-n", "0", "127.0.0.1"], 2, "-n (number of buffers) must be at least 1", true);
    expect_fail(&["ttcp", "-r", "-u", "-l", "70000"], 2, "does not fit a UDP datagram", true);
    expect_fail(&["ttcp", "-r", "--bind", "nonsense"], 2, "is not an IP address", true);
    expect_fail(&["ttcp", "-r", "127.0.0.1"], 2, "a receiver takes no HOST", true);
    expect_fail(&["ttcp", "-t", "-u", "-D", "127.0.0.1"], 2, "TCP option", true);
    expect_fail(&["ttcp", "-t", "no-such-host.invalid"], 2, "cannot resolve host", true);
    expect_fail(&["ttcp", "-t", "--rate", "fast", "127.0.0.1"], 2, "cannot read rate 'fast'", false);
    expect_fail(&["ttcp", "-r", "-l", "lots"], 2, "cannot read size", false);
    expect_fail(&["bench", "ttcp", "--proto", "sctp"], 2, "is not a protocol", false);
    expect_fail(&["bench", "ttcp", "--proto", "none"], 2, "nothing to run", true);
    expect_fail(&["bench", "ttcp", "--loopback", "--buffers", "0"], 2, "at least 1 byte", true);
    expect_fail(
        &["bench", "ttcp", "--loopback", "--proto", "udp", "-l", "65508"],
        2,
        "does not fit a UDP datagram",
        true,
    );
}

#[test]
fn port_in_use_and_connection_refused_are_runtime_failures() {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port().to_string();
    expect_fail(&["ttcp", "-r", "--bind", "127.0.0.1", "-p", &port], 1, "is already in use", true);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let uport = udp.local_addr().unwrap().port().to_string();
    expect_fail(&["ttcp", "-r", "-u", "--bind", "127.0.0.1", "-p", &uport], 1, "is already in use", true);
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    expect_fail(&["ttcp", "-t", "-p", &closed, "127.0.0.1"], 1, "connection refused", true);
}
