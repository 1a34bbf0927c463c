//! Open-loop round-trip measurement: probes leave on a fixed schedule whatever the replies do,
//! and each reply's round trip is taken from one clock (the sender's CLOCK_MONOTONIC).
//!
//! Why open loop: a closed loop (send, wait for the reply, send the next) slows down exactly
//! when the path does, so it never sees the queue it would have built; seed 003's question is
//! what happens to latency *at* 10,000 or 40,000 packets per second.
//!
//! One thread sends and receives. Between deadlines it sleeps in `ppoll` on the socket (or
//! spins with `--spin`), takes the replies that arrive, and files each round trip in three
//! places: the interval HdrHistogram (handed to a logger thread every interval, which writes
//! the standard HdrHistogram log and merges the total), the heat-map grid, and the ledger of
//! reply sequence numbers (lost, late, duplicate). The loop does not allocate or lock: the
//! interval hand-over goes through bounded channels with `try_send`/`try_recv` only.

use super::grid::{self, Grid};
use super::probe;
use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use serde::Serialize;
use wirespeed::error::{Error, Result};
use wirespeed::ledger::{GapRange, LedgerConfig, LedgerCounts, SenderEnd, StreamLedger};
use wirespeed::sys;
use wirespeed::units;

/// Highest probe rate a ping run takes, probes per second (and the reflector's default cap per
/// client, so that no legitimate ping is throttled).
pub const MAX_PPS: f64 = 10_000_000.0;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Highest round trip the histograms track exactly; slower replies are filed at this value.
pub const MAX_TRACKED_NS: u64 = 60_000_000_000;
/// Significant digits of the histograms (0.1 % resolution).
const SIGFIG: u8 = 3;
/// Most probes sent back to back when the thread wakes up behind schedule, before replies are
/// read again.
const MAX_BURST: u64 = 64;

/// How a ping run goes.
#[derive(Clone, Debug)]
pub struct PingConfig {
    /// The reflector.
    pub target: SocketAddr,
    /// Probes per second.
    pub pps: f64,
    /// UDP payload bytes per probe (at least [`probe::MIN_SIZE`]).
    pub size: usize,
    /// How long to send (None with no count: until stopped).
    pub duration: Option<Duration>,
    /// How many probes to send (overrides the duration).
    pub count: Option<u64>,
    /// Interval of the histogram log and of the progress lines.
    pub interval: Duration,
    /// How long to wait for replies after the last probe; later ones count as lost.
    pub linger: Duration,
    /// Pin the ping thread to this CPU.
    pub cpu: Option<usize>,
    /// Poll without sleeping: lower and steadier latency, one core at 100 %.
    pub spin: bool,
    /// Write the interval histograms here as an HdrHistogram log.
    pub hlog: Option<PathBuf>,
    /// Print a line per interval on stderr.
    pub progress: bool,
    /// Closed loop, as sockperf's ping-pong: a probe leaves only after the previous reply came
    /// back (or `linger` passed). Slots missed while waiting are skipped and counted, because
    /// their latency is exactly what a closed loop cannot see (coordinated omission).
    pub closed_loop: bool,
    /// Probe over PGM sessions (`--transport pgm`): the settings, and the port replies come
    /// back to on this host.
    pub pgm: Option<(wirespeed::pgm::PgmConfig, u16)>,
}

impl PingConfig {
    /// Seed 003's setting: 10,000 probes/s of 64 bytes, 2 s intervals.
    pub fn new(target: SocketAddr) -> Self {
        PingConfig {
            target,
            pps: 10_000.0,
            size: 64,
            duration: Some(Duration::from_secs(10)),
            count: None,
            interval: Duration::from_secs(2),
            linger: Duration::from_secs(1),
            cpu: None,
            spin: false,
            hlog: None,
            progress: false,
            closed_loop: false,
            pgm: None,
        }
    }

    /// Probes the run will send (None: until stopped).
    pub fn planned(&self) -> Option<u64> {
        self.count.or_else(|| self.duration.map(|d| (d.as_secs_f64() * self.pps).round() as u64))
    }
}

/// Latency percentiles of a distribution, in nanoseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// 99.99th percentile.
    pub p9999: u64,
    /// Largest.
    pub max: u64,
    /// Mean.
    pub mean: f64,
    /// Standard deviation.
    pub stdev: f64,
}

impl Percentiles {
    /// Read the standard set from a histogram (zeros when it is empty).
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        let q = |p: f64| h.value_at_quantile(p);
        Percentiles {
            count: h.len(),
            min: h.min(),
            p50: q(0.50),
            p90: q(0.90),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: h.max(),
            mean: h.mean(),
            stdev: h.stdev(),
        }
    }

    /// Every value halved: the one-way estimate from round trips.
    pub fn halved(&self) -> Percentiles {
        Percentiles {
            count: self.count,
            min: self.min / 2,
            p50: self.p50 / 2,
            p90: self.p90 / 2,
            p99: self.p99 / 2,
            p999: self.p999 / 2,
            p9999: self.p9999 / 2,
            max: self.max / 2,
            mean: self.mean / 2.0,
            stdev: self.stdev / 2.0,
        }
    }
}

/// One interval of the run, as the log has it.
#[derive(Clone, Debug, Serialize)]
pub struct IntervalSummary {
    /// Start, seconds since the first probe.
    pub start_s: f64,
    /// Length, seconds.
    pub seconds: f64,
    /// Replies in the interval.
    pub replies: u64,
    /// Median round trip, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Slowest, ns.
    pub max_ns: u64,
}

/// How well the open-loop schedule was kept.
#[derive(Clone, Debug, Serialize)]
pub struct Schedule {
    /// Probes per second asked for.
    pub pps_asked: f64,
    /// Probes per second achieved between the first and the last probe.
    pub pps_achieved: f64,
    /// How late sends left relative to their deadline: median, 99th percentile and worst, ns.
    pub late_p50_ns: u64,
    /// 99th percentile lateness, ns.
    pub late_p99_ns: u64,
    /// Worst lateness, ns.
    pub late_max_ns: u64,
    /// Closed loop (send after the previous reply) instead of open loop.
    pub closed_loop: bool,
    /// Closed loop only: scheduled probes not sent because a reply was still outstanding.
    pub skipped: u64,
}

/// Everything a ping run measured.
#[derive(Clone, Debug, Serialize)]
pub struct PingReport {
    /// Schema name for scripts.
    pub schema: &'static str,
    /// The reflector.
    pub target: String,
    /// Probe size, UDP payload bytes.
    pub size: usize,
    /// The schedule and how well it was kept.
    pub schedule: Schedule,
    /// Probes sent.
    pub sent: u64,
    /// Probes that could not be sent (the kernel refused them).
    pub send_errors: u64,
    /// The reply ledger: received (unique), lost, late (out of order), duplicate, invalid...
    pub replies: LedgerCounts,
    /// Datagrams that were not replies to this run's probes: another run's (session number),
    /// from a source other than the target, for a probe never sent, or carrying a send time
    /// its probe did not leave with (forged). Never counted as replies or latency samples.
    pub strays: u64,
    /// Where the lost replies are, by probe number.
    pub lost_ranges: Vec<GapRange>,
    /// Round-trip time percentiles, ns.
    pub rtt: Percentiles,
    /// One-way estimate (RTT / 2), ns.
    pub one_way: Percentiles,
    /// Per interval.
    pub intervals: Vec<IntervalSummary>,
    /// Seconds from the first probe to the end of the wait for replies.
    pub seconds: f64,
    /// CPU time of the ping thread per probe (send and reply), ns.
    pub cpu_ns_per_probe: f64,
    /// The CPU the ping thread ran on at the end.
    pub cpu: Option<usize>,
    /// Whether the thread spun instead of sleeping.
    pub spin: bool,
    /// The HdrHistogram log, if written.
    pub hlog: Option<String>,
    /// Both PGM sessions' counters (`--transport pgm`): repairs of probes and of replies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pgm: Option<super::pgm::PgmLink>,
}

impl PingReport {
    /// The summary a person reads.
    pub fn human(&self) -> String {
        let us = |ns: u64| format!("{:.1}", ns as f64 / 1e3);
        let r = &self.rtt;
        let c = &self.replies;
        let mut s = format!(
            "ping {}{}: {} probes of {} B at {} (achieved {}; send lateness p99 {}), CPU {} ns/probe{}\n",
            self.target,
            if self.schedule.closed_loop { " (closed loop)" } else { "" },
            units::thousands(self.sent),
            self.size,
            units::pps(self.schedule.pps_asked),
            units::pps(self.schedule.pps_achieved),
            units::nanos(self.schedule.late_p99_ns as f64),
            self.cpu_ns_per_probe.round(),
            self.cpu.map(|c| format!(" on CPU {c}")).unwrap_or_default()
        );
        s += &format!(
            "  replies {}  lost {}  late {}  duplicate {}  invalid {}{}{}\n",
            units::thousands(c.received),
            c.lost,
            c.late,
            c.duplicate,
            c.invalid,
            if self.strays > 0 { format!("  strays {}", self.strays) } else { String::new() },
            if self.send_errors > 0 { format!("  send errors {}", self.send_errors) } else { String::new() },
        );
        if self.schedule.closed_loop && self.schedule.skipped > 0 {
            s += &format!(
                "  closed loop: {} scheduled probes were not sent while a reply was outstanding; what they \
                 would have measured is not in these percentiles (coordinated omission: drop --closed-loop)\n",
                units::thousands(self.schedule.skipped)
            );
        }
        if !self.lost_ranges.is_empty() {
            let shown: Vec<String> = self
                .lost_ranges
                .iter()
                .take(8)
                .map(|g| if g.first == g.last { g.first.to_string() } else { format!("{}-{}", g.first, g.last) })
                .collect();
            let more = self.lost_ranges.len().saturating_sub(8);
            s += &format!(
                "  lost probes: {}{}\n",
                shown.join(", "),
                if more > 0 { format!(" (+{more} more ranges)") } else { String::new() }
            );
        }
        s += "          min     p50     p90     p99   p99.9  p99.99     max  (us)\n";
        for (name, p) in [("RTT", r), ("one-way", &self.one_way)] {
            s += &format!(
                "  {:<7} {:>6} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}\n",
                name,
                us(p.min),
                us(p.p50),
                us(p.p90),
                us(p.p99),
                us(p.p999),
                us(p.p9999),
                us(p.max)
            );
        }
        if let Some(p) = &self.pgm {
            s += &format!("  {}\n", p.line());
        }
        s += "  (one-way = RTT / 2, an estimate: the two directions are not measured apart)\n";
        s
    }
}

/// A finished run: the report plus what the figures are drawn from.
pub struct PingRun {
    /// The numbers.
    pub report: PingReport,
    /// Replies by (send time, round trip), for the heat map.
    pub grid: Grid,
    /// All round trips of the run.
    pub total: Histogram<u64>,
    /// Seconds between probes, to place lost probes on the time axis.
    pub period_s: f64,
}

/// An interval histogram on its way to the logger.
struct Slice {
    hist: Histogram<u64>,
    start_ns: u64,
    end_ns: u64,
    last: bool,
}

/// Live counters the logger shows in its progress lines.
#[derive(Default)]
struct Live {
    sent: AtomicU64,
    replies: AtomicU64,
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, SIGFIG).expect("static histogram bounds are valid")
}

/// Explain a socket error seen while probing.
fn probe_error(target: SocketAddr, e: &std::io::Error) -> Error {
    if e.raw_os_error() == Some(libc::ECONNREFUSED) {
        Error::failed(format!(
            "nothing answers at {target} (ICMP port unreachable): start `wirespeed reflect {}` there, or check the port",
            target.port()
        ))
    } else {
        Error::failed(format!("cannot probe {target}: {e}"))
    }
}

/// Longest single wait in the probe loop, so a stop is seen within this time.
const MAX_POLL_NS: u64 = 100_000_000;

/// How long replies are still awaited after a stop.
const STOP_LINGER_NS: u64 = 200_000_000;

/// Run one ping; `stop` ends the sending early (the replies still in flight are awaited for at
/// most 200 ms).
pub fn run(cfg: &PingConfig, stop: &AtomicBool) -> Result<PingRun> {
    if cfg.size < probe::MIN_SIZE || cfg.size > 65507 {
        return Err(Error::invalid(format!(
            "a probe of {} bytes cannot work: use --size {}..65507 (the probe header is {} bytes)",
            cfg.size,
            probe::MIN_SIZE,
            probe::MIN_SIZE
        )));
    }
    if !(cfg.pps.is_finite() && cfg.pps > 0.0 && cfg.pps <= MAX_PPS) {
        return Err(Error::invalid(format!("{} probes/s is not a rate ping can keep: use 1..10000000", cfg.pps)));
    }
    if cfg.interval < Duration::from_millis(10) {
        return Err(Error::invalid("the interval must be at least 10 ms"));
    }
    // A run that would send nothing must not look like a measurement (and 0 probes gives the
    // ledger nothing to settle).
    if cfg.count == Some(0) || (cfg.count.is_none() && cfg.duration.is_some_and(|d| d.is_zero())) {
        return Err(Error::invalid(
            "a ping of 0 probes or of no time measures nothing: give --count or --duration above 0",
        ));
    }
    let bind: SocketAddr = if cfg.target.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("static");
    let sock = UdpSocket::bind(bind).map_err(|e| Error::io(format!("cannot open a UDP socket: {e}")))?;
    sock.connect(cfg.target).map_err(|e| Error::failed(format!("cannot reach {}: {e}", cfg.target)))?;
    let fd = sock.as_raw_fd();
    let _ = sys::set_rcvbuf(fd, 4 << 20, true).or_else(|_| sys::set_rcvbuf(fd, 4 << 20, false));

    // The logger: writes the interval log, merges the total, prints progress.
    let mut log = match &cfg.hlog {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(|e| Error::io(format!("cannot create the histogram log {}: {e}", p.display())))?,
        )),
        None => None,
    };
    let (full_tx, full_rx) = sync_channel::<Slice>(4);
    let (spare_tx, spare_rx) = sync_channel::<Histogram<u64>>(4);
    for _ in 0..2 {
        let _ = spare_tx.try_send(new_hist());
    }
    let live = Arc::new(Live::default());
    let wall_start = SystemTime::now();
    let logger = {
        let live = live.clone();
        let progress = cfg.progress;
        let target = cfg.target;
        let pps = cfg.pps;
        std::thread::Builder::new()
            .name("ping-log".into())
            .spawn(move || logger(full_rx, spare_tx, log.take(), wall_start, live, progress, target, pps))
            .map_err(|e| Error::io(format!("cannot start the logger thread: {e}")))?
    };

    let wire = match &cfg.pgm {
        Some((p, reply)) => Some(super::pgm::PingWire::open(p, cfg.target, *reply, cfg.size)?),
        None => None,
    };
    let result = probe_loop(cfg, &sock, wire, stop, full_tx, spare_rx, &live);
    let logged = logger.join().map_err(|_| Error::failed("the histogram logger failed"))?;
    let (mut report, grid, period_s) = result?;
    let (total, intervals) = logged?;
    report.rtt = Percentiles::of(&total);
    report.one_way = report.rtt.halved();
    report.intervals = intervals;
    report.hlog = cfg.hlog.as_ref().map(|p| p.display().to_string());
    Ok(PingRun { report, grid, total, period_s })
}

type LoopResult = Result<(PingReport, Grid, f64)>;

#[allow(clippy::too_many_arguments)]
fn probe_loop(
    cfg: &PingConfig,
    sock: &UdpSocket,
    mut wire: Option<super::pgm::PingWire>,
    stop: &AtomicBool,
    full_tx: SyncSender<Slice>,
    spare_rx: Receiver<Histogram<u64>>,
    live: &Live,
) -> LoopResult {
    if let Some(cpu) = cfg.cpu {
        sys::pin_current_thread(cpu).map_err(|e| Error::invalid(format!("cannot pin ping to CPU {cpu}: {e}")))?;
    }
    let _ = sys::set_timer_slack_ns(1);
    // Over PGM the replies come to the reply session's socket.
    let fd = wire.as_ref().map_or(sock.as_raw_fd(), |w| w.fd());
    let target = cfg.target;
    let planned = cfg.planned();
    let period_ns = 1e9 / cfg.pps;
    let session = probe::new_session();
    // The send time of each recent probe, by sequence number: a reply counts only if it carries
    // exactly the time its probe left with, so a forged or stray datagram (even one that guessed
    // the session) never becomes a reply or a latency sample. Allocated once: ten seconds of
    // probes, within 4096..2^21 entries.
    let sent_len = ((cfg.pps * 10.0) as usize).clamp(4096, 1 << 21).next_power_of_two();
    let mut sent_at = vec![0u64; sent_len];
    let sent_mask = sent_len as u64 - 1;
    let peer = (target.ip().to_canonical(), target.port());
    let mut buf = vec![0u8; cfg.size];
    probe::init(&mut buf, session);
    let mut batch = sys::RecvBatch::new(64, cfg.size.max(2048) + 1);
    let mut ledger = StreamLedger::new(&LedgerConfig::default());
    let expected_ns = match planned {
        Some(n) => (n as f64 / cfg.pps * 1e9) as u64,
        None => 60_000_000_000,
    };
    let mut grid = Grid::new(grid::column_for(expected_ns));
    let mut lateness = Histogram::<u64>::new_with_bounds(1, MAX_TRACKED_NS, 2).expect("static bounds");
    let mut cur = new_hist();
    let interval_ns = cfg.interval.as_nanos() as u64;
    let (mut strays, mut send_errors) = (0u64, 0u64);

    let start = sys::monotonic_ns() + 1_000_000;
    let due = |i: u64| start + (i as f64 * period_ns) as u64;
    let mut slot = 0u64; // schedule index
    let mut seq = 0u64; // probes actually sent
    let (mut first_tx, mut last_tx) = (0u64, 0u64);
    let mut interval_start = 0u64;
    let mut sending = true;
    let mut reply_deadline = u64::MAX;
    let closed = cfg.closed_loop;
    let pgm_mode = wire.is_some();
    let linger_ns = cfg.linger.as_nanos() as u64;
    let end_by = cfg.duration.filter(|_| cfg.count.is_none()).map(|d| start + d.as_nanos() as u64);
    // Closed loop: the probe awaiting its reply, and when it left.
    let mut outstanding: Option<(u64, u64)> = None;
    let mut skipped = 0u64;
    let mut stop_seen = false;
    let cpu0 = sys::thread_cpu_ns();

    loop {
        let now = sys::monotonic_ns();
        let done = if closed {
            cfg.count.is_some_and(|c| seq >= c) || end_by.is_some_and(|e| now >= e)
        } else {
            planned.is_some_and(|p| slot >= p)
        };
        if sending && (stop.load(Ordering::Relaxed) || done) {
            sending = false;
            if closed && cfg.count.is_none() {
                // Slots that came due (before the end) while the last reply was outstanding were
                // skipped too.
                let horizon = end_by.map_or(now, |e| e.min(now));
                let due_before = (horizon.saturating_sub(start) as f64 / period_ns).ceil() as u64;
                skipped += due_before.saturating_sub(slot);
            }
            let wait = if stop.load(Ordering::Relaxed) {
                stop_seen = true;
                cfg.linger.min(Duration::from_nanos(STOP_LINGER_NS))
            } else {
                cfg.linger
            };
            reply_deadline = now.saturating_add(wait.as_nanos().min(u64::MAX as u128) as u64);
        }
        if closed && outstanding.is_some_and(|(_, t)| now >= t.saturating_add(linger_ns)) {
            outstanding = None; // given up: the ledger counts it lost unless it still comes
        }
        if sending && closed && outstanding.is_none() && now >= due(slot) {
            let t = sys::monotonic_ns();
            probe::stamp(&mut buf, seq, t);
            match match wire.as_mut() {
                Some(w) => w.send(&buf).map(|_| buf.len()),
                None => sys::send_one(fd, &buf),
            } {
                Ok(_) => {
                    if seq == 0 {
                        first_tx = t;
                    }
                    last_tx = t;
                    sent_at[(seq & sent_mask) as usize] = t;
                    let _ = lateness.record((t - due(slot)).max(1));
                    outstanding = Some((seq, t));
                    seq += 1;
                }
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) && ledger.counts().received == 0 => {
                    return Err(probe_error(target, &e));
                }
                Err(_) => send_errors += 1,
            }
            // The next probe takes the next slot after now; the ones passed are skipped.
            let next = ((t - start) as f64 / period_ns).floor() as u64 + 1;
            skipped += next.saturating_sub(slot + 1);
            slot = next.max(slot + 1);
            live.sent.store(seq, Ordering::Relaxed);
            continue;
        }
        if sending && !closed && now >= due(slot) {
            let mut k = 0;
            while k < MAX_BURST && planned.map_or(true, |p| slot < p) {
                let t = sys::monotonic_ns();
                if t < due(slot) {
                    break;
                }
                probe::stamp(&mut buf, seq, t);
                match match wire.as_mut() {
                    Some(w) => w.send(&buf).map(|_| buf.len()),
                    None => sys::send_one(fd, &buf),
                } {
                    Ok(_) => {
                        if seq == 0 {
                            first_tx = t;
                        }
                        last_tx = t;
                        sent_at[(seq & sent_mask) as usize] = t;
                        seq += 1;
                        let _ = lateness.record((t - due(slot)).max(1));
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) && ledger.counts().received == 0 => {
                        return Err(probe_error(target, &e));
                    }
                    Err(_) => send_errors += 1,
                }
                slot += 1;
                k += 1;
            }
            live.sent.store(seq, Ordering::Relaxed);
            continue;
        }
        // A stop while waiting for the last replies cuts the wait short too, however long
        // --linger is.
        if !sending && stop.load(Ordering::Relaxed) && !stop_seen {
            stop_seen = true;
            reply_deadline = reply_deadline.min(now + STOP_LINGER_NS);
        }
        if !sending && (now >= reply_deadline || ledger.counts().received >= seq) {
            break;
        }
        // Hand over the interval histogram when its time is up.
        if now >= start + interval_start + interval_ns && now > start {
            if let Ok(spare) = spare_rx.try_recv() {
                let end = now - start;
                let full = std::mem::replace(&mut cur, spare);
                let _ = full_tx.try_send(Slice { hist: full, start_ns: interval_start, end_ns: end, last: false });
                interval_start = end;
            }
        }
        let next_interval = start + interval_start + interval_ns;
        let deadline = match outstanding {
            Some((_, t)) if sending => t.saturating_add(linger_ns).min(end_by.unwrap_or(u64::MAX)),
            _ if sending => due(slot),
            _ => reply_deadline,
        }
        .min(next_interval);
        let readable = if cfg.spin {
            true
        } else {
            // Never sleep past MAX_POLL_NS: a stop signal may be delivered to another thread and
            // so not interrupt this wait, and the flag must still be seen promptly.
            let wait = deadline.saturating_sub(sys::monotonic_ns()).min(MAX_POLL_NS);
            // PGM's timers (NAK back-off, repairs, SPMs) are served at least every millisecond.
            let wait = if wire.is_some() { wait.min(1_000_000) } else { wait };
            if wait == 0 && wire.is_none() {
                continue;
            }
            match sys::poll_readable(fd, Some(wait)) {
                Ok(r) => r,
                Err(e) => return Err(Error::failed(format!("cannot wait for replies: {e}"))),
            }
        };
        if !readable && wire.is_none() {
            continue;
        }
        let mut handle = |data: &[u8], src: Option<SocketAddr>, truncated: bool, rx: u64| {
            let p = match probe::parse(data, if truncated { 0 } else { cfg.size }) {
                Ok(p) => p,
                Err(_) => {
                    ledger.invalid();
                    return;
                }
            };
            // Not a reply to a probe of this run: another run's (session), a forged or stray
            // datagram (a source other than the target, a probe never sent, a send time the
            // probe did not leave with), or one too old to check. The socket is connected, so
            // the kernel already drops other sources; the check keeps that promise here too.
            // Over PGM the reply session comes from the reflector's address (its source
            // port is its own): the address is checked, and the session by the receiver.
            let from_peer = src.is_some_and(|a| match pgm_mode {
                true => a.ip().to_canonical() == peer.0,
                false => (a.ip().to_canonical(), a.port()) == peer,
            });
            if !from_peer
                || p.session != session
                || p.seq >= seq
                || seq - p.seq > sent_len as u64
                || sent_at[(p.seq & sent_mask) as usize] != p.sent_ns
                || p.sent_ns > rx
            {
                strays += 1;
                return;
            }
            use wirespeed::ledger::Outcome;
            match ledger.record(p.seq) {
                Outcome::Duplicate | Outcome::Stale | Outcome::Suspect => return,
                _ => {}
            }
            if outstanding.is_some_and(|(q, _)| q == p.seq) {
                outstanding = None;
            }
            let rtt = (rx - p.sent_ns).max(1);
            cur.saturating_record(rtt);
            grid.add(p.sent_ns - start, rtt);
        };
        if let Some(w) = wire.as_mut() {
            w.poll(&mut |d: &[u8], src: SocketAddr| handle(d, Some(src), false, sys::monotonic_ns()));
            live.replies.store(ledger.counts().received, Ordering::Relaxed);
            continue;
        }
        let n = match batch.recv(fd, true) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) && ledger.counts().received == 0 => {
                return Err(probe_error(target, &e));
            }
            // A pending socket error (an ICMP message, a refused send) is not about a reply: go on.
            Err(_) => continue,
        };
        let rx = sys::monotonic_ns();
        for i in 0..n {
            let meta = batch.meta(i);
            handle(batch.data(i), meta.src, meta.truncated, rx);
        }
        live.replies.store(ledger.counts().received, Ordering::Relaxed);
    }
    let end = sys::monotonic_ns();
    let cpu_ns = sys::thread_cpu_ns() - cpu0;
    let _ = full_tx.send(Slice { hist: cur, start_ns: interval_start, end_ns: end.saturating_sub(start), last: true });
    if seq > 0 {
        ledger.finish(Some(SenderEnd { first: 0, last: seq - 1 }));
    } else {
        ledger.finish(None);
    }
    let counts = ledger.counts();
    let span = last_tx.saturating_sub(first_tx);
    let report = PingReport {
        schema: "wirespeed.ping/1",
        target: target.to_string(),
        size: cfg.size,
        schedule: Schedule {
            pps_asked: cfg.pps,
            pps_achieved: if span > 0 { (seq - 1) as f64 * 1e9 / span as f64 } else { 0.0 },
            late_p50_ns: lateness.value_at_quantile(0.5),
            late_p99_ns: lateness.value_at_quantile(0.99),
            late_max_ns: lateness.max(),
            closed_loop: closed,
            skipped,
        },
        sent: seq,
        send_errors,
        replies: counts,
        strays,
        lost_ranges: ledger.gaps().to_vec(),
        rtt: Percentiles::default(),
        one_way: Percentiles::default(),
        intervals: Vec::new(),
        seconds: end.saturating_sub(start) as f64 / 1e9,
        cpu_ns_per_probe: if seq > 0 { cpu_ns as f64 / seq as f64 } else { 0.0 },
        cpu: sys::current_cpu(),
        spin: cfg.spin,
        hlog: None,
        pgm: wire.map(|w| w.finish()),
    };
    Ok((report, grid, period_ns / 1e9))
}

type Logged = Result<(Histogram<u64>, Vec<IntervalSummary>)>;

#[allow(clippy::too_many_arguments)]
fn logger(
    full: Receiver<Slice>,
    spare: SyncSender<Histogram<u64>>,
    mut log: Option<std::io::BufWriter<std::fs::File>>,
    wall_start: SystemTime,
    live: Arc<Live>,
    progress: bool,
    target: SocketAddr,
    pps: f64,
) -> Logged {
    let mut total = new_hist();
    let mut summaries = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let log_err = |e: std::io::Error| Error::io(format!("cannot write the histogram log: {e}"));
    let mut writer = match log.as_mut() {
        Some(w) => Some(
            IntervalLogWriterBuilder::new()
                .add_comment(&format!(
                    "wirespeed ping {target} at {pps} probes/s: round-trip times in nanoseconds (use an output value unit ratio of 1000 for microseconds)"
                ))
                .with_start_time(wall_start)
                .with_base_time(wall_start)
                .with_max_value_divisor(1.0)
                .begin_log_with(w, &mut serializer)
                .map_err(log_err)?,
        ),
        None => None,
    };
    loop {
        let slice = match full.try_recv() {
            Ok(s) => s,
            Err(TryRecvError::Empty) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(TryRecvError::Disconnected) => break,
        };
        let mut h = slice.hist;
        if let Some(w) = writer.as_mut() {
            w.write_histogram(
                &h,
                Duration::from_nanos(slice.start_ns),
                Duration::from_nanos(slice.end_ns.saturating_sub(slice.start_ns)),
                None,
            )
            .map_err(|e| Error::io(format!("cannot write the histogram log: {e:?}")))?;
        }
        total.add(&h).map_err(|e| Error::failed(format!("cannot merge histograms: {e:?}")))?;
        let s = IntervalSummary {
            start_s: slice.start_ns as f64 / 1e9,
            seconds: slice.end_ns.saturating_sub(slice.start_ns) as f64 / 1e9,
            replies: h.len(),
            p50_ns: if h.is_empty() { 0 } else { h.value_at_quantile(0.5) },
            p99_ns: if h.is_empty() { 0 } else { h.value_at_quantile(0.99) },
            max_ns: h.max(),
        };
        if progress && !slice.last {
            eprintln!(
                "  {:>6.1} s  sent {:>9}  replies {:>9}  rtt p50 {:>9}  p99 {:>9}  max {:>9}",
                slice.end_ns as f64 / 1e9,
                live.sent.load(Ordering::Relaxed),
                live.replies.load(Ordering::Relaxed),
                units::nanos(s.p50_ns as f64),
                units::nanos(s.p99_ns as f64),
                units::nanos(s.max_ns as f64)
            );
        }
        summaries.push(s);
        if slice.last {
            break;
        }
        h.reset();
        let _ = spare.try_send(h);
    }
    drop(writer);
    if let Some(mut w) = log {
        w.flush().map_err(log_err)?;
    }
    Ok((total, summaries))
}
