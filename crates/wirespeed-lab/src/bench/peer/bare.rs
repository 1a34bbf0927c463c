//! The floor reference: a bare `recvmmsg` loop with no accounting. It counts datagrams of the
//! asked length and does nothing else with them (no source address kept, no payload check, no
//! ledger), so no receiver built on plain `recvmmsg` does less work per datagram. A receiver
//! that loses where this loop does not pays for its own work; the compare table's ratio says
//! how close to the floor it is.
//!
//! It runs as the hidden `wirespeed bench bare-recv` on the receiving side (so it can run in a
//! partition), fed by `wirespeed send`; its loss is the sender's `sent` minus its `received`.
//! With `--hold` it only owns a port and never reads: the packet-capture recorders need a
//! socket there, or every datagram would draw an ICMP port-unreachable.

use super::super::point::{PointConfig, Runner};
use super::tool::{self, Entry, Measured, Setup, Tool};
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wirespeed::{sys, Error, Result};

/// The registry entry.
pub const ENTRY: Entry = Entry { name: "bare", records: false, receives: true, check, make };

/// Datagrams per `recvmmsg` call (as the C loop it replaces).
pub const BATCH: usize = 64;

/// Room for any UDP/IPv4 datagram, so a longer one is seen as longer rather than cut to size.
const BUF_LEN: usize = 65536;

/// How long the loop waits after the last datagram before it stops by itself.
pub const IDLE: Duration = Duration::from_millis(1000);

fn check() -> Result<String> {
    Ok(format!("bare recvmmsg loop (wirespeed {})", env!("CARGO_PKG_VERSION")))
}

fn make(_setup: &Setup, version: String) -> Result<Box<dyn Tool>> {
    Ok(Box::new(Bare { version }))
}

/// What the loop reports, one JSON line on stdout.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BareReport {
    /// Datagrams of exactly the asked size.
    pub received: u64,
    /// Bytes of those datagrams.
    pub bytes: u64,
    /// Datagrams of any other size (e.g. the sender's end-of-stream messages).
    pub ignored: u64,
    /// First to last counted datagram, seconds.
    pub first_to_last_s: f64,
    /// The receive buffer the kernel granted (getsockopt: twice the usable size).
    pub rcvbuf: u64,
    /// The whole process's CPU time, ns (start-up and idle waits included).
    pub cpu_ns: u64,
    /// "idle" (no datagram for the idle time) or "signal".
    pub stopped_by: String,
}

/// Bind the loop's socket and ask for `rcvbuf` bytes of receive buffer (forced past
/// net.core.rmem_max when permitted); the granted size is returned.
pub fn bind(addr: SocketAddr, rcvbuf: u64) -> Result<(UdpSocket, u64)> {
    let sock = UdpSocket::bind(addr).map_err(|e| Error::failed(format!("cannot bind {addr}: {e}")))?;
    let fd = sock.as_raw_fd();
    let want = rcvbuf.min(i32::MAX as u64 / 2) as usize;
    let granted = sys::set_rcvbuf(fd, want, true)
        .or_else(|_| sys::set_rcvbuf(fd, want, false))
        .map_err(|e| Error::failed(format!("cannot set the receive buffer: {e}")))?;
    Ok((sock, granted as u64))
}

/// The loop: count datagrams of `size` bytes until `idle` passes without one (once one came)
/// or `stop` is raised. No allocation inside; one `recvmmsg` per batch.
pub fn receive(sock: &UdpSocket, size: usize, idle: Duration, stop: &AtomicBool) -> Result<BareReport> {
    let fd = sock.as_raw_fd();
    sys::set_rcvtimeo(fd, idle.min(Duration::from_millis(100)))
        .map_err(|e| Error::failed(format!("cannot set the receive timeout: {e}")))?;
    let mut batch = sys::RecvBatch::new(BATCH, BUF_LEN);
    let mut r = BareReport { rcvbuf: sys::rcvbuf(fd).unwrap_or(0) as u64, ..BareReport::default() };
    let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
    r.stopped_by = loop {
        if stop.load(Ordering::Relaxed) {
            break "signal".into();
        }
        match batch.recv(fd, false) {
            Ok(n) => {
                for i in 0..n {
                    let len = batch.data(i).len();
                    if len == size {
                        r.received += 1;
                        r.bytes += len as u64;
                    } else {
                        r.ignored += 1;
                    }
                }
                let now = Instant::now();
                first.get_or_insert(now);
                last = Some(now);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
                ) =>
            {
                if last.is_some_and(|t| t.elapsed() >= idle) {
                    break "idle".into();
                }
            }
            Err(e) => return Err(Error::failed(format!("recvmmsg failed: {e}"))),
        }
    };
    if let (Some(a), Some(b)) = (first, last) {
        r.first_to_last_s = (b - a).as_secs_f64();
    }
    r.cpu_ns = sys::process_cpu_ns();
    Ok(r)
}

struct Bare {
    version: String,
}

impl Tool for Bare {
    fn name(&self) -> &'static str {
        "bare"
    }
    fn version(&self) -> String {
        self.version.clone()
    }
    fn counts(&self) -> String {
        "bare: datagrams of the asked size its recvmmsg loop read (no check, no ledger); loss = wirespeed send's sent - that; rx ns/pkt is its whole process".into()
    }
    fn run(&self, runner: &Runner, cfg: &PointConfig, _seq: u32) -> Result<Option<Measured>> {
        if runner.stop_flag().load(Ordering::Relaxed) {
            return Ok(None);
        }
        let Some((proc, addr, command)) = tool::start_bare(runner, cfg.size, cfg.rcvbuf, false)? else {
            return Ok(None);
        };
        let Some(s) = tool::send(runner, cfg, addr, cfg.gso)? else {
            return Ok(None);
        };
        // It stops by itself IDLE after the last datagram.
        let exit = proc.finish(IDLE + Duration::from_secs(5))?;
        let (st, out, err) = (exit.status, exit.stdout, exit.stderr);
        if runner.stop_flag().load(Ordering::Relaxed) {
            return Ok(None);
        }
        if !st.success() {
            return Err(Error::failed(format!(
                "the bare receiver failed: {}",
                super::super::point::last_line(&err, &st)
            )));
        }
        let rep: BareReport = serde_json::from_str(out.trim())
            .map_err(|e| Error::failed(format!("the bare receiver printed no report ({e})")))?;
        let mut p = tool::tool_point(self, cfg, &s, rep.received, self.counts());
        p.recv_cpu_ns_per_packet = (rep.received > 0).then(|| rep.cpu_ns as f64 / rep.received as f64);
        p.own.insert("ignored".into(), rep.ignored.into());
        p.own.insert("rcvbuf_granted".into(), rep.rcvbuf.into());
        p.own.insert("first_to_last_s".into(), rep.first_to_last_s.into());
        p.own.insert("stopped_by".into(), rep.stopped_by.into());
        p.commands = vec![command, s.command];
        Ok(Some(Measured::Other(p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_counts_datagrams_of_the_size_and_stops_when_idle() {
        let (rx, granted) = bind("127.0.0.1:0".parse().unwrap(), 1 << 20).expect("bind");
        assert!(granted > 0);
        let to = rx.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..100 {
            tx.send_to(&[7u8; 64], to).unwrap();
        }
        tx.send_to(&[0u8; 80], to).unwrap();
        let stop = AtomicBool::new(false);
        let r = receive(&rx, 64, Duration::from_millis(200), &stop).expect("receive");
        assert_eq!((r.received, r.bytes, r.ignored), (100, 6400, 1));
        assert_eq!(r.stopped_by, "idle");
        let stop = AtomicBool::new(true);
        assert_eq!(receive(&rx, 64, Duration::from_millis(200), &stop).unwrap().stopped_by, "signal");
    }
}
