//! `bench pgm`'s latency part: seed 003's measurement replayed. Round-trip time at fixed probe
//! rates between the two partitions, for three pairs on the same link in the same run:
//! wirespeed `ping`/`reflect` over plain UDP, the same over `--transport pgm`, and the OpenPGM
//! test peer's own `ping`/`reflect` (libpgm on both ends). Every pair gets a heat map per rate
//! (the same renderer, so the pictures compare) and a row of percentiles.

pub use super::latency_config::LatencyConfig;
use crate::bench::point::Runner;
use crate::latency::grid::{self, Grid};
use crate::latency::report;
use crate::plot;
use crate::testbed::place::Side;
use crate::testbed::proc::{Proc, Wait};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use wirespeed::units;
use wirespeed::{Error, Result};

/// The UDP port wirespeed's PGM reflector listens on (its pinger takes the replies at + 1).
const WS_PGM_PORT: u16 = 7640;
/// The OpenPGM pair's probe session port (replies at + 1) and its group.
const OPENPGM_PORT: u16 = 7650;
const OPENPGM_GROUP: &str = "239.192.1.1";

/// Round-trip percentiles, microseconds.
#[derive(Clone, Debug, Serialize)]
pub struct RttUs {
    /// Fastest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Slowest.
    pub max: f64,
}

/// One pair at one rate.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyRow {
    /// "wirespeed udp", "wirespeed pgm" or "openpgm".
    pub pair: &'static str,
    /// Probes per second asked.
    pub pps: u64,
    /// Probes sent.
    pub sent: u64,
    /// Replies received.
    pub replies: u64,
    /// Probes without a reply.
    pub lost: u64,
    /// OpenPGM's unrecoverable-loss resets at the pinger (its own count; wirespeed's pairs
    /// count such loss in `lost`).
    pub resets: Option<u64>,
    /// Round trips.
    pub rtt_us: RttUs,
    /// The heat map (PNG; an SVG beside it), when a directory was given.
    pub heatmap: Option<String>,
    /// The client's command line.
    pub command: String,
}

/// The latency part of the document.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyPart {
    /// Probe size, bytes.
    pub size: usize,
    /// Seconds per rate.
    pub duration_s: f64,
    /// One row per pair and rate.
    pub rows: Vec<LatencyRow>,
}

#[derive(Deserialize)]
struct SweepDoc {
    runs: Vec<RunDoc>,
}

#[derive(Deserialize)]
struct RunDoc {
    sent: u64,
    replies: Replies,
    rtt: Pct,
    schedule: Sched,
}

#[derive(Deserialize)]
struct Replies {
    received: u64,
    lost: u64,
}

#[derive(Deserialize)]
struct Sched {
    pps_asked: f64,
}

#[derive(Deserialize)]
struct Pct {
    min: u64,
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
}

fn exe() -> Result<String> {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .map_err(|e| Error::failed(format!("cannot find this program's path: {e}")))
}

/// Run the part; `Ok(None)` when stopped by a signal.
pub fn run(runner: &Runner, cfg: &LatencyConfig, progress: &mut dyn FnMut(&str)) -> Result<Option<LatencyPart>> {
    let mut rows = Vec::new();
    for pgm in [false, true] {
        let Some(mut r) = wirespeed_pair(runner, cfg, pgm)? else { return Ok(None) };
        for row in &r {
            progress(&line(row));
        }
        rows.append(&mut r);
    }
    if let Some(peer) = &cfg.openpgm {
        for &pps in &cfg.pps {
            let Some(row) = openpgm_rate(runner, cfg, peer, pps)? else { return Ok(None) };
            progress(&line(&row));
            rows.push(row);
        }
    }
    Ok(Some(LatencyPart { size: cfg.size, duration_s: cfg.duration.as_secs_f64(), rows }))
}

/// The progress line of a row.
pub fn line(r: &LatencyRow) -> String {
    format!(
        "latency {:<13} {:>6} pps: {:>7} of {:>7} replies, p50 {:>9} p90 {:>9} p99 {:>9} p99.9 {:>9} max {:>9}",
        r.pair,
        r.pps,
        units::thousands(r.replies),
        units::thousands(r.sent),
        us(r.rtt_us.p50),
        us(r.rtt_us.p90),
        us(r.rtt_us.p99),
        us(r.rtt_us.p999),
        us(r.rtt_us.max)
    )
}

fn us(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} ms", v / 1000.0)
    } else {
        format!("{v:.1} us")
    }
}

/// wirespeed's reflector in the receiver's partition, its pinger in the sender's, every rate
/// in one `ping` run (heat maps by `ping -o`).
fn wirespeed_pair(runner: &Runner, cfg: &LatencyConfig, pgm: bool) -> Result<Option<Vec<LatencyRow>>> {
    let exe = exe()?;
    let pair = if pgm { "wirespeed pgm" } else { "wirespeed udp" };
    let port = if pgm { WS_PGM_PORT } else { 0 };
    let mut rargs = vec!["reflect".to_string(), format!("{}:{port}", runner.receiver_ip())];
    if pgm {
        rargs.extend(["--transport".into(), "pgm".into()]);
    }
    let server = crate::bench::latency::start_server(
        runner.place().tool_command(Side::Recv, &exe, &rargs),
        "the reflector",
        crate::bench::latency::ReadyOn::Stderr,
        "listening on ",
    )?;
    let target = server.ready_line.split("listening on ").nth(1).and_then(|r| r.split_whitespace().next());
    let Some(target) = target.map(str::to_string) else {
        return Err(Error::io(format!("the reflector said '{}', not where it listens", server.ready_line)));
    };
    let rates = cfg.pps.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",");
    let mut cargs = vec![
        "ping".to_string(),
        target,
        "--pps".into(),
        rates,
        "--size".into(),
        cfg.size.to_string(),
        "--duration".into(),
        format!("{}ns", cfg.duration.as_nanos()),
        "--json".into(),
    ];
    let sub = cfg.dir.as_ref().map(|d| d.join(pair.replace(' ', "-")));
    // On a far host ping writes there, and its files are brought back into `sub`.
    let files = sub.as_ref().map(|d| runner.place().far_dir(Side::Send, d)).transpose()?;
    match &files {
        Some(d) => cargs.extend(["-o".into(), d.path().display().to_string()]),
        None => cargs.push("--no-files".into()),
    }
    if pgm {
        cargs.extend(["--transport".into(), "pgm".into()]);
    }
    let command = format!("wirespeed {}", cargs.join(" "));
    let limit = cfg.duration * cfg.pps.len() as u32 + Duration::from_secs(10 * cfg.pps.len() as u64);
    let ended = crate::bench::latency::run_client(
        runner.place().tool_command(Side::Send, &exe, &cargs),
        "wirespeed ping",
        limit,
        runner.stop_flag(),
    );
    let stopped = crate::bench::latency::stop_server(server, Duration::ZERO);
    let Some((e, _)) = crate::bench::latency::client_and_server(ended, stopped, "wirespeed ping", "wirespeed reflect")?
    else {
        return Ok(None);
    };
    if let Some(f) = files {
        f.fetch()?;
    }
    let doc: SweepDoc = crate::bench::point::parse_doc(&e.out, "wirespeed.latency/1", "ping")?;
    let rows = doc
        .runs
        .into_iter()
        .map(|r| {
            let pps = r.schedule.pps_asked.round() as u64;
            let us = |ns: u64| ns as f64 / 1e3;
            let t = &r.rtt;
            LatencyRow {
                pair,
                pps,
                sent: r.sent,
                replies: r.replies.received,
                lost: r.replies.lost,
                resets: None,
                rtt_us: RttUs {
                    min: us(t.min),
                    p50: us(t.p50),
                    p90: us(t.p90),
                    p99: us(t.p99),
                    p999: us(t.p999),
                    max: us(t.max),
                },
                heatmap: sub.as_ref().and_then(|d| find_heatmap(d, pps)),
                command: command.clone(),
            }
        })
        .collect();
    Ok(Some(rows))
}

/// The PNG `ping -o` wrote for a rate (its name holds the rate).
fn find_heatmap(dir: &Path, pps: u64) -> Option<String> {
    let want = pps.to_string();
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.starts_with("heatmap-") && n.ends_with(".png") && n.contains(&want)
        })
        .collect();
    found.sort();
    found.into_iter().next().map(|p| p.display().to_string())
}

/// The OpenPGM pair at one rate: the peer's `reflect` in the receiver's partition, its `ping`
/// in the sender's, on a group routed onto the link; the heat map drawn from its RTT file.
fn openpgm_rate(runner: &Runner, cfg: &LatencyConfig, peer: &Path, pps: u64) -> Result<Option<LatencyRow>> {
    let stop = runner.stop_flag();
    let place = runner.place();
    let exe = peer.display().to_string();
    let (p, q) = (OPENPGM_PORT.to_string(), (OPENPGM_PORT + 1).to_string());
    let rnet = super::openpgm::openpgm_network(Side::Recv, OPENPGM_GROUP);
    let rargs = ["reflect", "--network", &rnet, "--port", &p, "--reply-port", &q, "--linger-ms", "500"];
    let reflector = Proc::spawn(place.tool_command(Side::Recv, &exe, &rargs), "the OpenPGM reflector")?;
    if !super::openpgm::wait_joined(stop) {
        return Ok(None);
    }
    let work = match &cfg.dir {
        Some(d) => d.join("openpgm"),
        None => std::env::temp_dir().join(format!("wirespeed-bench-pgm-rtt-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work).map_err(|e| Error::io(format!("cannot create {}: {e}", work.display())))?;
    let rtt_file = work.join(format!("rtt-{pps}.txt"));
    let snet = super::openpgm::openpgm_network(Side::Send, OPENPGM_GROUP);
    let count = (pps as f64 * cfg.duration.as_secs_f64()).round().max(1.0) as u64;
    let (rate, n, size, out) =
        (pps.to_string(), count.to_string(), cfg.size.to_string(), rtt_file.display().to_string());
    let cargs = [
        "ping",
        "--network",
        &snet,
        "--port",
        &p,
        "--reply-port",
        &q,
        "--rate",
        &rate,
        "--count",
        &n,
        "--size",
        &size,
        "--wait-ms",
        "2000",
        "--rtt-out",
        &out,
    ];
    let command = format!("openpgm-peer {}", cargs.join(" "));
    let limit = cfg.duration + Duration::from_secs(30);
    let ping = Proc::spawn(place.tool_command(Side::Send, &exe, &cargs), "the OpenPGM pinger")?;
    let others = [&reflector];
    let ended = ping.wait(Wait::new().stop(stop).also_stop(&others).limit(limit).kill_at_limit());
    let _ = reflector.finish(Duration::ZERO);
    let ended = ended?;
    if stop.load(Ordering::Relaxed) || ended.stopped {
        return Ok(None);
    }
    if ended.timed_out {
        return Err(Error::failed(format!("the OpenPGM pinger did not finish within {} s: killed", limit.as_secs())));
    }
    let v: serde_json::Value =
        ended.stdout.lines().last().and_then(|l| serde_json::from_str(l).ok()).ok_or_else(|| {
            Error::failed(format!(
                "the OpenPGM pinger printed no report: {}",
                ended.stderr.lines().last().unwrap_or("it said nothing").trim()
            ))
        })?;
    let g = |k: &str| v[k].as_u64().unwrap_or(0);
    let r = &v["rtt_ns"];
    let ns = |k: &str| r[k].as_i64().unwrap_or(-1).max(0) as f64 / 1e3;
    let rtt_us =
        RttUs { min: ns("min"), p50: ns("p50"), p90: ns("p90"), p99: ns("p99"), p999: ns("p99.9"), max: ns("max") };
    let heatmap = match &cfg.dir {
        Some(_) => Some(draw_openpgm(&rtt_file, &work, pps, cfg, g("sent"), g("lost"), &rtt_us)?),
        None => {
            let _ = std::fs::remove_dir_all(&work);
            None
        }
    };
    Ok(Some(LatencyRow {
        pair: "openpgm",
        pps,
        sent: g("sent"),
        replies: g("received"),
        lost: g("lost"),
        resets: Some(g("resets")),
        rtt_us,
        heatmap,
        command,
    }))
}

/// The OpenPGM pinger's RTT file ("send time since start, round trip" in ns per reply) as a
/// heat map drawn like `ping`'s.
fn draw_openpgm(
    rtt_file: &Path,
    dir: &Path,
    pps: u64,
    cfg: &LatencyConfig,
    sent: u64,
    lost: u64,
    rtt: &RttUs,
) -> Result<String> {
    let text = std::fs::read_to_string(rtt_file)
        .map_err(|e| Error::io(format!("cannot read the OpenPGM pinger's {}: {e}", rtt_file.display())))?;
    let mut grid = Grid::new(grid::column_for(cfg.duration.as_nanos() as u64));
    for l in text.lines() {
        let mut f = l.split_whitespace().map(|x| x.parse::<u64>());
        if let (Some(Ok(t)), Some(Ok(r))) = (f.next(), f.next()) {
            grid.add(t, r);
        }
    }
    let title = format!(
        "Round-trip time at {} pps, {}-byte probes, OpenPGM 5.3 ping/reflect, partition 1 -> 2",
        units::thousands(pps),
        cfg.size
    );
    let subtitle = format!(
        "p50 {}  p99 {}  p99.9 {}  max {}  lost {} of {}  (open loop; the OpenPGM test peer's own clock)",
        us(rtt.p50),
        us(rtt.p99),
        us(rtt.p999),
        us(rtt.max),
        units::thousands(lost),
        units::thousands(sent)
    );
    let h = report::grid_heatmap(&grid, title, subtitle, Vec::new(), Vec::new());
    let (png, _svg) = plot::heatmap_files(&h, &dir.join(format!("heatmap-{pps}pps")))?;
    Ok(png.display().to_string())
}
