//! `bench max`: repeated, independent searches for the highest zero-loss rate between a real
//! sender and receiver, each probe a [`Point`], and the median of the searches.
//!
//! One search can be pulled down by a single unlucky probe (a loss from something else on the
//! host); the median of independent searches is what a reader should quote, and every search
//! and every probe is kept so the spread is visible.

use super::point::{Placement, Point, PointConfig, Runner};
use super::search::{self, Outcome, SearchConfig, SearchResult};
use serde::Serialize;
use std::time::Duration;
use wirespeed::units::{self, Rate};
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.max/1";

/// A search to run.
#[derive(Clone, Debug)]
pub struct MaxConfig {
    /// Range, precision and probe limit.
    pub search: SearchConfig,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Sending time per probe.
    pub duration: Duration,
    /// UDP GSO on the sender.
    pub gso: bool,
    /// Receive buffer asked for.
    pub rcvbuf: u64,
    /// Independent searches.
    pub repeat: u32,
}

/// Everything a `bench max` run found, as `--json` prints it and max.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct MaxDoc {
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Sending time per probe, seconds.
    pub duration_s: f64,
    /// Stopping rule: the bracket's hi/lo - 1 below this.
    pub precision: f64,
    /// Bottom of the range, payload bits/s.
    pub lo_bps: f64,
    /// Top of the range, payload bits/s; `null` = the sender flat out.
    pub hi_bps: Option<f64>,
    /// UDP GSO asked of the sender.
    pub gso: bool,
    /// Receive buffer asked for, bytes.
    pub rcvbuf: u64,
    /// Searches asked for.
    pub repeat: u32,
    /// Every search with every probe.
    pub searches: Vec<SearchResult<Point>>,
    /// Median of the searches' zero-loss rates (payload bits/s; a failed search counts lowest).
    pub median_bps: Option<f64>,
    /// How the median search ended (found, sender-bound, above-hi, ...).
    pub median_outcome: Option<Outcome>,
    /// The result in one sentence.
    pub verdict: String,
    /// Notes on the whole run (a receive buffer capped by the kernel).
    pub notes: Vec<String>,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
}

/// What a progress line is about.
pub enum Progress<'a> {
    /// A probe of search `search` (1-based) finished.
    Probe {
        /// Which search.
        search: u32,
        /// Probe number within it, 1-based.
        n: usize,
        /// The measurement.
        point: &'a Point,
    },
    /// A search finished.
    Done {
        /// Which search.
        search: u32,
        /// Its result.
        result: &'a SearchResult<Point>,
    },
}

/// Run the searches (after one unrecorded warm-up at the top of the range); `progress` sees
/// every probe and every finished search.
pub fn run(runner: &Runner, cfg: &MaxConfig, progress: &mut dyn FnMut(Progress)) -> Result<MaxDoc> {
    let point_cfg = |asked: Option<f64>| PointConfig {
        rate: asked.map_or(Rate::Max, Rate::Bits),
        size: cfg.size,
        duration: cfg.duration,
        gso: cfg.gso,
        rcvbuf: cfg.rcvbuf,
    };
    runner.warm_up(&point_cfg(cfg.search.hi))?;
    let mut searches = Vec::new();
    let mut failure: Option<Error> = None;
    for k in 1..=cfg.repeat {
        let mut n = 0;
        let r = search::search(&cfg.search, |asked| match runner.run(&point_cfg(asked)) {
            Ok(Some(p)) => {
                n += 1;
                progress(Progress::Probe { search: k, n, point: &p });
                Some(p)
            }
            Ok(None) => None,
            Err(e) => {
                failure = Some(e);
                None
            }
        });
        if let Some(e) = failure.take() {
            return Err(e);
        }
        let stopped = r.outcome == Outcome::Stopped;
        progress(Progress::Done { search: k, result: &r });
        searches.push(r);
        if stopped {
            break;
        }
    }
    Ok(finish(cfg, runner.placement(), searches))
}

/// The document around finished searches: the median and the sentence that says it.
pub fn finish(cfg: &MaxConfig, placement: Placement, searches: Vec<SearchResult<Point>>) -> MaxDoc {
    let stopped = searches.iter().any(|s| s.outcome == Outcome::Stopped);
    let complete: Vec<&SearchResult<Point>> = searches.iter().filter(|s| s.outcome != Outcome::Stopped).collect();
    let values: Vec<Option<f64>> = complete.iter().map(|s| s.zero_loss_bps).collect();
    let median_bps = super::stats::lower_median(&values);
    let median_outcome = complete.iter().find(|s| s.zero_loss_bps == median_bps).map(|s| s.outcome);
    let verdict = match (median_bps, median_outcome) {
        (_, None) => "no search finished".to_string(),
        (Some(b), Some(o)) => {
            let fig = format!(
                "{} payload ({}, {} on the wire)",
                units::bits(b),
                units::pps(b / (cfg.size as f64 * 8.0)),
                units::bits(units::wire_bits(b / (cfg.size as f64 * 8.0), cfg.size))
            );
            match o {
                Outcome::Found | Outcome::ProbeLimit => format!("highest zero-loss rate: {fig}"),
                Outcome::SenderBound => {
                    format!(">= {fig} (sender-bound: the sender flat out lost nothing, so the receiver was never the limit)")
                }
                Outcome::AboveHi => format!(">= {fig} (zero loss at --hi: the limit is above the range searched)"),
                Outcome::BelowLo | Outcome::Stopped => format!("highest zero-loss rate: {fig}"),
            }
        }
        (None, Some(Outcome::BelowLo)) => {
            format!("no zero-loss rate found: every probe lost, down to {} (lower --lo)", units::bits(cfg.search.lo))
        }
        (None, Some(_)) => {
            "no zero-loss rate found: no clean probe was below the lowest lossy one (intermittent loss; see the probes)"
                .to_string()
        }
    };
    let notes: Vec<String> =
        super::point::rcvbuf_note(cfg.rcvbuf, searches.iter().flat_map(|s| s.probes.iter().map(|p| &p.point)))
            .into_iter()
            .collect();
    MaxDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement },
        size: cfg.size,
        duration_s: cfg.duration.as_secs_f64(),
        precision: cfg.search.precision,
        lo_bps: cfg.search.lo,
        hi_bps: cfg.search.hi,
        gso: cfg.gso,
        rcvbuf: cfg.rcvbuf,
        repeat: cfg.repeat,
        searches,
        median_bps,
        median_outcome,
        verdict,
        notes,
        stopped,
    }
}

/// The heading line of a run.
pub fn header(cfg: &MaxConfig, placement: &Placement) -> String {
    format!(
        "wirespeed bench max: highest zero-loss rate of {}-byte counter datagrams, {} per probe, precision {}%, {} search(es), range {} .. {}{}; {}",
        cfg.size,
        units::nanos(cfg.duration.as_nanos() as f64),
        cfg.search.precision * 100.0,
        cfg.repeat,
        units::bits(cfg.search.lo),
        cfg.search.hi.map_or("the sender flat out".into(), units::bits),
        if cfg.gso { ", sender with GSO" } else { "" },
        placement.description
    )
}

/// The progress line of one probe.
pub fn probe_line(search: u32, n: usize, p: &Point) -> String {
    format!("search {search} probe {n:>2}: {}", p.lines())
}

/// One search's result on one line.
pub fn search_line(k: u32, r: &SearchResult<Point>) -> String {
    let upper = r.lowest_lossy_bps.map(|b| format!(", loss at {}", units::bits(b))).unwrap_or_default();
    let body = match (r.outcome, r.zero_loss_bps) {
        (Outcome::Found, Some(z)) => format!("{}{upper}", units::bits(z)),
        (Outcome::SenderBound, Some(z)) => format!(">= {} (sender-bound)", units::bits(z)),
        (Outcome::AboveHi, Some(z)) => format!(">= {} (zero loss at --hi)", units::bits(z)),
        (Outcome::ProbeLimit, z) => {
            format!("{}{upper} (probe limit reached)", z.map_or("none".into(), units::bits))
        }
        (Outcome::Stopped, z) => format!("stopped; best so far {}", z.map_or("none".into(), units::bits)),
        (Outcome::BelowLo, _) => format!("no zero-loss rate down to {}", units::bits(r.bracket_bps.0)),
        (_, None) => format!("no clean probe below the lowest lossy one{upper}"),
    };
    format!("search {k}: {body} ({} probes)", r.probes.len())
}

/// The summary after the probe lines: one line per search, notes, the median.
pub fn summary(doc: &MaxDoc) -> String {
    let mut s = String::new();
    for (i, r) in doc.searches.iter().enumerate() {
        s.push_str(&search_line(i as u32 + 1, r));
        s.push('\n');
        for n in &r.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
    }
    let n = doc.searches.iter().filter(|r| r.outcome != Outcome::Stopped).count();
    for n in &doc.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s.push_str(&format!(
        "=> {}{}\n",
        if n > 1 { format!("median of {n} searches: ") } else { String::new() },
        doc.verdict
    ));
    s
}
