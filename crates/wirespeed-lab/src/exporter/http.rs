//! The exporter's HTTP side: one thread on a `std` TCP listener answering `GET /metrics`.
//!
//! The thread serves every connection at once with poll(2) on non-blocking sockets, so no
//! client can hold it: a connection that sends nothing, or sends slowly, only waits in the set
//! while the others are answered. Everything is bounded: [`MAX_CONNECTIONS`] held at once and
//! [`PER_CLIENT`] per client address (a new connection past either closes the oldest one not
//! yet answered, the same client's first, so that a scraper's fresh connection always gets in
//! and one address cannot push out another's), [`MAX_REQUEST`] bytes of request head, and
//! [`CONNECTION_DEADLINE`] from accept to the last byte of the answer. A request that is not
//! for the metrics is answered (400, 404, 405, 431). Every response closes its connection.
//! Nothing here can panic on a request, and the capture never waits for it: the exporter
//! reads the counters the capture already keeps and nothing else.

use super::board::Board;
use super::{expose, Serving, Shown};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wirespeed::error::{Error, Result};
use wirespeed::sys::socket::{poll, PollFd};

/// Longest a connection may take from its accept to the last byte of its answer: a scraper
/// asks at once and reads at once, so only a client that stalls ever meets it.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(2);

/// Most connections held at once (bounded memory and descriptors, whoever connects).
pub const MAX_CONNECTIONS: usize = 128;

/// Most connections held for one client address: enough for several scrapers behind one
/// address, few enough that one host cannot fill the whole set.
pub const PER_CLIENT: usize = 16;

/// Largest request head read; longer ones are refused (431).
pub const MAX_REQUEST: usize = 16 << 10;

/// How long a connection is drained after its answer, at most.
const LINGER: Duration = Duration::from_millis(200);

/// Most bytes drained after an answer.
const MAX_DRAIN: usize = 1 << 20;

/// Longest poll(2) wait: how often the loop looks at its stop flag when nothing happens.
const POLL: Duration = Duration::from_millis(25);

/// A running exporter; stopped (its thread joined, its port closed) when dropped.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    scrapes: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Listen on exactly `addr` and serve `board` from a thread of its own. A busy port or an
    /// address this host does not have is a usage error, said in one line.
    pub fn start(addr: SocketAddr, board: Board) -> Result<Server> {
        Server::show(addr, Shown { board, partitions: None })
    }

    /// [`Server::start`] for what `shown` holds (a partition set's state beside the board).
    pub fn show(addr: SocketAddr, shown: Shown) -> Result<Server> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            let why = match e.kind() {
                ErrorKind::AddrInUse => "the port is in use: choose another one, or stop what holds it".to_string(),
                ErrorKind::AddrNotAvailable => format!("{} is not an address of this host", addr.ip()),
                ErrorKind::PermissionDenied => "permission denied: use a port from 1024 up".to_string(),
                _ => e.to_string(),
            };
            Error::invalid(format!("--metrics {addr}: cannot listen there: {why}"))
        })?;
        let local = listener.local_addr().unwrap_or(addr);
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::failed(format!("--metrics {local}: cannot set up the listener: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let scrapes = Arc::new(AtomicU64::new(0));
        let (stop_t, scrapes_t) = (stop.clone(), scrapes.clone());
        let thread = std::thread::Builder::new()
            .name("ws-metrics".into())
            .spawn(move || serve_all(listener, shown, &stop_t, &scrapes_t))
            .map_err(|e| Error::io(format!("cannot start the metrics thread: {e}")))?;
        Ok(Server { addr: local, stop, scrapes, thread: Some(thread) })
    }

    /// The address really listened on (port 0 becomes the kernel's choice).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to scrape.
    pub fn url(&self) -> String {
        format!("http://{}/metrics", self.addr)
    }

    /// What a report says about it.
    pub fn serving(&self) -> Serving {
        Serving { listen: self.addr.to_string(), url: self.url(), scrapes: self.scrapes.load(Ordering::Relaxed) }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where a connection is.
#[derive(Debug, PartialEq, Eq)]
enum Phase {
    /// Reading its request head.
    Reading,
    /// Sending the answer (`Conn::out` from `Conn::sent`).
    Writing,
    /// Answer sent and our side shut: reading and dropping what the client still sends, for a
    /// moment, so that closing with unread data does not reset the connection before the client
    /// has read the answer.
    Lingering,
    /// To be closed.
    Done,
}

/// One client connection.
struct Conn {
    stream: TcpStream,
    peer: IpAddr,
    phase: Phase,
    /// When it must be done (its phase's deadline).
    deadline: Instant,
    /// The request head read so far.
    req: Vec<u8>,
    /// The answer, and how much of it is sent.
    out: Vec<u8>,
    sent: usize,
    /// Bytes drained while lingering.
    drained: usize,
}

impl Conn {
    /// Whether closing it to make room would cost an answer already on its way (it is only
    /// closed to make room when no waiting connection can be).
    fn answering(&self) -> bool {
        self.phase != Phase::Reading
    }

    /// Do what the socket allows now, without blocking.
    fn step(&mut self, board: &Shown, scrapes: &AtomicU64, now: Instant) {
        let mut chunk = [0u8; 2048];
        if self.phase == Phase::Reading {
            loop {
                let room = MAX_REQUEST.saturating_sub(self.req.len()).min(chunk.len());
                if room == 0 {
                    let ask = Ask::Refuse(431, "Request Header Fields Too Large", "request head too large\n");
                    self.answer(ask, board, scrapes);
                    break;
                }
                match self.stream.read(&mut chunk[..room]) {
                    Ok(0) => {
                        self.phase = Phase::Done; // gone without a whole request
                        return;
                    }
                    Ok(n) => {
                        self.req.extend_from_slice(&chunk[..n]);
                        if let Some(end) = head_end(&self.req) {
                            let ask = parse(&self.req[..end]);
                            self.answer(ask, board, scrapes);
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(_) => {
                        self.phase = Phase::Done;
                        return;
                    }
                }
            }
        }
        if self.phase == Phase::Writing {
            while self.sent < self.out.len() {
                match self.stream.write(&self.out[self.sent..]) {
                    Ok(0) => {
                        self.phase = Phase::Done;
                        return;
                    }
                    Ok(n) => self.sent += n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(_) => {
                        self.phase = Phase::Done;
                        return;
                    }
                }
            }
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
            self.phase = Phase::Lingering;
            self.deadline = now + LINGER;
        }
        if self.phase == Phase::Lingering {
            loop {
                match self.stream.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        self.drained += n;
                        if self.drained >= MAX_DRAIN {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(_) => break,
                }
            }
            self.phase = Phase::Done;
        }
    }

    /// Set the answer to `ask` on its way; a metrics answer is counted in `scrapes` before it
    /// is sent, so a client that has read it always finds it counted.
    fn answer(&mut self, ask: Ask, board: &Shown, scrapes: &AtomicU64) {
        self.out = match ask {
            Ask::Metrics { head, openmetrics } => {
                let body = expose::render(board, openmetrics);
                let ty = if openmetrics { expose::OPENMETRICS_CONTENT_TYPE } else { expose::TEXT_CONTENT_TYPE };
                scrapes.fetch_add(1, Ordering::Relaxed);
                respond(200, "OK", ty, &body, head)
            }
            Ask::Refuse(code, reason, text) => respond(code, reason, "text/plain; charset=utf-8", text, false),
        };
        self.req = Vec::new();
        self.phase = Phase::Writing;
    }
}

/// Which held connection to close so that one from `peer` can be held, given the held ones'
/// (address, being answered) in the order they were accepted: the oldest one of the same
/// address once it holds [`PER_CLIENT`], else the oldest of all once [`MAX_CONNECTIONS`] are
/// held; among those, one still waiting for its request before one being answered.
fn to_evict(held: &[(IpAddr, bool)], peer: IpAddr) -> Option<usize> {
    let pick = |same: bool| {
        let mine = |h: &(IpAddr, bool)| !same || h.0 == peer;
        let waiting = held.iter().position(|h| mine(h) && !h.1);
        waiting.or_else(|| held.iter().position(mine))
    };
    if held.iter().filter(|h| h.0 == peer).count() >= PER_CLIENT {
        pick(true)
    } else if held.len() >= MAX_CONNECTIONS {
        pick(false)
    } else {
        None
    }
}

/// The exporter's loop: accept, serve every held connection as far as its socket allows, close
/// the finished and the late, until `stop`.
fn serve_all(listener: TcpListener, board: Shown, stop: &AtomicBool, scrapes: &AtomicU64) {
    let mut conns: Vec<Conn> = Vec::with_capacity(MAX_CONNECTIONS);
    let mut fds: Vec<PollFd> = Vec::with_capacity(MAX_CONNECTIONS + 1);
    // After an accept error other than "nobody waiting" (out of descriptors), the listener is
    // left out of one wait so that the loop does not spin on it.
    let mut listen = true;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        fds.clear();
        for c in &conns {
            let events = if c.phase == Phase::Writing { libc::POLLOUT } else { libc::POLLIN };
            fds.push(PollFd { fd: c.stream.as_raw_fd(), events, revents: 0 });
        }
        if listen {
            fds.push(PollFd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        let soonest = conns.iter().map(|c| c.deadline.saturating_duration_since(now)).min().unwrap_or(POLL);
        let wait = soonest.min(POLL).as_millis() as i32;
        if poll(&mut fds, wait).is_err() {
            std::thread::sleep(POLL);
        }
        let now = Instant::now();
        for (c, p) in conns.iter_mut().zip(&fds) {
            if p.revents != 0 {
                c.step(&board, scrapes, now);
            }
        }
        listen = true;
        // Every client waiting is taken in, each tried at once (a scraper's request is usually
        // there already): at most a set's worth per round, so the held ones are served too.
        for _ in 0..MAX_CONNECTIONS {
            match listener.accept() {
                Ok((stream, peer)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let held: Vec<(IpAddr, bool)> = conns.iter().map(|c| (c.peer, c.answering())).collect();
                    if let Some(i) = to_evict(&held, peer.ip()) {
                        conns.remove(i);
                    }
                    let mut c = Conn {
                        stream,
                        peer: peer.ip(),
                        phase: Phase::Reading,
                        deadline: now + CONNECTION_DEADLINE,
                        req: Vec::new(),
                        out: Vec::new(),
                        sent: 0,
                        drained: 0,
                    };
                    c.step(&board, scrapes, now);
                    conns.push(c);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if matches!(e.kind(), ErrorKind::Interrupted | ErrorKind::ConnectionAborted) => {}
                Err(_) => {
                    listen = false;
                    break;
                }
            }
        }
        let now = Instant::now();
        conns.retain(|c| c.phase != Phase::Done && c.deadline > now);
    }
}

/// What a request asked for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    /// GET (or HEAD, without the body) /metrics; OpenMetrics when the client accepts it.
    Metrics { head: bool, openmetrics: bool },
    /// Anything else: a status line and a one-line reason.
    Refuse(u16, &'static str, &'static str),
}

/// Where the request head ends (after its blank line), if it has.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Judge a request head.
fn parse(head: &[u8]) -> Ask {
    let bad = Ask::Refuse(400, "Bad Request", "not an HTTP request\n");
    let Ok(text) = std::str::from_utf8(head) else { return bad };
    let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
    let first = lines.next().unwrap_or("");
    let mut words = first.split(' ');
    let (Some(method), Some(target), Some(version), None) = (words.next(), words.next(), words.next(), words.next())
    else {
        return bad;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return bad;
    }
    let path = target.split(['?', '#']).next().unwrap_or("");
    if path != "/metrics" {
        return Ask::Refuse(404, "Not Found", "not found: wirespeed serves /metrics only\n");
    }
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Ask::Refuse(405, "Method Not Allowed", "only GET and HEAD are served\n"),
    };
    let openmetrics = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("accept") && v.to_ascii_lowercase().contains("application/openmetrics-text")
        })
    });
    Ask::Metrics { head, openmetrics }
}

fn respond(code: u16, reason: &str, content_type: &str, body: &str, head: bool) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if code == 405 { "Allow: GET, HEAD\r\n" } else { "" }
    )
    .into_bytes();
    if !head {
        r.extend_from_slice(body.as_bytes());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_judged_without_panicking() {
        let m = |om| Ask::Metrics { head: false, openmetrics: om };
        assert_eq!(parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), m(false));
        assert_eq!(parse(b"GET /metrics?x=1 HTTP/1.0\n\n"), m(false));
        assert_eq!(
            parse(
                b"GET /metrics HTTP/1.1\r\naccept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n"
            ),
            m(true)
        );
        assert_eq!(parse(b"HEAD /metrics HTTP/1.1\r\n\r\n"), Ask::Metrics { head: true, openmetrics: false });
        assert!(matches!(parse(b"GET / HTTP/1.1\r\n\r\n"), Ask::Refuse(404, ..)));
        assert!(matches!(parse(b"POST /metrics HTTP/1.1\r\n\r\n"), Ask::Refuse(405, ..)));
        for junk in [
            &b"\r\n\r\n"[..],
            b"GET\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics SMTP/1.1 x\r\n\r\n",
        ] {
            assert!(matches!(parse(junk), Ask::Refuse(400, ..)), "{junk:?}");
        }
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }

    #[test]
    fn a_new_connection_closes_the_oldest_waiting_one_of_its_client_first() {
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(to_evict(&[], a), None);
        // Below both caps: nothing is closed.
        let mut held: Vec<(IpAddr, bool)> = vec![(b, false)];
        held.extend(std::iter::repeat((a, false)).take(PER_CLIENT - 1));
        assert_eq!(to_evict(&held, a), None);
        // The client's cap: its oldest waiting connection goes, never another client's.
        held.push((a, false));
        held[1].1 = true; // being answered: kept while a waiting one can go
        assert_eq!(to_evict(&held, a), Some(2));
        assert_eq!(to_evict(&held, b), None, "another client is not held back by this one");
        // Every one of the client's connections is being answered: the oldest of them goes.
        let answering: Vec<(IpAddr, bool)> = held.iter().map(|h| (h.0, h.0 == a)).collect();
        assert_eq!(to_evict(&answering, a), Some(1));
        // The whole set full, spread over many clients: the oldest waiting one of all goes.
        let many: Vec<(IpAddr, bool)> =
            (0..MAX_CONNECTIONS).map(|i| (IpAddr::from([10, 1, (i / 200) as u8, (i % 200) as u8]), i == 0)).collect();
        assert_eq!(to_evict(&many, a), Some(1));
    }

    /// Far more idle connections than the exporter holds, all still open: a scrape on a new
    /// connection is answered, and so are several at once.
    #[test]
    fn idle_connections_never_keep_a_scrape_waiting() {
        let s = Server::start("127.0.0.1:0".parse().unwrap(), Board::new("test")).unwrap();
        let addr = s.local_addr();
        let idle: Vec<TcpStream> = (0..3 * MAX_CONNECTIONS)
            .map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap())
            .collect();
        let scrapers: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
                    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
                    let mut out = String::new();
                    let _ = c.read_to_string(&mut out);
                    out
                })
            })
            .collect();
        for t in scrapers {
            let out = t.join().unwrap();
            assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.contains("wirespeed_build_info{"), "{out:?}");
        }
        assert_eq!(s.serving().scrapes, 4);
        drop(idle);
    }

    #[test]
    fn a_server_answers_scrapes_refuses_the_rest_and_stops() {
        let board = Board::new("test");
        let s = Server::start("127.0.0.1:0".parse().unwrap(), board).unwrap();
        let addr = s.local_addr();
        assert_ne!(addr.port(), 0);
        let ask = |req: &[u8]| {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(req).unwrap();
            let mut out = String::new();
            let _ = c.read_to_string(&mut out);
            out
        };
        let ok = ask(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Type: text/plain; version=0.0.4"), "{ok}");
        assert!(ok.contains("wirespeed_build_info{"), "{ok}");
        assert!(ask(b"GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(ask(b"garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
        assert!(ask(&[b'x'; MAX_REQUEST + 10]).starts_with("HTTP/1.1 431 "));
        // A client that says nothing is closed after the deadline, and the server still answers.
        let idle = TcpStream::connect(addr).unwrap();
        assert!(ask(b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 OK"));
        drop(idle);
        assert_eq!(s.serving().scrapes, 2);
        // A second exporter on the same port: one clear usage error.
        let e = Server::start(addr, Board::new("test")).err().unwrap().to_string();
        assert!(e.contains("the port is in use"), "{e}");
        drop(s);
        assert!(TcpStream::connect(addr).is_err(), "the port is closed once the server stops");
    }
}
