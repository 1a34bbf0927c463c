//! `wirespeed ttcp --device/--unix` (Table 3's raw transfer) and `bench ttcp --over`, end to
//! end on FIFOs, files and Unix sockets: the code path the raw devices take (it only opens
//! paths), checked against exact byte counts and exact failure messages.

use crate::common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn mkfifo(p: &Path) {
    sh(&["mkfifo", p.to_str().unwrap()]);
}

/// Start `wirespeed ttcp -r ARGS...`, its output piped.
fn spawn_rx(args: &[&str]) -> Child {
    Command::new(bin())
        .args(["ttcp", "-r"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the receiver")
}

/// Exit code, stdout and stderr of a child, killed (and the test failed) after 60 s.
fn finish_child(mut c: Child) -> (Option<i32>, String, String) {
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            let (mut out, mut err) = (String::new(), String::new());
            c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (st.code(), out, err);
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = c.kill();
            let _ = c.wait();
            panic!("the child did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The stream the transmitter sends: `len` bytes of the counter pattern from offset 0.
fn pattern(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    wirespeed_lab::ttcp::fill(&mut v, 0);
    v
}

/// Write `data` into the FIFO a receiver has open (or is opening), then close it.
fn feed(fifo: &Path, data: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(fifo).expect("open the FIFO");
    // The receiver may fail part way and close its end: the rest is then refused (EPIPE),
    // which is the point.
    let _ = f.write_all(data);
}

/// The receiver's one-line failure on stderr, after its "listening" line.
fn failure(err: &str) -> &str {
    let lines: Vec<&str> = err.lines().filter(|l| !l.contains("listening on")).collect();
    assert_eq!(lines.len(), 1, "one line of failure expected:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    lines[0]
}

#[test]
fn raw_over_a_fifo_moves_exactly_n_times_size() {
    let _turn = traffic();
    let d = TempDir::new("raw-fifo");
    let f = d.0.join("p");
    mkfifo(&f);
    let fs = f.to_str().unwrap();
    // 1000 is not a multiple of the pattern's 8-byte words: the check runs across ragged cuts.
    let rx = spawn_rx(&["--device", fs, "-l", "1000", "-n", "300", "--json"]);
    let tx = run(&["ttcp", "-t", "--device", fs, "-l", "1000", "-n", "300", "--json"]);
    assert_eq!(tx.status.code(), Some(0), "{}", String::from_utf8_lossy(&tx.stderr));
    let t = json(&String::from_utf8_lossy(&tx.stdout));
    let (code, out, err) = finish_child(rx);
    assert_eq!(code, Some(0), "{err}");
    let r = json(&out);
    assert_eq!(
        (t["schema"].as_str(), r["schema"].as_str()),
        (Some("wirespeed.ttcp.raw/1"), Some("wirespeed.ttcp.raw/1"))
    );
    assert_eq!((t["role"].as_str(), r["role"].as_str()), (Some("transmit"), Some("receive")));
    assert_eq!(u(&t, "bytes"), 300_000);
    assert_eq!(u(&t, "calls"), 300, "a pipe takes each write whole");
    assert_eq!(u(&r, "bytes"), 300_000);
    assert!(u(&r, "calls") >= 300, "{r}");
    assert!(u(&r, "calls") - u(&r, "short_calls") <= 300, "at most 300 full reads: {r}");
    assert_eq!(r["check"], "counter per 8 bytes");
    let s = &r["streams"][0];
    assert_eq!((s["path"].as_str(), u(s, "bytes")), (Some(fs), 300_000));
    assert_eq!((s["aligned"].as_bool(), t["streams"][0]["aligned"].as_bool()), (Some(true), Some(true)));
    assert!(u(&r, "last_ns") >= u(&r, "first_ns") && u(&r, "last_ns") >= u(&t, "first_ns"), "{r}\n{t}");
}

#[test]
fn raw_text_report_names_the_stream() {
    let _turn = traffic();
    let d = TempDir::new("raw-text");
    let f = d.0.join("p");
    mkfifo(&f);
    let fs = f.to_str().unwrap();
    let rx = spawn_rx(&["--device", fs, "-l", "4096", "-n", "10"]);
    let tx = run(&["ttcp", "-t", "--device", fs, "-l", "4096", "-n", "10"]);
    assert_eq!(tx.status.code(), Some(0), "{}", String::from_utf8_lossy(&tx.stderr));
    let (code, out, err) = finish_child(rx);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("listening on {fs} (raw --device, -l 4096, -n 10)")), "{err}");
    assert!(out.contains(&format!("ttcp-r: {fs}: 40960 bytes in")) && out.contains("read calls"), "{out}");
    assert!(String::from_utf8_lossy(&tx.stdout).contains("10 write calls (0 short)"), "{:?}", tx);
}

#[test]
fn a_changed_byte_fails_the_check_with_its_offset() {
    let d = TempDir::new("raw-bad");
    let f = d.0.join("p");
    mkfifo(&f);
    let rx = spawn_rx(&["--device", f.to_str().unwrap(), "-l", "64", "-n", "100"]);
    let mut data = pattern(6400);
    data[1000] ^= 0x10;
    feed(&f, &data);
    let (code, _, err) = finish_child(rx);
    assert_eq!(code, Some(1), "{err}");
    let line = failure(&err);
    assert!(line.contains("data check failed at byte 1000 (write 15, byte 40 of it)"), "{line}");
    assert!(line.contains(&format!("got 0x{:02x}", data[1000])), "{line}");
}

#[test]
fn a_short_stream_fails_and_says_how_much_came() {
    let d = TempDir::new("raw-short");
    let f = d.0.join("p");
    mkfifo(&f);
    let rx = spawn_rx(&["--device", f.to_str().unwrap(), "-l", "64", "-n", "100"]);
    feed(&f, &pattern(3000));
    let (code, _, err) = finish_child(rx);
    assert_eq!(code, Some(1), "{err}");
    assert!(failure(&err).contains("the stream ended after 3000 of 6400 bytes (100 writes of 64)"), "{err}");
}

#[test]
fn a_long_stream_fails_too() {
    let d = TempDir::new("raw-long");
    let f = d.0.join("p");
    mkfifo(&f);
    let rx = spawn_rx(&["--device", f.to_str().unwrap(), "-l", "64", "-n", "100"]);
    feed(&f, &pattern(6408));
    let (code, _, err) = finish_child(rx);
    assert_eq!(code, Some(1), "{err}");
    assert!(failure(&err).contains("more than the 6400 bytes expected arrived"), "{err}");
}

#[test]
fn a_stream_of_repeated_buffers_is_caught() {
    let _turn = traffic();
    // The transmitter with --no-check sends one buffer over and over: the checking receiver
    // must notice at the second write, not count it as good data.
    let d = TempDir::new("raw-repeat");
    let f = d.0.join("p");
    mkfifo(&f);
    let fs = f.to_str().unwrap();
    let rx = spawn_rx(&["--device", fs, "-l", "64", "-n", "100"]);
    let _ = run(&["ttcp", "-t", "--device", fs, "-l", "64", "-n", "100", "--no-check"]);
    let (code, _, err) = finish_child(rx);
    assert_eq!(code, Some(1), "{err}");
    assert!(failure(&err).contains("data check failed at byte 64 (write 1, byte 0 of it)"), "{err}");
    // Both ends without the check: only counted.
    let rx = spawn_rx(&["--device", fs, "-l", "64", "-n", "100", "--no-check", "--json"]);
    let tx = run(&["ttcp", "-t", "--device", fs, "-l", "64", "-n", "100", "--no-check"]);
    assert_eq!(tx.status.code(), Some(0));
    let (code, out, err) = finish_child(rx);
    assert_eq!(code, Some(0), "{err}");
    let r = json(&out);
    assert_eq!((u(&r, "bytes"), r["check"].as_str()), (6400, Some("off")));
}

#[test]
fn a_regular_file_stands_in_for_a_device() {
    let _turn = traffic();
    let d = TempDir::new("raw-file");
    let f = d.0.join("dev");
    std::fs::write(&f, b"").unwrap();
    let fs = f.to_str().unwrap();
    let tx = run(&["ttcp", "-t", "--device", fs, "-l", "100", "-n", "50", "--json"]);
    assert_eq!(tx.status.code(), Some(0), "{}", String::from_utf8_lossy(&tx.stderr));
    assert_eq!(std::fs::read(&f).unwrap(), pattern(5000), "the stream is the counter pattern");
    let rx = run(&["ttcp", "-r", "--device", fs, "-l", "100", "-n", "50", "--json"]);
    assert_eq!(rx.status.code(), Some(0), "{}", String::from_utf8_lossy(&rx.stderr));
    assert_eq!(u(&json(&String::from_utf8_lossy(&rx.stdout)), "bytes"), 5000);
}

#[test]
fn several_fifos_at_once_report_each_and_the_sum() {
    let _turn = traffic();
    let d = TempDir::new("raw-multi");
    let paths: Vec<String> = (0..3)
        .map(|i| {
            let p = d.0.join(format!("{i:02x}"));
            mkfifo(&p);
            p.to_str().unwrap().to_string()
        })
        .collect();
    let list = paths.join(",");
    let rx = spawn_rx(&["--device", &list, "-l", "8192", "-n", "50", "--json"]);
    let tx = run(&["ttcp", "-t", "--device", &list, "-l", "8192", "-n", "50", "--json"]);
    assert_eq!(tx.status.code(), Some(0), "{}", String::from_utf8_lossy(&tx.stderr));
    let (code, out, err) = finish_child(rx);
    assert_eq!(code, Some(0), "{err}");
    let r = json(&out);
    assert_eq!(u(&r, "bytes"), 3 * 8192 * 50);
    let streams = r["streams"].as_array().unwrap();
    let got: Vec<(&str, u64)> = streams.iter().map(|s| (s["path"].as_str().unwrap(), u(s, "bytes"))).collect();
    let want: Vec<(&str, u64)> = paths.iter().map(|p| (p.as_str(), 8192 * 50)).collect();
    assert_eq!(got, want);
}

#[test]
fn raw_over_a_unix_socket() {
    let _turn = traffic();
    let d = TempDir::new("raw-unix");
    let s = d.0.join("sock");
    let ss = s.to_str().unwrap();
    let mut rx = spawn_rx(&["--unix", ss, "-l", "65536", "-n", "40", "--json"]);
    // The socket must be bound before the transmitter connects: wait for the line.
    let mut err = BufReader::new(rx.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains(&format!("listening on {ss}")), "{first}");
    let tx = run(&["ttcp", "-t", "--unix", ss, "-l", "65536", "-n", "40", "--json"]);
    assert_eq!(tx.status.code(), Some(0), "{}", String::from_utf8_lossy(&tx.stderr));
    let st = rx.wait().unwrap();
    let mut out = String::new();
    rx.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(st.success());
    let r = json(&out);
    assert_eq!((u(&r, "bytes"), r["kind"].as_str()), (40 * 65536, Some("unix")));
    assert!(!s.exists(), "the receiver removes the socket it made");
    // A path that exists is not the receiver's to take.
    std::fs::write(&s, b"mine").unwrap();
    expect_fail(&["ttcp", "-r", "--unix", ss], 1, "exists: the receiver makes its own socket there");
    assert_eq!(std::fs::read(&s).unwrap(), b"mine");
}

#[test]
fn raw_bad_input_is_one_line() {
    let d = TempDir::new("raw-badin");
    let f = d.0.join("p");
    mkfifo(&f);
    let fs = f.to_str().unwrap();
    let missing = d.0.join("none");
    let ms = missing.to_str().unwrap();
    expect_fail(&["ttcp", "-t", "--device", ms], 1, "cannot open");
    expect_fail(&["ttcp", "-r", "--device", ms], 1, "No such file");
    expect_fail(&["ttcp", "-r", "--device", fs, "-u"], 2, "-u is for TCP and UDP sockets");
    expect_fail(&["ttcp", "-r", "--device", fs, "-p", "5001"], 2, "-p is for TCP and UDP sockets");
    expect_fail(&["ttcp", "-t", "--device", fs, "127.0.0.1"], 2, "raw mode takes no HOST");
    expect_fail(&["ttcp", "-r", "--device", &format!("{fs},{fs}")], 2, "is given twice");
    expect_fail(&["ttcp", "-r", "--device", fs, "-l", "0"], 2, "-l (read/write size) must be at least 1 byte");
    expect_fail(&["ttcp", "-r", "--device", fs, "-n", "0"], 2, "must be at least 1");
    expect_fail(&["ttcp", "-t", "--no-check", "127.0.0.1"], 2, "--no-check is for raw mode");
    let many: Vec<String> = (0..17).map(|i| format!("{fs}{i}")).collect();
    expect_fail(&["ttcp", "-r", "--device", &many.join(",")], 2, "at most 16 streams at once");
}

fn rows_of<'a>(doc: &'a Value, over: &str) -> Vec<&'a Value> {
    doc["table3_raw"].as_array().expect("table3_raw").iter().filter(|r| r["over"] == over).collect()
}

#[test]
fn bench_table3_over_pipe_and_unix_moves_every_size() {
    let _turn = traffic();
    let dir = TempDir::new("raw-bench");
    let out = run(&[
        "bench",
        "ttcp",
        "--table3",
        "--over",
        "pipe,unix",
        "--loopback",
        "--writes",
        "20",
        "--json",
        "-o",
        dir.path(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("bench ttcp [")).count(), 32, "a progress line per pair:\n{err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    let want: Vec<u64> = (5..=20).map(|p| 1u64 << p).collect();
    for over in ["pipe", "unix"] {
        let rows = rows_of(&doc, over);
        let sizes: Vec<u64> = rows.iter().map(|r| u(r, "buflen")).collect();
        assert_eq!(sizes, want, "{over}: 32 B to 1 MiB in powers of two");
        for r in rows {
            let size = u(r, "buflen");
            assert_eq!(u(r, "bytes"), 20 * size, "{over} -l {size}");
            assert_eq!(u(&r["receive"], "bytes"), 20 * size);
            assert_eq!(u(&r["transmit"], "bytes"), 20 * size);
            assert_eq!(u(&r["transmit"], "calls"), 20, "{over}: one write call per buffer: {r}");
            assert!(u(&r["receive"], "calls") >= 20);
            assert_eq!(r["receive"]["check"], "counter per 8 bytes");
            assert!(r["mb_per_s"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    assert!(
        doc["tcp"].as_array().unwrap().is_empty() && doc["udp"].as_array().unwrap().is_empty(),
        "--over runs Table 3 alone"
    );
    assert!(doc["table3"].as_array().unwrap().is_empty(), "no tcp column asked for");
    assert_eq!(doc["table3_over"], serde_json::json!(["pipe", "unix"]));
    let rows = doc["table3_rows"].as_array().unwrap();
    assert_eq!(rows.len(), 16);
    assert_eq!((u(&rows[0], "buflen"), rows[0]["seed_mb_s"].as_f64()), (32, Some(0.8)));
    assert_eq!((u(&rows[15], "buflen"), rows[15]["seed_mb_s"].as_f64()), (1048576, Some(210.0)));
    assert!(rows[14]["seed_mb_s"].is_null(), "the seed printed no 512 KiB row");
    assert!(rows.iter().all(|r| r["pipe"].as_f64().is_some() && r["unix"].as_f64().is_some()));
    // The text: the seed's layout, a column per transport and the seed's own.
    let text = std::fs::read_to_string(dir.0.join("ttcp.txt")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let h = lines.iter().position(|l| l.starts_with("Read/Write Size (bytes)")).expect(&text);
    assert_eq!(lines[h].split_whitespace().skip(3).collect::<Vec<_>>(), ["pipe", "unix", "seed"], "{text}");
    let first: Vec<&str> = lines[h + 1].split_whitespace().collect();
    assert_eq!((first[0], first[3]), ("32", "0.8"), "{text}");
    assert!(lines[h + 17].starts_with("Table 3: Raw Device Performance"), "{text}");
    let csv = std::fs::read_to_string(dir.0.join("ttcp.csv")).unwrap();
    assert_eq!(csv.lines().filter(|l| l.starts_with("3,pipe,") || l.starts_with("3,unix,")).count(), 32, "{csv}");
}

#[test]
fn bench_several_streams_add_up() {
    let _turn = traffic();
    let child = Command::new(bin())
        .args(["bench", "ttcp", "--over", "pipe,unix", "--devices", "3", "--loopback", "--writes", "5", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(u(&doc, "table3_streams"), 3);
    for over in ["pipe", "unix"] {
        for r in rows_of(&doc, over) {
            let size = u(r, "buflen");
            assert_eq!(u(r, "streams"), 3);
            assert_eq!(u(r, "bytes"), 3 * 5 * size, "{over} -l {size}");
            let each: Vec<u64> = r["receive"]["streams"].as_array().unwrap().iter().map(|s| u(s, "bytes")).collect();
            assert_eq!(each, [5 * size; 3], "{over} -l {size}");
            assert_eq!(r["stream_mb_per_s"].as_array().unwrap().len(), 3);
        }
    }
    let work = std::env::temp_dir().join(format!("wirespeed-ttcp-{pid}"));
    assert!(!work.exists(), "the FIFOs and their directory are removed: {}", work.display());
}

#[test]
fn bench_devices_on_loopback_is_refused_clearly() {
    expect_fail(
        &["bench", "ttcp", "--table3", "--over", "devices", "--loopback"],
        2,
        "--over devices needs partitions (the raw devices join two of them): run as root without --loopback",
    );
    expect_fail(&["bench", "ttcp", "--over", "pipe,tcp", "--devices", "2", "--loopback"], 2, "leave tcp out of --over");
    let out = run(&["bench", "ttcp", "--over", "sctp", "--loopback"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a Table 3 transport"));
    let out = run(&["bench", "ttcp", "--over", "pipe", "--devices", "17", "--loopback"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("16 raw devices"));
}
