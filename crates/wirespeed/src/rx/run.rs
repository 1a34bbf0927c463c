//! Running a capture: the [`Listener`] (the opened endpoints, one per capture thread), the
//! capture threads started on it, the watcher beside them (progress lines, and with several
//! threads the run's common stop), and the report built after them.
//!
//! With `threads > 1`, every thread has its own socket in one SO_REUSEPORT group, its own
//! [`Capture`] (slots and ledgers) and its own sink; nothing is shared on the hot path. The
//! kernel steers each stream to one thread ([`Steer`]), so each stream's ledger lives on one
//! thread and the run's report is the exact sum of the threads' reports. Multicast is
//! different: the kernel hands every member of the group a copy of each datagram, so each
//! thread applies the same steering in user space and drops the others' share before the
//! ledger (counted per thread as `not_steered_here`).

use super::backend::{self, Backend, BackendKind, Bound, Member, Opened, RunBackend};
use super::capture::{nap_cap_ns, Capture, CaptureRun, LoopResult};
use super::relearn::Relearn;
use super::report::{build_report, merge_reports, KernelView, RecvReport, ThreadReport};
use super::sink::{Live, NullSink, Progress, Sink};
use super::RecvConfig;
use crate::error::{Error, Result};
use crate::kernel::{self, KernelCounters};
use crate::sys;
use crate::sys::bpf::Steer;
use crate::units;
use crate::wire::vdif::{Vdif, Vtp};
use crate::wire::Format;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// An opened receive endpoint of the configured backend, ready for [`capture`]: one per
/// capture thread.
///
/// The backend owns the socket (or ring); the listener keeps it open until the report is
/// written, so that the kernel's per-socket counters can be read after the last datagram, and
/// keeps what the report says about it.
pub struct Listener {
    pub(super) endpoint: Opened,
    pub(super) bound: Bound,
    /// The other capture threads' endpoints (threads 1..N), in the order they joined the
    /// group, which is the order the steering program numbers them.
    pub(super) others: Vec<(Opened, Bound)>,
    /// How the datagrams are spread over the threads.
    pub(super) steer: Steer,
    /// Datagrams read before the capture (while the layout was learned): the first capture
    /// thread counts them first.
    pub(super) held: Vec<super::learn::Held>,
    /// A layout learned from the stream: its family, and whether the capture counts by a new
    /// layout when the stream changes (recv) or only says so (record); see [`super::relearn`].
    pub(super) relearn: Option<(&'static str, bool)>,
}

/// How a run with several threads should steer `fmt`'s datagrams: by the format's stream id
/// when it has several streams a single source may interleave (VDIF and VTP threads), by
/// source address and port otherwise.
pub fn steering_for(fmt: &dyn Format) -> Steer {
    if fmt.stream_count() > 1 {
        if let Some(any) = fmt.as_any() {
            // The VDIF thread id: bits 16..25 of the little-endian word 3 (bytes 14 and 15).
            if any.downcast_ref::<Vdif>().is_some() {
                return Steer::PayloadStream { offset: 14, mask: 0x3ff };
            }
            if any.downcast_ref::<Vtp>().is_some() {
                return Steer::PayloadStream { offset: 8 + 14, mask: 0x3ff };
            }
        }
    }
    Steer::Source
}

impl Listener {
    /// A recorder's run: a change of the learned layout mid-run is said, not followed (its
    /// files are described by the layout they began with).
    pub fn note_layout_changes_only(&mut self) {
        if let Some((_, follow)) = &mut self.relearn {
            *follow = false;
        }
    }

    /// Open the backend `cfg` names, one endpoint per capture thread (`cfg.threads`), steered
    /// as `cfg.steer` says; failures are explained for the user.
    pub fn bind(cfg: &RecvConfig) -> Result<Listener> {
        let n = cfg.threads.max(1);
        if n > super::config::MAX_THREADS {
            return Err(Error::param(
                "threads",
                format!("{n} is out of range: give 1..{}", super::config::MAX_THREADS),
            ));
        }
        // An id no other run of this process or another shares (a fanout group id).
        let group = (std::process::id() << 8) ^ (sys::monotonic_ns() as u32 & 0xff);
        let member = |index| if n == 1 { Member::SOLE } else { Member { index, count: n, group } };
        let (endpoint, bound) = backend::open(cfg.backend, cfg, member(0))?;
        let mut others = Vec::with_capacity(n - 1);
        if n > 1 {
            // Later members bind the port the first one got (port 0 asks the kernel for one).
            let mut c = cfg.clone();
            if let Some(a) = bound.local_addr {
                c.listen.set_port(a.port());
            }
            for i in 1..n {
                others.push(backend::open(cfg.backend, &c, member(i))?);
            }
        }
        Ok(Listener { endpoint, bound, others, steer: cfg.steer, held: Vec::new(), relearn: None })
    }

    /// [`Listener::bind`], steering as suits `fmt` ([`steering_for`]).
    pub fn bind_for(cfg: &RecvConfig, fmt: &dyn Format) -> Result<Listener> {
        let mut c = cfg.clone();
        c.steer = steering_for(fmt);
        c.pgm_max_tsdu = fmt.fixed_len().unwrap_or(cfg.pgm_max_tsdu);
        Self::bind(&c)
    }

    /// The PGM receiver's report, when this listener runs the PGM backend.
    pub fn pgm_report(&self) -> Option<backend::pgm::PgmRecvReport> {
        match &self.endpoint {
            Opened::Pgm(ep) => Some(ep.report()),
            _ => None,
        }
    }

    /// The bound address (useful when binding port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.bound.local_addr
    }

    /// Which backend this listener receives with.
    pub fn backend(&self) -> BackendKind {
        self.endpoint.kind()
    }

    /// How many capture threads (endpoints) it serves.
    pub fn threads(&self) -> usize {
        1 + self.others.len()
    }

    fn member(&self, i: usize) -> (&Opened, &Bound) {
        match i {
            0 => (&self.endpoint, &self.bound),
            _ => {
                let (o, b) = &self.others[i - 1];
                (o, b)
            }
        }
    }

    /// What the report says about the steering.
    fn steering_text(&self, multicast: bool) -> String {
        if self.others.is_empty() {
            return "none (one capture thread)".into();
        }
        let by = match self.steer {
            Steer::Source => "source address and port".to_string(),
            Steer::PayloadStream { offset, .. } => format!("the format's stream id (payload byte {offset})"),
        };
        if multicast {
            format!("by {by}, in user space (every thread receives each multicast datagram and keeps its share)")
        } else if self.bound.notes.iter().any(|n| n.starts_with(backend::udp::STEERING_REFUSED)) {
            "the kernel's flow hash (the steering program was refused)".into()
        } else {
            format!("by {by}, classic BPF in the kernel (SO_ATTACH_REUSEPORT_CBPF)")
        }
    }
}

/// The run's account of ended streams across capture threads, for `--once`: each thread
/// publishes its own (session, streams expected, streams ended) after every receive call, and
/// the run is over when the threads that saw one session's ends together hold all of its
/// streams. Relaxed atomics, read and written only between receive calls and only with
/// `--once`.
pub(super) struct OnceGroup {
    /// Per thread: the session id of its first ended stream (0 with `state` 0: none).
    session: Vec<AtomicU64>,
    /// Per thread: `expected << 32 | ended`, or 0 when it has no session.
    state: Vec<AtomicU64>,
}

impl OnceGroup {
    fn new(threads: usize) -> Self {
        OnceGroup {
            session: (0..threads).map(|_| AtomicU64::new(0)).collect(),
            state: (0..threads).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Publish thread `index`'s account and say whether the run's first session has ended.
    pub(super) fn done(&self, index: usize, mine: Option<(u64, u32, u32)>) -> bool {
        match mine {
            Some((sess, expected, ended)) => {
                self.session[index].store(sess, Ordering::Relaxed);
                self.state[index].store((u64::from(expected) << 32) | u64::from(ended), Ordering::Relaxed);
            }
            None => self.state[index].store(0, Ordering::Relaxed),
        }
        // The session of the lowest thread that has one: all threads judge the same one.
        let Some(first) = (0..self.state.len()).find(|&j| self.state[j].load(Ordering::Relaxed) != 0) else {
            return false;
        };
        let sess = self.session[first].load(Ordering::Relaxed);
        let expected = self.state[first].load(Ordering::Relaxed) >> 32;
        let ended: u64 = (0..self.state.len())
            .filter(|&j| self.session[j].load(Ordering::Relaxed) == sess)
            .map(|j| self.state[j].load(Ordering::Relaxed) & 0xffff_ffff)
            .sum();
        expected > 0 && ended >= expected
    }
}

/// A backend whose datagrams are first sorted by the run's steering: what is not this
/// thread's share never reaches the capture (multicast, where every member gets a copy).
struct Filtered<'r, B: Backend> {
    inner: B,
    steer: Steer,
    index: u32,
    members: u32,
    others: u64,
    out: &'r AtomicU64,
}

impl<B: Backend> Backend for Filtered<'_, B> {
    const NAME: &'static str = B::NAME;
    type Endpoint = B::Endpoint;

    fn open(cfg: &RecvConfig, member: Member) -> Result<(Self::Endpoint, Bound)> {
        B::open(cfg, member)
    }

    fn start(_: &Self::Endpoint, _: &RecvConfig) -> Self {
        unreachable!("a filtered backend wraps a started one")
    }

    #[inline]
    fn recv<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, mut f: F) -> io::Result<usize> {
        let (steer, index, members) = (self.steer, self.index, self.members);
        let others = &mut self.others;
        self.inner.recv(|d, src| if steer.member(d, src, members) == index { f(d, src) } else { *others += 1 })
    }

    fn kernel_drops(&self) -> Option<u64> {
        self.inner.kernel_drops()
    }

    fn truncated(&self) -> u64 {
        self.inner.truncated()
    }

    fn final_drops(&mut self) -> Option<u64> {
        self.inner.final_drops()
    }
}

impl<B: Backend> Drop for Filtered<'_, B> {
    fn drop(&mut self) {
        self.out.store(self.others, Ordering::Relaxed);
    }
}

/// The capture loop over a [`Filtered`] backend.
struct FilteredRun<'r, 'a, S: Sink> {
    run: CaptureRun<'r, 'a, S>,
    steer: Steer,
    index: u32,
    members: u32,
    out: &'r AtomicU64,
}

impl<'a, S: Sink> RunBackend for FilteredRun<'_, 'a, S> {
    type Output = Result<LoopResult<'a, S>>;

    fn run<B: Backend>(self, backend: B) -> Self::Output {
        let f = Filtered {
            inner: backend,
            steer: self.steer,
            index: self.index,
            members: self.members,
            others: 0,
            out: self.out,
        };
        self.run.run(f)
    }
}

/// Receive until the duration, the count, the senders' end messages or `stop` ends the run.
/// `progress` is called every `interval` from a helper thread, never from the capture thread.
pub fn capture(
    cfg: &RecvConfig,
    listener: Listener,
    fmt: &dyn Format,
    stop: &AtomicBool,
    interval: Option<Duration>,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<RecvReport> {
    let sinks = (0..listener.threads()).map(|_| NullSink).collect();
    capture_group(cfg, listener, fmt, stop, interval, progress, sinks).map(|(r, _)| r)
}

/// [`capture`], handing every datagram to `sink` as well (the recorder's ring). The sink comes
/// back with the report. For a one-thread listener; [`capture_group`] takes one sink a thread.
pub fn capture_with<S: Sink>(
    cfg: &RecvConfig,
    listener: Listener,
    fmt: &dyn Format,
    stop: &AtomicBool,
    interval: Option<Duration>,
    progress: &(dyn Fn(&Progress) + Sync),
    sink: S,
) -> Result<(RecvReport, S)> {
    let (r, mut sinks) = capture_group(cfg, listener, fmt, stop, interval, progress, vec![sink])?;
    Ok((r, sinks.remove(0)))
}

/// Why the watcher ended a several-thread run for all threads, when it did.
type RunStop = OnceLock<String>;

/// [`capture`] on every thread of `listener`, thread `i` handing its datagrams to `sinks[i]`
/// (one sink a thread: each thread records into its own ring). The sinks come back in thread
/// order with the merged report.
pub fn capture_group<S: Sink>(
    cfg: &RecvConfig,
    listener: Listener,
    fmt: &dyn Format,
    stop: &AtomicBool,
    interval: Option<Duration>,
    progress: &(dyn Fn(&Progress) + Sync),
    sinks: Vec<S>,
) -> Result<(RecvReport, Vec<S>)> {
    let n = listener.threads();
    if sinks.len() != n {
        return Err(Error::failed(format!("{} sinks for {n} capture threads", sinks.len())));
    }
    let mut tcfg = cfg.clone();
    tcfg.threads = n;
    tcfg.check_limits()?;
    // Port 0 asked the kernel for one: the report names the port it gave, so what it says
    // (and the doctor command it suggests) speaks of the real one.
    if tcfg.listen.port() == 0 {
        if let Some(a) = listener.local_addr() {
            tcfg.listen.set_port(a.port());
        }
    }
    if n > 1 {
        tcfg.cpu = None;
        tcfg.count = None; // the watcher counts for the whole run
    }
    if n == 1 && tcfg.cpu.is_none() {
        tcfg.cpu = cfg.cpus.first().copied();
        tcfg.cpus.clear();
    }
    let cfg_t = &tcfg;
    let multicast = cfg.listen.ip().is_multicast() && n > 1;
    let mut ledger_cfg = cfg.ledger.clone();
    ledger_cfg.seq_bits = ledger_cfg.seq_bits.min(fmt.seq_bits());
    // With a metrics exporter, room for each stream's own counters, and the exporter shown them.
    let cells = if cfg.show.is_some() { cfg.max_streams } else { 0 };
    let lives: std::sync::Arc<[Live]> = (0..n).map(|_| Live::with_streams(cells)).collect();
    if let Some(show) = &cfg.show {
        show.capture(lives.clone());
    }
    let others: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let once_group = OnceGroup::new(n);
    let done = AtomicBool::new(false);
    // One thread: the caller's stop flag, exactly as before. Several: the run's own, set by
    // the watcher (signal, --count) or by a thread that ended early (an error, a full disk).
    let run_stop_flag = AtomicBool::new(false);
    let run_stop_why = RunStop::new();
    let stop_t: &AtomicBool = if n == 1 { stop } else { &run_stop_flag };
    let naps: Vec<u64> = (0..n)
        .map(|i| {
            let granted = listener.member(i).1.rcvbuf_granted;
            if cfg.busy_poll {
                0
            } else {
                (cfg.coalesce.as_nanos() as u64).min(nap_cap_ns(granted))
            }
        })
        .collect();
    let k0 = KernelCounters::read();
    let t0 = sys::monotonic_ns();

    let results: Vec<Result<LoopResult<'_, S>>> = std::thread::scope(|s| {
        let watcher = (interval.is_some() || n > 1).then(|| {
            let (lives, done, k0) = (&lives, &done, &k0);
            let (run_stop_flag, run_stop_why) = (&run_stop_flag, &run_stop_why);
            let count = if n > 1 { cfg.count } else { None };
            s.spawn(move || {
                watch_loop(lives, done, interval, t0, k0, progress, n > 1, stop, count, run_stop_flag, run_stop_why)
            })
        });
        let handles: Vec<_> = sinks
            .into_iter()
            .enumerate()
            .map(|(i, sink)| {
                let (lives, others, once_group, ledger_cfg, listener) =
                    (&lives, &others, &once_group, &ledger_cfg, &listener);
                let nap_ns = naps[i];
                let run_stop_flag = &run_stop_flag;
                std::thread::Builder::new()
                    .name(if n == 1 { "ws-capture".into() } else { format!("ws-capture-{i}") })
                    .spawn_scoped(s, move || {
                        let pin = if n == 1 { cfg_t.cpu } else { cfg_t.cpus.get(i).copied() };
                        if let Some(cpu) = pin {
                            sys::pin_current_thread(cpu).map_err(|e| {
                                run_stop_flag.store(true, Ordering::Relaxed);
                                Error::invalid(format!("cannot pin capture thread {i} to CPU {cpu}: {e} (see `nproc`)"))
                            })?;
                        }
                        // Once, before the first receive call: SCHED_FIFO when --realtime asks.
                        cfg_t
                            .priority
                            .apply_thread(&format!("capture thread {i}"))
                            .inspect_err(|_| run_stop_flag.store(true, Ordering::Relaxed))?;
                        let mut cap = Capture::new(fmt, sink, ledger_cfg, cfg_t.max_streams, t0);
                        if n > 1 {
                            cap.once_group = Some((once_group, i));
                        }
                        if let (0, 1, Some((family, follow))) = (i, n, listener.relearn) {
                            cap.relearn = Some(Box::new(Relearn::new(family, fmt.spec(), follow)));
                        }
                        if i == 0 {
                            for h in &listener.held {
                                cap.replay(&h.data, h.src, h.at_ns);
                            }
                        }
                        let run = CaptureRun { cfg: cfg_t, cap, stop: stop_t, live: &lives[i], t0, nap_ns };
                        let (endpoint, _) = listener.member(i);
                        let r = if multicast {
                            let steer = listener.steer;
                            let fr = FilteredRun { run, steer, index: i as u32, members: n as u32, out: &others[i] };
                            endpoint.run(cfg_t, fr)
                        } else {
                            endpoint.run(cfg_t, run)
                        };
                        // A thread that ends on its own account (an error, a full disk) ends
                        // the run; --once and --duration end every thread by themselves.
                        let by_itself = matches!(&r, Ok(x) if x.3 == "end of stream" || x.3 == "duration");
                        if n > 1 && !by_itself {
                            run_stop_flag.store(true, Ordering::Relaxed);
                        }
                        r
                    })
                    .expect("spawning a capture thread")
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().expect("capture thread panicked")).collect();
        done.store(true, Ordering::Relaxed);
        if let Some(h) = watcher {
            let _ = h.join();
        }
        results
    });
    let mut loops = Vec::with_capacity(n);
    for r in results {
        loops.push(r?);
    }
    let wall_ns = sys::monotonic_ns() - t0;
    let k1 = KernelCounters::read();
    let delta = k1.since(&k0);
    let first_ns = loops.iter().map(|l| l.0.first_ns).filter(|&t| t != 0).min().unwrap_or(0);
    let last_ns = loops.iter().map(|l| l.0.last_ns).max().unwrap_or(0);
    let mut parts = Vec::with_capacity(n);
    let mut threads = Vec::with_capacity(n);
    let mut sinks_back = Vec::with_capacity(n);
    for (i, (mut cap, backend_drops, truncated, stopped_by, cpu_ns, cpu)) in loops.into_iter().enumerate() {
        let (endpoint, bound) = listener.member(i);
        let nap_ns = naps[i];
        let mut notes_extra = Vec::new();
        if nap_ns < cfg.coalesce.as_nanos() as u64 && !cfg.busy_poll {
            notes_extra.push(format!(
                "--coalesce cut to {} so that a 40 Gb/s burst fits the receive buffer",
                units::nanos(nap_ns as f64)
            ));
        }
        let proc_drops = bound.udp_inode.and_then(kernel::socket_drops);
        let stopped_by = match (run_stop_why.get(), n > 1) {
            (Some(why), true) if stopped_by.starts_with("signal") => why.clone(),
            _ => stopped_by,
        };
        let r = build_report(
            cfg_t,
            bound,
            endpoint.kind(),
            fmt,
            &mut cap,
            KernelView {
                socket_drops_rxq_ovfl: backend_drops,
                socket_drops_proc: proc_drops,
                namespace_delta: delta,
                rcvbuf_granted: bound.rcvbuf_granted,
                rcvbuf_requested: cfg.rcvbuf,
            },
            truncated,
            stopped_by.clone(),
            wall_ns,
            cpu_ns,
            cpu,
            (nap_ns, notes_extra),
        );
        threads.push(ThreadReport {
            thread: i,
            pinned: if n == 1 { cfg_t.cpu } else { cfg_t.cpus.get(i).copied() },
            cpu,
            datagrams: r.datagrams,
            bytes: r.bytes,
            streams: r.streams.len(),
            share: 0.0,
            cpu_ns,
            cpu_ns_per_packet: r.cpu_ns_per_packet,
            socket_drops: proc_drops.or(backend_drops),
            ring_full: r.ring_full,
            not_steered_here: others[i].load(Ordering::Relaxed),
            stopped_by,
        });
        parts.push(r);
        sinks_back.push(cap.sink);
    }
    let mut report = merge_reports(parts, threads, listener.steering_text(multicast), first_ns, last_ns);
    report.listen = tcfg.listen.to_string();
    report.pgm = listener.pgm_report();
    if let Some(p) = &report.pgm {
        // PGM sequence numbers given up after a session's last datagram: no later datagram
        // shows the ledger their gap, yet they are lost; the verdict must say so.
        let at_end = p.stats.unrecoverable_at_end;
        if at_end > 0 {
            report.total.lost += at_end;
            report.drops_per_million = report.total.drops_per_million();
            // One session, one stream row: it is that stream's loss too, so the rows still add
            // up to the total (with several sessions only the total carries it; the pgm line says how many).
            if let [s] = report.streams.as_mut_slice() {
                s.counts.lost += at_end;
                s.drops_per_million = s.counts.drops_per_million();
            }
            report.diagnosis = super::report::diagnose(&report);
        }
    }
    Ok((report, sinks_back))
}

/// The watcher: progress lines every `interval` (sums over the threads' live counters), and
/// with several threads the run's common stop: the caller's `stop` (a signal) or the run's
/// `--count` over all threads sets `run_stop` for every thread.
#[allow(clippy::too_many_arguments)]
fn watch_loop(
    lives: &[Live],
    done: &AtomicBool,
    interval: Option<Duration>,
    t0: u64,
    k0: &KernelCounters,
    progress: &(dyn Fn(&Progress) + Sync),
    group: bool,
    stop: &AtomicBool,
    count: Option<u64>,
    run_stop: &AtomicBool,
    run_stop_why: &RunStop,
) {
    let (mut last_t, mut last_d, mut last_b) = (t0, 0u64, 0u64);
    let iv = interval.map(|d| d.as_nanos() as u64);
    let mut next = iv.map(|iv| t0 + iv);
    let sum = |f: fn(&Live) -> &AtomicU64| -> u64 { lives.iter().map(|l| f(l).load(Ordering::Relaxed)).sum() };
    while !done.load(Ordering::Relaxed) {
        let now = sys::monotonic_ns();
        if group && !run_stop.load(Ordering::Relaxed) {
            if stop.load(Ordering::Relaxed) {
                run_stop.store(true, Ordering::Relaxed);
            } else if count.is_some_and(|c| sum(|l| &l.datagrams) >= c) {
                let _ = run_stop_why.set("count".into());
                run_stop.store(true, Ordering::Relaxed);
            }
        }
        let Some(at) = next.filter(|&at| now >= at) else {
            let wait = next.map_or(10_000_000, |at| at.saturating_sub(now));
            std::thread::sleep(Duration::from_nanos(wait.min(if group { 10_000_000 } else { 50_000_000 })));
            continue;
        };
        next = iv.map(|iv| at + iv);
        let d = sum(|l| &l.datagrams);
        let b = sum(|l| &l.bytes);
        let dt = (now - last_t) as f64 / 1e9;
        let k = KernelCounters::read().since(k0);
        progress(&Progress {
            schema: super::sink::INTERVAL_SCHEMA,
            elapsed_s: (now - t0) as f64 / 1e9,
            pps: (d - last_d) as f64 / dt,
            bps: (b - last_b) as f64 * 8.0 / dt,
            datagrams: d,
            lost: sum(|l| &l.lost),
            late: sum(|l| &l.late),
            duplicate: sum(|l| &l.duplicate),
            invalid: sum(|l| &l.invalid),
            socket_drops: sum(|l| &l.socket_drops),
            rcvbuf_errors: k.rcvbuf_errors,
            ring_full: sum(|l| &l.ring_full),
        });
        (last_t, last_d, last_b) = (now, d, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_group_ends_when_the_threads_together_hold_every_end() {
        let g = OnceGroup::new(3);
        assert!(!g.done(2, None));
        assert!(!g.done(0, Some((7, 8, 3))));
        assert!(!g.done(1, Some((7, 8, 4))));
        // Another session's ends do not count towards the first one's.
        assert!(!g.done(2, Some((9, 8, 1))));
        assert!(g.done(2, Some((7, 8, 1))));
        assert!(g.done(0, Some((7, 8, 3))), "every thread sees the run ended");
        // A retracted end (one thread's count falls) reopens the run.
        assert!(!g.done(1, Some((7, 8, 3))));
    }

    #[test]
    fn vdif_steers_by_thread_id() {
        let v = crate::wire::spec::parse("vdif,threads=4").unwrap();
        assert_eq!(steering_for(v.as_ref()), Steer::PayloadStream { offset: 14, mask: 0x3ff });
        let one = crate::wire::spec::parse("vdif").unwrap();
        assert_eq!(steering_for(one.as_ref()), Steer::Source);
        let c = crate::wire::Counter::any_len(crate::wire::ByteOrder::Be);
        assert_eq!(steering_for(&c), Steer::Source);
    }
}
