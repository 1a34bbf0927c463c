//! `bench sweep` end to end through the real binary: a small sweep on loopback writes the CSV,
//! JSON, figures and the HTML report with every run in it; `--resume` measures only what is
//! missing; across partitions when root; a signal keeps the results; bad input is one line.

use crate::common;
use common::*;
use serde_json::Value;
use std::path::Path;

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number '{key}' in {v}"))
}

fn ok_json(args: &[&str]) -> Value {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?} failed:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    json(&String::from_utf8_lossy(&out.stdout))
}

/// Every count of a run agrees with every other: what was sent arrived or is counted missing,
/// and the verdict follows from the counts.
fn assert_consistent_run(r: &Value) {
    let (sent, received, missing) = (u(r, "sent"), u(r, "received"), u(r, "missing"));
    assert!(sent > 0, "{r}");
    assert_eq!(received + missing, sent, "{r}");
    let lossy = missing > 0 || u(r, "lost") > 0 || u(r, "invalid") > 0 || r["end_of_stream"] == false;
    assert_eq!(r["lossy"].as_bool(), Some(lossy), "{r}");
    let pct = 100.0 * missing as f64 / sent as f64;
    assert!((f(r, "loss_percent") - pct).abs() < 1e-9, "{r}");
    let rx_pps = received as f64 / f(r, "send_elapsed_s");
    assert!((f(r, "received_pps") / rx_pps - 1.0).abs() < 1e-9, "{r}");
    let size = f(r, "size");
    assert!((f(r, "achieved_bps") / (f(r, "achieved_pps") * size * 8.0) - 1.0).abs() < 1e-6, "{r}");
    // Whether a busy host kept up is the scheduler's business; that every datagram is accounted
    // for, and any loss explained by the kernel's counters, is the program's.
    assert_point_accounted(r, 0);
    assert!(f(r, "achieved_bps") <= f(r, "asked_bps") * 1.01, "{r}");
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(p: &Path) -> (u32, u32) {
    let b = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", p.display());
    assert_eq!(&b[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    (be(16), be(20))
}

const FIGURES: [&str; 4] = ["rx-vs-tx-rate", "rx-vs-tx-pps", "loss-vs-offered", "rx-cpu-per-packet"];

#[test]
fn sweep_on_loopback_writes_results_figures_and_report() {
    let _turn = traffic();
    let dir = TempDir::new("sweep");
    let doc = ok_json(&[
        "bench",
        "sweep",
        "--loopback",
        "--rates",
        "100M,200M",
        "--sizes",
        "1080,8800",
        "--duration",
        "500ms",
        "--json",
        "-o",
        dir.path(),
    ]);
    assert_eq!(doc["schema"], "wirespeed.bench.sweep/1");
    assert_eq!(doc["placement"]["kind"], "loopback");
    assert_eq!((doc["complete"].as_bool(), doc["stopped"].as_bool()), (Some(true), Some(false)));
    assert_eq!(u(&doc, "planned"), 4);
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "{doc}");
    // Planned order: size, then rate.
    let order: Vec<(u64, f64)> = rows.iter().map(|r| (u(r, "size"), f(r, "asked_bps"))).collect();
    assert_eq!(order, vec![(1080, 100e6), (1080, 200e6), (8800, 100e6), (8800, 200e6)]);
    for r in rows {
        assert_consistent_run(r);
        assert_eq!(u(r, "rcvbuf"), 32 << 20);
    }
    let medians = doc["medians"].as_array().expect("medians");
    assert_eq!(medians.len(), 4);
    for (m, r) in medians.iter().zip(rows) {
        // One run per point: the median is that run.
        assert_eq!(u(m, "runs"), 1);
        assert_eq!(u(m, "lossy_runs"), u64::from(r["lossy"] == true));
        assert_eq!(f(m, "achieved_bps"), f(r, "achieved_bps"));
        assert_eq!(f(m, "received_pps"), f(r, "received_pps"));
    }
    let summary: Vec<&str> = doc["summary"].as_array().unwrap().iter().filter_map(|s| s.as_str()).collect();
    // One line per size; "zero loss up to" whenever that size lost nothing (always, with a large
    // buffer).
    for size in [1080, 8800] {
        let line = summary.iter().find(|s| s.starts_with(&format!("{size} B: "))).expect("a line per size");
        let clean = rows.iter().filter(|r| u(r, "size") == size).all(|r| r["lossy"] == false);
        assert_eq!(line.contains("no loss in any of 2 runs"), clean, "{line}");
    }

    // results.json is the same document; results.csv one line per run.
    let d = &dir.0;
    let file = json(&std::fs::read_to_string(d.join("results.json")).expect("results.json"));
    assert_eq!(file["rows"], doc["rows"]);
    let csv = std::fs::read_to_string(d.join("results.csv")).expect("results.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 5, "{csv}");
    let head: Vec<&str> = lines[0].split(',').collect();
    for col in ["offered_bps", "achieved_bps", "received_bps", "received_pps", "lost", "drops_per_million"] {
        assert!(head.contains(&col), "results.csv lacks {col}: {}", lines[0]);
    }
    for (l, r) in lines[1..].iter().zip(rows) {
        let cells: Vec<&str> = l.split(',').collect();
        assert_eq!(cells.len(), head.len(), "{l}");
        let col = |name: &str| cells[head.iter().position(|h| *h == name).unwrap()];
        assert_eq!(col("sent"), u(r, "sent").to_string());
        assert_eq!(col("received"), u(r, "received").to_string());
        assert_eq!(col("size_bytes"), u(r, "size").to_string());
    }
    // The figures, PNG and SVG.
    for fig in FIGURES {
        assert_eq!(png_size(&d.join(format!("{fig}.png"))), (1000, 650), "{fig}");
        let svg = std::fs::read_to_string(d.join(format!("{fig}.svg"))).expect("svg");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{fig}.svg");
        // One line per size, named in the legend.
        if fig != "loss-vs-offered" {
            assert!(svg.contains("1080 B") && svg.contains("8800 B"), "{fig}.svg lacks the size legend");
        }
    }
    // The report: every figure inline, the tables, every run.
    let html = std::fs::read_to_string(d.join("report.html")).expect("report.html");
    assert!(html.starts_with("<!DOCTYPE html>") && html.trim_end().ends_with("</html>"));
    assert_eq!(html.matches("<svg class=\"fig\"").count(), 4, "four inline figures");
    for fig in FIGURES {
        assert!(html.contains(&format!("<figure id=\"{fig}\">")), "report lacks {fig}");
    }
    assert!(!html.contains("<script"), "self-contained, no scripts");
    for id in ["<table id=\"medians\">", "<table id=\"runs\">", "seed 004, Figure 1", "seed 004, Figure 2"] {
        assert!(html.contains(id), "report lacks {id}");
    }
    let runs = html.split("<table id=\"runs\">").nth(1).and_then(|t| t.split("</table>").next()).expect("runs table");
    assert_eq!(runs.matches("<tr>").count() + runs.matches("<tr class").count(), 5, "header + a row per run");
    for r in rows {
        let sent = u(r, "sent");
        let commas = {
            let s = sent.to_string();
            let mut o = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i) % 3 == 0 {
                    o.push(',');
                }
                o.push(c);
            }
            o
        };
        assert!(runs.contains(&format!("<td>{commas}</td>")), "run with {sent} sent missing from the report");
    }
    let text = std::fs::read_to_string(d.join("summary.txt")).expect("summary.txt");
    assert!(text.contains("4 of 4 points measured") && text.contains("=> 1080 B: "), "{text}");
}

#[test]
fn sweep_resume_measures_only_the_missing_points() {
    let _turn = traffic();
    let dir = TempDir::new("sweep-resume");
    let base = ["bench", "sweep", "--loopback", "--rates", "100M", "--sizes", "1080", "--duration", "1", "--json"];
    let first = ok_json(&[&base[..], &["-o", dir.path()]].concat());
    assert_eq!(first["rows"].as_array().map(Vec::len), Some(1));
    // The same directory again without --resume would mix two sweeps: refused.
    let out = run(&[&base[..], &["-o", dir.path()]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("add --resume"));
    // Different point settings cannot be resumed into the same figures.
    let out = run(&["bench", "sweep", "--loopback", "--duration", "2", "--resume", "-o", dir.path()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("was run with --duration 1s"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // A grid without the earlier point would mix two experiments: refused, naming the point.
    let out = run(&[
        "bench",
        "sweep",
        "--loopback",
        "--rates",
        "200M",
        "--sizes",
        "1080",
        "--duration",
        "1",
        "--resume",
        "-o",
        dir.path(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("does not plan (1080 B at 100.00 Mb/s"), "{err}");
    // A second pass: only its point runs; the first pass's run is kept as it was.
    let out = run(&[&base[..], &["--repeat", "2", "--resume", "-o", dir.path()]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("resuming: 1 point(s) already in"), "{err}");
    assert_eq!(err.matches("[  2/2] pass 2").count(), 1, "{err}");
    assert!(!err.contains("[  1/2]"), "the measured point ran again:\n{err}");
    let doc = json(&String::from_utf8_lossy(&out.stdout));
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0], first["rows"][0], "the earlier run is kept unchanged");
    assert_eq!((u(&rows[0], "pass"), u(&rows[1], "pass")), (1, 2));
    assert_eq!(doc["started"], first["started"], "a resumed sweep keeps its start");
    assert_eq!(u(&doc["medians"][0], "runs"), 2);
    assert_eq!(doc["complete"], true);
}

#[test]
fn sweep_with_record_writes_to_disk_and_cleans_up() {
    let _turn = traffic();
    let dir = TempDir::new("sweep-rec");
    let rec = TempDir::new("sweep-rec-data");
    let doc = ok_json(&[
        "bench",
        "sweep",
        "--loopback",
        "--rates",
        "100M,200M",
        "--sizes",
        "8800",
        "--duration",
        "500ms",
        "--record",
        rec.path(),
        "--json",
        "-o",
        dir.path(),
    ]);
    assert_eq!(doc["receiver"], "record");
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_consistent_run(r);
    }
    // Each point's recording is removed after it: a long sweep does not fill the disk.
    let left: Vec<_> = std::fs::read_dir(&rec.0).expect("recording dir").flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "recordings left behind: {left:?}");
    let html = std::fs::read_to_string(dir.0.join("report.html")).expect("report.html");
    assert!(html.contains("wirespeed record --once"), "the report says the points were recorded");
    // A resume must keep the receiver: recv points and record points are different experiments.
    let out = run(&[
        "bench",
        "sweep",
        "--loopback",
        "--rates",
        "100M,200M",
        "--sizes",
        "8800",
        "--duration",
        "500ms",
        "--resume",
        "-o",
        dir.path(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("was run with --record"), "{err}");
}

#[test]
#[ignore = "needs root"]
fn sweep_across_partitions() {
    let _turn = traffic();
    let dir = TempDir::new("sweep-part");
    let doc = ok_json(&[
        "bench",
        "sweep",
        "--rates",
        "100M,200M",
        "--sizes",
        "8800",
        "--duration",
        "300ms",
        "--json",
        "-o",
        dir.path(),
    ]);
    assert_eq!(doc["placement"]["kind"], "partitions", "{doc}");
    let prefix = doc["placement"]["prefix"].as_str().expect("prefix").to_string();
    let recv_cpus: Vec<u64> =
        doc["placement"]["recv_cpus"].as_array().unwrap().iter().filter_map(|c| c.as_u64()).collect();
    for r in doc["rows"].as_array().expect("rows") {
        assert_consistent_run(r);
        let cpu = r["recv_cpu"].as_u64().expect("recv cpu");
        assert!(recv_cpus.contains(&cpu), "receiver on CPU {cpu}, partition 2 has {recv_cpus:?}");
    }
    let html = std::fs::read_to_string(dir.0.join("report.html")).expect("report.html");
    assert!(html.contains(&format!("partitions '{prefix}'")), "the report names where it ran");
    assert_partitions_gone(&prefix);
}

#[test]
fn sweep_stopped_by_a_signal_keeps_its_results() {
    let _turn = traffic();
    let dir = TempDir::new("sweep-stop");
    let mut args = vec![
        "bench",
        "sweep",
        "--rates",
        "100M,110M,120M",
        "--sizes",
        "1080",
        "--duration",
        "1",
        "--rcvbuf",
        "3145744",
        "-o",
        dir.path(),
    ];
    if !is_root() {
        args.push("--loopback");
    }
    // Stopped once the first point is printed: the other two still have two seconds to send, so
    // the signal lands part-way whatever the host's load.
    let first_point = |l: &str| l.starts_with("[  1/3]");
    let out = run_then_term_when(&args, first_point, std::time::Duration::from_secs(60));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("stopped by a signal after") && stderr.contains("--resume"), "{stderr}");
    let doc = json(&std::fs::read_to_string(dir.0.join("results.json")).expect("results.json kept"));
    let n = doc["rows"].as_array().map_or(0, Vec::len);
    assert!((1..3).contains(&n), "{doc}");
    assert_eq!(doc["complete"], false);
    assert!(stderr.contains(&format!("after {n} of 3 points")), "{stderr}");
    assert!(dir.0.join("report.html").exists(), "a partial sweep still gets its report");
    assert_none_left("3145744", "bench sweep", std::time::Duration::from_millis(200));
    if is_root() {
        let head = stdout.lines().next().unwrap_or_default();
        if let Some(prefix) = partitions_named_in(head) {
            assert_partitions_gone(prefix);
        }
    }
}

#[test]
fn sweep_bad_input_is_one_line_and_exit_2() {
    expect_fail(&["bench", "sweep", "--rates", "1G:100kpps:1G"], 2, "mixes units");
    expect_fail(&["bench", "sweep", "--rates", "2G:1G:1G"], 2, "runs downwards");
    expect_fail(&["bench", "sweep", "--rates", "1M:9G:1k"], 2, "larger step");
    expect_fail(&["bench", "sweep", "--sizes", "1080,1081"], 2, "multiple of 8");
    expect_fail(&["bench", "sweep", "--sizes", ","], 2, "--sizes is empty");
    expect_fail(&["bench", "sweep", "--rates", "1G,1000M"], 2, "--rates lists 1000000000 twice");
    expect_fail(&["bench", "sweep", "--rcvbuf", "1M,lots"], 2, "cannot read size");
    expect_fail(&["bench", "sweep", "--duration", "0"], 2, "too short");
    expect_fail(&["bench", "sweep", "--repeat", "0"], 2, "--repeat");
    expect_fail(
        &["bench", "sweep", "--rates", "1G:100G:1G", "--sizes", "8,16,24,32,40,48,56,64", "--repeat", "10"],
        2,
        "points",
    );
    let d = TempDir::new("sweep-bad");
    expect_fail(
        &["bench", "sweep", "--loopback", "--resume", "-o", d.path()],
        2,
        "run the sweep without --resume first",
    );
    std::fs::write(d.0.join("results.json"), "{\"schema\": \"wirespeed.bench.rates/1\"}").unwrap();
    expect_fail(&["bench", "sweep", "--loopback", "--resume", "-o", d.path()], 2, "is not a sweep's results");
    expect_fail(&["bench", "sweep", "--loopback", "-o", "/proc/no/such/dir"], 1, "cannot create the output directory");
}

#[test]
fn sweep_help_teaches() {
    let h = String::from_utf8_lossy(&run(&["bench", "sweep", "--help"]).stdout).to_string();
    for s in ["seed 004", "report.html", "--resume", "median", "Figure 1", "Exit codes"] {
        assert!(h.contains(s), "bench sweep --help lacks '{s}'");
    }
}
