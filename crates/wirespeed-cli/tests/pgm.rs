//! `--transport pgm`: PGM sessions end to end, with loss injected by nftables where the tests
//! have a namespace of their own; malformed and forged packets; the refusals.

mod common;

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
            "--pgm-quiet",
            "5s",
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
