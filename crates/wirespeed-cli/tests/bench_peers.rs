//! `bench compare` with the peers beyond iperf3: the bare recvmmsg loop as a receiver, tcpdump
//! as a recorder with the dd ceiling, and a tool list that names an unknown tool.

use crate::common;
use common::*;
use serde_json::Value;

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ws-peers-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn ok_doc(args: &[&str]) -> Value {
    let out = run(args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    json(&stdout)
}

/// The data records of a pcap file, counted from its record headers (little-endian files).
fn pcap_records(path: &std::path::Path) -> u64 {
    let b = std::fs::read(path).expect("read the pcap");
    assert!(b.len() >= 24, "no pcap header in {}", path.display());
    assert!(
        b[..4] == [0xd4, 0xc3, 0xb2, 0xa1] || b[..4] == [0x4d, 0x3c, 0xb2, 0xa1],
        "not a little-endian pcap: {:?}",
        &b[..4]
    );
    let (mut off, mut n) = (24usize, 0u64);
    while off + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[off + 8..off + 12].try_into().unwrap()) as usize;
        assert!(off + 16 + incl <= b.len(), "a record cut short in {}", path.display());
        off += 16 + incl;
        n += 1;
    }
    n
}

#[test]
fn bare_peer_receives_what_wirespeed_send_sent() {
    let _turn = traffic();
    let doc = ok_doc(&[
        "bench",
        "compare",
        "--loopback",
        "--tools",
        "wirespeed,bare",
        "--rates",
        "20M",
        "--sizes",
        "1080",
        "--duration",
        "500ms",
        "--json",
    ]);
    assert_eq!(doc["schema"], "wirespeed.bench.compare/1");
    assert_eq!(doc["tools"], serde_json::json!(["wirespeed", "bare"]));
    assert!(doc["versions"]["iperf3"].is_null(), "iperf3 did not run: {}", doc["versions"]);
    assert!(doc["versions"]["bare"].as_str().is_some_and(|v| v.contains("recvmmsg")), "{}", doc["versions"]);
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{doc}");
    let bare = runs.iter().find(|r| r["tool"] == "bare").expect("a bare run");
    let p = &bare["bare"];
    let (sent, received) = (u(p, "sent"), u(p, "received"));
    assert!(sent > 0, "{p}");
    // A tiny clean run on loopback: the floor loses nothing, and its count is the sender's.
    assert_eq!(received, sent, "{p}");
    assert_eq!(u(p, "missing"), 0, "{p}");
    assert_eq!(p["lossy"], false, "{p}");
    // The sender's end-of-stream messages are of another size: seen, not counted.
    assert!(u(&p["own"], "ignored") >= 1, "{p}");
    assert!(p["recv_cpu_ns_per_packet"].as_f64().is_some_and(|v| v > 0.0), "{p}");
    let cell = &doc["medians"][0];
    assert_eq!(u(&cell["bare"], "runs"), 1, "{cell}");
    assert_eq!(u(&cell["wirespeed"], "runs"), 1, "{cell}");
    let ratio = cell["received_ratios"]["bare"].as_f64().expect("ws/bare");
    let want = cell["wirespeed"]["received_bps"].as_f64().unwrap() / cell["bare"]["received_bps"].as_f64().unwrap();
    assert!((ratio - want).abs() < 1e-9, "{cell}");
}

#[test]
fn tool_lists_are_checked_in_one_line() {
    expect_fail(&["bench", "compare", "--tools", "wirespeed,ping"], 2, "unknown tool 'ping'");
    expect_fail(&["bench", "compare", "--tools", ","], 2, "no tools");
    expect_fail(&["bench", "compare", "--tools", "tcpdump"], 2, "give --record DIR");
    expect_fail(&["bench", "compare", "--tools", "iperf3", "--record", "/tmp/x"], 2, "does not record");
}

#[test]
fn compare_help_names_the_peers() {
    let h = String::from_utf8_lossy(&run(&["bench", "compare", "--help"]).stdout).to_string();
    for s in ["--tools", "bare", "--record", "tcpdump", "netsniff-ng", "dd", "of dd", "--keep"] {
        assert!(h.contains(s), "bench compare --help lacks '{s}':\n{h}");
    }
}

#[test]
#[ignore = "needs root"]
fn tcpdump_recorder_row_counts_its_file() {
    assert!(is_root(), "run as root (packet capture)");
    let ok = std::process::Command::new("tcpdump").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(ok, "tcpdump is not installed; install it (scripts/test.sh does: apt-get install -y tcpdump)");
    let _turn = traffic();
    let dir = tmpdir("rec");
    let d = dir.to_str().expect("utf-8 temp dir");
    let doc = ok_doc(&[
        "bench",
        "compare",
        "--loopback",
        "--record",
        d,
        "--dd-size",
        "64M",
        "--keep",
        "--tools",
        "wirespeed,tcpdump",
        "--rates",
        "20M",
        "--sizes",
        "1080",
        "--duration",
        "500ms",
        "--json",
    ]);
    let runs = doc["runs"].as_array().expect("runs");
    let run = runs.iter().find(|r| r["tool"] == "tcpdump").expect("a tcpdump run");
    let p = &run["tcpdump"];
    let file = std::path::PathBuf::from(p["own"]["file"].as_str().expect("the kept pcap"));
    assert!(file.starts_with(&dir), "{}", file.display());
    // The row's record count is what the file holds.
    assert_eq!(u(&p["own"], "pcap_records"), pcap_records(&file), "{p}");
    // Its received: the counter datagrams verify finds there (not the end-of-stream messages).
    let (sent, received) = (u(p, "sent"), u(p, "received"));
    assert!(sent > 0 && received <= pcap_records(&file), "{p}");
    assert_eq!(received, sent, "a tiny clean run: tcpdump stored every datagram: {p}");
    assert!(p["own"]["dropped_by_kernel"].as_u64().is_some(), "tcpdump's own count is kept: {p}");
    // wirespeed recorded too, and the disk's ceiling was measured into the same directory.
    assert!(runs.iter().any(|r| r["tool"] == "wirespeed" && r["wirespeed"]["received"].as_u64() > Some(0)), "{doc}");
    let rec = &doc["record"];
    assert!(rec["dd_bytes_per_s"].as_f64().is_some_and(|b| b > 0.0), "{rec}");
    assert!(rec["dd"]
        .as_array()
        .is_some_and(|v| !v.is_empty() && v[0]["command"].as_str().unwrap().starts_with("dd ")));
    assert!(!dir.join("dd.bin").exists(), "dd's file is removed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn search_finds_each_tools_zero_loss_rate() {
    let _turn = traffic();
    let doc = ok_doc(&[
        "bench",
        "compare",
        "--loopback",
        "--search",
        "--tools",
        "bare",
        "--sizes",
        "8800",
        "--duration",
        "500ms",
        "--json",
    ]);
    assert_eq!(doc["schema"], "wirespeed.bench.compare-search/1");
    assert_eq!(doc["stopped"], false);
    let results = doc["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{doc}");
    assert_eq!(results[0]["tool"], "bare");
    let searches = doc["searches"].as_array().expect("searches");
    assert_eq!(searches.len(), 1, "{doc}");
    let probes = searches[0]["result"]["probes"].as_array().expect("probes");
    // The first probe is the sender flat out, as bench max's search starts.
    assert!(!probes.is_empty() && probes[0]["asked_bps"].is_null(), "{doc}");
    for p in probes {
        let f = &p["point"];
        assert!(u(f, "received") <= u(f, "sent"), "{f}");
        assert_eq!(f["lossy"], u(f, "received") < u(f, "sent"), "{f}");
    }
    // The result is the highest loss-free achieved rate below every lossy one.
    let clean: Vec<f64> = probes
        .iter()
        .filter(|p| p["point"]["lossy"] == false)
        .map(|p| p["point"]["achieved_bps"].as_f64().unwrap())
        .collect();
    let lossy = probes
        .iter()
        .filter(|p| p["point"]["lossy"] == true)
        .map(|p| p["point"]["achieved_bps"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let want = clean.into_iter().filter(|&a| a < lossy).fold(None, |m: Option<f64>, a| Some(m.map_or(a, |m| m.max(a))));
    assert_eq!(results[0]["zero_loss_bps"].as_f64(), want, "{doc}");
}
