//! `send --transport pgm`: the send loop's datagrams become a PGM session's ODATA, and
//! between batches the sender answers NAKs (NCF at once, RDATA from the transmit window) and
//! sends the SPMs that tell receivers the window's edges.
//!
//! Two sockets, as OpenPGM has: the stream's connected data socket carries everything the
//! source sends (ODATA, RDATA, NCF, SPM) to the group or host; a second socket, bound to the
//! source's own address and the session's UDP port, is where receivers send NAKs (that
//! address is the NLA the SPMs name).

use super::SendConfig;
use crate::error::{Error, Result};
use crate::pgm::source::{Source, SourceStats};
use crate::pgm::{PgmConfig, Tsi};
use crate::sys;
use serde::Serialize;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Most NAK packets read between two batches (the rest wait for the next one).
const NAKS_PER_PUMP: usize = 64;

/// What the PGM side of a send run did: the source's counters and how long it stayed for NAKs
/// after its last data.
#[derive(Clone, Debug, Serialize)]
pub struct PgmSent {
    /// The session's TSI, as `gsi.sport` (GSI bytes in decimal, as OpenPGM prints them).
    pub tsi: String,
    /// The address the SPMs named for NAKs, with the session's UDP port.
    pub nak_address: String,
    /// The PGM data-destination port.
    pub dport: u16,
    /// The source's counters.
    pub stats: SourceStats,
    /// Repair bytes as a share of all data bytes, %.
    pub repair_share_percent: f64,
    /// Seconds spent answering NAKs after the last data.
    pub linger_s: f64,
    /// Why the linger ended.
    pub linger_end: String,
    /// The most repair traffic sent per second, IP and UDP headers counted (0 = unlimited).
    pub repair_budget_bytes_per_s: u64,
    /// The repair budget's share of the data sent, percent (`--pgm-repair-share`; 0 = no
    /// budget).
    pub repair_budget_share_percent: u32,
    /// The most repair bytes the budget holds at once (`--pgm-repair-burst` datagrams of the
    /// largest size, IP and UDP headers counted; 0 = no budget).
    pub repair_budget_burst_bytes: u64,
    /// The most RDATA bytes (IP and UDP headers counted) the budget could have let out over
    /// the run: the burst plus the share of the ODATA sent (null: no budget). Whatever NAKs
    /// came, `repair_wire_bytes` is at most this.
    pub repair_budget_bound_bytes: Option<u64>,
    /// The RDATA bytes sent, IP and UDP headers counted (what the budget counts).
    pub repair_wire_bytes: u64,
    /// The re-repair hold-off, seconds (`--pgm-repair-holdoff`).
    pub repair_holdoff_s: f64,
    /// False when the NAKs asked for more than the receivers can have lost (forged NAKs, or
    /// a receiver far beyond the loss the budget allows for): see `nak_warnings`.
    pub naks_plausible: bool,
    /// Why the NAKs were not plausible, one reason each (empty when they were).
    pub nak_warnings: Vec<String>,
}

/// The PGM side of one stream.
pub(super) struct PgmTx {
    naks: UdpSocket,
    source: Source,
    buf: Vec<u8>,
    linger: Duration,
    quiet: Duration,
    repair_budget: u64,
}

impl PgmTx {
    /// Open the NAK socket next to the stream's data socket `data` (connected to the
    /// destination) and start the session.
    pub(super) fn open(cfg: &SendConfig, pgm: &PgmConfig, data: &UdpSocket, max_tsdu: usize) -> Result<PgmTx> {
        pgm.validate().map_err(Error::invalid)?;
        if !cfg.dest.is_ipv4() {
            return Err(Error::param(
                "transport",
                format!("pgm sends over IPv4 here ({} is IPv6): give an IPv4 host or group", cfg.dest),
            ));
        }
        let local = data.local_addr().map_err(|e| Error::io(format!("cannot read the data socket's address: {e}")))?;
        let nla = match pgm.nla {
            Some(a) => a,
            None if local.ip().is_unspecified() && cfg.dest.ip().is_multicast() => {
                multicast_nla(cfg).unwrap_or(local.ip())
            }
            None => local.ip(),
        };
        if nla.is_unspecified() {
            return Err(Error::invalid(format!(
                "no source address for the SPMs to name (the route to {} gives none): give --pgm-nla ADDR",
                cfg.dest.ip()
            )));
        }
        let at = SocketAddr::new(nla, cfg.dest.port());
        let naks = UdpSocket::bind(at).map_err(|e| {
            Error::failed(format!(
                "cannot bind the PGM source's NAK socket to {at}: {e} (receivers send NAKs to the source's address at the session's port; a receiver on this host must listen on another address, e.g. recv 127.0.0.2:{})",
                cfg.dest.port()
            ))
        })?;
        naks.set_nonblocking(true)
            .map_err(|e| Error::failed(format!("cannot make the NAK socket non-blocking: {e}")))?;
        let now = sys::monotonic_ns();
        let seed = sys::realtime_ns() ^ u64::from(std::process::id()).rotate_left(17) ^ u64::from(local.port());
        let tsi = Tsi { gsi: crate::pgm::new_gsi(seed), sport: local.port().max(1) };
        let mut source = Source::new(pgm, tsi, nla, cfg.dest, max_tsdu, now);
        let repair_budget = pgm.repair_budget(max_tsdu);
        source.pace_repairs(repair_budget, now);
        Ok(PgmTx { naks, source, buf: vec![0u8; 65536], linger: pgm.linger, quiet: pgm.quiet, repair_budget })
    }

    /// The session's first SPM, before any data: it tells receivers where the session
    /// starts, so that a first datagram lost on the way is a gap to repair, not an unknown.
    pub(super) fn announce(&mut self, data_fd: RawFd) {
        let mut send = |p: &[u8]| sys::send_one(data_fd, p).map(|_| ());
        self.source.announce(&mut send);
    }

    /// Bytes in front of each payload: the ODATA header.
    pub(super) fn header_len() -> usize {
        crate::pgm::packet::DATA_HEADER_LEN
    }

    /// Make `pkt` (payload already at its header's end) an ODATA packet; returns its length.
    #[inline]
    pub(super) fn seal(&mut self, pkt: &mut [u8], payload_len: usize, now_ns: u64) -> usize {
        self.source.seal(pkt, payload_len, now_ns)
    }

    /// Between batches: read the NAKs that came (without waiting), confirm and repair them, and
    /// send an SPM when one is due. Everything goes out on `data_fd`.
    pub(super) fn pump(&mut self, data_fd: RawFd, now_ns: u64) {
        let mut send = |p: &[u8]| sys::send_one(data_fd, p).map(|_| ());
        for _ in 0..NAKS_PER_PUMP {
            match self.naks.recv_from(&mut self.buf) {
                Ok((n, from)) => self.source.on_packet(&self.buf[..n], from, now_ns, &mut send),
                Err(_) => break,
            }
        }
        self.source.service(now_ns, &mut send);
    }

    /// After the last data: keep answering NAKs until none has come for
    /// the configured quiet time (and no repair is waiting), at most the configured linger, or
    /// until `stop`; then the closing SPM. Returns the report's PGM part.
    pub(super) fn finish(mut self, data_fd: RawFd, stop: &AtomicBool) -> PgmSent {
        let t0 = sys::monotonic_ns();
        self.source.end_of_data(t0);
        let quiet = self.quiet.as_nanos() as u64;
        let end = t0 + self.linger.as_nanos() as u64;
        let why = loop {
            let now = sys::monotonic_ns();
            self.pump(data_fd, now);
            let last = self.source.last_nak_ns().max(t0);
            if self.source.repairs_queued() == 0 && now.saturating_sub(last) >= quiet {
                break "quiet: no NAK for --pgm-quiet";
            }
            if now >= end {
                break "--pgm-linger reached";
            }
            if stop.load(Ordering::Relaxed) {
                break "stopped by signal";
            }
            std::thread::sleep(Duration::from_micros(500));
        };
        let linger_s = (sys::monotonic_ns() - t0) as f64 / 1e9;
        let mut send = |p: &[u8]| sys::send_one(data_fd, p).map(|_| ());
        self.source.finish(&mut send);
        let stats = *self.source.stats();
        let budget = *self.source.budget();
        let nak_warnings = self.source.implausible_naks();
        let nak_address = self.naks.local_addr().map(|a| a.to_string()).unwrap_or_default();
        PgmSent {
            tsi: self.source.tsi().to_string(),
            nak_address,
            dport: self.source_dport(),
            repair_share_percent: stats.repair_share(),
            stats,
            linger_s,
            linger_end: why.into(),
            repair_budget_bytes_per_s: self.repair_budget,
            repair_budget_share_percent: budget.share_percent(),
            repair_budget_burst_bytes: budget.cap(),
            repair_budget_bound_bytes: budget.is_limited().then(|| self.source.repair_bound_bytes()),
            repair_wire_bytes: self.source.repair_wire_bytes(),
            repair_holdoff_s: self.source.holdoff_ns() as f64 / 1e9,
            naks_plausible: nak_warnings.is_empty(),
            nak_warnings,
        }
    }

    fn source_dport(&self) -> u16 {
        self.source.dport()
    }
}

/// The source address a group's SPMs name when none is given: the address of the interface
/// the datagrams leave by (`--iface`, or the route to the group in /proc/net/route), as
/// OpenPGM names its send interface's address. A socket connected to a group keeps the
/// wildcard as its own address, so the route has to be read.
fn multicast_nla(cfg: &SendConfig) -> Option<IpAddr> {
    use crate::addr::Iface;
    let found = match &cfg.multicast_iface {
        Some(Iface::Addr(a)) => return Some(IpAddr::V4(*a)),
        Some(Iface::Index { index, .. }) => {
            let want = *index;
            sys::packet::ipv4_of_interface(|_, i| i == want)
        }
        None => {
            let IpAddr::V4(group) = cfg.dest.ip() else { return None };
            let dev = route_dev(&std::fs::read_to_string("/proc/net/route").ok()?, group)?;
            sys::packet::ipv4_of_interface(|name, _| name == dev)
        }
    };
    found.ok().flatten().map(IpAddr::V4)
}

/// The interface of the most specific IPv4 route to `to` in a /proc/net/route table (fields
/// in host byte order hex, as the kernel writes them).
fn route_dev(table: &str, to: std::net::Ipv4Addr) -> Option<String> {
    let to = u32::from(to).swap_bytes();
    let mut best: Option<(u32, u32, &str)> = None;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let (Ok(dest), Ok(metric), Ok(mask)) =
            (u32::from_str_radix(f[1], 16), f[6].parse::<u32>(), u32::from_str_radix(f[7], 16))
        else {
            continue;
        };
        if to & mask != dest {
            continue;
        }
        let bits = mask.count_ones();
        if best.map_or(true, |(b, m, _)| bits > b || (bits == b && metric < m)) {
            best = Some((bits, metric, f[0]));
        }
    }
    best.map(|(_, _, d)| d.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_route_names_the_interface() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t0102A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
lo\t000000EF\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n\
veth1\t0000C0EF\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        assert_eq!(route_dev(table, "239.192.7.7".parse().unwrap()).as_deref(), Some("veth1"));
        assert_eq!(route_dev(table, "239.1.2.3".parse().unwrap()).as_deref(), Some("lo"));
        assert_eq!(route_dev(table, "224.0.0.1".parse().unwrap()).as_deref(), Some("eth0"));
        assert_eq!(route_dev("Iface\tDestination\n", "239.1.2.3".parse().unwrap()), None);
    }
}
