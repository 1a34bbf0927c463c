//! `bench priority`: seed 004's experiment on this host. CASPER ran its receiver at nice -20
//! and found about twice the throughput of one at +20, "especially evident at higher packet
//! rates". Here the receiver shares its core with a CPU hog (a busy loop at nice 0, inside the
//! receiver's partition), and `bench max`'s zero-loss search runs with the receiver at nice
//! +19, 0, -20 and under SCHED_FIFO, each the median of `--repeat` searches.
//!
//! The rounds are interleaved (every setting once, then every setting again), so a slow drift
//! of the host (another build starting) spreads over all settings instead of landing on one.

use super::max::{self, MaxConfig};
use super::point::{Placement, Point, Runner};
use super::search::{Outcome, SearchResult};
use crate::testbed::place::Side;
use serde::Serialize;
use wirespeed::priority::{Priority, DEFAULT_REALTIME};
use wirespeed::units;
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.priority/1";

/// The hog's nice value: the default every other process of the host has.
pub const HOG_NICE: i32 = 0;

/// One receiver setting of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Setting {
    /// `recv --priority N`.
    Nice(i32),
    /// `recv --realtime=PRIO` (SCHED_FIFO on the capture thread).
    Fifo(u8),
}

impl Setting {
    /// The settings in the order they are measured and shown: the least favoured first, the
    /// baseline every factor is relative to.
    pub fn all() -> [Setting; 4] {
        [Setting::Nice(19), Setting::Nice(0), Setting::Nice(-20), Setting::Fifo(DEFAULT_REALTIME)]
    }

    /// As the table names it: "nice +19", "nice 0", "nice -20", "SCHED_FIFO 10".
    pub fn name(&self) -> String {
        match *self {
            Setting::Nice(n) if n > 0 => format!("nice +{n}"),
            Setting::Nice(n) => format!("nice {n}"),
            Setting::Fifo(p) => format!("SCHED_FIFO {p}"),
        }
    }

    /// The receiver's options for this setting (`--lock-memory` as the run asks, for all).
    pub fn priority(&self, lock_memory: bool) -> Priority {
        match *self {
            Setting::Nice(n) => Priority { nice: Some(n), realtime: None, lock_memory },
            Setting::Fifo(p) => Priority { nice: None, realtime: Some(p), lock_memory },
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct PriorityConfig {
    /// The search of every setting: range, precision, size, probe length, and `repeat`: the
    /// searches per setting.
    pub max: MaxConfig,
    /// Run the CPU hog on the receiver's core (without it: the control, an idle core).
    pub hog: bool,
    /// Lock the receiver's memory in every setting.
    pub lock_memory: bool,
}

/// The CPU hog as the report records it.
#[derive(Clone, Debug, Serialize)]
pub struct Hog {
    /// CPUs it may run on: the receiver's.
    pub cpus: Vec<usize>,
    /// Its nice value.
    pub nice: i32,
    /// What it runs.
    pub command: String,
}

/// One setting's result.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// "nice +19", "nice 0", "nice -20", "SCHED_FIFO 10".
    pub setting: String,
    /// The receiver's options.
    pub priority: Priority,
    /// Median of the searches' zero-loss rates, payload bits/s (a failed search counts lowest).
    pub median_bps: Option<f64>,
    /// The same in datagrams/s.
    pub median_pps: Option<f64>,
    /// Lowest and highest zero-loss rate of the searches that found one, bits/s.
    pub min_bps: Option<f64>,
    /// See `min_bps`.
    pub max_bps: Option<f64>,
    /// How the median search ended; sender-bound or above-hi make the median a lower bound.
    pub outcome: Option<Outcome>,
    /// Whether the median is a lower bound (the receiver never lost, the sender was the limit).
    pub lower_bound: bool,
    /// The median over nice +19's median: seed 004's factor.
    pub factor: Option<f64>,
    /// Every search with every probe.
    pub searches: Vec<SearchResult<Point>>,
}

/// Everything a `bench priority` run found, as `--json` prints it and priority.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct PriorityDoc {
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
    /// The hog on the receiver's core; `None` with `--no-hog`.
    pub hog: Option<Hog>,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Sending time per probe, seconds.
    pub duration_s: f64,
    /// Stopping rule of each search.
    pub precision: f64,
    /// Bottom of the range, payload bits/s.
    pub lo_bps: f64,
    /// Top of the range, payload bits/s; `null` = the sender flat out.
    pub hi_bps: Option<f64>,
    /// UDP GSO on the sender.
    pub gso: bool,
    /// Receive buffer asked for, bytes.
    pub rcvbuf: u64,
    /// Searches per setting.
    pub repeat: u32,
    /// One row per setting, in [`Setting::all`]'s order.
    pub rows: Vec<Row>,
    /// The result in one sentence.
    pub verdict: String,
    /// Notes on the whole run (a receive buffer capped by the kernel).
    pub notes: Vec<String>,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
}

/// What a progress line is about.
pub enum Progress<'a> {
    /// A setting's search is starting (round `round` of `repeat`).
    Start {
        /// The receiver's setting.
        setting: Setting,
        /// 1-based.
        round: u32,
    },
    /// A probe or a finished search of that setting.
    Max {
        /// The receiver's setting.
        setting: Setting,
        /// 1-based.
        round: u32,
        /// What happened.
        inner: max::Progress<'a>,
    },
}

/// Refuse what this host cannot do before anything runs: every setting's priority.
pub fn check(cfg: &PriorityConfig) -> Result<()> {
    for s in Setting::all() {
        s.priority(cfg.lock_memory).check(false, 0)?;
    }
    cfg.max.search.validate().map_err(Error::invalid)
}

/// Start the hog (unless `--no-hog`), then run every setting's search `repeat` times,
/// interleaved; `progress` sees every search start, probe and result.
pub fn run(runner: &mut Runner, cfg: &PriorityConfig, progress: &mut dyn FnMut(Progress)) -> Result<PriorityDoc> {
    // A far receiver checks its own privileges (its one line names its host).
    if !runner.place().is_hosts() {
        check(cfg)?;
    }
    // On hosts the receiver and the hog share one CPU of the far host, as a partition's core.
    runner.pin_far_receiver();
    let hog = if cfg.hog { Some(runner.place().cpu_hog(Side::Recv, HOG_NICE)?) } else { None };
    let settings = Setting::all();
    let one = MaxConfig { repeat: 1, ..cfg.max.clone() };
    let mut per: Vec<Vec<SearchResult<Point>>> = settings.iter().map(|_| Vec::new()).collect();
    let mut stopped = false;
    'rounds: for round in 1..=cfg.max.repeat {
        for (i, &setting) in settings.iter().enumerate() {
            runner.receiver_priority(setting.priority(cfg.lock_memory))?;
            progress(Progress::Start { setting, round });
            let doc = max::run(runner, &one, &mut |inner| progress(Progress::Max { setting, round, inner }))?;
            per[i].extend(doc.searches);
            if doc.stopped {
                stopped = true;
                break 'rounds;
            }
        }
    }
    runner.receiver_priority(Priority { lock_memory: cfg.lock_memory, ..Priority::default() })?;
    let mut notes = Vec::new();
    if let Some(h) = &hog {
        // The hog must have run through every probe, or the figures are of an idle core.
        if wirespeed::sys::send_signal(h.pid(), 0).is_err() {
            return Err(Error::busy("the CPU hog ended during the run: the figures are not of a busy core; run again"));
        }
    }
    drop(hog);
    let placement = runner.placement();
    let hog_doc = cfg.hog.then(|| Hog {
        cpus: runner.place().cpus(Side::Recv),
        nice: HOG_NICE,
        command: "sh -c 'while :; do :; done'".into(),
    });
    let rows = rows(cfg, &placement, &settings, per);
    notes.extend(super::point::rcvbuf_note(
        cfg.max.rcvbuf,
        rows.iter().flat_map(|r| r.searches.iter().flat_map(|s| s.probes.iter().map(|p| &p.point))),
    ));
    let verdict = verdict(&rows, cfg.hog);
    Ok(PriorityDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement },
        hog: hog_doc,
        size: cfg.max.size,
        duration_s: cfg.max.duration.as_secs_f64(),
        precision: cfg.max.search.precision,
        lo_bps: cfg.max.search.lo,
        hi_bps: cfg.max.search.hi,
        gso: cfg.max.gso,
        rcvbuf: cfg.max.rcvbuf,
        repeat: cfg.max.repeat,
        rows,
        verdict,
        notes,
        stopped,
    })
}

/// The rows of finished searches: each setting's median (as `bench max` takes it), spread and
/// factor over nice +19.
fn rows(
    cfg: &PriorityConfig,
    placement: &Placement,
    settings: &[Setting],
    per: Vec<Vec<SearchResult<Point>>>,
) -> Vec<Row> {
    let mut rows: Vec<Row> = settings
        .iter()
        .zip(per)
        .map(|(s, searches)| {
            let d = max::finish(&cfg.max, placement.clone(), searches);
            let found: Vec<f64> =
                d.searches.iter().filter(|r| r.outcome != Outcome::Stopped).filter_map(|r| r.zero_loss_bps).collect();
            let min_bps = found.iter().copied().reduce(f64::min);
            let max_bps = found.iter().copied().reduce(f64::max);
            Row {
                setting: s.name(),
                priority: s.priority(cfg.lock_memory),
                median_bps: d.median_bps,
                median_pps: d.median_bps.map(|b| b / (cfg.max.size as f64 * 8.0)),
                min_bps,
                max_bps,
                outcome: d.median_outcome,
                lower_bound: matches!(d.median_outcome, Some(Outcome::SenderBound | Outcome::AboveHi)),
                factor: None,
                searches: d.searches,
            }
        })
        .collect();
    let base = rows.first().and_then(|r| r.median_bps).filter(|&b| b > 0.0);
    for r in &mut rows {
        r.factor = match (r.median_bps, base) {
            (Some(m), Some(b)) => Some(m / b),
            _ => None,
        };
    }
    rows
}

fn verdict(rows: &[Row], hog: bool) -> String {
    let against = if hog { "against a busy loop on its core" } else { "on an idle core" };
    let f = |name: &str| rows.iter().find(|r| r.setting == name).and_then(|r| r.factor.map(|f| (f, r.lower_bound)));
    let ge = |lb: bool| if lb { ">= " } else { "" };
    match (f("nice -20"), f(&Setting::Fifo(DEFAULT_REALTIME).name())) {
        (Some((a, la)), Some((b, lb))) => format!(
            "{against}, the receiver at nice -20 took {}{a:.2}x the zero-loss rate of nice +19, under SCHED_FIFO {}{b:.2}x (seed 004: about 2x for -20 vs +20)",
            ge(la),
            ge(lb)
        ),
        _ => format!("{against}: no factor (nice +19 or another setting found no zero-loss rate; see the searches)"),
    }
}

/// The heading line of a run.
pub fn header(cfg: &PriorityConfig, placement: &Placement) -> String {
    let names: Vec<String> = Setting::all().iter().map(Setting::name).collect();
    format!(
        "wirespeed bench priority: the receiver's highest zero-loss rate at {}{}, {}; {}-byte counter datagrams, {} per probe, precision {}%, {} search(es) per setting (interleaved), range {} .. {}{}; {}",
        names.join(", "),
        if cfg.lock_memory { " (memory locked)" } else { "" },
        if cfg.hog {
            format!("a busy loop at nice {HOG_NICE} on the receiver's CPU(s) {:?}", placement.recv_cpus)
        } else {
            "no hog (--no-hog: an idle receiver core)".to_string()
        },
        cfg.max.size,
        units::nanos(cfg.max.duration.as_nanos() as f64),
        cfg.max.search.precision * 100.0,
        cfg.max.repeat,
        units::bits(cfg.max.search.lo),
        cfg.max.search.hi.map_or("the sender flat out".into(), units::bits),
        if cfg.max.gso { ", sender with GSO" } else { "" },
        placement.description
    )
}

/// The progress line of one event.
pub fn progress_line(p: &Progress) -> String {
    match p {
        Progress::Start { setting, round } => format!("{} (round {round}):", setting.name()),
        Progress::Max { inner: max::Progress::Probe { n, point, .. }, .. } => {
            format!("  probe {n:>2}: {}", point.line())
        }
        Progress::Max { setting, inner: max::Progress::Done { result, .. }, round } => {
            format!(
                "  {}",
                max::search_line(*round, result).replacen("search", &format!("{} search", setting.name()), 1)
            )
        }
    }
}

/// The table: setting, median zero-loss rate, spread, datagrams/s, factor over nice +19.
pub fn table(doc: &PriorityDoc) -> String {
    let mut s = format!(
        "{:<14} {:>16} {:>27} {:>12} {:>9}\n",
        "receiver", "zero-loss rate", "min .. max", "datagrams/s", "x +19"
    );
    for r in &doc.rows {
        let ge = if r.lower_bound { ">= " } else { "" };
        s.push_str(&format!(
            "{:<14} {:>16} {:>27} {:>12} {:>9}\n",
            r.setting,
            r.median_bps.map_or("none".into(), |b| format!("{ge}{}", units::bits(b))),
            match (r.min_bps, r.max_bps) {
                (Some(a), Some(b)) => format!("{} .. {}", units::bits(a), units::bits(b)),
                _ => "-".into(),
            },
            r.median_pps.map_or("-".into(), |p| format!("{ge}{}", units::pps(p))),
            r.factor.map_or("-".into(), |f| format!("{ge}{f:.2}")),
        ));
    }
    for n in &doc.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s.push_str(&format!("=> {}\n", doc.verdict));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_named_and_asked_as_the_receiver_takes_them() {
        let names: Vec<String> = Setting::all().iter().map(Setting::name).collect();
        assert_eq!(names, ["nice +19", "nice 0", "nice -20", "SCHED_FIFO 10"]);
        assert_eq!(Setting::Nice(-20).priority(true).args(), ["--priority=-20", "--lock-memory"]);
        assert_eq!(Setting::Fifo(10).priority(false).args(), ["--realtime=10"]);
    }
}
