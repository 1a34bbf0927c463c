//! The writer of a scan scattered over mount points ([`scan`](super::scan) has the layouts):
//! one disk thread per mount point, and a coordinator that owns the ring.
//!
//! The capture thread's [`RingSink`](super::sink::RingSink) cuts the record stream into chunks
//! of whole frames (its size cuts), as it cuts files. The coordinator numbers the chunks in
//! ring order (one sequence over all disks) and hands each, pinned in the ring
//! ([`RingConsumer::pin`]), to an idle disk thread, which writes it (FlexBuff: a chunk file
//! with O_DIRECT; Mark6: a block appended to its disk's file), reads its records back into the
//! chunk's own ledger and writes its sidecar. The ring is released only up to the first chunk
//! not yet safely on a disk, so when a disk fails (I/O error, full, read-only, gone) the chunk it
//! held is still in RAM: the disk is dropped with one line and the chunk goes to another disk.
//! Capture never waits for any of this; it loses nothing while the disks left can take the
//! rate and the ring absorbs the moment of the failure.
//!
//! Which disk: the idle ones in turn (a first-in first-out queue of free disks, as jive5ab
//! keeps), so a slow disk, idle less often, gets fewer chunks by itself; a disk with less room
//! than a chunk and its sidecar gets none, and one with room for fewer than
//! [`LOW_ROOM_CHUNKS`] chunks only when no roomier disk is idle, so a nearly full disk is never
//! hunted for space while the scan waits (jive5ab issue 30).
//!
//! Chunks and their sidecars are created new (never replacing a file), and only what this
//! writer created is removed: the partial chunk of a failed write.

use super::handoff::{Break, Shared};
use super::scan::{self, Mark6Header, ScanLayout};
use super::writer::{FileSummary, WriterReport};
use super::{BlockEntry, FileLedger, ReadLayout, RecordWalker, RunIdentity, ScanPlace, Sidecar};
use crate::sys::{self, Pinned, RingConsumer, RING_ALIGN};
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// A disk with room for fewer chunks than this is used only when no roomier disk is idle.
pub const LOW_ROOM_CHUNKS: u64 = 4;
/// Room kept on a disk beyond a chunk: its sidecar and the filesystem's own needs.
const RESERVE: u64 = 4 << 20;
const STALL_NS: u64 = 50_000_000;

/// Someone told, in one line each, when a disk is dropped or full (the recorder's stderr).
pub type Say = Arc<dyn Fn(&str) + Send + Sync>;

/// Where and how a scan is written.
#[derive(Clone)]
pub struct ScatterConfig {
    /// The mount points (directories), each written by its own thread.
    pub mounts: Vec<PathBuf>,
    /// The scan's name (checked by [`scan::validate_scan_name`]).
    pub scan: String,
    /// FlexBuff or Mark6.
    pub layout: ScanLayout,
    /// O_DIRECT for FlexBuff chunks where the filesystem allows it.
    pub direct: bool,
    /// Bytes per write call.
    pub piece: usize,
    /// How records are read back for each chunk's ledger.
    pub read: ReadLayout,
    /// The stream's format spec (for sidecars).
    pub format_spec: String,
    /// Mark6 file header fields (block size, packet format and size).
    pub mark6: Mark6Header,
    /// Reorder window of the chunk ledgers.
    pub window: u64,
    /// The recording run.
    pub run: RunIdentity,
    /// Told about dropped and full disks as it happens.
    pub say: Option<Say>,
}

impl std::fmt::Debug for ScatterConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScatterConfig").field("mounts", &self.mounts).field("scan", &self.scan).finish()
    }
}

/// Check mount points before anything is received: each exists, is a directory and takes
/// files, and none holds the scan already (a scan is never written over).
pub fn check_mounts(mounts: &[PathBuf], scan_name: &str) -> crate::Result<()> {
    scan::validate_scan_name(scan_name).map_err(crate::Error::invalid)?;
    if mounts.is_empty() {
        return Err(crate::Error::invalid("no mount points: give -o once per disk (or a glob such as '/mnt/disk*')"));
    }
    for m in mounts {
        crate::record::check_dir(m)?;
        let there = m.join(scan_name);
        if std::fs::symlink_metadata(&there).is_ok() {
            return Err(crate::Error::invalid(format!(
                "scan {scan_name} exists already on {} ({}): a scan is never written over; choose another scan name",
                m.display(),
                there.display()
            )));
        }
    }
    Ok(())
}

/// Counts the sink had passed at a chunk's start and end (its sidecar gets the difference).
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    unix_ns: u64,
    ring_full: u64,
    not_written: u64,
    socket_drops: u64,
}

impl Counts {
    fn of(b: &Break) -> Counts {
        Counts { unix_ns: b.unix_ns, ring_full: b.ring_full, not_written: b.not_written, socket_drops: b.socket_drops }
    }
}

/// One chunk of the scan: ring bytes `[start, end)`.
#[derive(Clone, Copy, Debug)]
struct Job {
    number: u64,
    start: u64,
    end: u64,
    base: Counts,
    last: Counts,
    ended_by: &'static str,
}

enum ToDisk {
    Chunk(Job, Pinned),
    /// The scan ended: close the Mark6 file and write its sidecar.
    Finish,
}

enum FromDisk {
    Done { disk: usize, number: u64, result: io::Result<FileSummary>, bytes: u64, write_ns: u64, stats: WriteCounts },
    Finished { disk: usize, result: io::Result<Option<FileSummary>> },
}

#[derive(Clone, Copy, Debug, Default)]
struct WriteCounts {
    writes: u64,
    stalls: u64,
    max_ns: u64,
    sum_ns: u64,
}

struct Disk {
    path: PathBuf,
    tx: Option<mpsc::Sender<ToDisk>>,
    busy: bool,
    /// Why it is no longer used.
    out: Option<String>,
    /// When it last became idle (its place in the queue of free disks).
    idle_since: u64,
    chunks: u64,
    bytes: u64,
}

struct Pending {
    job: Job,
    disk: Option<usize>,
    done: bool,
}

/// The coordinator of a scattered scan; [`Scatter::run`] runs it on the writer thread.
pub struct Scatter {
    ring: RingConsumer,
    shared: Arc<Shared>,
    cfg: ScatterConfig,
    report: WriterReport,
}

impl Scatter {
    /// A scattered writer draining `ring`.
    pub fn new(ring: RingConsumer, shared: Arc<Shared>, cfg: ScatterConfig) -> Self {
        Scatter { ring, shared, cfg, report: WriterReport::default() }
    }

    fn say(&self, line: &str) {
        if let Some(s) = &self.cfg.say {
            s(line);
        }
    }

    /// Run until the sink has finished and every chunk is on a disk, or no disk is left.
    pub fn run(self) -> WriterReport {
        self.drain().0
    }

    /// As [`Scatter::run`], giving the ring back for the next scan (a station's ring is made
    /// once). The next scan's sink starts where this one's ended.
    pub fn drain(mut self) -> (WriterReport, RingConsumer) {
        let report = self.write_scan();
        (report, self.ring)
    }

    fn write_scan(&mut self) -> WriterReport {
        let cpu0 = sys::thread_cpu_ns();
        let (done_tx, done_rx) = mpsc::channel::<FromDisk>();
        let mut disks: Vec<Disk> = Vec::with_capacity(self.cfg.mounts.len());
        let mut handles = Vec::new();
        for (i, m) in self.cfg.mounts.iter().enumerate() {
            let (tx, rx) = mpsc::channel::<ToDisk>();
            let worker = DiskWriter::new(i, m.clone(), &self.cfg, self.shared.clone());
            let out = done_tx.clone();
            let spawned = std::thread::Builder::new().name(format!("ws-disk-{i}")).spawn(move || worker.serve(rx, out));
            let (tx, why) = match spawned {
                Ok(h) => {
                    handles.push(h);
                    (Some(tx), None)
                }
                Err(e) => (None, Some(format!("no writer thread: {e}"))),
            };
            disks.push(Disk { path: m.clone(), tx, busy: false, out: why, idle_since: i as u64, chunks: 0, bytes: 0 });
        }
        drop(done_tx);
        let mut jobs: VecDeque<Pending> = VecDeque::new();
        let mut cur_start = self.ring.released();
        // The first chunk opens now (later ones when the one before was cut).
        let mut base = Counts { unix_ns: sys::realtime_ns(), ..Counts::default() };
        let mut next_number = 0u64;
        let mut final_cut = false;
        let mut turn = disks.len() as u64;
        let mut summaries: Vec<(u64, FileSummary)> = Vec::new();
        let mut cpu_disks = 0u64;
        loop {
            let mut moved = false;
            let done = self.shared.done.load(Ordering::Acquire);
            let produced = self.ring.produced();
            // New chunks: every boundary the sink has passed.
            while let Some(b) = self.shared.peek().filter(|b| b.end <= produced) {
                if b.end > cur_start {
                    let by = if b.cut == super::handoff::Cut::Time as u8 { "time" } else { "size" };
                    jobs.push_back(Pending {
                        job: Job {
                            number: next_number,
                            start: cur_start,
                            end: b.end,
                            base,
                            last: Counts::of(&b),
                            ended_by: by,
                        },
                        disk: None,
                        done: false,
                    });
                    next_number += 1;
                }
                base = Counts::of(&b);
                cur_start = b.next_start;
                self.shared.pop();
                moved = true;
            }
            if done && !final_cut && self.shared.peek().is_none() {
                let end = self.shared.final_pos.load(Ordering::Relaxed);
                let f = &self.shared.final_counts;
                let last = Counts {
                    unix_ns: f.unix_ns.load(Ordering::Relaxed),
                    ring_full: f.ring_full.load(Ordering::Relaxed),
                    not_written: f.not_written.load(Ordering::Relaxed),
                    socket_drops: f.socket_drops.load(Ordering::Relaxed),
                };
                if end > cur_start {
                    let job = Job { number: next_number, start: cur_start, end, base, last, ended_by: "end of run" };
                    jobs.push_back(Pending { job, disk: None, done: false });
                    next_number += 1;
                    cur_start = end;
                }
                final_cut = true;
                moved = true;
            }
            // What the disks finished.
            while let Ok(msg) = done_rx.try_recv() {
                moved = true;
                let FromDisk::Done { disk, number, result, bytes, write_ns, stats } = msg else { continue };
                let d = &mut disks[disk];
                d.busy = false;
                d.idle_since = turn;
                turn += 1;
                self.report.writes += stats.writes;
                self.report.write_stalls += stats.stalls;
                self.report.write_s += stats.sum_ns as f64 / 1e9;
                self.report.max_write_ms = self.report.max_write_ms.max(stats.max_ns as f64 / 1e6);
                let Some(p) = jobs.iter_mut().find(|p| p.job.number == number) else { continue };
                match result {
                    Ok(s) => {
                        p.done = true;
                        d.chunks += 1;
                        d.bytes += bytes;
                        cpu_disks += write_ns;
                        self.report.bytes += s.bytes;
                        self.report.records += s.records;
                        self.shared.written.fetch_add(bytes, Ordering::Relaxed);
                        self.shared.files_done.fetch_add(1, Ordering::Relaxed);
                        if self.cfg.layout == ScanLayout::FlexBuff {
                            summaries.push((number, s));
                        }
                    }
                    Err(e) => {
                        p.disk = None;
                        let why = disk_failure(&e);
                        // The writer removes its partial chunk; on a disk that turned read-only
                        // it cannot, and a reader would find the chunk twice.
                        let left = d.path.join(&self.cfg.scan).join(scan::chunk_name(&self.cfg.scan, number));
                        if self.cfg.layout == ScanLayout::FlexBuff && left.exists() {
                            let line = format!(
                                "wirespeed record: a partial copy of chunk {number} is left on {} ({why}, so it cannot be removed): remove {} before jive5ab reads the scan; wirespeed's readers pass it over",
                                d.path.display(),
                                left.display()
                            );
                            self.report.notes.push(line.clone());
                            self.say(&line);
                        }
                        let line = format!(
                            "wirespeed record: dropping disk {} ({why}); chunk {number} goes to another disk from RAM",
                            d.path.display()
                        );
                        d.out = Some(why);
                        self.report.notes.push(line.clone());
                        self.say(&line);
                    }
                }
            }
            // Hand waiting chunks to idle disks, oldest chunk first.
            for p in jobs.iter_mut() {
                if p.done || p.disk.is_some() {
                    continue;
                }
                let len = p.job.end - p.job.start;
                let Some(d) = self.pick(&mut disks, len) else { break };
                let Some(pin) = self.ring.pin(p.job.start, len) else { break };
                let job = p.job;
                let sent = disks[d].tx.as_ref().is_some_and(|tx| tx.send(ToDisk::Chunk(job, pin)).is_ok());
                if sent {
                    disks[d].busy = true;
                    p.disk = Some(d);
                    moved = true;
                } else {
                    disks[d].out = Some("its writer thread ended".into());
                    disks[d].tx = None;
                }
            }
            // Release the ring up to the first chunk not yet on a disk.
            while jobs.front().is_some_and(|p| p.done) {
                jobs.pop_front();
            }
            let upto = jobs.front().map_or(cur_start, |p| p.job.start).min(produced);
            if upto > self.ring.released() {
                self.ring.release(upto);
            }
            if final_cut && jobs.is_empty() {
                break;
            }
            if disks.iter().all(|d| d.out.is_some()) {
                return self.no_disk_left(disks, jobs, handles, done_rx, summaries, cpu0, cur_start, final_cut);
            }
            if !moved {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        self.close_disks(disks, summaries, handles, done_rx, cpu0, cpu_disks)
    }

    /// The idle disk to write a chunk of `len` bytes to, if one is idle and has room.
    fn pick(&mut self, disks: &mut [Disk], len: u64) -> Option<usize> {
        let mut best: Option<(bool, u64, usize)> = None;
        for (i, d) in disks.iter_mut().enumerate() {
            if d.out.is_some() || d.busy {
                continue;
            }
            let free = sys::free_space(&d.path).unwrap_or(0);
            if free < len + RESERVE {
                let line = format!(
                    "wirespeed record: disk {} is full ({} free, a chunk needs {}): no more chunks go there",
                    d.path.display(),
                    crate::units::bytes(free),
                    crate::units::bytes(len + RESERVE)
                );
                d.out = Some("full".into());
                self.report.notes.push(line.clone());
                self.say(&line);
                continue;
            }
            let low = free < LOW_ROOM_CHUNKS * (len + RESERVE);
            let key = (low, d.idle_since, i);
            if best.map_or(true, |b| key < b) {
                best = Some(key);
            }
        }
        best.map(|b| b.2)
    }

    /// Every disk failed: stop the capture as a full disk or write error does, and count what
    /// never reached a disk.
    #[allow(clippy::too_many_arguments)]
    fn no_disk_left(
        &mut self,
        disks: Vec<Disk>,
        jobs: VecDeque<Pending>,
        handles: Vec<std::thread::JoinHandle<u64>>,
        done_rx: mpsc::Receiver<FromDisk>,
        summaries: Vec<(u64, FileSummary)>,
        cpu0: u64,
        mut cur_start: u64,
        final_cut: bool,
    ) -> WriterReport {
        let all_full = disks.iter().all(|d| d.out.as_deref() == Some("full"));
        self.shared.stop.store(if all_full { 1 } else { 2 }, Ordering::Relaxed);
        let reasons: Vec<String> =
            disks.iter().map(|d| format!("{}: {}", d.path.display(), d.out.as_deref().unwrap_or("?"))).collect();
        self.report.error = Some(format!("no disk of the scan is left ({})", reasons.join("; ")));
        while !self.shared.done.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Everything not on a disk, chunk by chunk (never the pads between chunks, nor a chunk a
        // disk did take): the chunks waiting, those cut since, and the last one.
        let mut ranges: Vec<(u64, u64)> = jobs.iter().filter(|p| !p.done).map(|p| (p.job.start, p.job.end)).collect();
        while let Some(b) = self.shared.peek() {
            if b.end > cur_start {
                ranges.push((cur_start, b.end));
            }
            cur_start = b.next_start;
            self.shared.pop();
        }
        let end = self.shared.final_pos.load(Ordering::Relaxed);
        if !final_cut && end > cur_start {
            ranges.push((cur_start, end));
        }
        let mut ledger = FileLedger::new(self.cfg.read.reader.clone(), self.cfg.window);
        let mut bytes = 0;
        for (from, to) in ranges {
            let mut walker = RecordWalker::new(self.cfg.read.clone());
            super::walk_range(|at, n| self.ring.slice(at, n), from, to, &mut walker, &mut ledger);
            bytes += to - from;
        }
        self.report.unwritten_records = ledger.records;
        self.report.unwritten_bytes = bytes;
        self.close_disks(disks, summaries, handles, done_rx, cpu0, 0)
    }

    /// Tell every disk thread the scan ended (Mark6: each closes its file and writes its
    /// sidecar; a disk that failed has blocks worth keeping before its failure), wait for them,
    /// and make the report.
    fn close_disks(
        &mut self,
        mut disks: Vec<Disk>,
        mut summaries: Vec<(u64, FileSummary)>,
        handles: Vec<std::thread::JoinHandle<u64>>,
        done_rx: mpsc::Receiver<FromDisk>,
        cpu0: u64,
        mut cpu_disks: u64,
    ) -> WriterReport {
        for d in disks.iter_mut() {
            if let Some(tx) = d.tx.take() {
                let _ = tx.send(ToDisk::Finish);
            }
        }
        for msg in done_rx.iter() {
            if let FromDisk::Finished { disk, result } = msg {
                match result {
                    Ok(Some(s)) => summaries.push((u64::MAX - (disks.len() - disk) as u64, s)),
                    Ok(None) => {}
                    Err(e) => self
                        .report
                        .notes
                        .push(format!("could not finish the Mark6 file on {}: {e}", disks[disk].path.display())),
                }
            }
        }
        for h in handles {
            if let Ok(ns) = h.join() {
                cpu_disks += ns;
            }
        }
        self.finish(disks, summaries, cpu0, cpu_disks)
    }

    fn finish(
        &mut self,
        disks: Vec<Disk>,
        mut summaries: Vec<(u64, FileSummary)>,
        cpu0: u64,
        cpu_disks: u64,
    ) -> WriterReport {
        summaries.sort_by_key(|(n, _)| *n);
        self.report.files = summaries.into_iter().map(|(_, s)| s).collect();
        self.report.write_engine = "io_uring per disk".into();
        self.report.write_depth = self.cfg.mounts.len();
        self.report.direct_io = self.cfg.direct && self.cfg.layout == ScanLayout::FlexBuff;
        for d in &disks {
            self.report.notes.push(format!(
                "disk {}: {} chunk(s), {}{}",
                d.path.display(),
                d.chunks,
                crate::units::bytes(d.bytes),
                d.out.as_ref().map(|w| format!(", dropped: {w}")).unwrap_or_default()
            ));
        }
        let cpu = sys::thread_cpu_ns().saturating_sub(cpu0) + cpu_disks;
        self.report.cpu_s = cpu as f64 / 1e9;
        if self.report.bytes > 0 {
            self.report.cpu_s_per_gb = self.report.cpu_s / (self.report.bytes as f64 / 1e9);
        }
        if self.report.writes > 0 {
            self.report.write_p50_ms = self.report.write_s * 1e3 / self.report.writes as f64;
            self.report.write_p99_ms = self.report.max_write_ms;
        }
        std::mem::take(&mut self.report)
    }
}

/// One line of why a disk is dropped, from the error its write met.
fn disk_failure(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => "full".into(),
        Some(libc::EROFS) => "read-only".into(),
        Some(libc::EIO) => "I/O error".into(),
        Some(libc::ENOENT | libc::ENODEV | libc::ENXIO | libc::ESTALE) => format!("gone: {e}"),
        _ => format!("write error: {e}"),
    }
}

/// The thread writing one mount point.
struct DiskWriter {
    index: usize,
    mount: PathBuf,
    cfg: ScatterConfig,
    shared: Arc<Shared>,
    uring: Option<sys::uring::WriteRing>,
    /// Mark6: this disk's file, the next offset in it, and what it holds.
    mark6: Option<(File, u64)>,
    blocks: Vec<BlockEntry>,
    mark6_side: Option<Sidecar>,
    made_dir: bool,
}

impl DiskWriter {
    fn new(index: usize, mount: PathBuf, cfg: &ScatterConfig, shared: Arc<Shared>) -> Self {
        DiskWriter {
            index,
            mount,
            cfg: cfg.clone(),
            shared,
            uring: None,
            mark6: None,
            blocks: Vec::new(),
            mark6_side: None,
            made_dir: false,
        }
    }

    /// Serve chunks until the coordinator hangs up; returns the thread's CPU nanoseconds.
    fn serve(mut self, rx: mpsc::Receiver<ToDisk>, out: mpsc::Sender<FromDisk>) -> u64 {
        let cpu0 = sys::thread_cpu_ns();
        self.uring = sys::uring::WriteRing::new(4).ok();
        for msg in rx.iter() {
            match msg {
                ToDisk::Chunk(job, pin) => {
                    let mut stats = WriteCounts::default();
                    let t = sys::thread_cpu_ns();
                    let result = match self.cfg.layout {
                        ScanLayout::FlexBuff => self.chunk(&job, &pin, &mut stats),
                        ScanLayout::Mark6 => self.block(&job, &pin, &mut stats),
                    };
                    drop(pin);
                    let bytes = job.end - job.start;
                    let _ = out.send(FromDisk::Done {
                        disk: self.index,
                        number: job.number,
                        result,
                        bytes,
                        write_ns: sys::thread_cpu_ns() - t,
                        stats,
                    });
                }
                ToDisk::Finish => {
                    let result = self.close_mark6();
                    let _ = out.send(FromDisk::Finished { disk: self.index, result });
                    break;
                }
            }
        }
        sys::thread_cpu_ns().saturating_sub(cpu0)
    }

    /// Write `[at, at + len)` of the pin to `file` from file offset `off`, in pieces of
    /// `cfg.piece`, up to four in flight (io_uring where available, else one at a time).
    fn write_range(
        &mut self,
        file: &File,
        pin: &Pinned,
        direct: bool,
        off: u64,
        stats: &mut WriteCounts,
    ) -> io::Result<()> {
        let piece = self.cfg.piece;
        let mut pos = pin.start();
        let end = pin.end();
        let mut direct = direct;
        while pos < end {
            let mut batch: [(u64, usize); 4] = [(0, 0); 4];
            let mut k = 0;
            let mut next = pos;
            while k < 4 && next < end {
                let s = pin.slice(next, piece.min((end - next) as usize));
                let mut n = s.len();
                if direct && n % RING_ALIGN != 0 {
                    if n > RING_ALIGN {
                        n -= n % RING_ALIGN;
                    } else if k == 0 {
                        sys::clear_direct(file.as_raw_fd())?;
                        direct = false;
                    } else {
                        break;
                    }
                }
                batch[k] = (next, n);
                k += 1;
                next += n as u64;
            }
            let results = match &mut self.uring {
                Some(u) => {
                    let bufs: Vec<(&[u8], u64)> =
                        batch[..k].iter().map(|&(at, n)| (pin.slice(at, n), off + at - pin.start())).collect();
                    u.write_batch(file.as_raw_fd(), &bufs)
                }
                None => batch[..k]
                    .iter()
                    .map(|&(at, n)| {
                        let t = sys::monotonic_ns();
                        (file.write_all_at(pin.slice(at, n), off + at - pin.start()), sys::monotonic_ns() - t)
                    })
                    .collect(),
            };
            for (r, dt) in results {
                r?;
                stats.writes += 1;
                stats.sum_ns += dt;
                stats.max_ns = stats.max_ns.max(dt);
                if dt > STALL_NS {
                    stats.stalls += 1;
                }
                self.shared.write_stats.observe(dt, dt > STALL_NS);
            }
            pos = next;
        }
        Ok(())
    }

    /// The ledger of a chunk's records, read back from the ring.
    fn ledger(&self, pin: &Pinned) -> FileLedger {
        let mut walker = RecordWalker::new(self.cfg.read.clone());
        let mut ledger = FileLedger::new(self.cfg.read.reader.clone(), self.cfg.window);
        super::walk_range(|at, n| pin.slice(at, n), pin.start(), pin.end(), &mut walker, &mut ledger);
        ledger
    }

    fn counted(&self, side: &mut Sidecar, job: &Job) {
        side.closed_utc = super::utc_iso(job.last.unix_ns);
        side.ring_full = job.last.ring_full.saturating_sub(job.base.ring_full);
        side.not_written_wrong_length = job.last.not_written.saturating_sub(job.base.not_written);
        side.not_written = side.not_written_wrong_length;
        side.kernel_socket_drops = Some(job.last.socket_drops.saturating_sub(job.base.socket_drops));
    }

    /// A FlexBuff chunk: `<mount>/<SCAN>/<SCAN>.NNNNNNNN`, then its sidecar.
    fn chunk(&mut self, job: &Job, pin: &Pinned, stats: &mut WriteCounts) -> io::Result<FileSummary> {
        let scan = self.cfg.scan.clone();
        let dir = self.mount.join(&scan);
        if !self.made_dir {
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
                Err(e) => return Err(e),
            }
            self.made_dir = true;
        }
        let name = scan::chunk_name(&scan, job.number);
        let path = dir.join(&name);
        let len = job.end - job.start;
        let (file, direct) = sys::create_direct(&path, self.cfg.direct)?;
        let written = (|| -> io::Result<()> {
            let _ = sys::preallocate(file.as_raw_fd(), 0, len);
            self.write_range(&file, pin, direct, 0, stats)?;
            file.set_len(len)?;
            file.sync_data()
        })();
        if let Err(e) = written {
            drop(file);
            let _ = std::fs::remove_file(&path); // ours, and partial
            return Err(e);
        }
        let mut ledger = self.ledger(pin);
        let (streams, total) = ledger.finish();
        let c = &self.cfg;
        let mut side = Sidecar::blank(&name, &c.read, &c.format_spec, &c.run, job.base.unix_ns, job.ended_by, true);
        side.direct_io = direct;
        side.bytes = len;
        side.records = ledger.records;
        side.streams = streams;
        side.total = total;
        side.invalid_by_reason = super::reasons(&ledger.invalid_kinds);
        side.unreadable = ledger.unreadable;
        self.counted(&mut side, job);
        side.write_stalls = stats.stalls;
        side.max_write_ms = stats.max_ns as f64 / 1e6;
        side.scan = Some(ScanPlace {
            name: scan.clone(),
            layout: ScanLayout::FlexBuff,
            chunk: Some(job.number),
            blocks: Vec::new(),
        });
        let side_path = dir.join(scan::chunk_sidecar_name(&scan, job.number));
        if let Err(e) = write_new(&side_path, &side) {
            // A chunk without its sidecar is not finished: both go, and the chunk is written
            // again elsewhere.
            let _ = std::fs::remove_file(&side_path);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(FileSummary {
            path: path.display().to_string(),
            sidecar: side_path.display().to_string(),
            bytes: len,
            records: ledger.records,
            lost: total.lost,
            ended_by: job.ended_by.into(),
            complete: true,
        })
    }

    /// A Mark6 block appended to this disk's file `<mount>/<SCAN>` (made with its header at the
    /// first block), through the page cache (block headers leave the frames unaligned) and
    /// synced before the block counts as written.
    fn block(&mut self, job: &Job, pin: &Pinned, stats: &mut WriteCounts) -> io::Result<FileSummary> {
        let path = self.mount.join(&self.cfg.scan);
        if self.mark6.is_none() {
            let (file, _) = sys::create_direct(&path, false)?;
            if let Err(e) = file.write_all_at(&self.cfg.mark6.encode(), 0) {
                drop(file);
                let _ = std::fs::remove_file(&path); // ours, and holding nothing
                return Err(e);
            }
            self.mark6 = Some((file, scan::MARK6_FILE_HEADER as u64));
            let c = &self.cfg;
            let mut side =
                Sidecar::blank(&c.scan, &c.read, &c.format_spec, &c.run, job.base.unix_ns, "end of run", true);
            side.scan =
                Some(ScanPlace { name: c.scan.clone(), layout: ScanLayout::Mark6, chunk: None, blocks: Vec::new() });
            side.kernel_socket_drops = Some(0);
            self.mark6_side = Some(side);
        }
        let (file, off) = self.mark6.take().expect("opened above");
        let len = job.end - job.start;
        let data_at = off + scan::MARK6_BLOCK_HEADER as u64;
        let written = (|| -> io::Result<()> {
            file.write_all_at(&scan::mark6_block_header(job.number, len), off)?;
            self.write_range(&file, pin, false, data_at, stats)?;
            file.sync_data()
        })();
        if let Err(e) = written {
            // Cut the file back to the blocks written whole: the block goes to another disk.
            let _ = file.set_len(off);
            self.mark6 = Some((file, off));
            return Err(e);
        }
        self.mark6 = Some((file, data_at + len));
        let mut ledger = self.ledger(pin);
        let (_, total) = ledger.finish();
        self.blocks.push(BlockEntry { number: job.number, offset: data_at, bytes: len, records: ledger.records });
        if let Some(side) = self.mark6_side.as_mut() {
            side.bytes += len;
            side.records += ledger.records;
            side.ring_full += job.last.ring_full.saturating_sub(job.base.ring_full);
            side.not_written += job.last.not_written.saturating_sub(job.base.not_written);
            side.not_written_wrong_length = side.not_written;
            side.kernel_socket_drops = Some(
                side.kernel_socket_drops.unwrap_or(0) + job.last.socket_drops.saturating_sub(job.base.socket_drops),
            );
            side.closed_utc = super::utc_iso(job.last.unix_ns);
            side.write_stalls += stats.stalls;
            side.max_write_ms = side.max_write_ms.max(stats.max_ns as f64 / 1e6);
        }
        Ok(FileSummary {
            path: format!("{}#block{}", path.display(), job.number),
            sidecar: self.mount.join(scan::mark6_sidecar_name(&self.cfg.scan)).display().to_string(),
            bytes: len,
            records: ledger.records,
            lost: total.lost,
            ended_by: job.ended_by.into(),
            complete: true,
        })
    }

    /// The end of a Mark6 scan on this disk: its sidecar, with the blocks the file holds.
    fn close_mark6(&mut self) -> io::Result<Option<FileSummary>> {
        let (Some((file, _)), Some(mut side)) = (self.mark6.take(), self.mark6_side.take()) else { return Ok(None) };
        file.sync_data()?;
        let blocks = std::mem::take(&mut self.blocks);
        if let Some(p) = side.scan.as_mut() {
            p.blocks = blocks;
        }
        let side_path = self.mount.join(scan::mark6_sidecar_name(&self.cfg.scan));
        write_new(&side_path, &side)?;
        Ok(Some(FileSummary {
            path: self.mount.join(&self.cfg.scan).display().to_string(),
            sidecar: side_path.display().to_string(),
            bytes: side.bytes,
            records: side.records,
            lost: 0,
            ended_by: "end of run".into(),
            complete: true,
        }))
    }
}

/// Write a sidecar to a new file (never replacing one) and sync it.
fn write_new(path: &std::path::Path, side: &Sidecar) -> io::Result<()> {
    let json = serde_json::to_vec_pretty(side).map_err(io::Error::other)?;
    let f = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    f.write_all_at(&json, 0).and_then(|()| f.sync_data())
}
