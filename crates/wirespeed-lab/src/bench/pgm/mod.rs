//! `bench pgm` (issue 19): what `--transport pgm` buys and what it costs, measured between two
//! partitions joined by a veth link.
//!
//! Part *repair*: for each datagram size and loss rate, nftables in the receiver's partition
//! drops that share of the ODATA packets at random (RDATA passes, so every drop can be
//! repaired), a fixed number of datagrams is sent at a fixed rate from `send --transport pgm`
//! into `recv --transport pgm --once`, and the two reports and the rule's own counter are set
//! side by side: what nft dropped, what arrived, what the ledger lost, what PGM repaired and at
//! what price (NAKs, RDATA, repair bytes, the repaired packets' added latency). The same points
//! are run with an OpenPGM pair (the test peer in `tests/pgm-peer/`) when it is given.
//!
//! Part *cost* ([`cost`]): the highest zero-loss rate of `recv --transport pgm` on a
//! clean link against plain UDP, and the CPU per datagram of both ends at one fixed rate.

pub mod cost;
pub mod latency;
mod latency_config;
pub mod openpgm;
pub mod shared;

use super::point::{Placement, Runner};
use super::search::Outcome;
use crate::testbed::place::{Place, Side};
use crate::testbed::proc::{Proc, Wait};
use cost::cost_part;
pub use cost::{cpu_line, CostPart, CostProbe, CostSearch, CpuRow};
pub use latency_config::LatencyConfig;
pub use openpgm::{openpgm_line, openpgm_peer, OpenPgmPart, OpenPgmRow};
use openpgm::{openpgm_point, opt, route_groups};
use serde::Serialize;
pub use shared::*;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wirespeed::units;
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.pgm/1";

/// Everything a `bench pgm` run found, as `--json` prints it and pgm.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct PgmDoc {
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
    /// Which parts ran.
    pub part: Part,
    /// Payload sizes, bytes.
    pub sizes: Vec<usize>,
    /// Loss rates of the repair part, %.
    pub loss_percent: Vec<f64>,
    /// Datagrams per repair point.
    pub count: u64,
    /// Sending rate of the repair points, datagrams/s.
    pub rate_pps: f64,
    /// Sending time of each cost probe, seconds.
    pub duration_s: f64,
    /// Search precision.
    pub precision: f64,
    /// Searches per size and transport.
    pub repeat: u32,
    /// Fixed rate of the CPU comparison, datagrams/s.
    pub cpu_rate_pps: f64,
    /// The repair points' `send --pgm-repair-rate`, as given; null: the sender's default
    /// (unpaced).
    pub repair_rate: Option<String>,
    /// wirespeed's repair points (empty when the part did not run).
    pub repair: Vec<RepairRow>,
    /// The OpenPGM pair's points, when it ran.
    pub openpgm: Option<OpenPgmPart>,
    /// Why the OpenPGM pair did not run, when it did not.
    pub openpgm_skipped: Option<String>,
    /// The cost part, when it ran.
    pub cost: Option<CostPart>,
    /// The latency part, when it ran.
    pub latency: Option<latency::LatencyPart>,
    /// Things a reader should know.
    pub notes: Vec<String>,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
}

/// The heading line of a run.
pub fn header(cfg: &PgmBenchConfig, placement: &Placement) -> String {
    let mut parts = Vec::new();
    if cfg.part.repair() {
        parts.push(format!(
            "repair: {} datagrams per point at {}, ODATA loss {} %",
            units::thousands(cfg.count),
            units::pps(cfg.rate_pps),
            cfg.loss_permille.iter().map(|l| fmt_pct(*l)).collect::<Vec<_>>().join(", ")
        ));
        if let Some(r) = &cfg.repair_rate {
            parts.push(format!("repairs paced to --pgm-repair-rate {r}"));
        }
    }
    if cfg.part.cost() {
        parts.push(format!(
            "cost: zero-loss search PGM vs UDP ({} probes, precision {}%, {} search(es)), CPU at {}",
            units::nanos(cfg.duration.as_nanos() as f64),
            cfg.precision * 100.0,
            cfg.repeat,
            units::pps(cfg.cpu_rate_pps)
        ));
    }
    if cfg.part.latency() {
        let l = &cfg.latency;
        parts.push(format!(
            "latency: {} probes/s, {} B probes, {} each, wirespeed over UDP and PGM{}",
            l.pps.iter().map(|p| units::thousands(*p)).collect::<Vec<_>>().join(", "),
            l.size,
            units::nanos(l.duration.as_nanos() as f64),
            if l.openpgm.is_some() { " and the OpenPGM pair" } else { "" }
        ));
    }
    let sizes = if cfg.part == Part::Latency {
        String::new()
    } else {
        format!("sizes {} B; ", cfg.sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))
    };
    format!("wirespeed bench pgm: {sizes}{}; {}", parts.join("; "), placement.description)
}

/// Run the parts `cfg` asks for on `runner`'s partitions; `progress` gets one line per point.
pub fn run(runner: &Runner, cfg: &PgmBenchConfig, progress: &mut dyn FnMut(&str)) -> Result<PgmDoc> {
    let place = runner.place();
    if !place.is_partitions() && !place.is_hosts() {
        return Err(Error::invalid(
            "bench pgm runs in two partitions or on two hosts (the loss rule and the PGM ports need namespaces of their own): run it as root without --loopback, or give --tx and --rx",
        ));
    }
    let stop = runner.stop_flag();
    let mut doc = PgmDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement: runner.placement() },
        part: cfg.part,
        sizes: cfg.sizes.clone(),
        loss_percent: cfg.loss_permille.iter().map(|l| *l as f64 / 10.0).collect(),
        count: cfg.count,
        rate_pps: cfg.rate_pps,
        duration_s: cfg.duration.as_secs_f64(),
        precision: cfg.precision,
        repeat: cfg.repeat,
        cpu_rate_pps: cfg.cpu_rate_pps,
        repair_rate: cfg.repair_rate.clone(),
        repair: Vec::new(),
        openpgm: None,
        openpgm_skipped: if cfg.part.repair() { cfg.openpgm_skipped.clone() } else { None },
        cost: None,
        latency: None,
        notes: Vec::new(),
        stopped: false,
    };
    if cfg.part.repair() {
        for &size in &cfg.sizes {
            for &l in &cfg.loss_permille {
                let Some(row) = repair_point(place, stop, cfg, size, l)? else {
                    doc.stopped = true;
                    return Ok(doc);
                };
                progress(&repair_line(&row));
                doc.repair.push(row);
            }
        }
        if let Some(peer) = &cfg.openpgm {
            route_groups(place)?;
            let mut rows = Vec::new();
            let mut k = 0u16;
            for &size in &cfg.sizes {
                for &l in &cfg.loss_permille {
                    let port = OPENPGM_PORT + 2 * k;
                    let group = format!("239.192.0.{}", 1 + k % 250);
                    k += 1;
                    match openpgm_point(place, stop, peer, cfg, size, l, port, &group)? {
                        Some(row) => {
                            progress(&openpgm_line(&row));
                            rows.push(row);
                        }
                        None => {
                            doc.openpgm = Some(OpenPgmPart { binary: peer.display().to_string(), rows });
                            doc.stopped = true;
                            return Ok(doc);
                        }
                    }
                }
            }
            doc.openpgm = Some(OpenPgmPart { binary: peer.display().to_string(), rows });
        }
    }
    if cfg.part.cost() {
        let (cost, stopped) = cost_part(runner, cfg, progress)?;
        if let Some(n) = super::point::rcvbuf_note(
            cfg.rcvbuf,
            cost.searches.iter().flat_map(|s| s.searches.iter().flat_map(|r| r.probes.iter().map(|p| &p.point.point))),
        ) {
            doc.notes.push(n);
        }
        doc.cost = Some(cost);
        doc.stopped = stopped;
    }
    if cfg.part.latency() && !doc.stopped {
        if cfg.openpgm.is_some() && !cfg.part.repair() {
            route_groups(place)?;
        }
        match latency::run(runner, &cfg.latency, progress)? {
            Some(l) => doc.latency = Some(l),
            None => doc.stopped = true,
        }
    }
    if doc.repair.iter().any(|r| r.unrecoverable > 0 || r.lost > 0) {
        doc.notes.push(
            "a point lost data for good (unrecoverable or in the ledger's lost): see its row; PGM gives up after --nak-retries or when the source's window has moved on"
                .into(),
        );
    }
    Ok(doc)
}

/// One repair point of wirespeed's pair. `Ok(None)` when stopped by a signal.
pub(super) fn repair_point(
    place: &Place,
    stop: &'static AtomicBool,
    cfg: &PgmBenchConfig,
    size: usize,
    permille: u32,
) -> Result<Option<RepairRow>> {
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let limit = point_limit(cfg);
    let listen = SocketAddr::new(place.ip(Side::Recv), 0).to_string();
    let rargs: Vec<String> = vec![
        "recv".into(),
        listen,
        "--transport".into(),
        "pgm".into(),
        "--once".into(),
        "--json".into(),
        "--size".into(),
        size.to_string(),
        "--duration".into(),
        format!("{}ms", limit.as_millis()),
    ];
    let mut recv = Proc::spawn_listener(place.command(Side::Recv, &rargs), "the PGM receiver")?;
    let addr: SocketAddr = match recv.listening(None) {
        Ok(a) => a.parse().map_err(|_| Error::failed(format!("the receiver said it listens on '{a}'")))?,
        Err(said) => {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let w = said.lines().last().unwrap_or("it exited without a word").trim().to_string();
            return Err(Error::failed(format!("the PGM receiver did not start: {w}")));
        }
    };
    let rule = LossRule::install(place, addr.port(), permille)?;
    let mut sargs: Vec<String> = vec![
        "send".into(),
        addr.to_string(),
        "--transport".into(),
        "pgm".into(),
        "--size".into(),
        size.to_string(),
        "--count".into(),
        cfg.count.to_string(),
        "--rate".into(),
        format!("{}pps", cfg.rate_pps),
        "--json".into(),
        // Stay for NAKs until none has come for 2 s: a receiver behind on its repairs still asks.
        "--pgm-quiet".into(),
        "2s".into(),
        "--pgm-linger".into(),
        "60s".into(),
    ];
    if let Some(r) = &cfg.repair_rate {
        sargs.extend(["--pgm-repair-rate".into(), r.clone()]);
    }
    let send = Proc::spawn(place.command(Side::Send, &sargs), "the PGM sender")?;
    let others = [&recv];
    let sent = send.wait(Wait::new().stop(stop).also_stop(&others).limit(limit).kill_at_limit())?;
    if sent.timed_out {
        return Err(Error::failed(format!("the PGM sender did not finish within {} s: killed", limit.as_secs())));
    }
    // The receiver ends on the end-of-stream message (repaired too, when it was dropped).
    let got = recv.wait(Wait::new().stop(stop).limit(Duration::from_secs(60)).kill_after(Duration::from_secs(10)))?;
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let dropped = rule.dropped()?;
    drop(rule);
    if !sent.status.success() {
        return Err(Error::failed(format!("the PGM sender failed: {}", why(&sent.stderr, &sent.status))));
    }
    if !got.status.success() {
        return Err(Error::failed(format!("the PGM receiver failed: {}", why(&got.stderr, &got.status))));
    }
    let s = parse_json(&sent.stdout, "the PGM sender")?;
    let r = parse_json(&got.stdout, "the PGM receiver")?;
    let (sp, rp) = (&s["pgm"]["stats"], &r["pgm"]);
    let (odata_bytes, rdata_bytes) = (u(sp, "odata_bytes"), u(sp, "rdata_bytes"));
    let (delivered, lost, unrecoverable, repaired) =
        (u(&r["total"], "received"), u(&r["total"], "lost"), u(rp, "unrecoverable"), u(rp, "repaired"));
    let sent_n = u(&s, "sent");
    let k = &r["kernel"];
    let kernel_socket_drops = ou(k, "socket_drops_rxq_ovfl").or(ou(k, "socket_drops_proc"));
    Ok(Some(RepairRow {
        size,
        loss_percent: permille as f64 / 10.0,
        dropped,
        sent: sent_n,
        delivered,
        lost,
        unrecoverable,
        pending_at_end: u(rp, "pending_at_end"),
        repaired,
        odata_sent: u(sp, "odata"),
        odata_received: u(rp, "odata"),
        kernel_socket_drops,
        naks_sent: u(rp, "naks_sent"),
        nak_packets: u(rp, "nak_packets"),
        source_nak_packets: u(sp, "nak_packets"),
        ncf: u(sp, "ncf"),
        rdata_sent: u(sp, "rdata"),
        rdata_received: u(rp, "rdata"),
        odata_bytes,
        rdata_bytes,
        overhead_percent: if odata_bytes + rdata_bytes > 0 {
            100.0 * rdata_bytes as f64 / (odata_bytes + rdata_bytes) as f64
        } else {
            0.0
        },
        repair_mean_ns: rp["repair_mean_ns"].as_f64().unwrap_or(0.0),
        repair_max_ns: u(rp, "repair_max_ns"),
        linger_s: s["pgm"]["linger_s"].as_f64().unwrap_or(0.0),
        achieved_pps: s["achieved_pps"].as_f64().unwrap_or(0.0),
        exact: delivered == sent_n
            && sent_n == cfg.count
            && lost == 0
            && unrecoverable == 0
            // The socket's drops may be ODATA or repairs, so with any only ">=" is exact.
            && match kernel_socket_drops.unwrap_or(0) {
                0 => repaired == dropped,
                _ => repaired >= dropped,
            },
    }))
}

/// A progress line for a repair point.
pub fn repair_line(r: &RepairRow) -> String {
    format!(
        "wirespeed {:>5} B, loss {:>4} %: nft dropped {:>5}, delivered {:>7} of {:>7}, lost {}, unrecoverable {}, repaired {:>5}, NAKs {:>5}, RDATA {:>5}, overhead {:.2} %, repair wait mean {} max {}",
        r.size,
        r.loss_percent,
        units::thousands(r.dropped),
        units::thousands(r.delivered),
        units::thousands(r.sent),
        units::thousands(r.lost),
        units::thousands(r.unrecoverable),
        units::thousands(r.repaired),
        units::thousands(r.naks_sent),
        units::thousands(r.rdata_sent),
        r.overhead_percent,
        units::nanos(r.repair_mean_ns),
        units::nanos(r.repair_max_ns as f64)
    )
}

/// The tables after the progress lines.
pub fn table(doc: &PgmDoc) -> String {
    let mut s = String::new();
    if !doc.repair.is_empty() {
        let _ = writeln!(
            s,
            "Repair (wirespeed send -> recv --transport pgm, {} datagrams at {}, random ODATA loss by nft):",
            units::thousands(doc.count),
            units::pps(doc.rate_pps)
        );
        let _ = writeln!(
            s,
            "{:>5} {:>5} {:>8} {:>9} {:>5} {:>7} {:>8} {:>6} {:>6} {:>9} {:>11} {:>11} {:>6}",
            "size",
            "loss%",
            "dropped",
            "delivered",
            "lost",
            "unrecov",
            "repaired",
            "NAKs",
            "RDATA",
            "overhead",
            "added mean",
            "added max",
            "exact"
        );
        for r in &doc.repair {
            let _ = writeln!(
                s,
                "{:>5} {:>5} {:>8} {:>9} {:>5} {:>7} {:>8} {:>6} {:>6} {:>8.2}% {:>11} {:>11} {:>6}",
                r.size,
                r.loss_percent,
                r.dropped,
                r.delivered,
                r.lost,
                r.unrecoverable,
                r.repaired,
                r.naks_sent,
                r.rdata_sent,
                r.overhead_percent,
                units::nanos(r.repair_mean_ns),
                units::nanos(r.repair_max_ns as f64),
                if r.exact { "yes" } else { "NO" }
            );
        }
        s.push('\n');
    }
    if let Some(o) = &doc.openpgm {
        let _ = writeln!(s, "Repair, OpenPGM pair (openpgm-peer send -> recv, the same points, wire counts):");
        let _ = writeln!(
            s,
            "{:>5} {:>5} {:>8} {:>9} {:>8} {:>6} {:>6} {:>6} {:>10} {:>9}",
            "size", "loss%", "dropped", "delivered", "in order", "resets", "NAKs", "RDATA", "RDATA seen", "overhead"
        );
        for r in &o.rows {
            let _ = writeln!(
                s,
                "{:>5} {:>5} {:>8} {:>9} {:>8} {:>6} {:>6} {:>6} {:>10} {:>9}",
                r.size,
                r.loss_percent,
                r.dropped,
                r.delivered,
                if r.in_order { "yes" } else { "NO" },
                r.resets,
                opt(r.naks_sent),
                opt(r.rdata_sent),
                opt(r.rdata_seen),
                r.overhead_percent.map_or("-".into(), |o| format!("{o:.2}%"))
            );
        }
        s.push('\n');
    } else if let Some(why) = &doc.openpgm_skipped {
        let _ = writeln!(s, "OpenPGM pair: not run ({why})\n");
    }
    if let Some(c) = &doc.cost {
        let _ = writeln!(
            s,
            "Cost: highest zero-loss rate on a clean link ({} probes, median of {} search(es)), CPU per datagram at {}:",
            units::nanos(doc.duration_s * 1e9),
            doc.repeat,
            units::pps(doc.cpu_rate_pps)
        );
        let _ = writeln!(
            s,
            "{:>5} {:>9} {:>13} {:>12} {:>14} {:>14}",
            "size", "transport", "zero-loss", "datagrams/s", "send CPU/dgram", "recv CPU/dgram"
        );
        for srch in &c.searches {
            let cpu = c.cpu.iter().find(|r| r.transport == srch.transport && r.size == srch.size);
            let bound = matches!(srch.median_outcome, Some(Outcome::SenderBound | Outcome::AboveHi));
            let _ = writeln!(
                s,
                "{:>5} {:>9} {:>13} {:>12} {:>14} {:>14}",
                srch.size,
                srch.transport,
                srch.median_bps.map_or("none".into(), |b| format!(
                    "{}{}",
                    if bound { ">=" } else { "" },
                    units::bits(b)
                )),
                srch.median_pps.map_or("-".into(), units::pps),
                cpu.map_or("-".into(), |r| units::nanos(r.send_cpu_ns_per_packet)),
                cpu.map_or("-".into(), |r| units::nanos(r.recv_cpu_ns_per_packet)),
            );
        }
        s.push('\n');
    }
    if let Some(l) = &doc.latency {
        let _ = writeln!(
            s,
            "Round-trip time (seed 003), {} B probes, {} s per rate, microseconds{}",
            l.size,
            l.duration_s,
            if l.rows.iter().any(|r| r.heatmap.is_some()) { "; heat maps beside the JSON" } else { "" }
        );
        let _ = writeln!(
            s,
            "{:<14} {:>7} {:>17} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "pair", "pps", "replies/sent", "min", "p50", "p90", "p99", "p99.9", "max"
        );
        for r in &l.rows {
            let t = &r.rtt_us;
            let _ = writeln!(
                s,
                "{:<14} {:>7} {:>17} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                r.pair,
                r.pps,
                format!("{}/{}", r.replies, r.sent),
                t.min,
                t.p50,
                t.p90,
                t.p99,
                t.p999,
                t.max
            );
        }
        s.push('\n');
    }
    for n in &doc.notes {
        let _ = writeln!(s, "note: {n}");
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn percent_text() {
        assert_eq!(fmt_pct(1), "0.1");
        assert_eq!(fmt_pct(10), "1");
        assert_eq!(fmt_pct(50), "5");
        assert_eq!(fmt_pct(25), "2.5");
    }

    #[test]
    fn a_missing_peer_is_one_phrase() {
        let e = openpgm_peer(Some(Path::new("/nonexistent/openpgm-peer")), Path::new("/tmp")).unwrap_err();
        assert!(e.contains("is not a file"), "{e}");
    }
}
