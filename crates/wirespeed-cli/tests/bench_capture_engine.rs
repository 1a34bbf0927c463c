//! The benchmark commands of the capture-engine tables (issue 15) end to end: bad options are
//! one line and exit 2, `bench ring` measures this build (and another): time to zero-loss
//! readiness, a stream started at 'listening', and `bench compare` runs a wirespeed variant beside wirespeed.

use crate::common;
use common::*;

fn one_line_exit_2(args: &[&str], needle: &str) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line, got:\n{err}");
    assert!(err.contains(needle), "{args:?}: expected '{needle}' in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_options_are_one_line_and_exit_2() {
    one_line_exit_2(&["bench", "ring", "--sizes", "5k"], "a ring from 16M to 1T");
    one_line_exit_2(&["bench", "ring", "--sizes", ","], "no ring sizes");
    one_line_exit_2(
        &["bench", "ring", "--other-build", "/nonexistent/wirespeed"],
        "--other-build /nonexistent/wirespeed",
    );
    one_line_exit_2(&["bench", "ring", "--dir", "/nonexistent/dir"], "not a directory");
    one_line_exit_2(&["bench", "ring", "--states", "hot"], "a host state is cold or warm");
    one_line_exit_2(&["bench", "ring", "--states", "warm", "--rate", "max"], "--rate max has no rate to hold");
    one_line_exit_2(&["bench", "ring", "--stream", "100ms"], "give 1s..1m");
    one_line_exit_2(&["bench", "compare", "--threads", "0,2"], "'0' is not a thread count");
    one_line_exit_2(&["bench", "compare", "--backends", "Packet!"], "is not a backend name");
    one_line_exit_2(&["bench", "compare", "--threads", "2", "--cpus", "x-y"], "is not a CPU list");
    one_line_exit_2(&["bench", "compare", "--writer-cpu", "1"], "--record");
    one_line_exit_2(
        &["bench", "compare", "--loopback", "--other-build", "/nonexistent/wirespeed"],
        "no such file: give the path of another wirespeed binary",
    );
    one_line_exit_2(
        &["bench", "compare", "--loopback", "--tools", "iperf3", "--backends", "packet"],
        "name wirespeed in --tools",
    );
}

#[test]
fn ring_measures_readiness_of_this_build_and_another_with_a_stream_from_listening() {
    let _turn = traffic();
    let out = run(&[
        "bench",
        "ring",
        "--sizes",
        "16M",
        "--states",
        "warm",
        "--repeat",
        "1",
        "--rate",
        "5000pps",
        "--size",
        "1024",
        "--stream",
        "1s",
        "--other-build",
        bin(),
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["schema"], "wirespeed.bench.ring/2");
    assert_eq!(doc["count"], 5000, "{doc}");
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "one run of each build: {doc}");
    assert_eq!(runs[0]["build"], "this");
    assert_eq!(runs[1]["build"], "other");
    for r in runs {
        assert_eq!(r["state"], "warm", "{r}");
        assert!(r["listening_s"].as_f64().is_some_and(|s| s > 0.0), "{r}");
        assert_eq!(r["capacity"], 16 << 20, "{r}");
        // The stream was sent whole and the recorder's ledger read back: what the sender sent is
        // what the run is judged on (the recorder may or may not have kept up on a busy host).
        assert_eq!(r["sent"], 5000, "{r}");
        let lost = r["lost"].as_u64().unwrap() + 5000 - r["received"].as_u64().unwrap();
        assert_eq!(r["zero_loss"], lost == 0 && r["socket_drops"] == 0 && r["ring_full"] == 0, "{r}");
        assert!(r["ready_s"].is_f64(), "{r}");
    }
    let summary = doc["summary"].as_array().expect("summary");
    assert_eq!(summary.len(), 2);
    for s in summary {
        assert_eq!(s["runs"], 1, "{s}");
        // Readiness is the time to listening exactly when the run lost nothing.
        let zero = s["zero_loss_runs"] == 1;
        assert_eq!(s["ready_zero_loss_s"].is_f64(), zero, "{s}");
        if zero {
            assert_eq!(s["ready_zero_loss_s"], s["listening_s"], "{s}");
        }
    }
    // Progress lines name every run.
    assert_eq!(err.lines().filter(|l| l.starts_with("round  1 build")).count(), 2, "{err}");
}

#[test]
fn compare_runs_a_variant_of_wirespeed_beside_it() {
    let _turn = traffic();
    // This build as "another build": the variant machinery, the all-threads column and its
    // medians, without the features other builds may lack.
    let out = run(&[
        "bench",
        "compare",
        "--loopback",
        "--tools",
        "wirespeed,bare",
        "--other-build",
        bin(),
        "--rates",
        "20kpps",
        "--sizes",
        "1080",
        "--duration",
        "500ms",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    let tools: Vec<&str> = doc["tools"].as_array().unwrap().iter().filter_map(|t| t.as_str()).collect();
    assert_eq!(tools, ["wirespeed", "wirespeed-old", "bare"]);
    let cell = &doc["medians"][0];
    for t in ["wirespeed", "wirespeed-old"] {
        let m = &cell[t];
        assert_eq!(m["runs"], 1, "{t}: {cell}");
        // A receiver: every thread is its capture thread, so the all-threads figure is known.
        assert!(m["recv_all_cpu_ns_per_packet"].as_f64().is_some_and(|v| v > 0.0), "{t}: {m}");
    }
    assert!(cell["bare"]["recv_all_cpu_ns_per_packet"].is_f64(), "{cell}");
    assert!(doc["versions"]["wirespeed-old"].as_str().is_some_and(|v| v.contains(bin())), "{}", doc["versions"]);
    assert!(doc["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap_or("").starts_with("all ns/pkt:")));
}
