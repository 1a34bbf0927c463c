//! The two ends of a recording: [`RingSink`] runs on the capture thread and lays records into
//! the RAM ring in their on-disk form; [`Writer`] runs on its own thread and moves them to disk
//! in large aligned O_DIRECT writes, cutting files where the sink said to.
//!
//! The capture thread never waits for the writer: when the ring is full a datagram is dropped
//! and counted (ring-full loss). File boundaries are decided on the capture side (by size or by
//! wall-clock time), where the record stream is produced, and passed to the writer through a
//! small lock-free queue; each file starts at a 4 KiB-aligned ring position so that every file
//! can be written with O_DIRECT from its first byte.
//!
//! The writer re-reads each record it has written and keeps the file's own ledger, so every
//! sidecar describes exactly the records in its file (not what the capture thread believed).
//! It allocates only when a file or a stream starts, and makes no system call per record.
//!
//! The hand-off queue is [`handoff`](super::handoff); the capture end is [`sink`](super::sink).

use super::handoff::{Break, ALIGN};
pub use super::handoff::{Cut, Shared};
use super::index::IndexBuilder;
pub use super::sink::{RingSink, Rotation};
use super::{
    file_name, part_name, reasons, sidecar_name, sidecar_part_name, utc_iso, FileFormat, FileLedger, ReadLayout,
    RecordWalker, Sidecar, PART_SUFFIX,
};
use crate::sys::{self, RingConsumer, RING_ALIGN};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Where and how the writer writes.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Output directory (exists, writable).
    pub dir: PathBuf,
    /// File name prefix.
    pub prefix: String,
    /// File name extension (without the dot).
    pub extension: String,
    /// Use O_DIRECT where the filesystem allows it.
    pub direct: bool,
    /// Bytes per write (a multiple of 4 KiB).
    pub chunk: usize,
    /// Space to reserve for each file up front (--file-size), or the step to reserve in.
    pub prealloc: u64,
    /// Write what has waited this long even if a whole chunk has not gathered.
    pub flush_after: Duration,
    /// How records are read back for the per-file ledger.
    pub layout: ReadLayout,
    /// The stream's format spec (for sidecars).
    pub format_spec: String,
    /// Reorder window of the per-file ledgers.
    pub window: u64,
    /// The recording run, written into every sidecar (one per run, shared by its writers).
    pub run: super::RunIdentity,
    /// Build each file's time index into its sidecar (`record --no-index` turns it off, for
    /// measuring what it costs).
    pub index: bool,
}

/// One finished file, as the recorder reports it.
#[derive(Clone, Debug, Serialize)]
pub struct FileSummary {
    /// Path of the data file.
    pub path: String,
    /// Path of its sidecar.
    pub sidecar: String,
    /// Bytes in the file.
    pub bytes: u64,
    /// Records in the file.
    pub records: u64,
    /// Lost inside the file (gaps between its first and last sequence numbers).
    pub lost: u64,
    /// Why it ended.
    pub ended_by: String,
    /// Whether it is complete.
    pub complete: bool,
}

/// What the writer did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WriterReport {
    /// Files written, in order.
    pub files: Vec<FileSummary>,
    /// Bytes written.
    pub bytes: u64,
    /// Records written.
    pub records: u64,
    /// Seconds spent inside write calls.
    pub write_s: f64,
    /// Writes that took longer than 50 ms.
    pub write_stalls: u64,
    /// Longest write, milliseconds.
    pub max_write_ms: f64,
    /// O_DIRECT was used.
    pub direct_io: bool,
    /// Something the user should know (fallbacks).
    pub notes: Vec<String>,
    /// The error that stopped writing, if any.
    pub error: Option<String>,
    /// Bytes kept in the ring that never reached disk (after a full disk or error).
    pub unwritten_bytes: u64,
    /// Records received into RAM that never reached the disk (after a full disk or error): the
    /// sum of the sidecars' `unwritten`.
    pub unwritten_records: u64,
    /// Writes kept in flight at once (WIRESPEED_WRITE_DEPTH, default 4).
    pub write_depth: usize,
    /// How they are kept in flight: "io_uring" (the default) or "threads" (pwrite from a few
    /// threads; WIRESPEED_WRITE_ENGINE=threads, or where io_uring is unavailable).
    pub write_engine: String,
    /// Write calls made.
    pub writes: u64,
    /// Median write latency, milliseconds.
    pub write_p50_ms: f64,
    /// 99th percentile write latency, milliseconds.
    pub write_p99_ms: f64,
    /// CPU time of the writer and its write threads, seconds.
    pub cpu_s: f64,
    /// That CPU time per GB (1e9 bytes) written: what the disk path costs the host.
    pub cpu_s_per_gb: f64,
}

struct OpenFile {
    file: File,
    part: PathBuf,
    side_part: PathBuf,
    side_file: Option<File>,
    name: String,
    direct: bool,
    start: u64,
    written: u64,
    reserved: u64,
    opened_ns: u64,
    walker: RecordWalker,
    ledger: FileLedger,
    base: Break,
    stalls: u64,
    max_write_ns: u64,
}

/// The writer thread's state.
pub struct Writer {
    ring: RingConsumer,
    shared: Arc<Shared>,
    cfg: WriterConfig,
    index: u32,
    report: WriterReport,
    fallback_noted: bool,
    /// The sidecar of the last finished file, kept until the next file opens: if that open
    /// fails, what never reached the disk is counted in it.
    last_closed: Option<(PathBuf, Sidecar)>,
    /// Ring position where the current file starts.
    cur_start: u64,
    /// Writes in flight at once.
    depth: usize,
    /// Test knob: a pause before each write (a slow disk).
    delay: Duration,
    /// Write latencies, microseconds.
    latency: Histogram<u64>,
    /// CPU of the write threads, and of this thread when it started.
    pool_cpu_ns: u64,
    cpu0_ns: u64,
    /// The io_uring engine, when chosen and available.
    uring: Option<sys::uring::WriteRing>,
    /// Write from threads even where io_uring is available (`bench writer`'s comparison).
    force_threads: bool,
    /// The last time mark taken (ring position, ns): the next file's first lower bound.
    last_mark: Option<(u64, u64)>,
}

/// Environment variable: writes kept in flight (1..=16). Read once when the writer starts.
pub const DEPTH_ENV: &str = "WIRESPEED_WRITE_DEPTH";
/// Environment variable, a test knob: milliseconds to sleep before each write, so that tests
/// can stand in a slow disk and fill the ring. Read once when the writer starts; never set it
/// for a real recording.
pub const DELAY_ENV: &str = "WIRESPEED_WRITE_DELAY_MS";
/// Environment variable: the write engine, `io_uring` (the default; threads where io_uring is
/// missing or forbidden) or `threads` (pwrite from a few threads). Read once at start.
pub const ENGINE_ENV: &str = "WIRESPEED_WRITE_ENGINE";
/// Most writes in flight.
pub const MAX_DEPTH: usize = 16;
/// Writes in flight unless told otherwise: on the test host (a virtio disk) 4 x 8 MiB wrote
/// 2.6-3.2 GB/s where one at a time wrote 1.9-2.5 GB/s.
pub const DEFAULT_DEPTH: usize = 4;

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// Most names tried for one file before giving up (other recorders hold the others).
const NAME_TRIES: u32 = 10_000;

const STALL_NS: u64 = 50_000_000;
/// Bytes reserved for each sidecar when its file opens, so that a full disk cannot stop the
/// sidecar from being written.
const SIDECAR_RESERVE: u64 = 1 << 20;

impl Writer {
    /// A writer draining `ring`.
    pub fn new(ring: RingConsumer, shared: Arc<Shared>, cfg: WriterConfig) -> Self {
        Writer {
            ring,
            shared,
            cfg,
            index: 0,
            report: WriterReport::default(),
            fallback_noted: false,
            last_closed: None,
            cur_start: 0,
            depth: env_number(DEPTH_ENV).map_or(DEFAULT_DEPTH, |d| (d as usize).clamp(1, MAX_DEPTH)),
            delay: Duration::from_millis(env_number(DELAY_ENV).unwrap_or(0).min(60_000)),
            latency: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid"),
            pool_cpu_ns: 0,
            cpu0_ns: sys::thread_cpu_ns(),
            uring: None,
            force_threads: false,
            last_mark: None,
        }
    }

    /// Whether any name of the recording file `name` (data or sidecar) exists already.
    fn taken(&self, name: &str) -> bool {
        let d = &self.cfg.dir;
        [name.to_string(), sidecar_name(name), part_name(name), sidecar_part_name(name)]
            .iter()
            .any(|n| std::fs::symlink_metadata(d.join(n)).is_ok())
    }

    /// The next free file name from the next index on. Another recorder writing into the same
    /// directory in the same second holds some names: they are passed over, never reused.
    fn next_free_name(&mut self, unix_ns: u64) -> io::Result<String> {
        for _ in 0..NAME_TRIES {
            self.index += 1;
            let name = file_name(&self.cfg.prefix, unix_ns, self.index, &self.cfg.extension);
            if !self.taken(&name) {
                return Ok(name);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{NAME_TRIES} file names in a row are taken by other files (another recorder with the same --prefix?)"
            ),
        ))
    }

    /// Claim a free name: its `.part` file is created new (O_EXCL), so two recorders can never
    /// both hold it; a name taken between the check and the create is passed over.
    fn claim(&mut self, unix_ns: u64) -> io::Result<(String, PathBuf, File, bool)> {
        for _ in 0..NAME_TRIES {
            let name = self.next_free_name(unix_ns)?;
            let part = self.cfg.dir.join(part_name(&name));
            match sys::create_direct(&part, self.cfg.direct) {
                Ok((file, direct)) => return Ok((name, part, file, direct)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free file name: too many taken by other recorders"))
    }

    fn open(&mut self, start: u64, unix_ns: u64, base: Break) -> io::Result<OpenFile> {
        let (name, part, file, direct) = self.claim(unix_ns)?;
        self.cur_start = start;
        if self.cfg.direct && !direct && !self.fallback_noted {
            self.fallback_noted = true;
            self.report.notes.push(format!(
                "{} refuses O_DIRECT (tmpfs or similar): writing through the page cache instead",
                self.cfg.dir.display()
            ));
        }
        self.report.direct_io = direct;
        let reserved = match sys::preallocate(file.as_raw_fd(), 0, self.cfg.prealloc) {
            Ok(()) => self.cfg.prealloc,
            Err(_) => 0,
        };
        let side_part = self.cfg.dir.join(sidecar_part_name(&name));
        // Created new: a name this recorder claimed has no sidecar of anybody else.
        let side_file = std::fs::OpenOptions::new().write(true).create_new(true).open(&side_part).ok();
        if let Some(f) = &side_file {
            let _ = sys::preallocate(f.as_raw_fd(), 0, SIDECAR_RESERVE);
            // A provisional sidecar: if the recorder is killed, `verify` still knows how to read
            // the .part file. Replaced by the real one when the file is finished.
            let provisional = self.sidecar(&name, unix_ns, "recording (not finished)", false);
            if let Ok(json) = serde_json::to_vec_pretty(&provisional) {
                let _ = f.write_all_at(&json, 0);
            }
        }
        let layout = self.cfg.layout.clone();
        let mut ledger = FileLedger::new(layout.reader.clone(), self.cfg.window);
        if self.cfg.index {
            let exact = layout.file_format == FileFormat::Pcap;
            let mut b = IndexBuilder::new(layout.reader.data_clock(), exact, unix_ns, self.cfg.prealloc);
            if let Some((pos, ns)) = self.last_mark {
                // The last mark before the file: a lower bound for its first records.
                b.mark(pos.saturating_sub(start), ns);
            }
            ledger = ledger.with_index(b);
        }
        Ok(OpenFile {
            file,
            part,
            side_part,
            side_file,
            name,
            direct,
            start,
            written: 0,
            reserved,
            opened_ns: unix_ns,
            walker: RecordWalker::new(layout),
            ledger,
            base,
            stalls: 0,
            max_write_ns: 0,
        })
    }

    fn sidecar(&self, name: &str, opened_ns: u64, ended_by: &str, complete: bool) -> Sidecar {
        let c = &self.cfg;
        let mut s = Sidecar::blank(name, &c.layout, &c.format_spec, &c.run, opened_ns, ended_by, complete);
        s.direct_io = self.report.direct_io;
        s
    }

    /// Write `[f.start + f.written, upto)` from the ring; with `all`, also the unaligned tail.
    /// Up to `depth` chunks go to the disk at once (one in this thread, the others in scoped
    /// threads); they are accounted, read back into the file's ledger and released from the
    /// ring only when they completed, in ring order.
    fn write_upto(&mut self, f: &mut OpenFile, upto: u64, all: bool) -> io::Result<()> {
        let chunk = self.cfg.chunk;
        loop {
            let pos = f.start + f.written;
            if pos >= upto {
                return Ok(());
            }
            let slice = self.ring.slice(pos, (upto - pos).min(chunk as u64) as usize);
            if slice.is_empty() {
                return Ok(());
            }
            let mut n = slice.len();
            if f.direct && n % RING_ALIGN != 0 {
                let aligned = n - n % RING_ALIGN;
                if aligned > 0 {
                    n = aligned;
                } else if all {
                    sys::clear_direct(f.file.as_raw_fd())?;
                    f.direct = false;
                } else {
                    return Ok(());
                }
            }
            // The batch: whole chunks after the first one while they are there.
            let mut pieces = [(0u64, 0usize); MAX_DEPTH];
            pieces[0] = (pos, n);
            let mut k = 1;
            let mut next = pos + n as u64;
            while k < self.depth && pieces[k - 1].1 == chunk && next < upto {
                let len = self.ring.slice(next, (upto - next).min(chunk as u64) as usize).len();
                let m = if f.direct { len - len % RING_ALIGN } else { len };
                if m == 0 {
                    break;
                }
                pieces[k] = (next, m);
                k += 1;
                next += m as u64;
            }
            let total = next - pos;
            while f.reserved > 0 && f.written + total > f.reserved {
                // Reserve the next step ahead (open-ended files); failure just means no reservation.
                if sys::preallocate(f.file.as_raw_fd(), f.reserved, self.cfg.prealloc).is_err() {
                    break;
                }
                f.reserved += self.cfg.prealloc;
            }
            let results = self.write_batch(f, &pieces[..k]);
            let mut failed = None;
            for (&(at, len), (res, dt)) in pieces[..k].iter().zip(results) {
                if let Err(e) = res {
                    failed = Some(e);
                    break;
                }
                self.report.writes += 1;
                self.report.write_s += dt as f64 / 1e9;
                let _ = self.latency.record((dt / 1000).max(1));
                if dt > STALL_NS {
                    f.stalls += 1;
                }
                self.shared.write_stats.observe(dt, dt > STALL_NS);
                f.max_write_ns = f.max_write_ns.max(dt);
                if f.ledger.index.is_some() {
                    self.take_marks(f, at + len as u64);
                }
                f.walker.feed(self.ring.slice(at, len), &mut f.ledger);
                f.written += len as u64;
                self.shared.written.fetch_add(len as u64, Ordering::Relaxed);
            }
            // Release whole records only: after a failed write, the records not on disk are
            // still in the ring to be counted.
            self.ring.release(f.start + f.walker.complete_bytes.min(f.written));
            if let Some(e) = failed {
                return Err(e);
            }
        }
    }

    /// Hand the capture's time marks up to ring position `upto` to the file's index.
    fn take_marks(&mut self, f: &mut OpenFile, upto: u64) {
        while let Some((pos, ns)) = self.shared.take_mark(upto) {
            self.last_mark = Some((pos, ns));
            if let Some(ix) = f.ledger.index.as_mut() {
                ix.mark(pos.saturating_sub(f.start), ns);
            }
        }
    }

    /// Write `pieces` (ring position, length) of the current file at once; each one's result
    /// and latency in nanoseconds, in the same order.
    fn write_batch(&mut self, f: &OpenFile, pieces: &[(u64, usize)]) -> Vec<(io::Result<()>, u64)> {
        let delay = self.delay;
        let file = &f.file;
        let one = move |buf: &[u8], off: u64| -> (io::Result<()>, u64) {
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            let t = sys::monotonic_ns();
            let r = file.write_all_at(buf, off);
            (r, sys::monotonic_ns() - t)
        };
        let ring = &self.ring;
        let bufs = pieces.iter().map(|&(at, len)| (ring.slice(at, len), at - f.start));
        if let Some(u) = &mut self.uring {
            let bufs: Vec<(&[u8], u64)> = bufs.collect();
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            return u.write_batch(f.file.as_raw_fd(), &bufs);
        }
        if pieces.len() == 1 {
            return bufs.map(|(b, off)| one(b, off)).collect();
        }
        let mut bufs = bufs;
        let first = bufs.next();
        let mut out = Vec::with_capacity(pieces.len());
        let pool_cpu = std::thread::scope(|s| {
            let others: Vec<_> = bufs
                .map(|(buf, off)| {
                    s.spawn(move || {
                        let c0 = sys::thread_cpu_ns();
                        let r = one(buf, off);
                        (r, sys::thread_cpu_ns() - c0)
                    })
                })
                .collect();
            if let Some((buf, off)) = first {
                out.push(one(buf, off));
            }
            let mut cpu = 0;
            for h in others {
                match h.join() {
                    Ok((r, c)) => {
                        out.push(r);
                        cpu += c;
                    }
                    Err(_) => out.push((Err(io::Error::other("a write thread panicked")), 0)),
                }
            }
            cpu
        });
        self.pool_cpu_ns += pool_cpu;
        out
    }

    /// The report, with the latency percentiles and CPU figures filled in.
    fn finish(&mut self) -> WriterReport {
        let mut r = std::mem::take(&mut self.report);
        r.write_depth = self.depth;
        if !self.latency.is_empty() {
            r.write_p50_ms = self.latency.value_at_quantile(0.5) as f64 / 1e3;
            r.write_p99_ms = self.latency.value_at_quantile(0.99) as f64 / 1e3;
        }
        let cpu = sys::thread_cpu_ns().saturating_sub(self.cpu0_ns) + self.pool_cpu_ns;
        r.cpu_s = cpu as f64 / 1e9;
        if r.bytes > 0 {
            r.cpu_s_per_gb = r.cpu_s / (r.bytes as f64 / 1e9);
        }
        r
    }

    /// Give the finished data file its final name without ever replacing a file: if another
    /// recorder took the name meanwhile, the next free one.
    fn finalize_name(&mut self, f: &mut OpenFile) -> io::Result<PathBuf> {
        for _ in 0..NAME_TRIES {
            let to = self.cfg.dir.join(&f.name);
            let in_use = std::fs::symlink_metadata(self.cfg.dir.join(sidecar_name(&f.name))).is_ok();
            if !in_use {
                match sys::file::rename_noreplace(&f.part, &to) {
                    Ok(()) => return Ok(to),
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                    Err(_) => {}
                }
            }
            f.name = self.next_free_name(f.opened_ns)?;
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free name to finish the file under"))
    }

    fn close(
        &mut self,
        mut f: OpenFile,
        end: Break,
        ended_by: &str,
        complete: bool,
        unwritten: u64,
    ) -> io::Result<FileSummary> {
        // Keep whole records only: after a failed write the file may end inside one.
        let keep = f.walker.complete_bytes.min(f.written);
        f.file.set_len(keep)?;
        f.file.sync_data()?;
        let final_path = self.finalize_name(&mut f)?;
        let (streams, total) = f.ledger.finish();
        let mut sidecar = self.sidecar(&f.name, f.opened_ns, ended_by, complete);
        sidecar.bytes = keep;
        sidecar.records = f.ledger.records;
        sidecar.closed_utc = utc_iso(end.unix_ns);
        sidecar.streams = streams;
        sidecar.total = total;
        sidecar.invalid_by_reason = reasons(&f.ledger.invalid_kinds);
        sidecar.unreadable = f.ledger.unreadable;
        sidecar.ring_full = end.ring_full.saturating_sub(f.base.ring_full);
        sidecar.not_written_wrong_length = end.not_written.saturating_sub(f.base.not_written);
        sidecar.unwritten = unwritten;
        sidecar.not_written = sidecar.not_written_wrong_length + unwritten;
        sidecar.kernel_socket_drops = Some(end.socket_drops.saturating_sub(f.base.socket_drops));
        sidecar.write_stalls = f.stalls;
        sidecar.max_write_ms = f.max_write_ns as f64 / 1e6;
        sidecar.index = f.ledger.index.as_ref().map(|ix| ix.finish(keep, end.unix_ns));
        let json = serde_json::to_vec_pretty(&sidecar).map_err(io::Error::other)?;
        let side_path = self.cfg.dir.join(sidecar_name(&f.name));
        let side_file = match f.side_file.take() {
            Some(s) => s,
            None => std::fs::OpenOptions::new().write(true).create_new(true).open(&f.side_part)?,
        };
        side_file.write_all_at(&json, 0)?;
        side_file.set_len(json.len() as u64)?;
        side_file.sync_data()?;
        sys::file::rename_noreplace(&f.side_part, &side_path)?;
        self.last_closed = Some((side_path.clone(), sidecar));
        self.report.bytes += keep;
        self.report.records += f.ledger.records;
        self.report.write_stalls += f.stalls;
        self.report.max_write_ms = self.report.max_write_ms.max(f.max_write_ns as f64 / 1e6);
        self.shared.files_done.fetch_add(1, Ordering::Relaxed);
        Ok(FileSummary {
            path: final_path.display().to_string(),
            sidecar: side_path.display().to_string(),
            bytes: keep,
            records: f.ledger.records,
            lost: total.lost,
            ended_by: ended_by.into(),
            complete,
        })
    }

    fn final_break(&self) -> Break {
        let f = &self.shared.final_counts;
        Break {
            end: self.shared.final_pos.load(Ordering::Relaxed),
            next_start: 0,
            cut: 0,
            unix_ns: f.unix_ns.load(Ordering::Relaxed),
            ring_full: f.ring_full.load(Ordering::Relaxed),
            not_written: f.not_written.load(Ordering::Relaxed),
            socket_drops: f.socket_drops.load(Ordering::Relaxed),
        }
    }

    /// Run until the sink has finished and everything is on disk (or the disk failed).
    pub fn run(mut self) -> WriterReport {
        self.cpu0_ns = sys::thread_cpu_ns();
        // io_uring unless told otherwise: on the test host it wrote as fast as four pwrite
        // threads or faster, for about 40 % less CPU per GB (`wirespeed bench writer`).
        if self.uring.is_none() && !self.force_threads && std::env::var(ENGINE_ENV).map_or(true, |e| e != "threads") {
            match sys::uring::WriteRing::new(self.depth as u32) {
                Ok(r) => self.uring = Some(r),
                Err(e) => self.report.notes.push(format!("io_uring is not available ({e}): writing from threads")),
            }
        }
        self.report.write_engine = if self.uring.is_some() { "io_uring" } else { "threads" }.into();
        let zero = Break { end: 0, next_start: 0, cut: 0, unix_ns: 0, ring_full: 0, not_written: 0, socket_drops: 0 };
        let mut file = match self.open(0, sys::realtime_ns(), zero) {
            Ok(f) => f,
            Err(e) => return self.fail(e, None),
        };
        let mut last_write = sys::monotonic_ns();
        loop {
            let done = self.shared.done.load(Ordering::Acquire);
            let produced = self.ring.produced();
            let brk = self.shared.peek().filter(|b| b.end <= produced);
            let before = file.written;
            let step = match brk {
                Some(b) => self.write_upto(&mut file, b.end, true),
                None => {
                    let avail = produced - (file.start + file.written);
                    let stale = sys::monotonic_ns() - last_write > self.cfg.flush_after.as_nanos() as u64;
                    if done && self.shared.peek().is_none() {
                        self.write_upto(&mut file, produced, true)
                    } else if avail >= self.cfg.chunk as u64 || (stale && avail >= ALIGN) {
                        let upto = file.start + file.written + avail - avail % ALIGN;
                        self.write_upto(&mut file, upto, false)
                    } else {
                        Ok(())
                    }
                }
            };
            if let Err(e) = step {
                return self.fail(e, Some(file));
            }
            if file.written > before {
                last_write = sys::monotonic_ns();
            }
            if let Some(b) = brk {
                if file.start + file.written >= b.end {
                    let by = if b.cut == Cut::Time as u8 { "time" } else { "size" };
                    match self.close(file, b, by, true, 0) {
                        Ok(s) => self.report.files.push(s),
                        Err(e) => return self.fail(e, None),
                    }
                    self.shared.pop();
                    // The pad between files is never written: release it.
                    self.ring.release(b.next_start.min(self.ring.produced()));
                    file = match self.open(b.next_start, b.unix_ns, b) {
                        Ok(f) => f,
                        Err(e) => return self.fail(e, None),
                    };
                    self.last_closed = None;
                    continue;
                }
            }
            if done && self.shared.peek().is_none() && file.start + file.written >= self.ring.produced() {
                let end = self.final_break();
                match self.close(file, end, "end of run", true, 0) {
                    Ok(s) => self.report.files.push(s),
                    Err(e) => return self.fail(e, None),
                }
                return self.finish();
            }
            if file.written == before {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    }

    /// Stop writing after `e`: tell the capture thread, keep the current file valid up to its
    /// last whole record, and account for what stays unwritten.
    fn fail(&mut self, e: io::Error, file: Option<OpenFile>) -> WriterReport {
        let full = e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::EDQUOT);
        self.shared.stop.store(if full { 1 } else { 2 }, Ordering::Relaxed);
        self.report.error = Some(if full {
            format!("the disk holding {} is full", self.cfg.dir.display())
        } else {
            format!("writing to {} failed: {e}", self.cfg.dir.display())
        });
        // Wait for the capture thread to stop so that the final counters are known.
        while !self.shared.done.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let end = self.final_break();
        // Everything from the last whole record on disk to the end of the ring never reached
        // the disk: count it, so that the sidecar and the run's summary say the same.
        let written_to = match &file {
            Some(f) => f.start + f.walker.complete_bytes.min(f.written),
            None => self.ring.released(),
        };
        let at_file_start = file.as_ref().map_or(written_to == self.cur_start, |f| f.written == 0);
        let left = self.left_in_ring(written_to, at_file_start);
        self.report.unwritten_records = left;
        self.report.unwritten_bytes = self.ring.produced().saturating_sub(written_to);
        let reason = if full { "disk full" } else { "write error" };
        match file {
            Some(f) => match self.close(f, end, reason, false, left) {
                Ok(s) => self.report.files.push(s),
                Err(e2) => self.report.notes.push(format!(
                    "could not finish the last file ({e2}): its sidecar does not count the {left} records that never reached the disk"
                )),
            },
            // The file before was finished, the next could not be opened: the finished file's
            // sidecar counts what came after it.
            None => match self.last_closed.take() {
                Some((path, mut side)) if left > 0 => {
                    side.unwritten += left;
                    side.not_written += left;
                    side.ended_by = format!("{} (writing stopped after this file: {reason})", side.ended_by);
                    if let Err(e2) = rewrite_sidecar(&path, &side) {
                        self.report.notes.push(format!(
                            "could not count the {left} records that never reached the disk in {}: {e2}",
                            path.display()
                        ));
                    }
                }
                Some(_) => {}
                None if left > 0 => self.report.notes.push(format!(
                    "no file could be finished to count the {left} records that never reached the disk"
                )),
                None => {}
            },
        }
        self.finish()
    }

    /// Records in the ring from `pos` (a record boundary; the start of a file when
    /// `at_file_start`) to its end, across the file breaks queued after it.
    fn left_in_ring(&mut self, mut pos: u64, at_file_start: bool) -> u64 {
        let layout = self.cfg.layout.clone();
        let mut walker = RecordWalker::new(layout.clone());
        if !at_file_start {
            walker = walker.continuing_own();
        }
        let mut ledger = FileLedger::new(layout.reader.clone(), self.cfg.window);
        let produced = self.ring.produced();
        loop {
            let brk = loop {
                match self.shared.peek() {
                    Some(b) if b.end < pos => self.shared.pop(),
                    Some(b) if b.end <= produced => break Some(b),
                    _ => break None,
                }
            };
            let end = brk.map_or(produced, |b| b.end);
            super::walk_range(|at, n| self.ring.slice(at, n), pos, end, &mut walker, &mut ledger);
            pos = pos.max(end);
            match brk {
                Some(b) => {
                    self.shared.pop();
                    pos = b.next_start.max(pos);
                    walker = RecordWalker::new(layout.clone());
                }
                None => return ledger.records,
            }
        }
    }
}

/// Replace a sidecar this writer wrote with a new version of it.
fn rewrite_sidecar(path: &Path, side: &Sidecar) -> io::Result<()> {
    let json = serde_json::to_vec_pretty(side).map_err(io::Error::other)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("sidecar");
    let tmp = path.with_file_name(format!(".{name}{PART_SUFFIX}"));
    let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    f.write_all_at(&json, 0)?;
    f.sync_data()?;
    // Our own sidecar: replaced in one step, so it is never seen half written.
    std::fs::rename(&tmp, path)
}

/// Remove leftovers of a run that could not start (an empty first file).
pub fn remove_if_empty(path: &Path) {
    if std::fs::metadata(path).map(|m| m.len() == 0).unwrap_or(false) {
        let _ = std::fs::remove_file(path);
    }
}

/// One drain of a filled ring by the writer alone, for the lab's `bench writer`: the disk path's own
/// speed and CPU with nothing competing, per engine and depth. `bytes` of 8192-byte records
/// are put in a RAM ring first, then written to `dir` with O_DIRECT (where the filesystem
/// allows it); the files are removed afterwards. Returns the writer's report and the seconds
/// it took.
pub fn drain_once(dir: &Path, bytes: usize, engine: &str, depth: usize) -> crate::Result<(WriterReport, f64)> {
    use crate::wire::{ByteOrder, Counter, Format};
    let fmt: Arc<dyn Format> = Arc::new(Counter::new(8192, ByteOrder::Be).map_err(crate::Error::failed)?);
    let layout = ReadLayout::for_stream(&fmt, FileFormat::Raw).map_err(crate::Error::failed)?;
    let (mut prod, cons) = sys::byte_ring(bytes, true)
        .map_err(|e| crate::Error::failed(format!("cannot allocate a {bytes}-byte ring: {e}")))?;
    let rec = vec![0u8; 8192];
    while prod.write(&[&rec]) {}
    prod.publish();
    let shared = Arc::new(Shared::default());
    shared.final_pos.store(prod.position(), Ordering::Relaxed);
    shared.done.store(true, Ordering::Release);
    let cfg = WriterConfig {
        dir: dir.to_path_buf(),
        prefix: format!("ws-bench-writer-{}", std::process::id()),
        extension: "raw".into(),
        direct: true,
        chunk: 8 << 20,
        prealloc: 256 << 20,
        flush_after: Duration::from_secs(1),
        layout,
        format_spec: fmt.spec(),
        window: 1024,
        run: super::RunIdentity::new(),
        index: true,
    };
    let mut w = Writer::new(cons, shared, cfg);
    w.depth = depth.max(1);
    match engine {
        "io_uring" => {
            w.uring = Some(
                sys::uring::WriteRing::new(w.depth as u32)
                    .map_err(|e| crate::Error::unsupported(format!("io_uring is not available here: {e}")))?,
            )
        }
        "threads" => {}
        other => return Err(crate::Error::invalid(format!("unknown write engine '{other}': use io_uring or threads"))),
    }
    // Threads means threads, even where `run` would choose io_uring by itself.
    w.force_threads = engine == "threads";
    let t = sys::monotonic_ns();
    let r = w.run();
    let dt = (sys::monotonic_ns() - t) as f64 / 1e9;
    for f in &r.files {
        let _ = std::fs::remove_file(&f.path);
        let _ = std::fs::remove_file(&f.sidecar);
    }
    if let Some(e) = &r.error {
        return Err(crate::Error::io(format!("writing to {} failed: {e}", dir.display())));
    }
    Ok((r, dt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ByteOrder, Counter, Format};

    #[test]
    fn names_held_by_other_files_are_passed_over_never_overwritten() {
        let dir = std::env::temp_dir().join(format!("ws-writer-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fmt: Arc<dyn Format> = Arc::new(Counter::new(1024, ByteOrder::Be).unwrap());
        let layout = ReadLayout::for_stream(&fmt, FileFormat::Raw).unwrap();
        let (_prod, cons) = sys::byte_ring(16384, false).unwrap();
        let cfg = WriterConfig {
            dir: dir.clone(),
            prefix: "t".into(),
            extension: "raw".into(),
            direct: false,
            chunk: 4096,
            prealloc: 0,
            flush_after: Duration::from_secs(1),
            layout,
            format_spec: fmt.spec(),
            window: 1024,
            run: crate::spool::RunIdentity::new(),
            index: true,
        };
        let mut w = Writer::new(cons, Arc::new(Shared::default()), cfg);
        let zero = Break { end: 0, next_start: 0, cut: 0, unix_ns: 0, ring_full: 0, not_written: 0, socket_drops: 0 };
        let ns = 1_700_000_000_000_000_000;
        let name = |i| file_name("t", ns, i, "raw");
        // Another recorder holds the first name: this one takes the next.
        std::fs::write(dir.join(name(1)), b"theirs").unwrap();
        let f = w.open(0, ns, zero).unwrap();
        assert_eq!(f.name, name(2));
        // Another takes its final name while it is being written: it is finished under the next.
        std::fs::write(dir.join(name(2)), b"theirs too").unwrap();
        let s = w.close(f, zero, "end of run", true, 0).unwrap();
        assert_eq!(s.path, dir.join(name(3)).display().to_string());
        assert_eq!(std::fs::read(dir.join(name(1))).unwrap(), b"theirs");
        assert_eq!(std::fs::read(dir.join(name(2))).unwrap(), b"theirs too");
        let side: Sidecar = serde_json::from_slice(&std::fs::read(&s.sidecar).unwrap()).unwrap();
        assert_eq!(side.file, name(3));
        assert_eq!(s.sidecar, dir.join(format!("{}.json", name(3))).display().to_string());
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(PART_SUFFIX))
            .collect();
        assert!(left.is_empty(), "no .part left");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
