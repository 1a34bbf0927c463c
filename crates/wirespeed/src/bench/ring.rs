//! `bench ring`: how long `wirespeed record` takes from start until it can receive, per ring
//! size (issue 15: a 1 GiB ring ready in <= 0.25 s, bigger rings saying how long they took),
//! for this build and, with another build, before and after.
//!
//! Each run starts `wirespeed record 127.0.0.1:0 --size 8800 --buffer SIZE --duration 1 -o DIR --json` with
//! no sender: the ring is allocated, faulted in and locked, the socket opened, and one second
//! later the recorder ends. Two figures per run: the recorder's own `ring.ready_s` (its JSON;
//! n/a for a build that does not report it), and, for every build, the time from spawning the
//! process until it printed "listening on" (process start and ring included), measured here.

use super::stats::upper_median;
use crate::testbed::proc::{Proc, Stream};
use crate::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.ring/1";

/// How long a run may take at most (an 8 GiB ring on a slow host takes seconds to fault in).
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// A build to measure.
#[derive(Clone, Debug, Serialize)]
pub struct Build {
    /// "this" or "other".
    pub label: String,
    /// The binary.
    pub exe: PathBuf,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RingConfig {
    /// Ring sizes, bytes.
    pub sizes: Vec<u64>,
    /// Runs per (build, size).
    pub repeat: u32,
    /// Builds, run alternately in this order.
    pub builds: Vec<Build>,
    /// The directory the recorder is pointed at (it writes nothing without a sender).
    pub dir: PathBuf,
}

/// One run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Run {
    /// Which build.
    pub build: String,
    /// Ring size asked, bytes.
    pub size: u64,
    /// Round, 0-based.
    pub round: u32,
    /// The recorder's own time to ready, seconds (`ring.ready_s`; `None`: not reported).
    pub ready_s: Option<f64>,
    /// From spawn to its "listening on" line, seconds, measured here.
    pub listening_s: f64,
    /// The ring's size as the recorder reports it (`ring.capacity`).
    pub capacity: Option<u64>,
    /// Whether the ring was locked in RAM (`ring.locked`).
    pub locked: Option<bool>,
    /// The pages the ring got, as reported (`ring.pages`, e.g. "hugetlb", "thp", "normal").
    pub pages: Option<String>,
}

/// One build at one size over its runs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Which build.
    pub build: String,
    /// Ring size, bytes.
    pub size: u64,
    /// Runs behind the figures.
    pub runs: usize,
    /// Median of `ready_s` over the runs that reported it.
    pub ready_s: Option<f64>,
    /// Median time to "listening on".
    pub listening_s: Option<f64>,
}

/// The whole measurement.
#[derive(Clone, Debug, Serialize)]
pub struct RingDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The builds.
    pub builds: Vec<Build>,
    /// Ring sizes, bytes.
    pub sizes: Vec<u64>,
    /// Runs per build and size.
    pub repeat: u32,
    /// Every run, in order.
    pub runs: Vec<Run>,
    /// Per (size, build): medians.
    pub summary: Vec<Summary>,
    /// Whether Ctrl-C ended it early.
    pub stopped: bool,
}

/// Read a recorder's report into a run (any field missing: `None`).
pub fn read_run(build: &str, size: u64, round: u32, listening_s: f64, report: &serde_json::Value) -> Run {
    let ring = &report["ring"];
    Run {
        build: build.into(),
        size,
        round,
        ready_s: ring["ready_s"].as_f64(),
        listening_s,
        capacity: ring["capacity"].as_u64(),
        locked: ring["locked"].as_bool(),
        pages: ring["pages"].as_str().map(String::from),
    }
}

fn run_once(exe: &Path, size: u64, dir: &Path, stop: &std::sync::atomic::AtomicBool) -> Result<Option<(f64, String)>> {
    let mut cmd = Command::new(exe);
    cmd.args([
        "record",
        "127.0.0.1:0",
        "--size",
        "8800",
        "--buffer",
        &size.to_string(),
        "--duration",
        "1",
        "--json",
        "-o",
    ])
    .arg(dir);
    crate::sys::die_with_parent(&mut cmd);
    let t0 = Instant::now();
    let (proc, lines) = Proc::spawn_watch(cmd, "the recorder", Stream::Stderr)?;
    let mut said = String::new();
    let mut listening = None;
    for l in lines.iter() {
        if l.contains("listening on") {
            listening = Some(t0.elapsed().as_secs_f64());
            break;
        }
        said.push_str(&l);
        said.push('\n');
    }
    let exit = proc.finish(RUN_LIMIT)?;
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(None);
    }
    let Some(listening) = listening else {
        let why = format!("{said}{}", exit.stderr);
        let why = why.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("it exited without a word").to_string();
        return Err(Error::Runtime(format!("the recorder ({}) did not start: {why}", exe.display())));
    };
    Ok(Some((listening, exit.stdout)))
}

/// Run every (size, build) `repeat` times, builds alternating within each round; `each` sees
/// every run.
pub fn run(cfg: &RingConfig, stop: &std::sync::atomic::AtomicBool, each: &mut dyn FnMut(&Run)) -> Result<RingDoc> {
    let mut runs = Vec::new();
    let mut stopped = false;
    'all: for round in 0..cfg.repeat {
        for &size in &cfg.sizes {
            for b in &cfg.builds {
                let Some((listening, out)) = run_once(&b.exe, size, &cfg.dir, stop)? else {
                    stopped = true;
                    break 'all;
                };
                let report: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
                let r = read_run(&b.label, size, round, listening, &report);
                each(&r);
                runs.push(r);
            }
        }
    }
    Ok(finish(cfg, runs, stopped))
}

/// The document around finished runs (pure).
pub fn finish(cfg: &RingConfig, runs: Vec<Run>, stopped: bool) -> RingDoc {
    let mut summary = Vec::new();
    for &size in &cfg.sizes {
        for b in &cfg.builds {
            let mine: Vec<&Run> = runs.iter().filter(|r| r.size == size && r.build == b.label).collect();
            if mine.is_empty() {
                continue;
            }
            summary.push(Summary {
                build: b.label.clone(),
                size,
                runs: mine.len(),
                ready_s: upper_median(mine.iter().filter_map(|r| r.ready_s).collect()),
                listening_s: upper_median(mine.iter().map(|r| r.listening_s).collect()),
            });
        }
    }
    RingDoc {
        schema: SCHEMA,
        builds: cfg.builds.clone(),
        sizes: cfg.sizes.clone(),
        repeat: cfg.repeat,
        runs,
        summary,
        stopped,
    }
}

fn secs(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |s| format!("{s:.3}"))
}

/// One run on one line.
pub fn run_line(r: &Run) -> String {
    format!(
        "round {:>2} build {:<5} ring {:>10}: ready {:>7} s (recorder's ring.ready_s), listening after {:.3} s{}{}",
        r.round + 1,
        r.build,
        crate::units::bytes(r.size),
        secs(r.ready_s),
        r.listening_s,
        r.locked.map_or(String::new(), |l| if l { ", locked".into() } else { ", NOT locked".into() }),
        r.pages.as_ref().map_or(String::new(), |p| format!(", {p} pages"))
    )
}

/// The table of medians.
pub fn table(doc: &RingDoc) -> String {
    let mut s = format!(
        "time to ready, median of {} run(s) per row; ready = the recorder's own ring.ready_s (n/a: that build does not report it); listening = spawn to 'listening on', measured by this bench (process start included)\n{:>10}  {:<6} {:>9} {:>13}\n",
        doc.repeat, "ring", "build", "ready (s)", "listening (s)"
    );
    for r in &doc.summary {
        s.push_str(&format!(
            "{:>10}  {:<6} {:>9} {:>13}\n",
            crate::units::bytes(r.size),
            r.build,
            secs(r.ready_s),
            secs(r.listening_s)
        ));
    }
    for b in &doc.builds {
        s.push_str(&format!("=> build {}: {}\n", b.label, b.exe.display()));
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_with_and_without_ready_s() {
        let new: serde_json::Value = serde_json::from_str(
            r#"{"schema":"wirespeed.record/1","ring":{"capacity":1073741824,"locked":true,"ready_s":0.18,"pages":"hugetlb"}}"#,
        )
        .unwrap();
        let r = read_run("this", 1 << 30, 0, 0.31, &new);
        assert_eq!(
            (r.ready_s, r.capacity, r.locked, r.pages.as_deref()),
            (Some(0.18), Some(1 << 30), Some(true), Some("hugetlb"))
        );
        let old: serde_json::Value =
            serde_json::from_str(r#"{"schema":"wirespeed.record/1","ring":{"capacity":1073741824,"locked":true}}"#)
                .unwrap();
        let r = read_run("other", 1 << 30, 0, 0.6, &old);
        assert_eq!((r.ready_s, r.pages.clone()), (None, None));
        assert!(run_line(&r).contains("ready     n/a s"), "{}", run_line(&r));
        assert_eq!(read_run("x", 1, 0, 0.1, &serde_json::Value::Null).capacity, None);
    }

    #[test]
    fn medians_per_build_and_size() {
        let b = |l: &str| Build { label: l.into(), exe: PathBuf::from(l) };
        let cfg =
            RingConfig { sizes: vec![1 << 30], repeat: 3, builds: vec![b("this"), b("other")], dir: PathBuf::new() };
        let run = |build: &str, round, ready: Option<f64>, listening| Run {
            build: build.into(),
            size: 1 << 30,
            round,
            ready_s: ready,
            listening_s: listening,
            capacity: None,
            locked: None,
            pages: None,
        };
        let runs = vec![
            run("this", 0, Some(0.2), 0.3),
            run("other", 0, None, 0.9),
            run("this", 1, Some(0.1), 0.2),
            run("other", 1, None, 0.5),
            run("this", 2, Some(0.3), 0.4),
            run("other", 2, None, 0.7),
        ];
        let d = finish(&cfg, runs, false);
        assert_eq!(d.summary.len(), 2);
        assert_eq!((d.summary[0].ready_s, d.summary[0].listening_s), (Some(0.2), Some(0.3)));
        assert_eq!((d.summary[1].ready_s, d.summary[1].listening_s, d.summary[1].runs), (None, Some(0.7), 3));
        let t = table(&d);
        assert!(t.contains("n/a"), "{t}");
    }
}
