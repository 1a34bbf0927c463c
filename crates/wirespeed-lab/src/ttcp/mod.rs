//! ttcp in the classic style (seed 000's Tables 3-5): bulk TCP or UDP transfer between two
//! hosts, reported in MB/s and, for UDP, the share of data dropped.
//!
//! The measurement follows the original ttcp so that its figures compare with the seed's: the
//! transmitter writes `nbuf` buffers of `buflen` bytes as fast as it can (unless paced), the
//! receiver reads with `buflen`-sized reads, and each side times its own part: the transmitter
//! from connect to the return of its last write, the receiver from accept (TCP) or the start
//! marker (UDP) to the end of the data. A transmitter's figure can therefore exceed what was
//! delivered (the last socket buffer of data is still in flight when it stops the clock); the
//! TCP transmitter also reports the time until the receiver had everything and closed.
//!
//! UDP has no end of stream, so, as in ttcp, short marker datagrams bracket the data. Unlike
//! ttcp's four-byte markers, the end marker carries the transmitter's own counts (datagrams and
//! bytes sent) and goes out several times a few milliseconds apart, so that it survives the
//! very overload it is meant to measure, and the receiver's `% data dropped` is computed from
//! what was really sent rather than from what was planned.
//!
//! The rooms: `marker.rs` (the UDP marker datagram as a typed view), `transmitter.rs` and
//! `receiver.rs` (the two ends), `raw.rs` (Table 3's transfer over raw byte streams opened by
//! path: raw devices, FIFOs, files, and Unix sockets, with every byte checked), `sockbuf.rs` (what socket buffer was asked for and granted),
//! `report.rs` (one side's account and its ttcp-style text) and `table.rs` (the seed's Tables
//! 3-5 and CSV over pairs of reports). This file holds the settings both ends share.

mod marker;
mod raw;
mod receiver;
mod report;
mod sockbuf;
mod table;
mod transmitter;

pub use marker::{Marker, MarkerRepr, MARKER_LEN};
pub use raw::{
    check, fill, transmit_raw, AlignedBuf, Mismatch, RawConfig, RawKind, RawReceiver, RawReport, StreamReport, ALIGN,
    MAX_STREAMS, RAW_SCHEMA,
};
pub use receiver::Receiver;
pub use report::{Report, SCHEMA};
pub use sockbuf::SockBuf;
pub use table::{csv, rw_table, seed_table3, sockbuf_table, table3, BenchRow, Over, RawRow, SEED_TABLE3, TABLE3_SIZES};
pub use transmitter::transmit;

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wirespeed::error::{Error, Result};
use wirespeed::pace::Pacer;
use wirespeed::sys;
use wirespeed::units::{Rate, MAX_UDP_PAYLOAD};

/// ttcp's traditional port, so that habits and firewall rules carry over.
pub const DEFAULT_PORT: u16 = 5001;
/// ttcp's default buffer length (`-l`).
pub const DEFAULT_BUFLEN: usize = 8192;
/// ttcp's default number of buffers (`-n`).
pub const DEFAULT_NBUF: u64 = 2048;
/// Largest `-l`: the buffer is allocated whole, so an absurd value must be refused rather
/// than exhaust memory.
pub const MAX_BUFLEN: usize = 256 << 20;
/// How many times the UDP end marker is sent: one copy may be dropped by the same full socket
/// buffer that dropped data, a later copy arrives after the receiver has drained it.
pub const END_MARKER_COPIES: u32 = 4;
/// Pause between end-marker copies.
pub const END_MARKER_GAP: Duration = Duration::from_millis(5);
/// Default silence after which a UDP receiver that has seen data gives up waiting for the end
/// marker.
pub const DEFAULT_UDP_TIMEOUT: Duration = Duration::from_secs(5);

/// How often blocked calls wake up to look at the stop flag (and the UDP silence timer).
const POLL: Duration = Duration::from_millis(200);
/// Transport of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// A TCP stream (ttcp's default).
    Tcp,
    /// UDP datagrams of `buflen` bytes (ttcp -u).
    Udp,
}

impl Proto {
    /// Lower-case name as the command line and the tables write it.
    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// Which end of the transfer a report describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// ttcp -t.
    Transmit,
    /// ttcp -r.
    Receive,
}

/// Everything that shapes a run, for either side.
#[derive(Clone, Debug)]
pub struct Config {
    /// TCP or UDP.
    pub proto: Proto,
    /// Bytes per read or write (ttcp -l); also the UDP datagram size.
    pub buflen: usize,
    /// Buffers to write (ttcp -n); the UDP receiver's fallback for what was sent.
    pub nbuf: u64,
    /// Socket buffer to ask for (ttcp -b): SO_SNDBUF on the transmitter, SO_RCVBUF on the
    /// receiver; `None` keeps the kernel's default, the seed's shaded row.
    pub sockbuf: Option<usize>,
    /// TCP_NODELAY on the transmitter (ttcp -D).
    pub nodelay: bool,
    /// Transmitter pacing; `Rate::Max` writes as fast as the host can, as ttcp does.
    pub rate: Rate,
    /// UDP receiver: silence after data began that ends the run when no end marker comes.
    pub timeout: Duration,
    /// Pin the thread doing the I/O to this CPU.
    pub cpu: Option<usize>,
}

impl Config {
    /// ttcp's defaults for `proto`.
    pub fn new(proto: Proto) -> Config {
        Config {
            proto,
            buflen: DEFAULT_BUFLEN,
            nbuf: DEFAULT_NBUF,
            sockbuf: None,
            nodelay: false,
            rate: Rate::Max,
            timeout: DEFAULT_UDP_TIMEOUT,
            cpu: None,
        }
    }

    /// Refuse settings that cannot make a run, each with one line saying what to do.
    pub fn validate(&self) -> Result<()> {
        if self.buflen == 0 {
            return Err(Error::invalid("-l (buffer length) must be at least 1 byte"));
        }
        if self.buflen > MAX_BUFLEN {
            return Err(Error::invalid(format!(
                "-l {} is larger than the {} MiB this ttcp allocates for one buffer: use a smaller -l and a larger -n",
                self.buflen,
                MAX_BUFLEN >> 20
            )));
        }
        if self.proto == Proto::Udp && self.buflen > MAX_UDP_PAYLOAD {
            return Err(Error::invalid(format!(
                "-l {} does not fit a UDP datagram (at most {MAX_UDP_PAYLOAD} bytes over IPv4): use -l {MAX_UDP_PAYLOAD} or less with -u",
                self.buflen
            )));
        }
        if self.nbuf == 0 {
            return Err(Error::invalid("-n (number of buffers) must be at least 1"));
        }
        if self.sockbuf == Some(0) {
            return Err(Error::invalid(
                "-b 0 is not a socket buffer size: give bytes like 65536 or 1M, or leave -b out for the kernel's default",
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::invalid("--timeout must be longer than zero"));
        }
        Ok(())
    }

    fn pacer(&self, start_ns: u64) -> Option<Pacer> {
        // Writes are the paced unit; a backlog older than 1 s is given up, not burst out.
        self.rate.packets_per_sec(self.buflen).map(|pps| Pacer::new(pps, start_ns, 1_000_000_000, 1.5))
    }
}

/// ttcp's source pattern: the printable ASCII characters over and over. Never a NUL byte,
/// which is what keeps data apart from markers.
pub fn pattern(len: usize) -> Vec<u8> {
    (b' '..=b'~').cycle().take(len).collect()
}

/// Percentage of bytes sent that did not arrive: ttcp's `% data dropped`.
pub fn dropped_pct(bytes_sent: u64, bytes_received: u64) -> f64 {
    if bytes_sent == 0 {
        0.0
    } else {
        100.0 * (1.0 - bytes_received as f64 / bytes_sent as f64)
    }
}

fn pin(cfg: &Config, who: &str) -> Result<()> {
    if let Some(cpu) = cfg.cpu {
        sys::pin_current_thread(cpu)
            .map_err(|e| Error::invalid(format!("cannot pin the ttcp {who} to CPU {cpu}: {e} (see `nproc`)")))?;
    }
    Ok(())
}

fn stopping(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed)
}

/// Pace buffer `i` when a rate was asked for; false when stopped while waiting.
fn pace(pacer: &mut Option<Pacer>, i: u64, stop: &AtomicBool) -> bool {
    match pacer {
        Some(p) => p.wait(i, 1, None, stop).is_some(),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use wirespeed::Kind;

    #[test]
    fn dropped_percentage() {
        assert_eq!(dropped_pct(1000, 1000), 0.0);
        assert!((dropped_pct(1000, 450) - 55.0).abs() < 1e-9);
        assert_eq!(dropped_pct(0, 0), 0.0);
    }

    #[test]
    fn validation_says_what_is_wrong() {
        let mut c = Config::new(Proto::Udp);
        c.buflen = 65508;
        assert!(
            matches!(c.validate(), Err(e) if e.kind() == Kind::Invalid && e.to_string().contains("does not fit a UDP datagram"))
        );
        c.buflen = 0;
        assert!(matches!(c.validate(), Err(e) if e.kind() == Kind::Invalid && e.to_string().contains("-l")));
        let mut c = Config::new(Proto::Tcp);
        c.nbuf = 0;
        assert!(matches!(c.validate(), Err(e) if e.kind() == Kind::Invalid && e.to_string().contains("-n")));
        c.nbuf = 1;
        c.buflen = 65508;
        assert!(c.validate().is_ok(), "TCP buffers may exceed a datagram");
    }

    fn loopback_pair(cfg: &Config) -> (Report, Report) {
        let rx = Receiver::bind(cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
        let dest = rx.local_addr();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let h = s.spawn(|| rx.run(&stop).unwrap());
            let t = transmit(cfg, dest, &stop).unwrap();
            (t, h.join().unwrap())
        })
    }

    #[test]
    fn tcp_transfer_counts_every_byte() {
        let mut cfg = Config::new(Proto::Tcp);
        cfg.buflen = 10_000;
        cfg.nbuf = 300;
        cfg.sockbuf = Some(65536);
        let (t, r) = loopback_pair(&cfg);
        assert_eq!(t.bytes, 3_000_000);
        assert_eq!(r.bytes, 3_000_000);
        assert_eq!(r.ended_by, "eof");
        assert!(t.delivered_s.is_some() && r.mb_per_s > 0.0 && t.mb_per_s > 0.0);
        assert_eq!(r.sockbuf.requested, Some(65536));
        assert!(r.sockbuf.granted.unwrap() >= 65536);
        assert!(t.human().contains("3000000 bytes in"));
    }

    #[test]
    fn udp_transfer_at_a_modest_rate_loses_nothing() {
        let mut cfg = Config::new(Proto::Udp);
        cfg.buflen = 1000;
        cfg.nbuf = 500;
        cfg.rate = Rate::Packets(20_000.0);
        // Room for the whole transfer, so a receiver thread starved by parallel tests loses nothing.
        cfg.sockbuf = Some(4 << 20);
        let (t, r) = loopback_pair(&cfg);
        assert_eq!(t.datagrams, Some(500));
        assert_eq!(r.datagrams, Some(500));
        assert_eq!(r.sent_bytes, Some(500_000));
        assert_eq!(r.dropped_pct, Some(0.0));
        assert_eq!(r.ended_by, "end marker");
        assert!(r.human().contains("0.00 % data dropped"));
    }

    #[test]
    fn markers_from_a_stranger_neither_start_nor_end_a_run() {
        let mut cfg = Config::new(Proto::Udp);
        cfg.buflen = 1000;
        cfg.nbuf = 200;
        cfg.rate = Rate::Packets(20_000.0);
        cfg.sockbuf = Some(4 << 20);
        let rx = Receiver::bind(&cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
        let dest = rx.local_addr();
        // Before the transmitter starts, a stranger claims a run of 10 datagrams that ended.
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(&MarkerRepr::Start { datagrams: 10, bytes: 10_000 }.encode(), dest).unwrap();
        stranger.send_to(&MarkerRepr::End { datagrams: 10, bytes: 10_000 }.encode(), dest).unwrap();
        let stop = AtomicBool::new(false);
        let (t, r) = std::thread::scope(|s| {
            let h = s.spawn(|| rx.run(&stop).unwrap());
            let t = transmit(&cfg, dest, &stop).unwrap();
            (t, h.join().unwrap())
        });
        assert_eq!(t.datagrams, Some(200));
        assert_eq!(r.peer, t.local, "the stranger became the peer");
        assert_eq!(r.datagrams, Some(200));
        assert_eq!(r.sent_datagrams, Some(200));
        assert_eq!(r.ended_by, "end marker");
        assert_eq!(r.stray, Some(2), "the stranger's start and end markers");
    }
}
