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

use crate::error::{bind_error, Error, Result};
use crate::pace::Pacer;
use crate::sys;
use crate::units::{Rate, MAX_UDP_PAYLOAD};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Schema name of one side's JSON report, so consumers can check what they parse.
pub const SCHEMA: &str = "wirespeed.ttcp/1";
/// ttcp's traditional port, so that habits and firewall rules carry over.
pub const DEFAULT_PORT: u16 = 5001;
/// ttcp's default buffer length (`-l`).
pub const DEFAULT_BUFLEN: usize = 8192;
/// ttcp's default number of buffers (`-n`).
pub const DEFAULT_NBUF: u64 = 2048;
/// Largest `-l`: the buffer is allocated whole, so an absurd value must be refused rather
/// than exhaust memory.
pub const MAX_BUFLEN: usize = 256 << 20;
/// Bytes of a UDP marker datagram.
pub const MARKER_LEN: usize = 24;
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
/// Receive buffer of the UDP receiver: the largest datagram, whatever `-l` says, so that a
/// datagram longer than the receiver's `-l` is counted whole instead of silently truncated.
const UDP_RECV_BUF: usize = 65536;
/// Marker magic: a NUL byte first (the data pattern is printable ASCII, so never NUL), then
/// a name, then the kind.
const MAGIC: &[u8; 7] = b"\0wsttcp";

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
            return Err(Error::Usage("-l (buffer length) must be at least 1 byte".into()));
        }
        if self.buflen > MAX_BUFLEN {
            return Err(Error::Usage(format!(
                "-l {} is larger than the {} MiB this ttcp allocates for one buffer: use a smaller -l and a larger -n",
                self.buflen,
                MAX_BUFLEN >> 20
            )));
        }
        if self.proto == Proto::Udp && self.buflen > MAX_UDP_PAYLOAD {
            return Err(Error::Usage(format!(
                "-l {} does not fit a UDP datagram (at most {MAX_UDP_PAYLOAD} bytes over IPv4): use -l {MAX_UDP_PAYLOAD} or less with -u",
                self.buflen
            )));
        }
        if self.nbuf == 0 {
            return Err(Error::Usage("-n (number of buffers) must be at least 1".into()));
        }
        if self.sockbuf == Some(0) {
            return Err(Error::Usage(
                "-b 0 is not a socket buffer size: give bytes like 65536 or 1M, or leave -b out for the kernel's default"
                    .into(),
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::Usage("--timeout must be longer than zero".into()));
        }
        Ok(())
    }

    fn pacer(&self, start_ns: u64) -> Option<Pacer> {
        // Writes are the paced unit; a backlog older than 1 s is given up, not burst out.
        self.rate.packets_per_sec(self.buflen).map(|pps| Pacer::new(pps, start_ns, 1_000_000_000, 1.5))
    }
}

/// A UDP marker datagram: `Start` carries the transmitter's plan, `End` what it really sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// Sent once before the data: planned datagrams and bytes.
    Start {
        /// Datagrams the transmitter means to send.
        datagrams: u64,
        /// Bytes the transmitter means to send.
        bytes: u64,
    },
    /// Sent after the data, several times: datagrams and bytes actually sent.
    End {
        /// Datagrams sent.
        datagrams: u64,
        /// Bytes sent.
        bytes: u64,
    },
}

impl Marker {
    /// The datagram that carries this marker.
    pub fn encode(&self) -> [u8; MARKER_LEN] {
        let (kind, d, b) = match *self {
            Marker::Start { datagrams, bytes } => (b'S', datagrams, bytes),
            Marker::End { datagrams, bytes } => (b'E', datagrams, bytes),
        };
        let mut out = [0u8; MARKER_LEN];
        out[..7].copy_from_slice(MAGIC);
        out[7] = kind;
        out[8..16].copy_from_slice(&d.to_be_bytes());
        out[16..24].copy_from_slice(&b.to_be_bytes());
        out
    }

    /// The marker in a datagram, or `None` for data (the pattern never starts with NUL).
    pub fn decode(buf: &[u8]) -> Option<Marker> {
        if buf.len() != MARKER_LEN || &buf[..7] != MAGIC {
            return None;
        }
        let word = |i: usize| u64::from_be_bytes(buf[i..i + 8].try_into().expect("8-byte slice"));
        let (datagrams, bytes) = (word(8), word(16));
        match buf[7] {
            b'S' => Some(Marker::Start { datagrams, bytes }),
            b'E' => Some(Marker::End { datagrams, bytes }),
            _ => None,
        }
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

/// The socket buffer of one side: what was asked for and what the kernel says it granted.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SockBuf {
    /// SO_SNDBUF (transmitter) or SO_RCVBUF (receiver).
    pub option: String,
    /// The -b value; `None` when the kernel's default was kept.
    pub requested: Option<u64>,
    /// The size the kernel reports (Linux doubles a request for its bookkeeping); for a
    /// transmitter's default, the sysctl that sets it.
    pub granted: Option<u64>,
    /// Where `granted` comes from.
    pub source: String,
    /// The receiver's SO_RCVBUF after the run: TCP autotuning grows a default buffer.
    pub at_end: Option<u64>,
}

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
    fn new(role: Role, cfg: &Config, local: SocketAddr, sockbuf: SockBuf) -> Report {
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

    fn finish_timing(&mut self, real_ns: u64, cpu_ns: u64) {
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

fn pin(cfg: &Config, who: &str) -> Result<()> {
    if let Some(cpu) = cfg.cpu {
        sys::pin_current_thread(cpu)
            .map_err(|e| Error::Usage(format!("cannot pin the ttcp {who} to CPU {cpu}: {e} (see `nproc`)")))?;
    }
    Ok(())
}

/// Ask for `want` bytes of socket buffer, through the privileged option when the plain one is
/// clamped by the sysctl maximum (the seed's -b 1M must mean 1M, not the host's cap); notes
/// say when the kernel changed the request.
fn apply_sockbuf(fd: RawFd, want: usize, receive: bool, notes: &mut Vec<String>) -> Result<SockBuf> {
    let (option, sysctl) =
        if receive { ("SO_RCVBUF", "net.core.rmem_max") } else { ("SO_SNDBUF", "net.core.wmem_max") };
    let set = |force: bool| if receive { sys::set_rcvbuf(fd, want, force) } else { sys::set_sndbuf(fd, want, force) };
    let mut granted = set(false).map_err(|e| Error::Runtime(format!("cannot set {option} to {want}: {e}")))?;
    if granted / 2 < want {
        if let Ok(g) = set(true) {
            if g / 2 >= want {
                notes.push(format!("-b {want} is above {sysctl}: granted through {option}FORCE (CAP_NET_ADMIN)"));
            }
            granted = g;
        }
    }
    if granted / 2 < want {
        notes.push(format!(
            "the kernel granted {option} {granted}, less than -b {want}: {sysctl} caps it (raise it, or run as root to force)"
        ));
    } else if granted / 2 > want {
        notes.push(format!("the kernel raised -b {want} to its minimum {option} ({granted} granted)"));
    }
    Ok(SockBuf {
        option: option.into(),
        requested: Some(want as u64),
        granted: Some(granted as u64),
        source: "getsockopt; Linux doubles a request for its bookkeeping".into(),
        at_end: None,
    })
}

/// The transmitter's default send buffer, from the sysctl that sets it (there is no reason to
/// touch the socket just to read it back).
fn default_sndbuf(proto: Proto) -> SockBuf {
    let (path, source) = match proto {
        Proto::Tcp => ("/proc/sys/net/ipv4/tcp_wmem", "sysctl net.ipv4.tcp_wmem, initial size; TCP autotunes it"),
        Proto::Udp => ("/proc/sys/net/core/wmem_default", "sysctl net.core.wmem_default"),
    };
    let granted = std::fs::read_to_string(path).ok().and_then(|s| {
        let mut f = s.split_whitespace();
        let v = if proto == Proto::Tcp { f.nth(1) } else { f.next() };
        v.and_then(|v| v.parse().ok())
    });
    SockBuf { option: "SO_SNDBUF".into(), requested: None, granted, source: source.into(), at_end: None }
}

fn default_rcvbuf(fd: RawFd, proto: Proto) -> SockBuf {
    SockBuf {
        option: "SO_RCVBUF".into(),
        requested: None,
        granted: sys::rcvbuf(fd).ok().map(|v| v as u64),
        source: match proto {
            Proto::Tcp => "getsockopt at the start; TCP autotunes it".into(),
            Proto::Udp => "getsockopt".into(),
        },
        at_end: None,
    }
}

fn stopping(stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed)
}

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
                    ErrorKind::AddrInUse => Error::Runtime(format!(
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
        .map_err(|e| Error::Runtime(format!("cannot read the bound address: {e}")))?;
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
                return Err(Error::Runtime("the accepting thread ended without a connection".into()))
            }
        }
    };
    let (mut stream, peer) = accepted.map_err(|e| Error::Runtime(format!("accept failed: {e}")))?;
    rep.peer = peer.to_string();
    let setup = |e: std::io::Error| Error::Runtime(format!("cannot set up the connection: {e}"));
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
            Err(e) => return Err(Error::Runtime(format!("read from {peer} failed after {} bytes: {e}", rep.bytes))),
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
    sock.set_read_timeout(Some(POLL)).map_err(|e| Error::Runtime(format!("cannot set up the socket: {e}")))?;
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
                match Marker::decode(&buf[..n]) {
                    Some(Marker::Start { datagrams: d, bytes: b }) => {
                        if peer.is_some() {
                            plan.get_or_insert((d, b));
                        } else if candidate.replace((from, (d, b), (now, sys::process_cpu_ns()))).is_some() {
                            stray += 1; // a start marker that no data followed
                        }
                        rep.calls += 1;
                    }
                    Some(Marker::End { datagrams: d, bytes: b }) => {
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
            Err(e) => return Err(Error::Runtime(format!("receive failed after {datagrams} datagrams: {e}"))),
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

fn connect_error(dest: SocketAddr, e: std::io::Error) -> Error {
    match e.kind() {
        ErrorKind::ConnectionRefused => Error::Runtime(format!(
            "connection refused by {dest}: start the receiver there first (`wirespeed ttcp -r -p {}`)",
            dest.port()
        )),
        ErrorKind::TimedOut | ErrorKind::WouldBlock => {
            Error::Runtime(format!("no answer from {dest} within 10 s: is the host up and the port open?"))
        }
        _ => Error::Runtime(format!("cannot connect to {dest}: {e}")),
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

/// Pace buffer `i` when a rate was asked for; false when stopped while waiting.
fn pace(pacer: &mut Option<Pacer>, i: u64, stop: &AtomicBool) -> bool {
    match pacer {
        Some(p) => p.wait(i, 1, None, stop).is_some(),
        None => true,
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
        stream.set_nodelay(true).map_err(|e| Error::Runtime(format!("cannot set TCP_NODELAY: {e}")))?;
    }
    let local = stream.local_addr().map_err(|e| Error::Runtime(format!("cannot read the local address: {e}")))?;
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
                    return Err(Error::Runtime(format!(
                        "the receiver at {dest} closed the connection after {} bytes",
                        rep.bytes
                    )))
                }
                Err(e) => return Err(Error::Runtime(format!("write to {dest} failed after {} bytes: {e}", rep.bytes))),
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
    let sock = UdpSocket::bind(any).map_err(|e| Error::Runtime(format!("cannot open a UDP socket: {e}")))?;
    // Connected, so that an ICMP port unreachable (no receiver) comes back as an error.
    sock.connect(dest).map_err(|e| Error::Runtime(format!("cannot address {dest}: {e}")))?;
    let mut notes = Vec::new();
    let sockbuf = match cfg.sockbuf {
        Some(b) => apply_sockbuf(sock.as_raw_fd(), b, false, &mut notes)?,
        None => default_sndbuf(Proto::Udp),
    };
    let local = sock.local_addr().map_err(|e| Error::Runtime(format!("cannot read the local address: {e}")))?;
    let mut rep = Report::new(Role::Transmit, cfg, local, sockbuf);
    rep.notes = notes;
    rep.peer = dest.to_string();
    let no_receiver = || {
        Error::Runtime(format!(
            "nothing listens on {dest} (ICMP port unreachable): start `wirespeed ttcp -r -u -p {}` there first",
            dest.port()
        ))
    };
    let start = Marker::Start { datagrams: cfg.nbuf, bytes: cfg.nbuf.saturating_mul(cfg.buflen as u64) };
    let buf = pattern(cfg.buflen);
    let (mut datagrams, mut enobufs) = (0u64, 0u64);
    let t0 = sys::monotonic_ns();
    let cpu0 = sys::process_cpu_ns();
    send_retrying(&sock, &start.encode(), &mut enobufs, stop).map_err(|e| match e.kind() {
        ErrorKind::ConnectionRefused => no_receiver(),
        _ => Error::Runtime(format!("cannot send to {dest}: {e}")),
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
            Err(e) => return Err(Error::Runtime(format!("send to {dest} failed after {datagrams} datagrams: {e}"))),
        }
    }
    let t1 = sys::monotonic_ns();
    let cpu = sys::process_cpu_ns().saturating_sub(cpu0);
    rep.finish_timing(t1 - t0, cpu);
    let end = Marker::End { datagrams, bytes: rep.bytes }.encode();
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

/// Read/write sizes of seed 000's Table 3: powers of two from 32 bytes to 1 MiB.
pub const TABLE3_SIZES: [usize; 16] =
    [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288, 1048576];

/// One transmitter/receiver pair of `bench ttcp`: a row of Table 3, 4 or 5.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    /// TCP (Tables 3 and 4) or UDP (Table 5).
    pub proto: Proto,
    /// -b given to both sides; `None` for the default row.
    pub sockbuf: Option<u64>,
    /// -l given to both sides (Table 3's read/write size).
    pub buflen: usize,
    /// -n given to both sides.
    pub nbuf: u64,
    /// The transmitter's command line (after any partition prefix).
    pub transmitter_cmd: Vec<String>,
    /// The receiver's command line (after any partition prefix).
    pub receiver_cmd: Vec<String>,
    /// The transmitter's report.
    pub transmit: Report,
    /// The receiver's report.
    pub receive: Report,
}

fn sockbuf_label(r: &BenchRow) -> String {
    match r.sockbuf {
        Some(b) => b.to_string(),
        None => "default *".into(),
    }
}

fn mbs(v: f64) -> String {
    format!("{v:.1} MB/s")
}

/// Table 4 (TCP) or Table 5 (UDP) in the seed's layout, rows in the order run, with a
/// footnote for the default row (the seed's shaded one).
pub fn sockbuf_table(proto: Proto, rows: &[BenchRow]) -> String {
    let rows: Vec<&BenchRow> = rows.iter().filter(|r| r.proto == proto).collect();
    let mut s = String::new();
    let udp = proto == Proto::Udp;
    let _ = write!(s, "{:<28}{:>16}{:>16}", "Socket Buffer Size (Bytes)", "Transmit", "Receive");
    if udp {
        let _ = write!(s, "{:>18}", "% data dropped");
    }
    s.push('\n');
    for r in &rows {
        let _ = write!(s, "{:<28}{:>16}{:>16}", sockbuf_label(r), mbs(r.transmit.mb_per_s), mbs(r.receive.mb_per_s));
        if udp {
            let _ = write!(s, "{:>18}", format!("{:.2} %", r.receive.dropped_pct.unwrap_or(0.0)));
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "{}",
        match proto {
            Proto::Tcp => "Table 4: TCP/IP Performance",
            Proto::Udp => "Table 5: UDP/IP Performance",
        }
    );
    if let Some(d) = rows.iter().find(|r| r.sockbuf.is_none()) {
        let show = |b: &SockBuf| {
            let g = b.granted.map(|g| g.to_string()).unwrap_or_else(|| "unknown".into());
            match b.at_end {
                Some(e) if Some(e) != b.granted => format!("{} {g} at the start, {e} at the end", b.option),
                _ => format!("{} {g}", b.option),
            }
        };
        let _ = writeln!(
            s,
            "* no -b (the seed's shaded row): the kernel's defaults, {} (transmitter), {} (receiver)",
            show(&d.transmit.sockbuf),
            show(&d.receive.sockbuf)
        );
    }
    s
}

/// Table 3 in the seed's layout: read/write size and MB/s, the bytes received over the
/// receiver's wall-clock time.
pub fn rw_table(rows: &[BenchRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{:<28}{:>12}", "Read/Write Size (bytes)", "MB/s");
    for r in rows {
        let _ = writeln!(s, "{:<28}{:>12.1}", r.buflen, r.receive.mb_per_s);
    }
    let _ = writeln!(s, "Table 3: Raw Device Performance (here: a TCP stream socket)");
    s
}

/// All rows as CSV, one line per pair, for spreadsheets and plots.
pub fn csv(table3: &[BenchRow], rows: &[BenchRow]) -> String {
    let mut s = String::from(
        "table,proto,sockbuf,buflen,nbuf,transmit_mb_s,receive_mb_s,dropped_pct,bytes_sent,bytes_received,\
         datagrams_sent,datagrams_received,transmit_cpu_pct,receive_cpu_pct,transmit_sockbuf_granted,receive_sockbuf_granted\n",
    );
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for (table, r) in
        table3.iter().map(|r| (3, r)).chain(rows.iter().map(|r| (if r.proto == Proto::Tcp { 4 } else { 5 }, r)))
    {
        let _ = writeln!(
            s,
            "{table},{},{},{},{},{:.3},{:.3},{},{},{},{},{},{:.1},{:.1},{},{}",
            r.proto.name(),
            r.sockbuf.map(|b| b.to_string()).unwrap_or_else(|| "default".into()),
            r.buflen,
            r.nbuf,
            r.transmit.mb_per_s,
            r.receive.mb_per_s,
            r.receive.dropped_pct.map(|p| format!("{p:.3}")).unwrap_or_default(),
            r.transmit.bytes,
            r.receive.bytes,
            opt(r.transmit.datagrams),
            opt(r.receive.datagrams),
            r.transmit.cpu_pct,
            r.receive.cpu_pct,
            opt(r.transmit.sockbuf.granted),
            opt(r.receive.sockbuf.granted),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_data_is_never_a_marker() {
        for m in
            [Marker::Start { datagrams: 126976, bytes: 126976 * 49152 }, Marker::End { datagrams: 3, bytes: u64::MAX }]
        {
            assert_eq!(Marker::decode(&m.encode()), Some(m));
        }
        let p = pattern(MARKER_LEN);
        assert_eq!(Marker::decode(&p), None);
        assert!(pattern(100_000).iter().all(|&c| (b' '..=b'~').contains(&c)));
        let mut bad = Marker::End { datagrams: 1, bytes: 1 }.encode();
        bad[7] = b'X';
        assert_eq!(Marker::decode(&bad), None);
        assert_eq!(Marker::decode(&Marker::End { datagrams: 1, bytes: 1 }.encode()[..20]), None);
    }

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
        assert!(matches!(c.validate(), Err(Error::Usage(m)) if m.contains("does not fit a UDP datagram")));
        c.buflen = 0;
        assert!(matches!(c.validate(), Err(Error::Usage(m)) if m.contains("-l")));
        let mut c = Config::new(Proto::Tcp);
        c.nbuf = 0;
        assert!(matches!(c.validate(), Err(Error::Usage(m)) if m.contains("-n")));
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
        stranger.send_to(&Marker::Start { datagrams: 10, bytes: 10_000 }.encode(), dest).unwrap();
        stranger.send_to(&Marker::End { datagrams: 10, bytes: 10_000 }.encode(), dest).unwrap();
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

    #[test]
    fn tables_have_the_seeds_columns() {
        let mut cfg = Config::new(Proto::Udp);
        cfg.buflen = 100;
        cfg.nbuf = 10;
        let rep = |role, mb: f64, pct: Option<f64>| {
            let mut r = Report::new(
                role,
                &cfg,
                "127.0.0.1:1".parse().unwrap(),
                SockBuf {
                    option: "SO_RCVBUF".into(),
                    requested: None,
                    granted: Some(212992),
                    source: String::new(),
                    at_end: None,
                },
            );
            r.mb_per_s = mb;
            r.dropped_pct = pct;
            r
        };
        let row = |sockbuf| BenchRow {
            proto: Proto::Udp,
            sockbuf,
            buflen: 100,
            nbuf: 10,
            transmitter_cmd: vec![],
            receiver_cmd: vec![],
            transmit: rep(Role::Transmit, 275.0, None),
            receive: rep(Role::Receive, 160.0, Some(45.0)),
        };
        let t = sockbuf_table(Proto::Udp, &[row(Some(65536)), row(None)]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("Socket Buffer Size (Bytes)") && lines[0].contains("% data dropped"));
        assert!(lines[1].starts_with("65536") && lines[1].contains("275.0 MB/s") && lines[1].contains("45.00 %"));
        assert!(lines[2].starts_with("default *"));
        assert!(lines[3].starts_with("Table 5"));
        assert!(lines[4].contains("212992"));
        assert!(sockbuf_table(Proto::Tcp, &[row(None)]).lines().nth(1).unwrap().starts_with("Table 4"));
        let c = csv(&[], &[row(Some(65536))]);
        assert_eq!(c.lines().count(), 2);
        assert!(c.lines().nth(1).unwrap().starts_with("5,udp,65536,100,10,275.000,160.000,45.000,"));
    }
}
