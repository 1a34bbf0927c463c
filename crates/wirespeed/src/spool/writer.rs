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

use super::{
    file_name, part_name, pcap_global_header, pcap_record_header, reasons, sidecar_name, sidecar_part_name, utc_iso,
    FileFormat, FileLedger, ReadLayout, RecordWalker, Sidecar, PART_SUFFIX, SIDECAR_SCHEMA,
};
use crate::rx::Sink;
use crate::sys::{self, RingConsumer, RingProducer, RING_ALIGN};
use crate::wire::{Invalid, PacketInfo};
use serde::Serialize;
use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ALIGN: u64 = RING_ALIGN as u64;
const BREAKS: usize = 256;

/// Mark5 fill pattern words (0x11223344, little-endian), written where part of a frame is missing.
static FILL_PATTERN: [u8; 4096] = {
    let mut b = [0u8; 4096];
    let mut i = 0;
    while i < 4096 {
        b[i] = 0x44;
        b[i + 1] = 0x33;
        b[i + 2] = 0x22;
        b[i + 3] = 0x11;
        i += 4;
    }
    b
};

/// Why a file ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Cut {
    /// It reached --file-size.
    Size = 1,
    /// A wall-clock boundary of --rotate passed.
    Time = 2,
}

/// A file boundary, produced by the capture side.
#[derive(Clone, Copy, Debug)]
struct Break {
    end: u64,
    next_start: u64,
    cut: u8,
    unix_ns: u64,
    ring_full: u64,
    not_written: u64,
    socket_drops: u64,
}

#[derive(Default)]
struct BreakSlot {
    end: AtomicU64,
    next_start: AtomicU64,
    cut: AtomicU64,
    unix_ns: AtomicU64,
    ring_full: AtomicU64,
    not_written: AtomicU64,
    socket_drops: AtomicU64,
}

/// State shared by the sink, the writer and whoever shows progress. Atomics only.
pub struct Shared {
    slots: [BreakSlot; BREAKS],
    head: AtomicU64,
    tail: AtomicU64,
    done: AtomicBool,
    final_pos: AtomicU64,
    final_counts: BreakSlot,
    /// Why the writer stopped early: 0 no, 1 disk full, 2 write error.
    stop: AtomicU8,
    /// Bytes written to disk so far.
    pub written: AtomicU64,
    /// Bytes in the ring not yet written (as of the last receive batch).
    pub ring_fill: AtomicU64,
    /// Highest ring fill seen, bytes.
    pub high_water: AtomicU64,
    /// Files completed so far.
    pub files_done: AtomicU64,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            slots: std::array::from_fn(|_| BreakSlot::default()),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            done: AtomicBool::new(false),
            final_pos: AtomicU64::new(0),
            final_counts: BreakSlot::default(),
            stop: AtomicU8::new(0),
            written: AtomicU64::new(0),
            ring_fill: AtomicU64::new(0),
            high_water: AtomicU64::new(0),
            files_done: AtomicU64::new(0),
        }
    }
}

impl Shared {
    fn push(&self, b: Break) -> bool {
        let h = self.head.load(Ordering::Relaxed);
        if h - self.tail.load(Ordering::Acquire) >= BREAKS as u64 {
            return false;
        }
        let s = &self.slots[(h % BREAKS as u64) as usize];
        s.end.store(b.end, Ordering::Relaxed);
        s.next_start.store(b.next_start, Ordering::Relaxed);
        s.cut.store(b.cut as u64, Ordering::Relaxed);
        s.unix_ns.store(b.unix_ns, Ordering::Relaxed);
        s.ring_full.store(b.ring_full, Ordering::Relaxed);
        s.not_written.store(b.not_written, Ordering::Relaxed);
        s.socket_drops.store(b.socket_drops, Ordering::Relaxed);
        self.head.store(h + 1, Ordering::Release);
        true
    }

    fn peek(&self) -> Option<Break> {
        let t = self.tail.load(Ordering::Relaxed);
        if self.head.load(Ordering::Acquire) == t {
            return None;
        }
        let s = &self.slots[(t % BREAKS as u64) as usize];
        Some(Break {
            end: s.end.load(Ordering::Relaxed),
            next_start: s.next_start.load(Ordering::Relaxed),
            cut: s.cut.load(Ordering::Relaxed) as u8,
            unix_ns: s.unix_ns.load(Ordering::Relaxed),
            ring_full: s.ring_full.load(Ordering::Relaxed),
            not_written: s.not_written.load(Ordering::Relaxed),
            socket_drops: s.socket_drops.load(Ordering::Relaxed),
        })
    }

    fn pop(&self) {
        self.tail.fetch_add(1, Ordering::Release);
    }

    /// End the run from outside the capture thread (it failed before finishing the sink).
    pub fn abort(&self) {
        self.final_counts.unix_ns.store(sys::realtime_ns(), Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }

    /// Why the writer gave up, if it did.
    pub fn stop_reason(&self) -> Option<&'static str> {
        match self.stop.load(Ordering::Relaxed) {
            0 => None,
            1 => Some("disk full"),
            _ => Some("write error"),
        }
    }
}

/// How the sink cuts the record stream into files.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rotation {
    /// Start a new file before one would exceed this many bytes.
    pub max_bytes: Option<u64>,
    /// Start a new file at every multiple of this period of wall-clock time (UTC).
    pub period: Option<Duration>,
}

/// The capture-thread end: lays each kept datagram into the ring in its file layout.
pub struct RingSink {
    ring: RingProducer,
    shared: Arc<Shared>,
    file_format: FileFormat,
    fixed_len: usize,
    record_len: u64,
    /// Datagrams per file record (2 for Mark5B halves), and which part comes next.
    parts: u64,
    next_part: u64,
    part_of: Option<Arc<dyn super::Recordable + Send + Sync>>,
    strip: usize,
    dst: SocketAddrV4,
    rt_offset: u64,
    rotation: Rotation,
    file_start: u64,
    next_time_cut: u64,
    ring_full: u64,
    not_written: u64,
    socket_drops: u64,
    high_water: u64,
    now: u64,
}

impl RingSink {
    /// A sink writing `layout` records of datagrams of the stream format `fmt` (raw files: its
    /// fixed length less its transport prefix), sent to `dst` (pcap headers name it).
    pub fn new(
        ring: RingProducer,
        shared: Arc<Shared>,
        layout: &ReadLayout,
        fmt: &Arc<dyn crate::wire::Format>,
        dst: SocketAddr,
        rotation: Rotation,
    ) -> Self {
        let dst = match dst {
            SocketAddr::V4(a) => a,
            SocketAddr::V6(a) => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, a.port()),
        };
        let mono = sys::monotonic_ns();
        let unix = sys::realtime_ns();
        let (fixed_len, strip) = (fmt.fixed_len().unwrap_or(0), super::recordable(&**fmt).raw_strip());
        // Datagrams per file record: more than one for Mark5B halves recorded as whole frames.
        let piece = fixed_len.saturating_sub(strip).max(1) as u64;
        let record_len = layout.record_len as u64;
        let parts = if layout.file_format == FileFormat::Raw && record_len > piece && record_len % piece == 0 {
            record_len / piece
        } else {
            1
        };
        let mut s = RingSink {
            ring,
            shared,
            file_format: layout.file_format,
            fixed_len,
            record_len,
            parts,
            next_part: 0,
            part_of: (parts > 1).then(|| super::recordable::recordable_owned(&**fmt)),
            strip,
            dst,
            rt_offset: unix.wrapping_sub(mono),
            rotation,
            file_start: 0,
            next_time_cut: 0,
            ring_full: 0,
            not_written: 0,
            socket_drops: 0,
            high_water: 0,
            now: mono,
        };
        s.next_time_cut = s.next_cut_after(unix);
        if s.file_format == FileFormat::Pcap {
            let written = s.ring.write(&[&pcap_global_header()]);
            debug_assert!(written, "an empty ring has room for a header");
        }
        s
    }

    fn next_cut_after(&self, unix_ns: u64) -> u64 {
        match self.rotation.period {
            Some(p) if !p.is_zero() => {
                let p = p.as_nanos() as u64;
                (unix_ns / p + 1) * p
            }
            _ => u64::MAX,
        }
    }

    fn cut(&mut self, cut: Cut, unix_ns: u64) -> bool {
        let end = self.ring.position();
        let next = end.div_ceil(ALIGN) * ALIGN;
        let header = if self.file_format == FileFormat::Pcap { super::PCAP_GLOBAL_LEN as u64 } else { 0 };
        if end - self.file_start <= header {
            return true; // nothing in this file yet: keep it rather than leave an empty one
        }
        if self.file_format == FileFormat::Raw && (end - self.file_start) % self.record_len != 0 {
            return false; // inside a record made of several datagrams: cut after it
        }
        if !self.ring.room(next - end + header) {
            return false; // try again at the next record
        }
        let b = Break {
            end,
            next_start: next,
            cut: cut as u8,
            unix_ns,
            ring_full: self.ring_full,
            not_written: self.not_written,
            socket_drops: self.socket_drops,
        };
        if !self.shared.push(b) {
            return false;
        }
        self.ring.align_to(ALIGN);
        if header > 0 {
            self.ring.write(&[&pcap_global_header()]);
        }
        self.file_start = next;
        true
    }

    /// A datagram that is one part of a file record (a Mark5B half): keep records whole when a
    /// part is lost, so that the file stays frame-aligned for VLBI software. A record whose
    /// later parts are missing is completed with the Mark5 fill pattern (0x11223344 words,
    /// which readers recognise as no data); a part whose record's first part is missing is
    /// left out (counted as not written).
    fn accept_part(&mut self, datagram: &[u8], rec: &[u8]) -> bool {
        let part = match self.part_of.as_ref().and_then(|f| f.raw_part(datagram)) {
            Some(p) => p.min(self.parts - 1),
            None => self.next_part, // the format cannot tell: keep it where it would go
        };
        if part != self.next_part {
            if part > self.next_part && self.next_part == 0 {
                self.not_written += 1; // the record's head is missing: no use without it
                return true;
            }
            // Complete the open record with fill, then place this part.
            let missing = (self.parts - self.next_part) as usize * rec.len();
            if !self.ring.room((missing + rec.len()) as u64) {
                return false;
            }
            let mut left = missing;
            while left > 0 {
                let n = left.min(FILL_PATTERN.len());
                self.ring.write(&[&FILL_PATTERN[..n]]);
                left -= n;
            }
            self.next_part = 0;
            if part != 0 {
                self.not_written += 1;
                return true;
            }
        }
        if part == 0 {
            self.size_cut(self.record_len as usize);
        }
        if !self.ring.write(&[rec]) {
            return false;
        }
        self.next_part = (part + 1) % self.parts;
        true
    }

    #[inline]
    fn size_cut(&mut self, rec: usize) {
        if let Some(max) = self.rotation.max_bytes {
            let used = self.ring.position() - self.file_start;
            let min = if self.file_format == FileFormat::Pcap { super::PCAP_GLOBAL_LEN as u64 } else { 0 };
            if used > min && used + rec as u64 > max {
                let unix = self.now.wrapping_add(self.rt_offset);
                self.cut(Cut::Size, unix);
            }
        }
    }
}

impl Sink for RingSink {
    #[inline]
    fn accept(
        &mut self,
        data: &[u8],
        src: Option<SocketAddr>,
        _info: &std::result::Result<PacketInfo, Invalid>,
        now_ns: u64,
    ) -> bool {
        self.now = now_ns;
        let ok = match self.file_format {
            FileFormat::Raw => {
                if data.len() != self.fixed_len {
                    self.not_written += 1;
                    return true;
                }
                let rec = &data[self.strip..];
                if self.parts > 1 {
                    return self.accept_part(data, rec);
                }
                self.size_cut(rec.len());
                self.ring.write(&[rec])
            }
            FileFormat::Pcap => {
                let Some(SocketAddr::V4(src)) = src else {
                    self.not_written += 1;
                    return true;
                };
                let rec = super::PCAP_RECORD_OVERHEAD + data.len();
                self.size_cut(rec);
                let h = pcap_record_header(now_ns.wrapping_add(self.rt_offset), src, self.dst, data.len());
                self.ring.write(&[&h, data])
            }
        };
        if !ok {
            self.ring_full += 1;
        }
        ok
    }

    #[inline]
    fn end_batch(&mut self, now_ns: u64, socket_drops: Option<u64>) {
        self.now = now_ns;
        self.socket_drops = socket_drops.unwrap_or(0);
        let unix = now_ns.wrapping_add(self.rt_offset);
        if unix >= self.next_time_cut && self.cut(Cut::Time, self.next_time_cut) {
            self.next_time_cut = self.next_cut_after(unix);
        }
        self.ring.publish();
        let fill = self.ring.fill();
        if fill > self.high_water {
            self.high_water = fill;
            self.shared.high_water.store(fill, Ordering::Relaxed);
        }
        self.shared.ring_fill.store(fill, Ordering::Relaxed);
    }

    #[inline]
    fn must_stop(&self) -> Option<&'static str> {
        self.shared.stop_reason()
    }

    fn finish(&mut self) {
        self.ring.publish();
        let f = &self.shared.final_counts;
        f.ring_full.store(self.ring_full, Ordering::Relaxed);
        f.not_written.store(self.not_written, Ordering::Relaxed);
        f.socket_drops.store(self.socket_drops, Ordering::Relaxed);
        f.unix_ns.store(sys::realtime_ns(), Ordering::Relaxed);
        self.shared.final_pos.store(self.ring.position(), Ordering::Relaxed);
        self.shared.done.store(true, Ordering::Release);
    }
}

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
            walker: RecordWalker::new(layout.clone()),
            ledger: FileLedger::new(layout.reader, self.cfg.window),
            base,
            stalls: 0,
            max_write_ns: 0,
        })
    }

    fn sidecar(&self, name: &str, opened_ns: u64, ended_by: &str, complete: bool) -> Sidecar {
        Sidecar {
            schema: SIDECAR_SCHEMA.into(),
            file: name.into(),
            file_format: self.cfg.layout.file_format,
            format: self.cfg.format_spec.clone(),
            reader_format: self.cfg.layout.reader.spec(),
            record_len: (self.cfg.layout.file_format == FileFormat::Raw).then_some(self.cfg.layout.record_len),
            bytes: 0,
            records: 0,
            opened_utc: utc_iso(opened_ns),
            closed_utc: String::new(),
            ended_by: ended_by.into(),
            complete,
            streams: Vec::new(),
            total: Default::default(),
            invalid_by_reason: Default::default(),
            unreadable: 0,
            ring_full: 0,
            not_written: 0,
            not_written_wrong_length: 0,
            unwritten: 0,
            kernel_socket_drops: None,
            write_stalls: 0,
            max_write_ms: 0.0,
            direct_io: self.report.direct_io,
            writer: format!("wirespeed {}", env!("CARGO_PKG_VERSION")),
        }
    }

    /// Write `[f.start + f.written, upto)` from the ring; with `all`, also the unaligned tail.
    /// Each piece written is then read back into the file's ledger.
    fn write_upto(&mut self, f: &mut OpenFile, upto: u64, all: bool) -> io::Result<()> {
        loop {
            let pos = f.start + f.written;
            if pos >= upto {
                return Ok(());
            }
            let slice = self.ring.slice(pos, (upto - pos).min(self.cfg.chunk as u64) as usize);
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
            if f.written + n as u64 > f.reserved && f.reserved > 0 {
                // Reserve the next step ahead (open-ended files); failure just means no reservation.
                if sys::preallocate(f.file.as_raw_fd(), f.reserved, self.cfg.prealloc).is_ok() {
                    f.reserved += self.cfg.prealloc;
                }
            }
            let t = sys::monotonic_ns();
            f.file.write_all_at(&slice[..n], f.written)?;
            let dt = sys::monotonic_ns() - t;
            self.report.write_s += dt as f64 / 1e9;
            if dt > STALL_NS {
                f.stalls += 1;
            }
            f.max_write_ns = f.max_write_ns.max(dt);
            f.walker.feed(&slice[..n], &mut f.ledger);
            f.written += n as u64;
            self.shared.written.fetch_add(n as u64, Ordering::Relaxed);
            // Release whole records only: after a failed write, the records not on disk are
            // still in the ring to be counted.
            self.ring.release(f.start + f.walker.complete_bytes.min(f.written));
        }
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
                return self.report;
            }
            if file.written == before {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    }

    /// Stop writing after `e`: tell the capture thread, keep the current file valid up to its
    /// last whole record, and account for what stays unwritten.
    fn fail(mut self, e: io::Error, file: Option<OpenFile>) -> WriterReport {
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
        self.report
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
            while pos < end {
                let s = self.ring.slice(pos, (end - pos) as usize);
                if s.is_empty() {
                    break;
                }
                walker.feed(s, &mut ledger);
                pos += s.len() as u64;
            }
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

    #[test]
    fn sink_counts_ring_full_and_cuts_files_by_size() {
        let fmt: Arc<dyn Format> = Arc::new(Counter::new(1024, ByteOrder::Be).unwrap());
        let layout = ReadLayout::for_stream(&fmt, FileFormat::Raw).unwrap();
        let (prod, mut cons) = sys::byte_ring(16384, false).unwrap();
        let shared = Arc::new(Shared::default());
        let rot = Rotation { max_bytes: Some(4096), period: None };
        let mut sink = RingSink::new(prod, shared.clone(), &layout, &fmt, "127.0.0.1:9".parse().unwrap(), rot);
        let mut buf = [0u8; 1024];
        let ok = Ok(PacketInfo { stream: 0, seq: 0 });
        let mut kept = 0;
        for seq in 0..20u64 {
            fmt.emit(0, seq, &mut buf);
            if sink.accept(&buf, None, &ok, 0) {
                kept += 1;
            }
        }
        // 16 KiB hold 16 records; nothing is released, so the rest are refused and counted.
        assert_eq!(kept, 16);
        assert_eq!(sink.ring_full, 4);
        // A datagram of the wrong length is not written to a raw file, and not ring-full.
        assert!(sink.accept(&buf[..512], None, &ok, 0));
        assert_eq!(sink.not_written, 1);
        // Files of at most 4 KiB: a break after every 4 records, each next file aligned.
        let b = shared.peek().expect("a file break");
        assert_eq!((b.end, b.next_start, b.cut), (4096, 4096, Cut::Size as u8));
        sink.end_batch(0, Some(7));
        assert_eq!(cons.slice(0, usize::MAX).len(), 16384);
        cons.release(4096);
        fmt.emit(0, 99, &mut buf);
        assert!(sink.accept(&buf, None, &ok, 0), "room again after the writer released a file");
    }
}
