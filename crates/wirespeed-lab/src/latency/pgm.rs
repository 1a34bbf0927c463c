//! Seed 003's own measurement: round trips over PGM sessions, a probe out on one session and
//! its reflection back on another, the reflector an application that receives and re-sends.
//!
//! The pinger is a PGM source towards the reflector's port P and a PGM receiver on port
//! P + 1 (`--reply-port`); the reflector is a receiver on P and a source back to each
//! pinger's address at P + 1. Each end's source takes NAKs on its own address at the port it
//! sends to, so in two partitions (or two hosts) nothing collides; on one host the two ends
//! need two addresses (127.0.0.1 and 127.0.0.2).
//!
//! A lost probe or reply is repaired like any PGM data, so it comes late instead of never:
//! the heat map shows what the repair costs in latency, which is what seed 003 saw above the
//! network's capacity.

use serde::Serialize;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use wirespeed::error::{Error, Result};
use wirespeed::pgm::receiver::{Receiver, ReceiverStats};
use wirespeed::pgm::source::{Source, SourceStats};
use wirespeed::pgm::{packet, PgmConfig, Tsi};
use wirespeed::sys;

/// The largest probe a PGM reflector takes (its receive window holds this much per sequence
/// number): ping's --size up to a jumbo frame's payload.
pub const MAX_PROBE: usize = 9000;

/// Most NAK packets read per pump.
const NAKS_PER_PUMP: usize = 64;

/// One direction's PGM counters, for ping's and reflect's reports.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct PgmLink {
    /// What this end sent as a source (probes, or reflections).
    pub source: SourceStats,
    /// What this end received as a receiver (replies, or probes).
    pub receiver: ReceiverStats,
}

impl PgmLink {
    /// One line for the human summaries.
    pub fn line(&self) -> String {
        let why = self.source.implausible_naks();
        let warn = if why.is_empty() {
            String::new()
        } else {
            format!("; WARNING: the NAKs asked for more than receivers can have lost ({})", why.join("; "))
        };
        format!(
            "pgm: sent {} ODATA + {} RDATA ({} NAK(s) answered); received {} ODATA + {} RDATA, repaired {}, unrecoverable {}, {} NAK(s) sent{warn}",
            self.source.odata,
            self.source.rdata,
            self.source.nak_packets,
            self.receiver.odata,
            self.receiver.rdata,
            self.receiver.repaired,
            self.receiver.unrecoverable,
            self.receiver.nak_packets
        )
    }
}

/// A PGM source on a connected data socket, with the socket its NAKs come to.
struct Out {
    data: UdpSocket,
    naks: UdpSocket,
    source: Source,
    pkt: Vec<u8>,
    buf: Vec<u8>,
}

impl Out {
    /// A session to `dest` from `from` (an address of this host; None: the route's choice).
    fn open(cfg: &PgmConfig, dest: SocketAddr, max_tsdu: usize, from: Option<IpAddr>) -> Result<Out> {
        let any = SocketAddr::new(from.unwrap_or(IpAddr::from([0, 0, 0, 0])), 0);
        let data = UdpSocket::bind(any).map_err(|e| Error::io(format!("cannot open a UDP socket: {e}")))?;
        data.connect(dest).map_err(|e| Error::failed(format!("cannot reach {dest}: {e}")))?;
        let local = data.local_addr().map_err(|e| Error::io(format!("cannot read a socket's address: {e}")))?;
        let nla = cfg.nla.unwrap_or(local.ip());
        let at = SocketAddr::new(nla, dest.port());
        let naks = UdpSocket::bind(at).map_err(|e| {
            Error::failed(format!(
                "cannot bind the PGM NAK socket to {at}: {e} (on one host the two ends need two addresses, e.g. 127.0.0.1 and 127.0.0.2)"
            ))
        })?;
        naks.set_nonblocking(true).map_err(|e| Error::failed(format!("cannot make a socket non-blocking: {e}")))?;
        let seed = sys::realtime_ns() ^ u64::from(std::process::id()) ^ u64::from(local.port()).rotate_left(40);
        let tsi = Tsi { gsi: wirespeed::pgm::new_gsi(seed), sport: local.port().max(1) };
        let now = sys::monotonic_ns();
        let mut source = Source::new(cfg, tsi, nla, dest, max_tsdu, now);
        source.pace_repairs(cfg.repair_budget(max_tsdu), now);
        let fd = data.as_raw_fd();
        source.announce(&mut |p: &[u8]| sys::send_one(fd, p).map(|_| ()));
        Ok(Out { data, naks, source, pkt: vec![0u8; packet::DATA_HEADER_LEN + max_tsdu], buf: vec![0u8; 65536] })
    }

    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        let h = packet::DATA_HEADER_LEN;
        self.pkt[h..h + payload.len()].copy_from_slice(payload);
        let len = self.source.seal(&mut self.pkt, payload.len(), sys::monotonic_ns());
        let fd = self.data.as_raw_fd();
        match sys::send_one(fd, &self.pkt[..len]) {
            // A refusal reported now is an earlier datagram's ICMP (the peer's socket was closed
            // a moment: between two ping runs), not this one's: the packet is in the window and
            // must go out, or the next run's receiver would start after it and never ask.
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => sys::send_one(fd, &self.pkt[..len]).map(|_| ()),
            r => r.map(|_| ()),
        }
    }

    fn pump(&mut self, now: u64) {
        let fd = self.data.as_raw_fd();
        let mut send = |p: &[u8]| sys::send_one(fd, p).map(|_| ());
        for _ in 0..NAKS_PER_PUMP {
            match self.naks.recv_from(&mut self.buf) {
                Ok((n, from)) => self.source.on_packet(&self.buf[..n], from, now, &mut send),
                Err(_) => break,
            }
        }
        self.source.service(now, &mut send);
    }

    fn finish(&mut self) {
        let fd = self.data.as_raw_fd();
        self.source.finish(&mut |p: &[u8]| sys::send_one(fd, p).map(|_| ()));
    }
}

/// A PGM receiver on a bound socket, with the socket its NAKs leave by.
struct In {
    sock: UdpSocket,
    naks: UdpSocket,
    rx: Receiver,
    batch: sys::RecvBatch,
}

impl In {
    fn open(cfg: &PgmConfig, at: SocketAddr, max_tsdu: usize) -> Result<In> {
        let sock = UdpSocket::bind(at).map_err(|e| wirespeed::addr::bind_error(at, e))?;
        sock.set_nonblocking(true).map_err(|e| Error::failed(format!("cannot make a socket non-blocking: {e}")))?;
        let naks = UdpSocket::bind("0.0.0.0:0")
            .map_err(|e| Error::io(format!("cannot open the socket NAKs leave by: {e}")))?;
        // The port actually bound (port 0 asks the kernel for one): NAKs go to it at the source.
        let port = sock.local_addr().map(|a| a.port()).unwrap_or(at.port());
        let seed = sys::monotonic_ns() ^ u64::from(port);
        Ok(In {
            sock,
            naks,
            rx: Receiver::new(cfg, at.ip(), port, max_tsdu, seed),
            batch: sys::RecvBatch::new(64, max_tsdu.max(2048) + packet::DATA_HEADER_LEN + 64),
        })
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Read what is waiting (without blocking), send the NAKs that are due, and hand every
    /// datagram now in order to `f`; returns how many datagrams were read.
    fn poll<F: FnMut(&[u8], SocketAddr)>(&mut self, now: u64, f: &mut F) -> usize {
        let n = self.batch.recv(self.sock.as_raw_fd(), true).unwrap_or(0);
        for i in 0..n {
            let meta = self.batch.meta(i);
            if let (Some(src), false) = (meta.src, meta.truncated) {
                self.rx.on_packet(self.batch.data(i), src, now, f);
            }
        }
        let naks = &self.naks;
        self.rx.service(now, &mut |p: &[u8], to: SocketAddr| naks.send_to(p, to).map(|_| ()));
        self.rx.deliver(f);
        n
    }
}

/// The pinger's two sessions: probes out to the reflector, replies back.
pub struct PingWire {
    out: Out,
    inn: In,
}

impl PingWire {
    /// Probes to `target` (the reflector's PGM port), replies taken at `reply_port` on every
    /// local address.
    pub fn open(cfg: &PgmConfig, target: SocketAddr, reply_port: u16, size: usize) -> Result<PingWire> {
        check(cfg, target)?;
        if size > MAX_PROBE {
            return Err(Error::invalid(format!(
                "--transport pgm probes are at most {MAX_PROBE} bytes (the reflector's window holds that much per probe): use a smaller --size"
            )));
        }
        let out = Out::open(cfg, target, size, None)?;
        // Replies are taken on the address the probes leave from (not every address): on one
        // host the reflector's own NAK socket binds the same port on its address.
        let local = out.data.local_addr().map(|a| a.ip()).unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let inn = In::open(cfg, SocketAddr::new(local, reply_port), size)?;
        Ok(PingWire { out, inn })
    }

    /// The socket replies arrive on (to wait for).
    pub fn fd(&self) -> RawFd {
        self.inn.fd()
    }

    /// Send one probe.
    pub fn send(&mut self, probe: &[u8]) -> io::Result<()> {
        self.out.send(probe)
    }

    /// Serve both sessions (NAKs in, repairs out, SPMs; replies in, NAKs out) and hand each
    /// reply now in order to `f`.
    pub fn poll<F: FnMut(&[u8], SocketAddr)>(&mut self, f: &mut F) -> usize {
        let now = sys::monotonic_ns();
        self.out.pump(now);
        self.inn.poll(now, f)
    }

    /// Close the probe session; the counters of both.
    pub fn finish(mut self) -> PgmLink {
        self.out.finish();
        PgmLink { source: *self.out.source.stats(), receiver: self.inn.rx.stats() }
    }
}

fn check(cfg: &PgmConfig, addr: SocketAddr) -> Result<()> {
    cfg.validate().map_err(Error::invalid)?;
    if !addr.is_ipv4() || addr.ip().is_multicast() {
        return Err(Error::invalid(format!(
            "--transport pgm ping and reflect run unicast IPv4 sessions here ({addr} is not an IPv4 host address)"
        )));
    }
    if addr.port() == u16::MAX {
        return Err(Error::invalid("the PGM port must leave room for the reply port above it: use a port below 65535"));
    }
    Ok(())
}

/// What `reflect --transport pgm` did.
#[derive(Clone, Debug, Serialize)]
pub struct PgmReflectReport {
    /// Schema name for scripts.
    pub schema: &'static str,
    /// Where it listened.
    pub listen: String,
    /// The port reflections were sent to, at each pinger's address.
    pub reply_port: u16,
    /// Probes delivered by the PGM receiver (in order, repaired where needed).
    pub received: u64,
    /// Sent back.
    pub reflected: u64,
    /// Not sent back: a second pinger (one is served), or a send that failed.
    pub not_reflected: u64,
    /// The pinger served, if any.
    pub client: Option<String>,
    /// Both sessions' counters.
    pub pgm: PgmLink,
    /// Wall time, seconds.
    pub seconds: f64,
    /// CPU of the reflecting thread per probe, ns.
    pub cpu_ns_per_datagram: f64,
}

impl PgmReflectReport {
    /// The summary a person reads.
    pub fn human(&self) -> String {
        format!(
            "reflected {} of {} probes over PGM in {:.1} s to {} (reply port {}); {:.0} ns CPU per probe\n  {}\n",
            self.reflected,
            self.received,
            self.seconds,
            self.client.as_deref().unwrap_or("nobody"),
            self.reply_port,
            self.cpu_ns_per_datagram,
            self.pgm.line()
        )
    }
}

/// The reflector: a PGM receiver on `listen`, each probe sent straight back on a PGM session
/// to its pinger's address at `reply_port` (the first pinger's; others are counted, not
/// answered: one session back is one transmit window).
pub struct ReflectWire {
    cfg: PgmConfig,
    inn: In,
    out: Option<(IpAddr, Out)>,
    reply_port: u16,
    size: usize,
    listen: SocketAddr,
}

impl ReflectWire {
    /// Bind the receiving side (errors reach the user before the run starts).
    /// `reply_port` None: the bound port + 1 (ping's default).
    pub fn bind(cfg: &PgmConfig, listen: SocketAddr, reply_port: Option<u16>, size: usize) -> Result<ReflectWire> {
        let at = if listen.ip().is_unspecified() { SocketAddr::from(([0, 0, 0, 0], listen.port())) } else { listen };
        if !at.ip().is_unspecified() {
            check(cfg, at)?;
        } else {
            cfg.validate().map_err(Error::invalid)?;
        }
        let inn = In::open(cfg, at, size)?;
        let listen = inn.sock.local_addr().unwrap_or(at);
        let reply_port = match reply_port {
            Some(p) => p,
            None if listen.port() < u16::MAX => listen.port() + 1,
            None => {
                return Err(Error::invalid(
                    "the reply port defaults to the listening port + 1: listen below 65535 or give --reply-port",
                ))
            }
        };
        Ok(ReflectWire { cfg: cfg.clone(), inn, out: None, reply_port, size, listen })
    }

    /// Where reflections go, at the pinger's address.
    pub fn reply_port(&self) -> u16 {
        self.reply_port
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listen
    }

    /// Reflect until `stop`, the duration or the count.
    pub fn run(
        mut self,
        stop: &std::sync::atomic::AtomicBool,
        duration: Option<std::time::Duration>,
        count: Option<u64>,
    ) -> Result<PgmReflectReport> {
        use std::sync::atomic::Ordering;
        let t0 = sys::monotonic_ns();
        let cpu0 = sys::thread_cpu_ns();
        let end = duration.map(|d| t0 + d.as_nanos() as u64);
        let (mut received, mut reflected, mut not_reflected) = (0u64, 0u64, 0u64);
        let mut failed: Option<Error> = None;
        let (cfg, reply_port, size, listen_ip) = (&self.cfg, self.reply_port, self.size, self.listen.ip());
        loop {
            let now = sys::monotonic_ns();
            if stop.load(Ordering::Relaxed) || end.is_some_and(|e| now >= e) || count.is_some_and(|c| received >= c) {
                break;
            }
            if let Some((_, o)) = self.out.as_mut() {
                o.pump(now);
            }
            let _ = sys::poll_readable(self.inn.fd(), Some(1_000_000));
            let out = &mut self.out;
            self.inn.poll(sys::monotonic_ns(), &mut |d: &[u8], src: SocketAddr| {
                received += 1;
                if out.is_none() && failed.is_none() {
                    let from = (!listen_ip.is_unspecified()).then_some(listen_ip);
                    match Out::open(cfg, SocketAddr::new(src.ip(), reply_port), size, from) {
                        Ok(o) => *out = Some((src.ip(), o)),
                        Err(e) => failed = Some(e),
                    }
                }
                let sent = match out.as_mut() {
                    Some((who, o)) if *who == src.ip() => o.send(d).is_ok(),
                    _ => false,
                };
                if sent {
                    reflected += 1;
                } else {
                    not_reflected += 1;
                }
            });
            if let Some(e) = failed.take() {
                return Err(e);
            }
        }
        // Stay a moment for NAKs of the last reflections.
        let linger_end = sys::monotonic_ns() + self.cfg.quiet.as_nanos() as u64;
        while sys::monotonic_ns() < linger_end {
            if let Some((_, o)) = self.out.as_mut() {
                o.pump(sys::monotonic_ns());
            }
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
        let client = self.out.as_ref().map(|(ip, _)| SocketAddr::new(*ip, self.reply_port).to_string());
        let source = match self.out.as_mut() {
            Some((_, o)) => {
                o.finish();
                *o.source.stats()
            }
            None => SourceStats::default(),
        };
        let cpu = sys::thread_cpu_ns() - cpu0;
        Ok(PgmReflectReport {
            schema: "wirespeed.reflect.pgm/1",
            listen: self.listen.to_string(),
            reply_port: self.reply_port,
            received,
            reflected,
            not_reflected,
            client,
            pgm: PgmLink { source, receiver: self.inn.rx.stats() },
            seconds: (sys::monotonic_ns() - t0) as f64 / 1e9,
            cpu_ns_per_datagram: if received > 0 { cpu as f64 / received as f64 } else { 0.0 },
        })
    }
}
