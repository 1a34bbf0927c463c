//! Seed 002's table: one point per offered rate, showing what was sent, what arrived, and
//! which layer lost the rest (the ledger against the kernel's counters).
//!
//! The seed (Haystack, "Burst Mode Benchmarking", 2010) sent 8800-byte Mark5B packets for 1 s
//! at 1024 to 8192 Mb/s and tabulated the emulator's real run time, the packets the receiving
//! kernel captured and those it lost. Here the sender's count, the exact ledger and the kernel's
//! own socket drop counter stand side by side, with the rate the sender actually achieved, so a
//! sender that could not keep up is not mistaken for a receiver that dropped.

use super::point::{Placement, Point, PointConfig, Runner};
use crate::units::{self, Rate};
use crate::Result;
use serde::Serialize;
use std::time::Duration;

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.rates/1";

/// The seed's rates, Mb/s of payload (10^6 bits/s).
pub const SEED_RATES: &str = "1024M,2048M,4096M,4608M,5120M,5632M,6144M,8192M";

/// A rate table to run.
#[derive(Clone, Debug)]
pub struct RatesConfig {
    /// Offered rates, in order.
    pub rates: Vec<Rate>,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Sending time per point.
    pub duration: Duration,
    /// UDP GSO on the sender.
    pub gso: bool,
    /// Receive buffer asked for.
    pub rcvbuf: u64,
    /// How many times to run the whole list.
    pub repeat: u32,
}

/// One row: which pass, and the point.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Pass number, 1-based.
    pub pass: u32,
    /// The point.
    #[serde(flatten)]
    pub point: Point,
}

/// The whole table, as `--json` prints it and rates.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct RatesDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Where the points ran.
    pub placement: Placement,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Sending time per point, seconds.
    pub duration_s: f64,
    /// UDP GSO asked of the sender.
    pub gso: bool,
    /// Receive buffer asked for, bytes.
    pub rcvbuf: u64,
    /// Passes over the rate list.
    pub repeat: u32,
    /// Every point in the order run.
    pub rows: Vec<Row>,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
    /// The reading of the table: the highest zero-loss rate and which layer lost what.
    pub summary: Vec<String>,
}

/// Run the table: a warm-up point, then every rate `repeat` times; `row` sees each as it ends.
pub fn run(runner: &Runner, cfg: &RatesConfig, row: &mut dyn FnMut(&Row)) -> Result<RatesDoc> {
    let point_cfg =
        |rate| PointConfig { rate, size: cfg.size, duration: cfg.duration, gso: cfg.gso, rcvbuf: cfg.rcvbuf };
    let mut rows = Vec::new();
    let mut stopped = false;
    if let Some(&first) = cfg.rates.first() {
        runner.warm_up(&point_cfg(first))?;
    }
    'passes: for pass in 1..=cfg.repeat {
        for &rate in &cfg.rates {
            match runner.run(&point_cfg(rate))? {
                Some(point) => {
                    let r = Row { pass, point };
                    row(&r);
                    rows.push(r);
                }
                None => {
                    stopped = true;
                    break 'passes;
                }
            }
        }
    }
    let summary = summarize(&rows);
    Ok(RatesDoc {
        schema: SCHEMA,
        placement: runner.placement(),
        size: cfg.size,
        duration_s: cfg.duration.as_secs_f64(),
        gso: cfg.gso,
        rcvbuf: cfg.rcvbuf,
        repeat: cfg.repeat,
        rows,
        stopped,
        summary,
    })
}

fn mbps(bps: f64) -> String {
    let v = bps / 1e6;
    if (v - v.round()).abs() < 0.05 {
        format!("{:.0}", v.round())
    } else {
        format!("{v:.1}")
    }
}

/// The heading lines of the table.
pub fn header(doc_size: usize, duration: Duration, placement: &Placement) -> String {
    format!(
        "wirespeed bench rates: {doc_size}-byte counter datagrams, {} per rate, {}\n\
         Mb/s = 10^6 bits/s of UDP payload; time = the sender's real run time (seed 002's `time`); \
         lost (ledger) = sequence numbers that never arrived; lost (kernel) = the receiving socket's own drop counter\n\
         {:>6} {:>10} {:>8} {:>15} {:>11} {:>17} {:>13} {:>13} {:>9}  {}\n",
        units::nanos(duration.as_nanos() as f64),
        placement.description,
        "-t (s)",
        "-r (Mb/s)",
        "time (s)",
        "achieved (Mb/s)",
        "sent",
        "packets captured",
        "lost (ledger)",
        "lost (kernel)",
        "drops/M",
        "note"
    )
}

/// One table line.
pub fn line(r: &Row) -> String {
    let p = &r.point;
    let mut notes = Vec::new();
    if !p.end_of_stream {
        notes.push("no end-of-stream message".to_string());
    }
    if p.missing != p.lost {
        notes.push(format!("{} sent but never received (sender's count)", units::thousands(p.missing)));
    }
    if let Some(a) = p.asked_bps {
        if p.achieved_bps < a * 0.98 {
            notes.push(format!("sender reached {:.0}% of -r", 100.0 * p.achieved_bps / a));
        }
    }
    if p.late > 0 {
        notes.push(format!("{} late", units::thousands(p.late)));
    }
    if p.duplicate > 0 {
        notes.push(format!("{} duplicate", units::thousands(p.duplicate)));
    }
    if p.invalid > 0 {
        notes.push(format!("{} invalid", units::thousands(p.invalid)));
    }
    format!(
        "{:>6} {:>10} {:>8.3} {:>15} {:>11} {:>17} {:>13} {:>13} {:>9.1}  {}",
        format!("{}", p.duration_s),
        p.asked_bps.map_or("max".into(), mbps),
        p.send_wall_s,
        mbps(p.achieved_bps),
        units::thousands(p.sent),
        units::thousands(p.received),
        units::thousands(p.lost),
        p.kernel_socket_drops.map_or("-".into(), units::thousands),
        p.drops_per_million,
        notes.join("; ")
    )
}

/// Which layer lost what, in words, and the highest rate that lost nothing.
pub fn summarize(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    let clean: Vec<&Row> = rows.iter().filter(|r| !r.point.lossy).collect();
    match clean.iter().map(|r| r.point.achieved_bps).fold(None, |m: Option<f64>, a| Some(m.map_or(a, |m| m.max(a)))) {
        Some(best) => out.push(format!(
            "highest rate with zero loss: {} Mb/s achieved ({})",
            mbps(best),
            units::pps(best / (rows[0].point.size as f64 * 8.0))
        )),
        None if !rows.is_empty() => out.push("every rate lost packets".into()),
        None => {}
    }
    for r in rows.iter().filter(|r| r.point.lossy) {
        let p = &r.point;
        let lost = p.missing.max(p.lost);
        let kernel = p.kernel_socket_drops.unwrap_or(0);
        let rate = p.asked_bps.map_or("max".to_string(), |b| format!("{} Mb/s", mbps(b)));
        let where_ = if lost == 0 {
            "nothing missing, but the end-of-stream message never came, so the tail is unproven".to_string()
        } else if kernel >= lost {
            "the receiving socket's buffer overflowed: the kernel counted every one (the receiver did not keep up)"
                .to_string()
        } else if kernel == 0 {
            "the receiving socket never saw them: lost before it (sender, link, or the receiving stack; see softnet and InErrors in the JSON)".to_string()
        } else {
            format!(
                "{} overflowed the receiving socket (kernel count), {} were lost before it",
                units::thousands(kernel),
                units::thousands(lost - kernel)
            )
        };
        out.push(format!("{rate}: {} lost ({:.0} per million): {where_}", units::thousands(lost), p.drops_per_million));
    }
    out
}

/// The whole table as text (the heading, every row, the summary).
pub fn text(doc: &RatesDoc) -> String {
    let mut s = header(doc.size, Duration::from_secs_f64(doc.duration_s), &doc.placement);
    for r in &doc.rows {
        s.push_str(&line(r));
        s.push('\n');
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    for l in &doc.summary {
        s.push_str("=> ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// The table as CSV, one row per point, the seed's columns first.
pub fn csv(doc: &RatesDoc) -> String {
    let mut s = String::from(
        "pass,t_s,r_mbps,time_s,achieved_mbps,sent,captured,lost_ledger,lost_kernel,drops_per_million,\
         missing,late,duplicate,invalid,end_of_stream,received_mbps,send_cpu_ns_per_packet,recv_cpu_ns_per_packet,\
         rcvbuf_errors,softnet_dropped\n",
    );
    for r in &doc.rows {
        let p = &r.point;
        s.push_str(&format!(
            "{},{},{},{:.3},{:.3},{},{},{},{},{:.3},{},{},{},{},{},{:.3},{:.1},{:.1},{},{}\n",
            r.pass,
            p.duration_s,
            p.asked_bps.map_or("max".into(), |b| format!("{:.3}", b / 1e6)),
            p.send_wall_s,
            p.achieved_bps / 1e6,
            p.sent,
            p.received,
            p.lost,
            p.kernel_socket_drops.map_or(String::new(), |k| k.to_string()),
            p.drops_per_million,
            p.missing,
            p.late,
            p.duplicate,
            p.invalid,
            p.end_of_stream,
            p.received_bps / 1e6,
            p.send_cpu_ns_per_packet,
            p.recv_cpu_ns_per_packet,
            p.kernel_rcvbuf_errors,
            p.softnet_dropped
        ));
    }
    s
}
