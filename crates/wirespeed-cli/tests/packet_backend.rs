//! `--backend packet` end to end: the same deterministic traffic received once with recvmmsg
//! and once through the AF_PACKET ring gives the same ledger and the same recorded bytes; the
//! backend refuses clearly without CAP_NET_RAW. Each traffic test runs in a namespace of its
//! own, so that the kernel's counters it reads are its own.

use crate::common;

use common::*;
use serde_json::Value;
use std::time::Duration;

const BACKENDS: [&str; 2] = ["recvmmsg", "packet"];

/// 3000 datagrams a stream, every 100th and 1000..1049 of each left out by the sender.
const SEND: [&str; 10] =
    ["--size", "1024", "--count", "3000", "--rate", "60kpps", "--skip-every", "100", "--skip", "1000..1049"];

fn send_in(ns: &Netns, port: u16, streams: &str) {
    let target = format!("127.0.0.1:{port}");
    let mut args = vec!["send", target.as_str()];
    args.extend_from_slice(&SEND);
    args.extend_from_slice(&["--streams", streams]);
    let out = run_prefixed(&ns.prefix(), &args);
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A stream's id, received, lost and gap ranges.
type StreamLedger = (u64, u64, u64, Vec<(u64, u64)>);

/// Per stream (by stream id, since the source ports differ between runs): received, lost and
/// the gap ranges.
fn ledger(rep: &Value) -> Vec<StreamLedger> {
    let mut v: Vec<_> = rep["streams"]
        .as_array()
        .expect("streams")
        .iter()
        .map(|s| (u(s, "stream"), u(s, "received"), u(s, "lost"), gap_list(s)))
        .collect();
    v.sort();
    v
}

#[test]
#[ignore = "needs root"]
fn the_packet_ledger_matches_recvmmsgs_on_the_same_traffic() {
    let _t = traffic();
    let ns = Netns::new("pkt-ledger");
    let mut ledgers = Vec::new();
    for backend in BACKENDS {
        let r = spawn_recv_with(
            &ns.prefix(),
            "127.0.0.1:0",
            &["--backend", backend, "--size", "1024", "--once", "--json", "--duration", "60", "--rcvbuf", "32M"],
        );
        send_in(&ns, r.port, "2");
        let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{backend}: {stderr}");
        let rep = json(&stdout);
        assert_eq!(rep["backend"], backend);
        assert_eq!(rep["stopped_by"], "end of stream", "{backend}");
        assert_eq!(u(&rep, "truncated"), 0, "{backend}");
        assert_eq!(recv_kernel_drops(&rep), 0, "{backend}: a 32M buffer holds the whole run");
        if backend == "packet" {
            // The UDP stack got every datagram too, and the port-holding socket discarded them:
            // no port-unreachable path, nothing queued.
            let k = &rep["kernel"]["namespace_delta"];
            assert_eq!(u(k, "no_ports"), 0, "{k}");
            assert_eq!(u(k, "rcvbuf_errors"), 0, "{k}");
            assert!(u(k, "in_errors") >= u(&rep["total"], "received"), "{k}");
        }
        ledgers.push((u(&rep["total"], "received"), u(&rep["total"], "lost"), u(&rep, "sender_skipped"), ledger(&rep)));
    }
    assert_eq!(ledgers[0], ledgers[1], "recvmmsg's ledger, then the packet backend's");
    // And both are the exact truth: the sender's skips, and nothing else.
    let lost: Vec<u64> = (0..3000).filter(|s| s % 100 == 99 || (1000..=1049).contains(s)).collect();
    let n = lost.len() as u64;
    let (received, total_lost, skipped, streams) = &ledgers[1];
    assert_eq!((*received, *total_lost, *skipped), (2 * (3000 - n), 2 * n, 2 * n));
    assert_eq!(streams.len(), 2);
    for s in streams {
        assert_eq!((s.1, s.2), (3000 - n, n), "{s:?}");
        assert_eq!(s.3, ranges(&lost), "{s:?}");
    }
}

/// The raw files of a recording, concatenated in name order.
fn recorded_bytes(dir: &std::path::Path) -> Vec<u8> {
    visible_files(dir, ".raw").iter().flat_map(|f| std::fs::read(f).expect("read recording")).collect()
}

#[test]
#[ignore = "needs root"]
fn a_packet_recording_verifies_and_has_recvmmsgs_bytes() {
    let _t = traffic();
    let ns = Netns::new("pkt-rec");
    let mut recordings = Vec::new();
    for backend in BACKENDS {
        let d = TempDir::new(&format!("pkt-rec-{backend}"));
        let r = spawn_cmd_with(
            &ns.prefix(),
            "record",
            "127.0.0.1:0",
            &[
                "--backend",
                backend,
                "--size",
                "1024",
                "-o",
                d.path(),
                "--once",
                "--json",
                "--buffer",
                "16M",
                "--block",
                "1M",
                "--duration",
                "60",
                "--rcvbuf",
                "32M",
            ],
        );
        // One stream: how two streams interleave depends on the sender's timing, and the
        // bytes of two runs are compared.
        send_in(&ns, r.port, "1");
        let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
        assert_eq!(code, Some(0), "{backend}: {stderr}");
        let rep = json(&stdout);
        assert_eq!(rep["capture"]["backend"], backend);
        let out = run(&["verify", d.path(), "--json"]);
        let v = json(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(out.status.code(), Some(0), "{backend}: {v}");
        assert_eq!(u(&v, "problems"), 0, "{backend}");
        let bytes = recorded_bytes(&d.0);
        assert_eq!(bytes.len() as u64, u(&rep["writer"], "records") * 1024, "{backend}");
        recordings.push((u(&rep["capture"]["total"], "lost"), bytes));
    }
    assert!(!recordings[0].1.is_empty());
    assert_eq!(recordings[0].0, recordings[1].0, "the same loss");
    assert!(recordings[0].1 == recordings[1].1, "the packet backend's recording differs from recvmmsg's");
}

#[test]
#[ignore = "needs root"]
fn without_cap_net_raw_the_packet_backend_refuses_in_one_line() {
    // Root otherwise: only the capability is taken away, so the refusal is about it.
    let out = run_prefixed(
        &["setpriv", "--inh-caps=-all", "--bounding-set=-net_raw"],
        &["recv", "127.0.0.1:0", "--backend", "packet", "--duration", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the packet backend needs CAP_NET_RAW: run as root or `setcap cap_net_raw+ep`"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn an_address_on_no_interface_is_refused_before_any_socket() {
    expect_fail(
        &["recv", "192.0.2.77:9000", "--backend", "packet", "--duration", "1"],
        2,
        "is not assigned to any interface here",
    );
}

/// Wait until process `pid` is stopped (state T in /proc/PID/stat).
fn wait_stopped(pid: &str) {
    let stat = format!("/proc/{pid}/stat");
    let t = std::time::Instant::now();
    while !std::fs::read_to_string(&stat).unwrap_or_default().rsplit(')').next().unwrap_or("").starts_with(" T") {
        assert!(t.elapsed() < Duration::from_secs(60), "the receiver did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[ignore = "needs root"]
fn a_full_ring_counts_every_drop_in_the_kernel_figure() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Command, Stdio};
    let _t = traffic();
    let ns = Netns::new("pkt-drop");
    // The smallest ring (4 blocks of 128 KiB) and a receiver stopped while the whole run is
    // sent: the ring holds what fits and the kernel drops the rest, end messages included.
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.name, bin()])
        .args(["recv", "127.0.0.1:0", "--backend", "packet", "--size", "1024", "--rcvbuf", "4K", "--json"])
        .args(["--interval", "0.05", "--interval-json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start recv");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("read stderr");
    let port: u16 = line
        .split("listening on 127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    let pid = child.id().to_string();
    sh(&["kill", "-STOP", &pid]);
    wait_stopped(&pid);
    let target = format!("127.0.0.1:{port}");
    let out = run_prefixed(&ns.prefix(), &["send", &target, "--size", "1024", "--count", "5000", "--rate", "max"]);
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    sh(&["kill", "-CONT", &pid]);
    // Every drop happened while the receiver was stopped, so the first progress line showing
    // any shows them all (the counter is read once the ring is drained and idle).
    loop {
        line.clear();
        assert!(err.read_line(&mut line).expect("read progress") > 0, "recv ended early");
        if json(&line)["socket_drops"].as_u64().is_some_and(|d| d > 0) {
            break;
        }
    }
    sh(&["kill", "-INT", &pid]);
    let mut stdout = String::new();
    child.stdout.take().expect("stdout").read_to_string(&mut stdout).expect("read stdout");
    assert_eq!(child.wait().expect("wait recv").code(), Some(0));
    let rep = json(&stdout);
    let drops = rep["kernel"]["socket_drops_rxq_ovfl"].as_u64().expect("the ring's drop count");
    let received = u(&rep, "datagrams");
    assert!(received > 0 && drops > 0, "{stdout}");
    // Every datagram the UDP stack saw (and the port holder discarded) was either in the ring
    // or in the kernel's drop count.
    assert_eq!(received + drops, u(&rep["kernel"]["namespace_delta"], "in_errors"), "{stdout}");
    assert!(received + drops > 5000, "the data and the end messages: {stdout}");
}

/// A partition's address is held by its lo (a /32, routed over the link), so its datagrams
/// arrive on the link, never on lo: the ring must not be bound to lo then.
#[test]
#[ignore = "needs root"]
fn an_address_held_by_lo_but_reached_over_a_link_is_received() {
    let _t = traffic();
    let a = Netns::new("pkt-lo-a");
    let b = Netns::new("pkt-lo-b");
    let id = std::process::id() % 100_000;
    let (va, vb) = (format!("wspa{id}"), format!("wspb{id}"));
    sh(&["ip", "link", "add", &va, "netns", &a.name, "type", "veth", "peer", "name", &vb, "netns", &b.name]);
    a.exec(&["ip", "addr", "add", "198.18.211.1/30", "dev", &va]);
    b.exec(&["ip", "addr", "add", "198.18.211.2/30", "dev", &vb]);
    b.exec(&["ip", "addr", "add", "198.18.212.2/32", "dev", "lo"]);
    a.exec(&["ip", "link", "set", &va, "up"]);
    b.exec(&["ip", "link", "set", &vb, "up"]);
    a.exec(&["ip", "route", "add", "198.18.212.2/32", "via", "198.18.211.2"]);
    let r = spawn_recv_with(
        &b.prefix(),
        "198.18.212.2:0",
        &["--backend", "packet", "--size", "1024", "--once", "--json", "--duration", "60"],
    );
    let target = format!("198.18.212.2:{}", r.port);
    let out = run_prefixed(&a.prefix(), &["send", &target, "--size", "1024", "--count", "2000", "--rate", "40kpps"]);
    assert!(out.status.success(), "send failed: {}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!((u(&rep, "datagrams"), rep["stopped_by"].as_str()), (2000, Some("end of stream")), "{stdout}");
}
