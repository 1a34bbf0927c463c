//! A Prometheus exporter for a running capture, recording, reflector or tap (`--metrics`).
//!
//! The counters already exist as relaxed atomics for the progress lines: the capture threads'
//! [`Live`] (and, with an exporter, each stream's [`StreamLive`](crate::rx::StreamLive)
//! cells), the recorder's ring and writer state ([`Shared`]), and the reflector's and the tap's
//! totals ([`live`]). A run hands them to a [`Board`] once, when it starts; the exporter
//! ([`Server`], a small thread on a `std` TCP listener) reads them when Prometheus scrapes and
//! renders them in the Prometheus text format with the `prometheus-client` crate's encoders
//! ([`expose`]). Nothing on the capture or write path waits for, locks or calls into the
//! exporter: the board's lock is taken when a run starts and at scrape time, never by a
//! capture or writer thread.
//!
//! What node_exporter already shows (UDP RcvbufErrors from /proc/net/snmp, softnet drops,
//! disk throughput) is left to it; these series are the ones only wirespeed knows: each
//! stream's ledger, each socket's own drops, the RAM ring and the writer.

pub mod expose;
pub mod http;
pub mod live;

pub use http::Server;
pub use live::{ReflectLive, TapLive, WriteSnapshot, WriteStats};

use crate::rx::Live;
use crate::spool::writer::Shared;
use serde::Serialize;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

/// What a run shows the exporter: set up once when the run starts, read at every scrape.
/// Cloning shares it (the run's configuration holds one clone, the server another).
#[derive(Clone)]
pub struct Board(Arc<Mutex<Parts>>);

/// The board's contents.
pub(crate) struct Parts {
    /// The wirespeed command serving (`recv`, `record`, `reflect`, `tap`).
    pub(crate) command: String,
    /// When the exporter started, Unix seconds.
    pub(crate) started_unix_s: f64,
    /// The capture threads' live counters, in thread order.
    pub(crate) capture: Option<Arc<[Live]>>,
    /// The recorder's rings and writers (their shared state and capacity), in thread order.
    pub(crate) rings: Vec<(Arc<Shared>, u64)>,
    /// The reflector's totals.
    pub(crate) reflect: Option<Arc<ReflectLive>>,
    /// The tap's totals.
    pub(crate) tap: Option<Arc<TapLive>>,
    /// The prefix of a partition set whose heartbeat state is read at each scrape.
    pub(crate) partitions: Option<String>,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Board({})", self.parts().command)
    }
}

impl Board {
    /// An empty board for `command` (the name the series' `wirespeed_build_info` carries).
    pub fn new(command: &str) -> Board {
        let started_unix_s = crate::sys::realtime_ns() as f64 / 1e9;
        Board(Arc::new(Mutex::new(Parts {
            command: command.to_string(),
            started_unix_s,
            capture: None,
            rings: Vec::new(),
            reflect: None,
            tap: None,
            partitions: None,
        })))
    }

    /// The contents; a panic elsewhere while holding the lock leaves them readable.
    pub(crate) fn parts(&self) -> MutexGuard<'_, Parts> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Show a capture's live counters (one per capture thread); replaces an earlier capture's.
    pub fn attach_capture(&self, lives: Arc<[Live]>) {
        self.parts().capture = Some(lives);
    }

    /// Show a recorder's rings and writers: `(shared state, ring capacity)` per capture thread.
    pub fn attach_rings(&self, rings: Vec<(Arc<Shared>, u64)>) {
        self.parts().rings = rings;
    }

    /// A fresh set of reflector totals, shown from now on.
    pub fn attach_reflect(&self) -> Arc<ReflectLive> {
        let l = Arc::new(ReflectLive::default());
        self.parts().reflect = Some(l.clone());
        l
    }

    /// Show the heartbeat state of the partition set `prefix` (`partition status --metrics`):
    /// read from the daemons' views at each scrape, as `partition status` reads it.
    pub fn attach_partitions(&self, prefix: &str) {
        self.parts().partitions = Some(prefix.to_string());
    }

    /// A fresh set of tap totals, shown from now on.
    pub fn attach_tap(&self) -> Arc<TapLive> {
        let l = Arc::new(TapLive::default());
        self.parts().tap = Some(l.clone());
        l
    }
}

/// Read a `--metrics` value: `PORT` (on 127.0.0.1: the counters are shown to this host only
/// unless an address says otherwise) or `ADDR:PORT` with an IP address (`[::1]:PORT` for IPv6).
/// Port 0 asks the kernel for a free one (the start line and report name it). Host names are
/// refused: the exporter binds exactly the address given.
pub fn parse_addr(s: &str) -> std::result::Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        if a.ip().is_multicast() {
            return Err(format!("{} is a multicast address: give a local address to listen on", a.ip()));
        }
        return Ok(a);
    }
    Err(format!(
        "'{s}' is not PORT or ADDR:PORT with an IP address: write e.g. 9464 (127.0.0.1:9464), 0.0.0.0:9464 or [::1]:9464"
    ))
}

/// Where a run served its metrics, for its report.
#[derive(Clone, Debug, Serialize)]
pub struct Serving {
    /// The address the exporter listened on.
    pub listen: String,
    /// The URL to scrape.
    pub url: String,
    /// Scrapes answered during the run.
    pub scrapes: u64,
}

impl Serving {
    /// The report's text line.
    pub fn line(&self) -> String {
        format!("metrics: served at {} ({} scrape(s) answered)", self.url, self.scrapes)
    }
}

/// A command's JSON report with a `metrics` object beside its own fields when it served
/// metrics (the reports' own types stay as they are).
#[derive(Serialize)]
pub struct WithMetrics<'a, T: Serialize> {
    /// The report.
    #[serde(flatten)]
    pub report: &'a T,
    /// Where its metrics were served, if they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Serving>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_bound_exactly_and_a_bare_port_is_loopback() {
        assert_eq!(parse_addr("9464").unwrap(), "127.0.0.1:9464".parse().unwrap());
        assert_eq!(parse_addr("0").unwrap(), "127.0.0.1:0".parse().unwrap());
        assert_eq!(parse_addr("0.0.0.0:9464").unwrap(), "0.0.0.0:9464".parse().unwrap());
        assert_eq!(parse_addr("[::1]:9464").unwrap(), "[::1]:9464".parse().unwrap());
        for bad in ["", "x", "65536", "localhost:9464", "127.0.0.1", "127.0.0.1:", ":9464", "1.2.3.4:99999"] {
            assert!(parse_addr(bad).unwrap_err().contains("is not PORT or ADDR:PORT"), "{bad}");
        }
        assert!(parse_addr("239.1.2.3:9464").unwrap_err().contains("multicast"));
    }
}
