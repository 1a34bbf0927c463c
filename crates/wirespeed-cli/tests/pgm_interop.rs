//! `--transport pgm` against OpenPGM 5.3 (the library ZeroMQ's epgm:// uses), through the test
//! peer in `tests/pgm-peer/`: wirespeed as the source with OpenPGM receiving, and OpenPGM as the
//! source with wirespeed's `recv` and `record` receiving. Two network namespaces joined by a
//! veth pair (198.18.77.1/30 <-> 198.18.77.2/30, MTU 9000 so that an 8800-byte message is one
//! packet, the group 239.192.77.1 routed on the veth), nftables in the receiving namespace
//! dropping every 50th ODATA packet so that repairs really happen across implementations.
//!
//! Both ends check every byte: the peer sends and checks wirespeed's `counter` payload (every
//! 64-bit word of message k is k * words + w) and wirespeed's end-of-stream message; wirespeed
//! checks the peer's payload with its default `counter` format.

use crate::common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::Duration;

const ADDR_A: &str = "198.18.77.1";
const ADDR_B: &str = "198.18.77.2";
const GROUP: &str = "239.192.77.1";
/// Messages per run and their size (one ODATA packet each at MTU 9000).
const COUNT: u64 = 20_000;
const SIZE: usize = 8800;
/// nftables drops every EVERY-th ODATA packet (`numgen inc`: the 1st, the 51st, ...).
const EVERY: u64 = 50;

/// The OpenPGM peer, built once per test binary with `tests/pgm-peer/build.sh`.
fn peer_bin() -> &'static str {
    static PEER: OnceLock<Result<String, String>> = OnceLock::new();
    let built = PEER.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        // Built under a name of this process, then renamed: two test runs never see a half-written binary.
        let tmp = dir.join(format!("openpgm-peer.{}", std::process::id()));
        let out = dir.join("openpgm-peer");
        let res = Command::new(root.join("tests/pgm-peer/build.sh")).arg(&tmp).output().map_err(|e| e.to_string())?;
        if !res.status.success() {
            return Err(format!(
                "tests/pgm-peer/build.sh could not build the OpenPGM peer: {} (the PGM interop tests need gcc, pkg-config and libpgm-dev: apt-get install libpgm-dev pkg-config; scripts/test.sh installs them when root)",
                String::from_utf8_lossy(&res.stderr).trim()
            ));
        }
        std::fs::rename(&tmp, &out).map_err(|e| format!("rename {tmp:?} -> {out:?}: {e}"))?;
        Ok(out.to_str().expect("utf-8 path").to_string())
    });
    match built {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// Namespaces A (198.18.77.1) and B (198.18.77.2) joined by a veth pair made inside them (so
/// nothing is ever in the host's namespace); both deleted on drop, the veth with them.
struct Pair {
    a: Netns,
    b: Netns,
}

impl Pair {
    fn new(tag: &str) -> Pair {
        let a = Netns::new(&format!("{tag}a"));
        let b = Netns::new(&format!("{tag}b"));
        a.exec(&["ip", "link", "add", "wsi0", "type", "veth", "peer", "name", "wsi1", "netns", &b.name]);
        for (ns, dev, addr) in [(&a, "wsi0", ADDR_A), (&b, "wsi1", ADDR_B)] {
            ns.exec(&["ip", "addr", "add", &format!("{addr}/30"), "dev", dev]);
            ns.exec(&["ip", "link", "set", dev, "mtu", "9000", "up"]);
            ns.exec(&["ip", "route", "add", "239.192.0.0/16", "dev", dev]);
        }
        Pair { a, b }
    }
}

/// In `ns`, drop every `EVERY`th PGM ODATA packet (type byte 0x04: the fifth byte of the UDP
/// payload, bits 96..103 after the UDP header's start) to UDP port `port`; RDATA (0x05)
/// passes, so every drop can be repaired.
fn drop_odata(ns: &Netns, port: u16) {
    let rules = format!(
        "table inet pgmloss {{\n chain in {{\n  type filter hook input priority raw; policy accept;\n  udp dport {port} @th,96,8 0x04 numgen inc mod {EVERY} 0 counter drop\n }}\n}}\n"
    );
    let mut c = Command::new("ip")
        .args(["netns", "exec", &ns.name, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("run nft");
    // The pipe closes when the handle is dropped at the end of this statement.
    c.stdin.take().expect("stdin piped").write_all(rules.as_bytes()).expect("write to nft");
    assert!(c.wait().expect("nft").success(), "nft -f failed for:\n{rules}");
}

/// Packets the rule of [`drop_odata`] dropped.
fn dropped(ns: &Netns) -> u64 {
    let counts = nft_counters(ns, "pgmloss", "in");
    assert_eq!(counts.len(), 1, "one loss rule: {counts:?}");
    counts[0]
}

/// Packets the host's softnet backlogs dropped so far (all CPUs): a veth hands packets to the
/// peer namespace through this backlog, and a drop there happens before nftables sees them.
fn softnet_dropped() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .expect("/proc/net/softnet_stat")
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).and_then(|h| u64::from_str_radix(h, 16).ok()))
        .sum()
}

/// A running OpenPGM peer; killed on drop (a failed test leaves nothing running).
struct Peer {
    child: Child,
    stderr: Option<std::thread::JoinHandle<String>>,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    fn spawn(ns: &Netns, args: &[&str]) -> Peer {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, peer_bin()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start openpgm-peer");
        let err = child.stderr.take().expect("stderr piped");
        let (tx, lines) = mpsc::channel();
        let stderr = std::thread::spawn(move || {
            let mut all = String::new();
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line.clone());
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        Peer { child, stderr: Some(stderr), lines }
    }

    /// Wait for the peer's receiver to say it has joined (the line it prints before reading).
    fn wait_ready(&self) {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(l) if l.contains("recv ready") => return,
                Ok(_) => {}
                Err(e) => panic!("openpgm-peer recv did not get ready: {e:?}"),
            }
        }
    }

    /// Ends a `send` peer's linger (it prints its report and exits 0 if it sent everything).
    fn interrupt(&self) {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
    }

    /// Exit code, the JSON line on stdout, stderr; killed after `limit`.
    fn finish(mut self, limit: Duration) -> (Option<i32>, Value, String) {
        let t = std::time::Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait openpgm-peer") {
                break st;
            }
            assert!(t.elapsed() < limit, "openpgm-peer did not finish within {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        self.child.stdout.take().expect("stdout piped").read_to_string(&mut out).expect("read peer stdout");
        let err = self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        let line = out.lines().last().unwrap_or_else(|| panic!("openpgm-peer printed nothing; stderr:\n{err}"));
        (status.code(), json(line), err)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The peer's options for this pair's session on `port` from namespace address `addr`.
fn network(addr: &str) -> String {
    format!("{addr};{GROUP}")
}

#[test]
#[ignore = "needs root"]
fn openpgm_receives_a_wirespeed_source_whole_and_in_order_through_repairs() {
    let _t = traffic();
    let pair = Pair::new("pgmio1");
    let port: u16 = 7811;
    let (p, n, sz) = (port.to_string(), COUNT.to_string(), SIZE.to_string());
    let net = network(ADDR_B);
    let peer = Peer::spawn(
        &pair.b,
        &[
            "recv",
            "--network",
            &net,
            "--port",
            &p,
            "--count",
            &n,
            "--format",
            "wirespeed-counter",
            "--expect-end",
            "--timeout-ms",
            "120000",
        ],
    );
    peer.wait_ready();
    drop_odata(&pair.b, port);
    let softnet0 = softnet_dropped();
    let target = format!("{GROUP}:{port}");
    let out = run_prefixed(
        &pair.a.prefix(),
        &[
            "send",
            &target,
            "--transport",
            "pgm",
            "--size",
            &sz,
            "--count",
            &n,
            "--rate",
            "5kpps",
            "--json",
            // The whole stream in the window, as the OpenPGM receiver's (32768): a receiver
            // the scheduler starts late still gets every repair.
            "--pgm-window",
            "32768",
            // The peer is listening before the first datagram; 3 s without a NAK is far
            // beyond the time it takes to ask for the tail, and than a busy host holds it off
            // the CPU.
            "--pgm-quiet",
            "3s",
            "--pgm-linger",
            "60s",
        ],
    );
    assert!(out.status.success(), "wirespeed send: {}", stderr_of(&out));
    let sent = json(&stdout_of(&out));
    let (code, got, err) = peer.finish(Duration::from_secs(120));
    let lost = dropped(&pair.b);
    let softnet = softnet_dropped() - softnet0;
    let sp = &sent["pgm"]["stats"];
    let why = format!("peer: {got}\nsender: {sent}\nnft dropped {lost}\npeer stderr:\n{err}");
    eprintln!("openpgm recv: {got}\nwirespeed send pgm: {}\nnft dropped {lost}", sent["pgm"]);

    // The peer got every message, in order, every word checked, no unrecoverable loss, and
    // wirespeed's end-of-stream message intact, saying 0..19999 were sent.
    assert_eq!(code, Some(0), "{why}");
    assert_eq!((u(&got, "received"), u(&got, "first"), u(&got, "last")), (COUNT, 0, COUNT - 1), "{why}");
    assert_eq!(got["in_order"], true, "{why}");
    assert_eq!((u(&got, "corrupt"), u(&got, "resets"), u(&got, "size_mismatch")), (0, 0, 0), "{why}");
    assert_eq!(u(&got, "bytes"), COUNT * SIZE as u64, "{why}");
    assert_eq!(got["end_ok"], true, "{why}");
    assert_eq!(u(&got["end_of_stream"], "sent"), COUNT, "{why}");

    // 20,001 ODATA (the end message is one too) through a rule dropping the 1st, 51st, ...:
    // 401, unless the host's backlog dropped some before nftables saw them.
    let all_odata = COUNT + 1;
    assert_eq!(u(sp, "odata"), all_odata, "{why}");
    let expect = all_odata.div_ceil(EVERY);
    if softnet == 0 {
        assert_eq!(lost, expect, "{why}");
    } else {
        assert!(lost > 0 && lost <= expect, "{why}");
    }
    // Every one of them was asked for by OpenPGM and repaired by wirespeed: its NAKs were
    // accepted (source NLA, group NLA, ports and GSI all matched), none refused or broken.
    assert!(u(sp, "rdata") >= lost, "{why}");
    assert!(u(sp, "nak_sqns") >= lost && u(sp, "nak_packets") >= 1 && u(sp, "ncf") >= 1, "{why}");
    assert_eq!((u(sp, "nak_refused"), u(sp, "malformed"), u(sp, "nak_out_of_window")), (0, 0, 0), "{why}");
    assert_eq!(sent["pgm"]["nak_address"], format!("{ADDR_A}:{port}"), "the SPMs name the veth's address: {why}");
    // What the peer saw on its wire agrees: it sent the NAKs wirespeed accepted and got the repairs.
    if got["wire_drops"] == 0 {
        assert!(u(&got, "naks_sent") >= u(sp, "nak_packets"), "{why}");
        assert!(u(&got, "rdata_received") >= lost && u(&got, "ncf_received") >= 1, "{why}");
    }
}

/// OpenPGM's `send` of `COUNT` wirespeed counter messages from A, into `wirespeed SUB` (recv or
/// record, with `extra`) in B with every 50th ODATA dropped; returns (wirespeed's JSON, the
/// peer's JSON, ODATA dropped by nftables).
fn openpgm_into(sub: &str, extra: &[&str], port: u16) -> (Value, Value, u64) {
    let pair = Pair::new(if sub == "recv" { "pgmio2" } else { "pgmio3" });
    let (p, n, sz) = (port.to_string(), COUNT.to_string(), SIZE.to_string());
    let listen = format!("{GROUP}:{port}");
    // wirespeed stops itself (and reports) well before the test gives up on it.
    // The whole stream in the window, as the OpenPGM source's (32768).
    let mut args = vec![
        "--transport",
        "pgm",
        "--count",
        &n,
        "--size",
        &sz,
        "--json",
        "--duration",
        "100",
        "--pgm-window",
        "32768",
    ];
    args.extend_from_slice(extra);
    let r = spawn_cmd_with(&pair.b.prefix(), sub, &listen, &args);
    drop_odata(&pair.b, port);
    let net = network(ADDR_A);
    let peer = Peer::spawn(
        &pair.a,
        &[
            "send",
            "--network",
            &net,
            "--port",
            &p,
            "--count",
            &n,
            "--size",
            &sz,
            "--rate",
            "5000",
            "--format",
            "wirespeed-counter",
            // Repairs are answered for up to a minute: a busy host may need them late. The
            // peer is told to stop once wirespeed has everything.
            "--linger-ms",
            "60000",
        ],
    );
    let (code, stdout, stderr) = finish(r, Duration::from_secs(150));
    peer.interrupt();
    let (pcode, sent, perr) = peer.finish(Duration::from_secs(30));
    let lost = dropped(&pair.b);
    assert_eq!(code, Some(0), "wirespeed {sub}: {stderr}\n{stdout}\nopenpgm-peer send: {sent}");
    assert_eq!(pcode, Some(0), "openpgm-peer send: {sent}\n{perr}");
    let rep = json(&stdout);
    eprintln!("openpgm send: {sent}\nwirespeed {sub}: {rep}\nnft dropped {lost}");
    // The peer sent them all, and repaired what was asked (its wire counts).
    assert_eq!(u(&sent, "sent"), COUNT, "{sent}");
    if sent["wire_drops"] == 0 {
        // OpenPGM confirms a NAK it accepts with an NCF: wirespeed's NAKs named the right NLAs,
        // ports and GSI.
        assert!(u(&sent, "naks_received") >= 1 && u(&sent, "ncf_sent") >= 1, "{sent}");
        assert!(u(&sent, "rdata_sent") >= lost, "{sent}\nnft dropped {lost}");
    }
    (rep, sent, lost)
}

/// The ledger and PGM part of a receive report after `openpgm_into`: every datagram, none
/// lost, every drop repaired.
fn assert_repaired(rep: &Value, ledger: &Value, pgm: &Value, lost: u64) {
    let why = format!("{rep}\nnft dropped {lost}");
    assert_eq!((u(ledger, "datagrams"), u(&ledger["total"], "lost")), (COUNT, 0), "{why}");
    assert_eq!(u(&ledger["total"], "invalid"), 0, "every word of every datagram is right: {why}");
    // In order: one stream, 0..19999, nothing late, duplicated or stale (the receiver hands the
    // ledger the session in sequence order, repairs in their place).
    let t = &ledger["total"];
    assert_eq!((u(t, "late"), u(t, "duplicate"), u(t, "stale")), (0, 0, 0), "{why}");
    let streams = ledger["streams"].as_array().expect("streams");
    assert_eq!(streams.len(), 1, "{why}");
    assert_eq!((u(&streams[0], "first_seq"), u(&streams[0], "last_seq")), (0, COUNT - 1), "{why}");
    // 20,000 ODATA through a rule dropping the 1st, 51st, ...: 400. The first one lost is
    // sequence number 0: OpenPGM's opening SPMs told wirespeed where the session starts.
    assert!(lost > 0 && lost <= COUNT.div_ceil(EVERY), "{why}");
    assert_eq!((u(pgm, "unrecoverable"), u(pgm, "pending_at_end")), (0, 0), "{why}");
    assert_eq!((u(pgm, "malformed"), u(pgm, "foreign")), (0, 0), "{why}");
    assert!(u(pgm, "naks_sent") >= lost && u(pgm, "rdata") >= lost && u(pgm, "ncfs") >= 1, "{why}");
    // Repaired = what nftables dropped, exactly; a packet the socket itself dropped (its buffer
    // full on a busy host) is a gap like any other and is repaired too, so then the count may
    // exceed the drops by at most the socket's drops.
    let kernel = recv_kernel_drops(ledger);
    if kernel == 0 {
        assert_eq!(u(pgm, "repaired"), lost, "{why}");
    } else {
        assert!(u(pgm, "repaired") >= lost && u(pgm, "repaired") <= lost + kernel, "{why}");
    }
}

#[test]
#[ignore = "needs root"]
fn wirespeed_recv_gets_an_openpgm_source_whole_through_repairs() {
    let _t = traffic();
    let (rep, _sent, lost) = openpgm_into("recv", &[], 7821);
    assert_eq!(rep["backend"], "pgm", "{rep}");
    assert_repaired(&rep, &rep, &rep["pgm"], lost);
    assert_eq!(u(&rep["pgm"], "sessions"), 1, "{rep}");
}

#[test]
#[ignore = "needs root"]
fn wirespeed_record_writes_an_openpgm_source_whole_and_in_order() {
    let _t = traffic();
    let dir = TempDir::new("pgmio-rec");
    let (rep, _sent, lost) = openpgm_into("record", &["-o", dir.path()], 7831);
    let cap = &rep["capture"];
    assert_repaired(&rep, cap, &cap["pgm"], lost);
    // The file: 20,000 records of 8800 bytes, record i holding words i * 1100 + w, every byte.
    let raw = std::fs::read(dir.only("raw")).expect("the recording");
    assert_eq!(raw.len(), COUNT as usize * SIZE);
    let words = (SIZE / 8) as u64;
    for (i, rec) in raw.chunks(SIZE).enumerate() {
        for (w, word) in rec.chunks(8).enumerate() {
            let v = u64::from_be_bytes(word.try_into().unwrap());
            assert_eq!(v, i as u64 * words + w as u64, "record {i}, word {w}");
        }
    }
    let v = run(&["verify", dir.path(), "--json"]);
    assert!(v.status.success(), "verify: {}", stderr_of(&v));
}
