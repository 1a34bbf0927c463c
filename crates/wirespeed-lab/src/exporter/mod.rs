//! A Prometheus exporter for a running capture, recording, reflector, tap or partition set
//! (`--metrics`).
//!
//! A run shows its live counters on a [`Board`] (the data path's, so the capture never knows
//! the exporter is there); [`Server`], a small thread on a `std` TCP listener, reads them when
//! Prometheus scrapes and renders them in the Prometheus text format with the
//! `prometheus-client` crate's encoders ([`expose`]).
//!
//! What node_exporter already shows (UDP RcvbufErrors from /proc/net/snmp, softnet drops,
//! disk throughput) is left to it; these series are the ones only wirespeed knows: each
//! stream's ledger, each socket's own drops, the RAM ring and the writer.

pub mod board;
pub mod expose;
pub mod http;

pub use board::{Board, ReflectLive};
pub use http::Server;

use serde::Serialize;
use std::net::{Ipv4Addr, SocketAddr};

/// What an exporter shows: a run's board and, for `partition status --metrics`, the
/// partition set whose heartbeat state is read from the daemons' views at each scrape.
#[derive(Clone, Debug)]
pub struct Shown {
    /// The run's live counters.
    pub board: Board,
    /// The prefix of the partition set shown, if one is.
    pub partitions: Option<String>,
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
