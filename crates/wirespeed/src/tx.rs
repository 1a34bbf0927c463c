//! The paced sender.
//!
//! One thread and one socket per stream (so each stream has its own source port and its order
//! is never broken by another thread), sendmmsg batches, and optionally UDP GSO so that one
//! system call carries dozens of datagrams: on a veth or loopback path that is the only way a
//! sender on one core can offer a receiver more than it can take. Every stream ends with an
//! end-of-stream message so the receiver can count tail loss.

use crate::control::EndOfStream;
use crate::error::{Error, Result};
use crate::pace::Pacer;
use crate::sys;
use crate::units::{self, Rate, MAX_UDP_PAYLOAD};
use crate::wire::Format;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most datagrams the kernel accepts in one GSO super-datagram (UDP_MAX_SEGMENTS).
const GSO_MAX_SEGMENTS: usize = 64;

/// Everything a send run needs.
#[derive(Clone, Debug)]
pub struct SendConfig {
    /// Destination (unicast or multicast).
    pub dest: SocketAddr,
    /// Local address to send from (default: any).
    pub bind: Option<IpAddr>,
    /// Total rate across all streams.
    pub rate: Rate,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Sequence numbers to generate per stream (skipped ones included).
    pub count: Option<u64>,
    /// Independent sequence spaces, each from its own socket and thread.
    pub streams: usize,
    /// Use UDP GSO (UDP_SEGMENT).
    pub gso: bool,
    /// Most datagrams per send call; `None` picks one from the rate.
    pub burst: Option<usize>,
    /// Leave out sequence numbers N-1, 2N-1, ... (1-based every Nth).
    pub skip_every: Option<u64>,
    /// Leave out these inclusive ranges of sequence numbers.
    pub skip_ranges: Vec<(u64, u64)>,
    /// First sequence number of every stream.
    pub start_seq: u64,
    /// CPUs to pin sender threads to, round-robin.
    pub cpus: Vec<usize>,
    /// After a stall, make up the backlog at up to this multiple of the nominal rate
    /// (infinity: full speed).
    pub catch_up_factor: f64,
    /// A backlog older than this is given up (the schedule moves forward; counted as a slip).
    pub max_lag: Duration,
    /// Multicast TTL.
    pub ttl: u32,
}

impl SendConfig {
    /// Defaults for a destination: 1 stream, unpaced until a rate is set, 10 s.
    pub fn new(dest: SocketAddr) -> Self {
        SendConfig {
            dest,
            bind: None,
            rate: Rate::Max,
            duration: None,
            count: None,
            streams: 1,
            gso: false,
            burst: None,
            skip_every: None,
            skip_ranges: Vec::new(),
            start_seq: 0,
            cpus: Vec::new(),
            catch_up_factor: 1.5,
            max_lag: Duration::from_millis(50),
            ttl: 1,
        }
    }

    fn skipped(&self, seq: u64) -> bool {
        if let Some(n) = self.skip_every {
            if n > 0 && seq % n == n - 1 {
                return true;
            }
        }
        self.skip_ranges.iter().any(|&(a, b)| seq >= a && seq <= b)
    }
}

/// Percentiles of the time between consecutive send calls.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct GapStats {
    /// Number of gaps measured.
    pub count: u64,
    /// Mean gap in nanoseconds.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Largest gap.
    pub max_ns: u64,
}

impl GapStats {
    fn from_hist(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return GapStats::default();
        }
        GapStats {
            count: h.len(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            max_ns: h.max(),
        }
    }
}

/// What one stream did.
#[derive(Clone, Debug, Serialize)]
pub struct StreamSent {
    /// Index of the stream in the run.
    pub index: u32,
    /// Local (source) port, which identifies the stream at the receiver.
    pub local_port: u16,
    /// First sequence number generated.
    pub first_seq: u64,
    /// Last sequence number generated (skipped included); `None` when none.
    pub last_seq: Option<u64>,
    /// Datagrams sent.
    pub sent: u64,
    /// Sequence numbers left out on purpose.
    pub skipped: u64,
    /// Send system calls made.
    pub send_calls: u64,
    /// Times a send was refused with "connection refused" (no receiver on the port).
    pub refused: u64,
    /// Pacing stalls (schedule moved forward).
    pub slips: u64,
    /// Total schedule shift in nanoseconds.
    pub slipped_ns: u64,
    /// Largest backlog behind schedule, nanoseconds (made up at the bounded catch-up speed).
    pub max_behind_ns: u64,
    /// CPU time of this stream's thread.
    pub cpu_ns: u64,
    #[serde(skip)]
    per_tenth: Vec<u64>,
    #[serde(skip)]
    gaps: Option<Histogram<u64>>,
    #[serde(skip)]
    elapsed_ns: u64,
    /// Time from the start to the loop's exit, when a stop request (Ctrl-C) ended it early.
    #[serde(skip)]
    stopped_at_ns: Option<u64>,
}

/// The result of a send run.
#[derive(Clone, Debug, Serialize)]
pub struct SendReport {
    /// Schema name and version of this document.
    pub schema: &'static str,
    /// Destination.
    pub target: String,
    /// Payload format.
    pub format: String,
    /// UDP payload bytes per datagram.
    pub payload_bytes: usize,
    /// The request as the user wrote it, normalised.
    pub requested: String,
    /// Requested packets/s (all streams), when paced.
    pub requested_pps: Option<f64>,
    /// Whether GSO was asked for and whether it was used.
    pub gso_requested: bool,
    /// GSO actually in use.
    pub gso_used: bool,
    /// Datagrams per GSO super-datagram.
    pub gso_segments: usize,
    /// Datagrams per send call (the burst bound).
    pub burst: usize,
    /// Seconds the schedule spanned: from the first send to one period after the last (so N
    /// packets at R read as exactly R), never more than `--duration`; a run stopped by a signal,
    /// to the moment it stopped.
    pub elapsed_s: f64,
    /// Datagrams sent (all streams).
    pub sent: u64,
    /// Sequence numbers left out on purpose (all streams).
    pub skipped: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Achieved datagrams per second.
    pub achieved_pps: f64,
    /// Achieved UDP payload bits per second.
    pub achieved_bps: f64,
    /// Equivalent Ethernet wire rate (headers, FCS, preamble, gap).
    pub wire_bps: f64,
    /// Achieved / requested sequence rate (1.0 = exact), when paced.
    pub rate_ratio: Option<f64>,
    /// Sequence numbers sent or skipped in each whole second of the run (all streams).
    pub per_second: Vec<u64>,
    /// Lowest and highest rate over any 1 s window (sliding in 0.1 s steps) as a fraction of
    /// the request, when paced and the run lasted at least 1 s.
    pub per_second_range: Option<(f64, f64)>,
    /// Gaps between consecutive send calls (all streams merged).
    pub gaps: GapStats,
    /// Pacing stalls given up (backlog beyond --max-lag), all streams.
    pub slips: u64,
    /// Largest backlog behind schedule of any stream, nanoseconds.
    pub max_behind_ns: u64,
    /// "Connection refused" results (nobody listening), all streams.
    pub refused: u64,
    /// CPU time of the sender threads per datagram sent, nanoseconds.
    pub cpu_ns_per_packet: f64,
    /// Per-stream detail.
    pub streams: Vec<StreamSent>,
    /// Things the user should know (fallbacks, clamps).
    pub notes: Vec<String>,
}

struct Plan {
    pkt_len: usize,
    segs: usize,
    burst: usize,
    msgs: usize,
    pps_per_stream: Option<f64>,
    gso_used: bool,
}

fn plan(cfg: &SendConfig, pkt_len: usize, gso_ok: bool) -> Plan {
    let pps_per_stream = cfg.rate.packets_per_sec(pkt_len).map(|p| p / cfg.streams as f64);
    let gso_used = cfg.gso && gso_ok;
    let segs = if gso_used { (MAX_UDP_PAYLOAD / pkt_len).clamp(1, GSO_MAX_SEGMENTS) } else { 1 };
    let max_burst = if gso_used { segs * 16 } else { 64 };
    let auto = match pps_per_stream {
        // Aim for one send call about every 50 us: bursts stay short, calls stay cheap.
        Some(p) => ((p * 50e-6).round() as usize).clamp(1, max_burst),
        None => max_burst,
    };
    let burst = cfg.burst.unwrap_or(auto).max(1);
    let msgs = burst.div_ceil(segs);
    Plan { pkt_len, segs, burst, msgs, pps_per_stream, gso_used }
}

fn explain_send_error(e: &io::Error, plan: &Plan, dest: SocketAddr) -> Error {
    match e.raw_os_error() {
        Some(libc::EMSGSIZE) => Error::Runtime(format!(
            "the kernel refused a {}-byte datagram to {dest} as too large (EMSGSIZE): use a smaller --size",
            plan.pkt_len
        )),
        Some(libc::EINVAL) if plan.gso_used => Error::Runtime(format!(
            "the kernel refused GSO with {}-byte segments to {dest} (EINVAL): the segment plus headers must fit the path MTU; use a smaller --size or drop --gso",
            plan.pkt_len
        )),
        Some(libc::EIO) if plan.gso_used => Error::Runtime(format!(
            "the device towards {dest} cannot do UDP GSO (EIO: no checksum offload): run without --gso"
        )),
        Some(libc::ENETUNREACH) | Some(libc::EHOSTUNREACH) => {
            Error::Runtime(format!("no route to {dest}: check the address and `ip route get {}`", dest.ip()))
        }
        Some(libc::EACCES) => Error::Runtime(format!(
            "sending to {dest} was refused (EACCES): a broadcast address needs SO_BROADCAST, or a firewall forbids it"
        )),
        _ => Error::Runtime(format!("sending to {dest} failed: {e}")),
    }
}

fn open_socket(cfg: &SendConfig) -> Result<UdpSocket> {
    let local = match (cfg.bind, cfg.dest) {
        (Some(ip), _) => SocketAddr::new(ip, 0),
        (None, SocketAddr::V4(_)) => SocketAddr::from(([0, 0, 0, 0], 0)),
        (None, SocketAddr::V6(_)) => SocketAddr::from(([0u16; 8], 0)),
    };
    let sock = UdpSocket::bind(local).map_err(|e| crate::error::bind_error(local, e))?;
    if cfg.dest.ip().is_multicast() {
        if let SocketAddr::V4(_) = cfg.dest {
            let _ = sock.set_multicast_ttl_v4(cfg.ttl);
            let _ = sock.set_multicast_loop_v4(true);
        }
    }
    sock.connect(cfg.dest).map_err(|e| match e.raw_os_error() {
        Some(libc::ENETUNREACH) => {
            Error::Runtime(format!("no route to {}: check the address and `ip route get {}`", cfg.dest, cfg.dest.ip()))
        }
        _ => Error::Runtime(format!("cannot address {}: {e}", cfg.dest)),
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

fn run_stream(ctx: &StreamCtx<'_>, index: u32, sock: UdpSocket) -> Result<StreamSent> {
    // The format's own stream id for this sender stream (a VDIF thread).
    let fstream = index % ctx.fmt.stream_count().max(1);
    let cfg = ctx.cfg;
    let plan = ctx.plan;
    if !cfg.cpus.is_empty() {
        let cpu = cfg.cpus[index as usize % cfg.cpus.len()];
        sys::pin_current_thread(cpu)
            .map_err(|e| Error::Usage(format!("cannot pin sender thread to CPU {cpu}: {e} (see `nproc`)")))?;
    }
    let fd = sock.as_raw_fd();
    let local_port = sock.local_addr().map(|a| a.port()).unwrap_or(0);
    let mut batch = sys::SendBatch::new(plan.msgs, plan.segs * plan.pkt_len);
    let mut gaps = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds are valid");
    let tenths_hint = cfg.duration.map(|d| d.as_secs() as usize * 10 + 20).unwrap_or(640);
    let mut per_tenth: Vec<u64> = Vec::with_capacity(tenths_hint);
    let mut pacer =
        plan.pps_per_stream.map(|p| Pacer::new(p, ctx.start_ns, cfg.max_lag.as_nanos() as u64, cfg.catch_up_factor));
    let deadline = cfg.duration.map(|d| ctx.start_ns + d.as_nanos() as u64);
    let cpu0 = sys::thread_cpu_ns();
    let seg = plan.gso_used.then_some(plan.pkt_len as u16);

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
            Some(p) => match p.wait(idx, n, deadline, ctx.stop) {
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
            let off = in_msg * plan.pkt_len;
            ctx.fmt.emit(fstream, seq, &mut batch.buf_mut(msg)[off..off + plan.pkt_len]);
            in_msg += 1;
            batch_sent += 1;
            if in_msg == plan.segs {
                batch.set_message(msg, in_msg * plan.pkt_len, seg);
                msg += 1;
                in_msg = 0;
            }
        }
        if in_msg > 0 {
            batch.set_message(msg, in_msg * plan.pkt_len, seg);
            msg += 1;
        }
        let mut done = 0;
        while done < msg {
            calls += 1;
            match batch.send(fd, done, msg) {
                Ok(k) => done += k,
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => refused += 1,
                Err(e) if e.kind() == io::ErrorKind::Interrupted || e.raw_os_error() == Some(libc::ENOBUFS) => {}
                Err(e) => return Err(explain_send_error(&e, plan, cfg.dest)),
            }
        }
        sent += batch_sent;
        idx += n;
        if last_call != 0 {
            gaps.saturating_record(now - last_call);
        }
        last_call = now;
        last_ns = now;
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
    std::thread::sleep(Duration::from_millis(2));
    for _ in 0..3 {
        let _ = sys::send_one(fd, &end);
        std::thread::sleep(Duration::from_millis(1));
    }
    let (slips, slipped_ns, max_behind_ns) =
        pacer.map(|p| (p.slips, p.slipped_ns, p.max_behind_ns)).unwrap_or((0, 0, 0));
    Ok(StreamSent {
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
    })
}

/// Check a configuration before any socket is opened (usage errors, exit code 2).
pub fn validate(cfg: &SendConfig, fmt: &dyn Format) -> Result<()> {
    let len = fmt.packet_len();
    if len == 0 || len > MAX_UDP_PAYLOAD {
        return Err(Error::Usage(format!(
            "payload of {len} bytes does not fit a UDP datagram: use 1..{MAX_UDP_PAYLOAD} bytes (8800 is the usual jumbo size)"
        )));
    }
    if cfg.streams == 0 || cfg.streams > 1024 {
        return Err(Error::Usage("--streams must be between 1 and 1024".into()));
    }
    if cfg.duration.is_none() && cfg.count.is_none() {
        return Err(Error::Usage("say how long to send: --duration SECS or --count PACKETS".into()));
    }
    if cfg.skip_every == Some(0) {
        return Err(Error::Usage("--skip-every needs N >= 1".into()));
    }
    if let Some(&(a, b)) = cfg.skip_ranges.iter().find(|(a, b)| a > b) {
        return Err(Error::Usage(format!("--skip {a}..{b} is empty: write the smaller number first")));
    }
    if cfg.dest.ip().is_unspecified() {
        return Err(Error::Usage(format!("{} is not a destination: give the receiver's address", cfg.dest.ip())));
    }
    Ok(())
}

/// Send as configured until the count, the duration or `stop` ends it.
pub fn run(cfg: &SendConfig, fmt: Arc<dyn Format>, stop: &AtomicBool) -> Result<SendReport> {
    validate(cfg, fmt.as_ref())?;
    let pkt_len = fmt.packet_len();
    let mut notes = Vec::new();
    let socks: Vec<UdpSocket> = (0..cfg.streams).map(|_| open_socket(cfg)).collect::<Result<_>>()?;
    let gso_ok = sys::gso_supported(socks[0].as_raw_fd());
    if cfg.gso && !gso_ok {
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
    let results: Vec<Result<StreamSent>> = std::thread::scope(|s| {
        let handles: Vec<_> = socks
            .into_iter()
            .enumerate()
            .map(|(i, sock)| {
                let ctx = &ctx;
                std::thread::Builder::new()
                    .name(format!("ws-send-{i}"))
                    .spawn_scoped(s, move || run_stream(ctx, i as u32, sock))
                    .expect("spawning a sender thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("sender thread panicked")).collect()
    });
    let streams: Vec<StreamSent> = results.into_iter().collect::<Result<_>>()?;
    Ok(summarise(cfg, fmt.as_ref(), &plan, streams, notes))
}

fn summarise(
    cfg: &SendConfig,
    fmt: &dyn Format,
    plan: &Plan,
    streams: Vec<StreamSent>,
    notes: Vec<String>,
) -> SendReport {
    let sent: u64 = streams.iter().map(|s| s.sent).sum();
    let skipped: u64 = streams.iter().map(|s| s.skipped).sum();
    let elapsed_ns = streams.iter().map(|s| s.elapsed_ns).max().unwrap_or(0);
    // Rates are taken over the whole schedule: for a paced run, the time the last due packet
    // was sent plus one period, so that N packets at R pps read as exactly R.
    // A run cut short by Ctrl-C is measured to the moment it stopped.
    let stopped_ns = streams.iter().filter_map(|s| s.stopped_at_ns).max();
    let span_s = match (stopped_ns, plan.pps_per_stream) {
        (Some(t), _) => t as f64 / 1e9,
        (None, Some(p)) => elapsed_ns as f64 / 1e9 + 1.0 / p,
        (None, None) => elapsed_ns as f64 / 1e9,
    }
    .max(1e-9);
    // A run bounded by --duration took no longer than that, whatever the schedule's period
    // (one 64-bit datagram at 10 b/s is due every 6.4 s, yet a 1 s run ends after 1 s).
    let span_s = cfg.duration.map_or(span_s, |d| span_s.min(d.as_secs_f64().max(1e-9)));
    let mut gaps = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds are valid");
    let mut per_tenth: Vec<u64> = Vec::new();
    for s in &streams {
        if let Some(h) = &s.gaps {
            let _ = gaps.add(h);
        }
        if per_tenth.len() < s.per_tenth.len() {
            per_tenth.resize(s.per_tenth.len(), 0);
        }
        for (i, v) in s.per_tenth.iter().enumerate() {
            per_tenth[i] += v;
        }
    }
    let requested_pps = plan.pps_per_stream.map(|p| p * cfg.streams as f64);
    let generated = sent + skipped;
    let achieved_seq_pps = generated as f64 / span_s;
    // Only windows wholly inside the run count: the last, partial tenth is left out.
    let full_tenths = ((elapsed_ns / 100_000_000) as usize).min(per_tenth.len());
    let per_second: Vec<u64> = per_tenth[..full_tenths].chunks_exact(10).map(|c| c.iter().sum()).collect();
    let per_second_range = requested_pps.and_then(|r| {
        let windows: Vec<f64> =
            per_tenth[..full_tenths].windows(10).map(|w| w.iter().sum::<u64>() as f64 / r).collect();
        if windows.is_empty() {
            None
        } else {
            Some((windows.iter().cloned().fold(f64::MAX, f64::min), windows.iter().cloned().fold(0.0, f64::max)))
        }
    });
    let cpu: u64 = streams.iter().map(|s| s.cpu_ns).sum();
    let achieved_pps = sent as f64 / span_s;
    SendReport {
        schema: "wirespeed.send/1",
        target: cfg.dest.to_string(),
        format: fmt.name(),
        payload_bytes: plan.pkt_len,
        requested: cfg.rate.to_string(),
        requested_pps,
        gso_requested: cfg.gso,
        gso_used: plan.gso_used,
        gso_segments: plan.segs,
        burst: plan.burst,
        elapsed_s: span_s,
        sent,
        skipped,
        bytes: sent * plan.pkt_len as u64,
        achieved_pps,
        achieved_bps: achieved_pps * plan.pkt_len as f64 * 8.0,
        wire_bps: units::wire_bits(achieved_pps, plan.pkt_len),
        rate_ratio: requested_pps.map(|r| achieved_seq_pps / r),
        per_second,
        per_second_range,
        gaps: GapStats::from_hist(&gaps),
        slips: streams.iter().map(|s| s.slips).sum(),
        max_behind_ns: streams.iter().map(|s| s.max_behind_ns).max().unwrap_or(0),
        refused: streams.iter().map(|s| s.refused).sum(),
        cpu_ns_per_packet: if sent > 0 { cpu as f64 / sent as f64 } else { 0.0 },
        streams,
        notes,
    }
}

impl SendReport {
    /// The human summary printed at the end of `wirespeed send`.
    pub fn human(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "wirespeed send -> {}  {}  {} B  {} stream(s)  rate {}{}",
            self.target,
            self.format,
            self.payload_bytes,
            self.streams.len(),
            self.requested,
            match (self.requested_pps, self.requested.ends_with("pps")) {
                (Some(p), false) => format!(" ({})", units::pps(p)),
                _ => String::new(),
            }
        );
        let _ = writeln!(
            o,
            "  sent {} datagrams in {:.3} s: {} payload ({} on the wire), {}",
            units::thousands(self.sent),
            self.elapsed_s,
            units::bits(self.achieved_bps),
            units::bits(self.wire_bps),
            units::pps(self.achieved_pps)
        );
        if let Some(r) = self.rate_ratio {
            let _ = write!(o, "  achieved {:.2}% of the requested rate", r * 100.0);
            if let Some((lo, hi)) = self.per_second_range {
                let _ = write!(o, "; any 1 s window {:.2}%..{:.2}%", lo * 100.0, hi * 100.0);
            }
            let _ = writeln!(o);
        }
        if self.gaps.count > 0 {
            let _ = writeln!(
                o,
                "  send calls every {} (p50), p99 {}, max {}; up to {} datagram(s) per call{}",
                units::nanos(self.gaps.p50_ns as f64),
                units::nanos(self.gaps.p99_ns as f64),
                units::nanos(self.gaps.max_ns as f64),
                self.burst,
                if self.gso_used { format!(", GSO {} per super-datagram", self.gso_segments) } else { String::new() }
            );
        }
        if self.skipped > 0 {
            let _ = writeln!(o, "  left out on purpose: {} sequence numbers", units::thousands(self.skipped));
        }
        if self.slips > 0 {
            let _ = writeln!(
                o,
                "  gave up on the schedule {} time(s) after stalls longer than --max-lag: the host could not sustain the rate",
                self.slips
            );
        }
        if self.max_behind_ns > 1_000_000 && self.slips == 0 {
            let _ = writeln!(
                o,
                "  stalled up to {} behind schedule and caught up at the bounded speed (--catch-up-factor)",
                units::nanos(self.max_behind_ns as f64)
            );
        }
        if self.refused > 0 {
            let _ = writeln!(
                o,
                "  destination refused {} time(s): is a receiver listening on {}?",
                self.refused, self.target
            );
        }
        let _ = writeln!(o, "  sender CPU {} per datagram", units::nanos(self.cpu_ns_per_packet));
        for n in &self.notes {
            let _ = writeln!(o, "  note: {n}");
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_rules() {
        let mut c = SendConfig::new("127.0.0.1:9".parse().unwrap());
        c.skip_every = Some(100);
        c.skip_ranges = vec![(5, 7)];
        let skipped: Vec<u64> = (0..300).filter(|&s| c.skipped(s)).collect();
        assert_eq!(skipped, vec![5, 6, 7, 99, 199, 299]);
    }

    #[test]
    fn burst_plan() {
        let mut c = SendConfig::new("127.0.0.1:9".parse().unwrap());
        c.rate = Rate::Packets(1e6);
        let p = plan(&c, 1080, true);
        assert_eq!((p.segs, p.burst), (1, 50));
        c.gso = true;
        let p = plan(&c, 1080, true);
        assert_eq!(p.segs, 60);
        assert_eq!(p.msgs, 1);
        let p = plan(&c, 8800, true);
        assert_eq!(p.segs, 7);
        assert_eq!(p.msgs, 8);
        let p = plan(&c, 8800, false);
        assert_eq!(p.segs, 1);
        c.rate = Rate::Packets(10.0);
        assert_eq!(plan(&c, 8800, true).burst, 1);
    }
}
