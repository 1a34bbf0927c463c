//! What a latency run leaves behind for people: the heat map, and for a sweep of rates the
//! percentile table as text, CSV and JSON.

use super::grid::{self, ROWS};
use super::ping::{PingReport, PingRun};
use crate::plot::HeatMap;
use serde::Serialize;
use wirespeed::units;

/// Round trips by send time and latency, with lost probes marked and the interval p50/p99 drawn
/// over it. `path` names where the run went (e.g. "loopback" or "partition 1 -> 2").
pub fn heatmap(run: &PingRun, path: &str) -> HeatMap {
    let r = &run.report;
    let marks = r
        .lost_ranges
        .iter()
        .map(|gap| (gap.first as f64 * run.period_s, (gap.last + 1) as f64 * run.period_s))
        .collect();
    let mut lines = Vec::new();
    if r.intervals.len() > 1 {
        for (name, pick) in [("interval p50", 0usize), ("interval p99", 1)] {
            let pts = r
                .intervals
                .iter()
                .filter(|i| i.replies > 0)
                .map(|i| {
                    let v = if pick == 0 { i.p50_ns } else { i.p99_ns };
                    (i.start_s + i.seconds / 2.0, v as f64 / 1e3)
                })
                .collect::<Vec<_>>();
            if !pts.is_empty() {
                lines.push((name.to_string(), pts));
            }
        }
    }
    let title = format!(
        "Round-trip time at {} pps, {}-byte probes, {}",
        units::thousands(r.schedule.pps_asked.round() as u64),
        r.size,
        path
    );
    let subtitle = format!(
        "p50 {}  p99 {}  p99.99 {}  max {}  lost {} of {}  (open loop, one clock; one-way ~ RTT/2)",
        us(r.rtt.p50),
        us(r.rtt.p99),
        us(r.rtt.p9999),
        us(r.rtt.max),
        units::thousands(r.replies.lost),
        units::thousands(r.sent)
    );
    grid_heatmap(&run.grid, title, subtitle, marks, lines)
}

/// The heat map of any grid of round trips (wirespeed's own runs, or another tool's round
/// trips counted into a [`grid::Grid`]), so that pictures of different tools compare.
pub fn grid_heatmap(
    g: &grid::Grid,
    title: String,
    subtitle: String,
    marks: Vec<(f64, f64)>,
    lines: Vec<(String, Vec<(f64, f64)>)>,
) -> HeatMap {
    let cols = g.used_cols().max(1);
    let col_s = g.col_ns() as f64 / 1e9;
    let x_edges: Vec<f64> = (0..=cols).map(|c| c as f64 * col_s).collect();
    let y_edges: Vec<f64> = (0..ROWS)
        .map(|row| grid::row_bounds(row).0 as f64 / 1e3)
        .chain(std::iter::once(grid::row_bounds(ROWS - 1).1 as f64 / 1e3))
        .collect();
    let mut counts = Vec::with_capacity(cols * ROWS);
    for c in 0..cols {
        for row in 0..ROWS {
            counts.push(u64::from(g.count(c, row)));
        }
    }
    HeatMap {
        title,
        subtitle,
        x_label: "time since the first probe (s)".into(),
        y_label: "round-trip time (µs)".into(),
        x_edges,
        y_edges,
        counts,
        marks,
        lines,
    }
}

fn us(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

/// One row of the sweep's percentile table (latencies in microseconds).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Probes per second asked for.
    pub pps: f64,
    /// Probes per second achieved.
    pub pps_achieved: f64,
    /// Probe size, bytes.
    pub size: usize,
    /// Probes sent.
    pub sent: u64,
    /// Replies received (unique).
    pub replies: u64,
    /// Replies lost.
    pub lost: u64,
    /// Replies out of order.
    pub late: u64,
    /// Duplicate replies.
    pub duplicate: u64,
    /// Invalid replies.
    pub invalid: u64,
    /// RTT minimum, us.
    pub min_us: f64,
    /// RTT median, us.
    pub p50_us: f64,
    /// RTT 90th percentile, us.
    pub p90_us: f64,
    /// RTT 99th percentile, us.
    pub p99_us: f64,
    /// RTT 99.9th percentile, us.
    pub p999_us: f64,
    /// RTT 99.99th percentile, us.
    pub p9999_us: f64,
    /// RTT maximum, us.
    pub max_us: f64,
    /// One-way estimate (RTT/2) median, us.
    pub one_way_p50_us: f64,
    /// One-way estimate 99th percentile, us.
    pub one_way_p99_us: f64,
}

impl Row {
    /// The row of one run.
    pub fn of(r: &PingReport) -> Row {
        let u = |ns: u64| ns as f64 / 1e3;
        Row {
            pps: r.schedule.pps_asked,
            pps_achieved: r.schedule.pps_achieved,
            size: r.size,
            sent: r.sent,
            replies: r.replies.received,
            lost: r.replies.lost,
            late: r.replies.late,
            duplicate: r.replies.duplicate,
            invalid: r.replies.invalid,
            min_us: u(r.rtt.min),
            p50_us: u(r.rtt.p50),
            p90_us: u(r.rtt.p90),
            p99_us: u(r.rtt.p99),
            p999_us: u(r.rtt.p999),
            p9999_us: u(r.rtt.p9999),
            max_us: u(r.rtt.max),
            one_way_p50_us: u(r.one_way.p50),
            one_way_p99_us: u(r.one_way.p99),
        }
    }
}

/// The table a person reads.
pub fn table_text(rows: &[Row], heading: &str) -> String {
    let mut s = format!("{heading}\n");
    s += "       pps    sent  replies   lost  late  dup |    min    p50    p90    p99  p99.9 p99.99     max | one-way p50  p99   (us)\n";
    for r in rows {
        s += &format!(
            "{:>10} {:>7} {:>8} {:>6} {:>5} {:>4} | {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>6.1} {:>7.1} | {:>8.1} {:>6.1}\n",
            units::thousands(r.pps.round() as u64),
            r.sent,
            r.replies,
            r.lost,
            r.late,
            r.duplicate,
            r.min_us,
            r.p50_us,
            r.p90_us,
            r.p99_us,
            r.p999_us,
            r.p9999_us,
            r.max_us,
            r.one_way_p50_us,
            r.one_way_p99_us
        );
    }
    s
}

/// The table for spreadsheets.
pub fn table_csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "pps,pps_achieved,size,sent,replies,lost,late,duplicate,invalid,min_us,p50_us,p90_us,p99_us,p99.9_us,p99.99_us,max_us,one_way_p50_us,one_way_p99_us\n",
    );
    for r in rows {
        s += &format!(
            "{},{:.1},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}\n",
            r.pps,
            r.pps_achieved,
            r.size,
            r.sent,
            r.replies,
            r.lost,
            r.late,
            r.duplicate,
            r.invalid,
            r.min_us,
            r.p50_us,
            r.p90_us,
            r.p99_us,
            r.p999_us,
            r.p9999_us,
            r.max_us,
            r.one_way_p50_us,
            r.one_way_p99_us
        );
    }
    s
}
