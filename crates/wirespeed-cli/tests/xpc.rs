//! `bench xpc` end to end through the real binary: a tiny run whose document carries every
//! documented field, with the exact counts (messages received, round trips, bytes pulled and
//! copied by the bulk transfers) and never a speed; bad input refused in one line.

use crate::common;
use common::*;
use serde_json::Value;

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number '{key}' in {v}"))
}

#[test]
fn bench_xpc_reports_both_transports_with_exact_counts() {
    let _turn = traffic();
    let out = run(&[
        "bench",
        "xpc",
        "--messages",
        "3000",
        "--size",
        "64",
        "--pings",
        "200",
        "--bulk",
        "3",
        "--repeat",
        "2",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench xpc failed: {err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(u(&doc["config"], "messages"), 3000);
    assert_eq!(u(&doc["config"], "size"), 64);
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 4, "two transports x two repetitions");
    for (i, r) in runs.iter().enumerate() {
        let rep = (i / 2) as u64;
        assert_eq!(u(r, "rep"), rep);
        // The order alternates: xpc first in even repetitions, the socket first in odd ones.
        let first = if rep % 2 == 0 { "xpc" } else { "unix_dgram" };
        let t = r["transport"].as_str().expect("transport");
        assert_eq!(t == first, u(r, "order") == 0, "{r}");
        assert_eq!(u(r, "received"), 3000, "every message arrived: {r}");
        assert_eq!(u(r, "round_trips"), 200);
        for k in ["msgs_per_s", "send_cpu_ns", "recv_cpu_ns", "rtt_p50_us", "rtt_p99_us"] {
            assert!(f(r, k) > 0.0, "{k} in {r}");
        }
        assert!(f(r, "rtt_p99_us") >= f(r, "rtt_p50_us"));
    }
    let sum = doc["summary"].as_array().expect("summary");
    let names: Vec<&str> = sum.iter().map(|s| s["transport"].as_str().expect("name")).collect();
    assert_eq!(names, ["xpc", "unix_dgram"]);
    let bulk = doc["bulk_runs"].as_array().expect("bulk_runs");
    assert_eq!(bulk.len(), 4);
    for b in bulk {
        assert_eq!(u(b, "transfers"), 3);
        let total = 3 * (1 << 20);
        match b["mode"].as_str().expect("mode") {
            // Both buffers are 128-byte aligned and 1 MiB is whole cache lines: all pulled.
            "rendezvous" => assert_eq!((u(b, "bytes_pulled"), u(b, "bytes_copied")), (total, 0), "{b}"),
            "out_of_line" => assert_eq!((u(b, "bytes_pulled"), u(b, "bytes_copied")), (0, total), "{b}"),
            m => panic!("unknown mode {m}"),
        }
    }
    assert_eq!(doc["bulk_mb_per_s"].as_array().expect("medians").len(), 2);
}

#[test]
fn bench_xpc_table_and_bad_input() {
    let out = run(&["bench", "xpc", "--messages", "500", "--pings", "50", "--bulk", "0", "--repeat", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("transport      msgs/s   CPU/msg send   CPU/msg recv"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("xpc ")) && text.lines().any(|l| l.starts_with("unix_dgram ")));
    assert!(!text.contains("1 MiB transfers"), "no bulk phase with --bulk 0");
    expect_fail(&["bench", "xpc", "--size", "0"], 2, "--size");
    expect_fail(&["bench", "xpc", "--messages", "0"], 2, "--messages");
}
