//! Every compared tool's highest zero-loss rate (`wirespeed bench compare --search`): the
//! search of [`crate::bench::search`], the one `bench max` runs for wirespeed alone, run for
//! each tool of the list in turn, per size and per repeat, in the same placement. It is what
//! the retired `recv_max.py` and `record_max.py` measured: a receiver's (or recorder's) own
//! limit beside its peers', steered by the rate the sender achieved.

use super::super::compare::{Figures, Run};
use super::super::point::{PointConfig, Runner};
use super::super::search::{self, Outcome, SearchConfig, SearchResult, Verdict};
use super::tool::{Measured, Tool};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use wirespeed::units::{self, Rate};
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.compare-search/1";

/// A probe's figures as the search reads them.
#[derive(Clone, Debug, Serialize)]
pub struct Probe(pub Figures);

impl Verdict for Probe {
    fn achieved_bps(&self) -> f64 {
        self.0.achieved_bps
    }
    fn lossy(&self) -> bool {
        self.0.lossy
    }
}

/// What to search.
#[derive(Clone, Debug)]
pub struct SearchRun {
    /// Payload sizes, in order.
    pub sizes: Vec<usize>,
    /// Sending time per probe.
    pub duration: Duration,
    /// UDP GSO on `wirespeed send` (the senders of every tool but iperf3).
    pub gso: bool,
    /// The socket buffer every tool gets.
    pub rcvbuf: u64,
    /// Searches per (size, tool); the median is the result.
    pub repeat: u32,
    /// The range and stopping rule.
    pub search: SearchConfig,
    /// The recording directory, when the tools record: dd measures the disk there before and
    /// after the searches.
    pub record: Option<std::path::PathBuf>,
    /// The CPU wirespeed record's writer is pinned to, if any (stated with the results).
    pub writer_cpu: Option<usize>,
    /// With `record`: the most dd writes for the disk's ceiling, each time.
    pub dd_bytes: u64,
}

/// One search of one tool at one size.
#[derive(Clone, Debug, Serialize)]
pub struct ToolSearch {
    /// The tool.
    pub tool: String,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Which repeat, 1-based.
    pub repeat: u32,
    /// The search, every probe included.
    pub result: SearchResult<Probe>,
}

/// One tool's result at one size over the repeats.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ToolMax {
    /// The tool.
    pub tool: String,
    /// Payload bytes per datagram.
    pub size: usize,
    /// The (lower) median of the searches' zero-loss rates, payload bits/s.
    pub zero_loss_bps: Option<f64>,
    /// The same in datagrams/s.
    pub zero_loss_pps: Option<f64>,
    /// Each search's zero-loss rate, bits/s, in order.
    pub searches_bps: Vec<Option<f64>>,
    /// Each search's outcome.
    pub outcomes: Vec<Outcome>,
    /// Whether the median search was sender-bound (the tool's limit is above it).
    pub sender_bound: bool,
    /// Each search's zero-loss payload rate over the dd ceiling, in order (when recording).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub of_dd: Vec<Option<f64>>,
    /// The median of `of_dd`: the lower middle, a search that found nothing counting lowest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_of_dd: Option<f64>,
}

/// The whole search, as `--json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct SearchDoc {
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
    /// The tools, in the order of the first search.
    pub tools: Vec<String>,
    /// Each tool's version.
    pub versions: BTreeMap<String, String>,
    /// What each tool's "received" counts.
    pub counts: BTreeMap<String, String>,
    /// Payload sizes.
    pub sizes: Vec<usize>,
    /// Seconds per probe.
    pub duration_s: f64,
    /// Searches per (size, tool).
    pub repeat: u32,
    /// UDP GSO asked.
    pub gso: bool,
    /// The socket buffer every tool got.
    pub socket_buffer: u64,
    /// The precision each search stops at.
    pub precision: f64,
    /// The bottom of the range, bits/s.
    pub lo_bps: f64,
    /// Per (size, tool): the median.
    pub results: Vec<ToolMax>,
    /// Every search, in the order run.
    pub searches: Vec<ToolSearch>,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
    /// dd's runs into the recording directory, when the tools recorded.
    pub dd: Vec<super::dd::DiskCeiling>,
    /// The disk's ceiling: the mean of dd's runs, bytes/s.
    pub dd_bytes_per_s: Option<f64>,
    /// Where wirespeed record's writer ran, when the tools recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer_placement: Option<String>,
}

/// Run every tool's searches: repeat by repeat, size by size, the tools in rotating order, one
/// unrecorded 1 s warm-up point per tool first; `progress` gets a line per probe and per search.
pub fn run(
    runner: &Runner,
    tools: &[Box<dyn Tool>],
    cfg: &SearchRun,
    progress: &mut dyn FnMut(String),
) -> Result<SearchDoc> {
    let buffer = super::super::compare::socket_buffer(tools, cfg.rcvbuf);
    let pc = |rate, size| PointConfig { rate, size, duration: cfg.duration, gso: cfg.gso, rcvbuf: buffer };
    let mut stopped = false;
    let mut seq = 0u32;
    let mut dd = Vec::new();
    if let Some(dir) = &cfg.record {
        dd.push(super::dd::disk_ceiling(dir, "before", cfg.dd_bytes));
    }
    if let Some(&size) = cfg.sizes.first() {
        let mut w = pc(Rate::Packets(20e3), size);
        w.duration = cfg.duration.min(Duration::from_secs(1));
        for t in tools {
            if t.run(runner, &w, 0)?.is_none() {
                stopped = true;
                break;
            }
        }
    }
    let n = tools.len();
    let mut searches = Vec::new();
    let mut k = 0usize;
    'all: for rep in 1..=cfg.repeat {
        for &size in &cfg.sizes {
            let first = k % n.max(1);
            k += 1;
            for j in 0..n {
                if stopped {
                    break 'all;
                }
                let t = &tools[(first + j) % n];
                let mut failed: Option<Error> = None;
                let result = search::search(&cfg.search, |asked| {
                    let rate = asked.map_or(Rate::Max, Rate::Bits);
                    seq += 1;
                    match t.run(runner, &pc(rate, size), seq) {
                        Ok(Some(m)) => {
                            let f = figures(t.name(), m);
                            progress(probe_line(t.name(), rep, &f));
                            Some(Probe(f))
                        }
                        Ok(None) => None,
                        Err(e) => {
                            failed = Some(e);
                            None
                        }
                    }
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                if result.outcome == Outcome::Stopped {
                    stopped = true;
                }
                progress(search_line(t.name(), size, rep, &result));
                searches.push(ToolSearch { tool: t.name().into(), size, repeat: rep, result });
            }
        }
    }
    let mut results = medians(tools, &cfg.sizes, &searches);
    if let (Some(dir), false) = (&cfg.record, stopped) {
        dd.push(super::dd::disk_ceiling(dir, "after", cfg.dd_bytes));
    }
    let dd: Vec<super::dd::DiskCeiling> = dd.into_iter().filter_map(|c| c.ok()).collect();
    let dd_bytes_per_s = (!dd.is_empty()).then(|| dd.iter().map(|c| c.bytes_per_s).sum::<f64>() / dd.len() as f64);
    if let Some(d) = dd_bytes_per_s {
        for r in &mut results {
            set_of_dd(r, d);
        }
    }
    let pl = runner.placement();
    Ok(SearchDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement: runner.placement() },
        tools: tools.iter().map(|t| t.name().to_string()).collect(),
        versions: tools.iter().map(|t| (t.name().to_string(), t.version())).collect(),
        counts: tools.iter().map(|t| (t.name().to_string(), t.counts())).collect(),
        sizes: cfg.sizes.clone(),
        duration_s: cfg.duration.as_secs_f64(),
        repeat: cfg.repeat,
        gso: cfg.gso,
        socket_buffer: buffer,
        precision: cfg.search.precision,
        lo_bps: cfg.search.lo,
        results,
        searches,
        stopped,
        dd,
        dd_bytes_per_s,
        writer_placement: cfg.record.as_ref().map(|_| super::super::compare::writer_placement(&pl, cfg.writer_cpu)),
    })
}

/// Each search's rate over the disk's ceiling (`bytes_per_s`), and their lower median.
pub fn set_of_dd(r: &mut ToolMax, bytes_per_s: f64) {
    if bytes_per_s <= 0.0 {
        return;
    }
    r.of_dd = r.searches_bps.iter().map(|b| b.map(|b| b / 8.0 / bytes_per_s)).collect();
    r.median_of_dd = crate::bench::stats::lower_median(&r.of_dd);
}

fn figures(tool: &'static str, m: Measured) -> Figures {
    let mut r = Run { seq: 0, pass: 0, tool, rate_index: 0, wirespeed: None, iperf3: None, others: BTreeMap::new() };
    match m {
        Measured::Wirespeed(p) => r.wirespeed = Some(p),
        Measured::Iperf3(p) => r.iperf3 = Some(p),
        Measured::Other(p) => {
            r.others.insert(tool.to_string(), p);
        }
    }
    r.figures()
}

/// Per (size, tool) the lower median of the searches (a search that found nothing counts lowest).
pub fn medians(tools: &[Box<dyn Tool>], sizes: &[usize], searches: &[ToolSearch]) -> Vec<ToolMax> {
    let mut out = Vec::new();
    for &size in sizes {
        for t in tools {
            let mine: Vec<&ToolSearch> = searches.iter().filter(|s| s.size == size && s.tool == t.name()).collect();
            if mine.is_empty() {
                continue;
            }
            let vals: Vec<Option<f64>> = mine.iter().map(|s| s.result.zero_loss_bps).collect();
            let med = search::median(&vals);
            let at = mine.iter().find(|s| s.result.zero_loss_bps == med);
            out.push(ToolMax {
                tool: t.name().into(),
                size,
                zero_loss_bps: med,
                zero_loss_pps: med.map(|b| b / (size as f64 * 8.0)),
                searches_bps: vals,
                outcomes: mine.iter().map(|s| s.result.outcome).collect(),
                sender_bound: at.is_some_and(|s| s.result.outcome == Outcome::SenderBound),
                of_dd: Vec::new(),
                median_of_dd: None,
            });
        }
    }
    out
}

fn probe_line(tool: &str, rep: u32, f: &Figures) -> String {
    format!(
        "  {tool:<11} search {rep} size {:>5}: asked {:>12}  achieved {:>12}  sent {:>11}  received {:>11}  -> {}",
        f.size,
        f.asked_bps.map_or("max".into(), units::bits),
        units::bits(f.achieved_bps),
        units::thousands(f.sent),
        units::thousands(f.received),
        if f.lossy { "LOSS" } else { "zero loss" }
    )
}

fn rate_text(bps: Option<f64>, size: usize, bound: bool) -> String {
    match bps {
        Some(b) => {
            format!("{}{}, {:.0} kpps", if bound { ">= " } else { "" }, units::bits(b), b / (size as f64 * 8.0) / 1e3)
        }
        None => "none (lossy at the bottom)".into(),
    }
}

fn search_line(tool: &str, size: usize, rep: u32, r: &SearchResult<Probe>) -> String {
    format!(
        "{tool} size {size} search {rep}: {} ({:?}, {} probes)",
        rate_text(r.zero_loss_bps, size, r.outcome == Outcome::SenderBound),
        r.outcome,
        r.probes.len()
    )
}

/// The table: per size and tool the median zero-loss rate, every search, and wirespeed's
/// median over each other tool's.
pub fn table(doc: &SearchDoc) -> String {
    let mut s = format!(
        "highest zero-loss rate, median of {} search(es) per row ({} probes, {:.0}% precision); rates are UDP payload\n",
        doc.repeat,
        units::nanos(doc.duration_s * 1e9),
        doc.precision * 100.0
    );
    s.push_str(&format!(
        "{:>6}  {:<12} {:<32} {:<9} {:<6} searches (kpps)\n",
        "size", "tool", "zero-loss rate", "ws/tool", "of dd"
    ));
    for r in &doc.results {
        let ws = doc.results.iter().find(|w| w.size == r.size && w.tool == "wirespeed");
        let ratio = match (ws.and_then(|w| w.zero_loss_bps), r.zero_loss_bps) {
            (Some(w), Some(p)) if r.tool != "wirespeed" && p > 0.0 => {
                let bound = |m: &ToolMax| m.sender_bound;
                let pre = match (ws.is_some_and(bound), r.sender_bound) {
                    (true, false) => ">= ",
                    (false, true) => "<= ",
                    (true, true) => "? ",
                    _ => "",
                };
                format!("{pre}{:.2}", w / p)
            }
            _ => "-".into(),
        };
        let each: Vec<String> = r
            .searches_bps
            .iter()
            .zip(&r.outcomes)
            .map(|(b, o)| {
                let k = b.map_or("-".into(), |b| format!("{:.0}", b / (r.size as f64 * 8.0) / 1e3));
                if *o == Outcome::SenderBound {
                    format!("{k} sender-bound")
                } else {
                    k
                }
            })
            .collect();
        let of_dd = r.median_of_dd.map_or("-".into(), |x| format!("{x:.2}"));
        let each: Vec<String> = if r.of_dd.is_empty() {
            each
        } else {
            // Each search's rate and its share of the dd ceiling: "1021 (0.97)".
            each.into_iter()
                .zip(&r.of_dd)
                .map(|(k, x)| format!("{k} ({})", x.map_or("-".into(), |x| format!("{x:.2}"))))
                .collect()
        };
        s.push_str(&format!(
            "{:>6}  {:<12} {:<32} {:<9} {:<6} {}\n",
            r.size,
            r.tool,
            rate_text(r.zero_loss_bps, r.size, r.sender_bound),
            ratio,
            of_dd,
            each.join(", ")
        ));
    }
    if doc.stopped {
        s.push_str("(stopped early: the medians cover the searches done)\n");
    }
    s.push_str(
        "=> '>= X': the median search lost nothing even with the sender flat out, so the tool's limit is above X\n",
    );
    if let Some(d) = doc.dd_bytes_per_s {
        s.push_str(&format!(
            "=> disk ceiling: dd wrote at {}/s into the recording directory (mean of {} run(s), before and after); 'of dd' is the zero-loss payload rate over it\n",
            units::bytes(d as u64),
            doc.dd.len()
        ));
        s.push_str("=> searches (kpps): each search's zero-loss rate, with its share of the dd ceiling in brackets; 'of dd' is the lower median of those shares\n");
    }
    if let Some(w) = &doc.writer_placement {
        s.push_str(&format!("=> {w}\n"));
    }
    for c in doc.counts.values() {
        s.push_str(&format!("=> {c}\n"));
    }
    s
}
