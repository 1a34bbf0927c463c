//! PGM (RFC 3208, Pragmatic General Multicast) over UDP, as OpenPGM and ZeroMQ's `epgm://`
//! carry it: the reliable transport seed 003 measured.
//!
//! Plain UDP can only count what a lossy path dropped; PGM lets the receiver ask for it again.
//! The source keeps what it sent in a transmit window ([`txw`]) and announces the window's
//! edges in SPMs; a receiver that sees a gap waits a random back-off, sends a NAK (unicast, to
//! the address the SPMs named), is told by an NCF that the source heard it, and gets the data
//! again as RDATA. What the receive window ([`rxw`]) cannot get back before the source's
//! window moves past it is declared unrecoverable, and counted, never silently skipped.
//!
//! Encapsulation: every PGM packet is one UDP datagram's payload ([`packet`]), as OpenPGM's
//! `PGM_UDP_ENCAP_UCAST_PORT`/`PGM_UDP_ENCAP_MCAST_PORT` put them (wirespeed uses one port
//! for both, as ZeroMQ does).

pub mod packet;
pub mod receiver;
pub mod rxw;
pub mod source;
pub mod txw;

use crate::units::Rate;
use std::net::IpAddr;
use std::time::Duration;

/// The 48-bit global source identifier: with the source port it names a session (the TSI).
pub type Gsi = [u8; 6];

/// Transport session identifier: which source's stream a packet belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Tsi {
    /// The source's global id.
    pub gsi: Gsi,
    /// The source's data-source port (PGM header, not UDP).
    pub sport: u16,
}

impl std::fmt::Display for Tsi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.gsi;
        write!(f, "{}.{}.{}.{}.{}.{}.{}", g[0], g[1], g[2], g[3], g[4], g[5], self.sport)
    }
}

/// The PGM data-destination port OpenPGM uses unless told otherwise (`DEFAULT_DATA_DESTINATION_PORT`).
pub const DEFAULT_DPORT: u16 = 7500;

/// How a PGM session is run, at the source and at the receivers: the knobs RFC 3208 names
/// (NAK_BO_IVL, NAK_RPT_IVL, NAK_RDATA_IVL, NAK_NCF_RETRIES, NAK_DATA_RETRIES, TXW_SQNS),
/// with defaults for a LAN where a round trip is well under a millisecond.
#[derive(Clone, Debug, PartialEq)]
pub struct PgmConfig {
    /// The PGM data-destination port (in the PGM header, not the UDP one): a receiver takes
    /// only sessions sent to it, as OpenPGM's `pgm_bind` port does.
    pub dport: u16,
    /// Transmit window (source) and receive window (receiver), in sequence numbers: how far
    /// back a repair can reach.
    pub window: u32,
    /// NAK_BO_IVL: a receiver waits a random time below this before NAKing a gap, so that one
    /// NAK (and the source's NCF) can stand for every receiver that lost the same packet.
    pub nak_backoff: Duration,
    /// NAK_RPT_IVL: how long a NAK waits for its NCF before it is sent again.
    pub nak_repeat: Duration,
    /// NAK_RDATA_IVL: how long a confirmed NAK waits for the repair before it is sent again.
    pub nak_rdata: Duration,
    /// NAK_NCF_RETRIES and NAK_DATA_RETRIES (one value for both): after this many unanswered
    /// tries a sequence number is unrecoverable.
    pub nak_retries: u32,
    /// How long a source keeps answering NAKs after its last data, at most; it stops sooner
    /// once no NAK has come for `quiet`.
    pub linger: Duration,
    /// A lingering source leaves once no NAK has come for this long (and no repair waits).
    pub quiet: Duration,
    /// The address the source's SPMs name for NAKs (its path NLA); `None`: the local address
    /// the route to the destination leaves from.
    pub nla: Option<IpAddr>,
    /// Most repair (RDATA) traffic a source sends per second; `None` or `Some(Rate::Max)`:
    /// unlimited.
    pub repair_rate: Option<Rate>,
    /// The source's repair budget, earned by the data it sends: every ODATA byte earns this
    /// many percent of a byte of RDATA. NAKs cannot be authenticated, so without it anyone who
    /// can reach the source's NAK address makes it multicast its whole window again and again;
    /// with it, forged NAKs add at most this share of the data rate (plus the burst).
    /// `None`: unlimited (OpenPGM's behaviour).
    pub repair_share: Option<u32>,
    /// What the budget holds at most, in datagrams of the largest size: the burst of repairs
    /// sent at once after a burst of loss. `None`: a quarter of the window.
    pub repair_burst: Option<u32>,
    /// A sequence number repaired less than this ago is not repaired again (RFC 3208's NAK
    /// elimination, stretched to bound replayed NAKs). `None`: half of `nak_rdata`, so an
    /// honest receiver's repeat (sent NAK_RDATA_IVL after the NCF) is never held off.
    pub repair_holdoff: Option<Duration>,
}

/// The default repair budget: 25 % of the data sent (see [`PgmConfig::repair_share`]).
pub const DEFAULT_REPAIR_SHARE: u32 = 25;

impl Default for PgmConfig {
    fn default() -> Self {
        PgmConfig {
            dport: DEFAULT_DPORT,
            window: 8192,
            nak_backoff: Duration::from_millis(5),
            nak_repeat: Duration::from_millis(50),
            nak_rdata: Duration::from_millis(50),
            nak_retries: 20,
            linger: Duration::from_secs(5),
            quiet: Duration::from_millis(300),
            nla: None,
            repair_rate: None,
            repair_share: Some(DEFAULT_REPAIR_SHARE),
            repair_burst: None,
            repair_holdoff: None,
        }
    }
}

impl PgmConfig {
    /// The receive window's settings for datagrams of up to `max_tsdu` bytes.
    pub fn rx(&self, max_tsdu: usize) -> rxw::RxConfig {
        rxw::RxConfig {
            max_sqns: self.window,
            max_tsdu,
            nak_bo_ivl_ns: self.nak_backoff.as_nanos() as u64,
            nak_rpt_ivl_ns: self.nak_repeat.as_nanos() as u64,
            nak_rdata_ivl_ns: self.nak_rdata.as_nanos() as u64,
            nak_ncf_retries: self.nak_retries,
            nak_data_retries: self.nak_retries,
        }
    }

    /// The command-line options that give these settings, for a run started as a child (a
    /// reflector or a pinger in a partition).
    pub fn cli_args(&self) -> Vec<String> {
        let ns = |d: Duration| format!("{}ns", d.as_nanos());
        let mut v = vec![
            "--transport".to_string(),
            "pgm".into(),
            "--pgm-dport".into(),
            self.dport.to_string(),
            "--pgm-window".into(),
            self.window.to_string(),
            "--nak-backoff".into(),
            ns(self.nak_backoff),
            "--nak-repeat".into(),
            ns(self.nak_repeat),
            "--nak-rdata".into(),
            ns(self.nak_rdata),
            "--nak-retries".into(),
            self.nak_retries.to_string(),
            "--pgm-linger".into(),
            ns(self.linger),
            "--pgm-quiet".into(),
            ns(self.quiet),
        ];
        if let Some(a) = self.nla {
            v.extend(["--pgm-nla".into(), a.to_string()]);
        }
        if let Some(r) = self.repair_rate {
            let given = match r {
                Rate::Bits(b) => format!("{b}"),
                Rate::Packets(p) => format!("{p}pps"),
                Rate::Max => "max".into(),
            };
            v.extend(["--pgm-repair-rate".into(), given]);
        }
        v.extend(["--pgm-repair-share".into(), self.repair_share.map_or_else(|| "off".to_string(), |p| p.to_string())]);
        if let Some(b) = self.repair_burst {
            v.extend(["--pgm-repair-burst".into(), b.to_string()]);
        }
        if let Some(h) = self.repair_holdoff {
            v.extend(["--pgm-repair-holdoff".into(), ns(h)]);
        }
        v
    }

    /// The repair budget's burst in datagrams: [`PgmConfig::repair_burst`] or a quarter of
    /// the window. A quarter covers a receiver that stalled for a quarter of the window's span
    /// (BENCHMARKS.md 14e's 0.5 s stall needed 6,300 repairs of a 32,768 window, 14f measures
    /// the default) and keeps what one forger gets at once well below the whole window.
    pub fn repair_burst_sqns(&self) -> u32 {
        self.repair_burst.unwrap_or(self.window / 4).max(1)
    }

    /// The re-repair hold-off in ns ([`PgmConfig::repair_holdoff`]).
    pub fn repair_holdoff_ns(&self) -> u64 {
        self.repair_holdoff.unwrap_or(self.nak_rdata / 2).as_nanos() as u64
    }

    /// The source's repair budget in wire bytes per second (0 = unlimited) for datagrams of
    /// `payload` bytes. Unlimited unless capped: measured, a cap made receivers wait longer
    /// and NAK more, and only saved the repeats of repairs an overflowing socket lost.
    pub fn repair_budget(&self, payload: usize) -> u64 {
        let wire = (payload + packet::DATA_HEADER_LEN + 28) as f64;
        match self.repair_rate {
            None | Some(Rate::Max) => 0,
            Some(r) => r.packets_per_sec(payload).map_or(0, |pps| (pps * wire).ceil().max(1.0) as u64),
        }
    }

    /// Refuse settings no session can run with, in one line for the user.
    pub fn validate(&self) -> Result<(), String> {
        if !(16..=1 << 20).contains(&self.window) {
            return Err(format!("--pgm-window {} must be 16 to 1048576 sequence numbers", self.window));
        }
        if self.nak_backoff.is_zero() || self.nak_repeat.is_zero() || self.nak_rdata.is_zero() {
            return Err("--nak-backoff, --nak-repeat and --nak-rdata must be above zero".into());
        }
        if self.nak_retries == 0 {
            return Err("--nak-retries must be at least 1".into());
        }
        if let Some(p) = self.repair_share {
            if !(1..=10_000).contains(&p) {
                return Err(format!(
                    "--pgm-repair-share {p} must be 1 to 10000 (percent of the data sent), or off for no budget"
                ));
            }
        }
        if self.repair_burst == Some(0) {
            return Err("--pgm-repair-burst must be at least 1 datagram".into());
        }
        if let Some(h) = self.repair_holdoff {
            if h >= self.nak_rdata * self.nak_retries {
                return Err(format!(
                    "--pgm-repair-holdoff {h:?} must be below --nak-rdata x --nak-retries ({:?}), or a receiver whose repair was lost could never get it again",
                    self.nak_rdata * self.nak_retries
                ));
            }
        }
        Ok(())
    }
}

/// A session's 48-bit GSI from a process-unique value: OpenPGM derives it from the host name
/// (`pgm_gsi_create_from_hostname`); wirespeed mixes in the process and the clock as well, so
/// that two sources on one host (or two runs in a row) are different sessions.
pub fn new_gsi(seed: u64) -> Gsi {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    let b = x.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// `a` comes before `b` in sequence-number space (RFC 3208 compares sequence numbers modulo
/// 2^32, as serial numbers: whichever is less than 2^31 ahead is later).
#[inline]
pub fn sqn_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` is `b` or comes before it ([`sqn_lt`]).
#[inline]
pub fn sqn_le(a: u32, b: u32) -> bool {
    a == b || sqn_lt(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_compare_across_the_wrap() {
        assert!(sqn_lt(1, 2));
        assert!(!sqn_lt(2, 1));
        assert!(sqn_lt(u32::MAX, 0));
        assert!(sqn_lt(u32::MAX - 5, 3));
        assert!(!sqn_lt(3, u32::MAX - 5));
        assert!(sqn_le(7, 7));
        assert!(!sqn_lt(7, 7));
    }
}
