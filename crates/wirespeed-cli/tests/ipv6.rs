//! IPv6 end to end: send/recv, record + verify of IPv6 pcap (decoded by tshark), ping/reflect,
//! a dual-stack bare port hearing both families, multicast, bad IPv6 input, and (as root) all
//! of it across partitions over their 2001:2::/48 addresses. Traffic goes only to ::1,
//! 127.0.0.1, or addresses inside namespaces the tests make.

use crate::common;

use common::parts::Parts;
use common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// Sources of a receive report's streams, sorted.
fn sources(rep: &Value) -> Vec<String> {
    let mut v: Vec<String> =
        rep["streams"].as_array().expect("streams").iter().map(|s| s["source"].as_str().unwrap().to_string()).collect();
    v.sort();
    v
}

/// Exact when the kernel dropped nothing (the usual case); on a busy host the socket may drop
/// some, and the ledger must then count exactly those on top of the injected gap.
fn assert_gap(s: &Value, rep: &Value, sent: u64, gap: (u64, u64)) {
    let injected = gap.1 - gap.0 + 1;
    assert_eq!(u(s, "received") + u(s, "lost"), sent, "{s}");
    let drops = recv_kernel_drops(rep);
    if drops == 0 {
        assert_eq!(u(s, "received"), sent - injected, "{s}");
        assert_eq!(gap_list(s), vec![gap], "{s}");
    } else {
        assert!((injected..=injected + drops).contains(&u(s, "lost")), "{s}");
    }
}

#[test]
fn send_and_recv_over_ipv6_loopback_count_exactly() {
    let _t = traffic();
    let r = spawn_recv_with(&[], "[::1]:0", &["--once", "--json", "--duration", "60"]);
    let target = format!("[::1]:{}", r.port);
    let out = run(&["send", &target, "--count", "5000", "--rate", "50kpps", "--size", "1024", "--skip", "200..219"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&format!("listening on {target} ")), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["listen"], target.as_str());
    let s = &rep["streams"][0];
    assert!(s["source"].as_str().unwrap().starts_with("[::1]:"), "{s}");
    assert_eq!(rep["streams"].as_array().unwrap().len(), 1);
    assert_gap(s, &rep, 5000, (200, 219));
}

#[test]
fn a_bare_port_hears_ipv4_and_ipv6_senders_named_by_their_own_addresses() {
    let _t = traffic();
    let r = spawn_recv_with(&[], "0", &["--count", "2000", "--json", "--duration", "60"]);
    let port = r.port;
    for target in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let out = run(&["send", &target, "--count", "1000", "--rate", "50kpps", "--size", "512"]);
        assert!(out.status.success(), "{target}: {}", stderr_of(&out));
    }
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&format!("listening on *:{port} (IPv4 and IPv6)")), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["listen"], format!("[::]:{port}"), "the JSON keeps the socket's own address");
    let src = sources(&rep);
    assert_eq!(src.len(), 2, "{src:?}");
    assert!(src[0].starts_with("127.0.0.1:"), "an IPv4 sender is named as IPv4, never ::ffff:...: {src:?}");
    assert!(src[1].starts_with("[::1]:"), "{src:?}");
    assert!(!stdout.contains("::ffff:"), "{stdout}");
    for s in rep["streams"].as_array().unwrap() {
        assert_eq!(u(s, "received") + u(s, "lost"), 1000, "{s}");
    }
    assert_eq!(u(&rep["total"], "received"), 2000);
}

#[test]
fn the_human_summary_names_a_bare_port_for_both_families() {
    let _t = traffic();
    let r = spawn_recv_with(&[], "0", &["--once", "--duration", "60"]);
    let out = run(&["send", &format!("[::1]:{}", r.port), "--count", "100", "--rate", "10kpps", "--size", "64"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let port = r.port;
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with(&format!("wirespeed recv *:{port} (IPv4 and IPv6) ")), "{stdout}");
}

/// tshark's reading of a pcap: one line per packet with IP version, source, UDP checksum
/// status (1 good, 2 bad, 3 not present) and UDP payload length.
fn tshark_fields(pcap: &str) -> Vec<String> {
    let out = Command::new("tshark")
        .args(["-n", "-r", pcap, "-o", "udp.check_checksum:TRUE", "-T", "fields", "-E", "separator=,"])
        .args(["-e", "ip.version", "-e", "ipv6.src", "-e", "ip.src", "-e", "udp.checksum.status", "-e", "udp.length"])
        .output()
        .expect("tshark is installed (scripts/test.sh installs it)");
    assert!(out.status.success(), "tshark: {}", stderr_of(&out));
    stdout_of(&out).lines().map(str::to_string).collect()
}

#[test]
fn an_ipv6_pcap_recording_verifies_and_tshark_decodes_it_with_good_checksums() {
    let _t = traffic();
    let dir = TempDir::new("v6pcap");
    let args = ["--file-format", "pcap", "-o", dir.path(), "--once", "--json", "--duration", "60"];
    let r = spawn_cmd_with(&[], "record", "[::1]:0", &args);
    let out = run(&["send", &format!("[::1]:{}", r.port), "--count", "1000", "--rate", "20kpps", "--size", "1000"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (code, _stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let pcap = dir.only("pcap");
    let v = run(&["verify", "--json", dir.path()]);
    assert_eq!(v.status.code(), Some(0), "{}", stderr_of(&v));
    let rep = json(&stdout_of(&v));
    assert_eq!((u(&rep, "records"), u(&rep, "matching"), u(&rep, "problems")), (1000, 1, 0), "{rep}");
    assert_eq!(u(&rep["total"], "received") + u(&rep["total"], "lost"), 1000, "{rep}");
    assert!(rep["streams"][0]["source"].as_str().unwrap().starts_with("[::1]:"), "{rep}");
    let lines = tshark_fields(&pcap);
    let kept = u(&rep["total"], "received") as usize;
    assert_eq!(lines.len(), kept, "one packet per record");
    for l in &lines {
        let f: Vec<&str> = l.split(',').collect();
        // IPv6 from ::1, UDP checksum verified good by tshark, 8 + 1000 bytes of UDP.
        assert_eq!(f, ["6", "::1", "", "1", "1008"], "{l}");
    }
}

#[test]
fn a_dual_stack_pcap_recording_keeps_each_family_in_its_own_header() {
    let _t = traffic();
    let dir = TempDir::new("dualpcap");
    let args = ["--file-format", "pcap", "-o", dir.path(), "--count", "1000", "--json", "--duration", "60"];
    let r = spawn_cmd_with(&[], "record", "0", &args);
    let port = r.port;
    for target in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let out = run(&["send", &target, "--count", "500", "--rate", "20kpps", "--size", "256"]);
        assert!(out.status.success(), "{}", stderr_of(&out));
    }
    let (code, _stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let v = run(&["verify", "--json", dir.path()]);
    assert_eq!(v.status.code(), Some(0), "{}", stderr_of(&v));
    let rep = json(&stdout_of(&v));
    assert_eq!((u(&rep, "records"), u(&rep, "problems")), (1000, 0), "{rep}");
    let src = sources(&rep);
    assert!(src.len() == 2 && src[0].starts_with("127.0.0.1:") && src[1].starts_with("[::1]:"), "{src:?}");
    let lines = tshark_fields(&dir.only("pcap"));
    assert_eq!(lines.len(), 1000);
    let v4 = lines.iter().filter(|l| l.as_str() == "4,,127.0.0.1,3,264").count();
    let v6 = lines.iter().filter(|l| l.as_str() == "6,::1,,1,264").count();
    let odd: Vec<&String> = lines.iter().filter(|l| !l.ends_with(",264") || l.contains(",2,")).take(3).collect();
    assert_eq!((v4, v6), (500, 500), "IPv4 records without a checksum (allowed), IPv6 with a good one: {odd:?}");
}

#[test]
fn ping_and_reflect_over_ipv6_loopback() {
    let _t = traffic();
    let r = spawn_cmd_with(&[], "reflect", "[::1]:0", &["--count", "300", "--json"]);
    let target = format!("[::1]:{}", r.port);
    let out = run(&["ping", &target, "--count", "300", "--pps", "2000", "--no-files", "--json", "--linger", "2s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let rep = json(&stdout_of(&out));
    let run0 = &rep["runs"][0];
    assert_eq!(run0["target"], target.as_str());
    assert_eq!(u(run0, "sent"), 300);
    assert_eq!(u(&run0["replies"], "received") + u(&run0["replies"], "lost"), 300, "{run0}");
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let refl = json(&stdout);
    assert_eq!(u(&refl, "reflected"), 300, "{refl}");
    assert_eq!(u(&run0["replies"], "received"), 300, "every reflected probe came back over ::1");
}

#[test]
fn a_reflector_on_a_bare_port_answers_both_families() {
    let _t = traffic();
    let r = spawn_cmd_with(&[], "reflect", "0", &["--count", "200"]);
    let port = r.port;
    for target in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let out = run(&["ping", &target, "--count", "100", "--pps", "1000", "--no-files", "--json", "--linger", "2s"]);
        assert_eq!(out.status.code(), Some(0), "{target}: {}", stderr_of(&out));
        let run0 = &json(&stdout_of(&out))["runs"][0];
        assert_eq!(u(&run0["replies"], "received"), 100, "{target}: {run0}");
    }
    let (code, stdout, stderr) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains(&format!("listening on *:{port} (IPv4 and IPv6)")), "{stderr}");
    assert!(stdout.contains(&format!("on *:{port} (IPv4 and IPv6)")), "{stdout}");
    assert!(
        stdout.contains("  127.0.0.1:") && stdout.contains("  [::1]:"),
        "each client by its own address:\n{stdout}"
    );
    assert!(!stdout.contains("::ffff:"), "{stdout}");
}

#[test]
fn bad_ipv6_input_is_one_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["recv", "[::1", "--duration", "1"], "never closes"),
        (&["recv", "[::1]", "--duration", "1"], "no port"),
        (&["recv", "[2001:2::zz]:7148", "--duration", "1"], "not an IPv6 address"),
        (&["recv", "::1:7148", "--duration", "1"], "[::1]:7148"),
        (&["recv", "[::1%lo]:7148", "--duration", "1"], "not link-local"),
        (&["recv", "[2001:2::1%1]:7148", "--duration", "1"], "not link-local"),
        (&["recv", "[ff02::1234]:7148", "--duration", "1"], "link-local multicast group"),
        (&["recv", "[ff05::1234]:7148", "--iface", "127.0.0.1", "--duration", "1"], "name or index"),
        (&["recv", "[ff02::1234]:7148", "--iface", "nosuchif0", "--duration", "1"], "no interface named"),
        (&["record", "[ff02::1234]:7148", "-o", "/nonexistent-dir-ipv6", "--duration", "1"], "link-local multicast"),
        (&["reflect", "[::1%1]:7148", "--duration", "1"], "not link-local"),
        (&["send", "2001:2::1:7148", "--count", "1"], "[2001:2::1]:7148"),
        (&["send", "::1", "--count", "1"], "[::1]:PORT"),
        (&["send", "[::1]:0", "--count", "1"], "not a destination"),
        (&["send", "[::]:7148", "--count", "1"], "not a destination"),
        (&["send", "[ff02::1]:7148", "--count", "1"], "link-local multicast group"),
        (&["send", "[::1]:7148", "--bind", "127.0.0.1", "--count", "1"], "different families"),
        (&["send", "[::1]:7148", "--bind", "2001:2::1%1", "--count", "1"], "not link-local"),
        (&["send", "[::1]:7148", "--iface", "lo", "--count", "1"], "not a multicast group"),
        (&["ping", "[::1]:0", "--count", "1"], "not a destination"),
        (&["ping", "::1:7", "--count", "1"], "brackets"),
    ];
    for (args, needle) in cases {
        expect_fail(args, 2, needle);
    }
}

/// A namespace with a veth pair whose ends are both in it (DAD off, so the link-local
/// addresses are usable at once): multicast leaves by one end and loops back to a receiver
/// joined there. The loopback device takes no IPv6 multicast (the kernel finds no route out of
/// it), so a veth it is.
fn multicast_ns() -> Netns {
    let ns = Netns::new("mc6");
    ns.exec(&["sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"]);
    ns.exec(&["ip", "link", "add", "mc0", "type", "veth", "peer", "name", "mc1"]);
    ns.exec(&["ip", "link", "set", "mc0", "up"]);
    ns.exec(&["ip", "link", "set", "mc1", "up"]);
    ns
}

fn multicast_round(ns: &Netns, listen: &str, recv_extra: &[&str], send_to: &str, send_extra: &[&str]) -> Value {
    let mut ra = vec!["--once", "--json", "--duration", "60"];
    ra.extend_from_slice(recv_extra);
    let r = spawn_recv_with(&ns.prefix(), listen, &ra);
    let target = send_to.replace("PORT", &r.port.to_string());
    let mut sa = vec!["send", target.as_str(), "--count", "2000", "--rate", "20kpps", "--size", "1024"];
    sa.extend_from_slice(&["--skip", "50..59"]);
    sa.extend_from_slice(send_extra);
    let out = run_prefixed(&ns.prefix(), &sa);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    json(&stdout)
}

#[test]
#[ignore = "needs root"]
fn ipv6_multicast_groups_are_joined_and_received_on_a_named_or_numbered_interface() {
    let _t = traffic();
    let ns = multicast_ns();
    // A link-local group, the interface named by --iface on both sides.
    let rep = multicast_round(&ns, "[ff02::1234]:0", &["--iface", "mc0"], "[ff02::1234]:PORT", &["--iface", "mc0"]);
    let s = &rep["streams"][0];
    assert!(s["source"].as_str().unwrap().starts_with("[fe80::"), "{s}");
    assert_gap(s, &rep, 2000, (50, 59));
    // The same group, the interface as the address's scope (a name on one side, its index on
    // the other).
    let index = String::from_utf8(
        Command::new("ip")
            .args(["netns", "exec", &ns.name, "cat", "/sys/class/net/mc0/ifindex"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let listen = format!("[ff02::1234%{index}]:0");
    let rep = multicast_round(&ns, &listen, &[], "[ff02::1234%mc0]:PORT", &[]);
    assert_gap(&rep["streams"][0], &rep, 2000, (50, 59));
    // A site-local group, with a hop limit.
    let rep = multicast_round(
        &ns,
        "[ff05::1234]:0",
        &["--iface", &index],
        "[ff05::1234]:PORT",
        &["--iface", "mc0", "--ttl", "2"],
    );
    assert_gap(&rep["streams"][0], &rep, 2000, (50, 59));
}

#[test]
fn a_bench_runs_over_ipv6_loopback() {
    let _t = traffic();
    let out = run(&[
        "bench",
        "rates",
        "--loopback",
        "--ipv6",
        "--rates",
        "50M",
        "--duration",
        "0.3",
        "--size",
        "1080",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let rep = json(&stdout_of(&out));
    assert!(rep["placement"]["description"].as_str().unwrap().ends_with(", over IPv6"), "{}", rep["placement"]);
    assert_point_received(&rep["rows"][0]);
}

/// A bench point over IPv6 carried its stream: every datagram arrived unless the kernel says it
/// dropped some, and the end-of-stream message came through.
fn assert_point_received(p: &Value) {
    assert!(u(p, "sent") > 0, "{p}");
    assert_eq!(p["end_of_stream"], true, "{p}");
    if u(p, "kernel_socket_drops") == 0 && u(p, "kernel_rcvbuf_errors") == 0 {
        assert_eq!(u(p, "received"), u(p, "sent"), "{p}");
    }
}

// ---- Across partitions (root): the 2001:2::/48 addresses beside 198.18.0.0/15. ----

/// Two partitions (no daemons), removed when the value is dropped.
fn two_partitions(tag: &str) -> Parts {
    let parts = Parts::new(tag);
    parts.ok(&["create", "-p", "1", "-c", "0", "-p", "2", "-c", "1", "--no-daemons"]);
    parts
}

/// `wirespeed partition exec ID --` as a command prefix.
fn in_partition(parts: &Parts, id: u32) -> Vec<String> {
    ["partition", "--prefix", &parts.prefix, "exec", &id.to_string(), "--"].iter().map(|s| s.to_string()).collect()
}

fn prefix_of(v: &[String]) -> Vec<&str> {
    let mut p = vec![bin()];
    p.extend(v.iter().map(String::as_str));
    p
}

#[test]
#[ignore = "needs root"]
fn partitions_have_ipv6_addresses_routed_over_their_links() {
    let _turn = traffic();
    let parts = two_partitions("vsix");
    let st = json(&parts.ok(&["status", "--json"]));
    for p in st["partitions"].as_array().unwrap() {
        let id = p["id"].as_u64().unwrap();
        assert_eq!(p["address"], format!("198.19.0.{id}"), "{p}");
        assert_eq!(p["address6"], format!("2001:2::{id}"), "{p}");
        let peer = 3 - id;
        assert_eq!(p["links6"][peer.to_string()], format!("2001:2:1::{id}"), "{p}");
    }
    let text = parts.ok(&["status"]);
    assert!(text.contains("address 198.19.0.1 2001:2::1 ") && text.contains("address 198.19.0.2 2001:2::2 "), "{text}");
    let list = parts.ok(&["list"]);
    assert!(list.contains("2001:2:1::1->2"), "{list}");
    // Each partition reaches the other's IPv6 address over their direct link, from its own.
    let r = Command::new("ip").args(["-n", &parts.ns(1), "-6", "route", "get", "2001:2::2"]).output().unwrap();
    assert!(stdout_of(&r).contains("via 2001:2:1::2 dev p2 src 2001:2::1"), "{}", stdout_of(&r));
    // No address waits for duplicate address detection.
    for id in [1, 2] {
        let a = Command::new("ip").args(["-n", &parts.ns(id), "-6", "addr"]).output().unwrap();
        assert!(!stdout_of(&a).contains("tentative"), "{}", stdout_of(&a));
    }
}

#[test]
#[ignore = "needs root"]
fn send_recv_record_and_ping_across_partitions_over_ipv6() {
    let _t = traffic();
    let parts = two_partitions("vsixrun");
    let (e1, e2) = (in_partition(&parts, 1), in_partition(&parts, 2));
    let (p1, p2) = (prefix_of(&e1), prefix_of(&e2));
    // recv on partition 2's address, send from partition 1: exact counts.
    let r = spawn_recv_with(&p2, "[2001:2::2]:0", &["--once", "--json", "--duration", "60"]);
    let target = format!("[2001:2::2]:{}", r.port);
    let out = run_prefixed(
        &p1,
        &["send", &target, "--count", "5000", "--rate", "50kpps", "--size", "1024", "--skip", "10..19"],
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    let s = &rep["streams"][0];
    assert!(s["source"].as_str().unwrap().starts_with("[2001:2::1]:"), "{s}");
    assert_gap(s, &rep, 5000, (10, 19));
    // The packet backend and the raw sender take IPv6 too.
    let r = spawn_recv_with(&p2, "[2001:2::2]:0", &["--backend", "packet", "--once", "--json", "--duration", "60"]);
    let target = format!("[2001:2::2]:{}", r.port);
    let out =
        run_prefixed(&p1, &["send", &target, "--raw", "p2", "--count", "3000", "--rate", "30kpps", "--size", "1024"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (code, stdout, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let rep = json(&stdout);
    assert_eq!(rep["backend"], "packet");
    let s = &rep["streams"][0];
    assert!(s["source"].as_str().unwrap().starts_with("[2001:2::1]:"), "{s}");
    assert_eq!(u(s, "received") + u(s, "lost"), 3000, "{s}");
    // Record an IPv6 pcap there; verify it and let tshark check every checksum.
    let dir = TempDir::new("v6partpcap");
    let r = spawn_cmd_with(
        &p2,
        "record",
        "[2001:2::2]:0",
        &["--file-format", "pcap", "-o", dir.path(), "--once", "--duration", "60"],
    );
    let target = format!("[2001:2::2]:{}", r.port);
    let out = run_prefixed(&p1, &["send", &target, "--count", "1000", "--rate", "20kpps", "--size", "1000"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let (code, _o, stderr) = finish(r, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{stderr}");
    let v = run(&["verify", "--json", dir.path()]);
    assert_eq!(v.status.code(), Some(0), "{}", stderr_of(&v));
    let lines = tshark_fields(&dir.only("pcap"));
    assert_eq!(lines.len() as u64, u(&json(&stdout_of(&v)), "records"));
    let odd = lines.iter().find(|l| l.as_str() != "6,2001:2::1,,1,1008");
    assert!(!lines.is_empty() && odd.is_none(), "{odd:?}");
    // ping partition 2's reflector (on a bare port: both families) from partition 1.
    let r = spawn_cmd_with(&p2, "reflect", "0", &["--count", "200"]);
    let target = format!("[2001:2::2]:{}", r.port);
    let out = run_prefixed(
        &p1,
        &["ping", &target, "--count", "200", "--pps", "1000", "--no-files", "--json", "--linger", "2s"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let run0 = &json(&stdout_of(&out))["runs"][0];
    assert_eq!(u(&run0["replies"], "received"), 200, "{run0}");
    let (code, stdout, _e) = finish(r, Duration::from_secs(60));
    assert_eq!(code, Some(0));
    assert!(stdout.contains("  [2001:2::1]:"), "{stdout}");
}

#[test]
#[ignore = "needs root"]
fn a_bench_runs_across_partitions_over_ipv6_with_the_raw_sender() {
    let _t = traffic();
    let out =
        run(&["bench", "rates", "--ipv6", "--raw", "--rates", "100M", "--duration", "0.3", "--size", "1080", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let rep = json(&stdout_of(&out));
    assert_eq!(rep["placement"]["kind"], "partitions");
    assert!(rep["placement"]["description"].as_str().unwrap().ends_with(", over IPv6"), "{}", rep["placement"]);
    assert_point_received(&rep["rows"][0]);
}
