//! `send --raw IFACE`: frames built by the sender, sent through an AF_PACKET socket, must give
//! the receiver exactly the ledger the UDP sender gives (counts, injected gaps, end of stream),
//! over a veth pair between two namespaces (IPv4 and IPv6) and over loopback; and every refusal
//! is one clear line.

use crate::common;

use common::*;
use serde_json::Value;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static LINK_SEQ: AtomicU32 = AtomicU32::new(0);

/// Two namespaces joined by a veth pair: `a` (the sender's) holds `va`, `b` holds `vb`. The
/// namespaces (and with them the pair) are deleted on drop, also when the test fails.
struct Link {
    a: Netns,
    b: Netns,
    va: String,
    vb: String,
}

impl Link {
    fn new(mtu: u32) -> Link {
        let a = Netns::new("rawa");
        let b = Netns::new("rawb");
        let n = LINK_SEQ.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{n}", std::process::id() % 100000);
        let (va, vb) = (format!("wsxa{tag}"), format!("wsxb{tag}"));
        sh(&["ip", "link", "add", &va, "netns", &a.name, "type", "veth", "peer", "name", &vb, "netns", &b.name]);
        a.exec(&["ip", "addr", "add", "198.18.251.1/24", "dev", &va]);
        b.exec(&["ip", "addr", "add", "198.18.251.2/24", "dev", &vb]);
        a.exec(&["ip", "-6", "addr", "add", "2001:2:0:251::1/64", "dev", &va, "nodad"]);
        b.exec(&["ip", "-6", "addr", "add", "2001:2:0:251::2/64", "dev", &vb, "nodad"]);
        let mtu = mtu.to_string();
        a.exec(&["ip", "link", "set", &va, "mtu", &mtu, "up"]);
        b.exec(&["ip", "link", "set", &vb, "mtu", &mtu, "up"]);
        Link { a, b, va, vb }
    }

    /// `vb`'s hardware address, as `ip link` shows it.
    fn mac_b(&self) -> String {
        let out =
            Command::new("ip").args(["netns", "exec", &self.b.name, "ip", "-o", "link", "show", &self.vb]).output();
        let text = String::from_utf8_lossy(&out.expect("ip link").stdout).to_string();
        text.split("link/ether ").nth(1).and_then(|r| r.split_whitespace().next()).expect("a MAC").to_string()
    }
}

/// Run `wirespeed recv LISTEN --once --json` in `b` and `send TARGET:PORT --raw IFACE ARGS` in
/// `a`; returns the send report and the receive report.
fn raw_run(sender: &[&str], receiver: &[&str], listen: &str, host: &str, send_args: &[&str]) -> (Value, Value) {
    let _t = traffic();
    let r = spawn_recv_with(receiver, listen, &["--once", "--json", "--duration", "60"]);
    let target = format!("{host}:{}", r.port);
    let mut args = vec!["send", target.as_str(), "--json"];
    args.extend_from_slice(send_args);
    let out = run_prefixed(sender, &args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    if !out.status.success() {
        let mut r = r;
        let _ = r.child.kill();
        let _ = r.child.wait();
        panic!("send failed: {err}");
    }
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    (json(&String::from_utf8_lossy(&out.stdout)), json(&stdout))
}

/// The receiver's ledger is the sender's, exactly: per stream `count` sequence numbers, the
/// injected ones (`lost`) lost as the gap ranges they make, the end of stream recognised, and
/// the source port the sender reports for each stream.
fn assert_exact(send: &Value, rep: &Value, count: u64, lost: &[u64]) {
    let streams = rep["streams"].as_array().expect("streams");
    assert_eq!(streams.len(), send["streams"].as_array().unwrap().len(), "{rep}");
    let drops = recv_kernel_drops(rep);
    let mut ports: Vec<u64> = send["streams"].as_array().unwrap().iter().map(|s| u(s, "local_port")).collect();
    ports.sort();
    let mut seen: Vec<u64> = Vec::new();
    for s in streams {
        assert_eq!(u(s, "received") + u(s, "lost"), count, "{s}");
        assert!(s["sender"].is_object(), "end of stream recognised: {s}");
        assert_eq!(u(&s["sender"], "sent"), count - lost.len() as u64, "{s}");
        assert_eq!(u(&s["sender"], "skipped"), lost.len() as u64, "{s}");
        assert_eq!(u(s, "invalid"), 0, "{s}");
        let src = s["source"].as_str().expect("source");
        seen.push(src.rsplit(':').next().unwrap().parse().unwrap());
        if drops == 0 {
            assert_eq!(u(s, "lost"), lost.len() as u64, "{s}");
            assert_eq!(gap_list(s), ranges(lost), "{s}");
        } else {
            // A busy host's kernel may drop some more; it says so in its counters.
            assert!(u(s, "lost") <= lost.len() as u64 + drops, "{s}");
        }
    }
    seen.sort();
    assert_eq!(seen, ports, "each stream arrives from the port the sender reports for it");
    assert!(send["notes"].to_string().contains("transport: raw Ethernet frames on"), "{send}");
}

fn injected(count: u64, every: u64, range: (u64, u64)) -> Vec<u64> {
    (0..count).filter(|&s| s % every == every - 1 || (range.0..=range.1).contains(&s)).collect()
}

#[test]
#[ignore = "needs root"]
fn raw_frames_over_veth_give_the_exact_ledger() {
    let l = Link::new(1500);
    let (send, rep) = raw_run(
        &l.a.prefix(),
        &l.b.prefix(),
        "198.18.251.2:0",
        "198.18.251.2",
        &[
            "--raw",
            &l.va,
            "--streams",
            "2",
            "--count",
            "4000",
            "--rate",
            "20kpps",
            "--size",
            "1080",
            "--skip-every",
            "100",
            "--skip",
            "1000..1009",
        ],
    );
    let lost = injected(4000, 100, (1000, 1009));
    assert_exact(&send, &rep, 4000, &lost);
    assert_eq!(u(&send, "sent"), 2 * (4000 - lost.len() as u64));
    // The neighbour table was asked (the one datagram that resolved it went to the discard
    // port, not to the receiver); --dst-mac skips it and gives the same ledger.
    assert!(send["notes"].to_string().contains("the neighbour table"), "{send}");
    let mac = l.mac_b();
    let (send, rep) = raw_run(
        &l.a.prefix(),
        &l.b.prefix(),
        "198.18.251.2:0",
        "198.18.251.2",
        &["--raw", &l.va, "--dst-mac", &mac, "--count", "2000", "--rate", "20kpps", "--size", "64", "--skip", "7..8"],
    );
    assert_exact(&send, &rep, 2000, &[7, 8]);
    assert!(send["notes"].to_string().contains(&format!("given with --dst-mac: {mac}")), "{send}");
}

#[test]
#[ignore = "needs root"]
fn raw_ipv6_frames_over_veth_give_the_exact_ledger() {
    let l = Link::new(9000);
    let (send, rep) = raw_run(
        &l.a.prefix(),
        &l.b.prefix(),
        "[2001:2:0:251::2]:0",
        "[2001:2:0:251::2]",
        &["--raw", &l.va, "--count", "3000", "--rate", "20kpps", "--size", "8800", "--skip-every", "50"],
    );
    assert_exact(&send, &rep, 3000, &injected(3000, 50, (u64::MAX, 0)));
}

#[test]
#[ignore = "needs root"]
fn raw_frames_on_loopback() {
    // AF_PACKET on lo takes Ethernet frames with all-zero addresses. IPv6 needs nothing more.
    let ns = Netns::new("rawlo");
    let p = ns.prefix();
    let (send, rep) = raw_run(
        &p,
        &p,
        "[::1]:0",
        "[::1]",
        &["--raw", "lo", "--count", "3000", "--rate", "30kpps", "--size", "1024", "--skip", "10..19"],
    );
    assert_exact(&send, &rep, 3000, &(10..=19).collect::<Vec<_>>());
    // IPv4 into lo is dropped as martian unless the namespace allows it: one clear line first.
    let out = run_prefixed(&p, &["send", "127.0.0.1:9", "--raw", "lo", "--count", "10"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("accept_local=1") && err.contains("route_localnet=1"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    ns.exec(&["sysctl", "-qw", "net.ipv4.conf.lo.accept_local=1", "net.ipv4.conf.lo.route_localnet=1"]);
    let (send, rep) = raw_run(
        &p,
        &p,
        "127.0.0.1:0",
        "127.0.0.1",
        &["--raw", "lo", "--count", "3000", "--rate", "30kpps", "--size", "1024", "--skip-every", "7"],
    );
    assert_exact(&send, &rep, 3000, &injected(3000, 7, (u64::MAX, 0)));
}

/// `wirespeed ARGS` in namespace `ns` fails with `code` and one line holding every `needles`.
fn fails_in(prefix: &[&str], args: &[&str], code: i32, needles: &[&str]) {
    let out = run_prefixed(prefix, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: expected '{n}' in:\n{err}");
    }
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line expected:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
#[ignore = "needs root"]
fn raw_refusals_over_veth() {
    let l = Link::new(1500);
    let p = l.a.prefix();
    // Nobody answers for .3: one line saying what to do, after a bounded wait.
    fails_in(
        &p,
        &["send", "198.18.251.3:7000", "--raw", &l.va, "--count", "10", "--size", "1024"],
        1,
        &["cannot find the hardware address of 198.18.251.3", "--dst-mac", "ping"],
    );
    // 1480 + 28 bytes of headers do not fit a 1500-byte MTU.
    fails_in(
        &p,
        &["send", "198.18.251.2:7000", "--raw", &l.va, "--count", "10", "--size", "1480"],
        2,
        &["above the MTU of", "--size 1472"],
    );
    fails_in(
        &p,
        &["send", "198.18.251.2:7000", "--raw", "nosuch0", "--count", "10"],
        2,
        &["no interface named 'nosuch0'"],
    );
}

#[test]
fn raw_needs_cap_net_raw() {
    let args = ["send", "[::1]:9", "--raw", "lo", "--count", "10"];
    let out = if is_root() {
        run_prefixed(
            &["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"],
            &args,
        )
    } else {
        run(&args)
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("needs CAP_NET_RAW"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn raw_flags_are_checked() {
    expect_fail(&["send", "[::1]:9", "--raw", "lo", "--gso", "--count", "1"], 2, "cannot be used with");
    expect_fail(&["send", "[::1]:9", "--dst-mac", "02:00:00:00:00:01", "--count", "1"], 2, "--raw");
    expect_fail(&["send", "[::1]:9", "--raw", "lo", "--dst-mac", "02:00", "--count", "1"], 2, "is not a MAC address");
}
