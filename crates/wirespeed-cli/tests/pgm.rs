//! `--transport pgm`: PGM sessions end to end, with loss injected by nftables where the tests
//! have a namespace of their own; malformed and forged packets; the refusals.

use crate::common;

use common::*;
use serde_json::Value;
use std::net::UdpSocket;
use std::time::Duration;
use wirespeed::pgm::packet;
use wirespeed::pgm::Tsi;

/// The input rule dropping every `every`th ODATA packet (PGM type byte 0x04, the fifth byte of
/// the UDP payload) to UDP port `port`; RDATA (0x05) passes, so every drop can be repaired.
fn drop_odata(ns: &Netns, port: u16, every: u32) {
    ns.exec(&["nft", "add", "table", "inet", "pgmloss"]);
    ns.exec(&["nft", "add", "chain", "inet", "pgmloss", "in", "{ type filter hook input priority 0 ; }"]);
    let (p, e) = (port.to_string(), every.to_string());
    ns.exec(&[
        "nft", "add", "rule", "inet", "pgmloss", "in", "udp", "dport", &p, "@th,96,8", "0x04", "numgen", "inc", "mod",
        &e, "0", "counter", "drop",
    ]);
}

/// Packets the rule of [`drop_odata`] dropped.
fn dropped(ns: &Netns) -> u64 {
    let counts = nft_counters(ns, "pgmloss", "in");
    assert_eq!(counts.len(), 1, "one loss rule: {counts:?}");
    counts[0]
}

fn pgm_of(doc: &Value) -> &Value {
    &doc["pgm"]
}

/// A receiver on `listen` (port 0) and a sender of `count` datagrams to it, both
/// `--transport pgm` (with `extra` for both), in `prefix`; returns (recv JSON, send JSON).
fn session(
    prefix: &[&str],
    sub: &str,
    listen_ip: &str,
    count: u64,
    recv_extra: &[&str],
    send_extra: &[&str],
) -> (Value, Value) {
    // Windows that hold the whole stream (both ends): a receiver the scheduler starts reading
    // late still has every gap repaired, however far behind it fell.
    let mut rargs = vec!["--transport", "pgm", "--once", "--json", "--duration", "120", "--pgm-window", "32768"];
    rargs.extend_from_slice(recv_extra);
    let r = spawn_cmd_with(prefix, sub, &format!("{listen_ip}:0"), &rargs);
    let target = format!("{listen_ip}:{}", r.port);
    let n = count.to_string();
    let mut sargs = vec![
        "send",
        target.as_str(),
        "--transport",
        "pgm",
        "--count",
        &n,
        "--rate",
        "20kpps",
        "--json",
        "--pgm-window",
        "32768",
    ];
    sargs.extend_from_slice(send_extra);
    let out = if prefix.is_empty() { run(&sargs) } else { run_prefixed(prefix, &sargs) };
    assert!(out.status.success(), "send: {}", String::from_utf8_lossy(&out.stderr));
    let sent = json(&String::from_utf8_lossy(&out.stdout));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{sub}: {stderr}\n{stdout}");
    (json(&stdout), sent)
}

#[test]
fn a_clean_unicast_session_delivers_everything_once_without_repairs() {
    let _t = traffic();
    // 127.0.0.2 for the receiver: the sender's NAK socket binds 127.0.0.1 at the same port.
    let (rep, sent) = session(&[], "recv", "127.0.0.2", 20_000, &[], &[]);
    assert_eq!(u(&rep, "datagrams"), 20_000, "{rep}");
    assert_eq!(u(&rep["total"], "lost"), 0);
    assert_eq!(rep["backend"], "pgm");
    let p = pgm_of(&rep);
    // 20,000 datagrams and the end-of-stream message, all original data; a busy host's full
    // socket buffer is the only loss on loopback, and whatever it dropped was repaired.
    let kernel = recv_kernel_drops(&rep);
    assert_eq!(u(p, "unrecoverable"), 0, "{p}");
    assert!(u(p, "repaired") <= kernel, "repairs only for what the kernel dropped ({kernel}): {p}");
    // Each sequence number once: as original data, or (dropped by a full buffer) as a repair.
    assert_eq!(u(p, "odata") + u(p, "repaired"), 20_001, "{p}");
    assert_eq!(sent["transport"], "pgm");
    let sp = &sent["pgm"]["stats"];
    assert_eq!(u(sp, "odata"), 20_001, "{sent}");
    if kernel == 0 {
        assert_eq!(
            (u(p, "rdata"), u(p, "naks_sent"), u(sp, "rdata"), u(sp, "nak_packets")),
            (0, 0, 0, 0),
            "{p} {sent}"
        );
    }
    assert!(u(sp, "spm") >= 1, "{sp}");
}

#[test]
#[ignore = "needs root"]
fn loss_on_the_path_is_repaired_exactly() {
    let _turn = traffic();
    // Every 50th ODATA packet dropped at the receiver's input: each one is NAKed and repaired,
    // and the ledger counts no loss.
    let ns = Netns::new("pgmfix");
    // Windows that hold the whole stream (both ends): a receiver the scheduler starts reading
    // late still has every gap repaired.
    let r = spawn_cmd_with(
        &ns.prefix(),
        "recv",
        "127.0.0.2:0",
        &["--transport", "pgm", "--once", "--json", "--pgm-window", "32768"],
    );
    drop_odata(&ns, r.port, 50);
    let target = format!("127.0.0.2:{}", r.port);
    let out = run_prefixed(
        &ns.prefix(),
        &[
            "send",
            &target,
            "--transport",
            "pgm",
            "--count",
            "20000",
            "--rate",
            "20kpps",
            "--json",
            "--pgm-window",
            "32768",
            // Far longer than the receiver takes to NAK the tail (tens of ms), and than a busy
            // host holds it off the CPU.
            "--pgm-quiet",
            "3s",
            "--pgm-linger",
            "60s",
        ],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let sent = json(&stdout_of(&out));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let lost = dropped(&ns);
    // 20,001 ODATA (the end message included) through a rule dropping the 1st, 51st, ...
    assert_eq!(lost, 401, "nft dropped 1 of every 50 of 20,001");
    assert_eq!((u(&rep, "datagrams"), u(&rep["total"], "lost")), (20_000, 0), "{rep}");
    let p = pgm_of(&rep);
    // The first packet dropped too: the source's opening SPM told the receiver where the
    // session starts, so sequence number 0 is a gap like any other. A busy host's full socket
    // buffer may drop more, and those are repaired as well.
    let kernel = recv_kernel_drops(&rep);
    assert!(u(p, "repaired") >= lost && u(p, "repaired") <= lost + kernel, "{p}");
    assert_eq!(u(p, "unrecoverable"), 0, "{p}");
    assert!(u(p, "naks_sent") >= lost && u(p, "rdata") >= lost, "{p}");
    let sp = &sent["pgm"]["stats"];
    assert!(u(sp, "rdata") >= lost && u(sp, "ncf") >= 1, "{sp}");
    assert!(sent["pgm"]["repair_share_percent"].as_f64().unwrap() > 1.9, "{sent}");
}

#[test]
#[ignore = "needs root"]
fn a_multicast_session_is_repaired_and_recorded_in_order() {
    let _turn = traffic();
    // A group on the namespace's loopback, every 20th ODATA dropped (5 %): the recording holds
    // every datagram, in sequence order, and verify agrees with the sidecar.
    let ns = Netns::new("pgmmc");
    ns.exec(&["ip", "link", "set", "lo", "multicast", "on"]);
    ns.exec(&["ip", "route", "add", "239.0.0.0/8", "dev", "lo"]);
    let dir = TempDir::new("pgmrec");
    let r = spawn_cmd_with(
        &ns.prefix(),
        "record",
        "239.192.7.7:0",
        &["--transport", "pgm", "--once", "--json", "--size", "1080", "-o", dir.path(), "--pgm-window", "16384"],
    );
    drop_odata(&ns, r.port, 20);
    let target = format!("239.192.7.7:{}", r.port);
    let out = run_prefixed(
        &ns.prefix(),
        &[
            "send",
            &target,
            "--transport",
            "pgm",
            "--size",
            "1080",
            "--count",
            "10000",
            "--rate",
            "20kpps",
            "--json",
            // Windows that hold the whole stream (both ends): see above.
            "--pgm-window",
            "16384",
            // A recorder faulting its ring in may start reading late: stay until it has asked.
            "--pgm-quiet",
            "5s",
            "--pgm-linger",
            "60s",
        ],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let lost = dropped(&ns);
    assert_eq!(lost, 501, "1 of every 20 of 10,001");
    assert_eq!((u(&rep["capture"], "datagrams"), u(&rep["capture"]["total"], "lost")), (10_000, 0), "{rep}");
    let repaired = u(&rep["capture"]["pgm"], "repaired");
    let kernel = recv_kernel_drops(&rep["capture"]);
    assert!(repaired >= lost && repaired <= lost + kernel, "{rep}");
    // The file: 10,000 records of 1080 bytes, counters 0, 1, 2, ... in order.
    let raw = std::fs::read(dir.only("raw")).expect("the recording");
    assert_eq!(raw.len(), 10_000 * 1080);
    let words = 1080 / 8;
    for (i, rec) in raw.chunks(1080).enumerate() {
        let first = u64::from_be_bytes(rec[..8].try_into().unwrap());
        assert_eq!(first, i as u64 * words, "record {i} out of order");
    }
    let v = run(&["verify", dir.path(), "--json"]);
    assert!(v.status.success(), "{}", stderr_of(&v));
}

/// A socket on `from` sending PGM packets to the receiver at `to`.
fn forger(from: &str, to: &str) -> impl Fn(&[u8]) {
    let s = UdpSocket::bind(format!("{from}:0")).expect("bind forger");
    let to: std::net::SocketAddr = to.parse().unwrap();
    move |p: &[u8]| {
        s.send_to(p, to).expect("send");
    }
}

#[test]
fn malformed_and_forged_packets_are_counted_never_believed() {
    let _t = traffic();
    let r = spawn_cmd_with(
        &[],
        "recv",
        "127.0.0.2:0",
        &["--transport", "pgm", "--json", "--duration", "3", "--size", "64"],
    );
    let to = format!("127.0.0.2:{}", r.port);
    let real = forger("127.0.0.1", &to);
    let tsi = Tsi { gsi: [1, 2, 3, 4, 5, 6], sport: 4000 };
    let mut buf = [0u8; 256];
    // A real session of 10 datagrams (counter payloads, 64 bytes).
    for seq in 0..10u64 {
        let pl = 64;
        for w in 0..8u64 {
            buf[24 + 8 * w as usize..32 + 8 * w as usize].copy_from_slice(&(seq * 8 + w).to_be_bytes());
        }
        let n = packet::write_data(&mut buf, tsi, wirespeed::pgm::DEFAULT_DPORT, false, seq as u32, 0, pl);
        packet::finish_checksum(&mut buf[..n]);
        real(&buf[..n]);
    }
    // Malformed: a flipped checksum, a short header, a length that lies, garbage.
    let n = packet::write_data(&mut buf, tsi, wirespeed::pgm::DEFAULT_DPORT, false, 10, 0, 64);
    packet::finish_checksum(&mut buf[..n]);
    let mut bad = buf[..n].to_vec();
    bad[30] ^= 0xff;
    real(&bad);
    real(&buf[..10]);
    let mut lying = buf[..n].to_vec();
    lying[14] = 0x7f;
    real(&lying);
    real(b"not a PGM packet at all, just text");
    // Forged: an SPM for the same session from another address, naming itself for NAKs, and
    // data for the session from that address.
    let forged = forger("127.0.0.3", &to);
    let m =
        packet::write_spm(&mut buf, tsi, wirespeed::pgm::DEFAULT_DPORT, 0, 0, 100, "127.0.0.3".parse().unwrap(), false);
    forged(&buf[..m]);
    let m = packet::write_data(&mut buf, tsi, wirespeed::pgm::DEFAULT_DPORT, false, 10, 0, 64);
    packet::finish_checksum(&mut buf[..m]);
    forged(&buf[..m]);
    // Data for another data-destination port.
    let m = packet::write_data(&mut buf, tsi, 7501, false, 11, 0, 64);
    packet::finish_checksum(&mut buf[..m]);
    real(&buf[..m]);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(30));
    assert!(code.is_some(), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(u(&rep, "datagrams"), 10, "{rep}");
    let p = pgm_of(&rep);
    assert_eq!((u(p, "malformed"), u(p, "foreign"), u(p, "ignored")), (4, 2, 1), "{p}");
    assert_eq!(u(p, "spms"), 0, "the forged SPM moved nothing: {p}");
}

#[test]
fn refusals_are_one_line() {
    expect_fail(&["recv", "127.0.0.2:7000", "--transport", "pgm", "--threads", "2"], 2, "one capture thread");
    expect_fail(&["recv", "[::1]:7000", "--transport", "pgm"], 2, "IPv4");
    expect_fail(&["recv", "127.0.0.2:7000", "--transport", "pgm", "--backend", "packet"], 2, "leave out --backend");
    expect_fail(&["send", "127.0.0.2:7000", "--transport", "pgm", "--gso"], 2, "leave out --gso");
    expect_fail(&["send", "127.0.0.2:7000", "--transport", "pgm", "--streams", "2"], 2, "one session");
    expect_fail(&["send", "[::1]:7000", "--transport", "pgm"], 2, "IPv4");
    expect_fail(&["send", "127.0.0.2:7000", "--transport", "pgm", "--pgm-window", "3"], 2, "--pgm-window");
    expect_fail(&["recv", "127.0.0.2:7000", "--transport", "pgm", "--nak-retries", "0"], 2, "--nak-retries");
    expect_fail(&["send", "127.0.0.2:7000", "--transport", "pgm", "--pgm-repair-share", "0"], 2, "1 to 10000");
    expect_fail(&["send", "127.0.0.2:7000", "--transport", "pgm", "--pgm-repair-share", "lots"], 2, "not a percentage");
    expect_fail(&["send", "127.0.0.2:7000", "--transport", "pgm", "--pgm-repair-burst", "0"], 2, "--pgm-repair-burst");
    expect_fail(
        &["send", "127.0.0.2:7000", "--transport", "pgm", "--pgm-repair-holdoff", "2s"],
        2,
        "--pgm-repair-holdoff",
    );
}

#[test]
fn ping_over_pgm_counts_every_probe_once() {
    let _t = traffic();
    let r = spawn_cmd_with(&[], "reflect", "127.0.0.2:0", &["--transport", "pgm", "--json", "--duration", "120"]);
    let target = format!("127.0.0.2:{}", r.port);
    let out = run(&["ping", &target, "--transport", "pgm", "--pps", "5000", "--count", "5000", "--json", "--no-files"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let doc = json(&stdout_of(&out));
    let run0 = &doc["runs"][0];
    assert_eq!((u(&run0["replies"], "received"), u(&run0["replies"], "lost")), (5000, 0), "{run0}");
    assert_eq!(u(&run0["pgm"]["source"], "odata"), 5000, "{run0}");
    assert_eq!(u(&run0["pgm"]["receiver"], "odata"), 5000, "{run0}");
    let _ = std::process::Command::new("kill").args(["-TERM", &r.child.id().to_string()]).status();
    let (code, stdout, stderr) = finish(r, Duration::from_secs(30));
    assert_eq!(code, Some(0), "{stderr}");
    let refl = json(&stdout);
    assert_eq!((u(&refl, "received"), u(&refl, "reflected"), u(&refl, "not_reflected")), (5000, 5000, 0), "{refl}");
}

#[test]
#[ignore = "needs root"]
fn ping_over_pgm_repairs_lost_probes_and_replies() {
    let _turn = traffic();
    // Every 25th probe and every 25th reflection dropped on the way in: all come back,
    // late by their repair, and both directions' repairs match the drops exactly.
    let ns = Netns::new("pgmping");
    let r =
        spawn_cmd_with(&ns.prefix(), "reflect", "127.0.0.2:0", &["--transport", "pgm", "--json", "--duration", "120"]);
    drop_odata(&ns, r.port, 25);
    let reply = r.port + 1;
    ns.exec(&[
        "nft",
        "add",
        "rule",
        "inet",
        "pgmloss",
        "in",
        "udp",
        "dport",
        &reply.to_string(),
        "@th,96,8",
        "0x04",
        "numgen",
        "inc",
        "mod",
        "25",
        "0",
        "counter",
        "drop",
    ]);
    let target = format!("127.0.0.2:{}", r.port);
    let out = run_prefixed(
        &ns.prefix(),
        &[
            "ping",
            &target,
            "--transport",
            "pgm",
            "--pps",
            "5000",
            "--count",
            "5000",
            "--json",
            "--no-files",
            "--linger",
            "10s",
        ],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let doc = json(&stdout_of(&out));
    let run0 = &doc["runs"][0];
    assert_eq!((u(&run0["replies"], "received"), u(&run0["replies"], "lost")), (5000, 0), "{run0}");
    let _ = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "kill", "-TERM", &r.child.id().to_string()])
        .status();
    let (code, stdout, stderr) = finish(r, Duration::from_secs(30));
    assert_eq!(code, Some(0), "{stderr}");
    let refl = json(&stdout);
    let counts = nft_counters(&ns, "pgmloss", "in");
    assert_eq!(counts, vec![200, 200], "1 of every 25 of 5,000 each way");
    // At least the drops each way (a busy host's full socket buffer may add some), and nothing
    // given up.
    assert!(u(&refl["pgm"]["receiver"], "repaired") >= 200, "probes repaired at the reflector: {refl}");
    assert!(u(&run0["pgm"]["receiver"], "repaired") >= 200, "replies repaired at the pinger: {run0}");
    assert_eq!(u(&refl["pgm"]["receiver"], "unrecoverable") + u(&run0["pgm"]["receiver"], "unrecoverable"), 0);
}

/// The test as a PGM source: ODATA of `size`-byte counter payloads (every 64-bit word of
/// message k is k * words + w, big-endian, as `--format counter` makes them) and the
/// end-of-stream message, from one socket on 127.0.0.1, to a receiver at `to`.
struct TestSource {
    sock: UdpSocket,
    to: std::net::SocketAddr,
    tsi: Tsi,
    size: usize,
    buf: Vec<u8>,
    spm_sqn: u32,
}

impl TestSource {
    fn new(to: &str, size: usize) -> TestSource {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind source");
        let tsi = Tsi { gsi: [9, 8, 7, 6, 5, 4], sport: 4321 };
        TestSource { sock, to: to.parse().unwrap(), tsi, size, buf: vec![0u8; 2048], spm_sqn: 0 }
    }

    fn send(&self, p: &[u8]) {
        self.sock.send_to(p, self.to).expect("send");
    }

    fn odata(&mut self, sqn: u32) {
        let words = self.size / 8;
        let off = packet::DATA_HEADER_LEN;
        for w in 0..words {
            let v = u64::from(sqn) * words as u64 + w as u64;
            self.buf[off + 8 * w..off + 8 * w + 8].copy_from_slice(&v.to_be_bytes());
        }
        let n = packet::write_data(&mut self.buf, self.tsi, wirespeed::pgm::DEFAULT_DPORT, false, sqn, 0, self.size);
        packet::finish_checksum(&mut self.buf[..n]);
        let (s, t) = (&self.sock, self.to);
        s.send_to(&self.buf[..n], t).expect("send");
    }

    /// The end-of-stream message for data 0..count, as ODATA sqn `count`.
    fn end(&mut self, count: u32) {
        let end = wirespeed::control::EndOfStream {
            session: 0x5eed,
            stream_index: 0,
            stream_count: 1,
            format_stream: 0,
            first_seq: 0,
            last_seq: u64::from(count) - 1,
            sent: u64::from(count),
            skipped: 0,
        }
        .encode();
        let off = packet::DATA_HEADER_LEN;
        self.buf[off..off + end.len()].copy_from_slice(&end);
        let n = packet::write_data(&mut self.buf, self.tsi, wirespeed::pgm::DEFAULT_DPORT, false, count, 0, end.len());
        packet::finish_checksum(&mut self.buf[..n]);
        let (s, t) = (&self.sock, self.to);
        s.send_to(&self.buf[..n], t).expect("send");
    }

    /// An SPM with these edges naming 127.0.0.1 for NAKs, built here; sent by `by`.
    fn spm(&mut self, trail: u32, lead: u32) -> Vec<u8> {
        let n = packet::write_spm(
            &mut self.buf,
            self.tsi,
            wirespeed::pgm::DEFAULT_DPORT,
            self.spm_sqn,
            trail,
            lead,
            "127.0.0.1".parse().unwrap(),
            false,
        );
        self.spm_sqn += 1;
        self.buf[..n].to_vec()
    }
}

/// A receiver for the test source: `--once`, with `--duration` only as a guard.
fn test_receiver(extra: &[&str]) -> common::Receiver {
    let mut args = vec!["--transport", "pgm", "--once", "--json", "--duration", "60", "--size", "256"];
    args.extend_from_slice(extra);
    spawn_cmd_with(&[], "recv", "127.0.0.2:0", &args)
}

/// The verdicts of one report agree: the pgm lines, the ledger and the `=>` line.
fn assert_verdicts_agree(rep: &Value) {
    let p = pgm_of(rep);
    let lost = u(&rep["total"], "lost");
    assert!(
        lost >= u(p, "unrecoverable_at_end"),
        "the ledger's lost holds the PGM loss after the last datagram: {rep}"
    );
    if u(p, "unrecoverable") > 0 {
        assert!(lost > 0, "PGM gave sequence numbers up, so the ledger lost some: {rep}");
    }
    let no_loss = rep["diagnosis"].as_array().unwrap().iter().any(|d| d.as_str().unwrap().starts_with("no loss"));
    assert_eq!(no_loss, lost == 0 && u(p, "unrecoverable") == 0, "the verdict line matches the counts: {rep}");
}

/// Datagrams of this size, this many of them: well under the smallest socket buffer, so a
/// receiver the scheduler starts late still loses none on loopback.
const FORGE_SIZE: usize = 256;
const FORGE_COUNT: u32 = 2_000;

/// The test source's 2,000 datagrams to a receiver, with 20 SPMs claiming trail/lead
/// 30,000/40,000 ahead after sqn 100, sent from another port of the source's address
/// (`own_port` false) or from the source's own socket; the receiver must end with every
/// datagram and nothing lost. Returns its report.
fn forged_spm_run(own_port: bool) -> Value {
    let _t = traffic();
    let r = test_receiver(&[]);
    let to = format!("127.0.0.2:{}", r.port);
    let mut src = TestSource::new(&to, FORGE_SIZE);
    let attacker = forger("127.0.0.1", &to);
    let hello = src.spm(0, u32::MAX);
    src.send(&hello);
    for sqn in 0..FORGE_COUNT {
        src.odata(sqn);
        if sqn == 100 {
            for _ in 0..20 {
                let f = src.spm(sqn + 30_000, sqn + 40_000);
                if own_port {
                    src.send(&f);
                } else {
                    attacker(&f);
                }
            }
        }
        if sqn % 200 == 199 {
            std::thread::sleep(Duration::from_millis(2)); // pacing only: no count depends on it
        }
    }
    src.end(FORGE_COUNT);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(u(&rep, "datagrams"), u64::from(FORGE_COUNT), "{rep}");
    assert_eq!(u(&rep["total"], "lost"), 0, "{rep}");
    rep
}

#[test]
fn a_forged_spm_from_another_port_of_the_source_moves_nothing() {
    // The repro: an attacker on the source's host who saw one ODATA sends 20 SPMs
    // with the session's TSI and a trail/lead 30,000/40,000 ahead, from 127.0.0.1 (the
    // source's address) but another UDP port. On 424e14b the receiver threw the rest of the
    // stream away as "duplicates", the ledger said no loss, and --once never ended.
    let rep = forged_spm_run(false);
    let p = pgm_of(&rep);
    assert_eq!((u(p, "foreign"), u(p, "unrecoverable"), u(p, "duplicates")), (20, 0, 0), "{p}");
    assert_eq!(u(p, "naks_sent"), 0, "the forged lead made the receiver ask for nothing: {p}");
    assert_eq!(rep["stopped_by"], "end of stream", "--once ended on the source's end message");
    assert_verdicts_agree(&rep);
}

#[test]
fn a_forged_spm_from_the_sources_own_port_discards_nothing() {
    // The same forged edges from the source's own address and port (an attacker able to
    // spoof it, or a confused source): the SPM is a claim bounded by the data seen, so the
    // stream is still delivered whole, and the NAKs it causes are bounded.
    let rep = forged_spm_run(true);
    let p = pgm_of(&rep);
    assert_eq!((u(p, "foreign"), u(p, "unrecoverable"), u(p, "duplicates")), (0, 0, 0), "{p}");
    assert!(u(p, "beyond_data") >= 20, "{p}");
    // At most ANNOUNCE_AHEAD sqns past the data were asked for, each at most --nak-retries
    // (20) times.
    let bound = u64::from(wirespeed::pgm::rxw::ANNOUNCE_AHEAD) * 20;
    assert!(u(p, "naks_sent") <= bound, "{} NAKs: {p}", u(p, "naks_sent"));
    assert_verdicts_agree(&rep);
}

#[test]
fn a_lost_tail_is_in_the_ledger_and_once_ends_on_silence() {
    // The source announces 100 more datagrams than the receiver ever gets, then the end
    // message is lost with them and nobody answers the NAKs: the receiver gives the 100 and
    // the end message up, the ledger counts them lost, no line says "no loss", and --once
    // ends on silence. On 424e14b the ledger said "no loss" and --once never ended.
    let _t = traffic();
    let r = test_receiver(&["--nak-retries", "2", "--nak-repeat", "20ms", "--nak-rdata", "20ms"]);
    let to = format!("127.0.0.2:{}", r.port);
    let mut src = TestSource::new(&to, FORGE_SIZE);
    let hello = src.spm(0, u32::MAX);
    src.send(&hello);
    let sent = 500u32;
    for sqn in 0..sent {
        src.odata(sqn);
    }
    // The source's SPM: it sent up to 599 and the end message at 600; 500..=600 never arrive.
    let spm = src.spm(0, 600);
    src.send(&spm);
    let (code, stdout, stderr) = finish(r, Duration::from_secs(50));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(u(&rep, "datagrams"), u64::from(sent), "{rep}");
    let p = pgm_of(&rep);
    assert_eq!((u(p, "unrecoverable"), u(p, "unrecoverable_at_end")), (101, 101), "{p}");
    assert_eq!(u(&rep["total"], "lost"), 101, "{rep}");
    // The default quiet spell (--once-quiet), in whole seconds as before the option.
    assert_eq!(
        rep["stopped_by"],
        "silence: 3 s without data after the transport gave up data that may have held the end-of-stream message"
    );
    assert_verdicts_agree(&rep);
}

/// A UDP socket on 127.0.0.2 standing in for a session's only receiver: it reads what the
/// source sends, learning the TSI and the NAK address from the packets as anyone who sees
/// them can, and sends NAKs by hand (honest ones, or forged ones).
struct HandReceiver {
    sock: UdpSocket,
    naks: UdpSocket,
    tsi: Option<Tsi>,
    dport: u16,
    nla: Option<std::net::IpAddr>,
    lead: Option<u32>,
    /// RDATA received, by sqn.
    rdata: std::collections::HashMap<u32, u32>,
    buf: Vec<u8>,
}

impl HandReceiver {
    fn new() -> HandReceiver {
        let sock = UdpSocket::bind("127.0.0.2:0").expect("bind the hand receiver");
        sock.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
        let naks = UdpSocket::bind("127.0.0.2:0").expect("bind the NAK socket");
        HandReceiver {
            sock,
            naks,
            tsi: None,
            dport: 0,
            nla: None,
            lead: None,
            rdata: Default::default(),
            buf: vec![0u8; 65536],
        }
    }

    fn port(&self) -> u16 {
        self.sock.local_addr().unwrap().port()
    }

    /// Read what came, for at most `d` (returns sooner when nothing is waiting for 5 ms).
    fn read(&mut self, d: Duration) {
        let t = std::time::Instant::now();
        while t.elapsed() < d {
            let Ok(n) = self.sock.recv(&mut self.buf) else { return };
            match packet::parse(&self.buf[..n]) {
                Ok(packet::Packet::Spm { nla, .. }) => self.nla = Some(nla),
                Ok(packet::Packet::Data { hdr, repair: false, sqn, .. }) => {
                    self.tsi = Some(Tsi { gsi: hdr.gsi, sport: hdr.sport });
                    self.dport = hdr.dport;
                    if self.lead.map_or(true, |l| wirespeed::pgm::sqn_lt(l, sqn)) {
                        self.lead = Some(sqn);
                    }
                }
                Ok(packet::Packet::Data { repair: true, sqn, .. }) => *self.rdata.entry(sqn).or_default() += 1,
                _ => {}
            }
        }
    }

    /// Read until `done` holds (or fail after 60 s).
    fn read_until(&mut self, what: &str, done: impl Fn(&HandReceiver) -> bool) {
        let t = std::time::Instant::now();
        while !done(self) {
            assert!(t.elapsed() < Duration::from_secs(60), "no {what} in 60 s");
            self.read(Duration::from_millis(20));
        }
    }

    /// Send one NAK for `sqns` (up to 63) to the address the SPMs named, at the session's
    /// port, as a receiver does; returns its length (the PGM packet; 28 more on the wire).
    fn nak(&self, sqns: &[u32]) -> usize {
        let mut b = [0u8; packet::MAX_NAK_LEN];
        let tsi = self.tsi.expect("a session seen");
        let nla = self.nla.unwrap_or("127.0.0.1".parse().unwrap());
        let group = "127.0.0.2".parse().unwrap();
        let n = packet::write_nak(&mut b, packet::NakKind::Nak, tsi, self.dport, sqns, nla, group);
        let _ = self.naks.send_to(&b[..n], (nla, self.port()));
        n
    }
}

/// `wirespeed send 127.0.0.2:PORT --transport pgm --json ARGS`, running.
fn spawn_pgm_send(port: u16, args: &[&str]) -> std::process::Child {
    std::process::Command::new(bin())
        .args(["send", &format!("127.0.0.2:{port}"), "--transport", "pgm", "--json"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the sender")
}

/// Wait for the sender (reading what it still sends meanwhile) and return its JSON report.
fn sender_report(mut child: std::process::Child, hand: &mut HandReceiver) -> Value {
    let t = std::time::Instant::now();
    while child.try_wait().expect("wait for the sender").is_none() {
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("the sender did not end within 120 s");
        }
        hand.read(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "send: {}", stderr_of(&out));
    json(&stdout_of(&out))
}

/// The repair budget's bound computed from the report's own counters, independently of the
/// report's budget fields: a burst of a quarter of the window (8192 / 4 = 2048 datagrams of
/// 1000 + 24 header bytes, 28 more for IP and UDP), plus 25 % of the ODATA on the wire, plus
/// 25 % of the mean data rate over the linger after the data (the budget earns on then, so the
/// last datagrams can still be repaired); one byte of rounding.
fn default_budget_bound(sent: &Value) -> u64 {
    let st = &sent["pgm"]["stats"];
    let data = u(st, "odata_bytes") + 28 * u(st, "odata");
    let linger = sent["pgm"]["linger_s"].as_f64().unwrap();
    // The data's span is one datagram gap shorter than elapsed_s: 1 % covers it.
    let span = sent["elapsed_s"].as_f64().unwrap() * 0.99;
    2048 * (1024 + 28) + data / 4 + (data as f64 / 4.0 * linger / span) as u64 + 1
}

#[test]
fn forged_naks_get_no_more_than_the_repair_budget_and_are_reported() {
    // The attack: a 10 kpps source of 1000-byte datagrams, and a forger who saw one
    // ODATA sending NAKs of 63 in-window sequence numbers, 2,000 of them over about 2 s. Before
    // the budget every one was repaired (63 RDATA per NAK, 70 % of the data bytes).
    let _t = traffic();
    let mut hand = HandReceiver::new();
    let child = spawn_pgm_send(hand.port(), &["--rate", "10kpps", "--size", "1000", "--duration", "4"]);
    // Once the window holds 7,100 datagrams, so that every forged sqn is one it still holds.
    hand.read_until("ODATA", |h| h.tsi.is_some() && h.lead.is_some_and(|l| l >= 7100));
    let mut forged = 0u64;
    for i in 0..2000u32 {
        hand.read(Duration::from_micros(500));
        // 63 sqns somewhere in the last 7,000 sent (all inside the 8,192 window), sweeping.
        let lead = hand.lead.unwrap();
        let base = lead.saturating_sub(7000) + (i * 63) % 6900;
        let sqns: Vec<u32> = (base..base + 63).collect();
        forged += hand.nak(&sqns) as u64 + 28;
        std::thread::sleep(Duration::from_micros(500));
    }
    let sent = sender_report(child, &mut hand);
    let p = &sent["pgm"];
    let st = &p["stats"];
    let rdata_wire = u(st, "rdata_bytes") + 28 * u(st, "rdata");
    eprintln!(
        "forged {} bytes of NAKs; source sent {} RDATA = {} bytes on the wire ({:.1}x), {} ODATA; accepted {} NAKs",
        forged,
        u(st, "rdata"),
        rdata_wire,
        rdata_wire as f64 / forged as f64,
        u(st, "odata"),
        u(st, "nak_packets")
    );
    assert!(u(st, "nak_packets") > 0, "the forged NAKs were taken as NAKs: {p}");
    // The bound: the burst plus a quarter of the data, whatever the NAKs asked for.
    assert!(rdata_wire <= default_budget_bound(&sent), "RDATA {rdata_wire} bytes beyond the budget: {p}");
    assert_eq!(u(p, "repair_wire_bytes"), rdata_wire, "{p}");
    assert!(rdata_wire <= u(p, "repair_budget_bound_bytes"), "{p}");
    assert!(u(p, "repair_budget_bound_bytes") <= default_budget_bound(&sent), "{p}");
    assert_eq!((u(p, "repair_budget_share_percent"), u(p, "repair_budget_burst_bytes")), (25, 2048 * 1052), "{p}");
    // Far more was asked than the budget holds, and the report says so.
    assert!(u(st, "nak_over_budget") > 0, "{p}");
    assert_eq!(p["naks_plausible"], false, "{p}");
    let warnings = p["nak_warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w.as_str().unwrap().contains("beyond the repair budget")), "{p}");
    // Every sqn asked for is accounted for once.
    let accounted = u(st, "rdata") + u(st, "nak_eliminated") + u(st, "nak_over_budget") + u(st, "nak_out_of_window");
    assert!(accounted + u(st, "nak_not_sent") >= u(st, "nak_sqns"), "{st}");
}

#[test]
fn an_honest_burst_of_loss_is_repaired_exactly_within_the_budget() {
    // A receiver that lost 2,000 datagrams in a row (a stall) NAKs them 63 at a time and asks
    // again for any repair not come within 500 ms (a patient NAK_RDATA_IVL, so a source the
    // scheduler runs late is never asked twice for a repair it has queued): every one is
    // repaired, none is refused or held off, and the source finds the NAKs plausible. The
    // source's window holds the whole stream, so a slow run never sees the stretch expire.
    let _t = traffic();
    let mut hand = HandReceiver::new();
    let child = spawn_pgm_send(
        hand.port(),
        &[
            "--rate",
            "10kpps",
            "--size",
            "1000",
            "--count",
            "20000",
            "--pgm-quiet",
            "2s",
            "--pgm-linger",
            "60s",
            "--pgm-window",
            "65536",
        ],
    );
    let lost: Vec<u32> = (5000..7000).collect();
    hand.read_until("the lost stretch to pass", |h| h.lead.is_some_and(|l| l >= 7100));
    let mut asked = 0u64;
    for chunk in lost.chunks(63) {
        // Ask until every sqn of the chunk came back (a repair the socket dropped is asked
        // for again, after 500 ms).
        let mut tries = 0;
        loop {
            let missing: Vec<u32> = chunk.iter().copied().filter(|s| !hand.rdata.contains_key(s)).collect();
            if missing.is_empty() {
                break;
            }
            tries += 1;
            assert!(tries <= 20, "sqns {missing:?} not repaired after 20 NAKs");
            hand.nak(&missing);
            asked += missing.len() as u64;
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(500) && chunk.iter().any(|s| !hand.rdata.contains_key(s)) {
                hand.read(Duration::from_millis(5));
            }
        }
    }
    let sent = sender_report(child, &mut hand);
    let p = &sent["pgm"];
    let st = &p["stats"];
    assert!(lost.iter().all(|s| hand.rdata.contains_key(s)), "every lost datagram repaired");
    // Each NAKed sqn got exactly one RDATA: nothing over budget, held off or eliminated.
    assert_eq!(u(st, "nak_sqns"), asked, "{st}");
    assert_eq!(u(st, "rdata"), asked, "{st}");
    assert_eq!((u(st, "nak_over_budget"), u(st, "nak_eliminated"), u(st, "nak_held_off")), (0, 0, 0), "{st}");
    assert_eq!(p["naks_plausible"], true, "{p}");
    assert!(u(p, "repair_wire_bytes") <= u(p, "repair_budget_bound_bytes"), "{p}");
}

#[test]
fn a_replayed_nak_is_repaired_at_most_once_per_hold_off() {
    // One NAK of 63 sqns sent 1,000 times over about a second: each sqn is repaired again
    // only after the hold-off (25 ms by default, half of --nak-rdata), so the RDATA is bounded
    // by the time the replay lasted, not by the NAKs (before: 63 RDATA for every copy).
    let _t = traffic();
    let mut hand = HandReceiver::new();
    // A window holding the whole run, so the sqns stay repairable throughout.
    let child = spawn_pgm_send(
        hand.port(),
        &["--rate", "10kpps", "--size", "1000", "--duration", "3", "--pgm-window", "65536"],
    );
    hand.read_until("ODATA", |h| h.lead.is_some_and(|l| l >= 1000));
    let sqns: Vec<u32> = (500..563).collect();
    let t0 = std::time::Instant::now();
    for _ in 0..1000 {
        hand.nak(&sqns);
        hand.read(Duration::from_micros(500));
        std::thread::sleep(Duration::from_micros(500));
    }
    let sent = sender_report(child, &mut hand);
    // Every NAK was taken by the source between the first send and the sender's exit, so
    // no sqn can have been repaired more than once per 25 ms of that.
    let span_ms = t0.elapsed().as_millis() as u64;
    let p = &sent["pgm"];
    let st = &p["stats"];
    assert!(u(st, "nak_packets") > 0, "{p}");
    let most = 63 * (1 + span_ms / 25);
    assert!(
        u(st, "rdata") <= most,
        "{} RDATA for one NAK replayed over {span_ms} ms (at most {most}): {p}",
        u(st, "rdata")
    );
    assert!(u(st, "nak_held_off") > 0, "{st}");
    assert_eq!(u(st, "nak_sqns"), 63 * u(st, "nak_packets"), "{st}");
    assert_eq!(u(st, "rdata") + u(st, "nak_eliminated"), u(st, "nak_sqns"), "each ask repaired or eliminated: {st}");
}
