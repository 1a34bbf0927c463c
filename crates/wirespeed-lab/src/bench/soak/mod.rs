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
//!
//! The room is split along the run's life: `intervals` turns the receiver's cumulative samples
//! into rows, `run` drives the sender and receiver and builds the document, `verdict` judges it
//! in words, and `render` writes it as a table, CSV and charts; `record` is the soak through the
//! recorder (`--record DIR`): its figures per row and the final `wirespeed verify`. Every public item keeps its path
//! `bench::soak::X`.

mod intervals;
pub mod record;
mod render;
mod run;
mod verdict;

#[cfg(test)]
mod tests;

use super::point::Point;
use super::stats::mbps;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::units::{self, Rate};

pub use intervals::{
    interval, intervals, longest_clean, parse_sample, ranges, trim_after, Interval, RecorderRow, Sample, Stretch,
};
pub use record::{SoakRecord, VerifyVerdict};
pub use render::{charts, csv, final_line, header, line, text};
pub use run::{reorder_window, run};
pub use verdict::{sender_bound, verdict};

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
    /// Record to this directory (`wirespeed record -o DIR` as the receiver) and verify it after.
    pub record: Option<PathBuf>,
    /// With `record`: verify each file as soon as the recorder finishes it, then delete it and
    /// its sidecar (the recorder rotates every minute), so a run longer than the disk holds
    /// is still verified whole.
    pub prune: bool,
}

/// The whole record, as `--json` prints it and soak.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct SoakDoc {
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
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
    /// With `--record`: what the recording holds and `wirespeed verify`'s verdict on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<SoakRecord>,
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
