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
//! Part *cost* ([`super::pgm_cost`]): the highest zero-loss rate of `recv --transport pgm` on a
//! clean link against plain UDP, and the CPU per datagram of both ends at one fixed rate.

use super::pgm_cost::cost_part;
pub use super::pgm_cost::{cpu_line, CostPart, CostProbe, CostSearch, CpuRow};
pub use super::pgm_openpgm::{openpgm_line, openpgm_peer, OpenPgmPart, OpenPgmRow};
pub(super) use super::pgm_openpgm::{openpgm_network, wait_joined};
use super::pgm_openpgm::{openpgm_point, opt, route_groups};
use super::point::{Placement, Runner};
use super::search::Outcome;
use crate::testbed::place::{Place, Side};
use crate::testbed::proc::{Proc, Wait};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wirespeed::units;
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.pgm/1";

/// The nftables table the loss rule lives in (inside the receiver's partition only).
pub(super) const NFT_TABLE: &str = "wspgmbench";

/// The multicast range the OpenPGM pair uses, routed onto the partitions' link for the run.
pub(super) const OPENPGM_GROUPS: &str = "239.192.0.0/16";

/// First UDP port of the OpenPGM pair's sessions (one port per point).
pub(super) const OPENPGM_PORT: u16 = 7701;

/// Which parts to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Part {
    /// Loss injected by nftables, repaired by PGM.
    Repair,
    /// Zero-loss rate and CPU per datagram, PGM against UDP.
    Cost,
    /// Seed 003's round-trip heat maps: wirespeed over UDP and over PGM, and OpenPGM's pair.
    Latency,
    /// All three.
    All,
}

impl Part {
    fn repair(self) -> bool {
        matches!(self, Part::Repair | Part::All)
    }
    fn cost(self) -> bool {
        matches!(self, Part::Cost | Part::All)
    }
    fn latency(self) -> bool {
        matches!(self, Part::Latency | Part::All)
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct PgmBenchConfig {
    /// Which parts.
    pub part: Part,
    /// Datagram payload sizes, bytes (counter format).
    pub sizes: Vec<usize>,
    /// Loss rates of the repair part, in tenths of a percent (per mille): 1 = 0.1 %.
    pub loss_permille: Vec<u32>,
    /// Datagrams per repair point.
    pub count: u64,
    /// Sending rate of the repair points, datagrams/s.
    pub rate_pps: f64,
    /// The OpenPGM test peer binary, when the OpenPGM pair is to run.
    pub openpgm: Option<PathBuf>,
    /// Why the OpenPGM pair does not run, when it does not.
    pub openpgm_skipped: Option<String>,
    /// Sending time of each search probe and CPU point.
    pub duration: Duration,
    /// The search's stopping rule.
    pub precision: f64,
    /// Bottom of the search range, payload bits/s.
    pub lo_bps: f64,
    /// Independent searches per size and transport (their median is the result).
    pub repeat: u32,
    /// The fixed rate of the CPU comparison, datagrams/s.
    pub cpu_rate_pps: f64,
    /// Receive buffer of the cost part's receivers, bytes.
    pub rcvbuf: u64,
    /// The repair points' `send --pgm-repair-rate`, as given (`None`: the sender's default,
    /// unpaced).
    pub repair_rate: Option<String>,
    /// The latency part's settings (its OpenPGM peer is `openpgm`).
    pub latency: super::pgm_latency::LatencyConfig,
}

/// One repair point of wirespeed's pair.
#[derive(Clone, Debug, Serialize)]
pub struct RepairRow {
    /// Payload bytes per datagram.
    pub size: usize,
    /// ODATA share nft was told to drop, %.
    pub loss_percent: f64,
    /// ODATA packets the nft rule dropped (its counter; the end-of-stream message is ODATA too).
    pub dropped: u64,
    /// Datagrams the sender sent (its count; the end-of-stream message not included).
    pub sent: u64,
    /// Datagrams the receiver delivered (the ledger's unique received).
    pub delivered: u64,
    /// Sequence numbers the ledger counts lost.
    pub lost: u64,
    /// Sequence numbers PGM gave up on.
    pub unrecoverable: u64,
    /// Sequence numbers still being recovered when the receiver ended.
    pub pending_at_end: u64,
    /// Sequence numbers that were missing and came back.
    pub repaired: u64,
    /// ODATA packets the source sent (the datagrams and the end-of-stream message).
    pub odata_sent: u64,
    /// ODATA packets the receiver took: `odata_sent - dropped` unless the receiving socket
    /// dropped some too.
    pub odata_received: u64,
    /// The receiving socket's own drop counter (those drops are repaired as well).
    pub kernel_socket_drops: Option<u64>,
    /// NAKs the receiver sent (sequence numbers, retries included).
    pub naks_sent: u64,
    /// NAK packets the receiver sent.
    pub nak_packets: u64,
    /// NAK packets the source accepted.
    pub source_nak_packets: u64,
    /// NCFs the source sent.
    pub ncf: u64,
    /// RDATA packets the source sent.
    pub rdata_sent: u64,
    /// RDATA packets the receiver took.
    pub rdata_received: u64,
    /// ODATA bytes the source sent (PGM header included).
    pub odata_bytes: u64,
    /// RDATA bytes the source sent.
    pub rdata_bytes: u64,
    /// rdata_bytes / (odata_bytes + rdata_bytes), %.
    pub overhead_percent: f64,
    /// Mean added latency of a repaired packet (gap noticed to repair), ns.
    pub repair_mean_ns: f64,
    /// The largest, ns.
    pub repair_max_ns: u64,
    /// Seconds the source stayed for NAKs after its last datagram.
    pub linger_s: f64,
    /// Datagrams/s the sender achieved.
    pub achieved_pps: f64,
    /// Everything sent was delivered, nothing was lost, and every drop was repaired: `repaired
    /// == dropped` when the socket dropped nothing, `>=` when it did (its drops hit ODATA and
    /// repairs alike).
    pub exact: bool,
}

/// Everything a `bench pgm` run found, as `--json` prints it and pgm.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct PgmDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Where the points ran.
    pub placement: Placement,
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
    pub latency: Option<super::pgm_latency::LatencyPart>,
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

pub(super) fn fmt_pct(permille: u32) -> String {
    let p = permille as f64 / 10.0;
    if permille % 10 == 0 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    }
}

/// Run the parts `cfg` asks for on `runner`'s partitions; `progress` gets one line per point.
pub fn run(runner: &Runner, cfg: &PgmBenchConfig, progress: &mut dyn FnMut(&str)) -> Result<PgmDoc> {
    let place = runner.place();
    if !place.is_partitions() {
        return Err(Error::invalid(
            "bench pgm runs in two partitions (the loss rule and the PGM ports need namespaces of their own): run it as root without --loopback",
        ));
    }
    let stop = runner.stop_flag();
    let mut doc = PgmDoc {
        schema: SCHEMA,
        placement: runner.placement(),
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
        match super::pgm_latency::run(runner, &cfg.latency, progress)? {
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

/// `nft` in the receiver's partition; the one line it said on failure.
pub(super) fn nft(place: &Place, args: &[&str]) -> Result<String> {
    let out = place
        .tool_command(Side::Recv, "nft", args)
        .output()
        .map_err(|e| Error::failed(format!("cannot run nft (apt-get install nftables): {e}")))?;
    if !out.status.success() {
        return Err(Error::failed(format!(
            "nft {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("no message").trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The loss rule in the receiver's partition: drop `permille`/1000 of the ODATA packets (PGM
/// type 0x04, bits 96..103 after the UDP header's start) to UDP port `port`, at random; RDATA
/// (0x05) passes, so every drop can be repaired. A fresh table, so the counter starts at zero.
pub(super) struct LossRule<'a> {
    place: &'a Place,
}

impl<'a> LossRule<'a> {
    pub(super) fn install(place: &'a Place, port: u16, permille: u32) -> Result<LossRule<'a>> {
        let _ = nft(place, &["delete", "table", "inet", NFT_TABLE]);
        nft(place, &["add", "table", "inet", NFT_TABLE])?;
        let rule = LossRule { place };
        nft(place, &["add", "chain", "inet", NFT_TABLE, "in", "{ type filter hook input priority raw ; }"])?;
        let (p, n) = (port.to_string(), permille.to_string());
        nft(
            place,
            &[
                "add", "rule", "inet", NFT_TABLE, "in", "udp", "dport", &p, "@th,96,8", "0x04", "numgen", "random",
                "mod", "1000", "<", &n, "counter", "drop",
            ],
        )?;
        Ok(rule)
    }

    /// Packets the rule dropped so far.
    pub(super) fn dropped(&self) -> Result<u64> {
        let text = nft(self.place, &["list", "chain", "inet", NFT_TABLE, "in"])?;
        text.split("counter packets ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Error::failed(format!("the loss rule's counter is not in nft's listing: {}", text.trim())))
    }
}

impl Drop for LossRule<'_> {
    fn drop(&mut self) {
        let _ = nft(self.place, &["delete", "table", "inet", NFT_TABLE]);
    }
}

/// How long a repair point's ends may take at most: the sending time, the linger, slack.
pub(super) fn point_limit(cfg: &PgmBenchConfig) -> Duration {
    Duration::from_secs_f64(cfg.count as f64 / cfg.rate_pps) + Duration::from_secs(90)
}

pub(super) fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

pub(super) fn ou(v: &Value, k: &str) -> Option<u64> {
    v[k].as_u64()
}

pub(super) fn parse_json(text: &str, who: &str) -> Result<Value> {
    let line = text.lines().rev().find(|l| l.trim_start().starts_with('{')).unwrap_or("");
    serde_json::from_str(text)
        .or_else(|_| serde_json::from_str(line))
        .map_err(|e| Error::failed(format!("{who} printed no JSON report ({e})")))
}

pub(super) fn why(stderr: &str, st: &std::process::ExitStatus) -> String {
    super::point::last_line(stderr, st)
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
