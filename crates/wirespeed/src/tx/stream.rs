//! The send path: one transport and one thread per stream, sendmmsg batches paced to the
//! schedule, and the end-of-stream message.
//!
//! The transport is the seam: a connected UDP socket (with GSO when the kernel has it), or a
//! raw AF_PACKET socket for which the loop writes each payload behind the frame headers and
//! [`raw`] completes the frame. Payloads, pacing, skips, counts and the
//! end-of-stream message are the same whichever carries them.

use super::report::{summarise, SendReport, StreamSent};
use super::{validate, SendConfig};
use crate::control::EndOfStream;
use crate::error::{Error, Result};
use crate::pace::Pacer;
use crate::sys;
use crate::wire::Format;
use hdrhistogram::Histogram;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::pgm::{PgmSent, PgmTx};
use super::plan::{plan, Plan};
use super::raw::{self, RawStream};

/// What carries one stream's datagrams.
enum Transport {
    /// A connected UDP socket: the kernel builds the headers.
    Udp(UdpSocket),
    /// An AF_PACKET socket on an interface: the stream builds whole frames.
    Raw(Box<RawStream>),
}

impl Transport {
    fn fd(&self) -> std::os::fd::RawFd {
        match self {
            Transport::Udp(s) => s.as_raw_fd(),
            Transport::Raw(r) => r.fd(),
        }
    }

    fn local_port(&self) -> u16 {
        match self {
            Transport::Udp(s) => s.local_addr().map(|a| a.port()).unwrap_or(0),
            Transport::Raw(r) => r.local_port(),
        }
    }

    /// Bytes in front of each payload in a send buffer (the frame headers for raw).
    fn header_len(&self) -> usize {
        match self {
            Transport::Udp(_) => 0,
            Transport::Raw(r) => r.data.header_len(),
        }
    }

    /// One datagram, outside the batches (the end-of-stream message).
    fn send_one(&self, payload: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Udp(s) => sys::send_one(s.as_raw_fd(), payload),
            Transport::Raw(r) => r.send_one(payload),
        }
    }
}

fn explain_send_error(e: &io::Error, plan: &Plan, cfg: &SendConfig) -> Error {
    let dest = cfg.dest;
    if let Some(r) = &cfg.raw {
        let iface = &r.iface;
        return match e.raw_os_error() {
            Some(libc::EMSGSIZE) => Error::failed(format!(
                "{iface} refused a {}-byte frame as too large (EMSGSIZE): use a smaller --size or raise its MTU",
                plan.pkt_len
            )),
            Some(libc::ENETDOWN) | Some(libc::ENXIO) | Some(libc::ENODEV) => {
                Error::os(format!("{iface} is down or gone ({e}): `ip link set {iface} up`, then send again"), e)
            }
            _ => Error::os(format!("sending raw frames to {dest} on {iface} failed: {e}"), e),
        };
    }
    match e.raw_os_error() {
        Some(libc::EMSGSIZE) => Error::failed(format!(
            "the kernel refused a {}-byte datagram to {dest} as too large (EMSGSIZE): use a smaller --size",
            plan.pkt_len
        )),
        Some(libc::EINVAL) if plan.gso_used => Error::failed(format!(
            "the kernel refused GSO with {}-byte segments to {dest} (EINVAL): the segment plus headers must fit the path MTU; use a smaller --size or drop --gso",
            plan.pkt_len
        )),
        Some(libc::EIO) if plan.gso_used => Error::unsupported(format!(
            "the device towards {dest} cannot do UDP GSO (EIO: no checksum offload): run without --gso"
        )),
        Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) => {
            Error::failed(format!("no route to {dest}: check the address and `ip route get {}`", dest.ip()))
        }
        Some(libc::EACCES) => Error::permission(format!(
            "sending to {dest} was refused (EACCES): a broadcast address needs SO_BROADCAST, or a firewall forbids it"
        )),
        _ => Error::os(format!("sending to {dest} failed: {e}"), e),
    }
}

/// Multicast sending options: TTL or hop limit, loopback to local members (a receiver on this
/// host hears the group), and the interface the datagrams leave by.
fn set_multicast(sock: &UdpSocket, cfg: &SendConfig) -> Result<()> {
    use crate::addr::Iface;
    let fd = sock.as_raw_fd();
    let failed = |what: &str, e: std::io::Error| Error::failed(format!("cannot set {what} for {}: {e}", cfg.dest));
    match cfg.dest {
        SocketAddr::V4(_) => {
            sock.set_multicast_ttl_v4(cfg.ttl).map_err(|e| failed("the multicast TTL", e))?;
            sock.set_multicast_loop_v4(true).map_err(|e| failed("multicast loopback", e))?;
            match &cfg.multicast_iface {
                Some(Iface::Addr(a)) => sys::set_multicast_if_v4_addr(fd, *a),
                Some(Iface::Index { index, .. }) => sys::set_multicast_if_v4_index(fd, *index),
                None => Ok(()),
            }
            .map_err(|e| failed("the multicast interface", e))?;
        }
        SocketAddr::V6(g) => {
            sys::set_multicast_hops_v6(fd, cfg.ttl).map_err(|e| failed("the multicast hop limit", e))?;
            sys::set_multicast_loop_v6(fd, true).map_err(|e| failed("multicast loopback", e))?;
            let index = crate::addr::multicast_v6_index(g, cfg.multicast_iface.as_ref(), "--iface")?;
            if index != 0 {
                sys::set_multicast_if_v6(fd, index).map_err(|e| failed("the multicast interface", e))?;
            }
        }
    }
    Ok(())
}

fn open_socket(cfg: &SendConfig) -> Result<UdpSocket> {
    let local = match (cfg.bind, cfg.dest) {
        (Some(ip), _) => SocketAddr::new(ip, 0),
        (None, SocketAddr::V4(_)) => SocketAddr::from(([0, 0, 0, 0], 0)),
        (None, SocketAddr::V6(_)) => SocketAddr::from(([0u16; 8], 0)),
    };
    let sock = UdpSocket::bind(local).map_err(|e| crate::addr::bind_error(local, e))?;
    if cfg.dest.ip().is_multicast() {
        set_multicast(&sock, cfg)?;
    }
    // A link-local group is addressed with its interface as the scope (no route without it).
    let dest = match cfg.dest {
        SocketAddr::V6(g) if g.ip().is_multicast() => {
            crate::addr::scoped(cfg.dest, crate::addr::multicast_v6_index(g, cfg.multicast_iface.as_ref(), "--iface")?)
        }
        d => d,
    };
    sock.connect(dest).map_err(|e| match e.raw_os_error() {
        Some(libc::ENETUNREACH) => {
            Error::failed(format!("no route to {}: check the address and `ip route get {}`", cfg.dest, cfg.dest.ip()))
        }
        _ => Error::failed(format!("cannot address {}: {e}", cfg.dest)),
    })?;
    let fd = sock.as_raw_fd();
    if sys::set_sndbuf(fd, 4 << 20, true).is_err() {
        let _ = sys::set_sndbuf(fd, 4 << 20, false);
    }
    Ok(sock)
}

struct StreamCtx<'a> {
    cfg: &'a SendConfig,
    fmt: &'a dyn Format,
    plan: &'a Plan,
    stop: &'a AtomicBool,
    start_ns: u64,
    session: u64,
}

fn run_stream(
    ctx: &StreamCtx<'_>,
    index: u32,
    sock: Transport,
    mut pgm: Option<PgmTx>,
) -> Result<(StreamSent, Option<PgmSent>)> {
    // The format's own stream id for this sender stream (a VDIF thread).
    let fstream = index % ctx.fmt.stream_count().max(1);
    let cfg = ctx.cfg;
    let plan = ctx.plan;
    if !cfg.cpus.is_empty() {
        let cpu = cfg.cpus[index as usize % cfg.cpus.len()];
        sys::pin_current_thread(cpu)
            .map_err(|e| Error::invalid(format!("cannot pin sender thread to CPU {cpu}: {e} (see `nproc`)")))?;
    }
    // Once, before the first datagram: SCHED_FIFO when --realtime asks.
    cfg.priority.apply_thread(&format!("sender thread {index}"))?;
    let fd = sock.fd();
    let local_port = sock.local_port();
    // Raw frames carry their headers in front of the payload; a UDP message is payload only.
    // A PGM stream puts the ODATA header there instead.
    let hdr = if pgm.is_some() { PgmTx::header_len() } else { sock.header_len() };
    let frame = match &sock {
        Transport::Raw(r) => Some(&r.data),
        Transport::Udp(_) => None,
    };
    let mut batch = sys::SendBatch::new(plan.msgs, hdr + plan.segs * plan.pkt_len);
    let mut gaps = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds are valid");
    let tenths_hint = cfg.duration.map(|d| d.as_secs() as usize * 10 + 20).unwrap_or(640);
    let mut per_tenth: Vec<u64> = Vec::with_capacity(tenths_hint);
    let mut pacer =
        plan.pps_per_stream.map(|p| Pacer::new(p, ctx.start_ns, cfg.max_lag.as_nanos() as u64, cfg.catch_up_factor));
    let deadline = cfg.duration.map(|d| ctx.start_ns + d.as_nanos() as u64);
    let cpu0 = sys::thread_cpu_ns();
    let seg = plan.gso_used.then_some(plan.pkt_len as u16);

    if let Some(p) = pgm.as_mut() {
        p.announce(fd);
    }
    // Every stream starts at t0 (the paced ones through their schedule).
    sys::sleep_until_monotonic_ns(ctx.start_ns);
    let mut idx: u64 = 0;
    let (mut sent, mut skipped, mut calls, mut refused) = (0u64, 0u64, 0u64, 0u64);
    let mut last_call: u64 = 0;
    let mut last_ns = ctx.start_ns;
    loop {
        if ctx.stop.load(Ordering::Relaxed) {
            break;
        }
        let mut n = plan.burst as u64;
        if let Some(c) = cfg.count {
            if idx >= c {
                break;
            }
            n = n.min(c - idx);
        }
        let now = match pacer.as_mut() {
            Some(p) => match p.wait_due(idx, plan.least as u64, &mut n, deadline, ctx.stop) {
                Some(t) => t,
                None => break,
            },
            None => sys::monotonic_ns(),
        };
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        // Build the batch: consecutive sequence numbers, skips left out.
        let (mut msg, mut in_msg, mut batch_sent) = (0usize, 0usize, 0u64);
        for k in 0..n {
            let seq = cfg.start_seq.wrapping_add(idx + k);
            if cfg.skipped(seq) {
                skipped += 1;
                continue;
            }
            let off = hdr + in_msg * plan.pkt_len;
            ctx.fmt.emit(fstream, seq, &mut batch.buf_mut(msg)[off..off + plan.pkt_len]);
            if let Some(t) = frame {
                t.finish(batch.buf_mut(msg));
            }
            if let Some(p) = pgm.as_mut() {
                p.seal(batch.buf_mut(msg), plan.pkt_len, now);
            }
            in_msg += 1;
            batch_sent += 1;
            if in_msg == plan.segs {
                batch.set_message(msg, hdr + in_msg * plan.pkt_len, seg);
                msg += 1;
                in_msg = 0;
            }
        }
        if in_msg > 0 {
            batch.set_message(msg, hdr + in_msg * plan.pkt_len, seg);
            msg += 1;
        }
        let mut done = 0;
        while done < msg {
            calls += 1;
            match batch.send(fd, done, msg) {
                Ok(k) => done += k,
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => refused += 1,
                Err(e) if e.kind() == io::ErrorKind::Interrupted || e.raw_os_error() == Some(libc::ENOBUFS) => {}
                Err(e) => return Err(explain_send_error(&e, plan, cfg)),
            }
        }
        sent += batch_sent;
        idx += n;
        if let Some(p) = pgm.as_mut() {
            p.pump(fd, sys::monotonic_ns());
        }
        if last_call != 0 {
            gaps.saturating_record(now - last_call);
        }
        last_call = now;
        // A paced batch ends on schedule at its last packet's due time (sent early within the
        // batch), or later if the batch went late: the run's span counts from there.
        last_ns = pacer.as_ref().map_or(now, |p| now.max(p.due(idx - 1)));
        let tenth = (now.saturating_sub(ctx.start_ns) / 100_000_000) as usize;
        if per_tenth.len() <= tenth {
            per_tenth.resize(tenth + 1, 0);
        }
        per_tenth[tenth] += n;
    }
    let cpu_ns = sys::thread_cpu_ns() - cpu0;
    let stopped_at_ns = ctx.stop.load(Ordering::Relaxed).then(|| sys::monotonic_ns().saturating_sub(ctx.start_ns));
    let last_seq = (idx > 0).then(|| cfg.start_seq.wrapping_add(idx - 1));

    // Tell the receiver how far this stream went, a few times in case one copy is dropped.
    let end = EndOfStream {
        session: ctx.session,
        stream_index: index,
        stream_count: cfg.streams as u32,
        format_stream: fstream,
        first_seq: cfg.start_seq,
        last_seq: cfg.start_seq.wrapping_add(idx).wrapping_sub(1),
        sent,
        skipped,
    }
    .encode();
    let pgm_sent = match pgm {
        // Through the session, as ODATA: repaired like the data, so sent once.
        Some(mut p) => {
            let mut pkt = vec![0u8; hdr + end.len()];
            pkt[hdr..].copy_from_slice(&end);
            let len = p.seal(&mut pkt, end.len(), sys::monotonic_ns());
            let _ = sock.send_one(&pkt[..len]);
            Some(p.finish(fd, ctx.stop))
        }
        None => {
            std::thread::sleep(Duration::from_millis(2));
            for _ in 0..3 {
                let _ = sock.send_one(&end);
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        }
    };
    let (slips, slipped_ns, max_behind_ns) =
        pacer.map(|p| (p.slips, p.slipped_ns, p.max_behind_ns)).unwrap_or((0, 0, 0));
    let sent_report = StreamSent {
        index,
        local_port,
        first_seq: cfg.start_seq,
        last_seq,
        sent,
        skipped,
        send_calls: calls,
        refused,
        slips,
        slipped_ns,
        max_behind_ns,
        cpu_ns,
        per_tenth,
        gaps: Some(gaps),
        elapsed_ns: last_ns.saturating_sub(ctx.start_ns),
        stopped_at_ns,
    };
    Ok((sent_report, pgm_sent))
}

/// Send as configured until the count, the duration or `stop` ends it.
pub fn run(cfg: &SendConfig, fmt: Arc<dyn Format>, stop: &AtomicBool) -> Result<SendReport> {
    validate(cfg, fmt.as_ref())?;
    let pkt_len = fmt.packet_len();
    let mut notes = Vec::new();
    let socks: Vec<Transport> = match &cfg.raw {
        Some(r) => {
            let (t, streams) = raw::prepare(cfg, &r.iface, r.dst_mac, pkt_len)?;
            notes.push(format!(
                "transport: raw Ethernet frames on {} (AF_PACKET, sendmmsg, qdisc {}) from {} ({}) to {} ({}: {})",
                t.iface,
                if streams[0].qdisc_bypass() { "bypassed" } else { "not bypassed: this kernel refused" },
                t.src_ip,
                t.src_mac,
                cfg.dest.ip(),
                t.dst_mac_from,
                t.dst_mac
            ));
            streams.into_iter().map(|s| Transport::Raw(Box::new(s))).collect()
        }
        None => (0..cfg.streams).map(|_| open_socket(cfg).map(Transport::Udp)).collect::<Result<_>>()?,
    };
    let mut pgms: Vec<Option<PgmTx>> = match (&cfg.pgm, &socks[0]) {
        (Some(p), Transport::Udp(data)) => {
            if cfg.streams != 1 {
                return Err(Error::invalid(
                    "--transport pgm sends one session: drop --streams (several senders make several sessions)",
                ));
            }
            notes.push(format!(
                "transport: PGM over UDP (RFC 3208, as OpenPGM encapsulates it) to {}, data-destination port {}, transmit window {} sequence numbers",
                cfg.dest, p.dport, p.window
            ));
            // The end-of-stream message goes through the window too: a slot holds either.
            vec![Some(PgmTx::open(cfg, p, data, pkt_len.max(crate::control::END_LEN))?)]
        }
        (Some(_), Transport::Raw(_)) => {
            return Err(Error::invalid("--transport pgm sends through a UDP socket: drop --raw"))
        }
        (None, _) => socks.iter().map(|_| None).collect(),
    };
    let gso_ok = match &socks[0] {
        // PGM: one packet per datagram, each with its own header.
        Transport::Udp(_) if cfg.pgm.is_some() => false,
        Transport::Udp(s) => sys::gso_supported(s.as_raw_fd()),
        Transport::Raw(_) => false,
    };
    if cfg.gso && !gso_ok && cfg.pgm.is_none() {
        notes.push(
            "GSO requested but this kernel does not support UDP_SEGMENT: sending one datagram per message".into(),
        );
    }
    let plan = plan(cfg, pkt_len, gso_ok);
    if plan.gso_used && plan.segs == 1 {
        notes.push(format!("GSO gains nothing at {pkt_len} bytes: only one datagram fits a 64 KiB super-datagram"));
    }
    let session = sys::realtime_ns() ^ (std::process::id() as u64).rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15;
    // Start slightly in the future so that every stream thread is ready at t0.
    let start_ns = sys::monotonic_ns() + 2_000_000;
    let ctx = StreamCtx { cfg, fmt: fmt.as_ref(), plan: &plan, stop, start_ns, session };
    let results: Vec<Result<(StreamSent, Option<PgmSent>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = socks
            .into_iter()
            .zip(pgms.drain(..))
            .enumerate()
            .map(|(i, (sock, pgm))| {
                let ctx = &ctx;
                std::thread::Builder::new()
                    .name(format!("ws-send-{i}"))
                    .spawn_scoped(s, move || run_stream(ctx, i as u32, sock, pgm))
                    .expect("spawning a sender thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("sender thread panicked")).collect()
    });
    let (streams, pgm): (Vec<StreamSent>, Vec<Option<PgmSent>>) =
        results.into_iter().collect::<Result<Vec<_>>>()?.into_iter().unzip();
    let mut report = summarise(cfg, fmt.as_ref(), &plan, streams, notes);
    report.pgm = pgm.into_iter().flatten().next();
    Ok(report)
}
