//! The kernel's own loss counters, read beside the ledger and never instead of it.
//!
//! The ledger says how many packets never reached the application; these counters say which
//! layer of this host admits to dropping some: the socket (receive buffer full), the UDP layer,
//! or the softirq backlog. Where the two disagree, the difference was lost before this host's
//! stack (sender, wire, switch) or is another socket's.

use serde::Serialize;
use std::fs;

/// A snapshot of UDP and backlog counters for the current network namespace.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct KernelCounters {
    /// UDP InDatagrams (IPv4 + IPv6).
    pub in_datagrams: u64,
    /// UDP RcvbufErrors: datagrams dropped because a socket buffer was full.
    pub rcvbuf_errors: u64,
    /// UDP InErrors: all receive errors, RcvbufErrors included.
    pub in_errors: u64,
    /// UDP InCsumErrors.
    pub csum_errors: u64,
    /// UDP NoPorts: datagrams for a port nobody listened on.
    pub no_ports: u64,
    /// Sum of the "dropped" column of /proc/net/softnet_stat (per-CPU backlog overflow).
    pub softnet_dropped: u64,
}

fn snmp_udp(text: &str, prefix: &str, out: &mut KernelCounters) {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let (Some(head), Some(vals)) = (lines.next(), lines.next()) else { return };
    for (k, v) in head.split_whitespace().zip(vals.split_whitespace()).skip(1) {
        let v: u64 = v.parse().unwrap_or(0);
        match k {
            "InDatagrams" => out.in_datagrams += v,
            "RcvbufErrors" => out.rcvbuf_errors += v,
            "InErrors" => out.in_errors += v,
            "InCsumErrors" => out.csum_errors += v,
            "NoPorts" => out.no_ports += v,
            _ => {}
        }
    }
}

fn snmp6_udp(text: &str, out: &mut KernelCounters) {
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next()) else { continue };
        let v: u64 = v.parse().unwrap_or(0);
        match k {
            "Udp6InDatagrams" => out.in_datagrams += v,
            "Udp6RcvbufErrors" => out.rcvbuf_errors += v,
            "Udp6InErrors" => out.in_errors += v,
            "Udp6InCsumErrors" => out.csum_errors += v,
            "Udp6NoPorts" => out.no_ports += v,
            _ => {}
        }
    }
}

fn softnet_dropped(text: &str) -> u64 {
    text.lines().filter_map(|l| l.split_whitespace().nth(1)).filter_map(|h| u64::from_str_radix(h, 16).ok()).sum()
}

impl KernelCounters {
    /// Read the counters now (missing files read as zero: containers may hide some).
    pub fn read() -> Self {
        let mut c = KernelCounters::default();
        if let Ok(t) = fs::read_to_string("/proc/net/snmp") {
            snmp_udp(&t, "Udp:", &mut c);
        }
        if let Ok(t) = fs::read_to_string("/proc/net/snmp6") {
            snmp6_udp(&t, &mut c);
        }
        if let Ok(t) = fs::read_to_string("/proc/net/softnet_stat") {
            c.softnet_dropped = softnet_dropped(&t);
        }
        c
    }

    /// Counter increases from `earlier` to `self`.
    pub fn since(&self, earlier: &KernelCounters) -> KernelCounters {
        KernelCounters {
            in_datagrams: self.in_datagrams.saturating_sub(earlier.in_datagrams),
            rcvbuf_errors: self.rcvbuf_errors.saturating_sub(earlier.rcvbuf_errors),
            in_errors: self.in_errors.saturating_sub(earlier.in_errors),
            csum_errors: self.csum_errors.saturating_sub(earlier.csum_errors),
            no_ports: self.no_ports.saturating_sub(earlier.no_ports),
            softnet_dropped: self.softnet_dropped.saturating_sub(earlier.softnet_dropped),
        }
    }
}

/// The per-socket drop counter of /proc/net/udp (or udp6) for the socket with this inode.
pub fn socket_drops(inode: u64) -> Option<u64> {
    for path in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(t) = fs::read_to_string(path) else { continue };
        for line in t.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:tm retrnsmt uid timeout inode ref pointer drops
            if f.len() >= 13 && f[9].parse::<u64>().ok() == Some(inode) {
                return f[12].parse().ok();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_formats() {
        let snmp = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\nUdp: 100 2 7 50 5 0 1 0 0\n";
        let mut c = KernelCounters::default();
        snmp_udp(snmp, "Udp:", &mut c);
        assert_eq!((c.in_datagrams, c.no_ports, c.in_errors, c.rcvbuf_errors, c.csum_errors), (100, 2, 7, 5, 1));
        snmp6_udp("Udp6InDatagrams                 \t10\nUdp6RcvbufErrors 3\n", &mut c);
        assert_eq!((c.in_datagrams, c.rcvbuf_errors), (110, 8));
        let softnet = "0000a000 00000002 00000000\n0000b000 00000010 00000000\n";
        assert_eq!(softnet_dropped(softnet), 18);
        let later = KernelCounters { rcvbuf_errors: 10, ..c };
        assert_eq!(later.since(&c).rcvbuf_errors, 2);
        assert!(KernelCounters::read().in_datagrams < u64::MAX);
    }
}
