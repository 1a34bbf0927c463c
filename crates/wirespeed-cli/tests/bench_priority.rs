//! `bench priority`: seed 004's nice -20 vs +20 beside a CPU hog. Refusals without root and
//! with options it sets itself; as root, a tiny run whose document has a result for every
//! setting (the factor itself depends on the machine and is not asserted).

mod common;

use common::*;

#[test]
fn bench_priority_refuses_the_options_it_sets_itself() {
    expect_fail(&["bench", "priority", "--priority", "-5"], 2, "sets the receiver's --priority and --realtime itself");
    expect_fail(&["bench", "priority", "--realtime"], 2, "leave them out");
    expect_fail(&["bench", "priority", "--precision", "80%"], 2, "out of range");
}

#[test]
fn bench_priority_without_root_is_one_line_and_exit_1() {
    let args = ["bench", "priority", "--loopback", "--duration", "100ms"];
    let out = unprivileged(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bench priority needs root"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn bench_priority_help_teaches() {
    let h = String::from_utf8_lossy(&run(&["bench", "priority", "--help"]).stdout).to_string();
    for s in ["seed 004", "nice -20", "SCHED_FIFO", "busy loop", "median", "--no-hog", "Try:"] {
        assert!(h.contains(s), "bench priority --help lacks '{s}'");
    }
}

#[test]
#[ignore = "needs root"]
fn bench_priority_in_partitions_has_a_result_for_every_setting() {
    assert!(is_root(), "run as root: cargo test --release -p wirespeed-cli --test bench_priority -- --include-ignored");
    let _turn = traffic();
    let dir = TempDir::new("benchprio");
    let out = run(&[
        "bench",
        "priority",
        "--duration",
        "100ms",
        "--precision",
        "50%",
        "--repeat",
        "1",
        "--hi",
        "500M",
        "--json",
        "-o",
        dir.path(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(doc["schema"], "wirespeed.bench.priority/1");
    assert_eq!(doc["placement"]["kind"], "partitions", "{}", doc["placement"]);
    let prefix = doc["placement"]["prefix"].as_str().expect("prefix").to_string();
    let hog = &doc["hog"];
    assert_eq!(hog["nice"], 0);
    assert_eq!(hog["cpus"], doc["placement"]["recv_cpus"], "the hog runs on the receiver's CPUs");
    let rows = doc["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().map(|r| r["setting"].as_str().unwrap_or("?")).collect();
    assert_eq!(names, ["nice +19", "nice 0", "nice -20", "SCHED_FIFO 10"]);
    for r in rows {
        let searches = r["searches"].as_array().expect("searches");
        assert_eq!(searches.len(), 1, "{}: one search per --repeat", r["setting"]);
        assert_ne!(searches[0]["outcome"], "stopped");
        assert!(r["median_bps"].as_f64().is_some_and(|b| b > 0.0), "{}: no result: {r}", r["setting"]);
        assert!(r["median_pps"].as_f64().is_some() && r["factor"].as_f64().is_some(), "{r}");
        assert!(r["min_bps"].as_f64() <= r["max_bps"].as_f64());
        // Every probe's receiver ran with the row's setting, and counted what was sent.
        for p in searches[0]["probes"].as_array().expect("probes") {
            assert!(p["point"]["received"].as_u64().is_some(), "{p}");
        }
    }
    assert_eq!(rows[0]["priority"]["nice"], 19);
    assert_eq!(rows[2]["priority"]["nice"], -20);
    assert_eq!(rows[3]["priority"]["realtime"], 10);
    assert!((rows[0]["factor"].as_f64().unwrap() - 1.0).abs() < 1e-9, "the baseline is nice +19");
    // The files, the hog and the partitions.
    let file = json(&std::fs::read_to_string(format!("{}/priority.json", dir.path())).expect("priority.json"));
    assert_eq!(file["rows"].as_array().map(|r| r.len()), Some(4));
    let txt = std::fs::read_to_string(format!("{}/priority.txt", dir.path())).expect("priority.txt");
    assert!(txt.contains("SCHED_FIFO 10") && txt.contains("x +19"), "{txt}");
    assert_none_left("while :; do :; done", "no such owner", std::time::Duration::from_millis(200));
    assert_partitions_gone(&prefix);
}
