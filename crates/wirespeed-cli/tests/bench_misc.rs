//! `bench pacing`, `bench formats` and `bench latency` end to end through the real binary:
//! tiny cases on loopback whose documents carry every documented field, with the exact values
//! that do not depend on timing; bad input refused in one line; sockperf missing said in one.
//! No assertion is about how fast anything was.

use crate::common;
use common::*;
use serde_json::Value;
use std::process::Command;

fn doc_of(args: &[&str]) -> Value {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {err}");
    json(&String::from_utf8_lossy(&out.stdout))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number '{key}' in {v}"))
}

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ws-bench-misc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn formats_lists_every_format_with_its_figures() {
    let dir = tmpdir("formats");
    let d = dir.display().to_string();
    let doc = doc_of(&[
        "bench",
        "formats",
        "--reps",
        "1",
        "--bytes",
        "1M",
        "--recv-cpu",
        "1352@1080,1526@8800",
        "--json",
        "-o",
        &d,
    ]);
    assert_eq!(doc["schema"], "wirespeed.bench.formats/1");
    assert_eq!((u(&doc, "reps"), u(&doc, "bytes_per_loop")), (1, 1 << 20));
    assert!(doc["avx2"].is_boolean());
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 24, "the default list: 8 counters and 16 instrument formats and fills");
    for family in ["counter", "seqfield", "vdif", "vtp", "mark5b", "spead"] {
        assert!(rows.iter().any(|r| r["spec"].as_str().unwrap().starts_with(family)), "{family} missing");
    }
    for r in rows {
        let bytes = u(r, "bytes");
        // A loop handles 1 MiB of payload, and never fewer than 1,000 datagrams.
        assert_eq!(u(r, "datagrams"), ((1u64 << 20) / bytes).max(1000), "{r}");
        assert_eq!(r["build_runs_ns"].as_array().unwrap().len(), 1);
        assert_eq!(r["check_runs_ns"].as_array().unwrap().len(), 1);
        assert_eq!(f(r, "build_ns"), r["build_runs_ns"][0].as_f64().unwrap(), "the median of one loop is the loop");
        for k in ["build_ns", "check_ns", "build_gbps", "check_gbps", "check_share"] {
            assert!(f(r, k) > 0.0, "{k}: {r}");
        }
        assert!((f(r, "check_gbps") - bytes as f64 / f(r, "check_ns")).abs() < 1e-9, "{r}");
        // The share divides by the receiver figure of the nearest size.
        let want = if bytes.abs_diff(1080) < bytes.abs_diff(8800) { 1352.0 } else { 1526.0 };
        assert_eq!(f(r, "recv_cpu_ns"), want, "{r}");
        assert!(r["name"].is_string());
    }
    let bytes_of = |spec: &str| u(rows.iter().find(|r| r["spec"] == spec).expect(spec), "bytes");
    assert_eq!(bytes_of("counter,size=1080,order=be"), 1080);
    assert_eq!(bytes_of("vdif,frame=8032,fps=32000,fill=tvg"), 8032);
    assert_eq!(bytes_of("vtp,frame=8032,fps=32000,fill=counter"), 8040);
    assert_eq!(bytes_of("mark5b,fps=25600,fill=tvg"), 10016);
    assert_eq!(bytes_of("mark5b,fps=25600,halves=1,psn=1,fill=tvg"), 5016);
    assert_eq!(bytes_of("spead,heap=65536,payload=8192,fill=counter"), 8256);
    assert_eq!(bytes_of("spead,heap=4096,payload=1024,fill=counter"), 1088);
    for name in ["formats.txt", "formats.csv", "formats.json"] {
        assert!(dir.join(name).is_file(), "{name} written");
    }
    let csv = std::fs::read_to_string(dir.join("formats.csv")).unwrap();
    assert_eq!(csv.lines().count(), 25);
    // One format given: only it.
    let doc = doc_of(&[
        "bench",
        "formats",
        "--format",
        "counter,size=8800,order=le",
        "--reps",
        "3",
        "--bytes",
        "1M",
        "--json",
    ]);
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((u(&rows[0], "bytes"), rows[0]["check_runs_ns"].as_array().unwrap().len()), (8800, 3));
    assert!(rows[0]["check_share"].is_null());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn formats_bad_input_is_one_line_and_exit_2() {
    expect_fail(&["bench", "formats", "--reps", "0"], 2, "for '--reps <REPS>': 0 is out of range: give 1..101");
    expect_fail(&["bench", "formats", "--bytes", "1K"], 2, "for '--bytes <BYTES>': 1024 is out of range");
    expect_fail(&["bench", "formats", "--format", "counter"], 2, "no fixed datagram size");
    expect_fail(&["bench", "formats", "--format", "nosuch"], 2, "--format nosuch:");
    expect_fail(&["bench", "formats", "--recv-cpu", "fast"], 2, "is not NS@BYTES");
    expect_fail(&["bench", "formats", "--recv-cpu=0@1080"], 2, "must be above 0");
}

#[test]
fn pacing_on_loopback_reports_every_case_and_run() {
    let _t = traffic();
    let dir = tmpdir("pacing");
    let d = dir.display().to_string();
    let doc = doc_of(&[
        "bench",
        "pacing",
        "--loopback",
        "--cases",
        "1080@1000pps,8800@10M+gso",
        "--no-iperf3",
        "--duration",
        "1200ms",
        "--repeat",
        "2",
        "--json",
        "-o",
        &d,
    ]);
    assert_eq!(doc["schema"], "wirespeed.bench.pacing/1");
    assert_eq!(doc["placement"]["kind"], "loopback");
    assert_eq!((f(&doc, "duration_s"), u(&doc, "repeat"), f(&doc, "window_target")), (1.2, 2, 0.005));
    assert_eq!(doc["stopped"], false);
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["label"], "1080@1000pps");
    assert_eq!(rows[1]["label"], "8800@10M+gso");
    assert_eq!(f(&rows[0], "asked_pps"), 1000.0);
    assert!((f(&rows[1], "asked_pps") - 10e6 / (8800.0 * 8.0)).abs() < 1e-9);
    assert_eq!((rows[0]["case"]["size"].as_u64(), rows[0]["case"]["gso"].as_bool()), (Some(1080), Some(false)));
    assert_eq!(rows[1]["case"]["gso"], true);
    for (i, row) in rows.iter().enumerate() {
        let runs = row["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 2, "{row}");
        let mut lost = 0;
        let mut slips = 0;
        for r in runs {
            // Every datagram sent was received (a loopback at these rates), the end message
            // arrived, and the row adds the runs up.
            assert_eq!(u(r, "received"), u(r, "sent"), "{r}");
            assert_eq!(u(r, "lost"), 0, "{r}");
            assert_eq!(r["end_of_stream"], true, "{r}");
            assert!(u(r, "sent") > 0 && r["rate_ratio"].is_number(), "{r}");
            assert_eq!(r["gso_used"], i == 1, "{r}");
            assert!(r["window"].is_array(), "a 1.2 s run has a 1 s window: {r}");
            lost += u(r, "lost");
            slips += u(r, "slips");
        }
        assert_eq!((u(row, "lost"), u(row, "slips")), (lost, slips));
        let lo = runs.iter().map(|r| r["window"][0].as_f64().unwrap()).fold(f64::INFINITY, f64::min);
        assert_eq!(f(row, "window_lo"), lo);
        assert!(row["within_target"].is_boolean());
    }
    assert!(dir.join("pacing.txt").is_file() && dir.join("pacing.json").is_file());
    let txt = std::fs::read_to_string(dir.join("pacing.txt")).unwrap();
    assert!(txt.contains("| 1080 | 1000pps |") && txt.contains("| 8800 | 10M --gso |"), "{txt}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pacing_bad_input_is_one_line_and_exit_2() {
    expect_fail(&["bench", "pacing", "--cases", "8800"], 2, "write SIZE@RATE");
    expect_fail(&["bench", "pacing", "--cases", "8801@1G"], 2, "multiple of 8");
    expect_fail(&["bench", "pacing", "--cases", "1080@max"], 2, "max is not paced");
    expect_fail(&["bench", "pacing", "--cases", "1080@fast"], 2, "for '--cases <CASES>': '1080@fast'");
    expect_fail(&["bench", "pacing", "--cases", ","], 2, "--cases is empty");
    expect_fail(&["bench", "pacing", "--duration", "0"], 2, "--duration");
    expect_fail(&["bench", "pacing", "--repeat", "0"], 2, "for '--repeat <REPEAT>': '0'");
}

#[test]
fn latency_on_loopback_runs_both_loops_in_alternating_order() {
    let _t = traffic();
    let doc = doc_of(&[
        "bench",
        "latency",
        "--loopback",
        "--tools",
        "ws-open,ws-closed",
        "--pps",
        "1000",
        "--duration",
        "1",
        "--repeat",
        "2",
        "--json",
    ]);
    assert_eq!(doc["schema"], "wirespeed.bench.latency/2");
    assert_eq!((f(&doc, "pps"), u(&doc, "size"), f(&doc, "duration_s")), (1000.0, 64, 1.0));
    assert_eq!((u(&doc, "sockperf_duration_s"), u(&doc, "repeat")), (1, 2));
    assert_eq!(doc["tools"], serde_json::json!(["ws-open", "ws-closed"]));
    assert!(doc["sockperf_version"].is_null(), "no sockperf tool, no sockperf needed");
    assert_eq!(doc["placements"].as_array().unwrap().len(), 1);
    assert_eq!(doc["placements"][0]["kind"], "loopback");
    let runs = doc["runs"].as_array().expect("runs");
    let order: Vec<(&str, u64)> = runs.iter().map(|r| (r["tool"].as_str().unwrap(), u(r, "repeat"))).collect();
    assert_eq!(order, vec![("ws-open", 0), ("ws-closed", 0), ("ws-closed", 1), ("ws-open", 1)]);
    for r in runs {
        assert_eq!(r["path"], "loopback");
        let (sent, replies, lost) = (u(r, "sent"), u(r, "replies"), u(r, "lost"));
        assert_eq!(replies + lost, sent, "every probe is a reply or lost: {r}");
        assert_eq!(u(r, "observations"), replies, "{r}");
        if r["tool"] == "ws-open" {
            assert_eq!(sent, 1000, "open loop: every slot of 1 s at 1000/s is sent: {r}");
            assert!(r["skipped"].is_null());
        } else {
            assert_eq!(sent + u(r, "skipped"), 1000, "closed loop: sent or skipped: {r}");
            assert!(r["command"].as_str().unwrap().contains("--closed-loop"));
        }
        let rtt = &r["rtt_us"];
        let keys = ["min", "p50", "p90", "p99", "p999", "p9999", "max"];
        let v: Vec<f64> = keys.iter().map(|k| f(rtt, k)).collect();
        assert!(v[0] > 0.0 && v.windows(2).all(|w| w[0] <= w[1]), "percentiles in order: {rtt}");
        assert!(r["client_cpu_ns_per_msg"].is_number() && r["ping_cpu_ns_per_probe"].is_number(), "{r}");
    }
    let summary = doc["summary"].as_array().expect("summary");
    assert_eq!(summary.len(), 2);
    for s in summary {
        assert_eq!(u(s, "runs"), 2, "{s}");
        let tool_runs: Vec<&Value> = runs.iter().filter(|r| r["tool"] == s["tool"]).collect();
        assert_eq!(u(s, "lost"), tool_runs.iter().map(|r| u(r, "lost")).sum::<u64>());
    }
    assert_eq!(doc["ratios"], serde_json::json!([]), "no sockperf, nothing to divide by");
    assert_eq!(doc["stopped"], false);
}

#[test]
fn latency_without_sockperf_is_one_line_and_exit_1() {
    // PATH names an empty directory: sockperf cannot be found; the binary runs by absolute path.
    let empty = tmpdir("empty-path");
    std::fs::create_dir_all(&empty).expect("empty dir");
    let out = Command::new(bin())
        .args(["bench", "latency", "--duration", "1", "--repeat", "1"])
        .env("PATH", &empty)
        .output()
        .expect("run wirespeed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end(), "wirespeed: sockperf is not installed: apt-get install sockperf");
    assert!(out.stdout.is_empty(), "nothing measured, nothing printed: {}", String::from_utf8_lossy(&out.stdout));
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn latency_bad_input_is_one_line_and_exit_2() {
    expect_fail(&["bench", "latency", "--tools", "iperf3"], 2, "unknown tool 'iperf3'");
    expect_fail(&["bench", "latency", "--tools", ","], 2, "--tools is empty");
    expect_fail(&["bench", "latency", "--paths", "moon"], 2, "unknown path 'moon'");
    expect_fail(&["bench", "latency", "--pps", "0"], 2, "out of range");
    expect_fail(&["bench", "latency", "--pps", "fast"], 2, "is not a message rate");
    expect_fail(&["bench", "latency", "--size", "10"], 2, "--size");
    expect_fail(&["bench", "latency", "--duration", "0"], 2, "--duration");
    expect_fail(&["bench", "latency", "--repeat", "101"], 2, "for '--repeat <REPEAT>': '101'");
    expect_fail(&["bench", "latency", "--loopback", "--paths", "loopback"], 2, "cannot be used with");
}

#[test]
#[ignore = "needs root"]
fn pacing_and_latency_across_a_partition_pair() {
    assert!(is_root(), "run as root (or leave out --include-ignored)");
    let _t = traffic();
    let doc = doc_of(&["bench", "pacing", "--cases", "1080@1000pps", "--duration", "1", "--repeat", "1", "--json"]);
    assert_eq!(doc["placement"]["kind"], "partitions");
    let prefix = doc["placement"]["prefix"].as_str().expect("prefix").to_string();
    let r = &doc["rows"][0]["runs"][0];
    assert_eq!(u(r, "received"), u(r, "sent"), "{r}");
    assert_partitions_gone(&prefix);
    let doc = doc_of(&[
        "bench",
        "latency",
        "--paths",
        "partition",
        "--tools",
        "ws-open",
        "--pps",
        "1000",
        "--duration",
        "1",
        "--repeat",
        "1",
        "--json",
    ]);
    let pl = &doc["placements"][0];
    assert_eq!(pl["kind"], "partitions");
    let r = &doc["runs"][0];
    assert_eq!(r["path"], "partitions");
    assert_eq!(u(r, "sent"), 1000);
    assert_eq!(u(r, "replies") + u(r, "lost"), 1000, "{r}");
    assert_partitions_gone(pl["prefix"].as_str().expect("prefix"));
}

#[test]
fn capture_runs_two_builds_alternately_and_counts_every_datagram() {
    let _t = traffic();
    // The same binary as A and B: the document's shape, not a difference, is under test.
    let doc = doc_of(&["bench", "capture", "--loopback", "--count", "2000", "--repeat", "2", "--ab", bin(), "--json"]);
    assert_eq!(doc["schema"], "wirespeed.bench.capture/1");
    assert_eq!((u(&doc, "size"), u(&doc, "count"), u(&doc, "repeat")), (1024, 2000, 2));
    assert_eq!(doc["fixed_size"], false);
    let runs = doc["runs"].as_array().expect("runs");
    let order: Vec<(&str, u64)> = runs.iter().map(|r| (r["build"].as_str().unwrap(), u(r, "round"))).collect();
    assert_eq!(order, vec![("A", 0), ("B", 0), ("A", 1), ("B", 1)]);
    for r in runs {
        assert_eq!((u(r, "sent"), u(r, "received"), u(r, "lost")), (2000, 2000, 0), "{r}");
        assert!(f(r, "cpu_ns_per_packet") > 0.0, "{r}");
    }
    assert_eq!(doc["all_received"], true);
    let builds = doc["builds"].as_array().expect("builds");
    assert_eq!(builds.len(), 2);
    assert!(builds.iter().all(|b| u(b, "runs") == 2));
    assert!(doc["ratio_of_medians"].is_number() && doc["median_pairwise_ratio"].is_number());
    // One build alone: no ratio.
    let doc = doc_of(&["bench", "capture", "--loopback", "--count", "1000", "--repeat", "1", "--fixed-size", "--json"]);
    assert_eq!(doc["builds"].as_array().unwrap().len(), 1);
    assert_eq!(doc["fixed_size"], true);
    assert!(doc["ratio_of_medians"].is_null());
}

#[test]
fn capture_bad_input_is_one_line_and_exit_2() {
    expect_fail(&["bench", "capture", "--count", "10"], 2, "for '--count <COUNT>': 10 is out of range: give 1000..");
    expect_fail(&["bench", "capture", "--size", "1001"], 2, "for '--size <BYTES>': 1001 is not a counter datagram");
    expect_fail(&["bench", "capture", "--repeat", "0"], 2, "for '--repeat <REPEAT>': '0'");
    expect_fail(&["bench", "capture", "--ab", "/nonexistent/wirespeed"], 2, "--ab /nonexistent/wirespeed");
}
