//! `bench pacing` against iperf3: the per-tool figures (sender and receiver CPU per datagram,
//! achieved rate, worst 1 s window) are in the JSON beside the fields it always had, iperf3 can
//! be left out, and bad input is refused in one line. Tiny cases; no assertion is about how
//! fast anything was.

use crate::common;
use common::*;
use serde_json::Value;

fn doc_of(args: &[&str]) -> Value {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed: {err}");
    json(&String::from_utf8_lossy(&out.stdout))
}

/// Two figures equal to a billionth of their size: the JSON carries shortest round-trip
/// decimals, so a quotient recomputed here from printed medians may differ in the last bit.
fn assert_close(got: f64, want: f64, ctx: &Value) {
    assert!((got - want).abs() <= 1e-9 * want.abs().max(1e-9), "{got} is not {want}: {ctx}");
}

fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number '{key}' in {v}"))
}

/// The fields every row has, iperf3 or not.
fn assert_wirespeed_row(row: &Value) {
    for key in ["achieved_pps", "send_cpu_ns_per_packet", "recv_cpu_ns_per_packet", "worst_window"] {
        assert!(row[key].is_number(), "row lacks {key}: {row}");
    }
    let runs = row["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{row}");
    let r = &runs[0];
    assert_eq!(u(r, "received"), u(r, "sent"), "{r}");
    assert!(r["recv_cpu_ns_per_packet"].is_number() && r["send_cpu_ns_per_packet"].is_number(), "{r}");
    // The worst window is the farther of the lowest and highest from the request.
    let (lo, hi) = (num(row, "window_lo"), num(row, "window_hi"));
    // (Compared to a billionth: the JSON carries the window bounds rounded, the worst window
    // computed before rounding.)
    assert_close(num(row, "worst_window"), (1.0 - lo).max(hi - 1.0), row);
}

#[test]
fn iperf3_runs_every_case_beside_wirespeed() {
    let _t = traffic();
    let doc = doc_of(&[
        "bench",
        "pacing",
        "--loopback",
        "--cases",
        "1080@2000pps",
        "--duration",
        "2",
        "--repeat",
        "1",
        "--json",
    ]);
    assert_eq!(doc["schema"], "wirespeed.bench.pacing/1");
    assert_eq!(num(&doc, "send_cpu_target"), 2.0);
    let row = &doc["rows"][0];
    assert_eq!(row["label"], "1080@2000pps");
    assert_wirespeed_row(row);
    let notes: Vec<&str> = doc["notes"].as_array().expect("notes").iter().filter_map(|n| n.as_str()).collect();
    if doc["iperf3"].is_null() {
        // Not installed here: left out, said once, and the rows stay wirespeed's.
        assert!(notes.iter().any(|n| n.contains("iperf3 is not installed")), "{notes:?}");
        assert!(row["iperf3"].is_null() && row["send_cpu_vs_iperf3"].is_null(), "{row}");
        return;
    }
    assert!(doc["iperf3"].as_str().unwrap().starts_with("iperf 3"), "{doc}");
    assert!(doc["iperf3_socket_buffer"].as_u64().unwrap() > 0);
    let p = &row["iperf3"];
    assert_eq!(p["tool"], "iperf3");
    let runs = p["runs"].as_array().expect("iperf3 runs");
    assert_eq!(runs.len(), 1, "{p}");
    let r = &runs[0];
    assert_eq!((u(r, "size"), r["tool"].as_str()), (1080, Some("iperf3")), "{r}");
    assert!(u(r, "sent") > 0, "{r}");
    assert_eq!(u(p, "missing"), u(r, "missing"), "{p}");
    for key in ["achieved_pps", "rate_ratio", "send_cpu_ns_per_packet", "recv_cpu_ns_per_packet"] {
        assert!(p[key].is_number(), "iperf3 row lacks {key}: {p}");
    }
    // The ratios are the medians' quotients.
    let ratio = num(row, "send_cpu_ns_per_packet") / num(p, "send_cpu_ns_per_packet");
    assert_close(num(row, "send_cpu_vs_iperf3"), ratio, row);
    let ratio = num(row, "recv_cpu_ns_per_packet") / num(p, "recv_cpu_ns_per_packet");
    assert_close(num(row, "recv_cpu_vs_iperf3"), ratio, row);
    assert!(notes.iter().any(|n| n.contains("whole processes")), "{notes:?}");
}

#[test]
fn without_iperf3_the_rows_are_wirespeed_alone_and_the_table_says_so() {
    let _t = traffic();
    let doc = doc_of(&[
        "bench",
        "pacing",
        "--loopback",
        "--no-iperf3",
        "--cases",
        "8800@10M",
        "--duration",
        "1.5",
        "--repeat",
        "1",
        "--json",
    ]);
    assert!(doc["iperf3"].is_null() && doc["iperf3_socket_buffer"].is_null(), "{doc}");
    assert_eq!(doc["notes"].as_array().map(Vec::len), Some(0), "{doc}");
    let row = &doc["rows"][0];
    assert_wirespeed_row(row);
    assert!(row["iperf3"].is_null() && row["send_cpu_vs_iperf3"].is_null() && row["recv_cpu_vs_iperf3"].is_null());
    // The text has the per-tool table, wirespeed's line only, and no CPU verdict.
    let out = run(&[
        "bench",
        "pacing",
        "--loopback",
        "--no-iperf3",
        "--cases",
        "1080@1000pps",
        "--duration",
        "1",
        "--repeat",
        "1",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("| payload | rate | tool | achieved / requested | worst 1 s window |"), "{text}");
    assert!(text.contains("| 1080 | 1000pps | wirespeed |"), "{text}");
    assert!(!text.contains("| iperf3 |") && !text.contains("iperf3's ("), "{text}");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    expect_fail(&["bench", "pacing", "--cases", "8@1000pps"], 2, "iperf3 sends at least 16-byte datagrams");
    expect_fail(
        &["bench", "pacing", "--cases", "1080@1G,8@1000pps"],
        2,
        "8@1000pps is smaller: use a larger size or --no-iperf3",
    );
    expect_fail(&["bench", "pacing", "--no-iperf3=yes"], 2, "--no-iperf3");
    expect_fail(&["bench", "pacing", "--cases", "1080@max", "--no-iperf3"], 2, "max is not paced");
}

#[test]
fn help_names_the_default_cases_and_the_peer() {
    let out = run(&["bench", "pacing", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in ["--no-iperf3", "1080@1G,8800@1G,1080@5G,8800@5G", "2x iperf3's", "8800@20G+gso"] {
        assert!(help.contains(needle), "help lacks '{needle}':\n{help}");
    }
}

#[test]
#[ignore = "needs root"]
fn iperf3_runs_in_the_partitions_and_they_are_removed() {
    assert!(is_root(), "run as root (or leave out --include-ignored)");
    let _t = traffic();
    let doc = doc_of(&["bench", "pacing", "--cases", "8800@50M", "--duration", "1", "--repeat", "1", "--json"]);
    assert_eq!(doc["placement"]["kind"], "partitions");
    let row = &doc["rows"][0];
    let r = &row["runs"][0];
    assert_eq!(u(r, "received"), u(r, "sent"), "{r}");
    if !doc["iperf3"].is_null() {
        let p = &row["iperf3"]["runs"][0];
        assert!(u(p, "sent") > 0, "{p}");
        assert!(row["iperf3"]["send_cpu_ns_per_packet"].is_number(), "{row}");
    }
    assert_partitions_gone(doc["placement"]["prefix"].as_str().expect("prefix"));
}
