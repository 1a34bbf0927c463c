//! A long zero-loss run with a record per interval (seed 001's 24- and 30-minute runs).
//!
//! Seed 001 (Sun, "Cassini UDP performance", 2004) reported zero UDP loss with 1080-byte
//! packets at 691 Mb/s for 24 minutes, 864 Mb/s for 30 minutes and 940 Mb/s for 1 to 2 minutes.
//! A short probe cannot show that: a slow leak (a buffer that creeps full, a periodic job on the
//! receiving host) only shows over minutes. So one sender and one receiver run for the whole
//! duration; the receiver prints its cumulative counts every interval (`recv --interval-json`)
//! and each interval's share is the difference of two samples, so a reader sees *when* loss
//! happened, not only that it did. The last interval is closed by the receiver's final report,
//! which includes the tail (numbers after the last one received, known from the sender's
//! end-of-stream message), so the intervals add up to the run's exact totals.

use super::point::{Placement, Point, PointConfig, Runner, Stream, Streamed};
use super::stats::mbps;
use crate::plot::{Band, LineChart, Series};
use crate::units::{self, Rate};
use crate::Result;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.soak/1";

/// Default rate: Gigabit Ethernet's line rate for 1080-byte payloads (1080 of every 1146 bytes
/// on the wire are payload), the challenge behind the seed's "940 Mbps for 1 to 2 minutes".
pub const DEFAULT_RATE: &str = "942M";
/// The seed's packet size.
pub const DEFAULT_SIZE: usize = 1080;
/// The seed's longest run.
pub const DEFAULT_DURATION: &str = "30m";
/// One row per minute, as the seed watched its runs.
pub const DEFAULT_EVERY: &str = "1m";

/// A soak run to make.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// Offered rate.
    pub rate: Rate,
    /// UDP payload bytes per datagram.
    pub size: usize,
    /// How long the sender sends.
    pub duration: Duration,
    /// One record per this much time.
    pub every: Duration,
    /// UDP GSO on the sender.
    pub gso: bool,
    /// Receive buffer asked for.
    pub rcvbuf: u64,
    /// Leave out every Nth sequence number at the sender (a test of the record: known loss).
    pub skip_every: Option<u64>,
}

/// One cumulative sample of the receiver: an `--interval-json` line, or its final report.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
pub struct Sample {
    /// Seconds since the receiver started.
    pub elapsed_s: f64,
    /// Datagrams received so far (valid and invalid).
    pub datagrams: u64,
    /// Sequence numbers settled as lost so far.
    pub lost: u64,
    /// The receiving socket's drop counter so far.
    pub socket_drops: u64,
    /// UDP RcvbufErrors in the receiver's namespace since it started.
    pub rcvbuf_errors: u64,
    /// When this process read the sample (Unix time, seconds); not in the receiver's line.
    #[serde(skip)]
    pub at_unix_s: f64,
}

/// Read one receiver stderr line as a sample; `None` for anything else it prints.
pub fn parse_sample(line: &str) -> Option<Sample> {
    let t = line.trim();
    if !t.starts_with('{') {
        return None;
    }
    serde_json::from_str(t).ok()
}

/// One row of the record: what happened between two samples.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Interval {
    /// Row number, 1-based.
    pub n: usize,
    /// Start, seconds on the receiver's clock (0 = the receiver started, just before the sender).
    pub start_s: f64,
    /// End, seconds on the receiver's clock.
    pub end_s: f64,
    /// When the row ended, Unix time in seconds (as this process read it).
    pub ended_at_unix_s: f64,
    /// The same as UTC `HH:MM:SS`.
    pub ended_at: String,
    /// Offered datagrams/s: received + lost in the interval, i.e. the sequence numbers the
    /// sender used as the ledger saw them (the sender's own count is per whole second, in
    /// the document's `send_per_second`).
    pub offered_pps: f64,
    /// Offered payload bits/s.
    pub offered_bps: f64,
    /// Received datagrams/s.
    pub received_pps: f64,
    /// Received payload bits/s.
    pub received_bps: f64,
    /// Datagrams received in the interval.
    pub datagrams: u64,
    /// Sequence numbers settled as lost in the interval (the last row includes the tail).
    pub lost: u64,
    /// Drops counted by the receiving socket in the interval.
    pub kernel_socket_drops: u64,
    /// UDP RcvbufErrors in the receiver's namespace in the interval (every socket there).
    pub udp_rcvbuf_errors: u64,
    /// Lost since the start, through this interval.
    pub cumulative_lost: u64,
    /// This row runs to the receiver's end and holds the tail.
    pub to_end: bool,
}

/// The row between two samples.
pub fn interval(n: usize, prev: &Sample, cur: &Sample, size: usize, to_end: bool) -> Interval {
    let dt = cur.elapsed_s - prev.elapsed_s;
    let datagrams = cur.datagrams.saturating_sub(prev.datagrams);
    let lost = cur.lost.saturating_sub(prev.lost);
    let per_s = |n: u64| if dt > 0.0 { n as f64 / dt } else { 0.0 };
    let bits = (size * 8) as f64;
    Interval {
        n,
        start_s: prev.elapsed_s,
        end_s: cur.elapsed_s,
        ended_at_unix_s: cur.at_unix_s,
        ended_at: utc_hms(cur.at_unix_s),
        offered_pps: per_s(datagrams + lost),
        offered_bps: per_s(datagrams + lost) * bits,
        received_pps: per_s(datagrams),
        received_bps: per_s(datagrams) * bits,
        datagrams,
        lost,
        kernel_socket_drops: cur.socket_drops.saturating_sub(prev.socket_drops),
        udp_rcvbuf_errors: cur.rcvbuf_errors.saturating_sub(prev.rcvbuf_errors),
        cumulative_lost: cur.lost,
        to_end,
    }
}

/// The record: a row between each two consecutive samples, the last closed by `end` (the
/// receiver's final report). The receiver's clock starts just before the sender's, so its last
/// regular sample falls a moment before the end; a remainder shorter than half an interval is
/// folded into the last row rather than made a row of its own, so a 30-minute run has 30 rows.
pub fn intervals(samples: &[Sample], end: Option<&Sample>, every_s: f64, size: usize) -> Vec<Interval> {
    let mut pts = vec![Sample::default()];
    pts.extend_from_slice(samples);
    if let Some(e) = end {
        let last = pts[pts.len() - 1];
        if pts.len() >= 2 && e.elapsed_s - last.elapsed_s < every_s / 2.0 {
            pts.pop();
        }
        pts.push(*e);
    }
    let k = pts.len() - 1;
    pts.windows(2).enumerate().map(|(i, w)| interval(i + 1, &w[0], &w[1], size, end.is_some() && i + 1 == k)).collect()
}

/// A run of consecutive clean rows (nothing lost).
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Stretch {
    /// First row.
    pub first: usize,
    /// Last row.
    pub last: usize,
    /// Its length, seconds.
    pub seconds: f64,
}

/// The longest run of consecutive rows without ledger loss (by time; the earliest on a tie).
/// Kernel counters do not break a stretch: socket drops are ledger loss too, and UDP
/// RcvbufErrors count every socket in the namespace, not only this run's.
pub fn longest_clean(rows: &[Interval]) -> Option<Stretch> {
    let mut best: Option<Stretch> = None;
    let mut cur: Option<Stretch> = None;
    for r in rows {
        if r.lost > 0 {
            cur = None;
            continue;
        }
        let s = match cur {
            Some(mut s) => {
                s.last = r.n;
                s.seconds += r.end_s - r.start_s;
                s
            }
            None => Stretch { first: r.n, last: r.n, seconds: r.end_s - r.start_s },
        };
        cur = Some(s);
        if !matches!(best, Some(b) if b.seconds >= s.seconds) {
            best = Some(s);
        }
    }
    best
}

/// Row numbers as ranges: `3, 17-18`.
pub fn ranges(ns: &[usize]) -> String {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &n in ns {
        match out.last_mut() {
            Some((_, b)) if *b + 1 == n => *b = n,
            _ => out.push((n, n)),
        }
    }
    out.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect::<Vec<_>>().join(", ")
}

/// What a row is called: minutes when rows are a minute long, else seconds, hours or intervals.
fn row_name(every_s: f64, many: bool) -> String {
    let name = if every_s == 60.0 {
        "minute"
    } else if every_s == 1.0 {
        "second"
    } else if every_s == 3600.0 {
        "hour"
    } else {
        "interval"
    };
    if many {
        format!("{name}s")
    } else {
        name.to_string()
    }
}

/// `3 (minute)` / `3-5 (minutes)` for a list of rows.
fn rows_phrase(ns: &[usize], every_s: f64) -> String {
    format!("{} {}", row_name(every_s, ns.len() > 1), ranges(ns))
}

/// A duration for people: `30 min`, `1 h 5 min`, `4 s`, `2 min 30 s`.
pub fn human_duration(s: f64) -> String {
    let r = s.round() as u64;
    if s < 60.0 {
        if (s - s.round()).abs() < 0.05 {
            format!("{r} s")
        } else {
            format!("{s:.1} s")
        }
    } else if r < 3600 {
        match r % 60 {
            0 => format!("{} min", r / 60),
            sec => format!("{} min {sec} s", r / 60),
        }
    } else {
        match (r % 3600) / 60 {
            0 => format!("{} h", r / 3600),
            m => format!("{} h {m} min", r / 3600),
        }
    }
}

/// The asked rate as the verdict says it: `942 Mb/s`, `100.0 kpps`, `flat out`.
fn rate_words(r: Rate) -> String {
    match r {
        Rate::Bits(b) => format!("{} Mb/s", mbps(b)),
        Rate::Packets(p) => units::pps(p),
        Rate::Max => "flat out".into(),
    }
}

/// `HH:MM:SS` (UTC) of a Unix time.
fn utc_hms(unix_s: f64) -> String {
    let t = unix_s.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
}

fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The receiver's reorder window for the run: about 100 ms of datagrams (a power of two from
/// 1,024 to the default 65,536). The ledger settles a gap as lost only once the window has
/// passed it, so a smaller window places loss in the right row even at low rates (65,536
/// numbers are 28 s at 2,300 datagrams/s); one sender over loopback or a veth link does not
/// reorder, so nothing late is mistaken for lost.
pub fn reorder_window(rate: Rate, size: usize) -> u64 {
    match rate.packets_per_sec(size) {
        // Clamped before rounding up to a power of two: an absurd rate would otherwise overflow.
        Some(pps) if pps.is_finite() && pps > 0.0 => {
            ((pps * 0.1).ceil().min(65536.0) as u64).next_power_of_two().clamp(1024, 65536)
        }
        _ => 65536,
    }
}

/// The whole record, as `--json` prints it and soak.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct SoakDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Where the run was.
    pub placement: Placement,
    /// Payload bytes per datagram.
    pub size: usize,
    /// The rate asked, as text.
    pub asked: String,
    /// The rate asked in the words of the table's heading and the verdict: `942 Mb/s`,
    /// `100.0 kpps` (a rate asked in datagrams/s stays in datagrams/s), `flat out`.
    pub asked_words: String,
    /// The rate asked, payload bits/s (`None` when flat out).
    pub asked_bps: Option<f64>,
    /// The rate asked, datagrams/s (`None` when flat out).
    pub asked_pps: Option<f64>,
    /// The sending time asked, seconds.
    pub duration_s: f64,
    /// Length of a row, seconds.
    pub every_s: f64,
    /// UDP GSO asked of the sender.
    pub gso: bool,
    /// Receive buffer asked for, bytes.
    pub rcvbuf: u64,
    /// The receiver's reorder window (see [`reorder_window`]).
    pub reorder_window: u64,
    /// Every Nth sequence number left out on purpose (a test), if any.
    pub skip_every: Option<u64>,
    /// The record, one row per interval.
    pub intervals: Vec<Interval>,
    /// The whole run as one point: totals, CPU per packet, CPUs (absent if stopped before the
    /// two ends reported).
    pub point: Option<Point>,
    /// The sender's own count per whole second of its run (sent and skipped).
    pub send_per_second: Vec<u64>,
    /// Rows that lost anything.
    pub lossy_intervals: Vec<usize>,
    /// The longest run of rows without loss.
    pub longest_clean: Option<Stretch>,
    /// Whether the run ended early (Ctrl-C, SIGTERM).
    pub stopped: bool,
    /// Why the run failed part-way (the rows are what was measured before it), if it did.
    pub error: Option<String>,
    /// Nothing lost (ledger and sender's count), end-of-stream message received, run neither
    /// stopped nor failed. It speaks of the rate the sender achieved: when `sender_bound`, that
    /// is below the rate asked, and the rate asked was not tested.
    pub zero_loss: bool,
    /// The sender achieved less than 98% of the rate asked (counting numbers it left out on
    /// purpose): the verdict then names the rate achieved, the sender being the limit.
    pub sender_bound: bool,
    /// One sentence: "zero loss for 30 min at 942 Mb/s" or where loss happened.
    pub verdict: String,
    /// The reading: totals, longest clean stretch, CPU per packet, notes.
    pub summary: Vec<String>,
}

/// Run the soak: one sender and one receiver for the whole duration; `live` sees each row as
/// the receiver reports it (the last row, closed by the final report, is in the document only;
/// [`final_line`] says which live rows it replaces).
///
/// A failure once rows have been measured (the sender died, the receiver would not stop) is not
/// an `Err`: the document holds the rows measured and the failure in `error`, so they can be
/// kept; the caller reports the failure after. A failure before any row is an `Err`.
pub fn run(runner: &Runner, cfg: &SoakConfig, live: &mut (dyn FnMut(&Interval) + Send)) -> Result<SoakDoc> {
    let window = reorder_window(cfg.rate, cfg.size);
    let recv_args = vec![
        "--interval".into(),
        format!("{}ms", cfg.every.as_millis()),
        "--interval-json".into(),
        "--window".into(),
        window.to_string(),
    ];
    let send_args = cfg.skip_every.map(|n| vec!["--skip-every".into(), n.to_string()]).unwrap_or_default();
    let pcfg = PointConfig { rate: cfg.rate, size: cfg.size, duration: cfg.duration, gso: cfg.gso, rcvbuf: cfg.rcvbuf };
    let (tx, rx) = mpsc::channel::<String>();
    let size = cfg.size;
    let (res, samples) = std::thread::scope(|s| {
        let follower = s.spawn(move || follow(rx, size, live));
        let res = runner.run_streamed(&pcfg, Stream { recv_args, send_args, recv_lines: Some(tx) });
        (res, follower.join().unwrap_or_default())
    });
    let signalled = runner.stop_flag().load(Ordering::Relaxed);
    match res {
        Ok(streamed) => {
            let stopped = signalled || streamed.as_ref().is_some_and(|s| s.stopped);
            Ok(build(cfg, runner.placement(), window, &samples, streamed, stopped, None))
        }
        Err(e) if samples.is_empty() => Err(e),
        Err(e) => Ok(build(cfg, runner.placement(), window, &samples, None, signalled, Some(e.to_string()))),
    }
}

fn follow(rx: mpsc::Receiver<String>, size: usize, live: &mut (dyn FnMut(&Interval) + Send)) -> Vec<Sample> {
    let mut samples: Vec<Sample> = Vec::new();
    for line in rx {
        let Some(mut s) = parse_sample(&line) else { continue };
        s.at_unix_s = now_unix();
        let prev = samples.last().copied().unwrap_or_default();
        live(&interval(samples.len() + 1, &prev, &s, size, false));
        samples.push(s);
    }
    samples
}

/// The final sample: the receiver's report, never below the last interval line.
fn end_sample(last: Sample, s: &Streamed) -> Sample {
    let p = &s.point;
    Sample {
        elapsed_s: s.recv_wall_s.max(last.elapsed_s),
        datagrams: s.recv_datagrams.max(last.datagrams),
        lost: p.lost.max(last.lost),
        socket_drops: p.kernel_socket_drops.unwrap_or(0).max(last.socket_drops),
        rcvbuf_errors: p.kernel_rcvbuf_errors.max(last.rcvbuf_errors),
        at_unix_s: now_unix(),
    }
}

/// The samples taken by `sender_end_s`. When the end-of-stream message never comes, the
/// receiver waits for it and goes on reporting; rows after the sender ended carry no traffic, and
/// counted as clean they would lengthen the longest clean stretch and dilute the last row. Their
/// counts are cumulative, so leaving them out loses nothing: the last row takes them.
pub fn trim_after(samples: &[Sample], sender_end_s: f64) -> &[Sample] {
    let keep = samples.iter().take_while(|s| s.elapsed_s <= sender_end_s).count();
    &samples[..keep]
}

/// The document from the samples and the run's point (pure but for the time of day).
fn build(
    cfg: &SoakConfig,
    placement: Placement,
    window: u64,
    samples: &[Sample],
    streamed: Option<Streamed>,
    stopped: bool,
    error: Option<String>,
) -> SoakDoc {
    let every_s = cfg.every.as_secs_f64();
    // No end-of-stream message and no signal: the receiver waited for the message in vain. The
    // sender's end is at least its wall time after the receiver's start (the receiver's clock
    // starts first), so the rows the receiver printed while it waited are left out, and the
    // last row ends with the sender rather than with the wait.
    let waited = streamed.as_ref().filter(|s| !stopped && !s.point.end_of_stream).map(|s| s.point.send_wall_s);
    let kept = match waited {
        Some(end) => trim_after(samples, end),
        None => samples,
    };
    let left_out = samples.len() - kept.len();
    let end = streamed.as_ref().map(|s| {
        let last = kept.last().copied().unwrap_or_default();
        let mut e = end_sample(last, s);
        if let Some(t) = waited {
            e.elapsed_s = t.min(e.elapsed_s).max(last.elapsed_s);
        }
        e
    });
    let recv_wall_s = streamed.as_ref().map_or(0.0, |s| s.recv_wall_s);
    let rows = intervals(kept, end.as_ref(), every_s, cfg.size);
    let (point, send_per_second) = match streamed {
        Some(s) => (Some(s.point), s.send_per_second),
        None => (None, Vec::new()),
    };
    let lossy_intervals: Vec<usize> = rows.iter().filter(|r| r.lost > 0).map(|r| r.n).collect();
    let longest = longest_clean(&rows);
    let failed = error.is_some();
    let zero_loss = !stopped && !failed && point.as_ref().is_some_and(|p| !p.lossy);
    let bound = point.as_ref().is_some_and(|p| sender_bound(cfg, p));
    let verdict = match &error {
        Some(e) => failed_verdict(cfg, &rows, e),
        None => verdict(cfg, &rows, point.as_ref(), stopped, &lossy_intervals, longest),
    };
    let mut summary = summarize(cfg, &rows, point.as_ref(), stopped, longest);
    if let (Some(t), Some(p)) = (waited, &point) {
        let wait = (recv_wall_s - t).max(0.0);
        summary.push(format!(
            "no end-of-stream message came: the receiver waited {} more for it and was then stopped ({}); {}",
            human_duration(wait),
            p.receiver_stopped_by,
            if left_out > 0 {
                format!(
                    "the {left_out} {} it printed meanwhile carried no traffic and are left out",
                    row_name(every_s, left_out > 1)
                )
            } else {
                "the wait is not counted in any row".to_string()
            }
        ));
    }
    if let Some(p) = &point {
        summary.extend(super::point::rcvbuf_note(cfg.rcvbuf, [p]));
    }
    SoakDoc {
        schema: SCHEMA,
        placement,
        size: cfg.size,
        asked: match cfg.rate {
            Rate::Max => "max".into(),
            r => r.to_string(),
        },
        asked_words: rate_words(cfg.rate),
        asked_bps: match cfg.rate {
            Rate::Bits(b) => Some(b),
            Rate::Packets(p) => Some(p * cfg.size as f64 * 8.0),
            Rate::Max => None,
        },
        asked_pps: cfg.rate.packets_per_sec(cfg.size),
        duration_s: cfg.duration.as_secs_f64(),
        every_s,
        gso: cfg.gso,
        rcvbuf: cfg.rcvbuf,
        reorder_window: window,
        skip_every: cfg.skip_every,
        intervals: rows,
        point,
        send_per_second,
        lossy_intervals,
        longest_clean: longest,
        stopped,
        error,
        zero_loss,
        sender_bound: bound,
        verdict,
        summary,
    }
}

/// The sender fell short of the rate asked (below 98% of it, as `bench max` judges): a run
/// then tests the rate achieved, not the one asked.
const SENDER_BOUND: f64 = 0.98;

/// The sender's pace, payload bits/s: its achieved rate, counting the numbers it left out on
/// purpose (`--skip-every`), which took their place in its pacing like the ones it sent.
fn paced_bps(cfg: &SoakConfig, p: &Point) -> f64 {
    match cfg.skip_every {
        Some(n) if n >= 2 => p.achieved_bps * n as f64 / (n - 1) as f64,
        _ => p.achieved_bps,
    }
}

/// Whether the sender did not reach the rate asked (never when flat out: that asks for no rate).
pub fn sender_bound(cfg: &SoakConfig, p: &Point) -> bool {
    p.asked_bps.is_some_and(|a| a > 0.0 && paced_bps(cfg, p) < a * SENDER_BOUND)
}

/// The rate a verdict speaks of: the one asked, or, when the sender fell short of it, the one
/// achieved (in the asked rate's own unit) with the one asked beside it.
fn tested_rate(cfg: &SoakConfig, p: Option<&Point>) -> String {
    match p {
        Some(p) if sender_bound(cfg, p) => {
            let bps = paced_bps(cfg, p);
            let achieved = match cfg.rate {
                Rate::Packets(_) => units::pps(bps / (cfg.size as f64 * 8.0)),
                _ => format!("{} Mb/s", mbps(bps)),
            };
            format!("{achieved} achieved ({} asked; the sender was the limit)", rate_words(cfg.rate))
        }
        _ => rate_words(cfg.rate),
    }
}

/// The verdict of a run that failed part-way: what the rows recorded, never a zero-loss claim.
fn failed_verdict(cfg: &SoakConfig, rows: &[Interval], error: &str) -> String {
    let upto = rows.last().map_or(0.0, |r| r.end_s);
    format!(
        "failed after {} at {}: {} lost in the {} recorded, the rest unknown ({error})",
        human_duration(upto),
        rate_words(cfg.rate),
        units::thousands(rows.last().map_or(0, |r| r.cumulative_lost)),
        row_name(cfg.every.as_secs_f64(), true)
    )
}

/// One sentence: "zero loss for 30 min at 942 Mb/s (...)", or how much was lost and where.
/// `stopped` is the user's signal; a run whose end-of-stream message never came was not stopped
/// by anyone, and its unseen tail is loss or unproven, never "in flight".
pub fn verdict(
    cfg: &SoakConfig,
    rows: &[Interval],
    point: Option<&Point>,
    stopped: bool,
    lossy: &[usize],
    longest: Option<Stretch>,
) -> String {
    let every_s = cfg.every.as_secs_f64();
    let lost_rows = rows.last().map_or(0, |r| r.cumulative_lost);
    let Some(p) = point else {
        let upto = rows.last().map_or(0.0, |r| r.end_s);
        return format!(
            "stopped after {} before the two ends reported: {} lost in the {} recorded",
            human_duration(upto),
            units::thousands(lost_rows),
            row_name(every_s, true)
        );
    };
    let rate = tested_rate(cfg, Some(p));
    let lost = lost_count(p, stopped);
    let mut place = if lossy.is_empty() {
        "not placed in any row".to_string()
    } else {
        format!("in {}", rows_phrase(lossy, every_s))
    };
    if !stopped && !p.end_of_stream && p.missing > p.lost && !lossy.is_empty() {
        place.push_str(&format!(
            " ({} sent but never received are in no row: the end-of-stream message never came)",
            units::thousands(p.missing - p.lost)
        ));
    }
    let clean = match longest {
        Some(s) => format!(
            "longest clean stretch {} ({})",
            human_duration(s.seconds),
            rows_phrase(&(s.first..=s.last).collect::<Vec<_>>(), every_s)
        ),
        None => format!("no {} was free of loss", row_name(every_s, false)),
    };
    let sent_for = human_duration(p.send_elapsed_s);
    if stopped {
        // Both ends were stopped by the same signal: datagrams in flight at that moment are not
        // loss, so only the ledger's gaps count here.
        return if p.lost == 0 {
            format!("stopped after {sent_for} at {rate}: nothing lost so far (the run did not finish, so its tail is unproven)")
        } else {
            format!("stopped after {sent_for} at {rate}: {} lost so far, {place}; {clean}", units::thousands(p.lost))
        };
    }
    if !p.lossy {
        let how = if sender_bound(cfg, p) {
            format!("{}-byte datagrams, {}", cfg.size, units::pps(p.achieved_pps))
        } else {
            format!(
                "{}-byte datagrams; the sender achieved {} Mb/s, {}",
                cfg.size,
                mbps(p.achieved_bps),
                units::pps(p.achieved_pps)
            )
        };
        // The rate's own parenthesis, when sender-bound, takes the details too.
        return match rate.strip_suffix(')') {
            Some(r) => format!("zero loss for {sent_for} at {r}; {how})"),
            None => format!("zero loss for {sent_for} at {rate} ({how})"),
        };
    }
    if lost == 0 {
        return format!(
            "LOSS unproven at {rate}: nothing missing, but the end-of-stream message never came, so the tail is unknown"
        );
    }
    format!(
        "LOSS at {rate}: {} of {} lost ({:.1} per million), {place}; {clean}",
        units::thousands(lost),
        units::thousands(p.received + lost),
        per_million(p, stopped)
    )
}

/// What a run lost: the ledger's loss, or the sender's count of those never received when the
/// tail was invisible to the ledger (numbers left out on purpose by the sender are ledger loss
/// the sender's own count does not include). A run stopped by a signal counts the ledger's
/// only: what was in flight at that moment is not loss.
fn lost_count(p: &Point, stopped: bool) -> u64 {
    if stopped {
        p.lost
    } else {
        p.lost.max(p.missing)
    }
}

/// [`lost_count`] per million sequence numbers used: the one figure the summary and the verdict
/// both give.
fn per_million(p: &Point, stopped: bool) -> f64 {
    let lost = lost_count(p, stopped);
    let used = p.received + lost;
    if used == 0 {
        0.0
    } else {
        lost as f64 * 1e6 / used as f64
    }
}

/// The lines after the table: totals, the clean stretch, the sender's rate, CPU per packet.
/// `stopped` is the user's signal, as in [`verdict`].
fn summarize(
    cfg: &SoakConfig,
    rows: &[Interval],
    point: Option<&Point>,
    stopped: bool,
    longest: Option<Stretch>,
) -> Vec<String> {
    let every_s = cfg.every.as_secs_f64();
    let mut out = Vec::new();
    let Some(p) = point else {
        return out;
    };
    let eos = p.end_of_stream;
    let ledger = if stopped {
        "ledger, so far: the tail is unproven"
    } else if eos {
        "ledger, tail included"
    } else {
        "ledger; tail unknown: no end-of-stream message"
    };
    out.push(format!(
        "sent {} (sender's count), received {}, lost {} ({ledger}){}; kernel drops {} (socket), {} (UDP RcvbufErrors in the receiver's namespace); {:.1} lost per million",
        units::thousands(p.sent),
        units::thousands(p.received),
        units::thousands(p.lost),
        if p.missing > p.lost {
            let why = if stopped {
                " (in flight when the run was stopped: not counted as lost)"
            } else if !eos {
                " (lost: the end-of-stream message never came, so the ledger could not place them)"
            } else {
                ""
            };
            format!(", {} sent but never received{why}", units::thousands(p.missing - p.lost))
        } else {
            String::new()
        },
        p.kernel_socket_drops.map_or("-".into(), units::thousands),
        units::thousands(p.kernel_rcvbuf_errors),
        per_million(p, stopped)
    ));
    out.push(match longest {
        Some(s) => format!(
            "longest clean stretch: {} ({} of {})",
            human_duration(s.seconds),
            rows_phrase(&(s.first..=s.last).collect::<Vec<_>>(), every_s),
            rows.len()
        ),
        None => format!("longest clean stretch: none (every {} lost something)", row_name(every_s, false)),
    });
    if let Some(a) = p.asked_bps {
        let short = sender_bound(cfg, p);
        out.push(format!(
            "the sender achieved {} Mb/s ({}) of {} Mb/s asked{}",
            mbps(p.achieved_bps),
            units::pps(p.achieved_pps),
            mbps(a),
            if short {
                ": the sender was the limit, so the rate was not offered in full, and the verdict speaks of the rate achieved"
            } else {
                ""
            }
        ));
    }
    out.push(format!(
        "CPU per packet: sender {} on CPU(s) {}, receiver {} on CPU {}",
        units::nanos(p.send_cpu_ns_per_packet),
        if p.send_cpus.is_empty() {
            "any".to_string()
        } else {
            p.send_cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
        },
        units::nanos(p.recv_cpu_ns_per_packet),
        p.recv_cpu.map_or("?".into(), |c| c.to_string())
    ));
    if rows.last().is_some_and(|r| r.to_end) {
        out.push(if stopped {
            format!("row {} runs to the moment the receiver was stopped (marked *)", rows.len())
        } else if !eos {
            format!(
                "row {} runs to the sender's end (marked *) and holds the receiver's final counts; the tail is not in it: no end-of-stream message came",
                rows.len()
            )
        } else {
            format!(
                "row {} runs to the receiver's end (marked *): it holds the tail, numbers after the last one received, known from the sender's end-of-stream message",
                rows.len()
            )
        });
    }
    out
}

/// The last row as the terminal shows it after the live rows, or `None` when there is no such
/// row (no final report). The live rows already showed the samples it replaces (the one folded
/// into it, and any printed while the receiver waited for an end-of-stream message), so it says
/// which: someone adding up the table counts it instead of those, not as well.
pub fn final_line(doc: &SoakDoc, live_rows: usize) -> Option<String> {
    let r = doc.intervals.last().filter(|r| r.to_end)?;
    let what = if doc.stopped {
        "closed by the receiver's final report"
    } else if doc.point.as_ref().is_some_and(|p| p.end_of_stream) {
        "closed by the final report, tail included"
    } else {
        "closed by the final report; tail unknown: no end-of-stream message"
    };
    let replaces = match live_rows {
        n if n == r.n => format!("replaces row {} above: ", r.n),
        n if n > r.n => format!("replaces rows {}-{n} above: ", r.n),
        _ => String::new(),
    };
    Some(format!("{}  ({replaces}{what})", line(r)))
}

/// The heading lines of the table.
pub fn header(cfg: &SoakConfig, placement: &Placement) -> String {
    let window = reorder_window(cfg.rate, cfg.size);
    let pps = cfg.rate.packets_per_sec(cfg.size);
    heading(
        cfg.size,
        &rate_words(cfg.rate),
        pps,
        cfg.duration.as_secs_f64(),
        cfg.every.as_secs_f64(),
        window,
        placement,
    )
}

fn heading(
    size: usize,
    rate: &str,
    pps: Option<f64>,
    duration_s: f64,
    every_s: f64,
    window: u64,
    placement: &Placement,
) -> String {
    let settle = match pps {
        Some(p) if p > 0.0 => format!("settled at most {} after the fact", units::nanos(window as f64 / p * 1e9)),
        _ => "settled once the reorder window has passed".to_string(),
    };
    format!(
        "wirespeed bench soak: {size}-byte counter datagrams at {}{} for {}, one row per {}; {}\n\
         Mb/s = 10^6 bits/s of UDP payload; offered = received + lost (the sequence numbers the sender used); \
         lost = the ledger's, {settle} (reorder window {}); kernel = the receiving socket's drop counter; \
         udp = UDP RcvbufErrors in the receiver's namespace\n\
         {:>5} {:>12} {:>9} {:>15} {:>16} {:>15} {:>13} {:>10} {:>9} {:>9} {:>12}\n",
        rate,
        pps.map_or(String::new(), |p| format!(" ({} datagrams/s)", units::thousands(p.round() as u64))),
        human_duration(duration_s),
        human_duration(every_s),
        placement.description,
        units::thousands(window),
        "#",
        "ended (UTC)",
        "t (s)",
        "offered (Mb/s)",
        "received (Mb/s)",
        "received (pps)",
        "datagrams",
        "lost",
        "kernel",
        "udp",
        "lost so far"
    )
}

/// One table line.
pub fn line(r: &Interval) -> String {
    format!(
        "{:>5} {:>12} {:>9.1} {:>15} {:>16} {:>15} {:>13} {:>10} {:>9} {:>9} {:>12}",
        format!("{}{}", r.n, if r.to_end { "*" } else { "" }),
        r.ended_at,
        r.end_s,
        mbps(r.offered_bps),
        mbps(r.received_bps),
        units::thousands(r.received_pps.round() as u64),
        units::thousands(r.datagrams),
        units::thousands(r.lost),
        units::thousands(r.kernel_socket_drops),
        units::thousands(r.udp_rcvbuf_errors),
        units::thousands(r.cumulative_lost)
    )
}

/// The whole record as text (the heading, every row, the summary, the verdict).
pub fn text(doc: &SoakDoc) -> String {
    // The asked rate in its own words: a rate asked in datagrams/s is not turned into Mb/s.
    let mut s = heading(
        doc.size,
        &doc.asked_words,
        doc.asked_pps,
        doc.duration_s,
        doc.every_s,
        doc.reorder_window,
        &doc.placement,
    );
    for r in &doc.intervals {
        s.push_str(&line(r));
        s.push('\n');
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s.push('\n');
    for l in &doc.summary {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&format!("=> {}\n", doc.verdict));
    s
}

/// The record as CSV, one row per interval.
pub fn csv(doc: &SoakDoc) -> String {
    let mut s = String::from(
        "interval,start_s,end_s,ended_at_unix_s,ended_at_utc,offered_bps,offered_pps,received_bps,received_pps,datagrams,lost,kernel_socket_drops,udp_rcvbuf_errors,cumulative_lost,to_end\n",
    );
    for r in &doc.intervals {
        s.push_str(&format!(
            "{},{:.3},{:.3},{:.3},{},{:.0},{:.1},{:.0},{:.1},{},{},{},{},{},{}\n",
            r.n,
            r.start_s,
            r.end_s,
            r.ended_at_unix_s,
            r.ended_at,
            r.offered_bps,
            r.offered_pps,
            r.received_bps,
            r.received_pps,
            r.datagrams,
            r.lost,
            r.kernel_socket_drops,
            r.udp_rcvbuf_errors,
            r.cumulative_lost,
            r.to_end
        ));
    }
    s
}

/// Two charts: offered and received rate per row, and loss per row (ledger and socket), against
/// time (minutes when rows are a minute or longer).
///
/// Both are evidence a reader judges at a glance, so both y axes start at zero: a steady run at
/// 942 Mb/s is a flat line near the top, inside the shaded band of the rate asked (98-100 % of
/// it: below, the sender was the limit), not a saw-tooth of 0.1 % wobbles stretched over the
/// plot. The loss chart counts whole datagrams, and says in words what its line shows.
pub fn charts(doc: &SoakDoc) -> (LineChart, LineChart) {
    let (scale, unit) = if doc.every_s >= 60.0 { (60.0, "minutes") } else { (1.0, "seconds") };
    let x = |r: &Interval| r.end_s / scale;
    let series = |name: &str, f: &dyn Fn(&Interval) -> f64| Series {
        name: name.into(),
        points: doc.intervals.iter().map(|r| (x(r), f(r))).collect(),
    };
    let title = format!("{} soak: {}-byte datagrams at {}", human_duration(doc.duration_s), doc.size, doc.asked);
    let band = doc.asked_bps.filter(|a| a.is_finite() && *a > 0.0).map(|a| Band {
        lo: a * SENDER_BOUND / 1e6,
        hi: a / 1e6,
        at: a / 1e6,
        label: format!("asked {} Mb/s (shaded: {:.0}-100 %)", mbps(a), SENDER_BOUND * 100.0),
    });
    let rate_note = match &band {
        Some(_) => format!(
            "y from 0. A flat line in the shaded band ({:.0}-100 % of the rate asked) is a steady run at that rate; \
             below the band, the sender was the limit. received covers offered in every {} where nothing was lost.",
            SENDER_BOUND * 100.0,
            row_name(doc.every_s, false)
        ),
        None => "y from 0; flat out, no rate asked. received lies on offered where nothing was lost.".into(),
    };
    let rate = LineChart {
        title: title.clone(),
        x_label: format!("time since start ({unit})"),
        y_label: "rate per row (Mb/s of UDP payload)".into(),
        series: vec![series("offered", &|r| r.offered_bps / 1e6), series("received", &|r| r.received_bps / 1e6)],
        note: rate_note,
        band,
        ..LineChart::default()
    };
    let loss = LineChart {
        title,
        x_label: format!("time since start ({unit})"),
        y_label: "datagrams lost per row".into(),
        series: vec![
            series("lost (ledger)", &|r| r.lost as f64),
            series("kernel socket drops", &|r| r.kernel_socket_drops as f64),
        ],
        note: loss_note(doc),
        y_integer: true,
        ..LineChart::default()
    };
    (rate, loss)
}

/// What the loss chart shows, in words: "0 lost in every second (ledger and kernel)", or how
/// many were lost in which rows; a run that did not finish says its tail is unproven.
fn loss_note(doc: &SoakDoc) -> String {
    let rows = &doc.intervals;
    let lost = rows.last().map_or(0, |r| r.cumulative_lost);
    let drops: u64 = rows.iter().map(|r| r.kernel_socket_drops).sum();
    let unfinished = doc.stopped || doc.error.is_some() || doc.point.as_ref().is_some_and(|p| !p.end_of_stream);
    let mut note = if rows.is_empty() {
        "no rows were recorded".to_string()
    } else if lost == 0 && drops == 0 {
        format!("0 lost in every {} (ledger and kernel): a flat line at 0", row_name(doc.every_s, false))
    } else {
        format!(
            "{} lost (ledger) in {}; {} kernel socket drops",
            units::thousands(lost),
            rows_phrase(&doc.lossy_intervals, doc.every_s),
            units::thousands(drops)
        )
    };
    if unfinished && !rows.is_empty() {
        note.push_str("; the run did not finish, so its tail is unproven");
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, datagrams: u64, lost: u64, drops: u64) -> Sample {
        Sample { elapsed_s: t, datagrams, lost, socket_drops: drops, rcvbuf_errors: drops, at_unix_s: 3600.0 + t }
    }

    fn cfg() -> SoakConfig {
        SoakConfig {
            rate: Rate::Bits(942e6),
            size: 1080,
            duration: Duration::from_secs(1800),
            every: Duration::from_secs(60),
            gso: false,
            rcvbuf: 32 << 20,
            skip_every: None,
        }
    }

    fn point(sent: u64, received: u64, lost: u64, lossy: bool) -> Point {
        Point {
            asked: "942.00 Mb/s".into(),
            asked_bps: Some(942e6),
            size: 1080,
            duration_s: 1800.0,
            achieved_bps: 941.9e6,
            achieved_pps: 109_016.0,
            received_bps: 941.9e6,
            sent,
            received,
            lost,
            late: 0,
            duplicate: 0,
            invalid: 0,
            missing: sent - received,
            end_of_stream: true,
            kernel_socket_drops: Some(lost),
            kernel_rcvbuf_errors: lost,
            kernel_in_errors: lost,
            softnet_dropped: 0,
            drops_per_million: (sent - received) as f64 * 1e6 / sent as f64,
            lossy,
            send_cpu_ns_per_packet: 1200.0,
            recv_cpu_ns_per_packet: 900.0,
            send_cpus: vec![0],
            recv_cpu: Some(1),
            send_wall_s: 1800.05,
            send_elapsed_s: 1800.0,
            gso_used: false,
            rcvbuf_granted: 64 << 20,
            receiver_stopped_by: "end of stream".into(),
            diagnosis: vec![],
        }
    }

    #[test]
    fn a_row_is_the_difference_of_two_samples() {
        let r = interval(2, &sample(60.0, 6_000_000, 10, 4), &sample(120.0, 12_000_000, 25, 9), 1080, false);
        assert_eq!((r.n, r.datagrams, r.lost, r.kernel_socket_drops, r.udp_rcvbuf_errors), (2, 6_000_000, 15, 5, 5));
        assert_eq!(r.cumulative_lost, 25);
        assert_eq!((r.start_s, r.end_s), (60.0, 120.0));
        assert!((r.received_pps - 100_000.0).abs() < 1e-6);
        assert!((r.received_bps - 100_000.0 * 8640.0).abs() < 1e-3);
        assert!((r.offered_pps - 6_000_015.0 / 60.0).abs() < 1e-6);
        assert_eq!(r.ended_at, "01:02:00");
        // Counters never run backwards into a huge number, and a zero-length row has no rate.
        let r = interval(1, &sample(5.0, 10, 3, 2), &sample(5.0, 9, 2, 1), 1080, true);
        assert_eq!((r.datagrams, r.lost, r.kernel_socket_drops, r.received_pps), (0, 0, 0, 0.0));
        assert!(r.to_end);
    }

    #[test]
    fn the_last_row_takes_the_remainder_and_the_tail() {
        let s = [sample(1.0, 100, 0, 0), sample(2.0, 200, 1, 0), sample(3.0, 300, 1, 0), sample(4.0, 400, 2, 0)];
        // The end 40 ms after the last line: folded into row 4, which then holds the tail.
        let end = sample(4.04, 404, 5, 0);
        let rows = intervals(&s, Some(&end), 1.0, 8);
        assert_eq!(rows.len(), 4);
        assert_eq!((rows[3].start_s, rows[3].end_s, rows[3].datagrams, rows[3].lost), (3.0, 4.04, 104, 4));
        assert!(rows[3].to_end && !rows[2].to_end);
        assert_eq!(rows.iter().map(|r| r.datagrams).sum::<u64>(), 404);
        assert_eq!(rows.iter().map(|r| r.lost).sum::<u64>(), 5);
        assert_eq!(rows.last().map(|r| r.cumulative_lost), Some(5));
        // The receiver missed its last tick: the remainder is a row of its own.
        let rows = intervals(&s[..3], Some(&end), 1.0, 8);
        assert_eq!(rows.len(), 4);
        assert_eq!((rows[3].start_s, rows[3].datagrams, rows[3].lost), (3.0, 104, 4));
        // No final report (stopped before it): the lines alone, none marked as the end.
        let rows = intervals(&s, None, 1.0, 8);
        assert_eq!(rows.len(), 4);
        assert!(rows.iter().all(|r| !r.to_end));
        // A run shorter than half a row: one row, start to end.
        let rows = intervals(&[], Some(&end), 60.0, 8);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].start_s, rows[0].datagrams), (0.0, 404));
        assert!(intervals(&[], None, 1.0, 8).is_empty());
    }

    fn rows_with_loss(lost: &[u64]) -> Vec<Interval> {
        let mut cum = 0;
        let mut prev = sample(0.0, 0, 0, 0);
        lost.iter()
            .enumerate()
            .map(|(i, &l)| {
                cum += l;
                let cur = sample(60.0 * (i + 1) as f64, 1000 * (i as u64 + 1), cum, 0);
                let r = interval(i + 1, &prev, &cur, 1080, false);
                prev = cur;
                r
            })
            .collect()
    }

    #[test]
    fn longest_clean_stretch() {
        assert_eq!(longest_clean(&[]), None);
        assert_eq!(longest_clean(&rows_with_loss(&[1, 2])), None);
        assert_eq!(longest_clean(&rows_with_loss(&[0, 0, 0])), Some(Stretch { first: 1, last: 3, seconds: 180.0 }));
        // Two stretches of two: the earliest wins; a longer one later wins over both.
        assert_eq!(
            longest_clean(&rows_with_loss(&[0, 0, 5, 0, 0, 1])),
            Some(Stretch { first: 1, last: 2, seconds: 120.0 })
        );
        assert_eq!(
            longest_clean(&rows_with_loss(&[0, 3, 0, 0, 0, 1, 0])),
            Some(Stretch { first: 3, last: 5, seconds: 180.0 })
        );
    }

    #[test]
    fn row_ranges_and_durations_read_well() {
        assert_eq!(ranges(&[3, 17, 18, 20, 21, 22]), "3, 17-18, 20-22");
        assert_eq!(ranges(&[]), "");
        assert_eq!(rows_phrase(&[3], 60.0), "minute 3");
        assert_eq!(rows_phrase(&[3, 4], 60.0), "minutes 3-4");
        assert_eq!(rows_phrase(&[2, 5], 10.0), "intervals 2, 5");
        assert_eq!(human_duration(1800.02), "30 min");
        assert_eq!(human_duration(1440.0), "24 min");
        assert_eq!(human_duration(90.0), "1 min 30 s");
        assert_eq!(human_duration(4.0), "4 s");
        assert_eq!(human_duration(2.54), "2.5 s");
        assert_eq!(human_duration(3900.0), "1 h 5 min");
        assert_eq!(utc_hms(86_400.0 + 3.0 * 3600.0 + 62.0), "03:01:02");
    }

    #[test]
    fn the_reorder_window_is_about_a_tenth_of_a_second() {
        // 942 Mb/s of 1080-byte datagrams is 109,028/s: 10,903 a tenth, rounded up to 16,384.
        assert_eq!(reorder_window(Rate::Bits(942e6), 1080), 16384);
        assert_eq!(reorder_window(Rate::Bits(20e6), 1080), 1024);
        assert_eq!(reorder_window(Rate::Bits(40e9), 1080), 65536);
        assert_eq!(reorder_window(Rate::Max, 1080), 65536);
        assert_eq!(reorder_window(Rate::Packets(50_000.0), 8), 8192);
    }

    #[test]
    fn verdicts_say_how_long_and_where() {
        let c = cfg();
        let rows = rows_with_loss(&[0; 30]);
        let clean = longest_clean(&rows);
        let v = verdict(&c, &rows, Some(&point(1000, 1000, 0, false)), false, &[], clean);
        assert!(v.starts_with("zero loss for 30 min at 942 Mb/s (1080-byte datagrams"), "{v}");
        let mut lost = vec![0; 30];
        lost[2] = 7;
        lost[16] = 2;
        lost[17] = 1;
        let rows = rows_with_loss(&lost);
        let lossy: Vec<usize> = rows.iter().filter(|r| r.lost > 0).map(|r| r.n).collect();
        let v = verdict(&c, &rows, Some(&point(1000, 990, 10, true)), false, &lossy, longest_clean(&rows));
        assert!(v.contains("LOSS at 942 Mb/s: 10 of 1,000 lost"), "{v}");
        assert!(v.contains("in minutes 3, 17-18"), "{v}");
        assert!(v.contains("longest clean stretch 13 min (minutes 4-16)"), "{v}");
        // Stopped: what was seen so far, never a zero-loss claim for the whole run.
        let v = verdict(&c, &rows_with_loss(&[0, 0]), Some(&point(10, 10, 0, true)), true, &[], None);
        assert!(v.starts_with("stopped after 30 min at 942 Mb/s: nothing lost so far"), "{v}");
        let v = verdict(&c, &rows_with_loss(&[0, 4]), None, true, &[2], None);
        assert!(v.starts_with("stopped after 2 min before the two ends reported: 4 lost"), "{v}");
    }

    #[test]
    fn the_document_adds_up() {
        let c = cfg();
        let s = [sample(60.0, 100, 0, 0), sample(120.0, 200, 3, 3)];
        let streamed = Streamed {
            point: point(203, 200, 3, true),
            recv_wall_s: 120.5,
            recv_datagrams: 200,
            send_per_second: vec![1; 120],
            stopped: false,
        };
        let placement = Placement {
            kind: "loopback",
            prefix: None,
            send_cpus: vec![0],
            recv_cpus: vec![1],
            description: "loopback".into(),
        };
        let doc = build(&c, placement, 16384, &s, Some(streamed), false, None);
        assert_eq!(doc.intervals.len(), 2);
        assert_eq!(doc.lossy_intervals, vec![2]);
        assert!(!doc.zero_loss);
        assert_eq!(doc.longest_clean, Some(Stretch { first: 1, last: 1, seconds: 60.0 }));
        assert!(doc.summary[0].starts_with("sent 203 (sender's count), received 200, lost 3"), "{:?}", doc.summary);
        assert!(doc
            .summary
            .iter()
            .any(|l| l.contains("CPU per packet: sender 1.2 us on CPU(s) 0, receiver 900 ns on CPU 1")));
        let csv = csv(&doc);
        assert_eq!(csv.lines().count(), 3);
        assert!(
            csv.lines().nth(2).is_some_and(|l| l.starts_with("2,60.000,120.500,") && l.ends_with(",100,3,3,3,3,true")),
            "{csv}"
        );
        let t = text(&doc);
        assert!(t.contains("=> LOSS at 942 Mb/s: 3 of 203 lost") && t.contains("  2* "), "{t}");
        let (rate, loss) = charts(&doc);
        assert_eq!(
            rate.series[1].points,
            vec![(1.0, 100.0 * 8640.0 / 60.0 / 1e6), (120.5 / 60.0, 100.0 * 8640.0 / 60.5 / 1e6)]
        );
        assert_eq!(loss.series[0].points.iter().map(|p| p.1).collect::<Vec<_>>(), vec![0.0, 3.0]);
    }

    fn placement() -> Placement {
        Placement {
            kind: "loopback",
            prefix: None,
            send_cpus: vec![0],
            recv_cpus: vec![1],
            description: "loopback".into(),
        }
    }

    fn streamed(point: Point, recv_wall_s: f64, recv_datagrams: u64) -> Streamed {
        Streamed { point, recv_wall_s, recv_datagrams, send_per_second: vec![], stopped: false }
    }

    /// The number before " per million" in a line.
    fn per_million_in(l: &str) -> Option<String> {
        let head = l.split(" per million").next()?.trim_end_matches(" lost");
        head.rsplit([' ', '(']).next().map(str::to_string)
    }

    #[test]
    fn an_absurd_rate_gets_the_largest_window_without_overflow() {
        assert_eq!(reorder_window(Rate::Bits(1e30), 8), 65536);
        assert_eq!(reorder_window(Rate::Packets(f64::MAX), 8), 65536);
        assert_eq!(reorder_window(Rate::Packets(655_360.0), 8), 65536);
    }

    #[test]
    fn a_sender_that_fell_short_is_judged_at_the_rate_it_achieved() {
        let c = cfg();
        let rows = rows_with_loss(&[0; 30]);
        let mut p = point(1000, 1000, 0, false);
        p.achieved_bps = 870e6;
        p.achieved_pps = 870e6 / 8640.0;
        assert!(sender_bound(&c, &p));
        let v = verdict(&c, &rows, Some(&p), false, &[], longest_clean(&rows));
        assert!(
            v.starts_with(
                "zero loss for 30 min at 870 Mb/s achieved (942 Mb/s asked; the sender was the limit; 1080-byte datagrams, "
            ),
            "{v}"
        );
        assert!(!v.contains("at 942 Mb/s"), "{v}");
        let doc = build(&c, placement(), 16384, &[], Some(streamed(p.clone(), 1800.0, 1000)), false, None);
        assert!(doc.zero_loss && doc.sender_bound, "{doc:?}");
        assert_eq!(doc.verdict, v);
        let j = serde_json::to_value(&doc).unwrap();
        assert_eq!((j["zero_loss"].as_bool(), j["sender_bound"].as_bool()), (Some(true), Some(true)));
        // Loss, and a stop, are reported at the rate achieved too.
        let lossy = verdict(&c, &rows, Some(&point_like(&p, 990, 10)), false, &[3], None);
        assert!(
            lossy.starts_with("LOSS at 870 Mb/s achieved (942 Mb/s asked; the sender was the limit): 10 of"),
            "{lossy}"
        );
        let v = verdict(&c, &rows, Some(&p), true, &[], None);
        assert!(v.starts_with("stopped after 30 min at 870 Mb/s achieved (942 Mb/s asked"), "{v}");
        // A rate asked in datagrams/s stays in datagrams/s.
        let c2 = SoakConfig { rate: Rate::Packets(100_000.0), ..cfg() };
        let mut p2 = point(1000, 1000, 0, false);
        p2.asked_bps = Some(100_000.0 * 8640.0);
        p2.achieved_bps = 90_000.0 * 8640.0;
        let v = verdict(&c2, &rows, Some(&p2), false, &[], None);
        assert!(
            v.starts_with("zero loss for 30 min at 90.0 kpps achieved (100.0 kpps asked; the sender was the limit"),
            "{v}"
        );
        // Within 2% of the rate asked: the rate asked; numbers left out on purpose count as paced.
        p.achieved_bps = 930e6;
        assert!(!sender_bound(&c, &p));
        let v = verdict(&c, &rows, Some(&p), false, &[], None);
        assert!(
            v.starts_with("zero loss for 30 min at 942 Mb/s (1080-byte datagrams; the sender achieved 930 Mb/s"),
            "{v}"
        );
        let c3 = SoakConfig { skip_every: Some(50), ..cfg() };
        p.achieved_bps = 942e6 * 0.975;
        assert!(!sender_bound(&c3, &p) && sender_bound(&c, &p));
        // Flat out asks for no rate, so it is never sender-bound.
        p.asked_bps = None;
        assert!(!sender_bound(&SoakConfig { rate: Rate::Max, ..cfg() }, &p));
    }

    fn point_like(p: &Point, received: u64, lost: u64) -> Point {
        Point { received, lost, missing: p.sent - received, lossy: true, ..p.clone() }
    }

    #[test]
    fn a_missing_end_of_stream_is_loss_not_a_stop() {
        let c = SoakConfig { every: Duration::from_secs(1), duration: Duration::from_secs(4), ..cfg() };
        // The sender sent 4,000 in 4 s; the receiver got 3,900 and the end-of-stream message never
        // came: it waited 2 s and was stopped, printing two rows of nothing meanwhile.
        let s = [
            sample(1.0, 1000, 0, 0),
            sample(2.0, 2000, 0, 0),
            sample(3.0, 3000, 0, 0),
            sample(4.0, 3900, 0, 0),
            sample(5.0, 3900, 0, 0),
            sample(6.0, 3900, 0, 0),
        ];
        let mut p = point(4000, 3900, 0, true);
        p.end_of_stream = false;
        p.receiver_stopped_by = "signal 15".into();
        p.send_wall_s = 4.02;
        p.send_elapsed_s = 4.0;
        p.kernel_socket_drops = Some(0);
        let doc = build(&c, placement(), 1024, &s, Some(streamed(p.clone(), 6.1, 3900)), false, None);
        // The rows the receiver printed while it waited are left out; the last ends with the sender.
        assert_eq!(doc.intervals.len(), 4, "{:?}", doc.intervals);
        let last = &doc.intervals[3];
        assert!(last.to_end && (last.end_s - 4.02).abs() < 1e-9, "{last:?}");
        assert_eq!(doc.intervals.iter().map(|r| r.datagrams).sum::<u64>(), 3900);
        assert_eq!(doc.longest_clean.map(|s| s.last), Some(4));
        assert!(doc.longest_clean.is_some_and(|s| s.seconds < 4.1), "{:?}", doc.longest_clean);
        assert!(!doc.zero_loss && !doc.stopped);
        let all = doc.summary.join("\n");
        assert!(!all.contains("in flight") && !all.contains("tail included"), "{all}");
        assert!(all.contains("100 sent but never received (lost: the end-of-stream message never came"), "{all}");
        assert!(all.contains("the 2 seconds it printed meanwhile carried no traffic and are left out"), "{all}");
        // The same per-million figure in the summary and in the verdict: 100 of 4,000.
        assert!(
            doc.verdict.starts_with("LOSS at 942 Mb/s: 100 of 4,000 lost (25000.0 per million)"),
            "{}",
            doc.verdict
        );
        assert_eq!(per_million_in(&doc.summary[0]).as_deref(), Some("25000.0"), "{}", doc.summary[0]);
        assert_eq!(per_million_in(&doc.verdict).as_deref(), Some("25000.0"));
        assert!(final_line(&doc, 6)
            .is_some_and(|l| l.contains("(replaces rows 4-6 above: closed by the final report; tail unknown")));
        // Stopped by the user's signal: what was in flight is not loss, and the tail is unproven.
        let doc = build(&c, placement(), 1024, &s[..3], Some(streamed(p, 3.1, 3000)), true, None);
        let all = doc.summary.join("\n");
        assert!(
            all.contains("(ledger, so far: the tail is unproven)")
                && all.contains("in flight when the run was stopped"),
            "{all}"
        );
        assert!(!all.contains("tail included"), "{all}");
        assert_eq!(per_million_in(&doc.summary[0]).as_deref(), Some("0.0"));
        assert!(doc.verdict.starts_with("stopped after 4 s at 942 Mb/s: nothing lost so far"), "{}", doc.verdict);
    }

    #[test]
    fn a_failure_late_in_the_run_keeps_the_rows() {
        let c = SoakConfig { every: Duration::from_secs(1), ..cfg() };
        let s = [sample(1.0, 1000, 0, 0), sample(2.0, 2000, 3, 0)];
        let doc =
            build(&c, placement(), 1024, &s, None, false, Some("the receiver did not stop when asked: killed".into()));
        assert_eq!(doc.intervals.len(), 2);
        assert_eq!(doc.error.as_deref(), Some("the receiver did not stop when asked: killed"));
        assert!(!doc.zero_loss && !doc.stopped);
        assert!(
            doc.verdict.starts_with("failed after 2 s at 942 Mb/s: 3 lost in the seconds recorded, the rest unknown"),
            "{}",
            doc.verdict
        );
        assert_eq!(csv(&doc).lines().count(), 3);
        assert!(text(&doc).contains("=> failed after 2 s"));
    }

    #[test]
    fn the_document_keeps_the_asked_rate_in_its_own_words() {
        let c = SoakConfig { rate: Rate::Packets(100_000.0), ..cfg() };
        let doc = build(&c, placement(), 16384, &[sample(60.0, 100, 0, 0)], None, true, None);
        assert_eq!(doc.asked_words, "100.0 kpps");
        let t = text(&doc);
        let live = header(&c, &placement());
        assert!(t.starts_with(&live), "soak.txt:\n{t}\nlive:\n{live}");
        assert!(live.contains("at 100.0 kpps (100,000 datagrams/s)"), "{live}");
    }

    #[test]
    fn the_final_row_says_which_live_rows_it_replaces() {
        let c = cfg();
        let s = [sample(60.0, 100, 0, 0), sample(120.0, 200, 3, 3)];
        let doc = build(&c, placement(), 16384, &s, Some(streamed(point(203, 200, 3, true), 120.5, 200)), false, None);
        let l = final_line(&doc, 2).expect("a final row");
        assert!(
            l.trim_start().starts_with("2* ")
                && l.ends_with("  (replaces row 2 above: closed by the final report, tail included)"),
            "{l}"
        );
        // A row of its own (the receiver missed its last tick): nothing shown live is replaced.
        let l = final_line(&doc, 1).expect("a final row");
        assert!(l.ends_with("  (closed by the final report, tail included)"), "{l}");
        // No final report, no final row.
        let doc = build(&c, placement(), 16384, &s, None, true, None);
        assert_eq!(final_line(&doc, 2), None);
    }

    #[test]
    fn the_receivers_progress_lines_parse() {
        let p = crate::rx::Progress {
            elapsed_s: 60.001,
            pps: 109_000.0,
            bps: 941e6,
            datagrams: 6_540_000,
            lost: 12,
            late: 1,
            duplicate: 0,
            invalid: 0,
            socket_drops: 12,
            rcvbuf_errors: 13,
            ring_full: 0,
        };
        let line = serde_json::to_string(&p).unwrap();
        let s = parse_sample(&line).expect("a sample");
        assert_eq!(
            (s.elapsed_s, s.datagrams, s.lost, s.socket_drops, s.rcvbuf_errors),
            (60.001, 6_540_000, 12, 12, 13)
        );
        assert_eq!(parse_sample("wirespeed recv: listening on 127.0.0.1:5000"), None);
        assert_eq!(parse_sample("{not json"), None);
    }

    /// The seed's 30-minute run at 942 Mb/s, every minute within 0.15 % of the rate asked
    /// (alternately 941.3 and 942.6 Mb/s), nothing lost.
    fn steady_942() -> SoakDoc {
        let per_min = |mbps: f64| (mbps * 1e6 * 60.0 / 8640.0).round() as u64;
        let mut total = 0;
        let mut s = Vec::new();
        for m in 1..=30u64 {
            total += per_min(if m % 2 == 1 { 941.3 } else { 942.6 });
            s.push(sample(60.0 * m as f64, total, 0, 0));
        }
        let p = point(total, total, 0, false);
        build(&cfg(), placement(), 65536, &s[..29], Some(streamed(p, 1800.0, total)), false, None)
    }

    /// The text of every `<text>` element of an SVG anchored at `anchor` (the y axis's tick labels
    /// are anchored at their end, against the axis).
    fn svg_texts(svg: &str, anchor: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter(|t| t.split('>').next().is_some_and(|attrs| attrs.contains(&format!("text-anchor=\"{anchor}\""))))
            .filter_map(|t| t.split_once('>').and_then(|(_, rest)| rest.split("</text>").next()))
            .map(|t| t.trim().to_string())
            .collect()
    }

    #[test]
    fn a_steady_run_is_a_flat_line_on_an_axis_from_zero_with_the_asked_band() {
        let doc = steady_942();
        assert_eq!(doc.intervals.len(), 30);
        assert!(doc.zero_loss, "{}", doc.verdict);
        let (rate, loss) = charts(&doc);
        // The rate: y from 0, the asked rate with its band (98-100 %) drawn, labelled and
        // explained, so 0.15 % between minutes is a flat line rather than the whole height.
        let (_, (lo, hi)) = crate::plot::line_chart_axes(&rate);
        assert_eq!(lo, 0.0, "the rate axis starts at zero");
        assert!((942.6..1000.0).contains(&hi), "{hi}");
        assert!((942.6 - 941.3) / (hi - lo) < 0.002, "the minutes' spread is a sliver of the axis");
        let band = rate.band.as_ref().expect("the asked rate's band");
        assert_eq!((band.lo, band.hi, band.at), (942.0 * SENDER_BOUND, 942.0, 942.0));
        assert_eq!(band.label, "asked 942 Mb/s (shaded: 98-100 %)");
        assert!(rate.note.starts_with("y from 0. A flat line in the shaded band"), "{}", rate.note);
        // The loss: whole datagrams on an axis from 0, and the chart says "0 lost".
        let (_, (llo, lhi)) = crate::plot::line_chart_axes(&loss);
        assert_eq!((llo, loss.y_integer), (0.0, true));
        assert!((1.0..2.0).contains(&lhi), "{lhi}");
        assert_eq!(loss.note, "0 lost in every minute (ledger and kernel): a flat line at 0");

        // The same in the drawn figure: the SVG's y tick labels run from 0, the band's legend
        // entry and the note are in it; the loss chart's ticks are 0 and 1 datagrams.
        let dir = std::env::temp_dir().join(format!("ws-soak-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (_, rate_svg) = crate::plot::line_chart_files(&rate, &dir.join("soak-rate")).unwrap();
        let (_, loss_svg) = crate::plot::line_chart_files(&loss, &dir.join("soak-loss")).unwrap();
        let svg = std::fs::read_to_string(rate_svg).unwrap();
        let loss_text = std::fs::read_to_string(loss_svg).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let ticks: Vec<f64> = svg_texts(&svg, "end").iter().map(|t| t.replace(',', "").parse().unwrap()).collect();
        assert_eq!(ticks.first(), Some(&0.0), "y ticks {ticks:?}");
        assert!(ticks.iter().all(|t| t.fract() == 0.0) && ticks.len() >= 4, "round ticks from 0: {ticks:?}");
        assert!(svg.contains("asked 942 Mb/s (shaded: 98-100 %)"), "the band is in the legend");
        assert!(svg.contains("y from 0. A flat line in the shaded band"), "the note is on the chart");
        assert_eq!(svg_texts(&loss_text, "end"), vec!["0", "1"], "the loss axis counts whole datagrams");
        assert!(loss_text.contains("0 lost in every minute"), "the loss chart says it");
    }

    #[test]
    fn a_lossy_run_says_where_on_its_loss_chart() {
        let c = cfg();
        let s = [sample(60.0, 100, 0, 0), sample(120.0, 200, 3, 3)];
        let doc =
            build(&c, placement(), 16384, &s[..1], Some(streamed(point(203, 200, 3, true), 120.5, 200)), false, None);
        let (_, loss) = charts(&doc);
        assert_eq!(loss.note, "3 lost (ledger) in minute 2; 3 kernel socket drops");
        let flat_out = SoakConfig { rate: Rate::Max, ..cfg() };
        let doc = build(&flat_out, placement(), 16384, &s, None, true, None);
        let (rate, loss) = charts(&doc);
        assert!(rate.band.is_none() && rate.note.starts_with("y from 0; flat out"), "{}", rate.note);
        assert!(loss.note.ends_with("the run did not finish, so its tail is unproven"), "{}", loss.note);
    }
}
