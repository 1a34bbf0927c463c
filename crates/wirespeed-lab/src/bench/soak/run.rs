//! Running a soak: one sender and one receiver for the whole duration, the receiver's lines
//! followed live, and the document built from them once both ends have reported.

use super::intervals::{interval, intervals, longest_clean, parse_sample, row_name, trim_after, Interval, Sample};
use super::verdict::{failed_verdict, sender_bound, summarize, verdict};
use super::{human_duration, rate_words, SoakConfig, SoakDoc, VerifyVerdict, SCHEMA};
use crate::bench::point::{Placement, PointConfig, Runner, Stream, Streamed};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{SystemTime, UNIX_EPOCH};
use wirespeed::units::Rate;
use wirespeed::Result;

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

/// Run the soak: one sender and one receiver for the whole duration; `live` sees each row as
/// the receiver reports it (the last row, closed by the final report, is in the document only;
/// [`super::final_line`] says which live rows it replaces).
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
    let mut recv_args = recv_args;
    if cfg.record.is_some() && cfg.prune {
        // A file a minute, each verified and deleted as soon as it is finished.
        recv_args.extend(["--rotate".into(), "1m".into()]);
    }
    let send_args = cfg.skip_every.map(|n| vec!["--skip-every".into(), n.to_string()]).unwrap_or_default();
    let pcfg = PointConfig { rate: cfg.rate, size: cfg.size, duration: cfg.duration, gso: cfg.gso, rcvbuf: cfg.rcvbuf };
    let (tx, rx) = mpsc::channel::<String>();
    let size = cfg.size;
    let record = cfg.record.is_some();
    let prune_dir = cfg.record.as_deref().filter(|_| cfg.prune);
    let running = std::sync::atomic::AtomicBool::new(true);
    let (res, samples, mut pruned) = std::thread::scope(|s| {
        let follower = s.spawn(move || follow(rx, size, record, live));
        let running = &running;
        let pruner = s.spawn(move || {
            let mut parts = Vec::new();
            while let Some(dir) = prune_dir.filter(|_| running.load(Ordering::Relaxed)) {
                parts.extend(super::record::prune(dir));
                std::thread::sleep(std::time::Duration::from_secs(5));
            }
            parts
        });
        let res = runner.run_streamed(&pcfg, Stream { recv_args, send_args, recv_lines: Some(tx), exe: None });
        running.store(false, Ordering::Relaxed);
        (res, follower.join().unwrap_or_default(), pruner.join().unwrap_or_default())
    });
    let signalled = runner.stop_flag().load(Ordering::Relaxed);
    let mut doc = match res {
        Ok(streamed) => {
            let stopped = signalled || streamed.as_ref().is_some_and(|s| s.stopped);
            build(cfg, runner.placement(), window, &samples, streamed, stopped, None)
        }
        Err(e) if samples.is_empty() => return Err(e),
        Err(e) => build(cfg, runner.placement(), window, &samples, None, signalled, Some(e.to_string())),
    };
    if let Some(dir) = &cfg.record {
        let received = doc.point.as_ref().map(|p| p.received);
        let rest = |received| {
            super::record::verify(dir, received).unwrap_or_else(|e| VerifyVerdict {
                verdict: format!("verify FAILED: {e}"),
                exit_code: -1,
                ..VerifyVerdict::default()
            })
        };
        let v = if cfg.prune {
            // Files finished after the pruner's last pass, one by one, then whatever is left.
            pruned.extend(super::record::prune(dir));
            if !super::record::finished_files(dir).is_empty() || pruned.is_empty() {
                pruned.push(rest(None));
            }
            super::record::merge_verdicts(&pruned, received)
        } else {
            rest(received)
        };
        super::record::add_verify(&mut doc, v);
    }
    Ok(doc)
}

fn follow(
    rx: mpsc::Receiver<String>,
    size: usize,
    record: bool,
    live: &mut (dyn FnMut(&Interval) + Send),
) -> Vec<Sample> {
    let mut samples: Vec<Sample> = Vec::new();
    for line in rx {
        let Some(mut s) = parse_sample(&line) else { continue };
        s.at_unix_s = now_unix();
        let prev = samples.last().copied().unwrap_or_default();
        live(&interval(samples.len() + 1, &prev, &s, size, false, record));
        samples.push(s);
    }
    samples
}

/// The final sample: the receiver's report, never below the last interval line (a recorder's
/// figures from its report's ring and writer, when it gave them).
fn end_sample(last: Sample, s: &Streamed) -> Sample {
    let p = &s.point;
    let r = &s.recv_report;
    let most = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    Sample {
        written_bytes: most(r["writer"]["bytes"].as_u64(), last.written_bytes),
        ring_high_water: most(r["ring"]["high_water"].as_u64(), last.ring_high_water),
        ring_full: most(r["ring"]["ring_full"].as_u64().or_else(|| r["capture"]["ring_full"].as_u64()), last.ring_full),
        write_stalls: most(r["writer"]["write_stalls"].as_u64(), last.write_stalls),
        elapsed_s: s.recv_wall_s.max(last.elapsed_s),
        datagrams: s.recv_datagrams.max(last.datagrams),
        lost: p.lost.max(last.lost),
        socket_drops: p.kernel_socket_drops.unwrap_or(0).max(last.socket_drops),
        rcvbuf_errors: p.kernel_rcvbuf_errors.max(last.rcvbuf_errors),
        at_unix_s: now_unix(),
    }
}

/// The document from the samples and the run's point (pure but for the time of day).
pub(super) fn build(
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
    let rows = intervals(kept, end.as_ref(), every_s, cfg.size, cfg.record.is_some());
    let record = cfg
        .record
        .as_ref()
        .map(|d| super::record::from_report(d, streamed.as_ref().map_or(&serde_json::Value::Null, |s| &s.recv_report)));
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
        summary.extend(crate::bench::point::rcvbuf_note(cfg.rcvbuf, [p]));
    }
    if let Some(r) = &record {
        summary.push(super::record::summary_line(r));
    }
    SoakDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement },
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
        record,
    }
}

fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
