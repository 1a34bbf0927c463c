//! The receiving end (ttcp -r): bind, then take one TCP stream to its end of stream, or one
//! UDP transfer bracketed by markers, counting what arrived and from whom.

use super::sockbuf::{apply_sockbuf, default_rcvbuf};
use super::{dropped_pct, pin, stopping, Config, MarkerRepr, Proto, Report, Role, SockBuf, POLL};
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use wirespeed::addr::bind_error;
use wirespeed::error::{Error, Result};
use wirespeed::sys;

/// Receive buffer of the UDP receiver: the largest datagram, whatever `-l` says, so that a
/// datagram longer than the receiver's `-l` is counted whole instead of silently truncated.
const UDP_RECV_BUF: usize = 65536;
enum Sock {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

/// A bound receiver: bind first, announce the address (port 0 picks one), then `run`.
pub struct Receiver {
    cfg: Config,
    sock: Sock,
    local: SocketAddr,
    sockbuf: SockBuf,
    notes: Vec<String>,
}

impl Receiver {
    /// Bind (and for TCP listen) on `addr`, with the socket buffer already set so that TCP's
    /// window scale, fixed at the handshake, matches it.
    pub fn bind(cfg: &Config, addr: SocketAddr) -> Result<Receiver> {
        cfg.validate()?;
        pin(cfg, "receiver")?;
        let mut notes = Vec::new();
        let (sock, fd) = match cfg.proto {
            Proto::Tcp => {
                let l = TcpListener::bind(addr).map_err(|e| match e.kind() {
                    ErrorKind::AddrInUse => Error::busy(format!(
                        "TCP port {} is already in use on {} (another receiver? `ss -tlpn 'sport = :{}'` shows who): stop it or choose another -p",
                        addr.port(),
                        addr.ip(),
                        addr.port()
                    )),
                    _ => bind_error(addr, e),
                })?;
                let fd = l.as_raw_fd();
                (Sock::Tcp(l), fd)
            }
            Proto::Udp => {
                let u = UdpSocket::bind(addr).map_err(|e| bind_error(addr, e))?;
                let fd = u.as_raw_fd();
                (Sock::Udp(u), fd)
            }
        };
        let sockbuf = match cfg.sockbuf {
            Some(b) => apply_sockbuf(fd, b, true, &mut notes)?,
            None => default_rcvbuf(fd, cfg.proto),
        };
        let local = match &sock {
            Sock::Tcp(l) => l.local_addr(),
            Sock::Udp(u) => u.local_addr(),
        }
        .map_err(|e| Error::io(format!("cannot read the bound address: {e}")))?;
        Ok(Receiver { cfg: cfg.clone(), sock, local, sockbuf, notes })
    }

    /// The address bound (with the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Receive one transfer and report it. Ends at EOF (TCP), the end marker or `timeout` of
    /// silence (UDP), or when `stop` is set (then the report covers what arrived).
    pub fn run(self, stop: &AtomicBool) -> Result<Report> {
        let Receiver { cfg, sock, local, sockbuf, notes } = self;
        let mut rep = Report::new(Role::Receive, &cfg, local, sockbuf);
        rep.notes = notes;
        match sock {
            Sock::Tcp(l) => receive_tcp(&cfg, l, &mut rep, stop)?,
            Sock::Udp(u) => receive_udp(&cfg, u, &mut rep, stop)?,
        }
        Ok(rep)
    }
}

fn receive_tcp(cfg: &Config, listener: TcpListener, rep: &mut Report, stop: &AtomicBool) -> Result<()> {
    // A blocking accept on a helper thread, so that the clock starts the moment the
    // connection is there (a polled accept would start it late and flatter a short run),
    // while this thread still notices Ctrl-C (std's accept retries EINTR).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = listener.accept();
        let _ = tx.send((r, sys::monotonic_ns(), sys::process_cpu_ns()));
    });
    let (accepted, t0, cpu0) = loop {
        match rx.recv_timeout(POLL) {
            Ok(x) => break x,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if stopping(stop) {
                    rep.ended_by = "signal".into();
                    rep.notes.push("stopped before a transmitter connected".into());
                    return Ok(());
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::io("the accepting thread ended without a connection"))
            }
        }
    };
    let (mut stream, peer) = accepted.map_err(|e| Error::failed(format!("accept failed: {e}")))?;
    rep.peer = peer.to_string();
    let setup = |e: std::io::Error| Error::failed(format!("cannot set up the connection: {e}"));
    stream.set_nonblocking(false).map_err(setup)?;
    stream.set_read_timeout(Some(POLL)).map_err(setup)?;
    let mut buf = vec![0u8; cfg.buflen];
    let t_end = loop {
        match stream.read(&mut buf) {
            Ok(0) => {
                rep.calls += 1;
                rep.ended_by = "eof".into();
                break sys::monotonic_ns();
            }
            Ok(n) => {
                rep.calls += 1;
                rep.bytes += n as u64;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if stopping(stop) {
                    rep.ended_by = "signal".into();
                    break sys::monotonic_ns();
                }
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                rep.ended_by = "reset".into();
                rep.notes.push("the transmitter reset the connection before its end of stream".into());
                break sys::monotonic_ns();
            }
            Err(e) => return Err(Error::peer(format!("read from {peer} failed after {} bytes: {e}", rep.bytes))),
        }
    };
    let cpu = sys::process_cpu_ns().saturating_sub(cpu0);
    if rep.sockbuf.requested.is_none() {
        rep.sockbuf.at_end = sys::rcvbuf(stream.as_raw_fd()).ok().map(|v| v as u64);
    }
    rep.finish_timing(t_end.saturating_sub(t0), cpu);
    Ok(())
}

/// A start marker seen before any data: (source, planned datagrams and bytes, arrival time
/// and process CPU time then).
type StartSeen = (SocketAddr, (u64, u64), (u64, u64));

fn receive_udp(cfg: &Config, sock: UdpSocket, rep: &mut Report, stop: &AtomicBool) -> Result<()> {
    sock.set_read_timeout(Some(POLL)).map_err(|e| Error::failed(format!("cannot set up the socket: {e}")))?;
    let mut buf = vec![0u8; UDP_RECV_BUF.max(cfg.buflen)];
    let mut peer: Option<SocketAddr> = None;
    // Timer: from the start marker (or the first data when it was lost) to the last data.
    let mut start: Option<(u64, u64)> = None;
    let mut last_data: Option<u64> = None;
    let mut plan: Option<(u64, u64)> = None;
    let mut end: Option<(u64, u64)> = None;
    // A start marker before any data: its source, plan and arrival. Markers alone never choose
    // the peer (anyone can send one); the first data datagram does, and a start marker counts
    // only when it came from there.
    let mut candidate: Option<StartSeen> = None;
    let mut unmatched_end: Option<(SocketAddr, u64)> = None;
    let (mut datagrams, mut stray) = (0u64, 0u64);
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                let now = sys::monotonic_ns();
                if peer.is_some_and(|p| p != from) {
                    stray += 1;
                    continue;
                }
                match MarkerRepr::decode(&buf[..n]) {
                    Some(MarkerRepr::Start { datagrams: d, bytes: b }) => {
                        if peer.is_some() {
                            plan.get_or_insert((d, b));
                        } else if candidate.replace((from, (d, b), (now, sys::process_cpu_ns()))).is_some() {
                            stray += 1; // a start marker that no data followed
                        }
                        rep.calls += 1;
                    }
                    Some(MarkerRepr::End { datagrams: d, bytes: b }) => {
                        // Only the transmitter's own end settles the run: from the peer whose
                        // data arrived, claiming at least what arrived. An end with no data
                        // before it (a stranger's, or a transmitter whose data was all lost)
                        // only starts the silence timer.
                        if peer != Some(from) || d < datagrams || b < rep.bytes {
                            stray += 1;
                            unmatched_end.get_or_insert((from, now));
                            continue;
                        }
                        rep.calls += 1;
                        end = Some((d, b));
                        start.get_or_insert((now, sys::process_cpu_ns()));
                        rep.ended_by = "end marker".into();
                        break;
                    }
                    None => {
                        if peer.is_none() {
                            peer = Some(from);
                            match candidate.take() {
                                Some((c, p, t)) if c == from => {
                                    plan = Some(p);
                                    start = Some(t);
                                }
                                Some(_) => stray += 1,
                                None => {}
                            }
                        }
                        rep.calls += 1;
                        start.get_or_insert((now, sys::process_cpu_ns()));
                        datagrams += 1;
                        rep.bytes += n as u64;
                        last_data = Some(now);
                    }
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if stopping(stop) {
                    rep.ended_by = "signal".into();
                    break;
                }
                if let Some(since) = last_data.or(start.map(|s| s.0)).or(unmatched_end.map(|u| u.1)) {
                    if sys::monotonic_ns().saturating_sub(since) > cfg.timeout.as_nanos() as u64 {
                        rep.ended_by = "timeout".into();
                        rep.notes.push(format!(
                            "no end marker arrived: ended after {:.1} s without data",
                            cfg.timeout.as_secs_f64()
                        ));
                        if let (Some((from, _)), 0) = (unmatched_end, datagrams) {
                            rep.notes.push(format!(
                                "an end marker came from {from}, but none of its data arrived (all lost, or the marker was not a transmitter's): ignored"
                            ));
                        }
                        break;
                    }
                }
            }
            Err(e) => return Err(Error::failed(format!("receive failed after {datagrams} datagrams: {e}"))),
        }
    }
    let cpu_end = sys::process_cpu_ns();
    rep.peer = peer.map(|p| p.to_string()).unwrap_or_default();
    rep.datagrams = Some(datagrams);
    rep.stray = Some(stray);
    let sent = match (end, plan) {
        (Some((d, b)), _) => Some((d, b, "transmitter's end marker".to_string())),
        (None, Some((d, b))) => {
            rep.notes.push("the end marker was lost: the sent counts are the transmitter's plan".into());
            Some((d, b, "start marker (the transmitter's plan)".to_string()))
        }
        // Stopped before anything came: there is no transfer to judge, so no share dropped.
        (None, None) if datagrams == 0 => {
            rep.notes.push("nothing arrived".into());
            None
        }
        (None, None) => {
            rep.notes.push(format!(
                "no marker arrived: the sent counts are this receiver's -n x -l ({} x {})",
                cfg.nbuf, cfg.buflen
            ));
            Some((
                cfg.nbuf,
                cfg.nbuf.saturating_mul(cfg.buflen as u64),
                "receiver's -n x -l (no marker arrived)".into(),
            ))
        }
    };
    if let Some((sd, sb, from)) = sent {
        rep.sent_datagrams = Some(sd);
        rep.sent_bytes = Some(sb);
        rep.sent_from = Some(from);
        rep.dropped_pct = Some(dropped_pct(sb, rep.bytes));
        if rep.bytes > sb {
            rep.notes.push("more bytes arrived than were sent: was another transmitter using this port?".into());
        }
    }
    let (t0, cpu0) = start.unwrap_or((0, cpu_end));
    let real = last_data.map(|l| l.saturating_sub(t0)).unwrap_or(0);
    rep.finish_timing(real, cpu_end.saturating_sub(cpu0));
    Ok(())
}
