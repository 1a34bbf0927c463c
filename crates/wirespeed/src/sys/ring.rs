//! A single-producer, single-consumer byte ring over preallocated, pre-faulted and (where
//! allowed) locked memory: the hand-off between the capture thread and the disk writer.
//!
//! Positions are 64-bit byte offsets into an endless stream; the byte at position `p` lives at
//! `p % len` in memory. The producer owns `[produced, consumed + len)`, the consumer owns
//! `[consumed, produced)`. Each side publishes its position with a release store and reads
//! the other's with an acquire load, so the bytes behind a position are visible before the
//! position is. Neither side ever waits for the other: a producer that finds no room is told
//! so and drops (and counts) the record; a consumer with nothing to read is told so.
//!
//! The producer caches the consumer's position and only reloads it when the cached room is
//! not enough, so in steady state the capture thread touches the shared cache line once per
//! batch (its own publish), not once per packet.
//!
//! Receiving straight into the ring: the producer can *lend* the memory at its cursor as a
//! [`Lease`] of equal slots (room for a record header, then the datagram), which the socket
//! code receives into. Each landed datagram is then either committed ([`RingProducer::commit`]:
//! its header written in the slot's header room, nothing copied) or left out; when the lease
//! comes back ([`RingProducer::settle`]) the kept records are closed up behind the cursor (a
//! move only behind a left-out or short one) and the cursor advances. The protocol keeps the
//! borrows apart: slices of landed datagrams borrow the lease, the header rooms they never
//! cover are the only bytes written while it is out, and every move waits for the lease to be
//! given back by value, when no slice of it can be alive.
//!
//! A shared ring ([`shared_byte_ring`], `record --share`) is the same ring in memfd memory that
//! taps map read-only, plus a header page ([`share::HeaderMap`]). The producer then writes one
//! more thing, only when it reloads its room: its overwrite frontier (how far it may now
//! write, a store and a release fence before any byte below it is written), and takes room in
//! steps of at most an eighth of the ring ahead of its cursor, so that the frontier trails the
//! cursor and a tap a little behind loses nothing. The rest of the protocol (what is published
//! per batch, record boundaries) is `spool::share`'s. Nothing is read from a tap.

use std::io;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

pub mod memory;
pub mod share;
pub use memory::{prefault, PageKind, Prefault, RingMemory};

/// Alignment of the ring's memory and of file starts within it: what O_DIRECT requires.
pub const RING_ALIGN: usize = 4096;

#[repr(align(128))]
struct Padded(AtomicU64);

struct Shared {
    mem: RingMemory,
    produced: Padded,
    consumed: Padded,
    /// The share header of a shared ring.
    hdr: Option<share::HeaderMap>,
    /// Start positions of the ranges [`Pinned`] for other threads ([`UNPINNED`]: a free slot):
    /// the consumer never releases past one, so the producer cannot overwrite them.
    pins: [AtomicU64; MAX_PINS],
}

/// Most ranges pinned at once: one per disk writer of a scattered recording, and spare.
pub const MAX_PINS: usize = 64;
const UNPINNED: u64 = u64::MAX;

/// The capture side: appends records.
pub struct RingProducer {
    shared: Arc<Shared>,
    pos: u64,
    limit: u64,
    base: *mut u8,
    len: u64,
    /// The outstanding lease, if any: while it is out, nothing but its header rooms is written.
    lent: Option<Lent>,
    /// Per slot of the outstanding lease: the committed datagram length, or [`LEFT_OUT`].
    /// Allocated once by [`RingProducer::prepare_lending`], never on the receive path.
    slot_lens: Vec<u32>,
    /// Numbers leases, so a stale or foreign one is refused.
    epoch: u64,
}

/// A slot of a lease whose datagram was not committed.
const LEFT_OUT: u32 = u32::MAX;

/// The producer's own record of the lease it gave out.
#[derive(Clone, Copy, Debug)]
struct Lent {
    first: u64,
    stride: usize,
    head: usize,
    count: usize,
    epoch: u64,
}

/// Ring memory lent to the socket code for one receive batch: `count` slots of `stride` bytes
/// from the producer's cursor (never across the ring's end), each `head` bytes of header room
/// followed by `stride - head` bytes for the datagram. An owned token (it keeps the memory
/// alive); the producer writes nothing but header rooms until it is given back with
/// [`RingProducer::settle`].
pub struct Lease {
    _mem: Arc<Shared>,
    slot0: *mut u8,
    stride: usize,
    head: usize,
    count: usize,
    epoch: u64,
}

// SAFETY: the pointer is into memory the Arc keeps alive; the lease moves with the capture
// thread's state and is used by one thread at a time.
unsafe impl Send for Lease {}

impl Lease {
    /// Slots lent.
    #[inline]
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes each slot takes for its datagram (beyond this a datagram does not land in place).
    #[inline]
    pub fn body(&self) -> usize {
        self.stride - self.head
    }

    /// Where slot `i`'s datagram goes and how much fits: for the socket code's iovecs.
    #[inline]
    pub(in crate::sys) fn body_ptr(&self, i: usize) -> *mut u8 {
        assert!(i < self.count);
        // SAFETY: slot i lies inside the lent region (count * stride bytes from slot0, checked
        // against the ring's end when lent), and head < stride.
        unsafe { self.slot0.add(i * self.stride + self.head) }
    }

    /// The first `len` bytes of slot `i`'s datagram room, as received by the socket code.
    /// Borrowing the lease keeps the producer from moving them until the slice is gone.
    #[inline]
    pub(in crate::sys) fn landed(&self, i: usize, len: usize) -> &[u8] {
        let len = len.min(self.body());
        // SAFETY: inside the lent region (see body_ptr); while the lease is out the producer
        // writes only header rooms, which no body range covers, so these bytes stay as the
        // kernel wrote them for as long as this borrow of the lease lives.
        unsafe { std::slice::from_raw_parts(self.body_ptr(i), len) }
    }
}

// SAFETY: the producer is moved to the capture thread and used only there; the raw pointer is
// into memory kept alive by the Arc.
unsafe impl Send for RingProducer {}

/// The writer side: reads what the producer published and releases it.
pub struct RingConsumer {
    shared: Arc<Shared>,
    pos: u64,
    base: *const u8,
    len: u64,
}

// SAFETY: as for the producer.
unsafe impl Send for RingConsumer {}

/// A ring of `len` bytes: populated whole, and locked in memory when `lock` and the limits allow.
pub fn byte_ring(len: usize, lock: bool) -> io::Result<(RingProducer, RingConsumer)> {
    byte_ring_with(len, lock, &Prefault::default())
}

/// As [`byte_ring`], reporting the progress of making it ready and giving up on a stop (a
/// recorder's big ring on a cold host takes seconds).
pub fn byte_ring_with(len: usize, lock: bool, how: &Prefault) -> io::Result<(RingProducer, RingConsumer)> {
    ring_over(RingMemory::new(len, lock, how)?, None)
}

/// A ring of `len` bytes that taps can map read-only: memfd memory and a header page whose
/// overwrite frontier ([`share::FRONTIER_WORD`]) the producer keeps (see the module docs).
pub fn shared_byte_ring(len: usize, lock: bool, how: &Prefault) -> io::Result<(RingProducer, RingConsumer)> {
    let hdr = share::HeaderMap::new(share::HEADER_MEMFD)?;
    hdr.words()[share::FRONTIER_WORD].store(len as u64, Ordering::Release);
    ring_over(RingMemory::shared(len, lock, how)?, Some(hdr))
}

fn ring_over(mem: RingMemory, hdr: Option<share::HeaderMap>) -> io::Result<(RingProducer, RingConsumer)> {
    let len = mem.len;
    let base = mem.ptr;
    let shared = Arc::new(Shared {
        mem,
        produced: Padded(AtomicU64::new(0)),
        consumed: Padded(AtomicU64::new(0)),
        hdr,
        pins: std::array::from_fn(|_| AtomicU64::new(UNPINNED)),
    });
    let len = len as u64;
    Ok((
        RingProducer {
            shared: shared.clone(),
            pos: 0,
            limit: len,
            base,
            len,
            lent: None,
            slot_lens: Vec::new(),
            epoch: 0,
        },
        RingConsumer { shared, pos: 0, base, len },
    ))
}

impl RingProducer {
    /// Stream position of the next byte to be written (not yet published).
    #[inline]
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Ring capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.len
    }

    /// Whether the ring memory is locked in RAM.
    pub fn locked(&self) -> bool {
        self.shared.mem.locked
    }

    /// The memory under the ring: its page kind and how long it took to get ready.
    pub fn memory(&self) -> &RingMemory {
        &self.shared.mem
    }

    /// The header page of a shared ring (None: not shared).
    pub fn share_header(&self) -> Option<&share::HeaderMap> {
        self.shared.hdr.as_ref()
    }

    /// Bytes written but not yet released by the consumer (reloads the consumer's position).
    #[inline]
    pub fn fill(&mut self) -> u64 {
        let c = self.shared.consumed.0.load(Ordering::Acquire);
        if self.shared.hdr.is_none() {
            // A shared ring's room grows only through `room`, which publishes the frontier.
            self.limit = c + self.len;
        }
        self.pos - c
    }

    /// Whether `n` more bytes fit now.
    #[inline]
    pub fn room(&mut self, n: u64) -> bool {
        if self.pos + n <= self.limit {
            return true;
        }
        let full = self.shared.consumed.0.load(Ordering::Acquire) + self.len;
        self.limit = match self.shared.hdr.as_ref() {
            None => full,
            Some(h) => {
                // Room in steps: the frontier trails the cursor by most of the ring.
                let l = full.min(self.pos + n.max(self.len / 8));
                let w = &h.words()[share::FRONTIER_WORD];
                if l > w.load(Ordering::Relaxed) {
                    // Seqlock writer: the frontier is stored before any byte below it is
                    // written (the fence orders the store before the writes that follow).
                    w.store(l, Ordering::Relaxed);
                    fence(Ordering::Release);
                }
                l.max(self.limit)
            }
        };
        self.pos + n <= self.limit
    }

    #[inline]
    fn copy_in(&mut self, mut src: &[u8]) {
        while !src.is_empty() {
            let at = (self.pos % self.len) as usize;
            let n = src.len().min(self.len as usize - at);
            // SAFETY: `room` established that [pos, pos + total) lies below consumed + len, so
            // these bytes are owned by the producer (the consumer released them or never had
            // them); `at + n <= len` keeps the copy inside the mapping; src is a distinct slice.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(at), n) };
            self.pos += n as u64;
            src = &src[n..];
        }
    }

    /// Append one record made of `parts`, all or nothing. False when the ring has no room
    /// (the caller counts the record as dropped at the ring), or a lease is out.
    #[inline]
    pub fn write(&mut self, parts: &[&[u8]]) -> bool {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if self.lent.is_some() || !self.room(total as u64) {
            return false;
        }
        for p in parts {
            self.copy_in(p);
        }
        true
    }

    /// Advance to the next multiple of `align` (a power of two dividing the ring size), so the
    /// next byte starts an O_DIRECT-aligned region. False when the ring has no room for the pad.
    pub fn align_to(&mut self, align: u64) -> bool {
        let next = self.pos.div_ceil(align) * align;
        if self.lent.is_some() || !self.room(next - self.pos) {
            return false;
        }
        self.pos = next;
        true
    }

    /// Take back the last bytes written, down to `pos` (not before what was published): a
    /// record the caller decided, after writing it, not to keep.
    #[inline]
    pub fn rewind(&mut self, pos: u64) {
        let published = self.shared.produced.0.load(Ordering::Relaxed);
        if self.lent.is_none() && pos >= published && pos <= self.pos {
            self.pos = pos;
        }
    }

    /// Allocate the bookkeeping for leases of up to `max_slots` slots (once, before receiving).
    pub fn prepare_lending(&mut self, max_slots: usize) {
        self.slot_lens = vec![LEFT_OUT; max_slots];
    }

    /// Lend up to `max` slots of `head + body` bytes at the cursor: as many as fit before the
    /// ring's end and in the room the writer left (none: `None`, and the caller receives
    /// elsewhere). At most what [`prepare_lending`](Self::prepare_lending) allowed.
    pub fn lend(&mut self, head: usize, body: usize, max: usize) -> Option<Lease> {
        let stride = head + body;
        if self.lent.is_some() || body == 0 || stride as u64 > self.len {
            return None;
        }
        let at = (self.pos % self.len) as usize;
        let to_end = self.len as usize - at;
        let mut count = max.min(self.slot_lens.len()).min(to_end / stride);
        if count == 0 {
            return None;
        }
        if !self.room((count * stride) as u64) {
            // Reload once (done by `room`), then lend what the room holds.
            count = count.min(((self.limit - self.pos) / stride as u64) as usize);
            if count == 0 {
                return None;
            }
        }
        self.epoch += 1;
        self.slot_lens[..count].fill(LEFT_OUT);
        self.lent = Some(Lent { first: self.pos, stride, head, count, epoch: self.epoch });
        // SAFETY: at < len, so the pointer is inside the mapping; count * stride <= to_end keeps
        // the whole lease inside it too.
        let slot0 = unsafe { self.base.add(at) };
        Some(Lease { _mem: self.shared.clone(), slot0, stride, head, count, epoch: self.epoch })
    }

    /// Keep the datagram of `len` bytes that landed in slot `slot` of `lease`, with `header`
    /// (exactly the lease's header room) in front of it. False (nothing done) when the
    /// arguments do not describe a landed datagram of the outstanding lease.
    #[inline]
    pub fn commit(&mut self, lease: &Lease, slot: usize, len: usize, header: &[u8]) -> bool {
        let Some(l) = self.lent else { return false };
        if l.epoch != lease.epoch || slot >= l.count || len > l.stride - l.head || header.len() != l.head {
            return false;
        }
        if l.head > 0 {
            // SAFETY: the header room of a slot of the outstanding lease: inside the lent region,
            // owned by the producer (room was checked when lent), and covered by no slice the
            // lease hands out (those start `head` bytes into a slot and end before the next).
            unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), lease.slot0.add(slot * l.stride), l.head) };
        }
        self.slot_lens[slot] = len as u32;
        true
    }

    /// Take back a commit to the outstanding lease: the datagram in slot `slot` is left out
    /// after all (nothing is written; [`settle`](Self::settle) closes the gap).
    #[inline]
    pub fn uncommit(&mut self, slot: usize) {
        if let Some(l) = self.lent {
            if slot < l.count {
                self.slot_lens[slot] = LEFT_OUT;
            }
        }
    }

    /// The lease comes back (by value: no slice of it is alive). The committed records are
    /// closed up in slot order from the old cursor, moving only those behind a left-out or
    /// short one, and the cursor advances past them. Returns the bytes moved.
    pub fn settle(&mut self, lease: Lease) -> usize {
        let Some(l) = self.lent else { return 0 };
        if l.epoch != lease.epoch {
            return 0;
        }
        self.lent = None;
        let mut w = 0usize;
        let mut moved = 0;
        for (i, &n) in self.slot_lens[..l.count].iter().enumerate() {
            if n == LEFT_OUT {
                continue;
            }
            let rec = l.head + n as usize;
            let from = i * l.stride;
            if from != w {
                // SAFETY: both ranges lie inside the lent region (w <= from, and a record is at
                // most a stride), which the producer owns and no slice borrows any more (the
                // lease was given up by value). `copy` allows the overlap of a close-up.
                unsafe { std::ptr::copy(lease.slot0.add(from), lease.slot0.add(w), rec) };
                moved += rec;
            }
            w += rec;
        }
        self.pos = l.first + w as u64;
        moved
    }

    /// Whether a lease is out.
    pub fn lending(&self) -> bool {
        self.lent.is_some()
    }

    /// Make everything written so far visible to the consumer (once per receive batch).
    #[inline]
    pub fn publish(&self) {
        self.shared.produced.0.store(self.pos, Ordering::Release);
    }
}

impl RingConsumer {
    /// Everything up to this position is published and readable.
    #[inline]
    pub fn produced(&self) -> u64 {
        self.shared.produced.0.load(Ordering::Acquire)
    }

    /// Everything before this position has been released to the producer.
    pub fn released(&self) -> u64 {
        self.pos
    }

    /// Ring capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.len
    }

    /// The published bytes from `at`, contiguous in memory: up to `max` bytes, fewer where the
    /// ring wraps or the published data ends. Empty when `at` is outside the readable range.
    pub fn slice(&self, at: u64, max: usize) -> &[u8] {
        let end = self.produced();
        if at < self.pos || at >= end {
            return &[];
        }
        let idx = (at % self.len) as usize;
        let n = ((end - at) as usize).min(max).min(self.len as usize - idx);
        // SAFETY: [at, at + n) lies within [released, produced): published by the producer (the
        // acquire load above makes its writes visible) and not reusable by it until this
        // consumer releases past it, which needs `&mut self` and so ends this borrow first.
        // idx + n <= len keeps the slice inside the mapping.
        unsafe { std::slice::from_raw_parts(self.base.add(idx), n) }
    }

    /// Give the bytes before `upto` back to the producer; never past the start of a range still
    /// [`Pinned`] (the release stops there, and a later one goes on).
    pub fn release(&mut self, upto: u64) {
        debug_assert!(upto >= self.pos && upto <= self.produced());
        let pinned = self.shared.pins.iter().map(|p| p.load(Ordering::Acquire)).min().unwrap_or(UNPINNED);
        let upto = upto.min(pinned).max(self.pos);
        self.pos = upto;
        self.shared.consumed.0.store(upto, Ordering::Release);
    }

    /// Hold `[at, at + len)` of the published, unreleased bytes for another thread (a disk
    /// writer of a scattered recording), which reads it through the returned [`Pinned`] while
    /// this consumer goes on: until it is dropped, no release passes `at`. `None` when the
    /// range is not readable or every pin slot is taken.
    pub fn pin(&self, at: u64, len: u64) -> Option<Pinned> {
        if at < self.pos || at.checked_add(len)? > self.produced() {
            return None;
        }
        let slot = self
            .shared
            .pins
            .iter()
            .position(|p| p.compare_exchange(UNPINNED, at, Ordering::AcqRel, Ordering::Relaxed).is_ok())?;
        Some(Pinned { shared: self.shared.clone(), slot, base: self.base, len: self.len, from: at, to: at + len })
    }
}

/// A range of a ring's published bytes held for reading on another thread
/// ([`RingConsumer::pin`]); dropping it lets the consumer release past it.
pub struct Pinned {
    shared: Arc<Shared>,
    slot: usize,
    base: *const u8,
    len: u64,
    from: u64,
    to: u64,
}

// SAFETY: the pointer is into memory kept alive by the Arc, and the pinned bytes are never
// written while the pin lives (see `slice`); the pin is only read.
unsafe impl Send for Pinned {}

impl Pinned {
    /// Stream position of the first pinned byte.
    pub fn start(&self) -> u64 {
        self.from
    }

    /// Stream position after the last pinned byte.
    pub fn end(&self) -> u64 {
        self.to
    }

    /// The pinned bytes from `at`, contiguous in memory: up to `max`, fewer where the ring wraps
    /// or the pinned range ends; empty outside it.
    pub fn slice(&self, at: u64, max: usize) -> &[u8] {
        if at < self.from || at >= self.to {
            return &[];
        }
        let idx = (at % self.len) as usize;
        let n = ((self.to - at) as usize).min(max).min(self.len as usize - idx);
        // SAFETY: [at, at + n) lies within [from, to), which was published when the pin was
        // made (checked against `produced` then) and lies at or after the consumer's released
        // position; the consumer's `release` never passes `from` while this pin's slot holds it,
        // so the producer (which writes only below consumed + len) cannot reuse these bytes
        // until the pin is dropped. idx + n <= len keeps the slice inside the mapping.
        unsafe { std::slice::from_raw_parts(self.base.add(idx), n) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.shared.pins[self.slot].store(UNPINNED, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pinned range stays readable on another thread: the consumer's release stops at it, so
    /// the producer cannot write over it, and goes on once the pin is dropped.
    #[test]
    fn pins_hold_releases_back_until_dropped() {
        let (mut p, mut c) = byte_ring(8192, false).unwrap();
        assert!(p.write(&[&[1u8; 4096]]));
        assert!(p.write(&[&[2u8; 4096]]));
        p.publish();
        assert!(c.pin(4096, 8192).is_none(), "not all published");
        let pin = c.pin(4096, 4096).expect("published and unreleased");
        let reader = std::thread::spawn(move || {
            let all = pin.slice(4096, usize::MAX).to_vec();
            assert!(pin.slice(0, 10).is_empty(), "outside the pin");
            all
        });
        c.release(8192);
        assert_eq!(c.released(), 4096, "the release stops at the pin");
        assert!(!p.write(&[&[3u8; 8192]]), "the pinned bytes cannot be overwritten");
        assert_eq!(reader.join().unwrap(), vec![2u8; 4096]);
        c.release(8192);
        assert_eq!(c.released(), 8192, "released once the pin is gone");
        assert!(p.write(&[&[3u8; 8192]]));
    }

    #[test]
    fn wraps_and_refuses_when_full() {
        let (mut p, mut c) = byte_ring(8192, false).unwrap();
        let rec = [7u8; 3000];
        assert!(p.write(&[&rec[..1000], &rec[1000..]]));
        assert!(p.write(&[&rec]));
        assert!(!p.write(&[&rec]), "8192 bytes cannot take a third 3000-byte record");
        p.publish();
        assert_eq!(c.slice(0, usize::MAX).len(), 6000);
        c.release(3000);
        assert!(p.write(&[&[1u8; 3000]]), "room after release");
        p.publish();
        // The third record wraps: 2192 bytes at the end, 808 at the start.
        assert_eq!(c.slice(6000, usize::MAX).len(), 2192);
        assert_eq!(c.slice(8192, usize::MAX), &[1u8; 808][..]);
        assert!(c.slice(100, 10).is_empty(), "released bytes are not readable");
        assert!(!p.align_to(4096), "the pad needs room too");
        c.release(9000);
        assert!(p.align_to(4096));
        assert_eq!(p.position(), 12288);
    }

    /// Slots of 4 header bytes and 8 body bytes: commit 0, 2 and 3 (2 short), leave 1 out,
    /// and the settle closes them up behind the cursor.
    #[test]
    fn a_lease_keeps_what_is_committed_closed_up_in_order() {
        let (mut p, c) = byte_ring(8192, false).unwrap();
        p.prepare_lending(16);
        assert!(p.write(&[b"abc"]));
        let lease = p.lend(4, 8, 4).expect("room for four slots");
        assert_eq!((lease.count(), lease.body()), (4, 8));
        assert!(!p.write(&[b"x"]), "nothing is written at the cursor while a lease is out");
        assert!(p.lend(4, 8, 4).is_none(), "one lease at a time");
        for i in 0..4 {
            // What the socket code does: fill the body rooms.
            // SAFETY (test): body_ptr(i) has room for body() bytes inside the lent region.
            unsafe { std::ptr::write_bytes(lease.body_ptr(i), b'0' + i as u8, 8) };
        }
        assert_eq!(lease.landed(2, 8), b"22222222");
        assert!(p.commit(&lease, 0, 8, b"H0H0"));
        assert!(p.commit(&lease, 1, 8, b"H1H1"));
        assert!(p.commit(&lease, 2, 5, b"H2H2"));
        assert!(p.commit(&lease, 3, 8, b"H3H3"));
        assert!(!p.commit(&lease, 4, 8, b"H4H4"), "no such slot");
        assert!(!p.commit(&lease, 0, 9, b"H0H0"), "longer than a slot");
        assert!(!p.commit(&lease, 0, 8, b"H0"), "a header must fill its room");
        p.uncommit(1);
        let moved = p.settle(lease);
        assert_eq!(moved, (4 + 5) + (4 + 8), "slots 2 and 3 moved down, slot 0 stayed");
        assert_eq!(p.position(), 3 + 12 + 9 + 12);
        p.publish();
        assert_eq!(c.slice(0, usize::MAX), b"abcH0H000000000H2H222222H3H333333333");
        assert!(p.write(&[b"!"]), "writes again once the lease is back");
    }

    /// A lease never crosses the ring's end, never reaches into what the writer still holds,
    /// and a stale lease is refused.
    #[test]
    fn a_lease_stops_at_the_end_and_at_the_writer() {
        let (mut p, mut c) = byte_ring(8192, false).unwrap();
        p.prepare_lending(64);
        assert!(p.write(&[&[1u8; 7000]]));
        let lease = p.lend(0, 500, 64).expect("a slot before the end");
        assert_eq!(lease.count(), 2, "1192 bytes to the end hold two 500-byte slots");
        assert!(p.commit(&lease, 0, 500, &[]));
        p.settle(lease);
        assert_eq!(p.position(), 7500);
        assert!(p.lend(0, 1000, 64).is_none(), "692 bytes to the end: no slot, the caller copies");
        assert!(p.write(&[&[2u8; 692]]));
        // At the ring's start now, but the writer holds everything: no room.
        assert!(p.lend(0, 500, 64).is_none());
        p.publish();
        c.release(1200);
        let lease = p.lend(0, 500, 64).expect("room for two slots again");
        assert_eq!(lease.count(), 2);
        let stale = p.epoch;
        p.settle(lease);
        assert_eq!(p.position(), 8192, "nothing committed, nothing kept");
        assert_eq!(stale, p.epoch);
    }

    #[test]
    fn rewind_takes_back_only_unpublished_bytes() {
        let (mut p, _c) = byte_ring(8192, false).unwrap();
        assert!(p.write(&[&[1u8; 100]]));
        p.publish();
        assert!(p.write(&[&[2u8; 100]]));
        p.rewind(100);
        assert_eq!(p.position(), 100);
        p.rewind(50);
        assert_eq!(p.position(), 100, "published bytes stay");
    }

    #[test]
    fn threads_see_every_byte_in_order() {
        let (mut p, mut c) = byte_ring(1 << 16, false).unwrap();
        let n = 200_000u64;
        let t = std::thread::spawn(move || {
            let mut i = 0u64;
            while i < n {
                if p.write(&[&i.to_le_bytes()[..4], &i.to_le_bytes()[4..]]) {
                    i += 1;
                    if i % 16 == 0 {
                        p.publish();
                    }
                }
            }
            p.publish();
        });
        let mut next = 0u64;
        let mut buf = Vec::new();
        while next < n {
            let at = c.released();
            let s = c.slice(at, 4096);
            if s.is_empty() {
                std::thread::yield_now();
                continue;
            }
            buf.extend_from_slice(s);
            let len = s.len() as u64;
            c.release(at + len);
            while buf.len() >= 8 {
                let v = u64::from_le_bytes(buf[..8].try_into().unwrap());
                assert_eq!(v, next);
                next += 1;
                buf.drain(..8);
            }
        }
        t.join().unwrap();
    }
}
