//! Security of the far end: `reflect` answers only wirespeed probes from clients (never itself,
//! another reflector's reply, a low port, a source outside --allow, or a client beyond its
//! cap), and `ping` never counts a forged or stray datagram as a reply or a latency sample.
//!
//! Synchronisation is by round trip, never by sleeping: after the datagrams under test, one
//! real probe is answered, and the reflector handles its socket's queue in order, so everything
//! sent before it has been decided when its reply is back. The order in that queue is the order
//! of sending only if every datagram passes through one CPU's loopback backlog, so the sending
//! thread and the reflector are pinned to one CPU.

use crate::common;
use common::*;
use serde_json::Value;
use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

/// Every reflector is stopped by SIGTERM once its test has synchronised; this bound only ends
/// one that a failed assertion left behind.
const LIFE: &str = "120s";

/// A 64-byte wirespeed probe (`WSRT`), or a reflector's reply (`WSRR`) with `reply`.
fn probe(session: u32, seq: u64, sent_ns: u64, reply: bool) -> Vec<u8> {
    let mut b: Vec<u8> = (0..64u32).map(|i| i as u8).collect();
    b[..4].copy_from_slice(if reply { b"WSRR" } else { b"WSRT" });
    b[4..8].copy_from_slice(&session.to_be_bytes());
    b[8..16].copy_from_slice(&seq.to_be_bytes());
    b[16..24].copy_from_slice(&sent_ns.to_be_bytes());
    b
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The first CPU this process may run on.
fn first_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list");
    list.trim().split([',', '-']).next().expect("a CPU").to_string()
}

/// Pin the calling thread to [`first_cpu`] (with taskset: the tests link no libc).
fn pin_this_thread() {
    let me = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    let tid = me.file_name().expect("thread id").to_string_lossy().to_string();
    sh(&["taskset", "-p", "-c", &first_cpu(), &tid]);
}

/// Start a reflector pinned to [`first_cpu`] (so its replies also leave in order).
fn reflector(prefix: &[&str], listen: &str, args: &[&str]) -> Receiver {
    let cpu = first_cpu();
    let mut all = vec!["--json", "--duration", LIFE, "--cpu", &cpu];
    all.extend_from_slice(args);
    spawn_cmd_with(prefix, "reflect", listen, &all)
}

/// A client socket on `addr` with a receive timeout (a missing reply fails, never hangs).
fn client(addr: &str) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s
}

/// Send a probe from `s` and wait for its reply: the round trip that proves that the reflector
/// has decided about everything sent before. Returns the reply.
fn round_trip(s: &UdpSocket, target: SocketAddr, seq: u64) -> Vec<u8> {
    s.send_to(&probe(0x5157_0001, seq, 1, false), target).expect("send probe");
    let mut buf = [0u8; 2048];
    let (n, from) = s.recv_from(&mut buf).expect("the reflector answers a probe");
    assert_eq!(from, target);
    buf[..n].to_vec()
}

/// Stop a reflector with SIGTERM and read its JSON report.
fn stop_reflector(r: Receiver) -> Value {
    let st = Command::new("kill").args(["-TERM", &r.child.id().to_string()]).status().expect("kill");
    assert!(st.success());
    let (code, stdout, stderr) = finish(r, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{stderr}");
    json(&stdout)
}

fn refused(refl: &Value, why: &str) -> u64 {
    u(&refl["refused"], why)
}

/// Inside `ns`, on [`first_cpu`]: send each (source address, source port, payload) to
/// `dst:dport` with that forged source through a raw socket (root), then, as a probe from a
/// real socket, each of `sync` in turn, waiting for its answer: when the last answer is back,
/// every reflector asked has decided about everything sent before.
fn spoof_then_sync(ns: &Netns, forged: &[(&str, u16, &str, u16, Vec<u8>)], sync: &[u16]) {
    const SCRIPT: &str = r#"
import os, socket, struct, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff
raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
args = sys.argv[1:]
while args[0] != '--':
    src, sport, dst, dport, payload = args[0], int(args[1]), args[2], int(args[3]), bytes.fromhex(args[4])
    args = args[5:]
    ulen = 8 + len(payload)
    pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack('!BBH', 0, 17, ulen)
    c = csum(pseudo + struct.pack('!HHHH', sport, dport, ulen, 0) + payload) or 0xffff
    udp = struct.pack('!HHHH', sport, dport, ulen, c)
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + ulen, 1, 0, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    raw.sendto(ip + udp + payload, (dst, 0))
probe = bytes.fromhex(args[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('127.0.0.1', 0))
s.settimeout(10)
for port in args[2:]:
    s.sendto(probe, ('127.0.0.1', int(port)))
    data, peer = s.recvfrom(2048)
    assert peer[1] == int(port) and data[4:] == probe[4:], (peer, data[:24])
"#;
    let mut cmd: Vec<String> = vec!["python3".into(), "-c".into(), SCRIPT.into()];
    for (src, sport, dst, dport, payload) in forged {
        cmd.extend([src.to_string(), sport.to_string(), dst.to_string(), dport.to_string(), hex(payload)]);
    }
    cmd.extend(["--".into(), hex(&probe(0x5157_0002, 0, 1, false))]);
    cmd.extend(sync.iter().map(|p| p.to_string()));
    let cmd: Vec<&str> = cmd.iter().map(|s| s.as_str()).collect();
    ns.exec(&cmd);
}

#[test]
#[ignore = "needs root"]
fn a_datagram_forged_from_the_reflectors_own_port_is_never_answered() {
    let _turn = traffic();
    // Listening on every address of a namespace of its own: a datagram forged from its own
    // address and port, and one from another of its addresses with its port, would each make
    // it answer itself forever (520,000 times in 3 s before this fix).
    let ns = Netns::new("self");
    let r = reflector(&ns.prefix(), "0.0.0.0:0", &[]);
    let p = r.port;
    let payload = probe(7, 0, 1, false);
    spoof_then_sync(
        &ns,
        &[("127.0.0.1", p, "127.0.0.1", p, payload.clone()), ("127.0.0.2", p, "127.0.0.1", p, payload)],
        &[p],
    );
    let refl = stop_reflector(r);
    assert_eq!((u(&refl, "received"), u(&refl, "reflected")), (3, 1), "{refl}");
    assert_eq!((refused(&refl, "own_port"), refused(&refl, "total")), (2, 2), "{refl}");
    let clients = refl["clients"].as_array().expect("clients");
    assert_eq!(clients.len(), 1, "only the true client was answered: {refl}");
    assert!(!clients[0]["addr"].as_str().unwrap().ends_with(&format!(":{p}")), "{refl}");
}

#[test]
#[ignore = "needs root"]
fn two_reflectors_joined_by_a_forged_datagram_exchange_one_message() {
    let _turn = traffic();
    // A probe forged from reflector B to reflector A: A answers B once, with a reply, and B
    // refuses the reply (before this fix the two echoed it between them forever).
    let ns = Netns::new("pair");
    let a = reflector(&ns.prefix(), "127.0.0.1:0", &[]);
    let b = reflector(&ns.prefix(), "127.0.0.1:0", &[]);
    // A answers the sync probe after its answer to B; B answers it after A's answer arrived.
    spoof_then_sync(&ns, &[("127.0.0.1", b.port, "127.0.0.1", a.port, probe(7, 0, 1, false))], &[a.port, b.port]);
    let (ra, rb) = (stop_reflector(a), stop_reflector(b));
    assert_eq!((u(&ra, "received"), u(&ra, "reflected")), (2, 2), "{ra}");
    assert_eq!((u(&rb, "received"), u(&rb, "reflected")), (2, 1), "{rb}");
    assert_eq!(refused(&ra, "total"), 0, "{ra}");
    assert_eq!((refused(&rb, "reply"), refused(&rb, "total")), (1, 1), "{rb}");
}

#[test]
fn replies_and_non_probes_are_not_answered() {
    let _turn = traffic();
    pin_this_thread();
    let r = reflector(&[], "127.0.0.1:0", &[]);
    let target: SocketAddr = format!("127.0.0.1:{}", r.port).parse().unwrap();
    let s = client("127.0.0.1:0");
    s.send_to(&probe(9, 3, 1, true), target).expect("send a reply-shaped datagram");
    s.send_to(b"any datagram that is not a wirespeed probe", target).expect("send junk");
    s.send_to(&probe(9, 3, 1, false)[..23], target).expect("send a probe cut short");
    // The first thing to come back is the answer to the real probe, marked as a reply.
    let reply = round_trip(&s, target, 42);
    assert_eq!(&reply[..4], b"WSRR");
    assert_eq!(reply[8..16], 42u64.to_be_bytes());
    assert_eq!(reply[4..], probe(0x5157_0001, 42, 1, false)[4..], "the rest goes back unchanged");
    let refl = stop_reflector(r);
    assert_eq!((u(&refl, "received"), u(&refl, "reflected")), (4, 1), "{refl}");
    assert_eq!((refused(&refl, "reply"), refused(&refl, "not_probe"), refused(&refl, "total")), (1, 2, 3), "{refl}");
}

#[test]
fn allow_refuses_other_sources_and_counts_them() {
    let _turn = traffic();
    pin_this_thread();
    let r = reflector(&[], "127.0.0.1:0", &["--allow", "127.0.0.2/32", "--allow", "::1"]);
    let target: SocketAddr = format!("127.0.0.1:{}", r.port).parse().unwrap();
    let outsider = client("127.0.0.1:0");
    for seq in 0..5 {
        outsider.send_to(&probe(1, seq, 1, false), target).expect("send");
    }
    let allowed = client("127.0.0.2:0");
    round_trip(&allowed, target, 0);
    let refl = stop_reflector(r);
    assert_eq!((u(&refl, "received"), u(&refl, "reflected")), (6, 1), "{refl}");
    assert_eq!((refused(&refl, "not_allowed"), refused(&refl, "total")), (5, 5), "{refl}");
    assert_eq!(refl["policy"]["allow"], serde_json::json!(["127.0.0.2/32", "::1/128"]), "{refl}");
    assert_eq!(refl["clients"][0]["addr"].as_str().unwrap().split(':').next(), Some("127.0.0.2"), "{refl}");
}

/// A UDP socket on 127.0.0.1 with a port below 1024 (root), the first free one from 1000 down.
fn low_port_client() -> UdpSocket {
    let s = (900..1000)
        .rev()
        .find_map(|p| UdpSocket::bind(("127.0.0.1", p)).ok())
        .expect("a free port below 1024 (needs root)");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s
}

#[test]
#[ignore = "needs root"]
fn low_source_ports_are_refused_unless_allowed() {
    let _turn = traffic();
    pin_this_thread();
    let low = low_port_client();
    for extra in [&[][..], &["--allow-low-ports"][..]] {
        let r = reflector(&[], "127.0.0.1:0", extra);
        let target: SocketAddr = format!("127.0.0.1:{}", r.port).parse().unwrap();
        if extra.is_empty() {
            low.send_to(&probe(1, 0, 1, false), target).expect("send from a low port");
            round_trip(&client("127.0.0.1:0"), target, 0);
            let refl = stop_reflector(r);
            assert_eq!((u(&refl, "received"), u(&refl, "reflected")), (2, 1), "{refl}");
            assert_eq!((refused(&refl, "low_port"), refused(&refl, "total")), (1, 1), "{refl}");
        } else {
            round_trip(&low, target, 0);
            let refl = stop_reflector(r);
            assert_eq!((u(&refl, "reflected"), refused(&refl, "total")), (1, 0), "{refl}");
        }
    }
}

#[test]
fn the_per_client_cap_refuses_exactly_what_exceeds_the_burst() {
    let _turn = traffic();
    // A bucket of 5 that refills one token per 1000 s: of 20 probes sent at once, exactly 5
    // are answered and 15 refused, however slowly the machine runs. Another client has a
    // bucket of its own.
    pin_this_thread();
    let r = reflector(&[], "127.0.0.1:0", &["--max-pps-per-client", "0.001", "--client-burst", "5"]);
    let target: SocketAddr = format!("127.0.0.1:{}", r.port).parse().unwrap();
    let busy = client("127.0.0.1:0");
    for seq in 0..20 {
        busy.send_to(&probe(1, seq, 1, false), target).expect("send");
    }
    round_trip(&client("127.0.0.2:0"), target, 0);
    let mut buf = [0u8; 2048];
    for seq in 0..5u64 {
        let n = busy.recv(&mut buf).expect("the first five are answered");
        assert_eq!((&buf[..4], &buf[8..16]), (&b"WSRR"[..], &seq.to_be_bytes()[..]), "{n} bytes");
    }
    let refl = stop_reflector(r);
    assert_eq!((u(&refl, "received"), u(&refl, "reflected")), (21, 6), "{refl}");
    assert_eq!((refused(&refl, "rate_capped"), refused(&refl, "total")), (15, 15), "{refl}");
    assert_eq!(u(&refl["policy"], "client_burst"), 5, "{refl}");
}

#[test]
fn ping_counts_forged_replies_as_strays_never_as_samples() {
    let _turn = traffic();
    // An echo that, before each true echo, sends three forgeries from the same address and
    // port: the probe's session with a sequence number never sent, the probe itself with a
    // send time 1 ns earlier (a forged, longer round trip), and another session's reply.
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let target = format!("127.0.0.1:{}", sock.local_addr().expect("addr").port());
    // The echo runs until the test sends it an empty datagram after the ping; the timeout only
    // guards against a hang (a short one would end it before a slow ping starts).
    sock.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout");
    // Pinned, so that the forgeries reach ping before the true echo: ping stops at its last
    // reply and must have read every forgery by then.
    let echo = std::thread::spawn(move || {
        pin_this_thread();
        let mut buf = [0u8; 2048];
        let mut n = 0u64;
        while let Ok((len, from)) = sock.recv_from(&mut buf) {
            if len == 0 {
                break;
            }
            n += 1;
            let p = &buf[..len];
            let mut never_sent = p.to_vec();
            never_sent[8..16].copy_from_slice(&(1u64 << 40).to_be_bytes());
            let mut earlier = p.to_vec();
            let sent = u64::from_be_bytes(p[16..24].try_into().unwrap());
            earlier[16..24].copy_from_slice(&(sent - 1).to_be_bytes());
            let mut other_run = p.to_vec();
            other_run[4] ^= 0xff;
            for d in [&never_sent, &earlier, &other_run, &p.to_vec()] {
                sock.send_to(d, from).expect("echo");
            }
        }
        n
    });
    // A long linger: a late reply is waited for, not counted lost (the run ends at the last).
    let before = udp_rcvbuf_errors();
    let out = run(&["ping", &target, "--pps", "1000", "--count", "200", "--linger", "20s", "--json", "--no-files"]);
    let kernel = udp_rcvbuf_errors() - before;
    UdpSocket::bind("127.0.0.1:0").expect("bind").send_to(&[], &target).expect("stop the echo");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    let run0 = &doc["runs"][0];
    let c = &run0["replies"];
    assert_eq!((u(c, "duplicate"), u(c, "invalid")), (0, 0), "{run0}");
    // Not one forgery is a sample, whatever the host's load: the round trips are the true replies.
    assert_eq!(u(&run0["rtt"], "count"), u(c, "received"), "{run0}");
    assert_eq!(u(c, "received") + u(c, "lost"), 200, "{run0}");
    let echoed = echo.join().expect("echo thread");
    if kernel == 0 {
        assert_eq!((u(c, "received"), u(c, "lost")), (200, 0), "{run0}");
        assert_eq!(u(run0, "strays"), 600, "{run0}");
        assert_eq!(echoed, 200);
    } else {
        // On a busy host a full socket buffer may drop a probe or a reply: the loss and the
        // missing forgeries are no more than the kernel dropped.
        assert!(u(c, "lost") <= kernel, "{} lost, {kernel} dropped by the kernel: {run0}", u(c, "lost"));
        assert!(600 - u(run0, "strays").min(600) <= 3 * kernel, "{run0}");
    }
}

#[test]
fn bad_policy_options_get_one_line_and_exit_2() {
    for (args, needle) in [
        (&["reflect", "0", "--allow", "nonsense"][..], "--allow 'nonsense' is not a network"),
        (&["reflect", "0", "--allow", "10.0.0.1/8"][..], "did you mean 10.0.0.0/8"),
        (&["reflect", "0", "--allow", "10.0.0.0/33"][..], "is not a network"),
        (&["reflect", "0", "--max-pps-per-client", "fast"][..], "'fast' is not a probe rate"),
        (&["reflect", "0", "--max-pps-per-client=-5"][..], "'-5' is not a probe rate"),
        (&["reflect", "0", "--client-burst", "0"][..], "'0' for '--client-burst"),
        (&["reflect", "0", "--client-burst", "many"][..], "--client-burst"),
    ] {
        expect_fail(args, 2, needle);
    }
}
