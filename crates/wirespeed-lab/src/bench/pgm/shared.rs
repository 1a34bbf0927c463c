//! What every part of `bench pgm` shares: the configuration, the loss rule nftables applies in
//! the receiver's partition, and reading the children's reports.

use crate::testbed::place::{Place, Side};
use serde::Serialize;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::{Error, Result};

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
    pub(crate) fn repair(self) -> bool {
        matches!(self, Part::Repair | Part::All)
    }
    pub(crate) fn cost(self) -> bool {
        matches!(self, Part::Cost | Part::All)
    }
    pub(crate) fn latency(self) -> bool {
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
    pub latency: super::latency_config::LatencyConfig,
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

pub(super) fn fmt_pct(permille: u32) -> String {
    let p = permille as f64 / 10.0;
    if permille % 10 == 0 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    }
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
    /// On a far host: a leashed shell there that removes the rule when its leash ends, so a
    /// controller killed outright (or a dropped connection) leaves no rule in that host's
    /// firewall. Partitions go with their namespaces.
    _guard: Option<crate::testbed::proc::Proc>,
}

impl<'a> LossRule<'a> {
    pub(super) fn install(place: &'a Place, port: u16, permille: u32) -> Result<LossRule<'a>> {
        let _ = nft(place, &["delete", "table", "inet", NFT_TABLE]);
        let guard = if place.is_hosts() {
            let script =
                format!("trap 'nft delete table inet {NFT_TABLE} 2>/dev/null; exit 0' TERM; while :; do sleep 1; done");
            Some(crate::testbed::proc::Proc::spawn(
                place.tool_command(Side::Recv, "sh", &["-c", &script]),
                &place.who(Side::Recv, "the loss rule's guard"),
            )?)
        } else {
            None
        };
        nft(place, &["add", "table", "inet", NFT_TABLE])?;
        let rule = LossRule { place, _guard: guard };
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
    crate::bench::point::last_line(stderr, st)
}
