//! Running a capture: the [`Listener`] (the opened endpoint), the capture thread started on
//! it, the progress reporter beside it, and the report built after it.

use super::backend::{self, BackendKind, Bound, Opened};
use super::capture::{nap_cap_ns, Capture, CaptureRun};
use super::report::{build_report, KernelView, RecvReport};
use super::sink::{Live, NullSink, Progress, Sink};
use super::RecvConfig;
use crate::error::{Error, Result};
use crate::kernel::{self, KernelCounters};
use crate::sys;
use crate::units;
use crate::wire::Format;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An opened receive endpoint of the configured backend, ready for [`capture`].
///
/// The backend owns the socket (or ring); the listener keeps it open until the report is
/// written, so that the kernel's per-socket counters can be read after the last datagram, and
/// keeps what the report says about it.
pub struct Listener {
    pub(super) endpoint: Opened,
    pub(super) bound: Bound,
}

impl Listener {
    /// Open the backend `cfg` names; failures are explained for the user.
    pub fn bind(cfg: &RecvConfig) -> Result<Listener> {
        let (endpoint, bound) = backend::open(cfg.backend, cfg, backend::Member::SOLE)?;
        Ok(Listener { endpoint, bound })
    }

    /// The bound address (useful when binding port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.bound.local_addr
    }

    /// Which backend this listener receives with.
    pub fn backend(&self) -> BackendKind {
        self.endpoint.kind()
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
    capture_with(cfg, listener, fmt, stop, interval, progress, NullSink).map(|(r, _)| r)
}

/// [`capture`], handing every datagram to `sink` as well (the recorder's ring). The sink comes
/// back with the report.
pub fn capture_with<S: Sink>(
    cfg: &RecvConfig,
    listener: Listener,
    fmt: &dyn Format,
    stop: &AtomicBool,
    interval: Option<Duration>,
    progress: &(dyn Fn(&Progress) + Sync),
    sink: S,
) -> Result<(RecvReport, S)> {
    cfg.check_limits()?;
    let mut ledger_cfg = cfg.ledger.clone();
    ledger_cfg.seq_bits = ledger_cfg.seq_bits.min(fmt.seq_bits());
    let live = Live::default();
    let done = AtomicBool::new(false);
    let nap_ns =
        if cfg.busy_poll { 0 } else { (cfg.coalesce.as_nanos() as u64).min(nap_cap_ns(listener.bound.rcvbuf_granted)) };
    let k0 = KernelCounters::read();
    let t0 = sys::monotonic_ns();

    let result = std::thread::scope(|s| {
        let reporter = interval.map(|iv| {
            let live = &live;
            let done = &done;
            s.spawn(move || report_loop(live, done, iv, t0, &k0, progress))
        });
        let capture_thread = std::thread::Builder::new()
            .name("ws-capture".into())
            .spawn_scoped(s, || {
                if let Some(cpu) = cfg.cpu {
                    sys::pin_current_thread(cpu).map_err(|e| {
                        Error::Usage(format!("cannot pin the capture thread to CPU {cpu}: {e} (see `nproc`)"))
                    })?;
                }
                let cap = Capture::new(fmt, sink, &ledger_cfg, cfg.max_streams, t0);
                listener.endpoint.run(cfg, CaptureRun { cfg, cap, stop, live: &live, t0, nap_ns })
            })
            .expect("spawning the capture thread");
        let r = capture_thread.join().expect("capture thread panicked");
        done.store(true, Ordering::Relaxed);
        if let Some(h) = reporter {
            let _ = h.join();
        }
        r
    });
    let (mut cap, backend_drops, truncated, stopped_by, cpu_ns, cpu) = result?;
    let mut notes_extra = Vec::new();
    if nap_ns < cfg.coalesce.as_nanos() as u64 && !cfg.busy_poll {
        notes_extra.push(format!(
            "--coalesce cut to {} so that a 40 Gb/s burst fits the receive buffer",
            units::nanos(nap_ns as f64)
        ));
    }
    let wall_ns = sys::monotonic_ns() - t0;
    let k1 = KernelCounters::read();
    let proc_drops = listener.bound.udp_inode.and_then(kernel::socket_drops);
    let report = build_report(
        cfg,
        &listener,
        fmt,
        &mut cap,
        KernelView {
            socket_drops_rxq_ovfl: backend_drops,
            socket_drops_proc: proc_drops,
            namespace_delta: k1.since(&k0),
            rcvbuf_granted: listener.bound.rcvbuf_granted,
            rcvbuf_requested: cfg.rcvbuf,
        },
        truncated,
        stopped_by,
        wall_ns,
        cpu_ns,
        cpu,
        (nap_ns, notes_extra),
    );
    Ok((report, cap.sink))
}

fn report_loop(
    live: &Live,
    done: &AtomicBool,
    interval: Duration,
    t0: u64,
    k0: &KernelCounters,
    progress: &(dyn Fn(&Progress) + Sync),
) {
    let (mut last_t, mut last_d, mut last_b) = (t0, 0u64, 0u64);
    let mut next = t0 + interval.as_nanos() as u64;
    while !done.load(Ordering::Relaxed) {
        let now = sys::monotonic_ns();
        if now < next {
            std::thread::sleep(Duration::from_nanos((next - now).min(50_000_000)));
            continue;
        }
        next += interval.as_nanos() as u64;
        let d = live.datagrams.load(Ordering::Relaxed);
        let b = live.bytes.load(Ordering::Relaxed);
        let dt = (now - last_t) as f64 / 1e9;
        let k = KernelCounters::read().since(k0);
        progress(&Progress {
            elapsed_s: (now - t0) as f64 / 1e9,
            pps: (d - last_d) as f64 / dt,
            bps: (b - last_b) as f64 * 8.0 / dt,
            datagrams: d,
            lost: live.lost.load(Ordering::Relaxed),
            late: live.late.load(Ordering::Relaxed),
            duplicate: live.duplicate.load(Ordering::Relaxed),
            invalid: live.invalid.load(Ordering::Relaxed),
            socket_drops: live.socket_drops.load(Ordering::Relaxed),
            rcvbuf_errors: k.rcvbuf_errors,
            ring_full: live.ring_full.load(Ordering::Relaxed),
        });
        (last_t, last_d, last_b) = (now, d, b);
    }
}
