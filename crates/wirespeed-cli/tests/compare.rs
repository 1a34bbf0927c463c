//! `bench compare` end to end through the real binary and the real iperf3: loopback always, two
//! partitions when root; iperf3 missing, bad input and a stop signal are one line each.

use crate::common;
use common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// These tests compare against the real iperf3: without it they cannot check anything, and a
/// test that passes without checking would say the comparison works when nobody looked.
fn require_iperf3(test: &str) {
    let ok = Command::new("iperf3").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(ok, "{test}: iperf3 is not installed; install it (scripts/test.sh does: apt-get install -y iperf3)");
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number '{key}' in {v}"))
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ws-compare-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Every run of the document is sane in its own tool's terms, the tools alternate point by
/// point, and each (rate, size) has both tools' medians.
fn check_doc(doc: &Value, rates: &[f64], sizes: &[u64], secs: f64) {
    assert_eq!(doc["schema"], "wirespeed.bench.compare/1");
    assert!(doc["versions"]["iperf3"].as_str().is_some_and(|v| v.starts_with("iperf 3.")), "{}", doc["versions"]);
    assert_eq!(doc["stopped"], false);
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), rates.len() * sizes.len() * 2, "two tools at every point");
    let send_cpus = &doc["placement"]["send_cpus"];
    let recv_cpus = &doc["placement"]["recv_cpus"];
    for (i, pair) in runs.chunks(2).enumerate() {
        // Alternating order: A B, B A, A B, ...
        let want = if i % 2 == 0 { ["wirespeed", "iperf3"] } else { ["iperf3", "wirespeed"] };
        assert_eq!([pair[0]["tool"].as_str().unwrap(), pair[1]["tool"].as_str().unwrap()], want, "point {i}");
        assert_eq!(pair[0]["rate_index"], pair[1]["rate_index"]);
    }
    for (n, r) in runs.iter().enumerate() {
        assert_eq!(u(r, "seq"), n as u64 + 1);
        let tool = r["tool"].as_str().unwrap();
        let p = &r[tool];
        let (sent, received) = (u(p, "sent"), u(p, "received"));
        assert!(sent > 0, "{tool} sent nothing: {p}");
        assert!(received <= sent, "{tool} received more than was sent: {p}");
        assert_eq!(u(p, "missing"), sent - received, "{p}");
        let size = u(p, "size") as f64;
        assert!(sizes.contains(&(size as u64)));
        let asked = f(p, "asked_bps");
        assert_eq!(asked, rates[u(r, "rate_index") as usize]);
        // Achieved is the sender's count over its own sending time, never above the asked rate.
        let achieved = f(p, "achieved_bps");
        let from_count = sent as f64 * size * 8.0 / f(p, "send_elapsed_s");
        assert!((achieved / from_count - 1.0).abs() < 1e-3, "{tool}: achieved {achieved} vs {from_count}: {p}");
        assert!(achieved <= asked * 1.02, "{tool}: achieved {achieved} above the asked {asked}");
        // Both count against the same sending time, so received <= achieved.
        assert!(f(p, "received_bps") <= achieved * (1.0 + 1e-9), "{p}");
        assert!(sent as f64 <= asked / (size * 8.0) * secs * 1.02 + 64.0, "{tool} sent more than asked for: {p}");
        match tool {
            "wirespeed" => {
                if p["end_of_stream"] == true {
                    // The ledger: every sequence number is received or lost.
                    assert_eq!(received + u(p, "lost"), sent, "{p}");
                }
                assert_eq!(&p["send_cpus"], send_cpus);
            }
            "iperf3" => {
                // iperf3's own count sees gaps only, never more than is missing.
                assert!(u(p, "lost") <= sent, "{p}");
                assert_eq!(p["version"], doc["versions"]["iperf3"]);
                assert_eq!(&p["send_cpus"], send_cpus);
                assert_eq!(&p["recv_cpus"], recv_cpus);
                assert!(f(p, "send_cpu_percent") > 0.0, "iperf3 reported no CPU use: {p}");
                assert!(p["recv_cpu_ns_per_packet"].as_f64().is_some() || received == 0, "{p}");
            }
            other => panic!("unknown tool {other}"),
        }
    }
    let cells = doc["medians"].as_array().expect("medians");
    assert_eq!(cells.len(), rates.len() * sizes.len());
    for c in cells {
        let (w, p) = (&c["wirespeed"], &c["iperf3"]);
        assert_eq!((u(w, "runs"), u(p, "runs")), (1, 1), "{c}");
        let ratio = f(c, "received_ratio");
        assert!((ratio - f(w, "received_bps") / f(p, "received_bps")).abs() < 1e-9, "{c}");
    }
}

#[test]
fn compare_on_loopback_writes_table_csv_json_and_plot() {
    require_iperf3("compare_on_loopback_writes_table_csv_json_and_plot");
    let _turn = traffic();
    let dir = tmpdir("lo");
    let d = dir.to_str().expect("utf-8 temp dir");
    let args =
        ["bench", "compare", "--loopback", "--rates", "200M", "--sizes", "1080,8800", "--duration", "1", "-o", d];
    let out = run(&args);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The table: both tools' columns and one row per (rate, size).
    assert!(stdout.contains("wirespeed") && stdout.contains("iperf3") && stdout.contains("ws/iperf3"), "{stdout}");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.matches('|').count() == 3 && l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    let doc = json(&std::fs::read_to_string(dir.join("compare.json")).expect("compare.json"));
    assert_eq!(doc["placement"]["kind"], "loopback");
    check_doc(&doc, &[200e6], &[1080, 8800], 1.0);
    let csv = std::fs::read_to_string(dir.join("compare.csv")).expect("compare.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 5, "{csv}");
    let width = lines[0].split(',').count();
    assert!(lines.iter().all(|l| l.split(',').count() == width), "{csv}");
    assert_eq!(lines.iter().filter(|l| l.split(',').nth(2) == Some("iperf3")).count(), 2, "{csv}");
    assert_eq!(lines.iter().filter(|l| l.split(',').nth(2) == Some("wirespeed")).count(), 2, "{csv}");
    let txt = std::fs::read_to_string(dir.join("compare.txt")).expect("compare.txt");
    assert!(txt.contains("[  4/4]") && txt.contains("ws/iperf3"), "{txt}");
    let png = std::fs::read(dir.join("compare.png")).expect("compare.png");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "a real PNG");
    let svg = std::fs::read_to_string(dir.join("compare.svg")).expect("compare.svg");
    for s in ["<svg", "wirespeed, 1080 B", "iperf3, 8800 B"] {
        assert!(svg.contains(s), "compare.svg lacks '{s}'");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs root"]
fn compare_across_partitions() {
    require_iperf3("compare_across_partitions");
    let _turn = traffic();
    let out = run(&["bench", "compare", "--rates", "300M", "--sizes", "8800", "--duration", "1", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["placement"]["kind"], "partitions", "{doc}");
    check_doc(&doc, &[300e6], &[8800], 1.0);
    // iperf3's server listened on partition 2's address: it received across the veth link.
    let p = &doc["runs"].as_array().unwrap().iter().find(|r| r["tool"] == "iperf3").expect("an iperf3 run")["iperf3"];
    assert!(u(p, "received") > 0, "{p}");
    let prefix = doc["placement"]["prefix"].as_str().expect("prefix").to_string();
    assert_partitions_gone(&prefix);
    assert!(!std::path::Path::new(&format!("/run/wirespeed/{prefix}.json")).exists());
}

#[test]
fn compare_without_iperf3_is_one_line_and_exit_1() {
    // PATH names an empty directory: iperf3 cannot be found; the binary runs by absolute path.
    let empty = tmpdir("empty-path");
    std::fs::create_dir_all(&empty).expect("empty dir");
    let out = Command::new(bin())
        .args(["bench", "compare", "--rates", "1G", "--sizes", "8800", "--duration", "1"])
        .env("PATH", &empty)
        .output()
        .expect("run wirespeed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end(), "wirespeed: iperf3 is not installed: apt-get install iperf3");
    assert!(out.stdout.is_empty(), "nothing measured, nothing printed: {}", String::from_utf8_lossy(&out.stdout));
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn compare_bad_input_is_one_line_and_exit_2() {
    expect_fail(&["bench", "compare", "--rates", "1G,fast"], 2, "cannot read rate 'fast'");
    expect_fail(&["bench", "compare", "--rates", ","], 2, "no rates");
    expect_fail(&["bench", "compare", "--rates", "9G:1G:1G"], 2, "runs downwards");
    expect_fail(&["bench", "compare", "--rates", "1G:9G"], 2, "FROM:TO:STEP");
    expect_fail(&["bench", "compare", "--rates", "1G:9G:100kpps"], 2, "mixes units");
    expect_fail(&["bench", "compare", "--rates", "1G:9G:1M"], 2, "more than 200 rates");
    expect_fail(&["bench", "compare", "--sizes", "1081"], 2, "multiples of 8");
    expect_fail(&["bench", "compare", "--sizes", "8"], 2, "from 16");
    expect_fail(&["bench", "compare", "--sizes", ","], 2, "--sizes is empty");
    expect_fail(&["bench", "compare", "--duration", "1.5"], 2, "whole seconds");
    expect_fail(&["bench", "compare", "--duration", "500ms"], 2, "whole seconds");
    expect_fail(&["bench", "compare", "--duration", "soon"], 2, "cannot read duration");
    expect_fail(&["bench", "compare", "--repeat", "0"], 2, "--repeat");
    expect_fail(&["bench", "compare", "--rcvbuf", "lots"], 2, "cannot read size");
}

#[test]
fn compare_help_teaches() {
    let h = String::from_utf8_lossy(&run(&["bench", "compare", "--help"]).stdout).to_string();
    for s in [
        "iperf3",
        "same CPU",
        "alternates",
        "loss %",
        "rx ns/pkt",
        "ws/iperf3",
        "lost_packets",
        "rmem_max",
        "sockperf is not compared",
        "1G:9G:1G",
        "Try:",
        "Exit codes",
    ] {
        assert!(h.contains(s), "bench compare --help lacks '{s}':\n{h}");
    }
}

#[test]
fn compare_stopped_by_a_signal_reports_and_cleans_up() {
    require_iperf3("compare_stopped_by_a_signal_reports_and_cleans_up");
    let _turn = traffic();
    // A distinctive buffer size marks this run's children (wirespeed recv --rcvbuf, iperf3 -w).
    let mut args = vec![
        "bench",
        "compare",
        "--rates",
        "100M,100M,100M",
        "--sizes",
        "8800",
        "--duration",
        "1",
        "--rcvbuf",
        "3145760",
    ];
    if !is_root() {
        args.push("--loopback");
    }
    // Stopped once the first run is printed (after the warm-ups): five runs of a second each are
    // still to come, so the signal lands part-way whatever the host's load, where a guessed delay
    // could land in the warm-ups or after the last run.
    let first_run = |l: &str| l.starts_with('[') && l.contains("/6]");
    let out = run_then_term_when(&args, first_run, Duration::from_secs(120));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let n = stopped_after(&stderr);
    assert!((1..6).contains(&n) && stderr.contains("of 6 runs"), "{stderr}");
    // The runs measured before the signal are printed, each complete, and the table follows.
    assert_eq!(stdout.lines().filter(|l| l.starts_with('[') && l.contains("/6]")).count(), n, "{stdout}");
    assert!(stdout.contains("(stopped early"), "{stdout}");
    // No sender, receiver, iperf3 client or server of this run is left, and no partition.
    assert_none_left("3145760", "bench compare", std::time::Duration::from_millis(300));
    if is_root() {
        let head = stdout.lines().next().unwrap_or_default();
        assert_partitions_gone(partitions_named_in(head).expect("a prefix"));
    }
}
