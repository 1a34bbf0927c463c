//! `bench ring`: time to zero-loss readiness of `wirespeed record`, per ring size, on a cold
//! and on a warm host, for this build and, with another build, before and after.
//!
//! "Ready" is a promise: a stream at full rate started the moment the recorder says it is
//! listening loses nothing. So a run measures the promise, not a proxy for it:
//! 1. cold: `sync`, `echo 3 > /proc/sys/vm/drop_caches`, then a pause ([`COLD_SETTLE`]) so that
//!    a VM hands the freed memory back to its hypervisor (free page reporting waits about 2 s);
//!    warm: right after the cold run of the same build and size, as a second recording would;
//! 2. start `wirespeed record 127.0.0.1:0 --size S --buffer SIZE --once --json -o DIR`, pinned
//!    to the last CPU, and time it from spawn to its "listening on" line (process start and ring
//!    included);
//! 3. at that line, start `wirespeed send` at `--rate` for `--stream`, pinned to the first CPU;
//! 4. read the recorder's ledger: every datagram sent must have been received, none lost, no
//!    socket drop, no ring-full drop. Then the run's time to zero-loss readiness is its time to
//!    "listening"; a run that lost data has none (its build called itself ready too early).
//!
//! The recorder's own `ring.ready_s` (faulting in and locking the ring) and `ring.populated_s`
//! (when its last page was in: after "listening" in builds that faulted the tail in the
//! background) are shown beside it.

use super::stats::upper_median;
use crate::testbed::proc::{Proc, Stream, Wait};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.ring/2";

/// How long one side of a run may take at most (an 8 GiB ring on a cold host takes seconds to
/// fault in, and the stream follows).
const RUN_LIMIT: Duration = Duration::from_secs(180);
/// The pause after dropping the caches, so the freed memory is really cold (a VM's balloon
/// driver reports free pages to the hypervisor about 2 s after they are freed).
pub const COLD_SETTLE: Duration = Duration::from_secs(3);

/// A build to measure.
#[derive(Clone, Debug, Serialize)]
pub struct Build {
    /// "this" or "other".
    pub label: String,
    /// The binary.
    pub exe: PathBuf,
}

/// The host's memory when a run starts.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum HostState {
    /// Caches dropped and the freed memory left to go cold first (needs root).
    Cold,
    /// Straight after another recording of the same size.
    Warm,
}

impl HostState {
    /// How it is written on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            HostState::Cold => "cold",
            HostState::Warm => "warm",
        }
    }

    /// Parse `cold` or `warm`.
    pub fn parse(s: &str) -> std::result::Result<HostState, String> {
        match s {
            "cold" => Ok(HostState::Cold),
            "warm" => Ok(HostState::Warm),
            _ => Err(format!("{s:?}: a host state is cold or warm")),
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RingConfig {
    /// Ring sizes, bytes.
    pub sizes: Vec<u64>,
    /// Host states, each run in this order for every build and size (cold before warm).
    pub states: Vec<HostState>,
    /// Runs per (build, size, state).
    pub repeat: u32,
    /// Builds, run alternately in this order.
    pub builds: Vec<Build>,
    /// The directory each recording goes into (a new subdirectory per run, removed after).
    pub dir: PathBuf,
    /// The stream started at "listening": datagrams per second.
    pub pps: u64,
    /// Its datagram size, bytes.
    pub size: usize,
    /// How long it lasts.
    pub stream: Duration,
}

impl RingConfig {
    /// Datagrams each stream sends.
    pub fn count(&self) -> u64 {
        ((self.pps as f64 * self.stream.as_secs_f64()).round() as u64).max(1)
    }
}

/// One run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Run {
    /// Which build.
    pub build: String,
    /// Ring size asked, bytes.
    pub size: u64,
    /// Cold or warm.
    pub state: HostState,
    /// Round, 0-based.
    pub round: u32,
    /// From spawn to its "listening on" line, seconds, measured here.
    pub listening_s: f64,
    /// The recorder's own time to fault in and lock its ring (`ring.ready_s`).
    pub ready_s: Option<f64>,
    /// When the recorder's last ring page was in (`ring.populated_s`; `None`: not reported,
    /// or still going at the end).
    pub populated_s: Option<f64>,
    /// Datagrams the sender sent.
    pub sent: u64,
    /// Unique datagrams the recorder's ledger received.
    pub received: u64,
    /// What the recorder's ledger counted lost.
    pub lost: u64,
    /// Drops the kernel counted on the recorder's socket (SO_RXQ_OVFL).
    pub socket_drops: u64,
    /// Datagrams dropped at the recorder's full ring.
    pub ring_full: u64,
    /// Every datagram sent was received and recorded: the recorder was ready at "listening".
    pub zero_loss: bool,
    /// The ring's size as the recorder reports it (`ring.capacity`).
    pub capacity: Option<u64>,
    /// Whether the ring was locked in RAM (`ring.locked`).
    pub locked: Option<bool>,
    /// The recorder's capture thread, CPU nanoseconds per datagram (`capture.cpu_ns_per_packet`):
    /// a lossy run with a ring already resident is a capture thread that fell behind.
    pub capture_ns_per_datagram: Option<f64>,
    /// The fullest the ring got, as a fraction (`ring.high_water_fraction`).
    pub ring_high_water: Option<f64>,
    /// Time the hypervisor took the recorder's CPU away while the stream ran (the steal column
    /// of /proc/stat for that CPU), milliseconds; `None` without a pinned CPU.
    pub recorder_cpu_steal_ms: Option<u64>,
    /// The pages the ring got, as reported (`ring.pages`).
    pub pages: Option<String>,
}

/// One build at one size and host state over its runs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// Which build.
    pub build: String,
    /// Ring size, bytes.
    pub size: u64,
    /// Cold or warm.
    pub state: HostState,
    /// Runs behind the figures.
    pub runs: usize,
    /// Runs in which the stream started at "listening" lost nothing.
    pub zero_loss_runs: usize,
    /// Median time to "listening".
    pub listening_s: Option<f64>,
    /// Time to zero-loss readiness: the median time to "listening" when every run was
    /// zero-loss from there; `None` when any run lost data (that build was not ready when it
    /// said so).
    pub ready_zero_loss_s: Option<f64>,
    /// Median lost per run (ledger lost plus datagrams never received).
    pub lost: Option<f64>,
    /// Median of the recorder's `ring.ready_s`.
    pub ring_ready_s: Option<f64>,
    /// Median of the recorder's `ring.populated_s`.
    pub populated_s: Option<f64>,
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
    /// Host states measured.
    pub states: Vec<HostState>,
    /// Runs per build, size and state.
    pub repeat: u32,
    /// The stream's rate, datagrams per second.
    pub pps: u64,
    /// The stream's datagram size, bytes.
    pub datagram: usize,
    /// Datagrams per stream.
    pub count: u64,
    /// CPUs the recorder and the sender were pinned to (None: not pinned, one CPU).
    pub cpus: Option<(usize, usize)>,
    /// Every run, in order.
    pub runs: Vec<Run>,
    /// Per (size, state, build): medians.
    pub summary: Vec<Summary>,
    /// Whether Ctrl-C ended it early.
    pub stopped: bool,
}

/// Read a run from the recorder's and the sender's reports (any field missing: 0 or `None`).
pub fn read_run(at: RunAt<'_>, listening_s: f64, sent: u64, report: &serde_json::Value) -> Run {
    let ring = &report["ring"];
    let cap = &report["capture"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let received = n(&cap["total"]["received"]);
    let lost = n(&cap["total"]["lost"]);
    let k = &cap["kernel"];
    let socket_drops = n(&k["socket_drops_rxq_ovfl"]).max(n(&k["socket_drops_proc"]));
    let ring_full = n(&cap["ring_full"]);
    Run {
        build: at.build.into(),
        size: at.size,
        state: at.state,
        round: at.round,
        listening_s,
        ready_s: ring["ready_s"].as_f64(),
        populated_s: ring["populated_s"].as_f64(),
        sent,
        received,
        lost,
        socket_drops,
        ring_full,
        zero_loss: sent > 0 && received == sent && lost == 0 && socket_drops == 0 && ring_full == 0,
        capture_ns_per_datagram: cap["cpu_ns_per_packet"].as_f64(),
        ring_high_water: ring["high_water_fraction"].as_f64(),
        recorder_cpu_steal_ms: None,
        capacity: ring["capacity"].as_u64(),
        locked: ring["locked"].as_bool(),
        pages: ring["pages"].as_str().map(String::from),
    }
}

/// Which run: build, size, state, round.
#[derive(Clone, Copy, Debug)]
pub struct RunAt<'a> {
    /// Which build.
    pub build: &'a str,
    /// Ring size, bytes.
    pub size: u64,
    /// Cold or warm.
    pub state: HostState,
    /// Round, 0-based.
    pub round: u32,
}

/// The two CPUs a run pins to (recorder, sender): the last and the first, when there are two.
fn cpus() -> Option<(usize, usize)> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (n >= 2).then_some((n - 1, 0))
}

fn pinned(exe: &Path, cpu: Option<usize>) -> Command {
    match cpu {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(c.to_string()).arg(exe);
            cmd
        }
        None => Command::new(exe),
    }
}

/// Drop the page cache and let the freed memory go cold (root only).
pub fn make_cold() -> Result<()> {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").map_err(|e| {
        Error::invalid(format!(
            "cannot drop the caches for a cold run ({e}): run as root, or measure --states warm only"
        ))
    })?;
    std::thread::sleep(COLD_SETTLE);
    Ok(())
}

/// A subdirectory of `dir` made for one recording, removed (with what the recorder wrote in
/// it, and nothing else) when dropped.
struct RunDir(PathBuf);

impl RunDir {
    fn new(dir: &Path) -> Result<RunDir> {
        for i in 0..1000u32 {
            let d = dir.join(format!("wirespeed-bench-ring-{}-{i}", std::process::id()));
            match std::fs::create_dir(&d) {
                Ok(()) => return Ok(RunDir(d)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io(format!("cannot create {}: {e}", d.display()))),
            }
        }
        Err(Error::io(format!("cannot create a run directory in {}: 1000 names taken", dir.display())))
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run_once(cfg: &RingConfig, exe: &Path, at: RunAt<'_>, stop: &AtomicBool) -> Result<Option<Run>> {
    let (rec_cpu, send_cpu) = cpus().map_or((None, None), |(r, s)| (Some(r), Some(s)));
    let out = RunDir::new(&cfg.dir)?;
    let mut rec = pinned(exe, rec_cpu);
    rec.args(["record", "127.0.0.1:0", "--size", &cfg.size.to_string(), "--buffer", &at.size.to_string()]);
    rec.args(["--once", "--json", "-o"]).arg(&out.0);
    wirespeed::sys::die_with_parent(&mut rec);
    let t0 = Instant::now();
    let (recorder, lines) = Proc::spawn_watch(rec, "the recorder", Stream::Stderr)?;
    let mut said = String::new();
    let mut listening = None;
    for l in lines.iter() {
        if let Some(rest) = l.split("listening on ").nth(1) {
            listening = Some((t0.elapsed().as_secs_f64(), rest.split_whitespace().next().unwrap_or("").to_string()));
            break;
        }
        said.push_str(&l);
        said.push('\n');
    }
    let Some((listening_s, addr)) = listening else {
        let exit = recorder.finish(Duration::from_secs(1))?;
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let why = format!("{said}{}", exit.stderr);
        let why = why.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("it exited without a word").to_string();
        return Err(Error::failed(format!("the recorder ({}) did not start: {why}", exe.display())));
    };
    // The stream starts the moment the recorder says it listens.
    let mut send = pinned(exe, send_cpu);
    send.args(["send", &addr, "--size", &cfg.size.to_string(), "--rate", &format!("{}pps", cfg.pps)]);
    send.args(["--count", &cfg.count().to_string(), "--json"]);
    wirespeed::sys::die_with_parent(&mut send);
    let steal0 = rec_cpu.and_then(steal_ticks);
    let sender = Proc::spawn(send, "the sender")?;
    let sender = sender.wait(Wait::new().stop(stop).limit(RUN_LIMIT).kill_at_limit())?;
    let steal = rec_cpu.and_then(steal_ticks).zip(steal0).map(|(b, a)| b.saturating_sub(a) * 10);
    let exit = recorder.wait(Wait::new().stop(stop).limit(RUN_LIMIT).kill_at_limit())?;
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let sent_doc: serde_json::Value = serde_json::from_str(&sender.stdout).unwrap_or_default();
    let sent = sent_doc["sent"].as_u64().or_else(|| sent_doc["total"]["sent"].as_u64()).unwrap_or(0);
    if sent == 0 {
        return Err(Error::failed(format!(
            "the sender ({}) reported nothing sent: {}",
            exe.display(),
            crate::testbed::proc::last_line(&sender.stderr).unwrap_or("it said nothing")
        )));
    }
    let report: serde_json::Value = serde_json::from_str(&exit.stdout).map_err(|e| {
        Error::failed(format!(
            "the recorder ({}) gave no report ({e}): {}",
            exe.display(),
            crate::testbed::proc::last_line(&exit.stderr).unwrap_or("it said nothing")
        ))
    })?;
    Ok(Some(Run { recorder_cpu_steal_ms: steal, ..read_run(at, listening_s, sent, &report) }))
}

/// The steal column of /proc/stat for `cpu` (USER_HZ ticks, 10 ms each): time a hypervisor ran
/// something else on that virtual CPU.
fn steal_ticks(cpu: usize) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let name = format!("cpu{cpu}");
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

/// Run every (size, build, state) `repeat` times: within a round, each size and build has its
/// states in the order given (cold, then warm straight after); `each` sees every run.
pub fn run(cfg: &RingConfig, stop: &AtomicBool, each: &mut dyn FnMut(&Run)) -> Result<RingDoc> {
    let mut runs = Vec::new();
    let mut stopped = false;
    'all: for round in 0..cfg.repeat {
        for &size in &cfg.sizes {
            for b in &cfg.builds {
                for &state in &cfg.states {
                    if state == HostState::Cold {
                        make_cold()?;
                    }
                    let at = RunAt { build: &b.label, size, state, round };
                    let Some(r) = run_once(cfg, &b.exe, at, stop)? else {
                        stopped = true;
                        break 'all;
                    };
                    each(&r);
                    runs.push(r);
                }
            }
        }
    }
    Ok(finish(cfg, runs, stopped))
}

/// The document around finished runs (pure).
pub fn finish(cfg: &RingConfig, runs: Vec<Run>, stopped: bool) -> RingDoc {
    let mut summary = Vec::new();
    for &size in &cfg.sizes {
        for &state in &cfg.states {
            for b in &cfg.builds {
                let mine: Vec<&Run> =
                    runs.iter().filter(|r| r.size == size && r.build == b.label && r.state == state).collect();
                if mine.is_empty() {
                    continue;
                }
                let zero = mine.iter().filter(|r| r.zero_loss).count();
                let listening_s = upper_median(mine.iter().map(|r| r.listening_s).collect());
                summary.push(Summary {
                    build: b.label.clone(),
                    size,
                    state,
                    runs: mine.len(),
                    zero_loss_runs: zero,
                    listening_s,
                    ready_zero_loss_s: if zero == mine.len() { listening_s } else { None },
                    lost: upper_median(mine.iter().map(|r| missing(r) as f64).collect()),
                    ring_ready_s: upper_median(mine.iter().filter_map(|r| r.ready_s).collect()),
                    populated_s: upper_median(mine.iter().filter_map(|r| r.populated_s).collect()),
                });
            }
        }
    }
    RingDoc {
        schema: SCHEMA,
        builds: cfg.builds.clone(),
        sizes: cfg.sizes.clone(),
        states: cfg.states.clone(),
        repeat: cfg.repeat,
        pps: cfg.pps,
        datagram: cfg.size,
        count: cfg.count(),
        cpus: cpus(),
        runs,
        summary,
        stopped,
    }
}

/// What a run did not keep: the ledger's lost, or the datagrams it never saw, whichever is
/// more (tail loss shows only as the difference).
fn missing(r: &Run) -> u64 {
    r.lost.max(r.sent.saturating_sub(r.received))
}

fn secs(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |s| format!("{s:.3}"))
}

/// One run on one line.
pub fn run_line(r: &Run) -> String {
    format!(
        "round {:>2} build {:<5} ring {:>10} {}: listening after {:.3} s; stream from then: {} of {} lost{}{}; ring ready {} s, whole {} s{}{}{}",
        r.round + 1,
        r.build,
        wirespeed::units::bytes(r.size),
        r.state.name(),
        r.listening_s,
        missing(r),
        r.sent,
        if r.socket_drops > 0 { format!(" ({} socket drops)", r.socket_drops) } else { String::new() },
        if r.ring_full > 0 { format!(" ({} ring-full)", r.ring_full) } else { String::new() },
        secs(r.ready_s),
        secs(r.populated_s),
        r.locked.map_or(String::new(), |l| if l { ", locked".into() } else { ", NOT locked".into() }),
        r.pages.as_ref().map_or(String::new(), |p| format!(", {p} pages")),
        capture_words(r)
    )
}

/// "; capture 2.41 us/datagram, ring 1.2 % full at most, 0 ms stolen": what a lossy run with a
/// resident ring needs to be explained.
fn capture_words(r: &Run) -> String {
    let mut w = Vec::new();
    if let Some(ns) = r.capture_ns_per_datagram.filter(|n| *n > 0.0) {
        w.push(format!("capture {:.2} us/datagram", ns / 1e3));
    }
    if let Some(h) = r.ring_high_water {
        w.push(format!("ring {:.1} % full at most", h * 100.0));
    }
    if let Some(ms) = r.recorder_cpu_steal_ms {
        w.push(format!("{ms} ms of its CPU stolen by the hypervisor"));
    }
    if w.is_empty() {
        String::new()
    } else {
        format!("; {}", w.join(", "))
    }
}

/// The table of medians.
pub fn table(doc: &RingDoc) -> String {
    let mut s = format!(
        "time to zero-loss readiness, median of {} run(s) per row: a {} kpps stream of {}-byte datagrams ({} per run) started at 'listening on'\n\
         ready = listening when every run lost nothing from there (n/a: the build said it listened before it could absorb the stream)\n\
         listening = spawn to 'listening on' (process start included); ring = the recorder's ring.ready_s; whole = when its last page was in (ring.populated_s)\n\
         {:>10}  {:<5} {:<6} {:>9} {:>13} {:>9} {:>12} {:>9} {:>9}\n",
        doc.repeat,
        doc.pps as f64 / 1e3,
        doc.datagram,
        doc.count,
        "ring",
        "state",
        "build",
        "ready (s)",
        "listening (s)",
        "zero-loss",
        "lost",
        "ring (s)",
        "whole (s)"
    );
    for r in &doc.summary {
        s.push_str(&format!(
            "{:>10}  {:<5} {:<6} {:>9} {:>13} {:>9} {:>12} {:>9} {:>9}\n",
            wirespeed::units::bytes(r.size),
            r.state.name(),
            r.build,
            secs(r.ready_zero_loss_s),
            secs(r.listening_s),
            format!("{}/{}", r.zero_loss_runs, r.runs),
            r.lost.map_or("n/a".into(), |l| format!("{l:.0}")),
            secs(r.ring_ready_s),
            secs(r.populated_s)
        ));
    }
    if let Some((r, w)) = doc.cpus {
        s.push_str(&format!("=> recorder pinned to CPU {r}, sender to CPU {w}\n"));
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

    fn cfg(builds: &[&str]) -> RingConfig {
        RingConfig {
            sizes: vec![1 << 30],
            states: vec![HostState::Cold, HostState::Warm],
            repeat: 2,
            builds: builds.iter().map(|l| Build { label: (*l).into(), exe: PathBuf::from(l) }).collect(),
            dir: PathBuf::new(),
            pps: 100_000,
            size: 8800,
            stream: Duration::from_secs(2),
        }
    }

    #[test]
    fn a_run_is_zero_loss_only_when_everything_sent_was_kept() {
        let report: serde_json::Value = serde_json::from_str(
            r#"{"ring":{"capacity":1073741824,"locked":true,"ready_s":2.5,"populated_s":2.5,"pages":"transparent"},
                "capture":{"total":{"received":200000,"lost":0},"kernel":{"socket_drops_rxq_ovfl":0},"ring_full":0}}"#,
        )
        .unwrap();
        let at = RunAt { build: "this", size: 1 << 30, state: HostState::Cold, round: 0 };
        let r = read_run(at, 2.6, 200_000, &report);
        assert!(r.zero_loss, "{r:?}");
        assert_eq!((r.ready_s, r.populated_s, r.pages.as_deref()), (Some(2.5), Some(2.5), Some("transparent")));
        // Tail loss shows only as fewer received than sent.
        let r = read_run(at, 2.6, 200_010, &report);
        assert!(!r.zero_loss);
        assert_eq!(missing(&r), 10);
        // Socket drops, ring-full and ledger loss each break it; a report with nothing, too.
        for bad in [
            r#"{"capture":{"total":{"received":200000,"lost":0},"kernel":{"socket_drops_rxq_ovfl":3},"ring_full":0}}"#,
            r#"{"capture":{"total":{"received":200000,"lost":0},"kernel":{"socket_drops_rxq_ovfl":0},"ring_full":1}}"#,
            r#"{"capture":{"total":{"received":199990,"lost":10},"kernel":{"socket_drops_rxq_ovfl":0},"ring_full":0}}"#,
            r#"{}"#,
        ] {
            let v: serde_json::Value = serde_json::from_str(bad).unwrap();
            assert!(!read_run(at, 0.1, 200_000, &v).zero_loss, "{bad}");
        }
    }

    #[test]
    fn readiness_is_listening_only_when_every_run_lost_nothing() {
        let c = cfg(&["this", "other"]);
        let run = |build: &str, state, round, listening, lost: u64| Run {
            build: build.into(),
            size: 1 << 30,
            state,
            round,
            listening_s: listening,
            ready_s: Some(listening - 0.01),
            populated_s: None,
            sent: 200_000,
            received: 200_000 - lost,
            lost,
            socket_drops: lost,
            ring_full: 0,
            zero_loss: lost == 0,
            capture_ns_per_datagram: None,
            ring_high_water: None,
            recorder_cpu_steal_ms: None,
            capacity: None,
            locked: None,
            pages: None,
        };
        let runs = vec![
            run("this", HostState::Cold, 0, 2.0, 0),
            run("other", HostState::Cold, 0, 0.05, 90_000),
            run("this", HostState::Warm, 0, 0.3, 0),
            run("other", HostState::Warm, 0, 0.04, 0),
            run("this", HostState::Cold, 1, 2.4, 0),
            run("other", HostState::Cold, 1, 0.06, 0),
            run("this", HostState::Warm, 1, 0.2, 0),
            run("other", HostState::Warm, 1, 0.05, 0),
        ];
        let d = finish(&c, runs, false);
        assert_eq!(d.summary.len(), 4);
        let row = |b: &str, s| d.summary.iter().find(|r| r.build == b && r.state == s).unwrap();
        assert_eq!(row("this", HostState::Cold).ready_zero_loss_s, Some(2.4));
        assert_eq!(row("this", HostState::Warm).ready_zero_loss_s, Some(0.3));
        // One lossy run of two: that build was not ready when it said so, whatever the other run did.
        let other = row("other", HostState::Cold);
        assert_eq!((other.ready_zero_loss_s, other.zero_loss_runs, other.lost), (None, 1, Some(90_000.0)));
        assert_eq!(row("other", HostState::Warm).ready_zero_loss_s, Some(0.05));
        let t = table(&d);
        assert!(t.contains("1/2") && t.contains("n/a"), "{t}");
        assert_eq!(d.count, 200_000);
    }

    #[test]
    fn host_states_parse() {
        assert_eq!(HostState::parse("cold"), Ok(HostState::Cold));
        assert_eq!(HostState::parse("warm").map(HostState::name), Ok("warm"));
        assert!(HostState::parse("hot").is_err());
    }
}
