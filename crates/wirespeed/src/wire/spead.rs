//! SPEAD (formats.md section 4), the packet format of CASPER/MeerKAT-style instruments, in its
//! 64-bit flavours: SPEAD-64-48 (header `53 04 02 06`, MeerKAT) and SPEAD-64-40 (`53 04 03 05`).
//!
//! A heap of `heap` payload bytes is sent as `ceil(heap / payload)` packets. Every emitted packet
//! carries the same seven item pointers, as MeerKAT's FPGA engines do: heap counter (0x1), heap
//! size (0x2), heap offset (0x3), payload length (0x4), a timestamp (0x1600, immediate), the
//! sender's stream number (0x4101, immediate) and the data item (0x4300, at heap address 0).
//!
//! Stream and sequence number: SPEAD has no stream id of its own, so every datagram is stream 0
//! of its source. Heap counters start at `first` and step by `step` (spead2 senders may use any
//! start and step; F-engines stride by the number of engines). Each heap takes `slots`
//! sequence numbers, the packet count of a data heap (`heap` bytes, a first packet of `lead`
//! payload bytes, then packets of `payload` bytes, the last one shorter):
//! `seq = (counter - first) / step * slots + ceil(offset / payload)`. Rounding up numbers the
//! packets of any heap split the way conforming senders split them (spead2 shortens a heap's
//! first packet by the item pointers it carries). Every packet but a heap's first and last must
//! carry exactly `payload` bytes; another packetization is refused as a header fault, never
//! guessed at.
//!
//! Heaps of another size are counted too: every packet carries its heap's size, from which it
//! knows its heap's packet count; a heap with fewer packets than `slots` (descriptors alone,
//! a short final heap) leaves its other numbers unused ([`super::Absent`]), which the ledger
//! counts neither received nor lost. Limitations, said where they bite: a heap lost entirely
//! is counted as `slots` lost packets, whatever its size; packets of a heap larger than the
//! numbering holds (spead2's first heap, which carries descriptors beside the data) beyond
//! `slots` are counted apart on [`UNSEQUENCED`], so their loss would not show.
//!
//! Independent senders (spead2): stream-control heaps (item 0x6, start and stop) are valid but
//! hold no data: they are counted apart on [`UNSEQUENCED`], never as loss or as invalid.
//! Payload fills other than `any` check the bytes of heaps of the configured size.

use super::fill::{At, Fill};
use super::stream::UNSEQUENCED;
use super::view::{be_u16, be_u64, check_len, set_be_u16, set_be_u64, Truncated};
use super::{Absent, Format, Invalid, Mismatch, PacketInfo, Shown};

/// SPEAD magic number (byte 0).
pub const MAGIC: u8 = 0x53;
/// SPEAD version (byte 1).
pub const VERSION: u8 = 4;
/// Item: heap counter.
pub const HEAP_CNT: u64 = 0x1;
/// Item: heap size in bytes.
pub const HEAP_SIZE: u64 = 0x2;
/// Item: offset of this packet's payload in the heap.
pub const HEAP_OFFSET: u64 = 0x3;
/// Item: payload bytes in this packet.
pub const PAYLOAD_LENGTH: u64 = 0x4;
/// Item: an item descriptor (heap holds metadata, no data).
pub const ITEM_DESCRIPTOR: u64 = 0x5;
/// Item: stream control (0 start, 2 stop).
pub const STREAM_CONTROL: u64 = 0x6;
/// The timestamp item (MeerKAT's, in ADC samples since the instrument's sync time): what a
/// recording's time index keeps as a SPEAD stream's own time.
pub const TIMESTAMP: u64 = 0x1600;
/// Item pointers in every emitted packet.
const ITEMS: usize = 7;

/// Most packets a heap may be cut into: what one datagram of a short heap may set aside in the
/// ledger is bounded by it.
pub const MAX_PACKETS_PER_HEAP: u64 = 1 << 16;

/// Bytes in the SPEAD header (before the item pointers).
pub const HEADER_LEN: usize = 8;
/// Bytes in an item pointer.
pub const ITEM_LEN: usize = 8;

/// Where each header field sits (formats.md section 4, big-endian).
mod field {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const ITEM_ID_WIDTH: usize = 2;
    pub const HEAP_ADDR_WIDTH: usize = 3;
    pub const RESERVED: crate::wire::view::Field = 4..6;
    pub const NUM_ITEMS: crate::wire::view::Field = 6..8;
}

/// One item pointer: immediate flag (bit 63), item id, and value or heap address in the low
/// `addr_bits` bits. The one place that packs and unpacks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemPointer {
    /// The value is the item itself (else a byte offset into the heap payload).
    pub immediate: bool,
    /// Item identifier.
    pub id: u64,
    /// Immediate value or heap address.
    pub value: u64,
}

impl ItemPointer {
    /// Unpack a pointer of a flavour with `addr_bits`-bit heap addresses.
    #[inline]
    pub fn decode(raw: u64, addr_bits: u32) -> ItemPointer {
        ItemPointer {
            immediate: raw >> 63 != 0,
            id: (raw >> addr_bits) & ((1u64 << (63 - addr_bits)) - 1),
            value: raw & ((1u64 << addr_bits) - 1),
        }
    }

    /// Pack for a flavour with `addr_bits`-bit heap addresses (value bits beyond them dropped).
    #[inline]
    pub fn encode(self, addr_bits: u32) -> u64 {
        u64::from(self.immediate) << 63 | self.id << addr_bits | (self.value & ((1u64 << addr_bits) - 1))
    }
}

/// A view of a SPEAD packet: header, item pointers, payload.
#[derive(Clone, Copy, Debug)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without a length check (accessors panic on a short buffer).
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view, refused when the buffer cannot hold the header and the item pointers it counts.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Truncated> {
        check_len(buffer.as_ref(), HEADER_LEN)?;
        let p = Packet { buffer };
        check_len(p.buffer.as_ref(), p.header_len())?;
        Ok(p)
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Magic number (0x53).
    pub fn magic(&self) -> u8 {
        self.b()[field::MAGIC]
    }
    /// Version (4).
    pub fn version(&self) -> u8 {
        self.b()[field::VERSION]
    }
    /// Item identifier width in bytes, immediate flag included.
    pub fn item_id_width(&self) -> u8 {
        self.b()[field::ITEM_ID_WIDTH]
    }
    /// Heap address width in bytes.
    pub fn heap_addr_width(&self) -> u8 {
        self.b()[field::HEAP_ADDR_WIDTH]
    }
    /// Number of item pointers.
    pub fn num_items(&self) -> usize {
        usize::from(be_u16(self.b(), field::NUM_ITEMS))
    }
    /// Bytes of header and item pointers.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + ITEM_LEN * self.num_items()
    }
    /// Raw item pointer `i` (`i < num_items()`).
    pub fn item(&self, i: usize) -> u64 {
        let o = HEADER_LEN + ITEM_LEN * i;
        be_u64(self.b(), o..o + ITEM_LEN)
    }
    /// The payload after the item pointers.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Write the header of a 64-bit flavour with `addr_bytes`-byte heap addresses and
    /// `items` item pointers.
    pub fn set_header(&mut self, addr_bytes: u8, items: u16) {
        let b = self.buffer.as_mut();
        b[field::MAGIC] = MAGIC;
        b[field::VERSION] = VERSION;
        b[field::ITEM_ID_WIDTH] = 8 - addr_bytes;
        b[field::HEAP_ADDR_WIDTH] = addr_bytes;
        set_be_u16(b, field::RESERVED, 0);
        set_be_u16(b, field::NUM_ITEMS, items);
    }
    /// Write raw item pointer `i`.
    pub fn set_item(&mut self, i: usize, raw: u64) {
        let o = HEADER_LEN + ITEM_LEN * i;
        set_be_u64(self.buffer.as_mut(), o..o + ITEM_LEN, raw)
    }
    /// The payload after the item pointers, to write.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

/// Settings of a SPEAD stream. `Default`: SPEAD-64-48, 64 KiB heaps in 8 KiB packets, heap
/// counters 1, 2, 3, ..., counter payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpeadConfig {
    /// Payload bytes per heap (every data heap has this size).
    pub heap: u64,
    /// Payload bytes of a full packet: every packet but a heap's first and last carries exactly
    /// this many.
    pub payload: usize,
    /// Payload bytes of a data heap's first packet, when a sender shortens it by the item
    /// pointers it carries (spead2 does); `None`: the same as `payload`. Sets, with `heap`, how
    /// many numbers each heap takes.
    pub lead: Option<usize>,
    /// Heap counter of the first heap (sequence numbers 0..packets_per_heap).
    pub first: u64,
    /// Step between consecutive heap counters (1 or more).
    pub step: u64,
    /// Heap address width in bits: 48 (SPEAD-64-48) or 40 (SPEAD-64-40).
    pub addr_bits: u32,
    /// Payload fill, positioned at `heap_index * heap + offset`.
    pub fill: Fill,
}

impl Default for SpeadConfig {
    fn default() -> Self {
        SpeadConfig { heap: 65_536, payload: 8192, lead: None, first: 1, step: 1, addr_bits: 48, fill: Fill::Counter }
    }
}

/// Packets in a heap of `heap` bytes whose first packet carries `lead` payload bytes and the
/// others `payload` (the last one what is left).
#[inline]
fn slots(heap: u64, lead: u64, payload: u64) -> u64 {
    if heap <= lead {
        1
    } else {
        1 + (heap - lead).div_ceil(payload)
    }
}

/// SPEAD heaps over UDP (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spead {
    cfg: SpeadConfig,
    per_heap: u64,
    mask: u64,
    /// `cfg.lead` resolved (a data heap's first packet's payload).
    lead: u64,
}

impl Spead {
    /// A SPEAD format.
    pub fn new(cfg: SpeadConfig) -> Result<Self, String> {
        if cfg.addr_bits != 48 && cfg.addr_bits != 40 {
            return Err(format!(
                "SPEAD heap address width {} must be 48 (SPEAD-64-48) or 40 (SPEAD-64-40)",
                cfg.addr_bits
            ));
        }
        let mask = (1u64 << cfg.addr_bits) - 1;
        if cfg.payload == 0 || 8 + 8 * ITEMS + cfg.payload > 65_507 {
            return Err(format!(
                "SPEAD payload per packet {} must be 1 to {} bytes (a UDP datagram holds 65507 with the {}-byte header)",
                cfg.payload,
                65_507 - 8 - 8 * ITEMS,
                8 + 8 * ITEMS
            ));
        }
        if cfg.heap == 0 || cfg.heap > mask {
            return Err(format!("SPEAD heap size {} must be 1 to {mask} bytes", cfg.heap));
        }
        let lead = cfg.lead.unwrap_or(cfg.payload);
        if lead == 0 || lead > cfg.payload {
            return Err(format!(
                "SPEAD lead {lead} (payload bytes of a heap's first packet) must be 1 to the full packet's payload ({})",
                cfg.payload
            ));
        }
        let per_heap = slots(cfg.heap, lead as u64, cfg.payload as u64);
        if per_heap > MAX_PACKETS_PER_HEAP {
            return Err(format!(
                "SPEAD heaps of {} bytes in packets of {} are {per_heap} packets each: at most {MAX_PACKETS_PER_HEAP} are counted",
                cfg.heap, cfg.payload
            ));
        }
        if cfg.step == 0 || cfg.step > mask || cfg.first > mask {
            return Err(format!(
                "SPEAD heap counter first {} and step {} must fit {} bits, step at least 1",
                cfg.first, cfg.step, cfg.addr_bits
            ));
        }
        Ok(Spead { cfg, per_heap, mask, lead: lead as u64 })
    }

    /// The settings.
    pub fn config(&self) -> &SpeadConfig {
        &self.cfg
    }

    /// Packets per heap.
    pub fn packets_per_heap(&self) -> u64 {
        self.per_heap
    }

    /// Whether every heap is the same number of equal packets, as wirespeed sends them: no
    /// shortened first packet, a heap a whole number of packets.
    pub fn uniform(&self) -> bool {
        self.cfg.lead.map_or(true, |l| l == self.cfg.payload) && self.cfg.heap % self.cfg.payload as u64 == 0
    }

    #[inline]
    fn pointer(&self, immediate: bool, id: u64, value: u64) -> u64 {
        ItemPointer { immediate, id, value }.encode(self.cfg.addr_bits)
    }
}

/// A SPEAD stream's heaps, read from its packet ledger: how many heaps the stream's numbers
/// span, how many arrived whole, how many lost some packets (and how many payload bytes), and
/// how many lost every packet. What spead2's receiver reports as complete and incomplete
/// heaps, for one stream, with the loss in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeapCounts {
    /// Heaps from the first to the last number seen (every segment).
    pub heaps: u64,
    /// Heaps of which every packet arrived.
    pub complete: u64,
    /// Heaps of which some packets, not all, were lost.
    pub incomplete: u64,
    /// Heaps of which every packet was lost.
    pub lost: u64,
    /// Payload bytes missing from incomplete and lost heaps.
    pub missing_bytes: u64,
}

impl Spead {
    /// Payload bytes of packet `k` of a data heap.
    fn packet_bytes(&self, k: u64) -> u64 {
        let (p, lead, heap) = (self.cfg.payload as u64, self.lead, self.cfg.heap);
        match k {
            0 => lead.min(heap),
            k if k + 1 == self.per_heap => heap - lead - (self.per_heap - 2) * p,
            _ => p,
        }
    }

    /// Payload bytes of packets `a..=b` of a data heap, without a loop.
    fn packets_bytes(&self, a: u64, b: u64) -> u64 {
        let n = b - a + 1;
        let mut bytes = n.saturating_mul(self.cfg.payload as u64);
        for k in [0, self.per_heap - 1] {
            if (a..=b).contains(&k) {
                bytes = bytes - self.cfg.payload as u64 + self.packet_bytes(k);
            }
        }
        if self.per_heap == 1 && n == 1 {
            bytes = self.packet_bytes(0);
        }
        bytes
    }

    /// The heaps of a stream whose ledger has these `segments` and `gaps` (numbers as
    /// [`Format::check`] gives them). `None` when the ledger kept too few gap ranges to say
    /// (`ranges_dropped`), or its numbers wrap. Missing bytes are counted at a data heap's
    /// packet sizes: exact for data heaps, the nearest the ledger knows for heaps of another
    /// size. A heap the capture joined after its first packets, or left before its last
    /// without an end (a stop heap) to say so, counts as complete from what it saw. Constant
    /// work per gap range, however long.
    pub fn heaps(
        &self,
        segments: &[crate::ledger::Segment],
        gaps: &[crate::ledger::GapRange],
        ranges_dropped: u64,
    ) -> Option<HeapCounts> {
        if ranges_dropped > 0 {
            return None;
        }
        let s = self.per_heap;
        let mut c = HeapCounts::default();
        for g in segments {
            if g.last < g.first {
                return None;
            }
            c.heaps = c.heaps.saturating_add(g.last / s - g.first / s + 1);
        }
        // Gap ranges come in order and do not overlap: a heap is touched by the ends of one
        // or more ranges, or lies whole inside one.
        let mut cur: Option<(u64, u64)> = None; // (heap, packets missing)
        let judge = |c: &mut HeapCounts, heap: Option<(u64, u64)>| match heap {
            Some((_, missing)) if missing >= s => c.lost += 1,
            Some(_) => c.incomplete += 1,
            None => {}
        };
        let part = |c: &mut HeapCounts, cur: &mut Option<(u64, u64)>, h: u64, a: u64, b: u64| {
            if cur.is_some_and(|(ch, _)| ch != h) {
                judge(c, cur.take());
            }
            c.missing_bytes = c.missing_bytes.saturating_add(self.packets_bytes(a, b));
            *cur = Some((h, cur.map_or(0, |(_, m)| m) + (b - a + 1)));
        };
        for r in gaps {
            if r.last < r.first {
                return None;
            }
            let (h0, k0, h1, k1) = (r.first / s, r.first % s, r.last / s, r.last % s);
            if h0 == h1 {
                part(&mut c, &mut cur, h0, k0, k1);
                continue;
            }
            part(&mut c, &mut cur, h0, k0, s - 1);
            let whole = h1 - h0 - 1;
            c.lost = c.lost.saturating_add(whole);
            c.missing_bytes = c.missing_bytes.saturating_add(whole.saturating_mul(self.cfg.heap));
            part(&mut c, &mut cur, h1, 0, k1);
        }
        judge(&mut c, cur);
        c.complete = c.heaps.saturating_sub(c.incomplete.saturating_add(c.lost));
        Some(c)
    }
}

impl Format for Spead {
    fn name(&self) -> String {
        format!("spead-64-{}/{}", self.cfg.addr_bits, self.cfg.payload)
    }

    fn packet_len(&self) -> usize {
        8 + 8 * ITEMS + self.cfg.payload
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn fixed_len(&self) -> Option<usize> {
        self.uniform().then(|| self.packet_len())
    }

    /// The check compares the payload length item with the datagram's own length, so a
    /// truncated datagram is refused without a length lock.
    fn length_locked(&self) -> bool {
        false
    }

    /// A stop heap (stream control 2) closes the stream before its own heap counter.
    fn closes_stream(&self, buf: &[u8]) -> Option<(u32, u64)> {
        let view = Packet::new_checked(buf).ok()?;
        let (mut cnt, mut stop) = (None, false);
        for i in 0..view.num_items() {
            let ItemPointer { immediate, id, value } = ItemPointer::decode(view.item(i), self.cfg.addr_bits);
            match (immediate, id) {
                (true, HEAP_CNT) => cnt = Some(value),
                (true, STREAM_CONTROL) => stop |= value == 2,
                _ => {}
            }
        }
        let rel = cnt?.wrapping_sub(self.cfg.first) & self.mask;
        (stop && rel % self.cfg.step == 0).then(|| (0, (rel / self.cfg.step).wrapping_mul(self.per_heap)))
    }

    fn cannot_send(&self) -> Option<String> {
        (!self.uniform()).then(|| {
            format!(
                "wirespeed sends SPEAD heaps as whole numbers of equal packets: {} has lead= or a heap that is not a multiple of payload= ({}), which describe another sender's stream for recv and record; leave lead= out and give a heap that is a multiple of payload=",
                self.spec(),
                self.cfg.payload
            )
        })
    }

    fn spec(&self) -> String {
        let c = &self.cfg;
        let lead = match c.lead {
            Some(l) if l != c.payload => format!(",lead={l}"),
            _ => String::new(),
        };
        format!(
            "spead,heap={},payload={}{lead},first={},step={},addr={},fill={}",
            c.heap, c.payload, c.first, c.step, c.addr_bits, c.fill
        )
    }

    fn emit(&self, stream: u32, seq: u64, buf: &mut [u8]) {
        if buf.len() < self.packet_len() {
            return; // a caller bug; never panic on the send path
        }
        let (idx, pkt) = (seq / self.per_heap, seq % self.per_heap);
        let cnt = self.cfg.first.wrapping_add(idx.wrapping_mul(self.cfg.step)) & self.mask;
        let off = pkt * self.cfg.payload as u64;
        let mut p = Packet::new_unchecked(&mut buf[..self.packet_len()]);
        p.set_header((self.cfg.addr_bits / 8) as u8, ITEMS as u16);
        let items = [
            self.pointer(true, HEAP_CNT, cnt),
            self.pointer(true, HEAP_SIZE, self.cfg.heap),
            self.pointer(true, HEAP_OFFSET, off),
            self.pointer(true, PAYLOAD_LENGTH, self.cfg.payload as u64),
            self.pointer(true, TIMESTAMP, idx.wrapping_mul(self.cfg.heap)),
            self.pointer(true, 0x4101, u64::from(stream)),
            self.pointer(false, 0x4300, 0),
        ];
        for (i, item) in items.into_iter().enumerate() {
            p.set_item(i, item);
        }
        let pos = idx.wrapping_mul(self.cfg.heap).wrapping_add(off);
        let at = At { stream: 0, seq, offset: pos, offset_in_second: pos };
        self.cfg.fill.emit(p.payload_mut(), &at);
    }

    fn data_clock(&self) -> Option<super::DataClock> {
        Some(super::DataClock::SpeadTimestamp)
    }
    fn data_time(&self, buf: &[u8], _near: u64) -> Option<u64> {
        let view = Packet::new_checked(buf).ok()?;
        (0..view.num_items()).find_map(|i| match ItemPointer::decode(view.item(i), self.cfg.addr_bits) {
            ItemPointer { immediate: true, id: TIMESTAMP, value } => Some(value),
            _ => None,
        })
    }
    fn check(&self, buf: &[u8]) -> Result<PacketInfo, Invalid> {
        if buf.len() < HEADER_LEN {
            return Err(Invalid::Length);
        }
        let view = Packet::new_unchecked(buf);
        let a = (self.cfg.addr_bits / 8) as u8;
        if view.magic() != MAGIC
            || view.version() != VERSION
            || view.item_id_width() != 8 - a
            || view.heap_addr_width() != a
        {
            return Err(Invalid::Header);
        }
        let n = view.num_items();
        if n == 0 {
            return Err(Invalid::Header);
        }
        let hdr = view.header_len();
        if buf.len() < hdr {
            return Err(Invalid::Length);
        }
        let (mut cnt, mut size, mut off, mut plen) = (None, None, None, None);
        let (mut control, mut descriptors) = (false, false);
        let mut max_addr = 0u64;
        for i in 0..n {
            let ItemPointer { immediate, id, value } = ItemPointer::decode(view.item(i), self.cfg.addr_bits);
            let slot = match id {
                HEAP_CNT => &mut cnt,
                HEAP_SIZE => &mut size,
                HEAP_OFFSET => &mut off,
                PAYLOAD_LENGTH => &mut plen,
                STREAM_CONTROL => {
                    control = true;
                    continue;
                }
                _ => {
                    descriptors |= id == ITEM_DESCRIPTOR;
                    if !immediate {
                        max_addr = max_addr.max(value);
                    }
                    continue;
                }
            };
            if !immediate || slot.is_some_and(|v| v != value) {
                return Err(Invalid::Header);
            }
            *slot = Some(value);
        }
        let (Some(cnt), Some(off), Some(plen)) = (cnt, off, plen) else {
            return Err(Invalid::Header);
        };
        if plen != (buf.len() - hdr) as u64 {
            return Err(Invalid::Length);
        }
        let heap = size.unwrap_or(self.cfg.heap);
        if off.checked_add(plen).map_or(true, |end| end > heap) || max_addr > heap {
            return Err(Invalid::Header);
        }
        if control {
            return Ok(PacketInfo::new(UNSEQUENCED, 0));
        }
        // Every packet but a heap's first and last carries exactly `payload` bytes: the
        // numbering below rests on it, so any other packetization is refused, never guessed.
        let p = self.cfg.payload as u64;
        let last = off + plen == heap;
        if plen > p || (off != 0 && !last && plen != p) || (plen == 0 && heap != 0) {
            return Err(Invalid::Header);
        }
        let rel = cnt.wrapping_sub(self.cfg.first) & self.mask;
        let step = self.cfg.step;
        if step != 1 && rel % step != 0 {
            // A descriptor heap from another process may count on its own: valid, apart.
            return if descriptors { Ok(PacketInfo::new(UNSEQUENCED, 0)) } else { Err(Invalid::Header) };
        }
        let pkt = off.div_ceil(p);
        if pkt >= self.per_heap {
            // A heap with more packets than the numbering holds: valid, counted apart.
            return Ok(PacketInfo::new(UNSEQUENCED, 0));
        }
        let idx = if step == 1 { rel } else { rel / step };
        let base = idx.wrapping_mul(self.per_heap);
        let seq = base.wrapping_add(pkt);
        if self.cfg.fill != Fill::Any {
            if heap != self.cfg.heap {
                return Err(Invalid::Header);
            }
            let pos = idx.wrapping_mul(self.cfg.heap).wrapping_add(off);
            if !self.cfg.fill.check(view.payload(), &At { stream: 0, seq, offset: pos, offset_in_second: pos }) {
                return Err(Invalid::Payload);
            }
        }
        let mut info = PacketInfo::new(0, seq);
        // A data heap cut as the format says takes all its numbers (checked without a
        // division); any other heap works out its own packet count from its first packet's
        // payload: this one's, or what the offsets of the others leave.
        let as_data = heap == self.cfg.heap
            && if pkt == 0 { plen == self.lead || last } else { off == self.lead + (pkt - 1) * p };
        if !as_data {
            let lead = match (off, off % p) {
                (0, _) => plen,
                (_, 0) => p,
                (_, r) => r,
            };
            let packets = slots(heap, lead, p);
            if packets < self.per_heap {
                info.absent = Absent { first: base.wrapping_add(packets), count: self.per_heap - packets };
            }
        }
        Ok(info)
    }

    fn explain(&self, buf: &[u8]) -> Option<Mismatch> {
        use Shown::{Hex, Num};
        let kind = self.check(buf).err()?;
        if buf.len() < HEADER_LEN {
            return Some(Mismatch::length(buf.len(), None));
        }
        let view = Packet::new_unchecked(buf);
        let bad = |field, got, key, want| Some(Mismatch::field(Invalid::Header, field, got, key, want));
        if view.magic() != MAGIC {
            return bad("first byte (SPEAD magic)", Hex(u64::from(view.magic())), "", Hex(u64::from(MAGIC)));
        }
        if view.version() != VERSION {
            return bad("SPEAD version", Num(u64::from(view.version())), "", Num(u64::from(VERSION)));
        }
        let a = u64::from(view.heap_addr_width()) * 8;
        if a != u64::from(self.cfg.addr_bits) || view.item_id_width() != 8 - view.heap_addr_width() {
            return bad("heap address bits (SPEAD-64-N)", Num(a), "addr", Num(u64::from(self.cfg.addr_bits)));
        }
        let hdr = view.header_len();
        if buf.len() >= hdr {
            let item = |want: u64| {
                (0..view.num_items())
                    .map(|i| ItemPointer::decode(view.item(i), self.cfg.addr_bits))
                    .find(|p| p.immediate && p.id == want)
                    .map(|p| p.value)
            };
            let heap = item(HEAP_SIZE).unwrap_or(self.cfg.heap);
            if self.cfg.fill != Fill::Any && heap != self.cfg.heap {
                return bad("heap size (bytes)", Num(heap), "heap", Num(self.cfg.heap));
            }
            let p = self.cfg.payload as u64;
            if let (Some(off), Some(plen)) = (item(HEAP_OFFSET), item(PAYLOAD_LENGTH)) {
                if plen > p {
                    return bad("payload bytes per packet", Num(plen), "payload", Num(p));
                }
                if off != 0 && off.saturating_add(plen) < heap && plen != p {
                    return bad("payload bytes of a packet inside a heap", Num(plen), "payload", Num(p));
                }
            }
        }
        Some(Mismatch::of(kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SpeadConfig {
        SpeadConfig { heap: 4096, payload: 1024, ..SpeadConfig::default() }
    }

    /// A packet the way an independent sender may lay it out.
    fn packet(addr_bits: u32, items: &[(bool, u64, u64)], payload: &[u8]) -> Vec<u8> {
        let a = (addr_bits / 8) as u8;
        let mut b = vec![MAGIC, VERSION, 8 - a, a, 0, 0];
        b.extend_from_slice(&(items.len() as u16).to_be_bytes());
        for &(imm, id, v) in items {
            b.extend_from_slice(&(u64::from(imm) << 63 | id << addr_bits | v).to_be_bytes());
        }
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn layout_is_spead_64_48() {
        let s = Spead::new(small()).unwrap();
        let mut b = vec![0u8; s.packet_len()];
        s.emit(0, 4 * 10 + 2, &mut b); // heap 10 (counter 11), third packet
        assert_eq!(&b[..8], &[0x53, 0x04, 0x02, 0x06, 0, 0, 0, 7]);
        assert_eq!(&b[8..16], &[0x80, 0x01, 0, 0, 0, 0, 0, 11], "heap counter 11, immediate");
        assert_eq!(&b[16..24], &[0x80, 0x02, 0, 0, 0, 0, 0x10, 0x00], "heap size 4096");
        assert_eq!(&b[24..32], &[0x80, 0x03, 0, 0, 0, 0, 0x08, 0x00], "heap offset 2048");
        assert_eq!(&b[32..40], &[0x80, 0x04, 0, 0, 0, 0, 0x04, 0x00], "payload length 1024");
        assert_eq!(&b[56..64], &[0x43, 0x00, 0, 0, 0, 0, 0, 0], "data item at address 0");
        assert_eq!(b.len(), 8 + 56 + 1024);
        assert_eq!(s.check(&b), Ok(PacketInfo::new(0, 42)));
        let s40 = Spead::new(SpeadConfig { addr_bits: 40, ..small() }).unwrap();
        s40.emit(0, 42, &mut b);
        assert_eq!(&b[..4], &[0x53, 0x04, 0x03, 0x05]);
        assert_eq!(s40.check(&b).unwrap().seq, 42);
        assert_eq!(s.check(&b), Err(Invalid::Header), "flavours are not mixed up");
    }

    #[test]
    fn round_trips_with_counter_steps_and_wrap() {
        for fill in [Fill::Any, Fill::Zeros, Fill::Counter, Fill::Tvg, Fill::Random(1)] {
            for (first, step) in [(1u64, 1u64), (0, 8), ((1 << 48) - 3, 1)] {
                let s = Spead::new(SpeadConfig { fill, first, step, ..small() }).unwrap();
                let mut b = vec![0u8; s.packet_len()];
                for seq in [0u64, 1, 3, 4, 5, 4 * 5 + 3, 1 << 40] {
                    s.emit(0, seq, &mut b);
                    assert_eq!(s.check(&b), Ok(PacketInfo::new(0, seq)), "{} seq {seq}", s.spec());
                }
            }
        }
    }

    /// The packets of heap `cnt` of `heap` bytes cut the way spead2 cuts them: a first packet
    /// shortened by `extra` item pointers, then packets of `payload`, the last one shorter.
    fn spead2_heap(cnt: u64, heap: u64, payload: u64, extra: u64, descriptors: bool) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut off = 0;
        while off < heap {
            let room = if off == 0 { payload - 8 * extra } else { payload };
            let len = room.min(heap - off);
            let mut items = vec![(true, 1, cnt), (true, 2, heap), (true, 3, off), (true, 4, len)];
            if off == 0 {
                for e in 0..extra {
                    items.push(if descriptors && e == 0 { (false, 5, 0) } else { (false, 0x1000 + e, 0) });
                }
            }
            out.push(packet(48, &items, &vec![0; len as usize]));
            off += len;
        }
        out
    }

    #[test]
    fn spead2_style_heaps() {
        // 4096-byte heaps, first packet shortened by two item pointers (1008 payload bytes),
        // then 1024-byte packets: five packets a heap (the last one 16 bytes).
        let cfg = SpeadConfig { fill: Fill::Any, first: 1, lead: Some(1008), ..small() };
        let s = Spead::new(cfg).unwrap();
        assert_eq!(s.packets_per_heap(), 5);
        assert_eq!(s.fixed_len(), None, "packets differ in length");
        assert!(s.cannot_send().unwrap().contains("lead="), "wirespeed does not send this layout");
        let heap5 = spead2_heap(5, 4096, 1024, 2, false);
        assert_eq!(heap5.len(), 5);
        for (k, p) in heap5.iter().enumerate() {
            assert_eq!(s.check(p), Ok(PacketInfo::new(0, 4 * 5 + k as u64)), "packet {k}");
        }
        // A heap of another size is numbered too; the numbers it does not use are absent.
        let small_heap = spead2_heap(6, 1500, 1024, 2, true);
        assert_eq!(small_heap.len(), 2);
        let absent = Absent { first: 25 + 2, count: 3 };
        for (k, p) in small_heap.iter().enumerate() {
            let got = s.check(p).unwrap();
            assert_eq!((got.seq, got.absent), (25 + k as u64, absent), "descriptor heap packet {k}");
        }
        // A heap larger than the numbering holds: its packets beyond it are counted apart.
        let big = spead2_heap(7, 5200, 1024, 3, true);
        assert_eq!(big.len(), 6);
        assert_eq!(s.check(&big[4]).unwrap().seq, 34);
        assert_eq!(s.check(&big[5]), Ok(PacketInfo::new(UNSEQUENCED, 0)));
        // Stream control (start, stop): valid, no data.
        let stop = packet(48, &[(true, 1, 9), (true, 2, 0), (true, 3, 0), (true, 4, 0), (true, 6, 2)], &[]);
        assert_eq!(s.check(&stop), Ok(PacketInfo::new(UNSEQUENCED, 0)));
        // Another packetization (a packet inside a heap not of the full size) is refused, and
        // said; so is a counter off the step.
        let std = |off: u64, len: u64| vec![(true, 1, 5), (true, 2, 4096), (true, 3, off), (true, 4, len)];
        let odd = packet(48, &std(1008, 1000), &[0; 1000]);
        assert_eq!(s.check(&odd), Err(Invalid::Header));
        assert_eq!(
            s.explain(&odd).unwrap().to_string(),
            "payload bytes of a packet inside a heap: the stream has 1000, --format has payload=1024"
        );
        let s8 = Spead::new(SpeadConfig { fill: Fill::Any, first: 0, step: 8, ..small() }).unwrap();
        let off_step = packet(48, &std(0, 1024), &[0; 1024]);
        assert_eq!(s8.check(&off_step), Err(Invalid::Header), "counter 5 with step 8");
    }

    /// The ledger over spead2-cut heaps, descriptor heaps among them, with packets dropped:
    /// exactly the dropped numbered packets are lost, whichever packet of a heap they were. A
    /// heap lost entirely is counted as a data heap's packets (its own count is unknowable).
    #[test]
    fn spead2_heaps_are_counted_exactly_through_the_ledger() {
        use crate::ledger::{LedgerConfig, StreamLedger};
        let s = Spead::new(SpeadConfig { fill: Fill::Any, first: 1, lead: Some(1008), ..small() }).unwrap();
        for every in [2usize, 3, 5, 7, 11, 1000] {
            let mut ledger = StreamLedger::new(&LedgerConfig::default());
            let mut heaps = Vec::new();
            for cnt in 1..=60u64 {
                heaps.push(match cnt % 10 {
                    0 => spead2_heap(cnt, 900, 1024, 1, true),   // descriptors alone
                    3 => spead2_heap(cnt, 2100, 1024, 2, false), // a short heap
                    _ => spead2_heap(cnt, 4096, 1024, 2, false),
                });
            }
            let total: usize = heaps.iter().map(Vec::len).sum();
            let (mut i, mut lost, mut kept) = (0usize, 0u64, 0u64);
            for heap in &heaps {
                let before = kept;
                for p in heap {
                    // Never the first or last packet: loss before the first and after the last
                    // received is not knowable without the sender's own account.
                    let drop = i % every == every - 1 && i + 1 < total;
                    i += 1;
                    if drop {
                        lost += 1;
                        continue;
                    }
                    let info = s.check(p).unwrap();
                    ledger.record_with(info.seq, info.absent);
                    kept += 1;
                }
                if kept == before {
                    lost += s.packets_per_heap() - heap.len() as u64;
                }
            }
            ledger.finish(None);
            let c = ledger.counts();
            assert_eq!((c.received, c.lost, c.late, c.duplicate), (kept, lost, 0, 0), "every {every}th dropped");
        }
    }

    /// Heaps read from the ledger: exactly the heaps that lost packets are incomplete, those
    /// that lost all are lost, and the missing bytes are the payloads dropped.
    #[test]
    fn heaps_complete_incomplete_and_lost_from_the_ledger() {
        use crate::ledger::{LedgerConfig, StreamLedger};
        let s = Spead::new(SpeadConfig { fill: Fill::Any, first: 1, lead: Some(1008), ..small() }).unwrap();
        let heaps: Vec<Vec<Vec<u8>>> = (1..=40u64).map(|c| spead2_heap(c, 4096, 1024, 2, false)).collect();
        let mut ledger = StreamLedger::new(&LedgerConfig::default());
        let (mut want, mut i) = (HeapCounts { heaps: 40, ..HeapCounts::default() }, 0usize);
        for (h, heap) in heaps.iter().enumerate() {
            let (mut dropped, mut bytes) = (0, 0);
            for p in heap {
                // Every 7th packet, and the whole of heaps 10 and 11 (never the first or last).
                let drop = (i % 7 == 6 || h == 10 || h == 11) && h != 0 && h != 39;
                i += 1;
                if drop {
                    dropped += 1;
                    bytes += (p.len() - Packet::new_unchecked(&p[..]).header_len()) as u64;
                    continue;
                }
                let info = s.check(p).unwrap();
                ledger.record_with(info.seq, info.absent);
            }
            match dropped {
                0 => want.complete += 1,
                d if d == heap.len() => want.lost += 1,
                _ => want.incomplete += 1,
            }
            want.missing_bytes += bytes;
        }
        ledger.finish(None);
        let got = s.heaps(&ledger.segments(), ledger.gaps(), ledger.counts().ranges_dropped).unwrap();
        assert_eq!(got, want);
        assert_eq!((got.lost, got.heaps), (2, 40));
    }

    #[test]
    fn malformed_packets() {
        let s = Spead::new(small()).unwrap();
        let mut good = vec![0u8; s.packet_len()];
        s.emit(0, 9, &mut good);
        for n in 0..good.len() {
            assert!(s.check(&good[..n]).is_err(), "truncated to {n}");
        }
        for n in 0..64 {
            assert_eq!(s.check(&good[..n]), Err(Invalid::Length), "truncated header {n}");
        }
        let with = |i: usize, v: u8| {
            let mut b = good.clone();
            b[i] = v;
            s.check(&b)
        };
        assert_eq!(with(0, 0x54), Err(Invalid::Header), "magic");
        assert_eq!(with(1, 3), Err(Invalid::Header), "version");
        assert_eq!(with(2, 3), Err(Invalid::Header), "widths");
        assert_eq!(with(7, 0), Err(Invalid::Header), "no items");
        assert_eq!(with(7, 0xFF), Err(Invalid::Length), "more items than bytes");
        assert_eq!(with(6, 0xFF), Err(Invalid::Length), "absurd item count");
        assert_eq!(with(38, 0xFF), Err(Invalid::Length), "payload length vs datagram");
        assert_eq!(with(30, 0x10), Err(Invalid::Header), "offset beyond the heap");
        assert_eq!(with(8, 0x00), Err(Invalid::Header), "heap counter not immediate");
        assert_eq!(with(9, 0x07), Err(Invalid::Header), "heap counter missing");
        assert_eq!(with(200, good[200] ^ 1), Err(Invalid::Payload), "payload");
        assert_eq!(s.check(&vec![0xFF; good.len()]), Err(Invalid::Header));
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(s.check(&longer), Err(Invalid::Length));
    }

    #[test]
    fn view_round_trips_and_refuses_short_buffers() {
        let mut b = vec![0u8; 8 + 16 + 3];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_header(6, 2);
        let counter = ItemPointer { immediate: true, id: HEAP_CNT, value: (1 << 48) - 1 };
        let data = ItemPointer { immediate: false, id: 0x4300, value: 5 };
        p.set_item(0, counter.encode(48));
        p.set_item(1, data.encode(48));
        p.payload_mut().copy_from_slice(&[7, 8, 9]);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.magic(), p.version(), p.item_id_width(), p.heap_addr_width()), (MAGIC, VERSION, 2, 6));
        assert_eq!((p.num_items(), p.header_len(), p.payload()), (2, 24, &[7u8, 8, 9][..]));
        assert_eq!(ItemPointer::decode(p.item(0), 48), counter);
        assert_eq!(ItemPointer::decode(p.item(1), 48), data);
        // The same bytes an independent sender lays out (the test helper above).
        assert_eq!(b, packet(48, &[(true, HEAP_CNT, (1 << 48) - 1), (false, 0x4300, 5)], &[7, 8, 9]));
        assert_eq!(Packet::new_checked(&b[..23]).unwrap_err(), Truncated { need: 24, have: 23 });
        assert!(Packet::new_checked(&b[..7]).is_err());
        let p40 = ItemPointer { immediate: true, id: 0x1600, value: 1 << 39 };
        assert_eq!(ItemPointer::decode(p40.encode(40), 40), p40);
    }

    #[test]
    fn settings_refused() {
        assert!(Spead::new(SpeadConfig { heap: 5000, ..small() }).unwrap().cannot_send().unwrap().contains("multiple"));
        assert!(Spead::new(SpeadConfig { lead: Some(2000), ..small() }).unwrap_err().contains("lead"));
        assert!(Spead::new(SpeadConfig { addr_bits: 32, ..small() }).is_err());
        assert!(Spead::new(SpeadConfig { step: 0, ..small() }).is_err());
        assert!(Spead::new(SpeadConfig { payload: 70000, heap: 70000, ..small() }).is_err());
    }
}
