//! `bench pgm`'s cost part: the highest zero-loss rate of `recv --transport pgm` on a clean link
//! against plain UDP, by the search `bench max` uses ([`crate::bench::search`] over [`Runner`] probes),
//! and the CPU per datagram of both ends at one fixed rate for both transports.

use super::shared::{u, PgmBenchConfig};
use crate::bench::point::{Point, PointConfig, Runner, Stream};
use crate::bench::search::{self, Outcome, SearchConfig, SearchResult, Verdict};
use serde::Serialize;
use wirespeed::units::{self, Rate};
use wirespeed::{Error, Result};

/// A cost-search probe: the point, with what PGM did during it (zeros for UDP).
#[derive(Clone, Debug, Serialize)]
pub struct CostProbe {
    /// The measurement (the verdict is the ledger's: PGM repairs are not loss).
    #[serde(flatten)]
    pub point: Point,
    /// Sequence numbers PGM repaired during the probe.
    pub repaired: u64,
    /// Sequence numbers PGM gave up on.
    pub unrecoverable: u64,
    /// NAKs the receiver sent.
    pub naks_sent: u64,
}

impl Verdict for CostProbe {
    fn achieved_bps(&self) -> f64 {
        self.point.achieved_bps
    }
    fn lossy(&self) -> bool {
        self.point.lossy
    }
}

/// The zero-loss searches of one transport and size.
#[derive(Clone, Debug, Serialize)]
pub struct CostSearch {
    /// "udp" or "pgm".
    pub transport: &'static str,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Every search with every probe.
    pub searches: Vec<SearchResult<CostProbe>>,
    /// Median of the searches' zero-loss rates, payload bits/s.
    pub median_bps: Option<f64>,
    /// The same in datagrams/s.
    pub median_pps: Option<f64>,
    /// How the median search ended.
    pub median_outcome: Option<Outcome>,
}

/// CPU per datagram of both ends at the fixed rate.
#[derive(Clone, Debug, Serialize)]
pub struct CpuRow {
    /// "udp" or "pgm".
    pub transport: &'static str,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Datagrams/s asked.
    pub rate_pps: f64,
    /// Datagrams/s achieved.
    pub achieved_pps: f64,
    /// Sender CPU per datagram, ns (pacing waits included).
    pub send_cpu_ns_per_packet: f64,
    /// Receiver capture-thread CPU per datagram, ns.
    pub recv_cpu_ns_per_packet: f64,
    /// Whether the point lost anything.
    pub lossy: bool,
    /// Sequence numbers PGM repaired during it.
    pub repaired: u64,
    /// The whole point, for what the row leaves out (which layer lost what).
    pub probe: CostProbe,
}

/// The cost part of the document.
#[derive(Clone, Debug, Serialize)]
pub struct CostPart {
    /// One entry per size and transport.
    pub searches: Vec<CostSearch>,
    /// One row per size and transport.
    pub cpu: Vec<CpuRow>,
}

/// The cost part: searches per size and transport, then CPU at the fixed rate. The bool says
/// whether a signal stopped it.
pub(super) fn cost_part(
    runner: &Runner,
    cfg: &PgmBenchConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<(CostPart, bool)> {
    let mut part = CostPart { searches: Vec::new(), cpu: Vec::new() };
    let scfg = SearchConfig { lo: cfg.lo_bps, hi: None, precision: cfg.precision, max_probes: 40 };
    scfg.validate().map_err(Error::invalid)?;
    let pcfg =
        |size: usize, rate: Rate| PointConfig { rate, size, duration: cfg.duration, gso: false, rcvbuf: cfg.rcvbuf };
    runner.warm_up(&pcfg(cfg.sizes[0], Rate::Max))?;
    for &size in &cfg.sizes {
        for transport in ["udp", "pgm"] {
            let mut searches = Vec::new();
            for k in 1..=cfg.repeat {
                let mut failure = None;
                let mut n = 0;
                let r = search::search(&scfg, |asked| {
                    match probe(runner, &pcfg(size, asked.map_or(Rate::Max, Rate::Bits)), transport) {
                        Ok(Some(p)) => {
                            n += 1;
                            progress(&format!(
                                "{transport} {size:>5} B search {k} probe {n:>2}: {}{}",
                                p.point.line(),
                                if transport == "pgm" {
                                    format!(
                                        "  (repaired {}, unrecoverable {})",
                                        units::thousands(p.repaired),
                                        units::thousands(p.unrecoverable)
                                    )
                                } else {
                                    String::new()
                                }
                            ));
                            Some(p)
                        }
                        Ok(None) => None,
                        Err(e) => {
                            failure = Some(e);
                            None
                        }
                    }
                });
                if let Some(e) = failure {
                    return Err(e);
                }
                let stopped = r.outcome == Outcome::Stopped;
                progress(&format!("{transport} {size:>5} B: {}", crate::bench::max::search_line(k, &as_points(&r))));
                searches.push(r);
                if stopped {
                    part.searches.push(summarise(transport, size, searches));
                    return Ok((part, true));
                }
            }
            part.searches.push(summarise(transport, size, searches));
        }
    }
    for &size in &cfg.sizes {
        for transport in ["udp", "pgm"] {
            let Some(p) = probe(runner, &pcfg(size, Rate::Packets(cfg.cpu_rate_pps)), transport)? else {
                return Ok((part, true));
            };
            let row = CpuRow {
                transport,
                size,
                rate_pps: cfg.cpu_rate_pps,
                achieved_pps: p.point.achieved_pps,
                send_cpu_ns_per_packet: p.point.send_cpu_ns_per_packet,
                recv_cpu_ns_per_packet: p.point.recv_cpu_ns_per_packet,
                lossy: p.point.lossy,
                repaired: p.repaired,
                probe: p,
            };
            progress(&cpu_line(&row));
            part.cpu.push(row);
        }
    }
    Ok((part, false))
}

/// The search result with plain points, for `bench max`'s one-line summary of a search.
fn as_points(r: &SearchResult<CostProbe>) -> SearchResult<Point> {
    SearchResult {
        outcome: r.outcome,
        zero_loss_bps: r.zero_loss_bps,
        best_clean_bps: r.best_clean_bps,
        lowest_lossy_bps: r.lowest_lossy_bps,
        bracket_bps: r.bracket_bps,
        probes: r
            .probes
            .iter()
            .map(|s| search::Step {
                asked_bps: s.asked_bps,
                point: s.point.point.clone(),
                bracket_after: s.bracket_after,
            })
            .collect(),
        notes: r.notes.clone(),
    }
}

fn summarise(transport: &'static str, size: usize, searches: Vec<SearchResult<CostProbe>>) -> CostSearch {
    let done: Vec<&SearchResult<CostProbe>> = searches.iter().filter(|s| s.outcome != Outcome::Stopped).collect();
    let median_bps = crate::bench::stats::lower_median(&done.iter().map(|s| s.zero_loss_bps).collect::<Vec<_>>());
    let median_outcome = done.iter().find(|s| s.zero_loss_bps == median_bps).map(|s| s.outcome);
    CostSearch {
        transport,
        size,
        median_pps: median_bps.map(|b| b / (size as f64 * 8.0)),
        median_bps,
        median_outcome,
        searches,
    }
}

/// One probe of the cost part: a [`Runner`] point with `--transport pgm` on both ends for PGM.
fn probe(runner: &Runner, pc: &PointConfig, transport: &str) -> Result<Option<CostProbe>> {
    let mut stream = Stream::default();
    if transport == "pgm" {
        stream.recv_args = vec!["--transport".into(), "pgm".into()];
        stream.send_args = vec!["--transport".into(), "pgm".into()];
    }
    let Some(s) = runner.run_with(pc, stream)? else {
        return Ok(None);
    };
    let p = &s.recv_report["pgm"];
    Ok(Some(CostProbe {
        point: s.point,
        repaired: u(p, "repaired"),
        unrecoverable: u(p, "unrecoverable"),
        naks_sent: u(p, "naks_sent"),
    }))
}

/// A progress line for a CPU point.
pub fn cpu_line(r: &CpuRow) -> String {
    format!(
        "cpu {} {:>5} B at {}: achieved {}, sender {}/datagram, receiver {}/datagram{}",
        r.transport,
        r.size,
        units::pps(r.rate_pps),
        units::pps(r.achieved_pps),
        units::nanos(r.send_cpu_ns_per_packet),
        units::nanos(r.recv_cpu_ns_per_packet),
        if r.lossy { " (LOSS)" } else { "" }
    )
}
