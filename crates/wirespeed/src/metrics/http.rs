//! The exporter's HTTP side: one thread on a `std` TCP listener answering `GET /metrics`.
//!
//! A scrape is small and rare (every few seconds), so one thread serves the connections one
//! at a time, each with a short deadline: a client that sends nothing, or too much, or
//! something that is not HTTP, is answered (400, 404, 405) or dropped within
//! [`CONNECTION_DEADLINE`] and never holds the exporter longer. Every response closes its
//! connection. Nothing here can panic on a request, and the capture never waits for it.

use super::{expose, Board, Serving};
use crate::error::{Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest a connection may take to send its request and take the answer.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(3);

/// Largest request head read; longer ones are refused (431).
const MAX_REQUEST: usize = 16 << 10;

/// How long a connection is drained after its answer, at most.
const LINGER: Duration = Duration::from_millis(200);

/// Most bytes drained after an answer.
const MAX_DRAIN: usize = 1 << 20;

/// How often the accept loop looks at its stop flag when no client is waiting.
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
        let listener = TcpListener::bind(addr).map_err(|e| {
            let why = match e.kind() {
                ErrorKind::AddrInUse => "the port is in use: choose another one, or stop what holds it".to_string(),
                ErrorKind::AddrNotAvailable => format!("{} is not an address of this host", addr.ip()),
                ErrorKind::PermissionDenied => "permission denied: use a port from 1024 up".to_string(),
                _ => e.to_string(),
            };
            Error::Usage(format!("--metrics {addr}: cannot listen there: {why}"))
        })?;
        let local = listener.local_addr().unwrap_or(addr);
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::Runtime(format!("--metrics {local}: cannot set up the listener: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let scrapes = Arc::new(AtomicU64::new(0));
        let (stop_t, scrapes_t) = (stop.clone(), scrapes.clone());
        let thread = std::thread::Builder::new()
            .name("ws-metrics".into())
            .spawn(move || accept_loop(listener, board, &stop_t, &scrapes_t))
            .map_err(|e| Error::Runtime(format!("cannot start the metrics thread: {e}")))?;
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

fn accept_loop(listener: TcpListener, board: Board, stop: &AtomicBool, scrapes: &AtomicU64) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((conn, _)) => serve(conn, &board, scrapes),
            // Nobody waiting (or a client that left before being accepted): look again soon.
            Err(_) => std::thread::sleep(POLL),
        }
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

/// Read one request from `conn` and answer it; a metrics answer is counted in `scrapes` before
/// it is sent, so a client that has read it always finds it counted.
fn serve(mut conn: TcpStream, board: &Board, scrapes: &AtomicU64) {
    let deadline = Instant::now() + CONNECTION_DEADLINE;
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_write_timeout(Some(CONNECTION_DEADLINE));
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let ask = loop {
        if let Some(end) = head_end(&buf) {
            break parse(&buf[..end]);
        }
        if buf.len() >= MAX_REQUEST {
            break Ask::Refuse(431, "Request Header Fields Too Large", "request head too large\n");
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
            return; // idle: closed without an answer
        }
        match conn.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    };
    let response = match ask {
        Ask::Metrics { head, openmetrics } => {
            let body = expose::render(board, openmetrics);
            let ty = if openmetrics { expose::OPENMETRICS_CONTENT_TYPE } else { expose::TEXT_CONTENT_TYPE };
            scrapes.fetch_add(1, Ordering::Relaxed);
            respond(200, "OK", ty, &body, head)
        }
        Ask::Refuse(code, reason, text) => respond(code, reason, "text/plain; charset=utf-8", text, false),
    };
    let _ = conn.write_all(&response);
    let _ = conn.flush();
    // A lingering close: the answer is sent, then what the client still sends (the rest of
    // an over-long request) is read and dropped for a moment, so that closing with unread
    // data does not reset the connection before the client has read the answer.
    let _ = conn.shutdown(std::net::Shutdown::Write);
    let _ = conn.set_read_timeout(Some(LINGER));
    let until = Instant::now() + LINGER;
    let mut drained = 0;
    while drained < MAX_DRAIN && Instant::now() < until {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
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
