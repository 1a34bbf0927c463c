//! The hand-off between the capture thread's sink and the writer thread: file boundaries
//! ([`Break`]s) in a small lock-free queue, the run's final counts, and the progress counters
//! both ends publish. Atomics only: neither side ever waits for the other.

use crate::sys::{self, RING_ALIGN};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// File starts are aligned to this in the ring (what O_DIRECT needs).
pub(crate) const ALIGN: u64 = RING_ALIGN as u64;
const BREAKS: usize = 256;
/// Time marks kept for the writer (a writer this far behind gets coarser marks, never wrong ones).
const MARKS: usize = 1024;

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
pub(super) struct Break {
    pub(super) end: u64,
    pub(super) next_start: u64,
    pub(super) cut: u8,
    pub(super) unix_ns: u64,
    pub(super) ring_full: u64,
    pub(super) not_written: u64,
    pub(super) socket_drops: u64,
}

#[derive(Default)]
pub(super) struct BreakSlot {
    pub(super) end: AtomicU64,
    pub(super) next_start: AtomicU64,
    pub(super) cut: AtomicU64,
    pub(super) unix_ns: AtomicU64,
    pub(super) ring_full: AtomicU64,
    pub(super) not_written: AtomicU64,
    pub(super) socket_drops: AtomicU64,
}

/// State shared by the sink, the writer and whoever shows progress. Atomics only.
pub struct Shared {
    pub(super) slots: [BreakSlot; BREAKS],
    pub(super) head: AtomicU64,
    pub(super) tail: AtomicU64,
    pub(super) done: AtomicBool,
    pub(super) final_pos: AtomicU64,
    pub(super) final_counts: BreakSlot,
    /// Why the writer stopped early: 0 no, 1 disk full, 2 write error.
    pub(super) stop: AtomicU8,
    /// Bytes written to disk so far.
    pub written: AtomicU64,
    /// Bytes in the ring not yet written (as of the last receive batch).
    pub ring_fill: AtomicU64,
    /// Highest ring fill seen, bytes.
    pub high_water: AtomicU64,
    /// Files completed so far.
    pub files_done: AtomicU64,
    /// Files (and their bytes) retention deleted (`record --keep-free/--keep-for`): counted
    /// in the first ring's state, for a metrics exporter.
    pub files_deleted: AtomicU64,
    /// Bytes of the files retention deleted.
    pub bytes_deleted: AtomicU64,
    /// Every disk write's latency and the stalls among them, for a metrics exporter.
    pub write_stats: super::stats::WriteStats,
    /// Time marks (ring position, ns since the epoch) for raw files' time index
    /// ([`super::index`]): a queue like the breaks', and like them never waited on.
    pub(super) marks: [[AtomicU64; 2]; MARKS],
    pub(super) mark_head: AtomicU64,
    pub(super) mark_tail: AtomicU64,
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
            files_deleted: AtomicU64::new(0),
            bytes_deleted: AtomicU64::new(0),
            write_stats: super::stats::WriteStats::default(),
            marks: std::array::from_fn(|_| [AtomicU64::new(0), AtomicU64::new(0)]),
            mark_head: AtomicU64::new(0),
            mark_tail: AtomicU64::new(0),
        }
    }
}

impl Shared {
    pub(super) fn push(&self, b: Break) -> bool {
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

    pub(super) fn peek(&self) -> Option<Break> {
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

    pub(super) fn pop(&self) {
        self.tail.fetch_add(1, Ordering::Release);
    }

    /// Publish a time mark: every record before ring position `pos` arrived at or before
    /// `ns`, every record after it at or after. Dropped (false) when the queue is full.
    pub(super) fn push_mark(&self, pos: u64, ns: u64) -> bool {
        let h = self.mark_head.load(Ordering::Relaxed);
        if h - self.mark_tail.load(Ordering::Acquire) >= MARKS as u64 {
            return false;
        }
        let m = &self.marks[(h % MARKS as u64) as usize];
        m[0].store(pos, Ordering::Relaxed);
        m[1].store(ns, Ordering::Relaxed);
        self.mark_head.store(h + 1, Ordering::Release);
        true
    }

    /// The oldest time mark not yet taken, if its position is at most `upto`; taken.
    pub(super) fn take_mark(&self, upto: u64) -> Option<(u64, u64)> {
        let t = self.mark_tail.load(Ordering::Relaxed);
        if self.mark_head.load(Ordering::Acquire) == t {
            return None;
        }
        let m = &self.marks[(t % MARKS as u64) as usize];
        let (pos, ns) = (m[0].load(Ordering::Relaxed), m[1].load(Ordering::Relaxed));
        if pos > upto {
            return None;
        }
        self.mark_tail.store(t + 1, Ordering::Release);
        Some((pos, ns))
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
