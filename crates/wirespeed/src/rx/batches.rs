//! Captured datagrams handed to another consumer in batches, through a RAM ring: what the
//! Python binding's `Receiver` reads (numpy views of the ring memory), with the same capture
//! path and ledger as `recv`.
//!
//! The capture side is [`BatchSink`], a [`Sink`]: each receive call lands its datagrams
//! straight in the ring where it can (the ring lends slots, as recording does), each behind a
//! [`HEADER_LEN`]-byte record header ([`RecordHeader`]: time stamp, sequence number, stream,
//! length, source, the format's verdict). Every record takes the same `stride` (header plus a
//! slot of `body` bytes), and no record crosses the ring's end, so a run of records is a 2-D
//! array as it lies. The consumer side is [`BatchReader`]: it takes runs of published records
//! ([`Span`]) and gives their memory back when told, in any order.
//!
//! The capture never waits for the consumer. A datagram that finds no room (the consumer holds
//! or has not yet read what is in the ring) is not kept and is counted, with the receive calls
//! that lost any ([`BatchCounts`]); the sink still says "kept" to the capture, so the ledger
//! counts every datagram that arrived, exactly as `recv`'s does. Datagrams longer than the slot
//! are counted apart (`oversize`). Duplicates and invalid datagrams are handed over as they
//! arrived, the format's verdict in their header.

use super::sink::Sink;
use crate::sys::{self, Lease, RingConsumer, RingProducer};
use crate::wire::{Invalid, PacketInfo};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of the header in front of every record.
pub const HEADER_LEN: usize = 48;

/// Where each header field sits (little-endian), for readers in other languages.
pub mod field {
    /// Receive time, ns since the Unix epoch (u64).
    pub const TIME_NS: usize = 0;
    /// The format's sequence number (u64; 0 for an invalid datagram).
    pub const SEQ: usize = 8;
    /// The format's stream id, e.g. the VDIF thread (u32).
    pub const STREAM: usize = 16;
    /// Datagram bytes (u32); the slot after the header holds them, the rest is undefined.
    pub const LEN: usize = 20;
    /// Source port (u16).
    pub const PORT: usize = 24;
    /// Address family of the source: 4, 6, or 0 when unknown (u8).
    pub const FAMILY: usize = 26;
    /// The format's verdict (u8): 0 valid, 1 wrong length, 2 bad header, 3 bad payload.
    pub const STATUS: usize = 27;
    /// Source address: 16 bytes, an IPv4 address in the first 4.
    pub const ADDR: usize = 32;
}

/// One record header, as [`HEADER_LEN`] bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordHeader {
    /// Receive time, ns since the Unix epoch.
    pub time_ns: u64,
    /// The format's sequence number.
    pub seq: u64,
    /// The format's stream id.
    pub stream: u32,
    /// Datagram bytes.
    pub len: u32,
    /// Where it came from.
    pub src: Option<SocketAddr>,
    /// 0 valid, else 1 + [`Invalid`] as a number.
    pub status: u8,
}

impl RecordHeader {
    /// The header of a datagram the format judged `info`.
    pub fn new(time_ns: u64, len: usize, src: Option<SocketAddr>, info: &Result<PacketInfo, Invalid>) -> Self {
        let (seq, stream, status) = match info {
            Ok(i) => (i.seq, i.stream, 0),
            Err(k) => (0, 0, 1 + *k as u8),
        };
        RecordHeader { time_ns, seq, stream, len: len as u32, src, status }
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[field::TIME_NS..field::TIME_NS + 8].copy_from_slice(&self.time_ns.to_le_bytes());
        h[field::SEQ..field::SEQ + 8].copy_from_slice(&self.seq.to_le_bytes());
        h[field::STREAM..field::STREAM + 4].copy_from_slice(&self.stream.to_le_bytes());
        h[field::LEN..field::LEN + 4].copy_from_slice(&self.len.to_le_bytes());
        h[field::STATUS] = self.status;
        match self.src {
            Some(SocketAddr::V4(a)) => {
                h[field::PORT..field::PORT + 2].copy_from_slice(&a.port().to_le_bytes());
                h[field::FAMILY] = 4;
                h[field::ADDR..field::ADDR + 4].copy_from_slice(&a.ip().octets());
            }
            Some(SocketAddr::V6(a)) => {
                h[field::PORT..field::PORT + 2].copy_from_slice(&a.port().to_le_bytes());
                h[field::FAMILY] = 6;
                h[field::ADDR..field::ADDR + 16].copy_from_slice(&a.ip().octets());
            }
            None => {}
        }
        h
    }

    /// Read a header back (None: fewer than [`HEADER_LEN`] bytes).
    pub fn decode(b: &[u8]) -> Option<RecordHeader> {
        let b = b.get(..HEADER_LEN)?;
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let port = u16::from_le_bytes([b[field::PORT], b[field::PORT + 1]]);
        let src = match b[field::FAMILY] {
            4 => {
                let a: [u8; 4] = b[field::ADDR..field::ADDR + 4].try_into().expect("4 bytes");
                Some(SocketAddr::from((a, port)))
            }
            6 => {
                let a: [u8; 16] = b[field::ADDR..field::ADDR + 16].try_into().expect("16 bytes");
                Some(SocketAddr::from((a, port)))
            }
            _ => None,
        };
        Some(RecordHeader {
            time_ns: u64_at(field::TIME_NS),
            seq: u64_at(field::SEQ),
            stream: u32_at(field::STREAM),
            len: u32_at(field::LEN),
            src,
            status: b[field::STATUS],
        })
    }
}

/// The slot a datagram of at most `max_datagram` bytes takes after its header: rounded up to
/// 8 bytes, so that every record (and every 64-bit header field) stays 8-byte aligned.
pub fn slot_body(max_datagram: usize) -> usize {
    max_datagram.max(1).div_ceil(8) * 8
}

/// What the capture side counts, published after every receive call (relaxed atomics: the
/// capture thread stores, anyone loads).
#[derive(Debug, Default)]
pub struct BatchCounts {
    /// Datagrams handed over (in the ring).
    pub kept: AtomicU64,
    /// Datagrams not handed over because the ring was full (the consumer was too slow).
    pub dropped: AtomicU64,
    /// Receive calls of which at least one datagram was dropped so.
    pub batches_dropped: AtomicU64,
    /// Datagrams longer than the slot, not handed over.
    pub oversize: AtomicU64,
    /// Receive calls.
    pub calls: AtomicU64,
    /// The capture ended: everything it kept is published.
    pub done: AtomicBool,
}

/// The capture side: lays each datagram into the ring behind its header (see the module docs).
pub struct BatchSink {
    ring: RingProducer,
    body: usize,
    stride: usize,
    rt_offset: u64,
    zeros: Vec<u8>,
    counts: Arc<BatchCounts>,
    kept: u64,
    dropped: u64,
    batches_dropped: u64,
    oversize: u64,
    calls: u64,
    dropped_this_call: bool,
}

impl BatchSink {
    /// A sink over `ring` for datagrams of at most `max_datagram` bytes, and the counts it
    /// publishes. The ring's capacity must hold at least one record.
    pub fn new(mut ring: RingProducer, max_datagram: usize) -> Result<(BatchSink, Arc<BatchCounts>), String> {
        let body = slot_body(max_datagram);
        let stride = HEADER_LEN + body;
        if stride as u64 > ring.capacity() {
            return Err(format!(
                "a ring of {} bytes cannot hold one {stride}-byte record: give a larger ring",
                ring.capacity()
            ));
        }
        ring.prepare_lending(super::MAX_BATCH);
        let counts = Arc::new(BatchCounts::default());
        let sink = BatchSink {
            ring,
            body,
            stride,
            rt_offset: sys::realtime_ns().wrapping_sub(sys::monotonic_ns()),
            zeros: vec![0u8; stride],
            counts: counts.clone(),
            kept: 0,
            dropped: 0,
            batches_dropped: 0,
            oversize: 0,
            calls: 0,
            dropped_this_call: false,
        };
        Ok((sink, counts))
    }

    /// Bytes of every record: header plus slot.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Make sure a whole record fits before the ring's end: when fewer than `stride` bytes are
    /// left there, fill them (the reader skips them by the same rule). False: no room.
    #[inline]
    fn fit_before_end(&mut self) -> bool {
        let len = self.ring.capacity();
        let to_end = (len - self.ring.position() % len) as usize;
        if to_end >= self.stride {
            return true;
        }
        self.ring.write(&[&self.zeros[..to_end]])
    }

    #[inline]
    fn not_kept(&mut self) {
        self.dropped += 1;
        self.dropped_this_call = true;
    }

    fn store(&self) {
        let c = &self.counts;
        c.kept.store(self.kept, Ordering::Relaxed);
        c.dropped.store(self.dropped, Ordering::Relaxed);
        c.batches_dropped.store(self.batches_dropped, Ordering::Relaxed);
        c.oversize.store(self.oversize, Ordering::Relaxed);
        c.calls.store(self.calls, Ordering::Relaxed);
    }
}

impl Sink for BatchSink {
    #[inline]
    fn accept(
        &mut self,
        data: &[u8],
        src: Option<SocketAddr>,
        info: &Result<PacketInfo, Invalid>,
        now_ns: u64,
    ) -> bool {
        if data.len() > self.body {
            self.oversize += 1;
            return true;
        }
        let h = RecordHeader::new(now_ns.wrapping_add(self.rt_offset), data.len(), src, info).encode();
        let pad = self.body - data.len();
        if self.fit_before_end() && self.ring.write(&[&h, data, &self.zeros[..pad]]) {
            self.kept += 1;
        } else {
            self.not_kept();
        }
        // Kept or not, the capture's ledger counts it: the consumer's losses are its own.
        true
    }

    fn lend(&mut self, batch: usize) -> Option<Lease> {
        if !self.fit_before_end() {
            return None;
        }
        self.ring.lend(HEADER_LEN, self.body, batch)
    }

    #[inline]
    fn accept_in_place(
        &mut self,
        lease: &Lease,
        slot: usize,
        data: &[u8],
        src: Option<SocketAddr>,
        info: &Result<PacketInfo, Invalid>,
        now_ns: u64,
    ) -> bool {
        let h = RecordHeader::new(now_ns.wrapping_add(self.rt_offset), data.len(), src, info).encode();
        // The whole slot is committed, so every record keeps the stride and none is moved.
        if self.ring.commit(lease, slot, self.body, &h) {
            self.kept += 1;
        } else {
            self.not_kept();
        }
        true
    }

    #[inline]
    fn give_back(&mut self, lease: Lease) {
        self.ring.settle(lease);
    }

    #[inline]
    fn end_batch(&mut self, _now_ns: u64, _socket_drops: Option<u64>) {
        self.calls += 1;
        if self.dropped_this_call {
            self.batches_dropped += 1;
            self.dropped_this_call = false;
        }
        self.ring.publish();
        self.store();
    }

    fn must_stop(&self) -> Option<&'static str> {
        None
    }

    fn finish(&mut self) {
        self.ring.publish();
        self.store();
        self.counts.done.store(true, Ordering::Release);
    }
}

/// A run of records taken by a [`BatchReader`]: `records` records of `stride` bytes from
/// stream position `start`, contiguous in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Stream position of the first record.
    pub start: u64,
    /// Records in the run.
    pub records: usize,
    /// Bytes per record.
    pub stride: usize,
    /// Where the reader's hold on the ring begins (padding before `start` included).
    held_from: u64,
}

impl Span {
    /// Bytes of the run.
    pub fn bytes(&self) -> usize {
        self.records * self.stride
    }
}

/// The consumer side: takes runs of published records and gives their memory back.
pub struct BatchReader {
    cons: RingConsumer,
    stride: usize,
    next: u64,
    /// Runs handed out and not yet given back, oldest first: (held from, end, given back).
    held: VecDeque<(u64, u64, bool)>,
}

impl BatchReader {
    /// A reader of the ring a [`BatchSink`] with this `stride` fills.
    pub fn new(cons: RingConsumer, stride: usize) -> Self {
        // The sink writes nothing before its first record: records start at position 0.
        BatchReader { cons, stride, next: 0, held: VecDeque::new() }
    }

    /// Bytes per record.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Published bytes not yet taken.
    pub fn pending(&self) -> u64 {
        self.cons.produced().saturating_sub(self.next)
    }

    /// Runs taken and not yet given back.
    pub fn held(&self) -> usize {
        self.held.iter().filter(|h| !h.2).count()
    }

    /// Take up to `max` published records, contiguous in memory (fewer where the ring wraps);
    /// None when nothing new is published.
    pub fn next(&mut self, max: usize) -> Option<Span> {
        let produced = self.cons.produced();
        let len = self.cons.capacity();
        let from = self.next;
        let mut at = from;
        let to_end = len - at % len;
        if to_end < self.stride as u64 {
            at += to_end; // the sink's padding: no record starts there
        }
        if produced < at + self.stride as u64 || max == 0 {
            return None;
        }
        let avail = (produced - at) / self.stride as u64;
        let fits = (len - at % len) / self.stride as u64;
        let records = avail.min(fits).min(max as u64) as usize;
        let end = at + (records * self.stride) as u64;
        self.next = end;
        self.held.push_back((from, end, false));
        Some(Span { start: at, records, stride: self.stride, held_from: from })
    }

    /// The bytes of a run taken and not yet given back (empty otherwise).
    pub fn bytes(&self, s: &Span) -> &[u8] {
        if !self.held.iter().any(|h| h.0 == s.held_from && !h.2) {
            return &[];
        }
        let b = self.cons.slice(s.start, s.bytes());
        if b.len() == s.bytes() {
            b
        } else {
            &[]
        }
    }

    /// Give a run back. Its memory returns to the capture once every run taken before it has
    /// been given back too.
    pub fn release(&mut self, s: &Span) {
        if let Some(h) = self.held.iter_mut().find(|h| h.0 == s.held_from && !h.2) {
            h.2 = true;
        }
        while let Some(&(_, end, true)) = self.held.front() {
            self.held.pop_front();
            self.cons.release(end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ByteOrder, Counter, Format};

    fn ok(seq: u64) -> Result<PacketInfo, Invalid> {
        Ok(PacketInfo::new(0, seq))
    }

    #[test]
    fn headers_round_trip() {
        let src: SocketAddr = "198.18.0.1:4000".parse().unwrap();
        let h = RecordHeader::new(123, 8800, Some(src), &ok(77));
        assert_eq!(RecordHeader::decode(&h.encode()), Some(h));
        let v6: SocketAddr = "[2001:2::1]:7".parse().unwrap();
        let h = RecordHeader::new(5, 1, Some(v6), &Err(Invalid::Payload));
        let back = RecordHeader::decode(&h.encode()).unwrap();
        assert_eq!((back.src, back.status, back.seq), (Some(v6), 3, 0));
        assert_eq!(slot_body(8800), 8800);
        assert_eq!(slot_body(1081), 1088);
    }

    /// Copied datagrams fill the ring in whole strides, never across its end; a consumer that
    /// releases nothing makes the capture drop (and count) the rest, never block; given back,
    /// the room returns.
    #[test]
    fn a_slow_consumer_loses_counted_datagrams_and_records_never_wrap() {
        let fmt = Counter::new(64, ByteOrder::Be).unwrap();
        let (prod, cons) = sys::byte_ring(8192, false).unwrap();
        let (mut sink, counts) = BatchSink::new(prod, 64).unwrap();
        let stride = sink.stride();
        assert_eq!(stride, 112);
        let mut reader = BatchReader::new(cons, stride);
        let mut buf = [0u8; 64];
        // 8192 / 112 = 73 records fit before the end.
        for seq in 0..100u64 {
            fmt.emit(0, seq, &mut buf);
            assert!(sink.accept(&buf, None, &ok(seq), 0), "the ledger always counts it");
        }
        sink.end_batch(0, None);
        assert_eq!(counts.kept.load(Ordering::Relaxed), 73);
        assert_eq!(counts.dropped.load(Ordering::Relaxed), 27);
        assert_eq!(counts.batches_dropped.load(Ordering::Relaxed), 1);
        let a = reader.next(50).unwrap();
        let b = reader.next(1000).unwrap();
        assert_eq!((a.records, b.records), (50, 23));
        assert!(reader.next(1000).is_none());
        let bytes = reader.bytes(&b);
        let h = RecordHeader::decode(&bytes[..HEADER_LEN]).unwrap();
        assert_eq!((h.seq, h.len), (50, 64));
        fmt.emit(0, 50, &mut buf);
        assert_eq!(&bytes[HEADER_LEN..HEADER_LEN + 64], &buf[..]);
        // Given back out of order: nothing returns until the older run is back too.
        reader.release(&b);
        fmt.emit(0, 100, &mut buf);
        sink.accept(&buf, None, &ok(100), 0);
        sink.end_batch(0, None);
        assert_eq!(counts.dropped.load(Ordering::Relaxed), 28);
        reader.release(&a);
        assert_eq!(reader.held(), 0);
        // The ring's end had 8192 - 73 * 112 = 16 bytes: padded, and the next record at 0.
        sink.accept(&buf, None, &ok(100), 0);
        sink.end_batch(0, None);
        let c = reader.next(10).unwrap();
        assert_eq!((c.start, c.records), (8192, 1));
        assert_eq!(RecordHeader::decode(reader.bytes(&c)).unwrap().seq, 100);
        assert!(reader.bytes(&a).is_empty(), "a run given back is not readable");
    }

    #[test]
    fn oversize_datagrams_are_counted_apart() {
        let (prod, _cons) = sys::byte_ring(8192, false).unwrap();
        let (mut sink, counts) = BatchSink::new(prod, 64).unwrap();
        sink.accept(&[0u8; 65], None, &Err(Invalid::Length), 0);
        sink.end_batch(0, None);
        assert_eq!(counts.oversize.load(Ordering::Relaxed), 1);
        assert_eq!(counts.kept.load(Ordering::Relaxed), 0);
        assert!(BatchSink::new(sys::byte_ring(4096, false).unwrap().0, 8192).is_err());
    }
}
