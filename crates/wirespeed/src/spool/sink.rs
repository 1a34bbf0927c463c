//! The capture-thread end of a recording: [`RingSink`] lays each kept datagram into the RAM
//! ring in its on-disk form (raw payloads or pcap records) and decides where files end (by
//! size or by wall-clock time), telling the writer through the [`handoff`](super::handoff).
//! It never waits for the writer: when the ring is full a datagram is dropped and counted.
//!
//! Datagrams are received straight into the ring where the layout allows ([`Sink::lend`]):
//! each batch gets slots at the ring's cursor, a pcap record header's room then the datagram
//! (raw: the datagram at its place), so a kept datagram is never copied. What the capture
//! rejects (duplicates; invalid ones unless `keep_invalid`) is taken back, in place or by
//! rewinding a copied record, and counted as not written. Size cuts are made before a batch
//! is lent, and a lease never holds more slots than the file has room for, so a cut never
//! falls inside a batch. Raw files of Mark5B halves (several datagrams a record) and of
//! formats with a stripped transport prefix (VTP) keep the copy path, and so do GRO buffers
//! (the backend gives the lease back); Mark5B halves are also never taken back once written.
//!
//! A sink over a shared ring ([`RingSink::shared`], `record --share`) also publishes, once per
//! batch, where its records end and how many there are, and each file cut, for taps
//! ([`share`](super::share)): a few stores per batch, no system call.

use super::handoff::{Break, Cut, Shared, ALIGN};
use super::{pcap_global_header, pcap_record_header, pcap_record_header_v6, FileFormat, ReadLayout};
use crate::rx::{Reject, Sink};
use crate::sys::{self, Lease, RingProducer};
use crate::wire::{Invalid, PacketInfo};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

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
    /// Destination named in pcap headers for IPv4 senders (0.0.0.0 for a socket on every
    /// address) and for IPv6 senders (`::` likewise).
    dst4: SocketAddrV4,
    dst6: SocketAddrV6,
    /// pcap header room of a lent slot: the one family that can arrive (IPv4 44 bytes, IPv6
    /// 64), or `None` on a dual-stack socket, where both can and no single room fits: such a
    /// pcap recording copies each datagram behind its own header instead of lending.
    pcap_head: Option<usize>,
    rt_offset: u64,
    rotation: Rotation,
    file_start: u64,
    next_time_cut: u64,
    ring_full: u64,
    not_written: u64,
    socket_drops: u64,
    high_water: u64,
    now: u64,
    /// Keep invalid datagrams (evidence in pcap files) instead of leaving them out.
    keep_invalid: bool,
    /// Where the last accepted datagram went, so that a rejection can take it back.
    last: Last,
    /// Whether this layout can receive in place (see the module docs).
    in_place: bool,
    /// The datagram length of the last kept datagram (slot size for formats without a fixed one).
    learned_len: usize,
    /// Records in the ring so far (kept datagrams), published to taps.
    kept: u64,
    /// The publisher of a shared ring.
    share: Option<super::share::Publisher>,
    /// Raw files: the ring position at which the next time mark is due (`u64::MAX`: none,
    /// pcap records carry their own times), and where and when the last was made.
    next_mark: u64,
    mark_pos: u64,
    mark_ns: u64,
    /// The ring position at the end of the last batch: where this batch's records start.
    batch_start: u64,
}

/// Where the last accepted datagram's bytes are.
#[derive(Clone, Copy, Debug)]
enum Last {
    /// Nowhere: not written, or not to be taken back.
    Nothing,
    /// Copied into the ring from this position on.
    Copied(u64),
    /// Committed in this slot of the outstanding lease.
    InPlace(usize),
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
        let (dst4, dst6, pcap_head) = match dst {
            SocketAddr::V4(a) => {
                (a, SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, a.port(), 0, 0), Some(super::PCAP_RECORD_OVERHEAD))
            }
            SocketAddr::V6(a) => (
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, a.port()),
                SocketAddrV6::new(*a.ip(), a.port(), 0, 0),
                (!crate::addr::is_dual_stack(dst)).then_some(super::PCAP_RECORD_OVERHEAD_V6),
            ),
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
        let start = ring.position();
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
            dst4,
            dst6,
            pcap_head,
            rt_offset: unix.wrapping_sub(mono),
            rotation,
            file_start: start,
            next_time_cut: 0,
            ring_full: 0,
            not_written: 0,
            socket_drops: 0,
            high_water: 0,
            now: mono,
            keep_invalid: false,
            last: Last::Nothing,
            in_place: if layout.file_format == FileFormat::Pcap {
                pcap_head.is_some()
            } else {
                parts == 1 && strip == 0 && fixed_len > 0
            },
            learned_len: 0,
            kept: 0,
            share: None,
            next_mark: if layout.file_format == FileFormat::Raw { start } else { u64::MAX },
            mark_pos: start,
            mark_ns: 0,
            batch_start: start,
        };
        s.ring.prepare_lending(crate::rx::MAX_BATCH);
        s.next_time_cut = s.next_cut_after(unix);
        if s.file_format == FileFormat::Pcap {
            let written = s.ring.write(&[&pcap_global_header()]);
            debug_assert!(written, "an empty ring has room for a header");
        }
        s
    }

    /// Keep datagrams the format finds invalid (pcap evidence of what arrived) rather than
    /// leaving them out of the file (the default).
    pub fn keep_invalid(mut self, keep: bool) -> Self {
        self.keep_invalid = keep;
        self
    }

    /// The ring back, once the capture has finished with this sink (a station records its next
    /// scan into the same ring, made ready once).
    pub fn into_ring(self) -> RingProducer {
        self.ring
    }

    /// Publish the ring to taps, if it is a shared one (`sys::ring::shared_byte_ring`).
    pub fn shared(mut self) -> Self {
        self.share = super::share::publisher_for(&self.ring);
        self
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
        if let (Some(p), Some(h)) = (self.share.as_mut(), self.ring.share_header()) {
            p.file_break(h.words(), end, next);
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
        self.last = Last::Nothing;
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
                self.last = Last::Copied(self.ring.position());
                self.ring.write(&[rec])
            }
            FileFormat::Pcap => {
                let at = now_ns.wrapping_add(self.rt_offset);
                match src {
                    Some(SocketAddr::V4(src)) => {
                        self.size_cut(super::PCAP_RECORD_OVERHEAD + data.len());
                        let h = pcap_record_header(at, src, self.dst4, data.len());
                        self.last = Last::Copied(self.ring.position());
                        self.ring.write(&[&h, data])
                    }
                    Some(SocketAddr::V6(src)) => {
                        self.size_cut(super::PCAP_RECORD_OVERHEAD_V6 + data.len());
                        let h = pcap_record_header_v6(at, src, self.dst6, data);
                        self.last = Last::Copied(self.ring.position());
                        self.ring.write(&[&h, data])
                    }
                    None => {
                        self.not_written += 1;
                        return true;
                    }
                }
            }
        };
        if ok {
            self.learned_len = data.len();
            self.kept += 1;
        } else {
            self.last = Last::Nothing;
            self.ring_full += 1;
        }
        ok
    }

    fn lend(&mut self, batch: usize) -> Option<Lease> {
        if !self.in_place {
            return None;
        }
        let body = if self.fixed_len > 0 { self.fixed_len } else { self.learned_len };
        if body == 0 {
            return None; // nothing learned yet: copy until the first datagram says its length
        }
        let (head, min) = match self.file_format {
            FileFormat::Pcap => (self.pcap_head?, super::PCAP_GLOBAL_LEN as u64),
            FileFormat::Raw => (0, 0),
        };
        let stride = (head + body) as u64;
        let mut max = batch;
        if let Some(limit) = self.rotation.max_bytes {
            // Cut now if the next record would not fit, then lend no more than the file holds:
            // a size cut never falls inside a batch.
            self.size_cut(stride as usize);
            let used = self.ring.position() - self.file_start;
            let fit = limit.saturating_sub(used) / stride;
            let fit = if used <= min { fit.max(1) } else { fit };
            max = max.min(fit as usize);
        }
        self.ring.lend(head, body, max)
    }

    #[inline]
    fn accept_in_place(
        &mut self,
        lease: &Lease,
        slot: usize,
        data: &[u8],
        src: Option<SocketAddr>,
        _info: &std::result::Result<PacketInfo, Invalid>,
        now_ns: u64,
    ) -> bool {
        self.now = now_ns;
        self.last = Last::Nothing;
        let committed = match self.file_format {
            FileFormat::Raw => {
                if data.len() != self.fixed_len {
                    self.not_written += 1;
                    return true;
                }
                self.ring.commit(lease, slot, data.len(), &[])
            }
            FileFormat::Pcap => {
                // The lease's header room fits the one family this socket receives (lending
                // is off on a dual-stack one), so the header below always fills it exactly.
                let at = now_ns.wrapping_add(self.rt_offset);
                match src {
                    Some(SocketAddr::V4(src)) => {
                        let h = pcap_record_header(at, src, self.dst4, data.len());
                        self.ring.commit(lease, slot, data.len(), &h)
                    }
                    Some(SocketAddr::V6(src)) => {
                        let h = pcap_record_header_v6(at, src, self.dst6, data);
                        self.ring.commit(lease, slot, data.len(), &h)
                    }
                    None => {
                        self.not_written += 1;
                        return true;
                    }
                }
            }
        };
        if committed {
            self.last = Last::InPlace(slot);
            self.learned_len = data.len();
            self.kept += 1;
        } else {
            self.ring_full += 1; // not reached: a landed datagram always fits its slot
        }
        committed
    }

    #[inline]
    fn give_back(&mut self, lease: Lease) {
        self.ring.settle(lease);
        self.last = Last::Nothing;
    }

    #[inline]
    fn reject(&mut self, why: Reject) {
        if why == Reject::Invalid && self.keep_invalid {
            return;
        }
        match std::mem::replace(&mut self.last, Last::Nothing) {
            Last::Nothing => return,
            Last::Copied(at) => self.ring.rewind(at),
            Last::InPlace(slot) => self.ring.uncommit(slot),
        }
        self.kept -= 1;
        self.not_written += 1;
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
        let pos = self.ring.position();
        if self.next_mark != u64::MAX && pos > self.mark_pos {
            // Raw files' arrival times (the time index): a few stores once per MiB, or once a
            // tenth of a second while data arrives. After a quiet spell the batch's start is
            // marked too: its records arrived just before now, not when the last mark was made.
            let idle = unix.saturating_sub(self.mark_ns) >= super::index::MARK_IDLE_NS;
            if pos >= self.next_mark || idle {
                if idle && self.batch_start > self.mark_pos {
                    self.shared.push_mark(self.batch_start, unix);
                }
                self.shared.push_mark(pos, unix);
                (self.mark_pos, self.mark_ns, self.next_mark) = (pos, unix, pos + super::index::MARK_EVERY);
            }
        }
        self.batch_start = pos;
        if let (Some(p), Some(h)) = (self.share.as_mut(), self.ring.share_header()) {
            p.publish(h.words(), pos, self.kept);
        }
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
        if let (Some(p), Some(h)) = (self.share.as_mut(), self.ring.share_header()) {
            p.finish(h.words(), self.ring.position(), self.kept);
        }
        let f = &self.shared.final_counts;
        f.ring_full.store(self.ring_full, Ordering::Relaxed);
        f.not_written.store(self.not_written, Ordering::Relaxed);
        f.socket_drops.store(self.socket_drops, Ordering::Relaxed);
        f.unix_ns.store(sys::realtime_ns(), Ordering::Relaxed);
        self.shared.final_pos.store(self.ring.position(), Ordering::Relaxed);
        self.shared.done.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::super::PCAP_RECORD_OVERHEAD;
    use super::*;
    use crate::wire::{ByteOrder, Counter, Format};

    #[test]
    fn sink_counts_ring_full_and_cuts_files_by_size() {
        let fmt: Arc<dyn Format> = Arc::new(Counter::new(1024, ByteOrder::Be).unwrap());
        let layout = ReadLayout::for_stream(&fmt, FileFormat::Raw).unwrap();
        let (prod, mut cons) = sys::byte_ring(16384, false).unwrap();
        let shared = Arc::new(Shared::default());
        let rot = Rotation { max_bytes: Some(4096), period: None };
        let mut sink = RingSink::new(prod, shared.clone(), &layout, &fmt, "127.0.0.1:9".parse().unwrap(), rot);
        let mut buf = [0u8; 1024];
        let ok = Ok(PacketInfo::new(0, 0));
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

    /// Datagrams received straight into lent slots over loopback: kept ones are committed in
    /// place behind their pcap headers, a rejected one (a duplicate) leaves no byte, a longer
    /// one than the slot is copied whole, and the records end up contiguous and in order.
    #[test]
    fn in_place_records_are_exact_and_rejects_leave_nothing() {
        use std::net::UdpSocket;
        use std::os::fd::AsRawFd;
        let fmt: Arc<dyn Format> = Arc::new(Counter::new(64, ByteOrder::Be).unwrap());
        let layout = ReadLayout::for_stream(&fmt, FileFormat::Pcap).unwrap();
        let (prod, cons) = sys::byte_ring(1 << 16, false).unwrap();
        let shared = Arc::new(Shared::default());
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        sys::set_rcvtimeo(rx.as_raw_fd(), Duration::from_secs(5)).unwrap();
        let mut sink = RingSink::new(prod, shared, &layout, &fmt, rx.local_addr().unwrap(), Rotation::default());
        let counter = |seq: u64| {
            let mut b = [0u8; 64];
            fmt.emit(0, seq, &mut b);
            b.to_vec()
        };
        // 0, 1, 1 again, 2, 3, one longer than a slot (copied), 4.
        let sent = vec![counter(0), counter(1), counter(1), counter(2), counter(3), vec![7u8; 100], counter(4)];
        for d in &sent {
            tx.send(d).unwrap();
        }
        let mut batch = sys::RecvBatch::new(16, 65536);
        let ok = Ok(PacketInfo::new(0, 0));
        let mut lease = sink.lend(16).expect("an empty ring lends");
        assert_eq!((lease.count(), lease.body()), (16, 64));
        let mut n = 0;
        while n < sent.len() {
            // The kernel may hand them over in more than one call: lend again for each.
            let got = batch.recv_lent(rx.as_raw_fd(), false, &mut lease).unwrap();
            let src = batch.meta(0).src;
            for i in 0..batch.in_place() {
                let data = batch.lent_data(&lease, i);
                assert_eq!(data, &sent[n + i][..]);
                assert!(sink.accept_in_place(&lease, i, data, src, &ok, 0));
                if n + i == 2 {
                    sink.reject(Reject::Duplicate);
                }
            }
            let in_place = batch.in_place();
            sink.give_back(lease);
            for i in in_place..got {
                assert_eq!(batch.data(i), &sent[n + i][..], "copied whole");
                assert!(sink.accept(batch.data(i), src, &ok, 0));
            }
            n += got;
            lease = sink.lend(16).expect("room for more");
        }
        sink.give_back(lease);
        sink.end_batch(0, None);
        assert_eq!(sink.not_written, 1);
        let kept: Vec<&Vec<u8>> = sent.iter().enumerate().filter(|&(i, _)| i != 2).map(|(_, d)| d).collect();
        let all = cons.slice(0, usize::MAX);
        let want: usize =
            super::super::PCAP_GLOBAL_LEN + kept.iter().map(|d| PCAP_RECORD_OVERHEAD + d.len()).sum::<usize>();
        assert_eq!(all.len(), want);
        let mut at = super::super::PCAP_GLOBAL_LEN;
        for d in kept {
            let caplen = u32::from_le_bytes(all[at + 8..at + 12].try_into().unwrap()) as usize;
            assert_eq!(caplen, 28 + d.len());
            at += PCAP_RECORD_OVERHEAD;
            assert_eq!(&all[at..at + d.len()], &d[..]);
            at += d.len();
        }
    }
}
