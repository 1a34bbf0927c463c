//! Seed 002's table: one point per offered rate, showing what was sent, what arrived, and
//! which layer lost the rest (the ledger against the kernel's counters).
//!
//! The seed (Haystack, "Burst Mode Benchmarking", 2010) sent 8800-byte Mark5B packets for 1 s
//! at 1024 to 8192 Mb/s and tabulated the emulator's real run time, the packets the receiving
//! kernel captured and those it lost. Here the sender's count, the exact ledger and the kernel's
//! own socket drop counter stand side by side, with the rate the sender actually achieved, so a
//! sender that could not keep up is not mistaken for a receiver that dropped.

use super::point::{Placement, Point, PointConfig, Runner};
use super::stats::mbps;
use serde::Serialize;
use std::time::Duration;
use wirespeed::units::{self, Rate};
use wirespeed::Result;

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
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
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
    let mut summary = summarize(&rows);
    summary.extend(super::point::rcvbuf_note(cfg.rcvbuf, rows.iter().map(|r| &r.point)));
    Ok(RatesDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement: runner.placement() },
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
    let hosts: String = p.host_lines().iter().map(|l| format!("\n{l}")).collect();
    format!(
        "{:>6} {:>10} {:>8.3} {:>15} {:>11} {:>17} {:>13} {:>13} {:>9.1}  {}{hosts}",
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
    // As the seed concluded ("intact up to at least 4.5 Gbps"): the highest clean rate below
    // every lossy one; a clean row above a lossy one shows intermittent loss, not a safe rate.
    let (best, lowest_lossy) = super::point::highest_clean(rows.iter().map(|r| &r.point));
    let asked = |p: &Point| p.asked_bps.map_or("max".to_string(), |b| format!("{} Mb/s", mbps(b)));
    match best {
        Some(p) => out.push(format!(
            "highest rate with zero loss: -r {} (achieved {} Mb/s, {}){}",
            asked(p),
            mbps(p.achieved_bps),
            units::pps(p.achieved_pps),
            if lowest_lossy.is_finite() {
                format!("; loss from {} Mb/s achieved", mbps(lowest_lossy))
            } else {
                String::new()
            }
        )),
        None if !rows.is_empty() => out.push("no rate was free of loss below every lossy one".into()),
        None => {}
    }
    let above = rows.iter().filter(|r| !r.point.lossy && r.point.achieved_bps >= lowest_lossy).count();
    if above > 0 {
        out.push(format!(
            "{above} rate(s) above the lowest lossy one lost nothing: the loss is intermittent (--repeat and a longer --duration show how often)"
        ));
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
    let mut s = header(doc.size, Duration::from_secs_f64(doc.duration_s), &doc.head.placement);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A point at `mbps` (asked = achieved unless `achieved` says otherwise) with `lost` lost,
    /// `kernel` of them counted by the kernel at the socket.
    fn row(mbps: f64, achieved: f64, lost: u64, kernel: u64) -> Row {
        Row { pass: 1, point: crate::bench::point::test_point(8800, mbps * 1e6, achieved * 1e6, lost, kernel) }
    }

    #[test]
    fn the_seeds_table_reads_as_the_seed_concluded() {
        // Seed 002's figures: clean to 4608, kernel loss from 5120.
        let rows = vec![
            row(1024.0, 1024.0, 0, 0),
            row(4096.0, 4096.0, 0, 0),
            row(4608.0, 4608.0, 0, 0),
            row(5120.0, 5120.0, 129, 129),
            row(5632.0, 5632.0, 5221, 5221),
        ];
        let s = summarize(&rows);
        assert!(s[0].starts_with("highest rate with zero loss: -r 4608 Mb/s (achieved 4608 Mb/s"), "{s:?}");
        assert!(s[0].ends_with("loss from 5120 Mb/s achieved"), "{s:?}");
        assert!(s[1].starts_with("5120 Mb/s: 129 lost") && s[1].contains("the receiver did not keep up"), "{s:?}");
        assert_eq!(s.len(), 3, "{s:?}");
    }

    #[test]
    fn which_layer_lost_what() {
        let s = summarize(&[row(1000.0, 1000.0, 50, 0), row(2000.0, 2000.0, 100, 40)]);
        assert!(s[0].starts_with("no rate was free of loss"), "{s:?}");
        assert!(s[1].contains("lost before it"), "{s:?}");
        assert!(
            s[2].contains("40 overflowed the receiving socket") && s[2].contains("60 were lost before it"),
            "{s:?}"
        );
    }

    #[test]
    fn a_clean_rate_above_a_lossy_one_is_not_claimed() {
        // 2048 lost once, 4096 did not: the claim stops below 2048 and the note says why.
        let s = summarize(&[row(1024.0, 1024.0, 0, 0), row(2048.0, 2048.0, 3, 3), row(4096.0, 4096.0, 0, 0)]);
        assert!(s[0].contains("-r 1024 Mb/s"), "{s:?}");
        assert!(s.iter().any(|l| l.contains("intermittent")), "{s:?}");
        // A sender short of -r: the claim names both the asked and the achieved rate.
        let s = summarize(&[row(8192.0, 6100.0, 0, 0)]);
        assert!(s[0].contains("-r 8192 Mb/s (achieved 6100 Mb/s"), "{s:?}");
    }

    #[test]
    fn table_lines_and_csv_carry_the_seeds_columns() {
        let r = row(1024.0, 1024.0, 0, 0);
        let l = line(&r);
        let cells: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(&cells[..8], &["1", "1024", "1.010", "1024", "14,545", "14,545", "0", "0"], "{l}");
        let short = line(&row(8192.0, 6100.0, 0, 0));
        assert!(short.contains("sender reached 74% of -r"), "{short}");
        let doc = RatesDoc {
            head: crate::bench::DocHead { schema: SCHEMA, placement: Placement::test_loopback(&[0], &[1]) },
            size: 8800,
            duration_s: 1.0,
            gso: false,
            rcvbuf: 1 << 25,
            repeat: 1,
            rows: vec![r],
            stopped: false,
            summary: vec![],
        };
        let csv = csv(&doc);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
        assert!(lines[1].starts_with("1,1,1024.000,1.010,1024.000,14545,14545,0,0,"), "{}", lines[1]);
    }
}
