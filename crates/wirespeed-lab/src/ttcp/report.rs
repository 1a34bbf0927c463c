//! One side's account of a run (JSON schema [`SCHEMA`]) and its text in ttcp's own words
//! (`ttcp-t:` / `ttcp-r:` lines).

use super::{Config, Proto, Role, SockBuf, END_MARKER_COPIES, END_MARKER_GAP};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::net::SocketAddr;

/// Schema name of one side's JSON report, so consumers can check what they parse.
pub const SCHEMA: &str = "wirespeed.ttcp/1";
/// One side's account of a run (JSON schema `wirespeed.ttcp/1`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Transmitter or receiver.
    pub role: Role,
    /// TCP or UDP.
    pub proto: Proto,
    /// -l.
    pub buflen: usize,
    /// -n.
    pub nbuf: u64,
    /// This side's address.
    pub local: String,
    /// The other side's address (empty when nothing arrived).
    pub peer: String,
    /// Socket buffer asked for and granted.
    pub sockbuf: SockBuf,
    /// The transmitter's pacing ("max (unpaced)" as ttcp); `None` for a receiver.
    pub rate: Option<String>,
    /// CPU the I/O thread was pinned to.
    pub cpu: Option<usize>,
    /// Data bytes written or read (markers not counted).
    pub bytes: u64,
    /// Read or write calls that moved data (ttcp's "I/O calls").
    pub calls: u64,
    /// Timed interval, seconds.
    pub real_s: f64,
    /// `bytes / real_s` in 10^6 bytes per second, the seed's MB/s.
    pub mb_per_s: f64,
    /// `bytes / real_s` in 1024 bytes per second, as ttcp prints it.
    pub kb_per_s: f64,
    /// User + system CPU of the process over the timed interval, seconds.
    pub cpu_s: f64,
    /// `cpu_s / real_s` in percent.
    pub cpu_pct: f64,
    /// TCP transmitter: seconds from connect until the receiver had everything and closed.
    pub delivered_s: Option<f64>,
    /// UDP: datagrams written (transmitter) or data datagrams received (receiver).
    pub datagrams: Option<u64>,
    /// UDP receiver: datagrams the transmitter sent, per `sent_from`.
    pub sent_datagrams: Option<u64>,
    /// UDP receiver: bytes the transmitter sent, per `sent_from`.
    pub sent_bytes: Option<u64>,
    /// UDP receiver: where the sent counts come from ("end marker", "start marker (plan)",
    /// "-n x -l (no marker arrived)").
    pub sent_from: Option<String>,
    /// UDP receiver: `100 * (1 - bytes received / bytes sent)`.
    pub dropped_pct: Option<f64>,
    /// UDP receiver: datagrams from other sources, ignored.
    pub stray: Option<u64>,
    /// UDP transmitter: sends retried after ENOBUFS (ttcp slept and retried too).
    pub enobufs: Option<u64>,
    /// What ended the run: "count", "eof", "end marker", "timeout", "signal", "reset".
    pub ended_by: String,
    /// Anything the reader should know (clamped buffers, missing markers, ...).
    pub notes: Vec<String>,
}

impl Report {
    pub(super) fn new(role: Role, cfg: &Config, local: SocketAddr, sockbuf: SockBuf) -> Report {
        Report {
            schema: SCHEMA.into(),
            role,
            proto: cfg.proto,
            buflen: cfg.buflen,
            nbuf: cfg.nbuf,
            local: local.to_string(),
            peer: String::new(),
            sockbuf,
            rate: (role == Role::Transmit).then(|| cfg.rate.to_string()),
            cpu: cfg.cpu,
            bytes: 0,
            calls: 0,
            real_s: 0.0,
            mb_per_s: 0.0,
            kb_per_s: 0.0,
            cpu_s: 0.0,
            cpu_pct: 0.0,
            delivered_s: None,
            datagrams: None,
            sent_datagrams: None,
            sent_bytes: None,
            sent_from: None,
            dropped_pct: None,
            stray: None,
            enobufs: None,
            ended_by: String::new(),
            notes: Vec::new(),
        }
    }

    pub(super) fn finish_timing(&mut self, real_ns: u64, cpu_ns: u64) {
        self.real_s = real_ns as f64 / 1e9;
        self.cpu_s = cpu_ns as f64 / 1e9;
        if real_ns > 0 {
            self.mb_per_s = self.bytes as f64 / self.real_s / 1e6;
            self.kb_per_s = self.bytes as f64 / self.real_s / 1024.0;
            self.cpu_pct = 100.0 * self.cpu_s / self.real_s;
        }
    }

    /// The report as ttcp-style text lines (`ttcp-t:` / `ttcp-r:`).
    pub fn human(&self) -> String {
        let p = match self.role {
            Role::Transmit => "ttcp-t:",
            Role::Receive => "ttcp-r:",
        };
        let mut s = String::new();
        let arrow = if self.role == Role::Transmit { "->" } else { "<-" };
        let peer = if self.peer.is_empty() { "(no peer)" } else { &self.peer };
        let _ = writeln!(
            s,
            "{p} buflen={}, nbuf={}, {}  {} {arrow} {peer}{}{}",
            self.buflen,
            self.nbuf,
            self.local,
            self.proto.name(),
            self.rate.as_ref().map(|r| format!(", rate {r}")).unwrap_or_default(),
            self.cpu.map(|c| format!(", on CPU {c}")).unwrap_or_default()
        );
        let sb = &self.sockbuf;
        let granted = sb.granted.map(|g| g.to_string()).unwrap_or_else(|| "unknown".into());
        match sb.requested {
            Some(r) => {
                let _ = writeln!(s, "{p} {} -b {r} requested, {granted} granted ({})", sb.option, sb.source);
            }
            None => {
                let end = sb.at_end.map(|e| format!(", {e} at the end")).unwrap_or_default();
                let _ = writeln!(s, "{p} {} default (no -b): {granted}{end} ({})", sb.option, sb.source);
            }
        }
        let _ = writeln!(
            s,
            "{p} {} bytes in {:.3} real seconds = {:.2} MB/s ({:.2} KB/sec)",
            self.bytes, self.real_s, self.mb_per_s, self.kb_per_s
        );
        let (per_call, per_sec) = if self.calls > 0 && self.real_s > 0.0 {
            (1e3 * self.real_s / self.calls as f64, self.calls as f64 / self.real_s)
        } else {
            (0.0, 0.0)
        };
        let _ = writeln!(s, "{p} {} I/O calls, msec/call = {per_call:.3}, calls/sec = {per_sec:.1}", self.calls);
        let _ = writeln!(s, "{p} CPU {:.3} s user+system = {:.1} % of real time", self.cpu_s, self.cpu_pct);
        if let Some(d) = self.delivered_s {
            let mbs = if d > 0.0 { self.bytes as f64 / d / 1e6 } else { 0.0 };
            let _ = writeln!(
                s,
                "{p} the receiver had everything and closed {d:.3} s after connect: {mbs:.2} MB/s end to end"
            );
        }
        if let (Some(dg), Some(e)) = (self.datagrams, self.enobufs) {
            let _ = writeln!(
                s,
                "{p} {dg} datagrams sent; end marker sent {END_MARKER_COPIES} times, {} ms apart; ENOBUFS retries {e}",
                END_MARKER_GAP.as_millis()
            );
        }
        if let (Some(dg), Some(sd), Some(sbytes), Some(from), Some(pct)) =
            (self.datagrams, self.sent_datagrams, self.sent_bytes, &self.sent_from, self.dropped_pct)
        {
            let _ = writeln!(
                s,
                "{p} {dg} of {sd} datagrams, {} of {sbytes} bytes received (sent counts from the {from}): {pct:.2} % data dropped",
                self.bytes
            );
        }
        if self.stray.is_some_and(|n| n > 0) {
            let _ = writeln!(s, "{p} {} datagrams from other sources ignored", self.stray.unwrap_or(0));
        }
        let _ = writeln!(s, "{p} ended by {}", self.ended_by);
        for n in &self.notes {
            let _ = writeln!(s, "{p} note: {n}");
        }
        s
    }
}
