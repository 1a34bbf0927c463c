//! `bench soak` end to end through the real binary: a short soak on loopback with exact totals
//! and a row per interval, known loss injected at the sender found in its rows, the same across
//! two partitions when root, a stop by signal that reports and leaves nothing behind, bad input.

use crate::common;
use common::*;
use serde_json::Value;

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number '{key}' in {v}"))
}

fn soak_json(args: &[&str]) -> (Value, String) {
    let mut full = vec!["bench", "soak"];
    full.extend_from_slice(args);
    full.push("--json");
    let out = run(&full);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{full:?} failed:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    (json(&String::from_utf8_lossy(&out.stdout)), err)
}

/// The seconds a verdict gives after `prefix` ("zero loss for 4.1 s at ..." gives 4.1).
fn verdict_secs(verdict: &str, prefix: &str) -> f64 {
    let rest = verdict.strip_prefix(prefix).unwrap_or_else(|| panic!("'{verdict}' does not start with '{prefix}'"));
    let num = rest.split(" s at ").next().unwrap_or_default();
    num.parse().unwrap_or_else(|_| panic!("no seconds after '{prefix}' in '{verdict}'"))
}

/// The rate a verdict names for a run asked `asked` Mb/s: the one asked, or, when the sender fell
/// short of it (a busy host), the one achieved with the one asked beside it.
fn assert_rate_named(doc: &Value, verdict: &str, asked: &str) {
    if doc["sender_bound"] == true {
        assert!(verdict.contains(&format!("Mb/s achieved ({asked} asked; the sender was the limit")), "{verdict}");
    } else {
        assert_eq!(doc["sender_bound"], false, "{doc}");
        assert!(verdict.contains(&format!(" at {asked} (")) || verdict.contains(&format!(" at {asked}:")), "{verdict}");
    }
}

/// Row numbers as ranges, as the verdict gives them: `1-3, 5`.
fn ranges(ns: &[u64]) -> String {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &n in ns {
        match out.last_mut() {
            Some((_, b)) if *b + 1 == n => *b = n,
            _ => out.push((n, n)),
        }
    }
    out.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect::<Vec<_>>().join(", ")
}

fn rows(doc: &Value) -> &Vec<Value> {
    doc["intervals"].as_array().expect("intervals")
}

/// The rows tile the run (each starts where the last ended), number 1.., and the last one holds
/// the end; their counts add up exactly to the receiver's totals. Only what the program
/// guarantees: how many rows a run gets depends on when the receiver's reporting thread ran, so
/// the count is bounded, not fixed (a regular row ends at or after its tick, and the last row,
/// closed by the final report, is at least half a row long).
fn assert_rows_add_up(doc: &Value, secs: f64) {
    let rows = rows(doc);
    let p = &doc["point"];
    let every = f(doc, "every_s");
    // The receiver starts before the sender and ends after it.
    let end = f(rows.last().expect("a row"), "end_s");
    assert!(end >= secs, "a {secs} s run cannot end at {end} s: {doc}");
    assert!(rows.len() as f64 <= (end / every).floor() + 1.0, "{} rows for a run ending at {end} s: {doc}", rows.len());
    let mut t = 0.0;
    let mut cum = 0;
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(u(r, "n"), i as u64 + 1);
        assert_eq!(f(r, "start_s"), t, "row {} starts where the last ended", i + 1);
        assert!(f(r, "end_s") > t);
        if i + 1 < rows.len() {
            assert!(f(r, "end_s") >= every * (i + 1) as f64 - 1e-6, "row {} ends before its tick: {r}", i + 1);
        } else if rows.len() > 1 {
            assert!(f(r, "end_s") - t >= every / 2.0, "a last row shorter than half a row is folded: {r}");
        }
        t = f(r, "end_s");
        cum += u(r, "lost");
        assert_eq!(u(r, "cumulative_lost"), cum);
        assert_eq!(r["to_end"], i + 1 == rows.len());
        // Offered is received + lost, in the same row.
        let dt = f(r, "end_s") - f(r, "start_s");
        let offered = (u(r, "datagrams") + u(r, "lost")) as f64 / dt;
        assert!((f(r, "offered_pps") / offered - 1.0).abs() < 1e-9, "{r}");
    }
    let datagrams: u64 = rows.iter().map(|r| u(r, "datagrams")).sum();
    assert_eq!(datagrams, u(p, "received"), "the rows' datagrams add up to the ledger's received");
    assert_eq!(cum, u(p, "lost"), "the rows' loss adds up to the ledger's, tail included");
}

/// How many of the sequence numbers 0..=h the sender left out with `--skip-every k` (it leaves
/// out k-1, 2k-1, ...).
fn skipped_upto(h: i64, k: u64) -> u64 {
    if h < 0 {
        0
    } else {
        (h as u64 + 1) / k
    }
}

/// The highest sequence number the receiver has seen once it has received `d` datagrams of a
/// sender that left out every `k`th number, when nothing else is missing; when the kernel
/// dropped some as well the true highest is higher, never lower.
fn highest_after(d: u64, k: u64) -> i64 {
    if d == 0 {
        -1
    } else {
        (d + (d - 1) / (k - 1)) as i64 - 1
    }
}

/// The injected loss is in the rows that hold its sequence numbers. The ledger settles a gap when
/// the highest number seen is a reorder window past it, so after a row in which the receiver
/// reached `d` datagrams (cumulative), the loss so far is at least the numbers left out up to
/// (highest seen - window) and at most those up to (highest seen at the next row's end - window)
/// plus whatever the kernel dropped. Nothing here depends on how fast the host ran: a row that
/// got 1,510 datagrams instead of 2,300 is held to its own 1,510.
fn assert_loss_where_its_numbers_are(doc: &Value, k: u64, kernel_lost: u64) {
    let rows = rows(doc);
    let w = u(doc, "reorder_window") as i64;
    let cum_d: Vec<u64> = rows
        .iter()
        .scan(0, |d, r| {
            *d += u(r, "datagrams");
            Some(*d)
        })
        .collect();
    for (i, r) in rows.iter().enumerate() {
        let lost_so_far = u(r, "cumulative_lost");
        let lo = skipped_upto(highest_after(cum_d[i], k) - w, k);
        assert!(
            lost_so_far >= lo,
            "row {}: {lost_so_far} lost so far, but the numbers it passed hold {lo}: {r}",
            i + 1
        );
        if i + 1 < rows.len() {
            let next = cum_d[i + 1] + kernel_lost;
            let hi = skipped_upto(highest_after(next, k) - w, k) + kernel_lost;
            assert!(
                lost_so_far <= hi,
                "row {}: {lost_so_far} lost so far, more than the {hi} it could know of: {r}",
                i + 1
            );
        }
    }
}

/// The whole run's accounting (see `assert_point_accounted`) with `--skip-every k` (0: none):
/// returns (numbers the sender used, numbers it left out, numbers the kernel dropped).
fn assert_run_accounted(doc: &Value, k: u64) -> (u64, u64, u64) {
    let p = &doc["point"];
    assert_eq!(p["end_of_stream"], true, "the end-of-stream message (sent three times) came: {p}");
    let used = u(p, "received") + u(p, "lost");
    let injected = used.checked_div(k).unwrap_or(0);
    let clean = assert_point_accounted(p, injected);
    let kernel_lost = u(p, "lost") - injected;
    assert_eq!(doc["zero_loss"], clean && injected == 0, "{doc}");
    let lossy: Vec<u64> = doc["lossy_intervals"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    let with_loss: Vec<u64> = rows(doc).iter().filter(|r| u(r, "lost") > 0).map(|r| u(r, "n")).collect();
    assert_eq!(lossy, with_loss);
    (used, injected, kernel_lost)
}

#[test]
fn soak_on_loopback_counts_every_packet() {
    let _turn = traffic();
    let dir = TempDir::new("soak");
    let (doc, err) = soak_json(&["--loopback", "--duration", "2s", "--every", "1s", "--rate", "20M", "-o", dir.path()]);
    assert_eq!(doc["schema"], "wirespeed.bench.soak/1");
    assert_eq!(doc["placement"]["kind"], "loopback");
    assert_eq!((u(&doc, "size"), f(&doc, "duration_s"), f(&doc, "every_s")), (1080, 2.0, 1.0));
    assert_eq!(f(&doc, "asked_bps"), 20e6);
    assert_eq!(doc["stopped"], false);
    let p = &doc["point"];
    // Every datagram is accounted for, exactly; zero loss is what an idle host gives, and the
    // kernel's counters must explain any loss a busy one gives.
    let (_, _, kernel_lost) = assert_run_accounted(&doc, 0);
    assert_rows_add_up(&doc, 2.0);
    // The sender keeps its schedule, or the run says it was the limit.
    let expect = f(&doc, "asked_pps") * f(p, "send_elapsed_s");
    if doc["sender_bound"] == false {
        assert!(u(p, "sent") as f64 >= 0.97 * expect, "{} sent in {} s: {p}", u(p, "sent"), f(p, "send_elapsed_s"));
    }
    // Its sending time lies inside its real time (how much of the 2 s a loaded host let it
    // use is the scheduler's business, not a guarantee).
    assert!(f(p, "send_elapsed_s") > 0.0 && f(p, "send_elapsed_s") <= f(p, "send_wall_s"), "{p}");
    let verdict = doc["verdict"].as_str().expect("verdict");
    if kernel_lost == 0 {
        assert!(rows(&doc).iter().all(|r| u(r, "lost") == 0 && u(r, "kernel_socket_drops") == 0));
        assert_eq!(doc["lossy_intervals"], Value::Array(vec![]));
        let stretch = &doc["longest_clean"];
        assert_eq!((u(stretch, "first"), u(stretch, "last")), (1, rows(&doc).len() as u64));
        // The verdict gives the sender's own sending time.
        let secs = verdict_secs(verdict, "zero loss for ");
        assert!((secs - f(p, "send_elapsed_s")).abs() <= 0.05, "{verdict}: {p}");
        assert_rate_named(&doc, verdict, "20 Mb/s");
        assert!(verdict.contains("1080-byte datagrams"), "{verdict}");
    } else {
        eprintln!("this busy host dropped {kernel_lost} datagrams in the kernel; the verdict must say so");
        assert!(
            verdict.starts_with("LOSS at ") && verdict.contains(&format!(": {} of ", commas(kernel_lost))),
            "{verdict}"
        );
    }
    // CPU per packet and the CPUs are in the record.
    assert!(f(p, "send_cpu_ns_per_packet") > 0.0 && f(p, "recv_cpu_ns_per_packet") > 0.0);
    assert!(doc["summary"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().starts_with("CPU per packet")));
    // Live rows went to stderr (with --json) as they came: rows 1..m, then the last row, starred,
    // closed by the final report. When it replaces a row shown live it says so, so nobody adding
    // up the table counts both.
    let live: Vec<&str> = err.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).collect();
    let last = rows(&doc).len();
    let starred: Vec<&&str> = live.iter().filter(|l| l.trim_start().starts_with(&format!("{last}* "))).collect();
    assert_eq!(starred.len(), 1, "one final row:\n{err}");
    let plain: Vec<&&str> = live.iter().filter(|l| !l.trim_start().starts_with(&format!("{last}* "))).collect();
    for (i, l) in plain.iter().enumerate() {
        assert!(l.trim_start().starts_with(&format!("{} ", i + 1)), "live rows in order:\n{err}");
    }
    let replaced = plain.len() == last;
    assert!(replaced || plain.len() + 1 == last, "{} live rows for {last} rows:\n{err}", plain.len());
    let note = if replaced {
        format!("(replaces row {last} above: closed by the final report, tail included)")
    } else {
        "(closed by the final report, tail included)".to_string()
    };
    assert!(starred[0].ends_with(&note), "{note} expected:\n{err}");
    // The files: text, CSV with one line per row, the same JSON, and both charts.
    let csv = std::fs::read_to_string(dir.0.join("soak.csv")).expect("soak.csv");
    assert!(csv.starts_with("interval,start_s,end_s,"));
    assert_eq!(csv.lines().count(), rows(&doc).len() + 1, "{csv}");
    let file = json(&std::fs::read_to_string(dir.0.join("soak.json")).expect("soak.json"));
    assert_eq!(file["intervals"], doc["intervals"]);
    assert_eq!(file["verdict"], doc["verdict"]);
    let txt = std::fs::read_to_string(dir.0.join("soak.txt")).expect("soak.txt");
    assert!(txt.contains(&format!("=> {verdict}")) && txt.contains("lost so far"), "{txt}");
    for f in ["soak-rate.png", "soak-rate.svg", "soak-loss.png", "soak-loss.svg"] {
        let len = std::fs::metadata(dir.0.join(f)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{f}: {len} bytes");
    }
}

#[test]
fn soak_finds_injected_loss_in_its_rows() {
    let _turn = traffic();
    // The sender leaves out every 100th sequence number (99, 199, ...): exactly known loss, at
    // known sequence numbers.
    let (doc, _) =
        soak_json(&["--loopback", "--duration", "3s", "--every", "1s", "--rate", "20M", "--skip-every", "100"]);
    let p = &doc["point"];
    let (used, injected, kernel_lost) = assert_run_accounted(&doc, 100);
    assert_eq!(u(p, "lost"), injected + kernel_lost, "one in a hundred numbers left out, tail included: {p}");
    assert!(used >= 1000, "3 s at 20 Mb/s: {p}");
    assert_rows_add_up(&doc, 3.0);
    assert_eq!(doc["zero_loss"], false);
    // Each row's loss is the numbers left out among those the receiver passed in that row.
    assert_loss_where_its_numbers_are(&doc, 100, kernel_lost);
    let rows = rows(&doc);
    let lossy: Vec<u64> = doc["lossy_intervals"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    // The last window's numbers are settled only by the final report: the last row holds them.
    assert_eq!(lossy.last(), Some(&(rows.len() as u64)), "the last row holds the tail: {doc}");
    let verdict = doc["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("LOSS at ") && verdict.contains(&format!(": {} of ", commas(u(p, "lost")))),
        "{verdict}"
    );
    assert_rate_named(&doc, verdict, "20 Mb/s");
    let place = format!("in {} {}", if lossy.len() > 1 { "seconds" } else { "second" }, ranges(&lossy));
    assert!(verdict.contains(&place), "{place}: {verdict}");
}

#[test]
#[ignore = "needs root"]
fn soak_across_partitions() {
    let _turn = traffic();
    let (doc, _) = soak_json(&["--duration", "3s", "--every", "1s", "--rate", "100M"]);
    assert_eq!(doc["placement"]["kind"], "partitions", "{doc}");
    let prefix = doc["placement"]["prefix"].as_str().expect("prefix").to_string();
    assert!(prefix.starts_with("wsbench"));
    let p = &doc["point"];
    assert_run_accounted(&doc, 0);
    assert_rows_add_up(&doc, 3.0);
    let recv_cpu = p["recv_cpu"].as_u64().expect("recv cpu");
    let recv_cpus: Vec<u64> =
        doc["placement"]["recv_cpus"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    assert!(recv_cpus.contains(&recv_cpu), "receiver on CPU {recv_cpu}, partition 2 has {recv_cpus:?}");
    assert_partitions_gone(&prefix);
    assert!(!std::path::Path::new(&format!("/run/wirespeed/{prefix}.json")).exists());
}

#[test]
fn soak_stopped_by_a_signal_reports_and_cleans_up() {
    let _turn = traffic();
    // A distinctive receive buffer marks this run's children in the process table.
    let mut args = vec!["bench", "soak", "--duration", "30s", "--every", "1s", "--rate", "20M", "--rcvbuf", "3145752"];
    if !is_root() {
        args.push("--loopback");
    }
    // Stopped once it has printed its first row: a guessed delay could fall before the first row
    // on a busy host (the partitions take a while to make).
    let first_row = |l: &str| l.trim_start().starts_with("1 ");
    let out = run_then_term_when(&args, first_row, std::time::Duration::from_secs(60));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("stopped by a signal after") && stderr.contains("of 30 s"), "{stderr}");
    // What was measured is printed: some rows, the totals and a verdict that claims no more.
    let rows = stdout.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).count();
    assert!(rows >= 1, "{stdout}");
    assert!(stdout.contains("(stopped early)") && stdout.contains("=> stopped after"), "{stdout}");
    assert!(!stdout.contains("zero loss for"), "{stdout}");
    // No sender or receiver of this run is left, and no partition.
    assert_none_left("3145752", "bench soak", std::time::Duration::from_millis(200));
    if is_root() {
        let head = stdout.lines().next().unwrap_or_default();
        assert_partitions_gone(partitions_named_in(head).expect("a prefix"));
    }
}

#[test]
fn soak_that_fails_late_keeps_its_rows() {
    let _turn = traffic();
    let dir = TempDir::new("soak-fail");
    // A distinctive --skip-every (never reached at this rate) marks this run's sender, which is
    // killed part-way: the run fails, but the rows measured before are kept.
    let args = [
        "bench",
        "soak",
        "--loopback",
        "--duration",
        "30s",
        "--every",
        "1s",
        "--rate",
        "2kpps",
        "--skip-every",
        "7919237",
        "-o",
        dir.path(),
    ];
    let mut child = std::process::Command::new(bin())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start bench soak");
    let mut err_pipe = child.stderr.take().expect("stderr piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err_pipe, &mut s);
        s
    });
    // The sender is killed once two rows have been printed (not after a guessed delay, which on
    // a busy host may come before any row): the rows measured before must be kept.
    let mut stdout = String::new();
    let mut shown = 0;
    let mut killed = false;
    for line in std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().expect("stdout piped"))) {
        let line = line.expect("read stdout");
        stdout.push_str(&line);
        stdout.push('\n');
        if line.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
            shown += 1;
        }
        if shown >= 2 && !killed {
            for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
                let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                if cmd.contains(" send ") && cmd.contains("7919237") && !cmd.contains("bench") {
                    let pid = e.file_name().to_string_lossy().to_string();
                    killed =
                        std::process::Command::new("kill").args(["-KILL", &pid]).status().is_ok_and(|s| s.success());
                }
            }
            assert!(killed, "the sender was not found to kill");
        }
    }
    assert!(killed, "the soak ended before two rows:\n{stdout}");
    let status = child.wait().expect("wait for bench soak");
    let stderr = err_reader.join().expect("stderr reader");
    assert_eq!(status.code(), Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("the sender failed") && stderr.contains("measured are reported and written"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stdout.contains("=> failed after"), "{stdout}");
    // The files hold what was measured.
    let doc = json(&std::fs::read_to_string(dir.0.join("soak.json")).expect("soak.json"));
    let n = rows(&doc).len();
    assert!(n >= 2, "{doc}");
    assert!(doc["error"].as_str().is_some_and(|e| e.contains("the sender failed")), "{doc}");
    assert_eq!((doc["zero_loss"].clone(), doc["point"].clone()), (Value::Bool(false), Value::Null));
    let csv = std::fs::read_to_string(dir.0.join("soak.csv")).expect("soak.csv");
    assert_eq!(csv.lines().count(), n + 1, "{csv}");
    // The asked rate keeps its own words in the file, as in the live heading.
    let txt = std::fs::read_to_string(dir.0.join("soak.txt")).expect("soak.txt");
    let head = txt.lines().next().unwrap_or_default();
    assert!(head.contains("at 2.0 kpps (2,000 datagrams/s)"), "{txt}");
    assert_eq!(stdout.lines().next(), Some(head), "{stdout}");
    assert!(txt.contains("=> failed after"), "{txt}");
}

#[test]
fn soak_bad_input_is_one_line_and_exit_2() {
    expect_fail(&["bench", "soak", "--rate", "fast"], 2, "cannot read rate 'fast'");
    expect_fail(&["bench", "soak", "--duration", "0"], 2, "too short for a soak");
    expect_fail(&["bench", "soak", "--duration", "soon"], 2, "cannot read duration");
    expect_fail(&["bench", "soak", "--duration", "25h"], 2, "more than a day");
    expect_fail(&["bench", "soak", "--every", "10ms"], 2, "--every 10ms is too short");
    expect_fail(&["bench", "soak", "--duration", "30s"], 2, "longer than --duration 30 s");
    expect_fail(&["bench", "soak", "--size", "1081"], 2, "multiple of 8");
    expect_fail(&["bench", "soak", "--rcvbuf", "lots"], 2, "cannot read size");
    expect_fail(&["bench", "soak", "--skip-every", "1"], 2, "--skip-every");
    expect_fail(
        &["bench", "soak", "--loopback", "--duration", "1s", "--every", "1s", "-o", "/proc/no/such/dir"],
        1,
        "cannot create the output directory",
    );
    // --interval-json means nothing without --interval.
    let out = run(&["recv", "127.0.0.1:0", "--interval-json"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn soak_help_teaches() {
    let h = String::from_utf8_lossy(&run(&["bench", "soak", "--help"]).stdout).to_string();
    for s in [
        "Seed 001",
        "1080-byte",
        "--rate 691M --duration 24m",
        "--rate 864M --duration 30m",
        "lost so far",
        "tail",
        "Exit codes",
    ] {
        assert!(h.contains(s), "bench soak --help lacks '{s}':\n{h}");
    }
    assert!(h.contains("[default: 942M]") && h.contains("[default: 30m]") && h.contains("[default: 1m]"), "{h}");
}
