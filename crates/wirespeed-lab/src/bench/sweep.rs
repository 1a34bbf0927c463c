//! `bench sweep`: every offered rate x datagram size x receive buffer, each point a real sender
//! and receiver ([`Runner`]), repeated, with the figures of seed 004 (received against
//! transmitted data rate and packet rate per size) and a loss curve drawn from the results.
//!
//! A sweep is long (a 9 x 3 x 3 sweep of 5 s points takes over ten minutes), so the results are
//! written after every point: a sweep stopped by Ctrl-C, a reboot or a killed shell keeps what
//! it measured, and `--resume` runs only the points that are missing. The medians of repeats,
//! not single runs, are what the plots and the summary use; every run is kept in the tables.

use super::point::{Placement, Point, PointConfig, Runner};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use wirespeed::units::{self, Rate};
use wirespeed::{Error, Result};

/// Schema name of the JSON document (results.json).
pub const SCHEMA: &str = "wirespeed.bench.sweep/1";

/// At most this many points in one sweep: beyond it a typo (`1M:9G:1M`) would run for days.
pub const MAX_POINTS: usize = 5000;

/// A sweep to run.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    /// Offered rates, in the order given.
    pub rates: Vec<Rate>,
    /// Payload bytes per datagram.
    pub sizes: Vec<usize>,
    /// Receive buffers the receiver asks for, bytes.
    pub rcvbufs: Vec<u64>,
    /// Sending time per point.
    pub duration: Duration,
    /// Passes over the whole grid.
    pub repeat: u32,
    /// UDP GSO on the sender.
    pub gso: bool,
}

impl SweepConfig {
    /// Number of points the sweep measures (warm-up not counted).
    pub fn points(&self) -> usize {
        self.rates.len() * self.sizes.len() * self.rcvbufs.len() * self.repeat as usize
    }

    /// Every point in the order run: pass, then receive buffer, then size, then rate, so one
    /// pass gives a whole picture before the next refines it.
    pub fn plan(&self) -> Vec<Planned> {
        let mut v = Vec::with_capacity(self.points());
        for pass in 1..=self.repeat {
            for &rcvbuf in &self.rcvbufs {
                for &size in &self.sizes {
                    for &rate in &self.rates {
                        v.push(Planned { pass, rcvbuf, size, rate });
                    }
                }
            }
        }
        v
    }

    /// The planned points not yet in `rows`, with their 0-based place in the plan: what a run
    /// (or a resumed one) still has to measure. Empty when the sweep is complete.
    pub fn missing(&self, rows: &[SweepRow]) -> Vec<(usize, Planned)> {
        let have: std::collections::BTreeSet<_> = rows.iter().map(SweepRow::key).collect();
        self.plan().into_iter().enumerate().filter(|(_, p)| !have.contains(&p.key())).collect()
    }
}

/// One point of the plan.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Planned {
    /// Pass, 1-based.
    pub pass: u32,
    /// Receive buffer asked for.
    pub rcvbuf: u64,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Offered rate.
    pub rate: Rate,
}

impl Planned {
    /// The key that identifies this point among a sweep's results (for `--resume`).
    pub fn key(&self) -> (u32, u64, usize, String) {
        (self.pass, self.rcvbuf, self.size, rate_key(self.rate))
    }
}

/// A rate as a stable string, the same as the child `send --rate` argument: `8000000000`,
/// `500000pps`, `max`.
pub fn rate_key(r: Rate) -> String {
    super::point::rate_arg(r)
}

/// One measured point of a sweep.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepRow {
    /// Pass, 1-based.
    pub pass: u32,
    /// Receive buffer asked for, bytes.
    pub rcvbuf: u64,
    /// The offered rate as [`rate_key`] writes it.
    pub rate: String,
    /// Datagrams/s received (unique, over the sender's sending time).
    pub received_pps: f64,
    /// Missing datagrams as a percentage of those sent.
    pub loss_percent: f64,
    /// The point: sender and receiver reports side by side.
    #[serde(flatten)]
    pub point: Point,
}

impl SweepRow {
    fn new(p: &Planned, point: Point) -> SweepRow {
        let received_pps = if point.send_elapsed_s > 0.0 { point.received as f64 / point.send_elapsed_s } else { 0.0 };
        let loss_percent = if point.sent > 0 { 100.0 * point.missing as f64 / point.sent as f64 } else { 0.0 };
        SweepRow { pass: p.pass, rcvbuf: p.rcvbuf, rate: rate_key(p.rate), received_pps, loss_percent, point }
    }

    fn key(&self) -> (u32, u64, usize, String) {
        (self.pass, self.rcvbuf, self.point.size, self.rate.clone())
    }
}

/// The median of the repeats of one (receive buffer, size, rate): what the plots draw.
#[derive(Clone, Debug, Serialize)]
pub struct MedianRow {
    /// Receive buffer asked for, bytes.
    pub rcvbuf: u64,
    /// Payload bytes per datagram.
    pub size: usize,
    /// The offered rate ([`rate_key`]).
    pub rate: String,
    /// The offered payload rate, bits/s; `None` when flat out.
    pub asked_bps: Option<f64>,
    /// Runs of this point.
    pub runs: usize,
    /// Runs that lost anything.
    pub lossy_runs: usize,
    /// Median achieved (transmitted) payload bits/s.
    pub achieved_bps: f64,
    /// Median received payload bits/s.
    pub received_bps: f64,
    /// Median achieved datagrams/s.
    pub achieved_pps: f64,
    /// Median received datagrams/s.
    pub received_pps: f64,
    /// Median loss, percent of sent.
    pub loss_percent: f64,
    /// The worst run's loss, percent of sent: one lossy run in three is not zero loss, and the
    /// loss figure draws this.
    pub max_loss_percent: f64,
    /// Median drops per million sent.
    pub drops_per_million: f64,
    /// Median kernel socket drops.
    pub kernel_socket_drops: f64,
    /// Median sender CPU per datagram, ns.
    pub send_cpu_ns_per_packet: f64,
    /// Median receiver capture-thread CPU per datagram, ns.
    pub recv_cpu_ns_per_packet: f64,
}

/// The host the sweep ran on, for the report's reader (a figure without its machine is
/// worthless).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HostInfo {
    /// `uname -r`.
    pub kernel: String,
    /// The CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Host name.
    pub hostname: String,
}

impl HostInfo {
    /// Read from /proc; unknown fields stay empty.
    pub fn read() -> HostInfo {
        let rd = |p: &str| std::fs::read_to_string(p).unwrap_or_default().trim().to_string();
        let cpuinfo = rd("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']).to_string()))
            .unwrap_or_default();
        let cpus = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
        HostInfo {
            kernel: rd("/proc/sys/kernel/osrelease"),
            cpu_model,
            cpus,
            hostname: rd("/proc/sys/kernel/hostname"),
        }
    }
}

/// Everything a sweep measured, as results.json holds it and `--json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct SweepDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The command line that ran it (the last one, when resumed).
    pub command: String,
    /// When the sweep started (UTC; a resumed sweep keeps its first start).
    pub started: String,
    /// When its last point ended (UTC).
    pub updated: String,
    /// The machine.
    pub host: HostInfo,
    /// Where the points ran.
    pub placement: Placement,
    /// The receiving program: "recv" (network only) or "record" (to disk through the RAM ring).
    pub receiver: String,
    /// Offered rates ([`rate_key`]).
    pub rates: Vec<String>,
    /// Payload bytes per datagram.
    pub sizes: Vec<usize>,
    /// Receive buffers asked for, bytes.
    pub rcvbufs: Vec<u64>,
    /// Sending time per point, seconds.
    pub duration_s: f64,
    /// Passes over the grid.
    pub repeat: u32,
    /// UDP GSO asked of the sender.
    pub gso: bool,
    /// Points planned.
    pub planned: usize,
    /// Every measured point, in the order run (resumed points after the earlier ones).
    pub rows: Vec<SweepRow>,
    /// Medians of the repeats.
    pub medians: Vec<MedianRow>,
    /// Whether every planned point is measured.
    pub complete: bool,
    /// Whether Ctrl-C ended this run early.
    pub stopped: bool,
    /// The reading: per size and buffer, the highest zero-loss rate and which layer lost what.
    pub summary: Vec<String>,
}

/// What an earlier sweep in the same directory left, read back for `--resume`.
#[derive(Deserialize)]
struct Earlier {
    schema: String,
    started: String,
    duration_s: f64,
    gso: bool,
    placement: EarlierPlacement,
    #[serde(default = "recv_name")]
    receiver: String,
    rows: Vec<SweepRow>,
}

fn recv_name() -> String {
    "recv".into()
}

#[derive(Deserialize)]
struct EarlierPlacement {
    kind: String,
}

/// The rows of an earlier sweep in `dir` (results.json) and when it started, checked to be the
/// same kind of sweep: the same point duration, GSO setting and placement. Different settings
/// would mix two experiments in one figure, so they are refused with the way out.
pub fn load_earlier(
    dir: &Path,
    cfg: &SweepConfig,
    placement_kind: &str,
    receiver: &str,
) -> Result<(Vec<SweepRow>, String)> {
    let p = dir.join("results.json");
    let text = std::fs::read_to_string(&p).map_err(|e| {
        Error::invalid(format!("--resume: cannot read {} ({e}); run the sweep without --resume first", p.display()))
    })?;
    let e: Earlier = serde_json::from_str(&text)
        .map_err(|e| Error::invalid(format!("--resume: {} is not a sweep's results ({e})", p.display())))?;
    if e.schema != SCHEMA {
        return Err(Error::invalid(format!("--resume: {} is {}, not {SCHEMA}", p.display(), e.schema)));
    }
    let mut differ = Vec::new();
    if (e.duration_s - cfg.duration.as_secs_f64()).abs() > 1e-9 {
        differ.push(format!("--duration {}s", e.duration_s));
    }
    if e.gso != cfg.gso {
        differ.push(if e.gso { "--gso".to_string() } else { "no --gso".to_string() });
    }
    if e.placement.kind != placement_kind {
        differ.push(format!(
            "{} (this run: {placement_kind})",
            if e.placement.kind == "loopback" { "--loopback" } else { "partitions (as root, no --loopback)" }
        ));
    }
    if e.receiver != receiver {
        differ.push(if e.receiver == "record" { "--record".to_string() } else { "no --record".to_string() });
    }
    if !differ.is_empty() {
        return Err(Error::invalid(format!(
            "--resume: the sweep in {} was run with {}; resume with the same, or write to another -o directory",
            dir.display(),
            differ.join(", ")
        )));
    }
    // The new plan must hold every earlier point (it may add rates, sizes, buffers or passes):
    // rows outside it would be drawn and summarized as part of a sweep that did not plan them.
    let plan: std::collections::BTreeSet<_> = cfg.plan().iter().map(Planned::key).collect();
    if let Some(r) = e.rows.iter().find(|r| !plan.contains(&r.key())) {
        return Err(Error::invalid(format!(
            "--resume: {} holds a point this sweep does not plan ({} B at {}, rcvbuf {}, pass {}); give --rates, --sizes, --rcvbuf and --repeat that include the earlier ones",
            dir.display(),
            r.point.size,
            r.point.asked_bps.map_or("max".to_string(), units::bits),
            units::bytes(r.rcvbuf),
            r.pass
        )));
    }
    Ok((e.rows, e.started))
}

/// What the caller hears while a sweep runs.
pub enum Progress<'a> {
    /// Point `n` of `of` (1-based, counting resumed ones) is about to start.
    Start {
        /// Its number.
        n: usize,
        /// Points in the plan.
        of: usize,
        /// What it is.
        point: &'a Planned,
    },
    /// It finished.
    Done {
        /// Its number.
        n: usize,
        /// Points in the plan.
        of: usize,
        /// The measurement.
        row: &'a SweepRow,
        /// The document so far, to be saved (results after every point).
        doc: &'a SweepDoc,
    },
}

/// The fixed parts of a document, known before the first point.
pub struct Meta {
    /// The command line.
    pub command: String,
    /// Start time (UTC), or the earlier sweep's when resumed.
    pub started: String,
    /// The machine.
    pub host: HostInfo,
}

/// Run the sweep: a warm-up point, then every planned point not already in `earlier`.
/// `progress` sees every point start and end (with the document so far, so it can be saved).
pub fn run(
    runner: &Runner,
    cfg: &SweepConfig,
    meta: Meta,
    earlier: Vec<SweepRow>,
    progress: &mut dyn FnMut(Progress) -> Result<()>,
) -> Result<SweepDoc> {
    let plan = cfg.plan();
    let mut doc = SweepDoc {
        schema: SCHEMA,
        command: meta.command,
        started: meta.started,
        updated: String::new(),
        host: meta.host,
        placement: runner.placement(),
        receiver: runner.receiver().to_string(),
        rates: cfg.rates.iter().map(|&r| rate_key(r)).collect(),
        sizes: cfg.sizes.clone(),
        rcvbufs: cfg.rcvbufs.clone(),
        duration_s: cfg.duration.as_secs_f64(),
        repeat: cfg.repeat,
        gso: cfg.gso,
        planned: plan.len(),
        rows: earlier,
        medians: Vec::new(),
        complete: false,
        stopped: false,
        summary: Vec::new(),
    };
    let todo = cfg.missing(&doc.rows);
    let point_cfg = |p: &Planned| PointConfig {
        rate: p.rate,
        size: p.size,
        duration: cfg.duration,
        gso: cfg.gso,
        rcvbuf: p.rcvbuf,
    };
    if let Some((_, first)) = todo.first() {
        runner.warm_up(&point_cfg(first))?;
    }
    for (i, p) in &todo {
        progress(Progress::Start { n: i + 1, of: plan.len(), point: p })?;
        match runner.run(&point_cfg(p))? {
            Some(point) => {
                doc.rows.push(SweepRow::new(p, point));
                finish(&mut doc, cfg);
                let row = doc.rows.last().expect("a row was just pushed");
                progress(Progress::Done { n: i + 1, of: plan.len(), row, doc: &doc })?;
            }
            None => {
                doc.stopped = true;
                break;
            }
        }
    }
    finish(&mut doc, cfg);
    Ok(doc)
}

/// Recompute the derived parts (medians, summary, completeness, time stamp).
fn finish(doc: &mut SweepDoc, cfg: &SweepConfig) {
    doc.medians = medians(&doc.rows);
    doc.complete = cfg.missing(&doc.rows).is_empty();
    doc.summary = summarize(&doc.medians, &doc.rows);
    let largest = cfg.rcvbufs.iter().copied().max().unwrap_or(0);
    if let Some(n) =
        super::point::rcvbuf_note(largest, doc.rows.iter().filter(|r| r.rcvbuf == largest).map(|r| &r.point))
    {
        doc.summary.push(n);
    }
    doc.updated = wirespeed::spool::utc_iso(unix_ns());
}

/// Write `body` to `path` through a temporary file and a rename, so a reader (or a `--resume`
/// after a crash) never sees half a file.
pub fn write_atomic(path: &Path, body: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, body).map_err(|e| Error::io(format!("cannot write {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(format!("cannot rename {} into place: {e}", tmp.display())))
}

/// Save the results so far: results.json and results.csv in `dir`.
pub fn save(dir: &Path, doc: &SweepDoc) -> Result<()> {
    let json = serde_json::to_string_pretty(doc).map_err(|e| Error::failed(format!("cannot encode JSON: {e}")))?;
    write_atomic(&dir.join("results.json"), json.as_bytes())?;
    write_atomic(&dir.join("results.csv"), csv(doc).as_bytes())
}

/// Nanoseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// [`stats::median`](super::stats::median) as a sweep's rows hold it: `NaN` for none (a
/// figure no run gave, written as an empty CSV cell and `null` in JSON).
pub fn median(v: Vec<f64>) -> f64 {
    super::stats::median(v).unwrap_or(f64::NAN)
}

/// Group the rows by (receive buffer, size, rate) and take medians, ordered by buffer, size and
/// offered rate.
pub fn medians(rows: &[SweepRow]) -> Vec<MedianRow> {
    let mut groups: BTreeMap<(u64, usize, String), Vec<&SweepRow>> = BTreeMap::new();
    for r in rows {
        groups.entry((r.rcvbuf, r.point.size, r.rate.clone())).or_default().push(r);
    }
    let mut out: Vec<MedianRow> = groups
        .into_iter()
        .map(|((rcvbuf, size, rate), g)| {
            let m = |f: &dyn Fn(&SweepRow) -> f64| median(g.iter().map(|r| f(r)).collect());
            MedianRow {
                rcvbuf,
                size,
                rate,
                asked_bps: g[0].point.asked_bps,
                runs: g.len(),
                lossy_runs: g.iter().filter(|r| r.point.lossy).count(),
                achieved_bps: m(&|r| r.point.achieved_bps),
                received_bps: m(&|r| r.point.received_bps),
                achieved_pps: m(&|r| r.point.achieved_pps),
                received_pps: m(&|r| r.received_pps),
                loss_percent: m(&|r| r.loss_percent),
                max_loss_percent: g.iter().map(|r| r.loss_percent).fold(0.0, f64::max),
                drops_per_million: m(&|r| r.point.drops_per_million),
                kernel_socket_drops: m(&|r| r.point.kernel_socket_drops.map_or(f64::NAN, |k| k as f64)),
                send_cpu_ns_per_packet: m(&|r| r.point.send_cpu_ns_per_packet),
                recv_cpu_ns_per_packet: m(&|r| r.point.recv_cpu_ns_per_packet),
            }
        })
        .collect();
    // Offered rate order within a (buffer, size): flat out last.
    out.sort_by(|a, b| {
        (a.rcvbuf, a.size)
            .cmp(&(b.rcvbuf, b.size))
            .then(a.asked_bps.unwrap_or(f64::INFINITY).total_cmp(&b.asked_bps.unwrap_or(f64::INFINITY)))
    });
    out
}

/// "1080 B" or "1080 B, rcvbuf 1.0 MiB" when the sweep has several buffers.
pub fn series_name(size: usize, rcvbuf: u64, several_buffers: bool) -> String {
    if several_buffers {
        format!("{size} B, rcvbuf {}", units::bytes(rcvbuf))
    } else {
        format!("{size} B")
    }
}

/// Per size and buffer: the highest achieved rate at which no run lost anything, below every
/// rate at which one did (as seed 002 and seed 004 read their figures), and where the loss was.
pub fn summarize(medians: &[MedianRow], rows: &[SweepRow]) -> Vec<String> {
    let several = medians.iter().map(|m| m.rcvbuf).collect::<std::collections::BTreeSet<_>>().len() > 1;
    let mut out = Vec::new();
    let mut keys: Vec<(u64, usize)> = medians.iter().map(|m| (m.rcvbuf, m.size)).collect();
    keys.dedup();
    for (rcvbuf, size) in keys {
        let group: Vec<&SweepRow> = rows.iter().filter(|r| r.rcvbuf == rcvbuf && r.point.size == size).collect();
        let name = series_name(size, rcvbuf, several);
        let (best, lowest_lossy) = super::point::highest_clean(group.iter().map(|r| &r.point));
        let mut line = match best {
            Some(p) => format!(
                "{name}: zero loss up to {} ({}) achieved",
                units::bits(p.achieved_bps),
                units::pps(p.achieved_pps)
            ),
            None => format!("{name}: no rate without loss"),
        };
        if lowest_lossy.is_finite() {
            let lossy: Vec<&&SweepRow> = group.iter().filter(|r| r.point.lossy).collect();
            let missing: u64 = lossy.iter().map(|r| r.point.missing.max(r.point.lost)).sum();
            let kernel: u64 = lossy.iter().map(|r| r.point.kernel_socket_drops.unwrap_or(0)).sum();
            let layer = if missing == 0 {
                "no end-of-stream message, so the tail is unproven".to_string()
            } else if kernel >= missing {
                "all counted by the kernel at the receiving socket (the receiver did not keep up)".to_string()
            } else if kernel == 0 {
                "none counted at the receiving socket (lost before it: sender, link or stack)".to_string()
            } else {
                format!(
                    "{} at the receiving socket, {} before it",
                    units::thousands(kernel),
                    units::thousands(missing - kernel)
                )
            };
            line.push_str(&format!(
                "; loss from {} achieved ({} of {} runs lossy; {} datagrams missing: {layer})",
                units::bits(lowest_lossy),
                lossy.len(),
                group.len(),
                units::thousands(missing)
            ));
        } else if !group.is_empty() {
            line.push_str(&format!("; no loss in any of {} runs", group.len()));
        }
        // A sender short of the asked rate bounds what the sweep could show.
        let short = group
            .iter()
            .filter(|r| r.point.asked_bps.is_some_and(|a| r.point.achieved_bps < 0.95 * a))
            .map(|r| r.point.asked_bps.unwrap_or(0.0))
            .fold(f64::INFINITY, f64::min);
        if short.is_finite() {
            let gso = group.iter().any(|r| r.point.gso_used);
            line.push_str(&format!(
                "; the sender fell short of the asked rate from {} (sender-bound there{})",
                units::bits(short),
                if gso { "" } else { "; --gso helps" }
            ));
        }
        out.push(line);
    }
    out
}

/// Heading lines for the terminal.
pub fn header(cfg: &SweepConfig, placement: &Placement, receiver: &str) -> String {
    format!(
        "wirespeed bench sweep: {} rate(s) x {} size(s) x {} receive buffer(s) x {} pass(es) = {} points of {} each, {}{}{}\n\
         rates are UDP payload bits/s; achieved = what the sender really sent; lost = the ledger; kernel drops = the receiving socket's own counter",
        cfg.rates.len(),
        cfg.sizes.len(),
        cfg.rcvbufs.len(),
        cfg.repeat,
        cfg.points(),
        units::nanos(cfg.duration.as_nanos() as f64),
        placement.description,
        if cfg.gso { ", sender with UDP GSO" } else { "" },
        if receiver == "record" { ", every point recorded to disk (wirespeed record)" } else { "" }
    )
}

/// One finished point on one line.
pub fn row_line(n: usize, of: usize, r: &SweepRow) -> String {
    format!(
        "[{n:>3}/{of}] pass {} {:>5} B rcvbuf {:>9}  {}",
        r.pass,
        r.point.size,
        units::bytes(r.rcvbuf),
        r.point.lines()
    )
}

/// The medians as a text table.
pub fn median_table(doc: &SweepDoc) -> String {
    let mut s = format!(
        "{:>6} {:>10} {:>12} {:>12} {:>12} {:>11} {:>11} {:>9} {:>10} {:>7} {:>10} {:>10}\n",
        "size",
        "rcvbuf",
        "offered",
        "achieved",
        "received",
        "sent pps",
        "recv pps",
        "loss %",
        "kern drops",
        "lossy",
        "tx ns/pkt",
        "rx ns/pkt"
    );
    for m in &doc.medians {
        s.push_str(&format!(
            "{:>6} {:>10} {:>12} {:>12} {:>12} {:>11} {:>11} {:>9.4} {:>10} {:>7} {:>10.0} {:>10.0}\n",
            m.size,
            units::bytes(m.rcvbuf),
            m.asked_bps.map_or("max".into(), units::bits),
            units::bits(m.achieved_bps),
            units::bits(m.received_bps),
            units::pps(m.achieved_pps),
            units::pps(m.received_pps),
            m.loss_percent,
            if m.kernel_socket_drops.is_finite() { format!("{:.0}", m.kernel_socket_drops) } else { "-".into() },
            format!("{}/{}", m.lossy_runs, m.runs),
            m.send_cpu_ns_per_packet,
            m.recv_cpu_ns_per_packet
        ));
    }
    s
}

/// The whole result as text: heading facts, medians, summary.
pub fn text(doc: &SweepDoc) -> String {
    let mut s = format!(
        "wirespeed bench sweep, {} .. {}\n{}\nhost: {} ({} CPUs, {}), kernel {}\n{} of {} points measured{}\n\nmedians of the repeats:\n",
        doc.started,
        doc.updated,
        doc.placement.description,
        doc.host.hostname,
        doc.host.cpus,
        doc.host.cpu_model,
        doc.host.kernel,
        doc.rows.len(),
        doc.planned,
        if doc.complete { "" } else { " (incomplete: --resume runs the rest)" }
    );
    s.push_str(&median_table(doc));
    s.push('\n');
    for l in &doc.summary {
        s.push_str("=> ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// Every run as CSV, one row per point.
pub fn csv(doc: &SweepDoc) -> String {
    let mut s = String::from(
        "pass,size_bytes,rcvbuf_bytes,rate,offered_bps,achieved_bps,received_bps,achieved_pps,received_pps,\
         sent,received,lost,missing,late,duplicate,invalid,loss_percent,drops_per_million,kernel_socket_drops,\
         udp_rcvbuf_errors,udp_in_errors,softnet_dropped,end_of_stream,lossy,send_cpu_ns_per_packet,\
         recv_cpu_ns_per_packet,send_cpus,recv_cpu,send_wall_s,send_elapsed_s,gso_used,rcvbuf_granted\n",
    );
    for r in &doc.rows {
        let p = &r.point;
        s.push_str(&format!(
            "{},{},{},{},{},{:.0},{:.0},{:.1},{:.1},{},{},{},{},{},{},{},{:.6},{:.3},{},{},{},{},{},{},{:.1},{:.1},{},{},{:.3},{:.3},{},{}\n",
            r.pass,
            p.size,
            r.rcvbuf,
            r.rate,
            p.asked_bps.map_or(String::new(), |b| format!("{b:.0}")),
            p.achieved_bps,
            p.received_bps,
            p.achieved_pps,
            r.received_pps,
            p.sent,
            p.received,
            p.lost,
            p.missing,
            p.late,
            p.duplicate,
            p.invalid,
            r.loss_percent,
            p.drops_per_million,
            p.kernel_socket_drops.map_or(String::new(), |k| k.to_string()),
            p.kernel_rcvbuf_errors,
            p.kernel_in_errors,
            p.softnet_dropped,
            p.end_of_stream,
            p.lossy,
            p.send_cpu_ns_per_packet,
            p.recv_cpu_ns_per_packet,
            p.send_cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" "),
            p.recv_cpu.map_or(String::new(), |c| c.to_string()),
            p.send_wall_s,
            p.send_elapsed_s,
            p.gso_used,
            p.rcvbuf_granted
        ));
    }
    s
}

/// Read a rate list (see [`units::parse_rate_list`]): `1G,2G,4G`, ranges `1G:9G:1G`, and mixes
/// of both, at most [`MAX_POINTS`] rates.
pub fn parse_rates(s: &str) -> std::result::Result<Vec<Rate>, String> {
    units::parse_rate_list(s, MAX_POINTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bench::point::test_point as point;

    fn row(pass: u32, size: usize, gbps: f64, achieved: f64, lost: u64, kernel: u64) -> SweepRow {
        let p = Planned { pass, rcvbuf: 32 << 20, size, rate: Rate::Bits(gbps * 1e9) };
        SweepRow::new(&p, point(size, gbps * 1e9, achieved * 1e9, lost, kernel))
    }

    #[test]
    fn ranges_and_lists() {
        let r = parse_rates("1G:9G:1G").unwrap();
        assert_eq!(r.len(), 9);
        assert_eq!(r[0], Rate::Bits(1e9));
        assert_eq!(r[8], Rate::Bits(9e9));
        // Steps that do not land on the end stop below it; float steps do not lose the end.
        assert_eq!(parse_rates("1G:2G:0.3G").unwrap().len(), 4);
        assert_eq!(parse_rates("0.1G:0.9G:0.1G").unwrap().len(), 9);
        let r = parse_rates("100kpps:300kpps:100kpps, 5G ,max").unwrap();
        assert_eq!(r, vec![Rate::Packets(1e5), Rate::Packets(2e5), Rate::Packets(3e5), Rate::Bits(5e9), Rate::Max]);
        for bad in [
            "1:9999999999999999999999T:1",
            "1:2:0.0000000000000000001",
            "",
            "1G:2G",
            "1G:100kpps:1G",
            "2G:1G:1G",
            "1G:2G:0",
            "max:2G:1G",
            "x",
            "1M:9G:1M",
            "1G:2G:3G:4G",
        ] {
            assert!(parse_rates(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plan_order_and_keys() {
        let cfg = SweepConfig {
            rates: vec![Rate::Bits(1e9), Rate::Bits(2e9)],
            sizes: vec![1080, 8800],
            rcvbufs: vec![1 << 20],
            duration: Duration::from_secs(1),
            repeat: 2,
            gso: false,
        };
        let plan = cfg.plan();
        assert_eq!(plan.len(), 8);
        assert_eq!(cfg.points(), 8);
        assert_eq!((plan[0].pass, plan[0].size, plan[0].rate), (1, 1080, Rate::Bits(1e9)));
        assert_eq!((plan[1].pass, plan[1].size, plan[1].rate), (1, 1080, Rate::Bits(2e9)));
        assert_eq!((plan[2].size, plan[4].pass), (8800, 2));
        let keys: std::collections::BTreeSet<_> = plan.iter().map(Planned::key).collect();
        assert_eq!(keys.len(), 8, "every point has its own key");
        // A measured row has the key of the point it measured.
        let r = SweepRow::new(&plan[3], point(8800, 2e9, 2e9, 0, 0));
        assert_eq!(r.key(), plan[3].key());
    }

    #[test]
    fn medians_of_repeats() {
        let rows = vec![
            row(1, 8800, 1.0, 1.0, 0, 0),
            row(2, 8800, 1.0, 0.9, 0, 0),
            row(3, 8800, 1.0, 0.95, 10, 10),
            row(1, 1080, 1.0, 0.5, 0, 0),
        ];
        let m = medians(&rows);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].size, m[0].runs, m[0].lossy_runs), (1080, 1, 0));
        assert_eq!((m[1].size, m[1].runs, m[1].lossy_runs), (8800, 3, 1));
        assert!((m[1].achieved_bps - 0.95e9).abs() < 1.0, "{}", m[1].achieved_bps);
        // The median run lost nothing; the worst lost 10 of its datagrams.
        assert_eq!(m[1].loss_percent, 0.0);
        assert!((m[1].max_loss_percent - 100.0 * 10.0 / rows[2].point.sent as f64).abs() < 1e-9);
        assert_eq!(median(vec![1.0, 2.0, 3.0, 4.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn summary_reads_like_the_seeds() {
        let rows = vec![
            row(1, 8800, 1.0, 1.0, 0, 0),
            row(1, 8800, 2.0, 2.0, 0, 0),
            row(1, 8800, 3.0, 3.0, 50, 50),
            row(1, 1080, 1.0, 1.0, 0, 0),
            row(1, 1080, 2.0, 1.2, 7, 0),
        ];
        let s = summarize(&medians(&rows), &rows);
        assert_eq!(s.len(), 2, "{s:?}");
        assert!(s[0].starts_with("1080 B: zero loss up to 1.00 Gb/s"), "{s:?}");
        assert!(s[0].contains("none counted at the receiving socket"), "{s:?}");
        assert!(
            s[0].contains("the sender fell short of the asked rate from 2.00 Gb/s (sender-bound there; --gso helps)"),
            "{s:?}"
        );
        assert!(s[1].starts_with("8800 B: zero loss up to 2.00 Gb/s"), "{s:?}");
        assert!(
            s[1].contains(
                "loss from 3.00 Gb/s achieved (1 of 3 runs lossy; 50 datagrams missing: all counted by the kernel"
            ),
            "{s:?}"
        );
    }

    #[test]
    fn csv_has_one_row_per_run_and_matching_columns() {
        let rows = vec![row(1, 8800, 1.0, 1.0, 0, 0), row(1, 8800, 2.0, 2.0, 3, 1)];
        let doc = SweepDoc {
            schema: SCHEMA,
            command: "wirespeed bench sweep".into(),
            started: "t0".into(),
            updated: "t1".into(),
            host: HostInfo::default(),
            placement: Placement::test_loopback(&[0], &[1]),
            receiver: "recv".into(),
            rates: vec!["1000000000".into(), "2000000000".into()],
            sizes: vec![8800],
            rcvbufs: vec![32 << 20],
            duration_s: 1.0,
            repeat: 1,
            gso: false,
            planned: 2,
            medians: medians(&rows),
            rows,
            complete: true,
            stopped: false,
            summary: vec![],
        };
        let c = csv(&doc);
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines.len(), 3);
        let n = lines[0].split(',').count();
        assert!(lines.iter().all(|l| l.split(',').count() == n), "{c}");
        assert!(lines[2].starts_with("2,8800,") || lines[2].starts_with("1,8800,33554432,2000000000,"), "{c}");
        // The document reads back as an earlier sweep for --resume.
        let json = serde_json::to_string(&doc).unwrap();
        let e: Earlier = serde_json::from_str(&json).unwrap();
        assert_eq!(e.rows.len(), 2);
        assert_eq!(e.rows[1].point.lost, 3);
        assert_eq!(e.rows[1].key(), (1, 32 << 20, 8800, "2000000000".into()));
        assert!(text(&doc).contains("2 of 2 points measured"));
    }
}
