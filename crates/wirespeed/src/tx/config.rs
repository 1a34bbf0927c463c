//! What a send run is asked to do ([`SendConfig`]) and the checks made before any socket is
//! opened.

use super::raw::Mac;
use crate::error::{Error, Result};
use crate::units::{Rate, MAX_UDP_PAYLOAD};
use crate::wire::Format;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Everything a send run needs.
#[derive(Clone, Debug)]
pub struct SendConfig {
    /// Destination (unicast or multicast).
    pub dest: SocketAddr,
    /// Local address to send from (default: any).
    pub bind: Option<IpAddr>,
    /// Total rate across all streams.
    pub rate: Rate,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Sequence numbers to generate per stream (skipped ones included).
    pub count: Option<u64>,
    /// Independent sequence spaces, each from its own socket and thread.
    pub streams: usize,
    /// Use UDP GSO (UDP_SEGMENT).
    pub gso: bool,
    /// Most datagrams per send call; `None` picks one from the rate.
    pub burst: Option<usize>,
    /// Leave out sequence numbers N-1, 2N-1, ... (1-based every Nth).
    pub skip_every: Option<u64>,
    /// Leave out these inclusive ranges of sequence numbers.
    pub skip_ranges: Vec<(u64, u64)>,
    /// First sequence number of every stream.
    pub start_seq: u64,
    /// CPUs to pin sender threads to, round-robin.
    pub cpus: Vec<usize>,
    /// After a stall, make up the backlog at up to this multiple of the nominal rate
    /// (infinity: full speed).
    pub catch_up_factor: f64,
    /// A backlog older than this is given up (the schedule moves forward; counted as a slip).
    pub max_lag: Duration,
    /// Multicast TTL (IPv4) or hop limit (IPv6).
    pub ttl: u32,
    /// Interface to send multicast from: an IPv4 address or an interface (by index); for an
    /// IPv6 group, else its scope id. A link-local IPv6 group needs one of them.
    pub multicast_iface: Option<crate::addr::Iface>,
    /// Build the frames here and send them through a raw socket on this interface instead of
    /// a UDP socket (`send --raw IFACE`).
    pub raw: Option<RawConfig>,
    /// Send the datagrams as a PGM session (`--transport pgm`): repaired on NAKs from the
    /// receivers, with these settings.
    pub pgm: Option<crate::pgm::PgmConfig>,
    /// Scheduling asked for: each sending thread takes its SCHED_FIFO (`realtime`) itself when
    /// it starts; the nice value and memory locking are the caller's, once for the process.
    pub priority: crate::priority::Priority,
}

/// Where and how `--raw` sends: the interface, and the next hop's hardware address when the
/// neighbour table should not be asked.
#[derive(Clone, Debug)]
pub struct RawConfig {
    /// Interface name (`veth0`, `lo`, ...).
    pub iface: String,
    /// Destination hardware address; `None` resolves it (nothing on loopback).
    pub dst_mac: Option<Mac>,
}

impl SendConfig {
    /// Defaults for a destination: 1 stream, unpaced until a rate is set, 10 s.
    pub fn new(dest: SocketAddr) -> Self {
        SendConfig {
            dest,
            bind: None,
            rate: Rate::Max,
            duration: None,
            count: None,
            streams: 1,
            gso: false,
            burst: None,
            skip_every: None,
            skip_ranges: Vec::new(),
            start_seq: 0,
            cpus: Vec::new(),
            catch_up_factor: 1.5,
            max_lag: Duration::from_millis(50),
            ttl: 1,
            multicast_iface: None,
            raw: None,
            pgm: None,
            priority: crate::priority::Priority::default(),
        }
    }

    /// Whether `seq` is one the configuration leaves out on purpose.
    pub(super) fn skipped(&self, seq: u64) -> bool {
        if let Some(n) = self.skip_every {
            if n > 0 && seq % n == n - 1 {
                return true;
            }
        }
        self.skip_ranges.iter().any(|&(a, b)| seq >= a && seq <= b)
    }
}

/// Check a configuration before any socket is opened (usage errors, exit code 2).
pub fn validate(cfg: &SendConfig, fmt: &dyn Format) -> Result<()> {
    if let Some(why) = fmt.cannot_send() {
        return Err(Error::invalid(why));
    }
    let len = fmt.packet_len();
    if len == 0 || len > MAX_UDP_PAYLOAD {
        return Err(Error::invalid(format!(
            "payload of {len} bytes does not fit a UDP datagram: use 1..{MAX_UDP_PAYLOAD} bytes (8800 is the usual jumbo size)"
        )));
    }
    if cfg.streams == 0 || cfg.streams > 1024 {
        return Err(Error::param("streams", format!("{} must be between 1 and 1024", cfg.streams)));
    }
    if cfg.duration.is_none() && cfg.count.is_none() {
        return Err(Error::invalid("say how long to send: --duration SECS or --count PACKETS"));
    }
    if cfg.skip_every == Some(0) {
        return Err(Error::param("skip-every", "0 skips nothing: give N >= 1 (every Nth datagram is left out)"));
    }
    if let Some(&(a, b)) = cfg.skip_ranges.iter().find(|(a, b)| a > b) {
        return Err(Error::param("skip", format!("{a}..{b} is empty: write the smaller number first")));
    }
    if cfg.raw.is_some() && cfg.gso {
        return Err(Error::invalid(
            "--gso and --raw do not mix: a raw socket sends whole frames, one per datagram; leave one out",
        ));
    }
    if cfg.dest.ip().is_unspecified() {
        return Err(Error::invalid(format!("{} is not a destination: give the receiver's address", cfg.dest.ip())));
    }
    if let (Some(b), d) = (cfg.bind, cfg.dest) {
        if b.is_ipv4() != d.is_ipv4() {
            return Err(Error::invalid(format!(
                "--bind {b} and the destination {} are of different families (IPv4 and IPv6): give a --bind address of the destination's family",
                d.ip()
            )));
        }
    }
    match cfg.dest {
        SocketAddr::V6(g) if g.ip().is_multicast() => {
            crate::addr::multicast_v6_index(g, cfg.multicast_iface.as_ref(), "--iface")?;
        }
        _ if cfg.multicast_iface.is_some() && !cfg.dest.ip().is_multicast() => {
            return Err(Error::invalid(format!(
                "--iface chooses where multicast leaves, and {} is not a multicast group: leave --iface out",
                cfg.dest.ip()
            )));
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_rules() {
        let mut c = SendConfig::new("127.0.0.1:9".parse().unwrap());
        c.skip_every = Some(100);
        c.skip_ranges = vec![(5, 7)];
        let skipped: Vec<u64> = (0..300).filter(|&s| c.skipped(s)).collect();
        assert_eq!(skipped, vec![5, 6, 7, 99, 199, 299]);
    }
}
