//! `wirespeed probe`: listen to a stream for a few seconds and say what it is, from its own
//! headers, with the `--format` spec that counts it exactly.

use crate::args::run_duration;
use crate::out::print_json;
use clap::Args;
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use wirespeed::wire::learn::{Learned, Learner};
use wirespeed::{sys, units, Error};

pub const PROBE_HELP: &str = "Listen to a stream for a few seconds and say what it is: its format and \
layout learned from its own headers (VDIF and VTP: frame length, threads, station, bits, channels, \
complex, EDV, and the frame rate once a second rolls over; Mark5B: PSN or not, whole frames or \
halves, T bit and frame rate; SPEAD: flavour, heap size, full and first packet payloads, heap counter start and step), and \
the --format spec that recv, record and verify count it with. Nothing is guessed: a spec is given \
only when every key it needs was seen, checked against the stream's first datagram; otherwise the \
report says what is missing and why. Each source is studied on its own.\n\n\
Try:  wirespeed probe 7148                   (3 s on every address, port 7148)\n      \
wirespeed probe 239.1.2.3:7148 --for 5s    (joins the group)\n      \
wirespeed probe 7148 --json | jq -r '.sources[0].spec'\n\n\
Exit codes: 0 a spec for every source heard, 1 nothing heard or a source without one, 2 bad usage.";

#[derive(Args)]
pub struct ProbeArgs {
    /// Where to listen: PORT, ADDR:PORT, [IPV6]:PORT, or a multicast GROUP:PORT (joined).
    pub listen: String,
    /// How long to listen. The frame rate needs a second boundary of each stream: at least
    /// 1.1 s.
    #[arg(long = "for", default_value = "3s", value_parser = run_duration)]
    pub duration: Duration,
    /// Stop once this many datagrams have arrived (before --for is up).
    #[arg(long, value_parser = crate::args::run_count)]
    pub count: Option<u64>,
    /// Print the report as JSON (schema wirespeed.probe/1).
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct ProbeReport {
    schema: &'static str,
    listen: String,
    seconds: f64,
    datagrams: u64,
    /// Datagrams from sources beyond the 64 studied.
    unstudied: u64,
    sources: Vec<Learned>,
}

pub fn cmd_probe(a: ProbeArgs) -> Result<u8, Error> {
    let addr = wirespeed::addr::parse_listen(&a.listen)?;
    let sock = bind(addr)?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| Error::failed(format!("cannot set a receive timeout: {e}")))?;
    let stop = sys::install_stop_handler();
    eprintln!(
        "wirespeed probe: listening on {} for {}; Ctrl-C stops early",
        wirespeed::addr::shown(sock.local_addr().unwrap_or(addr)),
        crate::args::duration_text(a.duration)
    );
    let mut learner = Learner::new();
    let mut buf = vec![0u8; 65536];
    let (t0, mut n) = (Instant::now(), 0u64);
    let enough = |n: u64| a.count.is_some_and(|c| n >= c);
    while t0.elapsed() < a.duration && !stop.load(Ordering::Relaxed) && !enough(n) {
        match sock.recv_from(&mut buf) {
            Ok((len, src)) => {
                n += 1;
                learner.feed(src, &buf[..len]);
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::os(format!("receive failed: {e}"), &e)),
        }
    }
    // Stopped by Ctrl-C: what had already arrived is studied too, not dropped with the socket.
    if stop.load(Ordering::Relaxed) && sock.set_nonblocking(true).is_ok() {
        while let (false, Ok((len, src))) = (enough(n), sock.recv_from(&mut buf)) {
            n += 1;
            learner.feed(src, &buf[..len]);
        }
    }
    let report = ProbeReport {
        schema: "wirespeed.probe/1",
        listen: addr.to_string(),
        seconds: t0.elapsed().as_secs_f64(),
        datagrams: n,
        unstudied: learner.unstudied,
        sources: learner.learned(),
    };
    if a.json {
        print_json(&report)?;
    } else {
        print!("{}", human(&report));
    }
    Ok(if report.sources.is_empty() || report.sources.iter().any(|s| s.spec.is_none()) { 1 } else { 0 })
}

/// A socket on `addr`, joined to its group when it is a multicast address.
fn bind(addr: SocketAddr) -> Result<std::net::UdpSocket, Error> {
    let group = addr.ip().is_multicast().then_some(addr.ip());
    let at = match group {
        Some(IpAddr::V4(_)) => SocketAddr::from(([0, 0, 0, 0], addr.port())),
        Some(IpAddr::V6(_)) => SocketAddr::from(([0u16; 8], addr.port())),
        None => addr,
    };
    let (sock, note) = wirespeed::addr::bind_listen(at, false)?;
    if let Some(n) = note {
        eprintln!("wirespeed probe: {n}");
    }
    let joined = match group {
        Some(IpAddr::V4(g)) => sock.join_multicast_v4(&g, &std::net::Ipv4Addr::UNSPECIFIED),
        Some(IpAddr::V6(g)) => sock.join_multicast_v6(&g, 0),
        None => Ok(()),
    };
    joined.map_err(|e| Error::failed(format!("cannot join the multicast group {}: {e}", addr.ip())))?;
    // A probe studies a sample, but a larger one than Linux's default buffer holds at speed;
    // past net.core.rmem_max only with CAP_NET_ADMIN, and a smaller grant is fine.
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    if sys::set_rcvbuf(fd, wirespeed::rx::DEFAULT_RCVBUF, true).is_err() {
        let _ = sys::set_rcvbuf(fd, wirespeed::rx::DEFAULT_RCVBUF, false);
    }
    Ok(sock)
}

fn human(r: &ProbeReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "wirespeed probe {}: {} datagram(s) in {:.1} s from {} source(s)",
        r.listen,
        units::thousands(r.datagrams),
        r.seconds,
        r.sources.len()
    );
    if r.sources.is_empty() {
        let _ = writeln!(o, "  => nothing arrived: is the stream sent to this address and port?");
    }
    for s in &r.sources {
        let _ = writeln!(o, "  {}: {} datagram(s), {}", s.source, units::thousands(s.datagrams), s.format);
        for f in &s.facts {
            let _ = writeln!(o, "    {f}");
        }
        if s.changed > 0 {
            let _ = writeln!(
                o,
                "    {} datagram(s) laid out otherwise than the first (the stream changed, or two streams share this source)",
                units::thousands(s.changed)
            );
        }
        for m in &s.missing {
            let _ = writeln!(o, "    not learned: {m}");
        }
        match &s.spec {
            Some(spec) => {
                let _ = writeln!(o, "  => --format {spec}");
            }
            None => {
                let _ = writeln!(o, "  => no spec: see what was not learned above");
            }
        }
    }
    if r.unstudied > 0 {
        let _ = writeln!(o, "  {} datagram(s) from sources beyond the first 64 were not studied", r.unstudied);
    }
    o
}
