//! Runs on real hosts over ssh, end to end: partitions that each run an OpenSSH server stand in
//! for the hosts, and the command under test runs in a partition of its own as the controller
//! (see `common::ssh`). The ledger is exact against an nftables rule on the far receiver; a
//! controller killed outright leaves nothing running on any host; no argument reaches a far
//! shell; every way ssh can fail is one line naming the host and the fix.

use crate::common;
use common::ssh::SshLab;
use common::*;
use serde_json::Value;
use std::time::Duration;

/// The sequence numbers the rule on the receiving host drops: of 8800-byte counter datagrams,
/// whose first 64-bit word is the sequence number times 1100 (words per datagram).
const DROPPED: [u64; 3] = [100, 200, 300];

/// Drop datagrams `seqs` of every 8800-byte counter stream arriving at host `id`, counted
/// (replacing the rule there before).
fn drop_rule(lab: &SshLab, id: u32, seqs: &[u64]) {
    let _ = lab.exec(id, &["nft", "delete", "table", "inet", "wsdrop"]);
    let words: Vec<String> = seqs.iter().map(|s| (s * 1100).to_string()).collect();
    let rules = format!(
        "table inet wsdrop {{\n chain in {{\n  type filter hook input priority raw; policy accept;\n  \
         udp length 8808 @th,64,64 {{ {} }} counter drop\n }}\n}}\n",
        words.join(", ")
    );
    let path = lab.file("drop.nft");
    std::fs::write(&path, rules).expect("rules");
    let out = lab.exec(id, &["nft", "-f", &path]);
    assert!(out.status.success(), "nft: {}", String::from_utf8_lossy(&out.stderr));
}

/// How many datagrams the rule on host `id` dropped.
fn dropped(lab: &SshLab, id: u32) -> u64 {
    let out = lab.exec(id, &["nft", "list", "table", "inet", "wsdrop"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.split("counter packets ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no counter in {text}"))
}

fn ok(lab: &SshLab, args: &[&str]) -> (Value, String) {
    let out = lab.run(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{args:?}:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    (json(&String::from_utf8_lossy(&out.stdout)), err)
}

/// A point's ledger against the rule: the datagrams it dropped of this stream are exactly
/// those of `seqs` the sender reached; anything more is on the kernel's counters. Returns how
/// many the rule dropped of it.
fn assert_exact(p: &Value, seqs: &[u64]) -> u64 {
    let sent = u(p, "sent");
    let expect = seqs.iter().filter(|s| **s < sent).count() as u64;
    assert_eq!(p["end_of_stream"], true, "{p}");
    assert_eq!(u(p, "received") + u(p, "missing"), sent, "{p}");
    let kernel = p["kernel_socket_drops"].as_u64().unwrap_or(0) + u(p, "softnet_dropped");
    assert!(u(p, "missing") >= expect && u(p, "missing") <= expect + kernel, "{expect} dropped by the rule: {p}");
    assert_eq!(u(p, "lost"), u(p, "missing"), "{p}");
    expect
}

#[test]
#[ignore = "needs root"]
fn sweep_and_max_across_two_ssh_hosts_count_a_far_drop_rule_exactly() {
    let _turn = traffic();
    let lab = SshLab::new("hsw", 2);
    drop_rule(&lab, 2, &DROPPED);
    let (h1, h2) = (lab.host(1), lab.host(2));
    let dir = TempDir::new("hosts-sweep");
    let (doc, _) = ok(
        &lab,
        &[
            "bench",
            "sweep",
            "--tx",
            &h1,
            "--rx",
            &h2,
            "--rates",
            "100M,200M",
            "--sizes",
            "8800",
            "--duration",
            "300ms",
            "--json",
            "-o",
            dir.path(),
        ],
    );
    let pl = &doc["placement"];
    assert_eq!(pl["kind"], "hosts", "{pl}");
    assert_eq!(pl["hosts"], serde_json::json!([h1, h2]), "{pl}");
    assert!(pl["description"].as_str().unwrap_or("").contains("at 198.19.0.2"), "{pl}");
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{doc}");
    let mut expected: u64 = rows.iter().map(|r| assert_exact(r, &DROPPED)).sum();
    // The warm-up point before the sweep is a stream of its own, long enough to reach them all.
    expected += DROPPED.len() as u64;
    assert_eq!(dropped(&lab, 2), expected, "the rule's count is the ledgers' loss plus the warm-up's");
    let html = std::fs::read_to_string(dir.0.join("report.html")).expect("report.html");
    assert!(html.contains("hosts over ssh"), "the report names where it ran");

    // bench max: a probe that reaches sequence number 600 (above about 141 Mb/s in 300 ms)
    // loses exactly that one; one below it loses nothing, so the search has a limit to find.
    drop_rule(&lab, 2, &[600]);
    let (doc, _) = ok(
        &lab,
        &[
            "bench",
            "max",
            "--tx",
            &h1,
            "--rx",
            &h2,
            "--duration",
            "300ms",
            "--repeat",
            "1",
            "--lo",
            "100M",
            "--hi",
            "400M",
            "--precision",
            "20%",
            "--json",
        ],
    );
    let probes: Vec<&Value> = doc["searches"][0]["probes"].as_array().expect("probes").iter().collect();
    assert!(!probes.is_empty(), "{doc}");
    let expected: u64 = probes.iter().map(|p| assert_exact(&p["point"], &[600])).sum::<u64>() + 1;
    assert_eq!(dropped(&lab, 2), expected, "probes plus the warm-up: {doc}");
    assert!(
        probes.iter().any(|p| p["point"]["lossy"] == false) && probes.iter().any(|p| p["point"]["lossy"] == true),
        "{doc}"
    );
    lab.assert_nothing_left();
}
