//! `bench pgm`'s OpenPGM rows: the repair points run with an OpenPGM pair (the test peer in
//! `tests/pgm-peer/`) when one is given, so wirespeed's repairs stand beside the reference
//! implementation's on the same link and loss.

use super::shared::*;
use crate::testbed::place::{Place, Side};
use crate::testbed::proc::{Proc, Wait};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wirespeed::units;
use wirespeed::{Error, Result};

/// One repair point of the OpenPGM pair (OpenPGM's source into OpenPGM's receiver).
#[derive(Clone, Debug, Serialize)]
pub struct OpenPgmRow {
    /// Payload bytes per message.
    pub size: usize,
    /// ODATA share nft was told to drop, %.
    pub loss_percent: f64,
    /// ODATA packets the nft rule dropped.
    pub dropped: u64,
    /// Messages the source handed to OpenPGM.
    pub sent: u64,
    /// Messages the receiver got.
    pub delivered: u64,
    /// Whether they came in order from 0, intact.
    pub in_order: bool,
    /// PGM_IO_STATUS_RESET events (OpenPGM reporting unrecoverable loss).
    pub resets: u64,
    /// NAK packets the receiver sent, on the wire (`null` without wire counts).
    pub naks_sent: Option<u64>,
    /// RDATA packets the source sent, on the wire.
    pub rdata_sent: Option<u64>,
    /// RDATA packets seen at the receiver's device (before nft).
    pub rdata_seen: Option<u64>,
    /// NCFs the source sent, on the wire.
    pub ncf_sent: Option<u64>,
    /// rdata_sent / (sent + rdata_sent), % (equal sizes: the byte share within headers).
    pub overhead_percent: Option<f64>,
    /// Whether the receiver timed out before all messages came.
    pub timed_out: bool,
    /// Messages/s the source achieved.
    pub achieved_pps: f64,
}

/// The OpenPGM pair's part of the document.
#[derive(Clone, Debug, Serialize)]
pub struct OpenPgmPart {
    /// The peer binary used.
    pub binary: String,
    /// One row per point.
    pub rows: Vec<OpenPgmRow>,
}

/// Route the OpenPGM pair's groups onto the link in both partitions (their namespaces go with
/// the partitions, so nothing is left behind).
pub(super) fn route_groups(place: &Place) -> Result<()> {
    for (side, peer) in [(Side::Send, 2), (Side::Recv, 1)] {
        let dev = crate::testbed::link_name(peer);
        let out = place
            .tool_command(side, "ip", &["route", "replace", OPENPGM_GROUPS, "dev", &dev])
            .output()
            .map_err(|e| Error::failed(format!("cannot run ip: {e}")))?;
        if !out.status.success() {
            return Err(Error::failed(format!(
                "cannot route {OPENPGM_GROUPS} onto {dev} in partition {}: {}",
                side.partition(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    Ok(())
}

/// The OpenPGM peer's `--network` for one end: its address on the link, not the partition's
/// stable address (that one is on its loopback): OpenPGM picks the interface holding it, and
/// the group is routed there.
pub(super) fn openpgm_network(side: Side, group: &str) -> String {
    let link = crate::testbed::Link::between(Side::Send.partition(), Side::Recv.partition());
    format!("{};{group}", link.addr_of(side.partition()))
}

/// Give an OpenPGM peer time to join its group: it prints nothing when ready, so wait as the
/// peer's own self-test does, a little longer. False when stopped by a signal meanwhile.
pub(super) fn wait_joined(stop: &AtomicBool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(1000) {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// One repair point of the OpenPGM pair. `Ok(None)` when stopped by a signal.
#[allow(clippy::too_many_arguments)]
pub(super) fn openpgm_point(
    place: &Place,
    stop: &'static AtomicBool,
    peer: &Path,
    cfg: &PgmBenchConfig,
    size: usize,
    permille: u32,
    port: u16,
    group: &str,
) -> Result<Option<OpenPgmRow>> {
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let exe = peer.display().to_string();
    let limit = point_limit(cfg);
    let (p, n) = (port.to_string(), cfg.count.to_string());
    let rule = LossRule::install(place, port, permille)?;
    // Each end's address on the link, not the partition's stable address (that one is on its
    // loopback): OpenPGM picks the interface holding it, and the group is routed there.
    let rnet = openpgm_network(Side::Recv, group);
    let timeout = format!("{}", (limit - Duration::from_secs(60)).as_millis());
    let rargs = ["recv", "--network", &rnet, "--port", &p, "--count", &n, "--timeout-ms", &timeout, "--wire-stats"];
    let recv = Proc::spawn(place.tool_command(Side::Recv, &exe, &rargs), "the OpenPGM receiver")?;
    // The receiver must have joined the group before the source's first SPM and ODATA (an
    // OpenPGM receiver starts its window at the first packet it sees).
    if !wait_joined(stop) {
        return Ok(None);
    }
    let snet = openpgm_network(Side::Send, group);
    let rate = format!("{}", cfg.rate_pps);
    let size_s = size.to_string();
    let sargs = [
        "send",
        "--network",
        &snet,
        "--port",
        &p,
        "--count",
        &n,
        "--size",
        &size_s,
        "--rate",
        &rate,
        "--linger-ms",
        "3000",
        "--wire-stats",
    ];
    let send = Proc::spawn(place.tool_command(Side::Send, &exe, &sargs), "the OpenPGM source")?;
    let others = [&recv];
    let sent = send.wait(Wait::new().stop(stop).also_stop(&others).limit(limit).kill_at_limit())?;
    let got = recv.wait(Wait::new().stop(stop).limit(limit).kill_after(Duration::from_secs(5)))?;
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let dropped = rule.dropped()?;
    drop(rule);
    let s = parse_json(&sent.stdout, "the OpenPGM source")
        .map_err(|e| Error::failed(format!("{e}; it said: {}", why(&sent.stderr, &sent.status))))?;
    // The receiver exits 1 when not all arrived; its report says what did.
    let r = parse_json(&got.stdout, "the OpenPGM receiver")
        .map_err(|e| Error::failed(format!("{e}; it said: {}", why(&got.stderr, &got.status))))?;
    let sent_n = u(&s, "sent");
    let rdata_sent = ou(&s, "rdata_sent");
    Ok(Some(OpenPgmRow {
        size,
        loss_percent: permille as f64 / 10.0,
        dropped,
        sent: sent_n,
        delivered: u(&r, "received"),
        in_order: r["in_order"].as_bool().unwrap_or(false),
        resets: u(&r, "resets"),
        naks_sent: ou(&r, "naks_sent"),
        rdata_sent,
        rdata_seen: ou(&r, "rdata_received"),
        ncf_sent: ou(&s, "ncf_sent"),
        overhead_percent: rdata_sent
            .map(|rd| if sent_n + rd > 0 { 100.0 * rd as f64 / (sent_n + rd) as f64 } else { 0.0 }),
        timed_out: r["timed_out"].as_bool().unwrap_or(false),
        achieved_pps: s["pps"].as_f64().unwrap_or(0.0),
    }))
}

pub(super) fn opt(v: Option<u64>) -> String {
    v.map_or("-".into(), units::thousands)
}

/// A progress line for an OpenPGM point.
pub fn openpgm_line(r: &OpenPgmRow) -> String {
    format!(
        "OpenPGM   {:>5} B, loss {:>4} %: nft dropped {:>5}, delivered {:>7} of {:>7}{}, resets {}, NAKs {}, RDATA sent {} seen {}, overhead {}",
        r.size,
        r.loss_percent,
        units::thousands(r.dropped),
        units::thousands(r.delivered),
        units::thousands(r.sent),
        if r.in_order { " in order" } else { " NOT in order" },
        r.resets,
        opt(r.naks_sent),
        opt(r.rdata_sent),
        opt(r.rdata_seen),
        r.overhead_percent.map_or("-".into(), |o| format!("{o:.2} %"))
    )
}

/// Find or build the OpenPGM test peer: `explicit` when given (it must be executable), else
/// `tests/pgm-peer/build.sh` of the source tree this binary was built in or the current
/// directory is in, built into `dir`. `Err` says in one phrase why there is none.
pub fn openpgm_peer(explicit: Option<&Path>, dir: &Path) -> std::result::Result<PathBuf, String> {
    if let Some(p) = explicit {
        return if p.is_file() { Ok(p.to_path_buf()) } else { Err(format!("{} is not a file", p.display())) };
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        roots.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    if let Ok(exe) = std::env::current_exe() {
        roots.extend(exe.ancestors().map(Path::to_path_buf));
    }
    let Some(script) = roots.iter().map(|r| r.join("tests/pgm-peer/build.sh")).find(|p| p.is_file()) else {
        return Err("tests/pgm-peer/build.sh not found: run from the source tree or give --openpgm-peer PATH".into());
    };
    let out = dir.join("openpgm-peer");
    let o = std::process::Command::new("bash")
        .arg(&script)
        .arg(&out)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !o.status.success() || !out.is_file() {
        let err = String::from_utf8_lossy(&o.stderr);
        return Err(format!(
            "the OpenPGM peer did not build: {}",
            err.lines().last().unwrap_or("build.sh failed without a message").trim()
        ));
    }
    Ok(out)
}
