//! The AF_XDP receive backend (`--backend xdp`) end to end: across a veth pair between two
//! namespaces it keeps the same ledger as recvmmsg for the same deterministic send, it leaves
//! no XDP program behind (even when killed), it refuses an interface that already runs one,
//! and it refuses addresses that name no real interface.

use crate::common;

use common::*;
use std::process::Command;
use std::time::Duration;

/// Two namespaces joined by a veth pair, `198.18.N.1/30` (sender) -> `198.18.N.2/30`, with
/// UDP segmentation offload off at the sending end (as from a wire: generic XDP would see a
/// GSO train as one frame). The namespaces (and with them the pair) go when dropped.
struct Pair {
    tx: Netns,
    rx: Netns,
    rx_dev: String,
    rx_addr: String,
}

impl Pair {
    fn new(tag: &str, net: u8) -> Pair {
        let tx = Netns::new(&format!("{tag}t"));
        let rx = Netns::new(&format!("{tag}r"));
        let id = std::process::id() % 100000;
        let (vt, vr) = (format!("wsxt{tag}{id}"), format!("wsxr{tag}{id}"));
        sh(&["ip", "link", "add", &vt, "netns", &tx.name, "type", "veth", "peer", "name", &vr, "netns", &rx.name]);
        tx.exec(&["ip", "addr", "add", &format!("198.18.{net}.1/30"), "dev", &vt]);
        rx.exec(&["ip", "addr", "add", &format!("198.18.{net}.2/30"), "dev", &vr]);
        tx.exec(&["ip", "link", "set", &vt, "up"]);
        rx.exec(&["ip", "link", "set", &vr, "up"]);
        tx.exec(&["ethtool", "-K", &vt, "tx-udp-segmentation", "off"]);
        Pair { tx, rx, rx_dev: vr, rx_addr: format!("198.18.{net}.2") }
    }

    /// `ip link show` of the receiving veth.
    fn link_show(&self) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.rx.name, "link", "show", &self.rx_dev])
            .output()
            .expect("ip link show");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Receive one deterministic send with `backend`; the report's JSON.
fn ledger_of(p: &Pair, backend: &str, port: u16) -> serde_json::Value {
    let listen = format!("{}:{port}", p.rx_addr);
    let r = spawn_cmd_with(
        &p.rx.prefix(),
        "recv",
        &listen,
        &["--backend", backend, "--once", "--json", "--duration", "120"],
    );
    assert_eq!(r.port, port);
    // 5000 datagrams fit both the XDP RX ring and the socket buffer whole: nothing is lost to
    // a receiver that the machine's load delays, only the skipped numbers.
    let out = run_prefixed(
        &p.tx.prefix(),
        &[
            "send",
            &listen,
            "--size",
            "1080",
            "--count",
            "5000",
            "--rate",
            "20kpps",
            "--skip",
            "100..149",
            "--skip",
            "3000..3000",
            "--skip",
            "4990..4999",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(120));
    assert_eq!(code, Some(0), "{backend}: {stderr}");
    json(&stdout)
}

#[test]
#[ignore = "needs root"]
fn xdp_keeps_the_same_ledger_as_recvmmsg_and_detaches() {
    let _t = traffic();
    let p = Pair::new("l", 152);
    let xdp = ledger_of(&p, "xdp", 7148);
    assert!(!p.link_show().contains("xdp"), "program left attached:\n{}", p.link_show());
    let mmsg = ledger_of(&p, "recvmmsg", 7148);
    for rep in [&xdp, &mmsg] {
        assert_eq!(rep["stopped_by"], "end of stream", "{rep}");
        assert_eq!(u(&rep["total"], "received"), 5000 - 50 - 1 - 10, "{rep}");
        assert_eq!(u(&rep["total"], "lost"), 61, "{rep}");
        assert_eq!(u(&rep["total"], "invalid"), 0, "{rep}");
        assert_eq!(u(&rep["total"], "duplicate"), 0, "{rep}");
        assert_eq!(rep["streams"].as_array().expect("streams").len(), 1, "{rep}");
        assert_eq!(gap_list(&rep["streams"][0]), vec![(100, 149), (3000, 3000), (4990, 4999)], "{rep}");
    }
    assert_eq!(xdp["backend"], "xdp");
    assert_eq!(mmsg["backend"], "recvmmsg");
    assert_eq!(xdp["total"], mmsg["total"]);
    assert_eq!(xdp["streams"][0]["gaps"], mmsg["streams"][0]["gaps"]);
    assert_eq!(xdp["streams_without_end"], mmsg["streams_without_end"]);
    assert_eq!(u(&xdp["kernel"], "socket_drops_rxq_ovfl"), 0, "{}", xdp["kernel"]);
    let notes = xdp["notes"].to_string();
    assert!(notes.contains("bypass netfilter and the kernel's UDP checksum check"), "{notes}");
}

#[test]
#[ignore = "needs root"]
fn an_attached_program_is_refused_and_a_killed_receiver_leaves_none() {
    let p = Pair::new("b", 153);
    let listen = format!("{}:7149", p.rx_addr);
    let mut first = spawn_cmd_with(&p.rx.prefix(), "recv", &listen, &["--backend", "xdp", "--duration", "120"]);
    assert!(p.link_show().contains("xdpgeneric"), "{}", p.link_show());
    let out = run_prefixed(&p.rx.prefix(), &["recv", &listen, "--backend", "xdp", "--duration", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("already has an XDP program attached"), "{err}");
    assert!(err.contains("does not replace what it did not create"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // The first receiver's program is still there, untouched by the refused one...
    assert!(p.link_show().contains("xdpgeneric"), "{}", p.link_show());
    // ...and goes with it even when it is killed outright: the BPF link closes with the process.
    first.child.kill().expect("kill recv");
    first.child.wait().expect("wait recv");
    let mut shown = p.link_show();
    for _ in 0..100 {
        if !shown.contains("xdp") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        shown = p.link_show();
    }
    assert!(!shown.contains("xdp"), "program left attached after SIGKILL:\n{shown}");
}

#[test]
fn addresses_without_a_real_interface_are_refused() {
    expect_fail(&["recv", "127.0.0.1:7148", "--backend", "xdp"], 2, "XDP needs a real interface");
    expect_fail(&["recv", "0.0.0.0:7148", "--backend", "xdp"], 2, "listen on that interface's address");
    expect_fail(&["recv", "239.1.2.3:7148", "--backend", "xdp"], 2, "multicast");
}
