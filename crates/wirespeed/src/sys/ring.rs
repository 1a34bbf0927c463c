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

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub mod memory;
pub use memory::{PageKind, RingMemory};

/// Alignment of the ring's memory and of file starts within it: what O_DIRECT requires.
pub const RING_ALIGN: usize = 4096;

#[repr(align(128))]
struct Padded(AtomicU64);

struct Shared {
    mem: RingMemory,
    produced: Padded,
    consumed: Padded,
}

/// The capture side: appends records.
pub struct RingProducer {
    shared: Arc<Shared>,
    pos: u64,
    limit: u64,
    base: *mut u8,
    len: u64,
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

/// A ring of `len` bytes: populated, and locked in memory when `lock` and the limits allow.
pub fn byte_ring(len: usize, lock: bool) -> io::Result<(RingProducer, RingConsumer)> {
    let mem = RingMemory::new(len, lock)?;
    let base = mem.ptr;
    let shared = Arc::new(Shared { mem, produced: Padded(AtomicU64::new(0)), consumed: Padded(AtomicU64::new(0)) });
    let len = len as u64;
    Ok((
        RingProducer { shared: shared.clone(), pos: 0, limit: len, base, len },
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

    /// Bytes written but not yet released by the consumer (reloads the consumer's position).
    #[inline]
    pub fn fill(&mut self) -> u64 {
        let c = self.shared.consumed.0.load(Ordering::Acquire);
        self.limit = c + self.len;
        self.pos - c
    }

    /// Whether `n` more bytes fit now.
    #[inline]
    pub fn room(&mut self, n: u64) -> bool {
        if self.pos + n <= self.limit {
            return true;
        }
        self.limit = self.shared.consumed.0.load(Ordering::Acquire) + self.len;
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
    /// (the caller counts the record as dropped at the ring).
    #[inline]
    pub fn write(&mut self, parts: &[&[u8]]) -> bool {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if !self.room(total as u64) {
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
        if !self.room(next - self.pos) {
            return false;
        }
        self.pos = next;
        true
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

    /// Give the bytes before `upto` back to the producer.
    pub fn release(&mut self, upto: u64) {
        debug_assert!(upto >= self.pos && upto <= self.produced());
        self.pos = upto;
        self.shared.consumed.0.store(upto, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
