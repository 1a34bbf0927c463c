//! Live rings: the protocol by which `record --share NAME` publishes its RAM rings and
//! `wirespeed tap NAME` reads them from another process (another partition of the same host).
//!
//! What is shared, per capture thread: the ring itself (memfd, mapped read-only by taps) and a
//! header page (memfd, 64-bit words, written only by the recorder). A JSON descriptor in the
//! share directory ([`share_dir`]: `/run/wirespeed/share/NAME.json`) names them as
//! `/proc/PID/fd/N` paths, with the recorder's pid and start time so that a descriptor left by a
//! dead recorder is recognised as stale.
//!
//! The recorder never waits for a tap and reads nothing from one. Per receive batch it stores
//! the published pair (stream position where its committed records end, and how many records
//! lie before it) under a sequence counter (a seqlock: odd while writing), and every
//! 1/32 ring an *anchor* (such a pair kept in a small ring of 64) for taps that must find a
//! record boundary again. Each file cut (pad to 4 KiB and a new pcap global header in the ring)
//! is published as a *break* (end, next file start) before any position past it. The ring's
//! overwrite frontier is kept by the producer itself (`sys::ring`): bytes at stream position
//! `p` are intact while `frontier <= p + capacity`.
//!
//! A tap copies a record out, then (after an acquire fence) re-reads the frontier: if it passed
//! the record, the copy may be torn and is discarded, and the tap jumps to the oldest anchor
//! still safely ahead of the frontier, counting the records in between (anchors carry record
//! counts) as its own overrun, exactly. No torn record ever reaches a tap's output.
//!
//! Only pcap recordings can be shared: their records carry their own length and source
//! address, which a tap needs to find record boundaries and to keep the ledger per source as
//! the recorder does; `record --share` refuses raw files in one line.

use crate::sys::ring::share::{self as sysshare, HeaderMap, ReadOnlyMap, FRONTIER_WORD};
use crate::sys::RingProducer;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Schema of a share descriptor.
pub const SHARE_SCHEMA: &str = "wirespeed.share/1";

/// "WSSHARE1": the first word of every share header.
pub const MAGIC: u64 = u64::from_le_bytes(*b"WSSHARE1");
/// Protocol version in header word 1.
pub const VERSION: u64 = 1;

const W_MAGIC: usize = 0;
const W_VERSION: usize = 1;
const W_CAPACITY: usize = 2;
const W_PUB_SEQ: usize = 3;
const W_PUB_POS: usize = 4;
const W_PUB_RECS: usize = 5;
const W_FRONTIER: usize = FRONTIER_WORD;
const W_DONE: usize = 7;
const W_ANCHOR_SEQ: usize = 8;
const W_BREAK_SEQ: usize = 9;
/// Anchors kept (each two words: position, records before it).
pub const ANCHORS: u64 = 64;
const W_ANCHORS: usize = 64;
/// Breaks kept (each two words: end of a file's records, start of the next file).
pub const BREAKS: u64 = 64;
const W_BREAKS: usize = W_ANCHORS + 2 * ANCHORS as usize;
/// Bytes of a pcap global header, skipped after a break.
const FILE_HEADER: u64 = super::PCAP_GLOBAL_LEN as u64;
/// Longest pcap record a recorder writes (record header, IPv4/UDP headers, 64 KiB datagram).
const MAX_RECORD: u64 = (super::pcap::PCAP_RECORD_OVERHEAD_V6 + 65536) as u64;

/// The share directory: `$WIRESPEED_SHARE_DIR`, else `/run/wirespeed/share`.
pub fn share_dir() -> PathBuf {
    std::env::var_os("WIRESPEED_SHARE_DIR").map_or_else(|| PathBuf::from("/run/wirespeed/share"), PathBuf::from)
}

/// A share name: letters, digits, '.', '_' and '-', not starting with '.', at most 64.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "share name {name:?} is not usable: use 1-64 letters, digits, '.', '_' or '-', not starting with '.' (e.g. --share obs1)"
        ))
    }
}

/// The descriptor file of share `name`.
pub fn descriptor_path(name: &str) -> PathBuf {
    share_dir().join(format!("{name}.json"))
}

/// One shared ring as a descriptor names it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RingEntry {
    /// The header page (`/proc/PID/fd/N`).
    pub header: String,
    /// The ring's memory (`/proc/PID/fd/N`).
    pub data: String,
    /// Ring bytes.
    pub capacity: u64,
}

/// What a tap needs to find and read a recorder's rings: the JSON file `NAME.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Descriptor {
    /// [`SHARE_SCHEMA`].
    pub schema: String,
    /// The share name.
    pub name: String,
    /// The recorder's process id.
    pub pid: u32,
    /// Its start time (clock ticks since boot, /proc/PID/stat): tells a live recorder from a
    /// reused pid.
    pub start_ticks: u64,
    /// The stream's format spec (as `--format` takes it).
    pub format: String,
    /// Record layout in the rings (always `pcap`).
    pub file_format: String,
    /// The recorder's reorder window (datagrams), so a tap's ledger settles as the recorder's.
    pub window: u64,
    /// Where the recorder listens.
    pub listen: String,
    /// One ring per capture thread.
    pub rings: Vec<RingEntry>,
}

impl Descriptor {
    /// Whether the recorder that wrote this descriptor is still running.
    pub fn alive(&self) -> bool {
        sysshare::process_alive(self.pid, self.start_ticks)
    }

    /// Read the descriptor of share `name`: a missing one, an unreadable one or one of a dead
    /// recorder is an error that says so.
    pub fn load(name: &str) -> crate::Result<Descriptor> {
        validate_name(name).map_err(crate::Error::invalid)?;
        let path = descriptor_path(name);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(crate::Error::usage_io(
                    format!(
                        "no recorder shares {name:?} ({} does not exist): start one with `wirespeed record ... --file-format pcap --share {name}`",
                        path.display()
                    ),
                    &e,
                ))
            }
            Err(e) => return Err(crate::Error::usage_io(format!("cannot read {}: {e}", path.display()), &e)),
        };
        let d: Descriptor = serde_json::from_str(&text)
            .map_err(|e| crate::Error::bad_data(format!("{} is not a share descriptor: {e}", path.display())))?;
        if d.schema != SHARE_SCHEMA {
            return Err(crate::Error::bad_data(format!(
                "{} has schema {:?}, this wirespeed reads {SHARE_SCHEMA}",
                path.display(),
                d.schema
            )));
        }
        if !d.alive() {
            return Err(crate::Error::not_found(format!(
                "share {name:?} is stale: its recorder (pid {}) is no longer running; the next `record --share {name}` replaces {}",
                d.pid,
                path.display()
            )));
        }
        if d.rings.is_empty() {
            return Err(crate::Error::bad_data(format!(
                "{} names no ring: a recorder always shares one per capture thread, so this descriptor is not a recorder's; remove it",
                path.display()
            )));
        }
        Ok(d)
    }

    /// Attach to every ring it names, starting at `start`: what `wirespeed tap` and the Python
    /// `wirespeed.tap` both do. Each ring and header must be one of the recorder's own sealed
    /// memfds (see `sys::ring::share`); anything else is refused in one sentence.
    pub fn attach(&self, start: Start) -> Result<Vec<TapRing>, String> {
        if self.rings.is_empty() {
            return Err(format!("share {:?} names no ring", self.name));
        }
        self.rings.iter().map(|e| TapRing::attach(self.pid, e, start)).collect()
    }
}

/// The recorder's claim on a share name: the descriptor file, removed on drop (only if it is
/// still ours).
pub struct ShareGuard {
    path: PathBuf,
    pid: u32,
}

impl ShareGuard {
    /// Publish `d` as share `d.name`. A live recorder of the same name is refused; a stale
    /// descriptor (its recorder is dead) is replaced.
    pub fn create(d: &Descriptor) -> Result<ShareGuard, String> {
        validate_name(&d.name)?;
        let dir = share_dir();
        std::fs::create_dir_all(&dir).map_err(|e| {
            format!(
                "cannot create the share directory {}: {e} (run as root, or set WIRESPEED_SHARE_DIR)",
                dir.display()
            )
        })?;
        let path = descriptor_path(&d.name);
        let tmp = dir.join(format!(".{}.json.{}.tmp", d.name, d.pid));
        let body = serde_json::to_string_pretty(d).map_err(|e| format!("cannot encode the descriptor: {e}"))?;
        std::fs::write(&tmp, body).map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
        let result = (|| {
            for _ in 0..3 {
                // A hard link is created only if the name is free: two recorders cannot both win.
                match std::fs::hard_link(&tmp, &path) {
                    Ok(()) => return Ok(ShareGuard { path: path.clone(), pid: d.pid }),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        let old = std::fs::read_to_string(&path).ok();
                        match old.as_deref().and_then(|t| serde_json::from_str::<Descriptor>(t).ok()) {
                            Some(o) if o.alive() => {
                                return Err(format!(
                                    "share name {:?} is in use by a running recorder (pid {}): choose another --share NAME or stop that recorder",
                                    d.name, o.pid
                                ))
                            }
                            Some(_) => {
                                // A dead recorder's descriptor: ours to replace.
                                let _ = std::fs::remove_file(&path);
                            }
                            None => {
                                return Err(format!(
                                    "{} exists and is not a wirespeed share descriptor: remove it or choose another --share NAME",
                                    path.display()
                                ))
                            }
                        }
                    }
                    Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
                }
            }
            Err(format!("cannot claim {}: it keeps being replaced", path.display()))
        })();
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// The descriptor file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ShareGuard {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| serde_json::from_str::<Descriptor>(&t).ok())
            .is_some_and(|d| d.pid == self.pid);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The recorder's side, kept by the capture thread's sink: what it publishes per batch.
pub struct Publisher {
    seq: u64,
    anchors: u64,
    breaks: u64,
    next_anchor: u64,
    step: u64,
}

impl Publisher {
    /// Set up the header of a ring of `capacity` bytes whose records start at `pos`.
    pub fn new(h: &HeaderMap, capacity: u64, pos: u64) -> Publisher {
        let w = h.words();
        w[W_VERSION].store(VERSION, Ordering::Relaxed);
        w[W_CAPACITY].store(capacity, Ordering::Relaxed);
        let mut p = Publisher { seq: 0, anchors: 0, breaks: 0, next_anchor: 0, step: (capacity / 32).max(1) };
        p.publish(w, pos, 0);
        // Last: a tap that sees the magic sees a header ready to read.
        w[W_MAGIC].store(MAGIC, Ordering::Release);
        p
    }

    /// Carry on publishing a header set up earlier (by [`prepare`]).
    fn resume(h: &HeaderMap) -> Publisher {
        let w = h.words();
        let step = (w[W_CAPACITY].load(Ordering::Relaxed) / 32).max(1);
        Publisher {
            seq: w[W_PUB_SEQ].load(Ordering::Relaxed),
            anchors: w[W_ANCHOR_SEQ].load(Ordering::Relaxed),
            breaks: w[W_BREAK_SEQ].load(Ordering::Relaxed),
            next_anchor: w[W_PUB_POS].load(Ordering::Relaxed) + step,
            step,
        }
    }

    /// Publish: committed records end at `pos`, `records` of them so far. One seqlock'd pair
    /// (four stores) per batch, and an anchor every 1/32 ring.
    #[inline]
    pub fn publish(&mut self, w: &[AtomicU64], pos: u64, records: u64) {
        self.seq += 1;
        w[W_PUB_SEQ].store(self.seq, Ordering::Relaxed);
        fence(Ordering::Release);
        w[W_PUB_POS].store(pos, Ordering::Relaxed);
        w[W_PUB_RECS].store(records, Ordering::Relaxed);
        self.seq += 1;
        w[W_PUB_SEQ].store(self.seq, Ordering::Release);
        if pos >= self.next_anchor {
            let at = W_ANCHORS + 2 * (self.anchors % ANCHORS) as usize;
            fence(Ordering::Release);
            w[at].store(pos, Ordering::Relaxed);
            w[at + 1].store(records, Ordering::Relaxed);
            self.anchors += 1;
            w[W_ANCHOR_SEQ].store(self.anchors, Ordering::Release);
            self.next_anchor = pos + self.step;
        }
    }

    /// A file ends at `end`; the next starts at `next_start` (its pcap header first). Called
    /// before anything past `end` is published.
    pub fn file_break(&mut self, w: &[AtomicU64], end: u64, next_start: u64) {
        let at = W_BREAKS + 2 * (self.breaks % BREAKS) as usize;
        fence(Ordering::Release);
        w[at].store(end, Ordering::Relaxed);
        w[at + 1].store(next_start, Ordering::Relaxed);
        self.breaks += 1;
        w[W_BREAK_SEQ].store(self.breaks, Ordering::Release);
    }

    /// The recording ended at `pos` after `records`: taps finish when they get there.
    pub fn finish(&mut self, w: &[AtomicU64], pos: u64, records: u64) {
        self.publish(w, pos, records);
        w[W_DONE].store(1, Ordering::Release);
    }
}

/// The publisher of a shared producer's ring, or None when the ring is not shared: it
/// carries on from [`prepare`], or sets the header up with records starting at the
/// producer's position.
pub fn publisher_for(ring: &RingProducer) -> Option<Publisher> {
    let h = ring.share_header()?;
    if h.words()[W_MAGIC].load(Ordering::Relaxed) == MAGIC {
        Some(Publisher::resume(h))
    } else {
        Some(Publisher::new(h, ring.capacity(), ring.position()))
    }
}

/// Make a shared ring's header readable before its descriptor is published (a tap may attach
/// at once), with records to start at `first` (after the pcap global header the sink writes).
pub fn prepare(ring: &RingProducer, first: u64) {
    if let Some(h) = ring.share_header() {
        Publisher::new(h, ring.capacity(), first);
    }
}

/// Where a tap starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// At the newest published position: records published after attaching.
    Newest,
    /// At the oldest record the ring still holds safely.
    Oldest,
}

/// What [`TapRing::next`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// A whole, intact pcap record (record header, then packet) is in the buffer.
    Record,
    /// Nothing new yet.
    Empty,
    /// The recorder finished and every record it published was read (or overrun).
    Ended,
}

/// What a tap lost to the recorder lapping it.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Overrun {
    /// Records the tap never delivered because the recorder overwrote them first.
    pub records: u64,
    /// Ring bytes skipped with them.
    pub bytes: u64,
    /// Times the tap was lapped and jumped ahead.
    pub events: u64,
}

/// A tap's reader of one shared ring.
pub struct TapRing {
    hdr: ReadOnlyMap,
    data: ReadOnlyMap,
    cap: u64,
    pos: u64,
    idx: u64,
    next_break: u64,
    published: (u64, u64),
    /// Records delivered.
    pub records: u64,
    /// What was lost to overruns.
    pub overrun: Overrun,
    /// Records the ring held before the tap's start (not read, not counted as overrun).
    pub skipped_at_start: u64,
}

impl TapRing {
    /// Attach to ring `e` of recorder `pid`'s descriptor, starting at `start`.
    fn attach(pid: u32, e: &RingEntry, start: Start) -> Result<TapRing, String> {
        let hdr = ReadOnlyMap::open_share(&e.header, pid, sysshare::HEADER_MEMFD, sysshare::HEADER_BYTES)?;
        if hdr.load(W_MAGIC, Ordering::Acquire) != MAGIC || hdr.load(W_VERSION, Ordering::Relaxed) != VERSION {
            return Err(format!("{} is not a wirespeed share header of version {VERSION}", e.header));
        }
        let cap = hdr.load(W_CAPACITY, Ordering::Relaxed);
        if cap != e.capacity || cap == 0 {
            return Err(format!("{}: ring capacity {cap}, the descriptor says {}", e.header, e.capacity));
        }
        let len = usize::try_from(cap).map_err(|_| format!("{}: ring capacity {cap} is not mappable", e.header))?;
        let data = ReadOnlyMap::open_share(&e.data, pid, sysshare::RING_MEMFD, len)?;
        Self::over(hdr, data, start)
    }

    fn over(hdr: ReadOnlyMap, data: ReadOnlyMap, start: Start) -> Result<TapRing, String> {
        let cap = data.len() as u64;
        let mut t = TapRing {
            hdr,
            data,
            cap,
            pos: 0,
            idx: 0,
            next_break: 0,
            published: (0, 0),
            records: 0,
            overrun: Overrun::default(),
            skipped_at_start: 0,
        };
        let newest = t.read_pub();
        let (pos, idx) = match start {
            Start::Newest => newest,
            Start::Oldest => {
                let f = t.hdr.load(W_FRONTIER, Ordering::Acquire);
                t.oldest_anchor(f, 0, 0, 0).unwrap_or(newest)
            }
        };
        t.skipped_at_start = idx;
        (t.pos, t.idx) = (pos, idx);
        t.next_break = t.find_break(pos);
        Ok(t)
    }

    /// Stream position the tap reads next.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Ring bytes.
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    /// Bytes published but not yet read (how far behind the tap is).
    pub fn behind(&self) -> u64 {
        self.published.0.saturating_sub(self.pos)
    }

    /// The published pair, read consistently (seqlock).
    fn read_pub(&mut self) -> (u64, u64) {
        for _ in 0..100_000 {
            let s1 = self.hdr.load(W_PUB_SEQ, Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let p = self.hdr.load(W_PUB_POS, Ordering::Relaxed);
            let r = self.hdr.load(W_PUB_RECS, Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.hdr.load(W_PUB_SEQ, Ordering::Relaxed) == s1 {
                self.published = (p, r);
                return (p, r);
            }
        }
        self.published // a recorder killed mid-store: what was last seen
    }

    /// Entry `j` of a ring of pairs at word `base` counted by word `seq_word`, if it is still
    /// there and was read whole.
    fn entry(&self, base: usize, seq_word: usize, n: u64, j: u64) -> Option<(u64, u64)> {
        let at = base + 2 * (j % n) as usize;
        let a = self.hdr.load(at, Ordering::Relaxed);
        let b = self.hdr.load(at + 1, Ordering::Relaxed);
        fence(Ordering::Acquire);
        // Entry j is overwritten only once the writer starts entry j + n, after the count
        // reached j + n.
        (self.hdr.load(seq_word, Ordering::Relaxed) < j + n).then_some((a, b))
    }

    /// The oldest anchor at or past `from` (and `idx` records) that lies ahead of frontier `f`
    /// by `margin` bytes at least.
    fn oldest_anchor(&self, f: u64, from: u64, idx: u64, margin: u64) -> Option<(u64, u64)> {
        let safe = (f + margin).saturating_sub(self.cap);
        let s = self.hdr.load(W_ANCHOR_SEQ, Ordering::Acquire);
        (s.saturating_sub(ANCHORS - 1)..s)
            .filter_map(|j| self.entry(W_ANCHORS, W_ANCHOR_SEQ, ANCHORS, j))
            .find(|&(p, r)| p >= safe && p >= from && r >= idx)
    }

    /// The number of the first break whose end is at or past `pos` (the count, if none).
    fn find_break(&self, pos: u64) -> u64 {
        let s = self.hdr.load(W_BREAK_SEQ, Ordering::Acquire);
        (s.saturating_sub(BREAKS - 1)..s)
            .find(|&j| self.entry(W_BREAKS, W_BREAK_SEQ, BREAKS, j).is_some_and(|(end, _)| end >= pos))
            .unwrap_or(s)
    }

    /// Lapped: jump to the oldest safe anchor (or the newest data) and count what lay between.
    fn resync(&mut self, f: u64) {
        // Half the ring of margin: a tap that was just lapped is not lapped again at once (the
        // frontier moves in steps of up to an eighth).
        let (pos, idx) = match self.oldest_anchor(f, self.pos, self.idx, self.cap / 2) {
            Some(a) => a,
            None => self.read_pub(),
        };
        self.overrun.records += idx.saturating_sub(self.idx);
        self.overrun.bytes += pos.saturating_sub(self.pos);
        self.overrun.events += 1;
        (self.pos, self.idx) = (pos, idx);
        self.next_break = self.find_break(pos);
    }

    /// Copy `dst.len()` bytes of the stream from position `at` (wrapping at the ring's end).
    fn copy(&self, at: u64, dst: &mut [u8]) {
        let i = (at % self.cap) as usize;
        let first = dst.len().min(self.cap as usize - i);
        let (a, b) = dst.split_at_mut(first);
        self.data.copy_out(i, a);
        if !b.is_empty() {
            self.data.copy_out(0, b);
        }
    }

    /// The next intact record into `buf` (resized to it), or why there is none.
    pub fn next(&mut self, buf: &mut Vec<u8>) -> Next {
        loop {
            if self.pos >= self.published.0 {
                // `done` first: a published pair read after it is the final one.
                let done = self.hdr.load(W_DONE, Ordering::Acquire) == 1;
                self.read_pub();
                if self.pos >= self.published.0 {
                    return if done { Next::Ended } else { Next::Empty };
                }
            }
            // A file boundary: skip the pad and the next file's pcap header.
            if self.hdr.load(W_BREAK_SEQ, Ordering::Acquire) > self.next_break {
                match self.entry(W_BREAKS, W_BREAK_SEQ, BREAKS, self.next_break) {
                    Some((end, next)) if end == self.pos => {
                        self.pos = next + FILE_HEADER;
                        self.next_break += 1;
                        continue;
                    }
                    Some((end, _)) if end < self.pos => {
                        self.next_break += 1;
                        continue;
                    }
                    Some(_) => {}
                    None => {
                        // The break was overwritten in the header: far behind, jump.
                        let f = self.hdr.load(W_FRONTIER, Ordering::Acquire);
                        self.resync(f.max(self.pos + self.cap + 1));
                        continue;
                    }
                }
            }
            let f = self.hdr.load(W_FRONTIER, Ordering::Acquire);
            if f > self.pos + self.cap {
                self.resync(f);
                continue;
            }
            let head = super::pcap::PCAP_RECORD_LEN;
            buf.resize(head, 0);
            self.copy(self.pos, &mut buf[..head]);
            let caplen = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as u64;
            let len = head as u64 + caplen;
            let sane = caplen >= 28 && len <= MAX_RECORD && self.pos + len <= self.published.0;
            if sane {
                buf.resize(len as usize, 0);
                self.copy(self.pos + head as u64, &mut buf[head..]);
            }
            // Seqlock reader: the copy counts only if the frontier had not passed it when it
            // was taken (the fence orders the copy before this load).
            fence(Ordering::Acquire);
            let f = self.hdr.load(W_FRONTIER, Ordering::Relaxed);
            if f > self.pos + self.cap {
                self.resync(f);
                continue;
            }
            if !sane {
                // Intact bytes that are no record: never written by a recorder. Jump ahead
                // rather than deliver garbage, and count it like an overrun.
                let f = f.max(self.pos + self.cap + 1);
                self.resync(f);
                continue;
            }
            self.pos += len;
            self.idx += 1;
            self.records += 1;
            return Next::Record;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::ring::share::ReadOnlyMap;
    use crate::sys::ring::shared_byte_ring;

    /// A shared ring, its publisher, and a tap's read-only view of it (through this process's
    /// own /proc/self/fd paths, as another process would open /proc/PID/fd).
    struct Rig {
        p: RingProducer,
        c: crate::sys::RingConsumer,
        publ: Publisher,
        recs: u64,
        entry: RingEntry,
    }

    fn rig(cap: usize) -> Rig {
        let (mut p, c) = shared_byte_ring(cap, false, &Default::default()).unwrap();
        assert!(p.write(&[&super::super::pcap_global_header()]));
        p.publish();
        let publ = publisher_for(&p).unwrap();
        let h = p.share_header().unwrap();
        let entry = RingEntry {
            header: format!("/proc/self/fd/{}", h.raw_fd()),
            data: format!("/proc/self/fd/{}", p.memory().shared_fd().unwrap()),
            capacity: cap as u64,
        };
        Rig { p, c, publ, recs: 0, entry }
    }

    fn record(seq: u64, len: usize) -> Vec<u8> {
        let src = "127.0.0.1:5000".parse().unwrap();
        let dst = "127.0.0.1:7148".parse().unwrap();
        let mut payload = vec![0u8; len];
        payload[..8].copy_from_slice(&seq.to_be_bytes());
        let h = super::super::pcap_record_header(seq, src, dst, len);
        let mut v = h.to_vec();
        v.extend_from_slice(&payload);
        v
    }

    impl Rig {
        /// Write `n` records (the writer releasing everything at once, as a fast disk does),
        /// publishing after each.
        fn put(&mut self, n: u64, len: usize) {
            for _ in 0..n {
                let r = record(self.recs, len);
                assert!(self.p.write(&[&r]), "room");
                self.recs += 1;
                self.p.publish();
                let pos = self.p.position();
                self.publ.publish(self.p.share_header().unwrap().words(), pos, self.recs);
                let at = self.c.produced();
                self.c.release(at);
            }
        }
        fn tap(&self, start: Start) -> TapRing {
            let hdr = ReadOnlyMap::open(Path::new(&self.entry.header), sysshare::HEADER_BYTES).unwrap();
            let data = ReadOnlyMap::open(Path::new(&self.entry.data), self.entry.capacity as usize).unwrap();
            TapRing::over(hdr, data, start).unwrap()
        }
    }

    fn seq_of(buf: &[u8]) -> u64 {
        u64::from_be_bytes(buf[44..52].try_into().unwrap())
    }

    fn drain(t: &mut TapRing) -> Vec<u64> {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while t.next(&mut buf) == Next::Record {
            out.push(seq_of(&buf));
        }
        out
    }

    #[test]
    fn a_tap_keeping_up_reads_every_record_in_order() {
        let mut r = rig(64 << 10);
        let mut t = r.tap(Start::Newest);
        let mut seen = Vec::new();
        for _ in 0..50 {
            r.put(7, 1000);
            seen.extend(drain(&mut t));
        }
        assert_eq!(seen, (0..350).collect::<Vec<_>>());
        assert_eq!(t.overrun, Overrun::default());
    }

    /// The writer laps a tap that reads nothing: the tap then delivers only intact records,
    /// and counts exactly the ones it never delivered.
    #[test]
    fn a_lapped_tap_counts_exactly_what_it_lost_and_outputs_nothing_torn() {
        let cap = 64 << 10;
        let mut r = rig(cap);
        let mut t = r.tap(Start::Newest);
        let mut seen = drain(&mut t);
        r.put(10, 1000);
        seen.extend((0..3).map(|_| {
            let mut b = Vec::new();
            assert_eq!(t.next(&mut b), Next::Record);
            seq_of(&b)
        }));
        // 300 records of ~1 KB: the ring (64 KiB) is lapped several times over.
        r.put(300, 1000);
        seen.extend(drain(&mut t));
        assert!(t.overrun.records > 0 && t.overrun.events >= 1, "{:?}", t.overrun);
        assert_eq!(seen.len() as u64 + t.overrun.records, 310, "every record delivered or counted");
        // What was delivered is in order, each exactly once, and intact (the payload says its
        // own number, which the pcap time stamp repeats).
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        assert_eq!(&seen[..3], &[0, 1, 2]);
        assert_eq!(*seen.last().unwrap(), 309);
        r.put(5, 1000);
        assert_eq!(drain(&mut t), (310..315).collect::<Vec<_>>());
    }

    /// A tap one record in when the writer laps it by a whole ring: the records it had not
    /// copied are overwritten, so none of them is delivered; all are counted.
    #[test]
    fn a_record_overwritten_during_the_copy_is_counted_not_delivered() {
        let cap = 64 << 10;
        let mut r = rig(cap);
        let mut t = r.tap(Start::Newest);
        r.put(60, 1000); // ~62 KB: nearly full
        let mut b = Vec::new();
        assert_eq!(t.next(&mut b), Next::Record);
        assert_eq!(seq_of(&b), 0);
        // The tap is one record in; now the writer laps it by a whole ring before it reads on.
        r.put(80, 1000);
        let rest = drain(&mut t);
        assert!(rest.iter().all(|&s| s > 1), "records 1.. were overwritten: {rest:?}");
        assert_eq!(1 + rest.len() as u64 + t.overrun.records, 140);
    }

    #[test]
    fn late_start_begins_at_the_newest_and_from_start_at_the_oldest_held() {
        let mut r = rig(64 << 10);
        r.put(20, 1000);
        let mut late = r.tap(Start::Newest);
        let mut early = r.tap(Start::Oldest);
        r.put(5, 1000);
        assert_eq!(drain(&mut late), (20..25).collect::<Vec<_>>());
        assert_eq!(drain(&mut early), (0..25).collect::<Vec<_>>(), "the ring still holds them all");
        assert_eq!(early.skipped_at_start, 0);
        // After the ring was lapped, --from-start begins at the oldest safe anchor.
        r.put(200, 1000);
        let mut lapped = r.tap(Start::Oldest);
        let got = drain(&mut lapped);
        assert!(!got.is_empty() && got[0] > 25, "{:?}", &got[..3.min(got.len())]);
        assert_eq!(*got.last().unwrap(), 224);
        assert_eq!(lapped.skipped_at_start, got[0]);
        assert_eq!(lapped.overrun, Overrun::default());
    }

    #[test]
    fn file_breaks_are_skipped_and_the_end_is_seen() {
        let mut r = rig(64 << 10);
        let mut t = r.tap(Start::Newest);
        r.put(3, 1000);
        // A file cut as the sink makes it: pad to 4 KiB, a new global header.
        let end = r.p.position();
        let next = end.div_ceil(4096) * 4096;
        r.publ.file_break(r.p.share_header().unwrap().words(), end, next);
        assert!(r.p.align_to(4096));
        assert!(r.p.write(&[&super::super::pcap_global_header()]));
        r.put(3, 1000);
        let (pos, recs) = (r.p.position(), r.recs);
        r.publ.finish(r.p.share_header().unwrap().words(), pos, recs);
        let mut buf = Vec::new();
        let mut got = Vec::new();
        loop {
            match t.next(&mut buf) {
                Next::Record => got.push(seq_of(&buf)),
                Next::Ended => break,
                Next::Empty => panic!("the recording ended"),
            }
        }
        assert_eq!(got, (0..6).collect::<Vec<_>>());
    }

    /// The writer on its own thread, flat out, laps a reader that keeps pausing: every record
    /// the reader delivers is whole (each payload byte says the record's number, so a record
    /// overwritten during its copy would show), in order, and delivered plus overrun is every
    /// record written, exactly.
    #[test]
    fn a_concurrent_writer_never_hands_a_reader_a_torn_record() {
        let cap = 64 << 10;
        let mut r = rig(cap);
        let mut t = r.tap(Start::Newest);
        const N: u64 = 200_000;
        let writer = std::thread::spawn(move || {
            let src = "127.0.0.1:5000".parse().unwrap();
            let dst = "127.0.0.1:7148".parse().unwrap();
            let mut payload = vec![0u8; 1500];
            for seq in 0..N {
                let len = 100 + (seq as usize * 37) % 1300;
                payload[..len].fill((seq % 251) as u8);
                payload[..8].copy_from_slice(&seq.to_be_bytes());
                let h = super::super::pcap_record_header(seq, src, dst, len);
                assert!(r.p.write(&[&h, &payload[..len]]), "a released ring has room");
                r.recs += 1;
                if seq % 8 == 7 || seq == N - 1 {
                    r.p.publish();
                    let pos = r.p.position();
                    r.publ.publish(r.p.share_header().unwrap().words(), pos, r.recs);
                    let at = r.c.produced();
                    r.c.release(at);
                    // About the reader's pace, so that it both reads and is lapped, often.
                    let t0 = std::time::Instant::now();
                    while t0.elapsed() < std::time::Duration::from_micros(2) {
                        std::hint::spin_loop();
                    }
                }
            }
            let (pos, recs) = (r.p.position(), r.recs);
            r.publ.finish(r.p.share_header().unwrap().words(), pos, recs);
            r // keeps the ring mapped until the reader is done
        });
        let mut buf = Vec::new();
        let (mut delivered, mut last) = (0u64, None);
        loop {
            match t.next(&mut buf) {
                Next::Record => {
                    let seq = seq_of(&buf);
                    let body = &buf[52..];
                    assert_eq!(buf.len(), 44 + 100 + (seq as usize * 37) % 1300, "record {seq} has its length");
                    assert!(body.iter().all(|&b| b == (seq % 251) as u8), "record {seq} is torn");
                    assert!(last.map_or(true, |l| seq > l), "in order");
                    last = Some(seq);
                    delivered += 1;
                    if delivered % 500 == 0 {
                        // A pause about as long as the writer takes to go round the ring.
                        let t0 = std::time::Instant::now();
                        while t0.elapsed() < std::time::Duration::from_micros(40) {
                            std::hint::spin_loop();
                        }
                    }
                }
                Next::Empty => std::thread::yield_now(),
                Next::Ended => break,
            }
        }
        let _r = writer.join().unwrap();
        assert_eq!(delivered + t.overrun.records, N, "{:?}", t.overrun);
    }

    #[test]
    fn names_and_descriptors() {
        assert!(validate_name("obs-1.a_b").is_ok());
        for bad in ["", ".x", "a/b", "a b", &"x".repeat(65)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
    }
}
