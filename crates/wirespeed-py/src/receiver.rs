//! `wirespeed.Receiver`: `wirespeed recv` on a native thread, its datagrams handed to Python.
//!
//! The capture is the library's own (`rx::capture_group`: the configured backend, the ledger,
//! the end-of-stream rules), with a [`BatchSink`] per capture thread laying every datagram into
//! a RAM ring as a fixed-stride record. Python takes runs of records as [`RingView`]s (numpy
//! views of the ring memory) and gives them back by dropping them. The capture thread never
//! takes the GIL and never waits for Python: what finds the ring full is counted
//! (`datagrams_dropped`, `batches_dropped`), and the ledger still counts every datagram that
//! arrived. Python waits for batches with the GIL released.

use crate::buffer::{lock, RingView, SharedReader};
use crate::{deadline, to_py, usage};
use pyo3::prelude::*;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wirespeed::ledger::LedgerConfig;
use wirespeed::rx::batches::{slot_body, BatchCounts, BatchReader, BatchSink, HEADER_LEN};
use wirespeed::rx::{self, Listener, Progress, RecvConfig};
use wirespeed::wire::{spec, Format};
use wirespeed::{sys, units};

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Receiver>()
}

/// What the capture thread and Python share.
struct Shared {
    stop: AtomicBool,
    readers: Vec<SharedReader>,
    counts: Vec<Arc<BatchCounts>>,
    progress: Mutex<Option<Progress>>,
    /// The run's report as JSON, or its error, once the capture ended.
    result: Mutex<Option<Result<String, wirespeed::Error>>>,
    ended: AtomicBool,
    batches_taken: AtomicU64,
    records_taken: AtomicU64,
    next_ring: AtomicUsize,
}

impl Shared {
    /// The capture ended and every record it kept has been taken.
    fn drained(&self) -> bool {
        self.ended.load(Ordering::Acquire) && self.readers.iter().all(|r| lock(r).pending() == 0)
    }

    /// Take the next run of records from any ring, round robin.
    fn take(&self, max: usize) -> Option<(usize, wirespeed::rx::batches::Span)> {
        let n = self.readers.len();
        let first = self.next_ring.load(Ordering::Relaxed);
        for k in 0..n {
            let i = (first + k) % n;
            if let Some(s) = lock(&self.readers[i]).next(max) {
                self.next_ring.store(i + 1, Ordering::Relaxed);
                return Some((i, s));
            }
        }
        None
    }
}

/// A capture running on a native thread.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct Receiver {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    local: Option<SocketAddr>,
    format: String,
    stride: usize,
    ring_bytes: usize,
    threads: usize,
}

/// A value given as a number or a string (`"64M"`, `"250ms"`), as the string the library's
/// parsers read.
fn text(v: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(v.str()?.to_string())
}

fn opt_text(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    v.filter(|v| !v.is_none()).map(text).transpose()
}

fn bytes_arg(name: &str, v: &str) -> PyResult<u64> {
    units::parse_bytes(v).map_err(|e| usage(format!("{name}={v:?}: {e}")))
}

fn duration_arg(name: &str, v: &str) -> PyResult<Duration> {
    units::parse_duration(v).map_err(|e| usage(format!("{name}={v:?}: {e}")))
}

/// The format `format` names, with `size` for a counter (as `recv --size` does).
fn resolve_format(format: &str, size: Option<usize>) -> PyResult<Arc<dyn Format>> {
    let (name, kv) = spec::split(format).map_err(|e| usage(format!("format {format:?}: {e}")))?;
    let full = match size {
        Some(n) if name == "counter" && !kv.iter().any(|(k, _)| *k == "size") => format!("{format},size={n}"),
        _ => format.to_string(),
    };
    let fmt = spec::parse(&full).map_err(|e| usage(format!("format {format:?}: {e}")))?;
    if let (Some(n), Some(len)) = (size, fmt.fixed_len()) {
        if n != len {
            return Err(usage(format!(
                "size={n} does not match {}, whose datagrams are {len} bytes: leave size out",
                fmt.name()
            )));
        }
    }
    Ok(fmt)
}

/// This host's memory (MemTotal), bytes; the rings must leave it room.
fn physical_memory() -> u64 {
    let kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
        line.split_whitespace().nth(1)?.parse::<u64>().ok()
    });
    kib.map_or(u64::MAX, |k| k.saturating_mul(1024))
}

#[pymethods]
impl Receiver {
    #[new]
    #[pyo3(signature = (
        listen, *, format="counter", size=None, ring=None, max_datagram=None, rcvbuf=None,
        batch=64, window=65536, max_streams=64, threads=1, cpus=None, cpu=None, duration=None,
        count=None, once=false, once_quiet=None, backend="recvmmsg", coalesce=None, busy_poll=false,
        gro=false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        listen: &Bound<'_, PyAny>,
        format: &str,
        size: Option<usize>,
        ring: Option<&Bound<'_, PyAny>>,
        max_datagram: Option<usize>,
        rcvbuf: Option<&Bound<'_, PyAny>>,
        batch: usize,
        window: u64,
        max_streams: usize,
        threads: usize,
        cpus: Option<Vec<usize>>,
        cpu: Option<usize>,
        duration: Option<&Bound<'_, PyAny>>,
        count: Option<&Bound<'_, PyAny>>,
        once: bool,
        once_quiet: Option<&Bound<'_, PyAny>>,
        backend: &str,
        coalesce: Option<&Bound<'_, PyAny>>,
        busy_poll: bool,
        gro: bool,
    ) -> PyResult<Self> {
        let listen = text(listen)?;
        let mut cfg = RecvConfig::new(wirespeed::addr::parse_listen(&listen).map_err(to_py)?);
        if let Some(b) = opt_text(rcvbuf)? {
            let n = bytes_arg("rcvbuf", &b)?;
            if n == 0 || n > 1 << 30 {
                return Err(usage(format!("rcvbuf={b:?} is out of range: give 1 byte to 1G")));
            }
            cfg.rcvbuf = n as usize;
        }
        cfg.gro = gro;
        cfg.cpu = cpu;
        cfg.threads = threads;
        cfg.cpus = cpus.unwrap_or_default();
        cfg.duration = opt_text(duration)?.map(|d| duration_arg("duration", &d)).transpose()?;
        if cfg.duration.is_some_and(|d| d.is_zero()) {
            return Err(usage("duration=0 would receive nothing: give a positive duration, or leave it out"));
        }
        cfg.count = opt_text(count)?
            .map(|c| units::parse_count(&c).map_err(|e| usage(format!("count={c:?}: {e}"))))
            .transpose()?;
        if cfg.count == Some(0) {
            return Err(usage("count=0 would receive nothing: give at least 1, or leave it out"));
        }
        cfg.once = once;
        if let Some(q) = opt_text(once_quiet)? {
            if !once {
                return Err(usage("once_quiet is how long once=True waits in silence: give once=True too"));
            }
            let d = duration_arg("once_quiet", &q)?;
            if d < Duration::from_millis(10) || d > Duration::from_secs(3600) {
                return Err(usage(format!("once_quiet={q:?} is out of range: give 10ms to 1h, e.g. \"500ms\"")));
            }
            cfg.once_quiet = d;
        }
        cfg.batch = batch;
        cfg.max_streams = max_streams;
        cfg.busy_poll = busy_poll;
        cfg.backend = backend.parse().map_err(to_py)?;
        if let Some(c) = opt_text(coalesce)? {
            let d = duration_arg("coalesce", &c)?;
            if d > Duration::from_millis(100) {
                return Err(usage("coalesce above 100ms risks overflowing the socket buffer: use 0..100ms"));
            }
            cfg.coalesce = d;
        }
        if !window.is_power_of_two() {
            return Err(usage(format!("window={window} must be a power of two (e.g. 65536)")));
        }
        cfg.ledger = LedgerConfig { window, ..LedgerConfig::default() };
        cfg.check_limits().map_err(to_py)?;
        let fmt = resolve_format(format, size)?;

        // The slot each datagram gets: the format's fixed length, else max_datagram (9000).
        let max_dg = match (fmt.fixed_len(), max_datagram) {
            (_, Some(0)) => return Err(usage("max_datagram=0: give the longest datagram to keep, 1..65507")),
            (_, Some(m)) if m > 65507 => {
                return Err(usage(format!("max_datagram={m} is more than a UDP datagram holds (65507)")))
            }
            (_, Some(m)) => m,
            (Some(n), None) => n,
            (None, None) => 9000,
        };
        let stride = HEADER_LEN + slot_body(max_dg);
        let ring_text = opt_text(ring)?.unwrap_or_else(|| "64M".into());
        let want = bytes_arg("ring", &ring_text)?;
        if want == 0 || want.saturating_mul(threads as u64) > physical_memory() / 2 {
            return Err(usage(format!(
                "ring={ring_text:?} per capture thread is zero or more than half of this host's memory: give e.g. ring=\"64M\""
            )));
        }
        let align = sys::RING_ALIGN as u64;
        let ring_bytes = want.max(stride as u64).div_ceil(align) * align;

        // The rings first, every page faulted in and locked, the socket after: a sender that
        // starts when the Receiver exists must not meet a socket whose ring is not ready.
        let n = cfg.threads.max(1);
        let mut sinks = Vec::with_capacity(n);
        let mut readers = Vec::with_capacity(n);
        let mut counts = Vec::with_capacity(n);
        for _ in 0..n {
            let (prod, cons) = sys::byte_ring(ring_bytes as usize, true).map_err(|e| {
                crate::failure(wirespeed::Kind::Failed, format!("cannot allocate a {ring_bytes}-byte ring: {e}"))
            })?;
            let (sink, c) = BatchSink::new(prod, max_dg).map_err(usage)?;
            readers.push(Arc::new(Mutex::new(BatchReader::new(cons, sink.stride()))));
            counts.push(c);
            sinks.push(sink);
        }
        let listener = Listener::bind_for(&cfg, fmt.as_ref()).map_err(to_py)?;
        let local = listener.local_addr();
        if listener.threads() != n {
            return Err(crate::failure(
                wirespeed::Kind::Failed,
                format!("{} sockets opened for {n} capture threads", listener.threads()),
            ));
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            readers,
            counts,
            progress: Mutex::new(None),
            result: Mutex::new(None),
            ended: AtomicBool::new(false),
            batches_taken: AtomicU64::new(0),
            records_taken: AtomicU64::new(0),
            next_ring: AtomicUsize::new(0),
        });
        let format_name = fmt.name();
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ws-py-recv".into())
            .spawn(move || {
                let progress = |p: &Progress| {
                    *sh.progress.lock().unwrap_or_else(|e| e.into_inner()) = Some(*p);
                };
                let interval = Some(Duration::from_millis(100));
                let r = rx::capture_group(&cfg, listener, fmt.as_ref(), &sh.stop, interval, &progress, sinks);
                let out = match r {
                    Ok((report, _sinks)) => serde_json::to_string(&report)
                        .map_err(|e| wirespeed::Error::failed(format!("cannot encode the report: {e}"))),
                    Err(e) => Err(e),
                };
                *sh.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(out);
                sh.ended.store(true, Ordering::Release);
            })
            .map_err(|e| crate::failure(wirespeed::Kind::Failed, format!("cannot start the capture thread: {e}")))?;
        Ok(Receiver {
            shared,
            thread: Mutex::new(Some(thread)),
            local,
            format: format_name,
            stride,
            ring_bytes: ring_bytes as usize,
            threads: n,
        })
    }

    /// The address the capture is bound to (the port the kernel chose for port 0).
    #[getter]
    fn address(&self) -> Option<String> {
        self.local.map(|a| a.to_string())
    }

    /// The bound port.
    #[getter]
    fn port(&self) -> Option<u16> {
        self.local.map(|a| a.port())
    }

    /// The format's name.
    #[getter]
    fn format(&self) -> &str {
        &self.format
    }

    /// Bytes per record in the ring (header and slot).
    #[getter]
    fn stride(&self) -> usize {
        self.stride
    }

    /// Ring bytes per capture thread.
    #[getter]
    fn ring_bytes(&self) -> usize {
        self.ring_bytes
    }

    /// Capture threads (one ring each).
    #[getter]
    fn threads(&self) -> usize {
        self.threads
    }

    /// Whether the capture is still running.
    #[getter]
    fn running(&self) -> bool {
        !self.shared.ended.load(Ordering::Acquire)
    }

    /// The capture ended and every batch it kept has been taken.
    #[getter]
    fn finished(&self) -> bool {
        self.shared.drained()
    }

    /// The next run of up to `max_records` records (a `RingView`), waiting at most `timeout`
    /// seconds (None: until one comes or the capture ends). None when the time ran out or the
    /// capture ended with nothing left (`finished` tells which). The GIL is released while
    /// waiting; Ctrl-C raises KeyboardInterrupt within 50 ms.
    #[pyo3(signature = (timeout=None, max_records=4096))]
    fn next_view(&self, py: Python<'_>, timeout: Option<f64>, max_records: usize) -> PyResult<Option<RingView>> {
        let deadline = deadline(timeout, max_records)?;
        loop {
            let sh = self.shared.clone();
            let got = py.detach(move || {
                let slice = Instant::now() + Duration::from_millis(50);
                let until = deadline.map_or(slice, |d| d.min(slice));
                loop {
                    if let Some(x) = sh.take(max_records) {
                        return Ok(x);
                    }
                    if sh.drained() {
                        return Err(true);
                    }
                    if Instant::now() >= until {
                        return Err(false);
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
            match got {
                Ok((i, span)) => {
                    self.shared.batches_taken.fetch_add(1, Ordering::Relaxed);
                    self.shared.records_taken.fetch_add(span.records as u64, Ordering::Relaxed);
                    return Ok(Some(RingView::new(self.shared.readers[i].clone(), span)));
                }
                Err(true) => return Ok(None),
                Err(false) => {
                    py.check_signals()?;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Ask the capture to stop (it finishes its current receive call, within 100 ms).
    fn stop(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    /// Wait up to `timeout` seconds (None: for good) for the capture to end; whether it did.
    #[pyo3(signature = (timeout=None))]
    fn join(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let deadline = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        while !self.shared.ended.load(Ordering::Acquire) {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            let sh = self.shared.clone();
            py.detach(move || {
                let t = Instant::now();
                while !sh.ended.load(Ordering::Acquire) && t.elapsed() < Duration::from_millis(50) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            py.check_signals()?;
        }
        if let Some(h) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = py.detach(move || h.join());
        }
        Ok(true)
    }

    /// The capture's report (`wirespeed recv --json`'s document) as JSON once it ended; None
    /// while it runs. A capture that failed raises its error here.
    fn report(&self) -> PyResult<Option<String>> {
        match &*self.shared.result.lock().unwrap_or_else(|e| e.into_inner()) {
            None => Ok(None),
            Some(Ok(s)) => Ok(Some(s.clone())),
            Some(Err(e)) => Err(crate::to_py(e.clone())),
        }
    }

    /// The live counts as JSON: the capture's (its latest progress sample, every 100 ms) and
    /// the hand-over's (kept, taken, dropped).
    fn live(&self) -> String {
        let sh = &self.shared;
        let sum =
            |f: fn(&BatchCounts) -> &AtomicU64| -> u64 { sh.counts.iter().map(|c| f(c).load(Ordering::Relaxed)).sum() };
        let p = *sh.progress.lock().unwrap_or_else(|e| e.into_inner());
        let pending: u64 = sh.readers.iter().map(|r| lock(r).pending() / self.stride as u64).sum();
        let held: usize = sh.readers.iter().map(|r| lock(r).held()).sum();
        json!({
            "running": !sh.ended.load(Ordering::Acquire),
            "progress": p,
            "handover": {
                "delivered": sum(|c| &c.kept),
                "datagrams_dropped": sum(|c| &c.dropped),
                "batches_dropped": sum(|c| &c.batches_dropped),
                "oversize": sum(|c| &c.oversize),
                "receive_calls": sum(|c| &c.calls),
                "batches_taken": sh.batches_taken.load(Ordering::Relaxed),
                "records_taken": sh.records_taken.load(Ordering::Relaxed),
                "records_waiting": pending,
                "batches_held": held,
            },
        })
        .to_string()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // A receiver dropped without close(): stop the capture; the thread ends on its own
        // within one receive timeout and frees its ring then.
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}
