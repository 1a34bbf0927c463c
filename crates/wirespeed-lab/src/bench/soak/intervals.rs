//! The record's rows: the receiver's cumulative samples, the row between two of them, and how
//! rows are named and grouped when the verdict speaks of them.

use serde::{Deserialize, Serialize};

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
    /// A recorder's bytes written to disk so far (`record --interval-json`); `None` when the
    /// line does not say (a receiver, or a recorder that does not print it).
    #[serde(default)]
    pub written_bytes: Option<u64>,
    /// A recorder's ring high water so far, bytes.
    #[serde(default)]
    pub ring_high_water: Option<u64>,
    /// Datagrams dropped at a full ring so far.
    #[serde(default)]
    pub ring_full: Option<u64>,
    /// Writes that kept the writer waiting so far (the recorder's `write_stalls`).
    #[serde(default)]
    pub write_stalls: Option<u64>,
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
    /// The recorder's figures for the row, when the soak records (`bench soak --record`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorder: Option<RecorderRow>,
}

/// What the recorder did in one row. Each figure is `None` when the recorder did not report it
/// (a build whose progress lines lack it): shown as n/a, never guessed.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct RecorderRow {
    /// Bytes written to disk in the row.
    pub written_bytes: Option<u64>,
    /// The ring's high water since the start, bytes.
    pub ring_high_water: Option<u64>,
    /// Datagrams dropped at a full ring in the row.
    pub ring_full: Option<u64>,
    /// Writer stalls in the row.
    pub write_stalls: Option<u64>,
}

/// The row's share of a cumulative recorder figure: the difference of two samples, the first
/// sample of a run counting from zero; `None` when the later sample lacks it.
fn share(prev: Option<u64>, cur: Option<u64>) -> Option<u64> {
    Some(cur?.saturating_sub(prev.unwrap_or(0)))
}

fn recorder_row(prev: &Sample, cur: &Sample) -> RecorderRow {
    RecorderRow {
        written_bytes: share(prev.written_bytes, cur.written_bytes),
        ring_high_water: cur.ring_high_water,
        ring_full: share(prev.ring_full, cur.ring_full),
        write_stalls: share(prev.write_stalls, cur.write_stalls),
    }
}

/// The row between two samples; `record` adds the recorder's figures.
pub fn interval(n: usize, prev: &Sample, cur: &Sample, size: usize, to_end: bool, record: bool) -> Interval {
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
        recorder: record.then(|| recorder_row(prev, cur)),
    }
}

/// The record: a row between each two consecutive samples, the last closed by `end` (the
/// receiver's final report). The receiver's clock starts just before the sender's, so its last
/// regular sample falls a moment before the end; a remainder shorter than half an interval is
/// folded into the last row rather than made a row of its own, so a 30-minute run has 30 rows.
pub fn intervals(samples: &[Sample], end: Option<&Sample>, every_s: f64, size: usize, record: bool) -> Vec<Interval> {
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
    pts.windows(2)
        .enumerate()
        .map(|(i, w)| interval(i + 1, &w[0], &w[1], size, end.is_some() && i + 1 == k, record))
        .collect()
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
pub(super) fn row_name(every_s: f64, many: bool) -> String {
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
pub(super) fn rows_phrase(ns: &[usize], every_s: f64) -> String {
    format!("{} {}", row_name(every_s, ns.len() > 1), ranges(ns))
}

/// The samples taken by `sender_end_s`. When the end-of-stream message never comes, the
/// receiver waits for it and goes on reporting; rows after the sender ended carry no traffic, and
/// counted as clean they would lengthen the longest clean stretch and dilute the last row. Their
/// counts are cumulative, so leaving them out loses nothing: the last row takes them.
pub fn trim_after(samples: &[Sample], sender_end_s: f64) -> &[Sample] {
    let keep = samples.iter().take_while(|s| s.elapsed_s <= sender_end_s).count();
    &samples[..keep]
}

/// `HH:MM:SS` (UTC) of a Unix time.
pub(super) fn utc_hms(unix_s: f64) -> String {
    let t = unix_s.max(0.0) as u64 % 86_400;
    format!("{:02}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
}
