//! Judging a soak in words: whether the sender was the limit, the one-sentence verdict, and the
//! summary lines under the table. A zero-loss claim is made here and nowhere else.

use super::intervals::{row_name, rows_phrase, Interval, Stretch};
use super::{human_duration, mbps, rate_words, SoakConfig};
use crate::bench::point::Point;
use wirespeed::units::{self, Rate};

/// The sender fell short of the rate asked (below 98% of it, as `bench max` judges): a run
/// then tests the rate achieved, not the one asked.
pub(super) const SENDER_BOUND: f64 = 0.98;

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
pub(super) fn failed_verdict(cfg: &SoakConfig, rows: &[Interval], error: &str) -> String {
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
pub(super) fn summarize(
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
