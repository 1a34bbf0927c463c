//! The transmitting end (ttcp -t): `nbuf` writes of `buflen` bytes of the pattern, paced or
//! as fast as the host goes; over UDP bracketed by a start marker and repeated end markers.

use super::sockbuf::{apply_sockbuf, default_sndbuf};
use super::{pace, pattern, pin, stopping, Config, MarkerRepr, Proto, Report, Role, END_MARKER_COPIES, END_MARKER_GAP};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use wirespeed::error::{Error, Result};
use wirespeed::sys;

fn connect_error(dest: SocketAddr, e: std::io::Error) -> Error {
    match e.kind() {
        ErrorKind::ConnectionRefused => Error::failed(format!(
            "connection refused by {dest}: start the receiver there first (`wirespeed ttcp -r -p {}`)",
            dest.port()
        )),
        ErrorKind::TimedOut | ErrorKind::WouldBlock => {
            Error::failed(format!("no answer from {dest} within 10 s: is the host up and the port open?"))
        }
        _ => Error::failed(format!("cannot connect to {dest}: {e}")),
    }
}

/// Send one transfer to a receiver at `dest` and report it; `stop` ends it early (the report
/// then covers what was sent).
pub fn transmit(cfg: &Config, dest: SocketAddr, stop: &AtomicBool) -> Result<Report> {
    cfg.validate()?;
    pin(cfg, "transmitter")?;
    match cfg.proto {
        Proto::Tcp => transmit_tcp(cfg, dest, stop),
        Proto::Udp => transmit_udp(cfg, dest, stop),
    }
}

fn transmit_tcp(cfg: &Config, dest: SocketAddr, stop: &AtomicBool) -> Result<Report> {
    let mut stream = TcpStream::connect_timeout(&dest, Duration::from_secs(10)).map_err(|e| connect_error(dest, e))?;
    let t0 = sys::monotonic_ns();
    let cpu0 = sys::process_cpu_ns();
    let mut notes = Vec::new();
    let fd = stream.as_raw_fd();
    let sockbuf = match cfg.sockbuf {
        Some(b) => apply_sockbuf(fd, b, false, &mut notes)?,
        None => default_sndbuf(Proto::Tcp),
    };
    if cfg.nodelay {
        stream.set_nodelay(true).map_err(|e| Error::failed(format!("cannot set TCP_NODELAY: {e}")))?;
    }
    let local = stream.local_addr().map_err(|e| Error::io(format!("cannot read the local address: {e}")))?;
    let mut rep = Report::new(Role::Transmit, cfg, local, sockbuf);
    rep.notes = notes;
    rep.peer = dest.to_string();
    let buf = pattern(cfg.buflen);
    let mut pacer = cfg.pacer(t0);
    rep.ended_by = "count".into();
    'bufs: for i in 0..cfg.nbuf {
        if stopping(stop) || !pace(&mut pacer, i, stop) {
            rep.ended_by = "signal".into();
            break;
        }
        let mut off = 0;
        while off < buf.len() {
            match stream.write(&buf[off..]) {
                Ok(n) => {
                    rep.calls += 1;
                    off += n;
                    rep.bytes += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {
                    if stopping(stop) {
                        rep.ended_by = "signal".into();
                        break 'bufs;
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                    return Err(Error::failed(format!(
                        "the receiver at {dest} closed the connection after {} bytes",
                        rep.bytes
                    )))
                }
                Err(e) => return Err(Error::io(format!("write to {dest} failed after {} bytes: {e}", rep.bytes))),
            }
        }
    }
    let t1 = sys::monotonic_ns();
    let cpu = sys::process_cpu_ns().saturating_sub(cpu0);
    rep.finish_timing(t1 - t0, cpu);
    // End of stream, then wait for the receiver to close: it does so only after reading it
    // all, which times delivery rather than the hand-over to this host's socket buffer.
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut sink = [0u8; 512];
    loop {
        match stream.read(&mut sink) {
            Ok(0) => {
                rep.delivered_s = Some((sys::monotonic_ns() - t0) as f64 / 1e9);
                break;
            }
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted && !stopping(stop) => continue,
            Err(_) => {
                rep.notes.push("the receiver did not close the connection within 10 s of the end of stream".into());
                break;
            }
        }
    }
    Ok(rep)
}

fn transmit_udp(cfg: &Config, dest: SocketAddr, stop: &AtomicBool) -> Result<Report> {
    let any: SocketAddr = if dest.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("static address");
    let sock = UdpSocket::bind(any).map_err(|e| Error::io(format!("cannot open a UDP socket: {e}")))?;
    // Connected, so that an ICMP port unreachable (no receiver) comes back as an error.
    sock.connect(dest).map_err(|e| Error::failed(format!("cannot address {dest}: {e}")))?;
    let mut notes = Vec::new();
    let sockbuf = match cfg.sockbuf {
        Some(b) => apply_sockbuf(sock.as_raw_fd(), b, false, &mut notes)?,
        None => default_sndbuf(Proto::Udp),
    };
    let local = sock.local_addr().map_err(|e| Error::io(format!("cannot read the local address: {e}")))?;
    let mut rep = Report::new(Role::Transmit, cfg, local, sockbuf);
    rep.notes = notes;
    rep.peer = dest.to_string();
    let no_receiver = || {
        Error::failed(format!(
            "nothing listens on {dest} (ICMP port unreachable): start `wirespeed ttcp -r -u -p {}` there first",
            dest.port()
        ))
    };
    let start = MarkerRepr::Start { datagrams: cfg.nbuf, bytes: cfg.nbuf.saturating_mul(cfg.buflen as u64) };
    let buf = pattern(cfg.buflen);
    let (mut datagrams, mut enobufs) = (0u64, 0u64);
    let t0 = sys::monotonic_ns();
    let cpu0 = sys::process_cpu_ns();
    send_retrying(&sock, &start.encode(), &mut enobufs, stop).map_err(|e| match e.kind() {
        ErrorKind::ConnectionRefused => no_receiver(),
        _ => Error::failed(format!("cannot send to {dest}: {e}")),
    })?;
    let mut pacer = cfg.pacer(t0);
    rep.ended_by = "count".into();
    for i in 0..cfg.nbuf {
        if stopping(stop) || !pace(&mut pacer, i, stop) {
            rep.ended_by = "signal".into();
            break;
        }
        match send_retrying(&sock, &buf, &mut enobufs, stop) {
            Ok(true) => {
                datagrams += 1;
                rep.calls += 1;
                rep.bytes += buf.len() as u64;
            }
            Ok(false) => {
                rep.ended_by = "signal".into();
                break;
            }
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Err(no_receiver()),
            Err(e) => return Err(Error::failed(format!("send to {dest} failed after {datagrams} datagrams: {e}"))),
        }
    }
    let t1 = sys::monotonic_ns();
    let cpu = sys::process_cpu_ns().saturating_sub(cpu0);
    rep.finish_timing(t1 - t0, cpu);
    let end = MarkerRepr::End { datagrams, bytes: rep.bytes }.encode();
    for k in 0..END_MARKER_COPIES {
        if k > 0 {
            std::thread::sleep(END_MARKER_GAP);
        }
        // After the first copy the receiver may be gone (it stops at the first it sees); the
        // port unreachable that comes back is expected then.
        let mut ignore = 0;
        let _ = send_retrying(&sock, &end, &mut ignore, &AtomicBool::new(false));
    }
    rep.datagrams = Some(datagrams);
    rep.enobufs = Some(enobufs);
    Ok(rep)
}

/// Send one datagram; on ENOBUFS (a full device queue) wait briefly and retry, as ttcp did.
/// Ok(false) when stopped.
fn send_retrying(sock: &UdpSocket, buf: &[u8], enobufs: &mut u64, stop: &AtomicBool) -> std::io::Result<bool> {
    loop {
        match sock.send(buf) {
            Ok(_) => return Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                *enobufs += 1;
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {
                if stopping(stop) {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
        if stopping(stop) {
            return Ok(false);
        }
    }
}
