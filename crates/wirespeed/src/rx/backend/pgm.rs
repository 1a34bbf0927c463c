//! The PGM backend (`--transport pgm`): a UDP socket carrying PGM packets, a
//! [`Receiver`](crate::pgm::receiver::Receiver) that repairs what the path dropped, and the
//! repaired stream handed to the capture in sequence order, so that the ledger, the ring and
//! the files see exactly what the source sent, in order.
//!
//! Unlike the other backends this one also sends: the NAKs, from the capture thread, between
//! receive calls (a NAK is due only where a packet is missing). The socket's receive timeout
//! is short (1 ms) so that NAK timers fire on time when nothing arrives.

use super::udp::UdpEndpoint;
use super::{Backend, Bound, Member, RecvConfig};
use crate::error::{Error, Result};
use crate::pgm::receiver::{Receiver, ReceiverStats};
use crate::sys;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The fields of [`ReceiverStats`] the backend publishes, in declaration order.
const FIELDS: usize = 20;

/// The receiver's counters where the report (after the run) and the live progress lines can
/// read them: relaxed stores after each receive call, no lock.
#[derive(Debug, Default)]
pub struct PgmLive {
    v: [AtomicU64; FIELDS],
    /// Sequence numbers still being recovered when last published.
    pending: AtomicU64,
}

impl PgmLive {
    fn store(&self, s: &ReceiverStats, pending: u32) {
        for (a, v) in self.v.iter().zip(to_array(s)) {
            a.store(v, Ordering::Relaxed);
        }
        self.pending.store(pending as u64, Ordering::Relaxed);
    }

    /// The counters as last published.
    pub fn load(&self) -> (ReceiverStats, u64) {
        let mut a = [0u64; FIELDS];
        for (x, v) in a.iter_mut().zip(&self.v) {
            *x = v.load(Ordering::Relaxed);
        }
        (from_array(a), self.pending.load(Ordering::Relaxed))
    }
}

fn to_array(s: &ReceiverStats) -> [u64; FIELDS] {
    [
        s.sessions,
        s.odata,
        s.rdata,
        s.repaired,
        s.repair_max_ns,
        s.repair_sum_ns,
        s.naks_sent,
        s.nak_packets,
        s.ncfs,
        s.suppressed,
        s.unrecoverable,
        s.duplicates,
        s.spms,
        s.malformed,
        s.foreign,
        s.ignored,
        s.nak_unsent,
        s.ncf_packets,
        s.unrecoverable_at_end,
        s.beyond_data,
    ]
}

fn from_array(a: [u64; FIELDS]) -> ReceiverStats {
    ReceiverStats {
        sessions: a[0],
        odata: a[1],
        rdata: a[2],
        repaired: a[3],
        repair_max_ns: a[4],
        repair_sum_ns: a[5],
        naks_sent: a[6],
        nak_packets: a[7],
        ncfs: a[8],
        suppressed: a[9],
        unrecoverable: a[10],
        duplicates: a[11],
        spms: a[12],
        malformed: a[13],
        foreign: a[14],
        ignored: a[15],
        nak_unsent: a[16],
        ncf_packets: a[17],
        unrecoverable_at_end: a[18],
        beyond_data: a[19],
    }
}

/// The PGM part of a receive report: what was repaired, how, and what could not be.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PgmRecvReport {
    /// The receiver's counters.
    #[serde(flatten)]
    pub stats: ReceiverStats,
    /// Sequence numbers still being recovered when the run ended (neither delivered nor
    /// declared lost: the ledger counts what they held as lost, since it never arrived).
    pub pending_at_end: u64,
    /// Mean wait of a repaired packet, from the gap being noticed to the repair, ns.
    pub repair_mean_ns: f64,
}

impl PgmRecvReport {
    /// The report's PGM lines, under the ledger: repairs beside the loss they prevented.
    pub fn human(&self, o: &mut String) {
        use crate::units::{nanos, thousands};
        use std::fmt::Write;
        let s = &self.stats;
        let _ = writeln!(
            o,
            "  pgm: {} session(s), {} ODATA + {} RDATA; repaired {} (wait mean {}, max {}) with {} NAK(s) in {} packet(s), {} NCF packet(s) heard naming {} sequence number(s), {} NAK(s) suppressed",
            s.sessions,
            thousands(s.odata),
            thousands(s.rdata),
            thousands(s.repaired),
            nanos(self.repair_mean_ns),
            nanos(s.repair_max_ns as f64),
            thousands(s.naks_sent),
            thousands(s.nak_packets),
            thousands(s.ncf_packets),
            thousands(s.ncfs),
            thousands(s.suppressed),
        );
        let _ = writeln!(
            o,
            "  pgm: unrecoverable {} (given up after the retries or behind the source's window; in the ledger's lost{}), still pending at the end {}",
            thousands(s.unrecoverable),
            if s.unrecoverable_at_end > 0 {
                format!(", {} of them after the last datagram", thousands(s.unrecoverable_at_end))
            } else {
                String::new()
            },
            thousands(self.pending_at_end)
        );
        if s.malformed + s.foreign + s.ignored + s.nak_unsent + s.duplicates + s.beyond_data > 0 {
            let _ = writeln!(
                o,
                "  pgm: ignored {} malformed packet(s), {} for a known session from another address or port than its source's (forged or misrouted), {} for another data-destination port or session, {} duplicate(s), {} control packet(s) claiming more than the source's data showed (the excess); {} NAK(s) could not be sent (no SPM named the source yet)",
                thousands(s.malformed),
                thousands(s.foreign),
                thousands(s.ignored),
                thousands(s.duplicates),
                thousands(s.beyond_data),
                thousands(s.nak_unsent)
            );
        }
    }
}

impl PgmEndpoint {
    /// The report's PGM part, from the counters the capture published last.
    pub fn report(&self) -> PgmRecvReport {
        let (stats, pending_at_end) = self.live.load();
        let repair_mean_ns =
            if stats.repaired > 0 { stats.repair_sum_ns as f64 / stats.repaired as f64 } else { 0.0 };
        PgmRecvReport { stats, pending_at_end, repair_mean_ns }
    }
}

/// A bound UDP socket for PGM, and where its receiver's counters are published.
#[derive(Debug)]
pub struct PgmEndpoint {
    udp: UdpEndpoint,
    naks: UdpSocket,
    /// The receiver's counters.
    pub live: Arc<PgmLive>,
    max_tsdu: usize,
    /// The first session's window, made with the endpoint and taken by the capture thread.
    window: std::sync::Mutex<Option<Box<crate::pgm::rxw::RxWindow>>>,
    /// The port bound (the kernel's choice when port 0 was asked): NAKs go to it at sources.
    port: u16,
}

/// PGM over UDP: receive, repair, deliver in order.
pub struct PgmBackend {
    fd: std::os::fd::RawFd,
    sock: Option<UdpSocket>,
    batch: sys::RecvBatch,
    rx: Receiver,
    live: Arc<PgmLive>,
    rxq_ovfl: Option<u64>,
    truncated: u64,
    /// Some sequence number was given up (as last published).
    gave_up: bool,
}

impl Backend for PgmBackend {
    const NAME: &'static str = "pgm";
    type Endpoint = PgmEndpoint;

    fn open(cfg: &RecvConfig, member: Member) -> Result<(PgmEndpoint, Bound)> {
        if member.count > 1 {
            return Err(Error::invalid(
                "--transport pgm runs one capture thread (a session's window and NAKs live on one thread): drop --threads",
            ));
        }
        if !cfg.listen.is_ipv4() {
            return Err(Error::param("transport", format!(
                "pgm listens on IPv4 here ({} is IPv6): give an IPv4 address, group or 0.0.0.0:PORT",
                crate::addr::shown(cfg.listen)
            )));
        }
        cfg.pgm.validate().map_err(Error::invalid)?;
        let (udp, mut bound) = UdpEndpoint::bind(cfg)?;
        let port = bound.local_addr.map_or(cfg.listen.port(), |a| a.port());
        // NAKs leave by a socket of their own, bound to no address: the receiving socket may
        // be bound to the group, and a unicast datagram from a group address is dropped on
        // the way (OpenPGM sends from a separate socket too).
        let naks = UdpSocket::bind("0.0.0.0:0")
            .map_err(|e| Error::io(format!("cannot open the socket PGM NAKs are sent from: {e}")))?;
        sys::set_rcvtimeo(udp.fd(), Duration::from_millis(1))
            .map_err(|e| Error::failed(format!("cannot set a receive timeout: {e}")))?;
        bound.notes.push(format!(
            "PGM: data-destination port {}, receive window {} sequence numbers, NAK back-off {:?}, repeat {:?}, repair wait {:?}, {} retries",
            cfg.pgm.dport, cfg.pgm.window, cfg.pgm.nak_backoff, cfg.pgm.nak_repeat, cfg.pgm.nak_rdata, cfg.pgm.nak_retries
        ));
        // The first session's window, faulted in now, before the socket is said to listen.
        let window = std::sync::Mutex::new(Some(Box::new(Receiver::window_for(&cfg.pgm, cfg.pgm_max_tsdu))));
        let live = Arc::new(PgmLive::default());
        Ok((PgmEndpoint { udp, naks, live, max_tsdu: cfg.pgm_max_tsdu, port, window }, bound))
    }

    fn start(endpoint: &PgmEndpoint, cfg: &RecvConfig) -> Self {
        let seed = sys::monotonic_ns() ^ u64::from(std::process::id());
        let (group, port, max) = (cfg.listen.ip(), endpoint.port, endpoint.max_tsdu);
        let made = endpoint.window.lock().ok().and_then(|mut w| w.take());
        let rx = match made {
            Some(w) => Receiver::with_window(&cfg.pgm, group, port, max, seed, *w),
            None => Receiver::new(&cfg.pgm, group, port, max, seed),
        };
        PgmBackend {
            fd: endpoint.udp.fd(),
            // try_clone fails only when the process is out of descriptors: then every NAK
            // is counted as not sent, and the window gives the packets up on its timers.
            sock: endpoint.naks.try_clone().ok(),
            batch: sys::RecvBatch::new(cfg.batch, 65536),
            rx,
            live: endpoint.live.clone(),
            rxq_ovfl: endpoint.udp.rxq_ovfl().then_some(0),
            truncated: 0,
            gave_up: false,
        }
    }

    fn recv<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, mut f: F) -> io::Result<usize> {
        let n = match self.batch.recv(self.fd, false) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                0
            }
            Err(e) => return Err(e),
        };
        let now = sys::monotonic_ns();
        let mut early = |d: &[u8], src: SocketAddr| f(d, Some(src));
        for i in 0..n {
            let meta = self.batch.meta(i);
            if let Some(d) = meta.rxq_ovfl {
                self.rxq_ovfl = Some(d as u64);
            }
            if meta.truncated {
                self.truncated += 1;
                continue;
            }
            if let Some(src) = meta.src {
                self.rx.on_packet(self.batch.data(i), src, now, &mut early);
            }
        }
        let sock = self.sock.as_ref();
        self.rx.service(now, &mut |pkt: &[u8], to: SocketAddr| match sock {
            Some(s) => s.send_to(pkt, to).map(|_| ()),
            None => Err(io::ErrorKind::NotConnected.into()),
        });
        self.rx.deliver(&mut |d: &[u8], src: SocketAddr| f(d, Some(src)));
        let st = self.rx.stats();
        self.gave_up = st.unrecoverable > 0;
        self.live.store(&st, self.rx.pending());
        Ok(n)
    }

    fn kernel_drops(&self) -> Option<u64> {
        self.rxq_ovfl
    }

    fn end_unproven(&self) -> bool {
        // A sqn given up may have been the end-of-stream message: `--once` then ends on
        // silence rather than wait for an end that can no longer come.
        self.gave_up
    }

    fn drain<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, mut f: F) {
        // The run is over: what is still missing is given up, and the data held behind it is
        // handed on, so the ledger sees every gap rather than stopping at the first one.
        self.rx.abandon(&mut |d: &[u8], src: SocketAddr| f(d, Some(src)));
        self.live.store(&self.rx.stats(), self.rx.pending());
    }

    fn truncated(&self) -> u64 {
        self.truncated
    }
}
