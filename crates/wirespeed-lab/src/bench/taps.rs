//! `bench taps`: what live taps cost a recorder. The recorder's capture-thread CPU per
//! datagram (its own `cpu_ns_per_packet`) while it records a fixed-rate stream to pcap files
//! with `--share`, with 0, 1 and 3 (or any) taps attached, the tap counts taken in a rotating
//! order round after round, and compared by their medians (a shared host spreads one run from
//! the next by a quarter: compare only within a session, over many rounds).
//!
//! Every process is this same binary, on loopback: `record ... --share NAME`, then the taps
//! (`tap NAME --json`, counting and checking only), then `send --count N --rate R`. The
//! recorder also says whether it dropped anything at its ring, and each tap what it delivered
//! and what it lost to overruns.

use super::stats::median;
use serde::Serialize;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.taps/1";

/// What to run.
#[derive(Clone, Debug)]
pub struct TapsConfig {
    /// The wirespeed binary (recorder, taps and sender).
    pub exe: PathBuf,
    /// UDP payload bytes per datagram (counter format).
    pub size: usize,
    /// Datagrams per run.
    pub count: u64,
    /// Sender rate, datagrams per second.
    pub pps: u64,
    /// Tap counts to compare.
    pub taps: Vec<usize>,
    /// Rounds (each runs every tap count once, the order rotating by one each round).
    pub repeat: u32,
    /// Where the recordings go (each removed after its run).
    pub dir: PathBuf,
    /// Recorder ring size, bytes.
    pub buffer: u64,
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct TapsRun {
    /// Round, 0-based.
    pub round: u32,
    /// Taps attached.
    pub taps: usize,
    /// The recorder's capture-thread CPU per datagram, ns.
    pub cpu_ns_per_packet: f64,
    /// Datagrams the recorder received.
    pub received: u64,
    /// Datagrams it dropped at a full ring.
    pub ring_full: u64,
    /// Records each tap delivered.
    pub tap_records: Vec<u64>,
    /// Records each tap lost to overruns.
    pub tap_overrun: Vec<u64>,
}

/// One tap count over the rounds.
#[derive(Clone, Debug, Serialize)]
pub struct TapsSummary {
    /// Taps attached.
    pub taps: usize,
    /// Median CPU per datagram, ns.
    pub median_ns: f64,
    /// Lowest and highest, ns.
    pub min_ns: f64,
    /// Highest, ns.
    pub max_ns: f64,
    /// Median over the median with the fewest taps (usually 0): 1.00 = no cost.
    pub ratio: f64,
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct TapsDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Bytes per datagram.
    pub size: usize,
    /// Datagrams per run.
    pub count: u64,
    /// Rate, datagrams/s.
    pub pps: u64,
    /// Rounds.
    pub repeat: u32,
    /// Every run, in the order run.
    pub runs: Vec<TapsRun>,
    /// Per tap count.
    pub summary: Vec<TapsSummary>,
}

fn spawn(exe: &Path, args: &[String]) -> Result<Child> {
    Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::failed(format!("cannot start {}: {e}", exe.display())))
}

/// The first stderr line of `c` (its "listening on" or "attached" line), the rest read by a
/// thread so the child never blocks on a full pipe.
fn first_line(c: &mut Child) -> Result<(String, std::thread::JoinHandle<String>)> {
    let mut err = BufReader::new(c.stderr.take().ok_or_else(|| Error::failed("no stderr"))?);
    let mut first = String::new();
    err.read_line(&mut first).map_err(|e| Error::io(format!("reading a child's stderr: {e}")))?;
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    Ok((first, rest))
}

fn output_json(mut c: Child, rest: std::thread::JoinHandle<String>, what: &str) -> Result<Value> {
    let mut out = String::new();
    if let Some(mut o) = c.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    let st = c.wait().map_err(|e| Error::failed(format!("waiting for the {what}: {e}")))?;
    let err = rest.join().unwrap_or_default();
    if !st.success() {
        return Err(Error::failed(format!("the {what} failed ({st}): {}", err.trim())));
    }
    serde_json::from_str(&out).map_err(|e| Error::failed(format!("the {what}'s JSON: {e}")))
}

/// One run with `taps` taps.
fn one(cfg: &TapsConfig, round: u32, taps: usize) -> Result<TapsRun> {
    let name = format!("bench-taps-{}-{round}-{taps}", std::process::id());
    let dir = cfg.dir.join(&name);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("cannot create {}: {e}", dir.display())))?;
    let result = (|| {
        let s = |v: &str| v.to_string();
        let size = cfg.size.to_string();
        let rec_args = vec![
            s("record"),
            s("127.0.0.1:0"),
            s("--size"),
            size.clone(),
            s("--file-format"),
            s("pcap"),
            s("-o"),
            dir.display().to_string(),
            s("--once"),
            s("--json"),
            s("--buffer"),
            cfg.buffer.to_string(),
            s("--rcvbuf"),
            s("64M"),
            s("--share"),
            name.clone(),
        ];
        let mut rec = spawn(&cfg.exe, &rec_args)?;
        let (first, rec_rest) = first_line(&mut rec)?;
        let port = first
            .split("listening on ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| Error::failed(format!("the recorder did not start: {}", first.trim())))?;
        let mut tapped = Vec::new();
        for _ in 0..taps {
            let mut t = spawn(&cfg.exe, &[s("tap"), name.clone(), s("--json")])?;
            let (first, rest) = first_line(&mut t)?;
            if !first.contains("attached") {
                return Err(Error::failed(format!("a tap did not attach: {}", first.trim())));
            }
            tapped.push((t, rest));
        }
        let send = Command::new(&cfg.exe)
            .args(["send", &format!("127.0.0.1:{port}"), "--size", &size, "--count"])
            .arg(cfg.count.to_string())
            .arg("--rate")
            .arg(format!("{}pps", cfg.pps))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| Error::failed(format!("cannot run the sender: {e}")))?;
        if !send.status.success() {
            return Err(Error::failed(format!("the sender failed: {}", String::from_utf8_lossy(&send.stderr).trim())));
        }
        let r = output_json(rec, rec_rest, "recorder")?;
        let mut run = TapsRun {
            round,
            taps,
            cpu_ns_per_packet: r["capture"]["cpu_ns_per_packet"].as_f64().unwrap_or(0.0),
            received: r["capture"]["total"]["received"].as_u64().unwrap_or(0),
            ring_full: r["ring"]["ring_full"].as_u64().unwrap_or(0),
            tap_records: Vec::new(),
            tap_overrun: Vec::new(),
        };
        for (t, rest) in tapped {
            let j = output_json(t, rest, "tap")?;
            run.tap_records.push(j["records"].as_u64().unwrap_or(0));
            run.tap_overrun.push(j["tap_overrun"]["records"].as_u64().unwrap_or(0));
        }
        Ok(run)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Run every round; `each` sees each run as it ends. `stop` ends early (between runs).
pub fn run(cfg: &TapsConfig, stop: &std::sync::atomic::AtomicBool, each: &mut dyn FnMut(&TapsRun)) -> Result<TapsDoc> {
    let mut runs = Vec::new();
    let n = cfg.taps.len();
    'rounds: for round in 0..cfg.repeat {
        for k in 0..n {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break 'rounds;
            }
            let taps = cfg.taps[(k + round as usize) % n];
            let r = one(cfg, round, taps)?;
            each(&r);
            runs.push(r);
        }
    }
    let mut summary: Vec<TapsSummary> = Vec::new();
    let mut counts = cfg.taps.clone();
    counts.sort_unstable();
    counts.dedup();
    for &t in &counts {
        let v: Vec<f64> = runs.iter().filter(|r| r.taps == t).map(|r| r.cpu_ns_per_packet).collect();
        let Some(m) = median(v.clone()) else { continue };
        summary.push(TapsSummary {
            taps: t,
            median_ns: m,
            min_ns: v.iter().copied().fold(f64::INFINITY, f64::min),
            max_ns: v.iter().copied().fold(0.0, f64::max),
            ratio: 1.0,
        });
    }
    let base = summary.first().map_or(1.0, |s| s.median_ns.max(1e-9));
    for s in &mut summary {
        s.ratio = s.median_ns / base;
    }
    Ok(TapsDoc { schema: SCHEMA, size: cfg.size, count: cfg.count, pps: cfg.pps, repeat: cfg.repeat, runs, summary })
}

/// One line per run.
pub fn run_line(r: &TapsRun) -> String {
    format!(
        "round {:>2}  taps {}  {:7.1} ns/datagram  received {}  ring-full {}  tap records {:?}  tap overrun {:?}",
        r.round, r.taps, r.cpu_ns_per_packet, r.received, r.ring_full, r.tap_records, r.tap_overrun
    )
}

/// The summary table.
pub fn summary(doc: &TapsDoc) -> String {
    let mut o = format!(
        "recorder capture CPU per datagram (ns), {} x {} B at {} datagrams/s, {} round(s):\n  taps   median      min      max   vs fewest\n",
        doc.count, doc.size, doc.pps, doc.repeat
    );
    for s in &doc.summary {
        o.push_str(&format!(
            "  {:>4} {:8.1} {:8.1} {:8.1}   {:.3}\n",
            s.taps, s.median_ns, s.min_ns, s.max_ns, s.ratio
        ));
    }
    o
}
