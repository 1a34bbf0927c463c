//! `wirespeed record`: capture thread -> RAM ring -> writer thread -> files and sidecars.
//!
//! The receive path and ledger are those of `recv` (the capture loop is generic over its
//! [`Sink`](crate::rx::Sink)); this module sets up the ring and the writer around it, checks the
//! output directory before anything is received, and reports the recording beside the ledger.
//!
//! With `share` (`record --share NAME`), the rings are made shareable (memfd memory and a
//! header page per ring, see [`spool::share`](crate::spool::share)) and a descriptor names them
//! for `wirespeed tap NAME`; without it nothing changes (anonymous rings, no header).

use crate::error::{Error, Result};
use crate::rx::{self, Listener, Progress, RecvConfig, RecvReport};
use crate::spool::scatter::Scatter;
use crate::spool::writer::{RingSink, Rotation, Shared, Writer, WriterConfig, WriterReport};
use crate::spool::{FileFormat, ReadLayout};
use crate::sys;
use crate::units;
use crate::wire::Format;
use serde::Serialize;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Schema of `record --json`.
pub const RECORD_SCHEMA: &str = "wirespeed.record/1";

/// The id of a recorder's `--interval-json` line: a receiver's ([`rx::INTERVAL_SCHEMA`]) with
/// the recorder's own figures after it.
pub const INTERVAL_SCHEMA: &str = "wirespeed.record.interval/1";

/// Default RAM ring: about a second at 8 Gb/s.
pub const DEFAULT_BUFFER: usize = 1 << 30;
/// Default write size: large enough for the disk to stream, as `dd bs=8M`.
pub const DEFAULT_CHUNK: usize = 8 << 20;

/// Someone shown a recorder's rings and writers while it runs (the lab's metrics exporter):
/// handed them once, when the writers start.
pub trait ShowRings: Send + Sync + std::fmt::Debug {
    /// Each capture thread's ring and writer state, with the ring's capacity in bytes.
    fn rings(&self, rings: Vec<(Arc<Shared>, u64)>);
}

/// Everything a recording needs besides the receive settings.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// Output directory.
    pub dir: PathBuf,
    /// File name prefix.
    pub prefix: String,
    /// raw or pcap.
    pub file_format: FileFormat,
    /// Keep nothing: network only (like the seed's /dev/null runs).
    pub null_sink: bool,
    /// RAM ring size, bytes.
    pub buffer: usize,
    /// Bytes per disk write.
    pub chunk: usize,
    /// File rotation.
    pub rotation: Rotation,
    /// Use O_DIRECT where possible.
    pub direct: bool,
    /// Write what has waited this long even if less than a chunk has gathered.
    pub flush_after: Duration,
    /// Pin the writer thread to this CPU.
    pub writer_cpu: Option<usize>,
    /// Write invalid datagrams too (evidence); by default they are left out, like duplicates.
    pub keep_invalid: bool,
    /// Progress samples as JSON lines (`--interval-json`), with the recorder's own figures, for
    /// scripts such as `bench soak --record` that follow a long recording.
    pub interval_json: bool,
    /// Publish the rings read-only under this name for `wirespeed tap` (pcap recordings only).
    pub share: Option<String>,
    /// Learn the layout of this format family (`vdif`, `vtp`, `mark5b`, `spead`) from the
    /// stream's headers once the socket is open ([`crate::rx::learn`]); `fmt` is then only what
    /// the run is sized for until the layout is known. `None`: record with `fmt` as given.
    pub learn: Option<String>,
    /// Who is shown the rings and writers while the recording runs (a metrics exporter), if anyone.
    pub show_rings: Option<Arc<dyn ShowRings>>,
    /// The frame rate of a learned VDIF or Mark5B layout, when known beforehand (a station's
    /// `mode=`): learning then ends with the first datagrams.
    pub learn_fps: Option<u32>,
    /// Record one scan scattered over mount points (FlexBuff or Mark6) instead of a file series
    /// in `dir`.
    pub scan: Option<ScanTarget>,
    /// Build a time index into each file's sidecar (the default; off only to measure its cost).
    pub index: bool,
    /// Delete the oldest finished files to keep free space or age (`--keep-free`,
    /// `--keep-for`); `None`: a disk that fills stops the recording.
    pub retention: Option<RetentionTarget>,
}

/// Retention rules and who is told of each deletion.
#[derive(Clone)]
pub struct RetentionTarget {
    /// The rules.
    pub rules: crate::spool::retention::Retention,
    /// Told of every deletion (one line each), if anyone.
    pub say: Option<crate::spool::scatter::Say>,
}

impl std::fmt::Debug for RetentionTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetentionTarget").field("rules", &self.rules).finish_non_exhaustive()
    }
}

/// A scan scattered over mount points: where, named what, in which layout and chunk size.
#[derive(Clone)]
pub struct ScanTarget {
    /// The mount points, one disk thread each.
    pub mounts: Vec<PathBuf>,
    /// The scan's name.
    pub name: String,
    /// FlexBuff or Mark6.
    pub layout: crate::spool::scan::ScanLayout,
    /// Bytes per chunk (FlexBuff) or block (Mark6), rounded down to whole frames.
    pub chunk: u64,
    /// Told about dropped and full disks as it happens.
    pub say: Option<crate::spool::scatter::Say>,
}

impl std::fmt::Debug for ScanTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanTarget")
            .field("mounts", &self.mounts)
            .field("name", &self.name)
            .field("layout", &self.layout)
            .field("chunk", &self.chunk)
            .finish()
    }
}

impl ScanTarget {
    /// The chunk size in bytes for records of `record_len`: whole records, at least one.
    pub fn chunk_bytes(&self, record_len: usize) -> u64 {
        let r = record_len.max(1) as u64;
        (self.chunk / r).max(1) * r
    }
}

/// How a shared recording was published.
#[derive(Clone, Debug, Serialize)]
pub struct ShareReport {
    /// The share name taps attach to.
    pub name: String,
    /// Its descriptor file (removed when the recording ended).
    pub descriptor: String,
}

/// The RAM ring's account.
#[derive(Clone, Debug, Serialize)]
pub struct RingReport {
    /// Capacity, bytes (with several capture threads: of all their rings).
    pub capacity: u64,
    /// Highest fill, bytes (with several rings: the fullest ring's).
    pub high_water: u64,
    /// Highest fill as a fraction of capacity (with several rings: of the fullest ring's own).
    pub high_water_fraction: f64,
    /// Locked in RAM.
    pub locked: bool,
    /// Datagrams dropped because the ring was full.
    pub ring_full: u64,
    /// What backs the ring: hugetlb, transparent or normal pages.
    pub pages: sys::PageKind,
    /// Bytes backed by huge pages.
    pub huge_bytes: u64,
    /// Seconds from allocating the ring(s) until every page was faulted in and locked: what
    /// readiness cost. The socket opens, and "listening" is said, only after.
    pub ready_s: f64,
    /// Seconds until every page of the ring was faulted in: the same as `ready_s`, since the
    /// whole ring is made ready before listening (kept for the scripts that read it).
    pub populated_s: Option<f64>,
    /// Bytes of the ring(s) resident in RAM when it was called ready, as the kernel reports
    /// (mincore): the whole capacity, or the ring was not ready.
    pub resident_bytes: u64,
}

/// The result of a recording.
#[derive(Clone, Debug, Serialize)]
pub struct RecordReport {
    /// Schema name and version.
    pub schema: &'static str,
    /// Output directory (None with --sink null).
    pub dir: Option<String>,
    /// raw or pcap.
    pub file_format: FileFormat,
    /// The receive ledger (what was received and kept), as `recv` reports it.
    pub capture: RecvReport,
    /// The ring.
    pub ring: Option<RingReport>,
    /// The writer and its files.
    pub writer: Option<WriterReport>,
    /// Average disk write rate over the run, bytes/s.
    pub disk_bytes_per_s: f64,
    /// Warnings given at start.
    pub warnings: Vec<String>,
    /// With several capture threads: each thread's ring and file series (`ring` then
    /// describes the fullest ring, with the capacity of all; `writer` all the files).
    pub threads: Vec<RecordThread>,
    /// The share (`--share`), if the rings were published for taps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<ShareReport>,
    /// What retention deleted (`--keep-free`, `--keep-for`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<crate::spool::retention::RetentionReport>,
}

/// Check that `dir` exists and takes files, before any socket is opened.
pub fn check_dir(dir: &Path) -> Result<()> {
    let md = std::fs::metadata(dir).map_err(|e| {
        Error::usage_io(
            format!("output directory {}: {e} (create it first: mkdir -p {})", dir.display(), dir.display()),
            &e,
        )
    })?;
    if !md.is_dir() {
        return Err(Error::invalid(format!("{} is not a directory: -o takes a directory", dir.display())));
    }
    // A probe file of our own, created new: an existing file of that name is never touched.
    let mut last = None;
    for i in 0..100u32 {
        let probe = dir.join(format!(".wirespeed-probe-{}-{i}", std::process::id()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
            Ok(f) => {
                let written = f.write_all_at(b"x", 0);
                drop(f);
                let _ = std::fs::remove_file(&probe);
                return written.map_err(|e| {
                    Error::usage_io(
                        format!("cannot write in {}: {e} (check permissions and free space)", dir.display()),
                        &e,
                    )
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(Error::invalid(format!(
                    "cannot write in {}: {e} (check permissions and free space)",
                    dir.display()
                )))
            }
        }
    }
    Err(Error::invalid(format!(
        "cannot write in {}: {} (100 probe names taken)",
        dir.display(),
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}

/// What the disk sustains with the recorder's own I/O pattern.
#[derive(Clone, Debug, Serialize)]
pub struct DiskTest {
    /// Schema name and version.
    pub schema: &'static str,
    /// Directory tested.
    pub dir: String,
    /// Bytes written.
    pub bytes: u64,
    /// Bytes per write.
    pub chunk: usize,
    /// O_DIRECT was used.
    pub direct_io: bool,
    /// Sustained rate including the final fdatasync, bytes/s.
    pub bytes_per_s: f64,
    /// Slowest write, milliseconds.
    pub max_write_ms: f64,
    /// Rate of each tenth of the run, bytes/s (shows a disk that slows as its cache fills).
    pub deciles: Vec<f64>,
}

/// Write `bytes` in `chunk`-sized aligned writes from locked memory to a preallocated file in
/// `dir` (as the recorder does), then remove it. `stop` (Ctrl-C, SIGTERM) ends it early: the
/// file is removed all the same and the run is an error, since a partial figure is no figure.
pub fn disk_test(dir: &Path, bytes: u64, chunk: usize, direct: bool, stop: &AtomicBool) -> Result<DiskTest> {
    check_dir(dir)?;
    if chunk == 0 || chunk % sys::RING_ALIGN != 0 {
        return Err(Error::param("block", format!("{chunk} must be a non-zero multiple of 4 KiB")));
    }
    let free = sys::free_space(dir).unwrap_or(u64::MAX);
    if bytes > free {
        return Err(Error::invalid(format!(
            "{} has {} free, less than the {} to write: use a smaller --size",
            dir.display(),
            units::bytes(free),
            units::bytes(bytes)
        )));
    }
    let (mut prod, cons) =
        sys::byte_ring(chunk, true).map_err(|e| Error::failed(format!("cannot allocate a write buffer: {e}")))?;
    let pattern: Vec<u8> = (0..chunk).map(|i| (i * 7 + 3) as u8).collect();
    prod.write(&[&pattern]);
    prod.publish();
    let buf = cons.slice(0, chunk);
    let path = dir.join(format!(".wirespeed-disk-test-{}", std::process::id()));
    let (file, direct_io) =
        sys::create_direct(&path, direct).map_err(|e| Error::io(format!("cannot create {}: {e}", path.display())))?;
    let result = (|| -> std::io::Result<(f64, u64, Vec<f64>)> {
        let _ = sys::preallocate(std::os::fd::AsRawFd::as_raw_fd(&file), 0, bytes);
        let t0 = sys::monotonic_ns();
        let mut off = 0u64;
        let mut max_ns = 0u64;
        let mut deciles = Vec::new();
        let (mut dt0, mut doff) = (t0, 0u64);
        while off < bytes {
            if stop.load(Ordering::Relaxed) {
                return Err(std::io::Error::from(std::io::ErrorKind::Interrupted));
            }
            let n = (chunk as u64).min(bytes - off) as usize;
            let n = if direct_io { n.div_ceil(sys::RING_ALIGN) * sys::RING_ALIGN } else { n };
            let t = sys::monotonic_ns();
            file.write_all_at(&buf[..n.min(buf.len())], off)?;
            max_ns = max_ns.max(sys::monotonic_ns() - t);
            off += n as u64;
            if off - doff >= bytes / 10 && deciles.len() < 10 {
                let now = sys::monotonic_ns();
                deciles.push((off - doff) as f64 / ((now - dt0) as f64 / 1e9));
                (dt0, doff) = (now, off);
            }
        }
        file.sync_data()?;
        if off > doff && deciles.len() < 10 {
            let now = sys::monotonic_ns();
            deciles.push((off - doff) as f64 / ((now - dt0) as f64 / 1e9));
        }
        let dt = (sys::monotonic_ns() - t0) as f64 / 1e9;
        Ok((off as f64 / dt, max_ns, deciles))
    })();
    let _ = std::fs::remove_file(&path);
    let (rate, max_ns, deciles) = result.map_err(|e| {
        if e.kind() == std::io::ErrorKind::Interrupted && stop.load(Ordering::Relaxed) {
            Error::failed(format!(
                "stopped by a signal after a partial test; its file in {} was removed",
                dir.display()
            ))
        } else if e.raw_os_error() == Some(libc::ENOSPC) {
            Error::io(format!("the disk holding {} filled during the test: use a smaller --size", dir.display()))
        } else {
            Error::os(format!("writing to {} failed: {e}", dir.display()), &e)
        }
    })?;
    Ok(DiskTest {
        schema: "wirespeed.disk-test/1",
        dir: dir.display().to_string(),
        bytes,
        chunk,
        direct_io,
        bytes_per_s: rate,
        max_write_ms: max_ns as f64 / 1e6,
        deciles,
    })
}

/// The start-up warning when the expected rate outruns the disk for longer than the ring lasts.
pub fn rate_warning(expect: f64, disk: f64, buffer: u64, duration: Option<Duration>) -> Option<String> {
    if expect <= disk {
        return None;
    }
    let absorb_s = buffer as f64 / (expect - disk);
    if duration.is_some_and(|d| d.as_secs_f64() <= absorb_s) {
        return None;
    }
    Some(format!(
        "the expected {} is more than this disk sustains ({} measured): the {} ring absorbs the difference for {:.1} s, then datagrams are dropped (counted as ring-full); use a larger --buffer, a shorter run or a faster disk",
        units::bits(expect * 8.0),
        units::bits(disk * 8.0),
        units::bytes(buffer),
        absorb_s
    ))
}

/// Live state for progress lines: every capture thread's ring and writer.
pub struct RecordLive {
    shared: Vec<Arc<Shared>>,
    capacity: u64,
    last_written: std::sync::atomic::AtomicU64,
    last_t: std::sync::atomic::AtomicU64,
}

impl RecordLive {
    /// One progress line: the receive progress plus ring fill and disk rate (over all rings).
    pub fn line(&self, p: &Progress) -> String {
        let base = p.line();
        if self.shared.is_empty() {
            return base;
        }
        let now = sys::monotonic_ns();
        let w: u64 = self.shared.iter().map(|sh| sh.written.load(Ordering::Relaxed)).sum();
        let lw = self.last_written.swap(w, Ordering::Relaxed);
        let lt = self.last_t.swap(now, Ordering::Relaxed);
        let dt = (now - lt) as f64 / 1e9;
        let fill: u64 = self.shared.iter().map(|sh| sh.ring_fill.load(Ordering::Relaxed)).sum();
        let files: u64 = self.shared.iter().map(|sh| sh.files_done.load(Ordering::Relaxed)).sum();
        format!(
            "{base}  ring {:.1}%  disk {}  files {}{}",
            fill as f64 * 100.0 / self.capacity as f64,
            units::bits((w - lw) as f64 * 8.0 / dt.max(1e-9)),
            files,
            if p.ring_full > 0 { format!("  ring-full {}", units::thousands(p.ring_full)) } else { String::new() }
        )
    }

    /// One progress sample as a JSON line ([`INTERVAL_SCHEMA`]): the receive progress plus what
    /// the recorder wrote so far (bytes, files), its rings' fill and highest fill (summed over the
    /// threads' rings; absent with `--null-sink`, which has no rings).
    pub fn json(&self, p: &Progress) -> String {
        let sum = |f: fn(&Shared) -> u64| -> u64 { self.shared.iter().map(|s| f(s)).sum() };
        let mut v = serde_json::to_value(Progress { schema: INTERVAL_SCHEMA, ..*p }).unwrap_or_default();
        if let (Some(o), false) = (v.as_object_mut(), self.shared.is_empty()) {
            o.insert("written_bytes".into(), sum(|s| s.written.load(Ordering::Relaxed)).into());
            o.insert("ring_fill_bytes".into(), sum(|s| s.ring_fill.load(Ordering::Relaxed)).into());
            o.insert("ring_high_water".into(), sum(|s| s.high_water.load(Ordering::Relaxed)).into());
            o.insert("files".into(), sum(|s| s.files_done.load(Ordering::Relaxed)).into());
        }
        v.to_string()
    }

    /// The progress sample in the form the run asked for.
    fn show(&self, p: &Progress, json: bool) -> String {
        if json {
            self.json(p)
        } else {
            self.line(p)
        }
    }
}

/// One capture thread's recording: its ring and its file series.
#[derive(Clone, Debug, Serialize)]
pub struct RecordThread {
    /// The capture thread.
    pub thread: usize,
    /// File name prefix of its series.
    pub prefix: String,
    /// Its ring's capacity, bytes.
    pub ring_capacity: u64,
    /// Its ring's highest fill, bytes.
    pub ring_high_water: u64,
    /// Bytes its writer wrote.
    pub bytes: u64,
    /// Files its writer finished.
    pub files: usize,
}

/// The file name prefix of capture thread `thread`'s series.
///
/// Each capture thread writes its own series of files (`PREFIX-tN-...`), with its own ring and
/// writer, rather than one series interleaved by time: the threads then share nothing on the
/// way to the disk (no lock, no merge queue, no writer that one slow thread could hold up),
/// each file and sidecar still describes itself completely, and since the steering keeps each
/// stream on one thread, every stream's records lie in one series in arrival order, which is
/// what `verify` reads (a directory's files in name order: one series after the other). A
/// one-thread recording keeps the plain prefix, as before.
pub fn thread_prefix(prefix: &str, thread: usize, threads: usize) -> String {
    if threads <= 1 {
        prefix.to_string()
    } else {
        format!("{prefix}-t{thread}")
    }
}

/// Record until the receive settings end the run (duration, count, end of stream, signal) or the
/// disk fails. `bind` opens the socket(s) (and may say so): it is called once the rings are
/// ready. `progress` gets a ready-made line every `interval`.
///
/// With `rcfg.threads` > 1, each capture thread has its own ring (the `--buffer` split evenly
/// between them), its own writer thread and its own file series ([`thread_prefix`]).
#[allow(clippy::too_many_arguments)]
pub fn run(
    rcfg: &RecvConfig,
    cfg: &RecordConfig,
    bind: &dyn Fn() -> Result<Listener>,
    fmt: Arc<dyn Format>,
    stop: &AtomicBool,
    interval: Option<Duration>,
    progress: &(dyn Fn(&str) + Sync),
    warnings: Vec<String>,
) -> Result<RecordReport> {
    if let Some(name) = &cfg.share {
        crate::spool::share::validate_name(name).map_err(Error::invalid)?;
        if cfg.null_sink {
            return Err(Error::invalid(
                "--share publishes the RAM ring, and --sink null has none: record to a directory (-o DIR)",
            ));
        }
        if cfg.file_format != FileFormat::Pcap {
            return Err(Error::invalid(format!(
                "--share {name} needs --file-format pcap: taps find record boundaries and source addresses in pcap records, raw files have neither"
            )));
        }
    }
    if let (Some(family), Some(name)) = (&cfg.learn, &cfg.share) {
        return Err(Error::param("share", format!(
            "{name} publishes the stream's layout before anything arrives, so it cannot be learned: give the {family} keys (`wirespeed probe` prints them)"
        )));
    }
    if cfg.null_sink {
        let live = RecordLive { shared: Vec::new(), capacity: 1, last_written: 0.into(), last_t: 0.into() };
        let mut listener = bind()?;
        let mut rc = rcfg.clone();
        let (fmt, learned) = match &cfg.learn {
            Some(family) => {
                let (f, l) = rx::learn(&mut listener, family, stop, rcfg.duration, rx::learn::HOLD_MAX)?;
                progress(&format!("wirespeed record: {}", l.lines().join("; ")));
                rc.duration = rc.duration.map(|d| d.saturating_sub(l.spent));
                (f, Some(l))
            }
            None => (fmt, None),
        };
        let mut report =
            rx::capture(&rc, listener, fmt.as_ref(), stop, interval, &|p| progress(&live.show(p, cfg.interval_json)))?;
        report.learned = learned;
        return Ok(RecordReport {
            schema: RECORD_SCHEMA,
            dir: None,
            file_format: cfg.file_format,
            capture: report,
            ring: None,
            writer: None,
            disk_bytes_per_s: 0.0,
            warnings,
            threads: Vec::new(),
            share: None,
            retention: None,
        });
    }
    crate::spool::validate_prefix(&cfg.prefix).map_err(Error::invalid)?;
    let layout = ReadLayout::for_stream(&fmt, cfg.file_format).map_err(Error::invalid)?;
    let mut cfg = cfg.clone();
    prepare_scan(&mut cfg, rcfg, &layout)?;
    let cfg = &cfg;
    if cfg.chunk == 0 || cfg.chunk % sys::RING_ALIGN != 0 {
        return Err(Error::param("block", format!("{} must be a non-zero multiple of 4 KiB", cfg.chunk)));
    }
    let n = rcfg.threads.max(1);
    let buffer = (cfg.buffer / n).div_ceil(cfg.chunk) * cfg.chunk;
    if buffer < 2 * cfg.chunk {
        return Err(Error::invalid(if n > 1 {
            format!(
                "--buffer {} split over {n} capture threads leaves each ring less than two --block writes ({}): give at least --buffer {}",
                units::bytes(cfg.buffer as u64),
                units::bytes(2 * cfg.chunk as u64),
                units::bytes((2 * cfg.chunk * n) as u64)
            )
        } else {
            format!(
                "--buffer {} must hold at least two --block writes ({})",
                units::bytes(cfg.buffer as u64),
                units::bytes(2 * cfg.chunk as u64)
            )
        }));
    }
    if let (Some(max), None) = (cfg.rotation.max_bytes, &cfg.scan) {
        let rec = fmt.fixed_len().unwrap_or(9000) + super::spool::PCAP_RECORD_OVERHEAD_V6;
        if max < rec as u64 * 2 {
            return Err(Error::param("file-size", format!("{max} is too small to hold two records of {rec} bytes")));
        }
    }
    // Every page of every ring is faulted in and locked before the socket opens: "listening"
    // means a stream at full rate from that moment meets no page nobody has touched.
    let t_ready = sys::monotonic_ns();
    let total = (buffer * n) as u64;
    let shown = std::sync::atomic::AtomicU64::new(0);
    let prepare_line = |done: u64| {
        let t = (sys::monotonic_ns() - t_ready) as f64 / 1e9;
        format!(
            "wirespeed record: making the {} ring ready (every page faulted in and locked before listening): {:.0}% after {t:.1} s",
            units::bytes(total),
            done as f64 * 100.0 / total.max(1) as f64
        )
    };
    let mut rings = Vec::with_capacity(n);
    for i in 0..n {
        let before = (buffer * i) as u64;
        // A line a second while it takes long (a big ring on a cold host takes seconds).
        let report = |done: u64, _of: u64| {
            let secs = (sys::monotonic_ns() - t_ready) / 1_000_000_000;
            if secs >= 1 && shown.fetch_max(secs, Ordering::Relaxed) < secs {
                progress(&prepare_line(before + done));
            }
        };
        let how = sys::Prefault { progress: Some(&report), stop: Some(stop) };
        let made = if cfg.share.is_some() {
            sys::ring::shared_byte_ring(buffer, true, &how)
        } else {
            sys::byte_ring_with(buffer, true, &how)
        };
        rings.push(made.map_err(|e| {
            if e.kind() == std::io::ErrorKind::Interrupted {
                Error::failed("stopped while the ring was being made ready: nothing was received or recorded")
            } else {
                Error::failed(format!(
                    "cannot allocate a {} ring: {e}; use a smaller --buffer",
                    units::bytes(buffer as u64)
                ))
            }
        })?);
    }
    let ready_s = (sys::monotonic_ns() - t_ready) as f64 / 1e9;
    if shown.load(Ordering::Relaxed) > 0 {
        let pages = rings[0].0.memory().pages;
        progress(&format!(
            "wirespeed record: ring ready: {} in {ready_s:.2} s ({}/s, {}{})",
            units::bytes(total),
            units::bytes((total as f64 / ready_s.max(1e-9)) as u64),
            pages.describe(),
            if rings.iter().all(|(p, _)| p.locked()) { ", locked" } else { "" }
        ));
    }
    let (report, _rings) = run_with_rings(rcfg, cfg, bind, fmt, stop, interval, progress, warnings, rings, ready_s);
    report
}

/// A capture thread's ring, both ends: made ready once, and handed back after a recording
/// ([`run_with_rings`]) so that a station records every scan into the same memory.
pub type RingPair = (sys::RingProducer, sys::RingConsumer);

/// Record as [`run`] does, into rings made ready before (one per capture thread; `ready_s` is
/// what making them took), and give the rings back: all of them after a recording that ended
/// (well or not), none when a capture thread failed and took its ring with it. Each ring must
/// be drained (its consumer released up to its producer) and its producer at a 4 KiB boundary.
#[allow(clippy::too_many_arguments)]
pub fn run_with_rings(
    rcfg: &RecvConfig,
    cfg: &RecordConfig,
    bind: &dyn Fn() -> Result<Listener>,
    fmt: Arc<dyn Format>,
    stop: &AtomicBool,
    interval: Option<Duration>,
    progress: &(dyn Fn(&str) + Sync),
    warnings: Vec<String>,
    rings: Vec<RingPair>,
    ready_s: f64,
) -> (Result<RecordReport>, Vec<RingPair>) {
    let mut back = Vec::new();
    // Every early return below comes out of this closure, so the rings are handed back whatever
    // happened.
    let r = (|| -> Result<RecordReport> {
        let n = rings.len();
        let layout = ReadLayout::for_stream(&fmt, cfg.file_format).map_err(Error::invalid)?;
        let mut warnings = warnings;
        let locked = rings.iter().all(|(p, _)| p.locked());
        // Every thread's ring is made alike: the report gives the first one's page kind and all of
        // their huge-page and resident bytes.
        let pages = rings[0].0.memory().pages;
        let huge_bytes = rings.iter().map(|(p, _)| p.memory().huge_bytes).sum();
        let resident_bytes = rings.iter().map(|(p, _)| p.memory().resident_bytes()).sum();
        if !locked {
            warnings.push("the ring could not be locked in RAM (RLIMIT_MEMLOCK): it may be paged out under memory pressure; run as root or raise `ulimit -l`".into());
        }
        let capacities: Vec<u64> = rings.iter().map(|(p, _)| p.capacity()).collect();
        let capacity: u64 = capacities.iter().sum();
        // One identity for the run, in every sidecar of every thread's files: made before the
        // socket opens, so the run starts before any datagram it holds arrived.
        let run = crate::spool::RunIdentity::new();
        // Until the rings are handed to the capture and writer threads, a failure gives them back.
        let prepared = (|| -> Result<_> {
            // Claim the share name before any socket opens: a second recorder of the same name stops here.
            let share_guard = match &cfg.share {
                Some(name) => Some(claim_share(name, rcfg, &fmt, &rings)?),
                None => None,
            };
            // Only now, with the rings faulted in and locked, open the sockets: a sender that starts
            // when the recorder says it is listening must not meet a socket nobody drains.
            let mut listener = bind()?;
            if listener.threads() != n {
                return Err(Error::failed(format!("{} sockets opened for {n} capture threads", listener.threads())));
            }
            // The layout, learned from the stream now that its datagrams are read (and held for the
            // capture): the files are named and described by it.
            // At most half the ring is held, so that the held datagrams fit it when they are counted.
            let mut rc = rcfg.clone();
            let (fmt, layout, learned) = match &cfg.learn {
                Some(family) => {
                    let hold = rx::learn::HOLD_MAX.min(usize::try_from(capacity / 2).unwrap_or(usize::MAX));
                    let (f, l) = rx::learn_with(&mut listener, family, stop, rcfg.duration, hold, cfg.learn_fps)?;
                    listener.note_layout_changes_only();
                    progress(&format!("wirespeed record: {}", l.lines().join("; ")));
                    let lay = ReadLayout::for_stream(&f, cfg.file_format).map_err(Error::invalid)?;
                    rc.duration = rc.duration.map(|d| d.saturating_sub(l.spent));
                    (f, lay, Some(l))
                }
                None => (fmt.clone(), layout.clone(), None),
            };
            Ok((share_guard, listener, rc, fmt, layout, learned))
        })();
        let (share_guard, listener, rc, fmt, layout, learned) = match prepared {
            Ok(x) => x,
            Err(e) => {
                back = rings;
                return Err(e);
            }
        };
        let rcfg = &rc;
        let local = listener.local_addr().unwrap_or(rcfg.listen);
        let ext = match cfg.file_format {
            FileFormat::Pcap => "pcap".to_string(),
            FileFormat::Raw => fmt.file_extension().to_string(),
        };
        let mut shareds = Vec::with_capacity(n);
        let mut sinks = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        let mut prefixes = Vec::with_capacity(n);
        let t0 = sys::monotonic_ns();
        for (i, (prod, cons)) in rings.into_iter().enumerate() {
            let shared = Arc::new(Shared::default());
            sinks.push(
                RingSink::new(prod, shared.clone(), &layout, &fmt, local, cfg.rotation)
                    .keep_invalid(cfg.keep_invalid)
                    .shared(),
            );
            let prefix = thread_prefix(&cfg.prefix, i, n);
            prefixes.push(prefix.clone());
            let wcfg = WriterConfig {
                dir: cfg.dir.clone(),
                prefix,
                extension: ext.clone(),
                direct: cfg.direct,
                chunk: cfg.chunk,
                prealloc: cfg.rotation.max_bytes.unwrap_or(256 << 20),
                flush_after: cfg.flush_after,
                layout: layout.clone(),
                format_spec: fmt.spec(),
                window: rcfg.ledger.window,
                run: run.clone(),
                index: cfg.index,
            };
            let writer_cpu = cfg.writer_cpu;
            // The writer gives its ring back when it drains it whole (a scan's); a file writer's
            // ring ends with the run.
            let drain: Box<dyn FnOnce() -> (WriterReport, Option<sys::RingConsumer>) + Send> = match &cfg.scan {
                Some(t) => {
                    let mut t = t.clone();
                    t.name = stream_scans(&t.name, n).swap_remove(i);
                    let scatter = Scatter::new(cons, shared.clone(), scatter_config(&t, wcfg, &fmt));
                    Box::new(move || {
                        let (r, c) = scatter.drain();
                        (r, Some(c))
                    })
                }
                None => {
                    let writer = Writer::new(cons, shared.clone(), wcfg);
                    Box::new(move || (writer.run(), None))
                }
            };
            let spawned = std::thread::Builder::new()
                .name(if n == 1 { "ws-writer".into() } else { format!("ws-writer-{i}") })
                .spawn(move || {
                    if let Some(cpu) = writer_cpu {
                        let _ = sys::pin_current_thread(cpu);
                    }
                    drain()
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    abort_writers(&shareds, handles);
                    return Err(Error::failed(format!("cannot start a writer thread: {e}")));
                }
            }
            shareds.push(shared);
        }
        if let Some(show) = &cfg.show_rings {
            show.rings(shareds.iter().cloned().zip(capacities.iter().copied()).collect());
        }
        let keeper = match (&cfg.retention, shareds.first()) {
            (Some(t), Some(counters)) => match start_retention(cfg, t, n, counters.clone()) {
                Ok(k) => Some(k),
                Err(e) => {
                    abort_writers(&shareds, handles);
                    return Err(e);
                }
            },
            _ => None,
        };
        let live = RecordLive {
            shared: shareds.clone(),
            capacity,
            last_written: 0.into(),
            last_t: sys::monotonic_ns().into(),
        };
        let captured = rx::capture_group(
            rcfg,
            listener,
            fmt.as_ref(),
            stop,
            interval,
            &|p| progress(&live.show(p, cfg.interval_json)),
            sinks,
        );
        let (report, sinks) = match captured {
            Ok(x) => x,
            Err(e) => {
                // The capture threads ended without finishing their sinks: let the writers close
                // up, and remove the empty files they had opened.
                abort_writers(&shareds, handles);
                return Err(e);
            }
        };
        let mut wreports = Vec::with_capacity(n);
        let mut consumers = Vec::with_capacity(n);
        for h in handles {
            let (w, c) = h.join().map_err(|_| Error::failed("a writer thread panicked"))?;
            wreports.push(w);
            consumers.push(c);
        }
        let retention = keeper.map(RetentionRun::finish);
        if consumers.iter().all(Option::is_some) {
            back = sinks.into_iter().map(RingSink::into_ring).zip(consumers.into_iter().flatten()).collect();
        }
        let mut report = report;
        report.learned = learned;
        let threads: Vec<RecordThread> = wreports
            .iter()
            .enumerate()
            .map(|(i, w)| RecordThread {
                thread: i,
                prefix: prefixes[i].clone(),
                ring_capacity: capacities[i],
                ring_high_water: shareds[i].high_water.load(Ordering::Relaxed),
                bytes: w.bytes,
                files: w.files.len(),
            })
            .collect();
        let wreport = merge_writer_reports(wreports);
        if wreport.error.is_some() || wreport.unwritten_records > 0 {
            // The capture's verdict speaks of the network; records it received were lost on the
            // way to the disk after it, and the summary must not say "no loss" beside that.
            for d in report.diagnosis.iter_mut().filter(|d| d.starts_with("no loss")) {
                *d = format!(
                "no loss on the network, but the recording is incomplete: {} records received into RAM never reached the disk ({})",
                units::thousands(wreport.unwritten_records),
                d
            );
            }
        }
        if report.ring_full > 0 {
            if let Some(c) = rx::report::doctor_command(&report, &format!(" --disk {}", cfg.dir.display())) {
                for d in report.diagnosis.iter_mut().filter(|d| d.contains("the recording ring was full")) {
                    d.push_str(&format!("; `{c}` measures the disk against the stream"));
                }
            }
        }
        let wall = (sys::monotonic_ns() - t0) as f64 / 1e9;
        // The fullest ring is the one that speaks for the recording (one ring: that ring).
        let (high, high_cap) = threads
            .iter()
            .map(|t| (t.ring_high_water, t.ring_capacity))
            .max_by(|a, b| (a.0 as f64 / a.1 as f64).total_cmp(&(b.0 as f64 / b.1 as f64)))
            .unwrap_or((0, 1));
        Ok(RecordReport {
            schema: RECORD_SCHEMA,
            dir: Some(cfg.dir.display().to_string()),
            file_format: cfg.file_format,
            ring: Some(RingReport {
                capacity,
                high_water: high,
                high_water_fraction: high as f64 / high_cap as f64,
                locked,
                ring_full: report.ring_full,
                pages,
                huge_bytes,
                ready_s,
                populated_s: Some(ready_s),
                resident_bytes,
            }),
            disk_bytes_per_s: wreport.bytes as f64 / wall.max(1e-9),
            capture: report,
            writer: Some(wreport),
            warnings,
            threads: if n > 1 { threads } else { Vec::new() },
            share: share_guard.as_ref().map(|g| ShareReport {
                name: cfg.share.clone().unwrap_or_default(),
                descriptor: g.path().display().to_string(),
            }),
            retention,
        })
    })();
    (r, back)
}

/// For a scan ([`RecordConfig::scan`]): check its settings against the recording's before
/// anything is created (raw frames, one capture thread, room for two chunks, mount points that
/// take files and hold no scan of that name), and cut the record stream into its chunks.
pub fn prepare_scan(cfg: &mut RecordConfig, rcfg: &RecvConfig, layout: &ReadLayout) -> Result<()> {
    if let Some(t) = cfg.scan.clone() {
        check_scan(&t, cfg, rcfg, layout)?;
        cfg.rotation = Rotation { max_bytes: Some(t.chunk_bytes(layout.record_len)), period: None };
    }
    Ok(())
}

/// Check a scattered scan's settings against the recording's before anything is created.
fn check_scan(t: &ScanTarget, cfg: &RecordConfig, rcfg: &RecvConfig, layout: &ReadLayout) -> Result<()> {
    if cfg.file_format != FileFormat::Raw {
        return Err(Error::invalid(format!(
            "a {} scan holds frames back to back: record it with --file-format raw",
            t.layout.name()
        )));
    }
    let streams = matches!(crate::rx::steering_for(&*layout.reader), crate::sys::bpf::Steer::PayloadStream { .. });
    if rcfg.threads > 1 && !streams {
        return Err(Error::invalid(
            "a scan is recorded by one capture thread, or one per data stream (--threads N with a VDIF format of several threads, e.g. --format vdif,threads=4,...: VDIF thread t goes to scan SCAN_ds<t mod N>): leave out --threads",
        ));
    }
    if cfg.share.is_some() {
        return Err(Error::invalid("--share publishes pcap rings, and a scan is raw frames: leave out --share"));
    }
    if cfg.rotation.max_bytes.is_some() || cfg.rotation.period.is_some() {
        return Err(Error::invalid("a scan is cut into chunks of --chunk-size: leave out --file-size and --rotate"));
    }
    let chunk = t.chunk_bytes(layout.record_len);
    if t.layout == crate::spool::scan::ScanLayout::Mark6 && chunk + 8 > i32::MAX as u64 {
        return Err(Error::param("chunk-size", "a Mark6 block holds at most 2 GiB (its size is an int32)"));
    }
    if (cfg.buffer as u64) < 2 * chunk {
        return Err(Error::invalid(format!(
            "--buffer {} must hold at least two chunks of {} (a chunk fills while the one before is written): give a larger --buffer or a smaller --chunk-size",
            units::bytes(cfg.buffer as u64),
            units::bytes(chunk)
        )));
    }
    for name in stream_scans(&t.name, rcfg.threads) {
        crate::spool::scatter::check_mounts(&t.mounts, &name)?;
    }
    Ok(())
}

/// The scans of a recording by `threads` capture threads: the scan itself with one, and with
/// several one per data stream, `SCAN_ds<i>` for capture thread i (jive5ab's datastream naming;
/// its readers gather `SCAN_ds*` with `SCAN`).
pub fn stream_scans(scan: &str, threads: usize) -> Vec<String> {
    if threads <= 1 {
        vec![scan.to_string()]
    } else {
        (0..threads).map(|i| format!("{scan}_ds{i}")).collect()
    }
}

/// The scattered writer's settings from the file writer's.
fn scatter_config(t: &ScanTarget, w: WriterConfig, fmt: &Arc<dyn Format>) -> crate::spool::scatter::ScatterConfig {
    use crate::spool::scan::{mark6_packet_format, Mark6Header, MARK6_BLOCK_HEADER};
    let family = fmt.spec().split(',').next().unwrap_or("").to_string();
    let chunk = t.chunk_bytes(w.layout.record_len);
    crate::spool::scatter::ScatterConfig {
        mounts: t.mounts.clone(),
        scan: t.name.clone(),
        layout: t.layout,
        direct: w.direct,
        piece: w.chunk,
        mark6: Mark6Header {
            block_size: (chunk + MARK6_BLOCK_HEADER as u64).min(i32::MAX as u64) as i32,
            packet_format: mark6_packet_format(&family),
            packet_size: w.layout.record_len as i32,
        },
        read: w.layout,
        format_spec: w.format_spec,
        window: w.window,
        run: w.run,
        say: t.say.clone(),
    }
}

/// Publish the rings' descriptor under `name` (see [`crate::spool::share`]).
fn claim_share(
    name: &str,
    rcfg: &RecvConfig,
    fmt: &Arc<dyn Format>,
    rings: &[(sys::RingProducer, sys::RingConsumer)],
) -> Result<crate::spool::share::ShareGuard> {
    use crate::spool::share::{Descriptor, RingEntry, ShareGuard, SHARE_SCHEMA};
    let pid = std::process::id();
    let fd_path = |fd: i32| format!("/proc/{pid}/fd/{fd}");
    let mut entries = Vec::with_capacity(rings.len());
    for (p, _) in rings {
        let (Some(h), Some(data)) = (p.share_header(), p.memory().shared_fd()) else {
            return Err(Error::failed("a shared ring has no share header"));
        };
        // The sink writes the pcap global header first; records start after it.
        crate::spool::share::prepare(p, crate::spool::PCAP_GLOBAL_LEN as u64);
        entries.push(RingEntry { header: fd_path(h.raw_fd()), data: fd_path(data), capacity: p.capacity() });
    }
    let d = Descriptor {
        schema: SHARE_SCHEMA.into(),
        name: name.into(),
        pid,
        start_ticks: sys::ring::share::process_start_ticks(pid).unwrap_or(0),
        format: fmt.spec(),
        file_format: "pcap".into(),
        window: rcfg.ledger.window,
        listen: rcfg.listen.to_string(),
        rings: entries,
    };
    ShareGuard::create(&d).map_err(Error::invalid)
}

/// The retention thread of a recording.
struct RetentionRun {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<crate::spool::retention::RetentionReport>>,
}

impl RetentionRun {
    /// Stop it (after the writers finished: a last sweep first) and take its report.
    fn finish(mut self) -> crate::spool::retention::RetentionReport {
        self.stop.store(true, Ordering::Release);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for RetentionRun {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// How often retention looks at the disk: at 2 Gb/s, 50 MB arrive between two looks.
const RETENTION_EVERY: Duration = Duration::from_millis(200);

/// Start the retention thread of a file series in `cfg.dir`, counting into `counters`.
fn start_retention(
    cfg: &RecordConfig,
    t: &RetentionTarget,
    threads: usize,
    counters: Arc<Shared>,
) -> Result<RetentionRun> {
    use crate::spool::retention::Keeper;
    let say = t.say.clone();
    let mut keeper = Keeper::new(
        &cfg.dir,
        &cfg.prefix,
        threads,
        t.rules,
        Box::new(move |line: &str| {
            if let Some(s) = &say {
                s(line)
            }
        }),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let handle = std::thread::Builder::new()
        .name("ws-retention".into())
        .spawn(move || loop {
            let last = s2.load(Ordering::Acquire);
            keeper.sweep(sys::realtime_ns());
            counters.files_deleted.store(keeper.report.files_deleted, Ordering::Relaxed);
            counters.bytes_deleted.store(keeper.report.bytes_deleted, Ordering::Relaxed);
            if last {
                return keeper.report;
            }
            let t0 = sys::monotonic_ns();
            while !s2.load(Ordering::Acquire) && sys::monotonic_ns() - t0 < RETENTION_EVERY.as_nanos() as u64 {
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .map_err(|e| Error::failed(format!("cannot start the retention thread: {e}")))?;
    Ok(RetentionRun { stop, handle: Some(handle) })
}

/// End the writers of a capture that failed, and remove the empty files they had opened.
fn abort_writers(
    shareds: &[Arc<Shared>],
    handles: Vec<std::thread::JoinHandle<(WriterReport, Option<sys::RingConsumer>)>>,
) {
    for sh in shareds {
        sh.abort();
    }
    for h in handles {
        if let Ok((w, _)) = h.join() {
            for f in w.files.iter().filter(|f| f.records == 0) {
                let _ = std::fs::remove_file(&f.path);
                let _ = std::fs::remove_file(&f.sidecar);
            }
        }
    }
}

/// The writers' reports as one: files in thread order, counts summed, the worst write kept.
fn merge_writer_reports(mut parts: Vec<WriterReport>) -> WriterReport {
    let mut w = if parts.is_empty() { WriterReport::default() } else { parts.remove(0) };
    for p in parts {
        w.files.extend(p.files);
        w.bytes += p.bytes;
        w.records += p.records;
        w.write_s += p.write_s;
        w.write_stalls += p.write_stalls;
        w.max_write_ms = w.max_write_ms.max(p.max_write_ms);
        w.direct_io &= p.direct_io;
        for n in p.notes {
            if !w.notes.contains(&n) {
                w.notes.push(n);
            }
        }
        w.error = w.error.or(p.error);
        w.unwritten_bytes += p.unwritten_bytes;
        w.unwritten_records += p.unwritten_records;
    }
    w
}

impl RecordReport {
    /// The human summary: the receive ledger, then the recording.
    pub fn human(&self, show_gaps: usize) -> String {
        use std::fmt::Write;
        let mut o = self.capture.human(show_gaps).replacen("wirespeed recv", "wirespeed record", 1);
        for w in &self.warnings {
            let _ = writeln!(o, "  warning: {w}");
        }
        let (Some(ring), Some(w)) = (&self.ring, &self.writer) else {
            let _ = writeln!(o, "  recording: none (--sink null: network only)");
            return o;
        };
        let _ = writeln!(
            o,
            "  recording: {} in {} file(s) ({}) in {}, {} average, {}; writes: {} stalls > 50 ms, longest {:.1} ms",
            units::bytes(w.bytes),
            w.files.len(),
            match self.file_format {
                FileFormat::Raw => "raw",
                FileFormat::Pcap => "pcap",
            },
            self.dir.as_deref().unwrap_or("?"),
            units::bits(self.disk_bytes_per_s * 8.0),
            if w.direct_io { "O_DIRECT" } else { "buffered" },
            w.write_stalls,
            w.max_write_ms
        );
        let _ = writeln!(
            o,
            "  ring: {} {}, {}, ready in {:.2} s, high-water {} ({:.1}%), ring-full drops {}",
            units::bytes(ring.capacity),
            if ring.locked { "locked" } else { "not locked" },
            ring.pages.describe(),
            ring.ready_s,
            units::bytes(ring.high_water),
            ring.high_water_fraction * 100.0,
            units::thousands(ring.ring_full)
        );
        for t in &self.threads {
            let _ = writeln!(
                o,
                "    thread {}: files {}-*, ring high-water {} of {} ({:.1}%), {} written in {} file(s)",
                t.thread,
                t.prefix,
                units::bytes(t.ring_high_water),
                units::bytes(t.ring_capacity),
                t.ring_high_water as f64 * 100.0 / t.ring_capacity.max(1) as f64,
                units::bytes(t.bytes),
                t.files
            );
        }
        for f in w.files.iter().take(10) {
            let _ = writeln!(
                o,
                "    {}  {} records, {}, lost inside {}{}",
                f.path,
                units::thousands(f.records),
                units::bytes(f.bytes),
                units::thousands(f.lost),
                if f.complete { String::new() } else { format!("  (cut short: {})", f.ended_by) }
            );
        }
        if w.files.len() > 10 {
            let _ = writeln!(o, "    ... {} more (--json lists them)", w.files.len() - 10);
        }
        for n in &w.notes {
            let _ = writeln!(o, "  note: {n}");
        }
        if let Some(e) = &w.error {
            let _ = writeln!(
                o,
                "  => {e}: recording stopped; every file above is valid up to its last whole record; {} records ({}) received into RAM never reached the disk (the last file's sidecar counts them as unwritten)",
                units::thousands(w.unwritten_records),
                units::bytes(w.unwritten_bytes)
            );
        }
        o
    }
}
