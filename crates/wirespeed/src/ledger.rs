//! Exact loss accounting for one sequenced stream.
//!
//! wirespeed's promise is "zero loss, and prove it": every packet of a stream
//! carries a sequence number, and this ledger turns the arrival order of those
//! numbers into counts a user can trust. It sits on the capture hot path, so
//! [`StreamLedger::record`] never allocates, locks or calls the kernel; all
//! memory is taken in [`StreamLedger::new`].
//!
//! # Contract
//!
//! Numbers are compared modulo `2^seq_bits`: the forward distance from the
//! highest number seen decides what a packet is.
//!
//! * `received`: unique numbers accepted into the accounting.
//! * `lost`: numbers between the lowest and highest received (per segment)
//!   that never arrived. A number is *settled* as lost only when it leaves the
//!   reorder window (`window` numbers behind the highest) or at
//!   [`StreamLedger::finish`]; until then it may still arrive late.
//!   [`StreamLedger::pending_lost`] shows the not yet settled holes.
//! * `late`: arrived after a higher number, inside the window, not received
//!   before. It counts as received too, never as lost.
//! * `duplicate`: a number inside the window that was already received.
//! * `stale`: arrived older than the window. Its number was already settled
//!   (lost, or before the segment's first number), so it is not received.
//! * `stray`: a forward jump larger than `max_gap` that the next packet did
//!   not confirm (typically a corrupted header). It is neither received nor
//!   does it move the highest number.
//! * `invalid`: packets the caller rejected before they reached the ledger.
//! * `resync`: confirmed sender restarts (see below).
//!
//! ## Restarts (after RFC 3550 appendix A.1)
//!
//! A packet is a *suspect* when it is more than `max_gap` ahead of the highest
//! number, or at least `window` behind it. A suspect is counted provisionally:
//! as `stale` when behind ([`Outcome::Stale`]), as `stray` when ahead
//! ([`Outcome::Suspect`]). If the very next recorded packet is `suspect + 1`,
//! the sender restarted: the provisional count is undone, the current segment
//! is closed (its window settled), `resync` goes up by one and a new segment
//! starts at the suspect, with both packets received ([`Outcome::Resync`]).
//! Otherwise the provisional count stands. A consequence of the rule: a
//! sender that restarts to a number less than `window` behind the highest is
//! seen as duplicates and late packets, not as a restart.
//!
//! ## Stragglers of the previous segment
//!
//! After a restart, packets of the old run that were reordered behind the
//! restart still arrive. Read against the new segment they would look like a
//! forward jump (booking the numbers in between as loss) or like late
//! packets below its first number (moving its start back and booking the
//! numbers in between as loss). So for the next `window` packets after a
//! resync, a packet less than `window` from the old segment's highest number
//! (either side) that is not inside the new segment's span, and is nearer to
//! the old segment's end than to the new segment, is counted as `stale`: its
//! number was settled when the old segment closed (or lies beyond its end),
//! and it changes nothing else. The check stops early once the new segment
//! itself counts up to within `window` below the old segment's end (its
//! packets there are its own).
//!
//! ## Finish
//!
//! [`StreamLedger::finish`] is terminal: it settles the window and, given the
//! sender's own first and last numbers, adds head and tail loss to the current
//! segment. Calling it again does nothing. Any packet recorded after it is
//! counted as `stale` (it arrived after the books were closed) and changes
//! nothing else.

use crate::wire::{Absent, Admit, LengthLock};
use serde::{Deserialize, Serialize};

/// Internal ("extended") position of a segment's first packet.
///
/// Inside a segment the ledger works on unwrapped positions so that wrapping
/// counters never need modular comparisons; starting in the middle of `u64`
/// leaves room both for late packets below the first and for any realistic
/// number of packets after it.
const BASE: u64 = 1 << 63;

/// Tuning of one [`StreamLedger`].
///
/// The window trades memory (one bit per number) for tolerance to
/// reordering; `max_gap` separates "many packets lost" from "the sender
/// restarted or the header is garbage". See [`LedgerConfig::effective`] for
/// how values are made consistent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerConfig {
    /// How far behind the highest number a packet may arrive and still count
    /// as late rather than stale. Rounded down to a power of two.
    pub window: u64,
    /// Largest forward jump still read as loss; larger jumps are suspects.
    pub max_gap: u64,
    /// Width of the sender's counter (1..=64), so wrapping 8-, 16- or 32-bit
    /// counters are followed across their wrap.
    pub seq_bits: u32,
    /// How many gap ranges are kept for display; loss beyond them is still
    /// counted exactly (`ranges_dropped` says how many ranges were not kept).
    pub max_ranges: usize,
    /// How many closed segments (runs between restarts) are kept.
    pub max_segments: usize,
}

impl Default for LedgerConfig {
    /// A 64 Ki window (8 KiB of bitmap) absorbs tens of milliseconds of
    /// reordering at 2 Mpps; a 16 Mi gap is far beyond any real burst loss.
    fn default() -> Self {
        LedgerConfig { window: 65536, max_gap: 1 << 24, seq_bits: 64, max_ranges: 4096, max_segments: 64 }
    }
}

impl LedgerConfig {
    /// The configuration a ledger really runs with, so callers can show it.
    ///
    /// Sequence distances are read as signed over half the counter range
    /// (`half = 2^(seq_bits-1)`). To keep "ahead" and "behind" unambiguous:
    /// `seq_bits` is clamped to 1..=64; `window` is at least 1, rounded down
    /// to a power of two and at most `half / 2` (at least 1); `max_gap` is at
    /// least 1 (so in-order packets are never suspects) and at most
    /// `half - window - 1`. Widths below 4 bits therefore run with a window
    /// of 1 and a gap of 1 or 2: they work, but see little.
    pub fn effective(&self) -> LedgerConfig {
        let seq_bits = self.seq_bits.clamp(1, 64);
        let half = 1u64 << (seq_bits - 1);
        let requested = self.window.max(1);
        let window = (1u64 << (63 - requested.leading_zeros())).min((half / 2).max(1));
        let max_gap = self.max_gap.min(half.saturating_sub(window).saturating_sub(1)).max(1);
        LedgerConfig { window, max_gap, seq_bits, max_ranges: self.max_ranges, max_segments: self.max_segments }
    }
}

/// What one recorded packet was, so the caller can react per packet (for
/// example log a restart) without diffing counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The first packet of the stream; it starts the first segment.
    First,
    /// Exactly one ahead of the highest number.
    InOrder,
    /// Ahead by more than one; `missing` numbers were skipped. They become
    /// lost only if they do not arrive before leaving the window.
    Gap {
        /// How many numbers lie between the previous highest and this one.
        missing: u64,
    },
    /// Behind the highest, inside the window, not seen before: received.
    Late,
    /// Already received.
    Duplicate,
    /// At least `window` behind the highest (or recorded after `finish`):
    /// counted as `stale`. Before `finish` it is also a suspect: if the next
    /// packet follows it, it becomes the first of a new segment.
    Stale,
    /// More than `max_gap` ahead: counted as `stray` unless the next packet
    /// follows it and confirms a restart.
    Suspect,
    /// This packet followed a suspect: the sender restarted and a new segment
    /// began (the suspect and this packet are both received).
    Resync,
}

/// What [`StreamLedger::record_locked_outcome`] made of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locked {
    /// Its number was recorded, with this outcome.
    Recorded(Outcome),
    /// The length lock holds it until a second datagram confirms the length (it is valid so
    /// far; its number is recorded then).
    Held,
    /// Its length is wrong: counted invalid.
    Wrong,
    /// It is longer than the held datagram, which is therefore invalid (counted) and replaced
    /// by this one, now held.
    ReplacedHeld,
}

/// Counters of one stream, or totals over many (see [`LedgerCounts::merge`]);
/// serialisable so reports can carry them as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerCounts {
    /// Unique numbers accepted (includes late packets).
    pub received: u64,
    /// Numbers that never arrived, settled so far.
    pub lost: u64,
    /// Received after a higher number (reordered but not lost).
    pub late: u64,
    /// Received again while still inside the window.
    pub duplicate: u64,
    /// Arrived after their number was settled; not received.
    pub stale: u64,
    /// Unconfirmed wild forward jumps (for example corrupted headers).
    pub stray: u64,
    /// Packets the caller rejected as malformed.
    pub invalid: u64,
    /// Confirmed sender restarts.
    pub resync: u64,
    /// Gap ranges counted in `lost` but not kept in the range list.
    pub ranges_dropped: u64,
}

impl LedgerCounts {
    /// Adds another stream's counters into these, for totals across streams.
    /// Saturating, so a total can never wrap to a small, reassuring number.
    pub fn merge(&mut self, other: &LedgerCounts) {
        self.received = self.received.saturating_add(other.received);
        self.lost = self.lost.saturating_add(other.lost);
        self.late = self.late.saturating_add(other.late);
        self.duplicate = self.duplicate.saturating_add(other.duplicate);
        self.stale = self.stale.saturating_add(other.stale);
        self.stray = self.stray.saturating_add(other.stray);
        self.invalid = self.invalid.saturating_add(other.invalid);
        self.resync = self.resync.saturating_add(other.resync);
        self.ranges_dropped = self.ranges_dropped.saturating_add(other.ranges_dropped);
    }

    /// Loss rate as lost per million expected packets (received + lost), the
    /// unit in which capture quality is usually quoted; 0 when nothing was
    /// expected.
    pub fn drops_per_million(&self) -> f64 {
        let expected = self.received.saturating_add(self.lost);
        if expected == 0 {
            0.0
        } else {
            self.lost as f64 * 1e6 / expected as f64
        }
    }
}

/// One run of consecutive lost numbers, in wire values, so a user can see
/// where the holes are. A range may wrap (`first > last` numerically).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapRange {
    /// First lost number.
    pub first: u64,
    /// Last lost number.
    pub last: u64,
    /// How many numbers the range holds.
    pub count: u64,
}

/// One run of the sender between restarts, so a report shows a restart and
/// what each run delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Lowest number accounted for: the lowest received, or the sender's first
    /// number once `finish` added head loss.
    pub first: u64,
    /// Highest number accounted for: the highest received, or the sender's
    /// last number once `finish` added tail loss.
    pub last: u64,
    /// Unique numbers received in this segment.
    pub received: u64,
    /// Numbers of this segment settled as lost.
    pub lost: u64,
}

/// The sender's own account of its current run, given to
/// [`StreamLedger::finish`] so loss before the first and after the last
/// received packet (invisible to the receiver) is counted too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SenderEnd {
    /// First number the sender generated.
    pub first: u64,
    /// Last number the sender generated.
    pub last: u64,
}

/// Where the current segment stands; positions are "extended" (see [`BASE`]).
#[derive(Clone, Copy, Debug)]
struct Current {
    /// Wire number at position `BASE`.
    origin: u64,
    /// Position of the lowest number received in the segment.
    first_ext: u64,
    /// Position of the highest number received in the segment.
    highest_ext: u64,
    /// Wire number at `highest_ext`.
    highest: u64,
    /// What the segment reports; kept up to date as packets arrive.
    seg: Segment,
}

/// The most recent hole of the current segment, for coalescing.
#[derive(Clone, Copy, Debug)]
struct LastHole {
    end_ext: u64,
    /// Whether it is the last entry of the range list (or was dropped).
    stored: bool,
}

/// The end of the segment before the last restart, kept for `left` more
/// packets so that its stragglers are recognised (see the module docs).
#[derive(Clone, Copy, Debug)]
struct Previous {
    /// Highest wire number of the previous segment.
    highest: u64,
    /// Packets still to be recorded before the check expires.
    left: u64,
}

/// A provisionally counted suspect awaiting its successor.
#[derive(Clone, Copy, Debug)]
struct Pending {
    seq: u64,
    backward: bool,
}

/// Exact loss accounting for one stream: feed every packet's sequence number
/// to [`record`](StreamLedger::record), call [`finish`](StreamLedger::finish)
/// at the end, and read [`counts`](StreamLedger::counts),
/// [`gaps`](StreamLedger::gaps) and [`segments`](StreamLedger::segments).
///
/// The reorder window is a bitmap of `window` bits indexed by position modulo
/// `window`, covering the `window` numbers up to the highest. When the highest
/// advances, numbers leaving the window are settled: unset bits become lost.
#[derive(Clone, Debug)]
pub struct StreamLedger {
    cfg: LedgerConfig,
    mask: u64,
    half: u64,
    bits: Vec<u64>,
    counts: LedgerCounts,
    gaps: Vec<GapRange>,
    last_hole: Option<LastHole>,
    /// Index in `gaps` where the current segment's ranges begin.
    seg_gaps_start: usize,
    closed: Vec<Segment>,
    segments_dropped: u64,
    started: bool,
    cur: Current,
    pending: Option<Pending>,
    prev: Option<Previous>,
    finished: bool,
    /// Numbers a datagram showed were never sent, set aside when the stream moves on (see
    /// [`StreamLedger::record_with`]); count 0: none.
    absent_pending: Absent,
    /// The last run of absent numbers set aside: a datagram numbered inside it proves it
    /// wrong, and it is taken back (count 0: none).
    absent_last: Absent,
}

/// Next piece of the position run starting at `p` (`n` long) that lies in one
/// bitmap word without crossing the window's end: (word, bit offset, length).
#[inline]
fn chunk(p: u64, n: u64, window: u64) -> (usize, u32, u64) {
    let slot = p & (window - 1);
    let off = slot & 63;
    let len = n.min(64 - off).min(window - slot);
    ((slot >> 6) as usize, off as u32, len)
}

/// Mask of the low `len` bits, `len` in 1..=64.
#[inline]
fn low_bits(len: u64) -> u64 {
    u64::MAX >> (64 - len)
}

impl StreamLedger {
    /// Account for a valid datagram of `len` bytes, number `seq`, of a stream whose length is
    /// fixed by its first valid datagrams ([`LengthLock`]): the one place that turns the lock's
    /// verdict into ledger entries, for the receiver's capture and verify's file ledger alike.
    /// False when the length is wrong: the datagram is counted invalid here, and the caller
    /// files it under [`crate::wire::Invalid::Length`].
    #[inline]
    pub fn record_locked(&mut self, lock: &mut LengthLock, len: usize, seq: u64) -> bool {
        matches!(self.record_locked_outcome(lock, len, seq), Locked::Recorded(_) | Locked::Held)
    }

    /// [`record_locked`](Self::record_locked), saying what became of the datagram, so that a
    /// recorder can leave a duplicate or a wrong-length datagram out of its file.
    #[inline]
    pub fn record_locked_outcome(&mut self, lock: &mut LengthLock, len: usize, seq: u64) -> Locked {
        match lock.admit(len, seq) {
            Admit::Now => Locked::Recorded(self.record(seq)),
            Admit::Held => Locked::Held,
            Admit::WithHeld(first) => {
                self.record(first);
                Locked::Recorded(self.record(seq))
            }
            Admit::Wrong => {
                self.invalid();
                Locked::Wrong
            }
            Admit::ReplacesHeld => {
                self.invalid();
                Locked::ReplacedHeld
            }
        }
    }

    /// Account for the datagram a [`LengthLock`] still holds (the stream ended, or must be
    /// judged, before a second datagram confirmed its length).
    pub fn record_held(&mut self, lock: &mut LengthLock) {
        if let Some(seq) = lock.flush() {
            self.record(seq);
        }
    }

    /// Bytes one stream's ledger takes with this window (what [`StreamLedger::new`] allocates
    /// with the default limits), so that a receiver can refuse a configuration before it
    /// allocates.
    pub fn bytes_for(window: u64) -> u64 {
        let cfg = LedgerConfig { window, ..LedgerConfig::default() };
        let bitmap = (window / 64).max(1) * 8;
        bitmap
            + (cfg.max_ranges * std::mem::size_of::<GapRange>()) as u64
            + (cfg.max_segments * std::mem::size_of::<Segment>()) as u64
            + std::mem::size_of::<StreamLedger>() as u64
    }

    /// Creates a ledger and takes all the memory it will ever need, so the
    /// per-packet path never allocates. The configuration is normalised with
    /// [`LedgerConfig::effective`].
    pub fn new(cfg: &LedgerConfig) -> Self {
        let cfg = cfg.effective();
        let mask = u64::MAX >> (64 - cfg.seq_bits);
        let words = (cfg.window / 64).max(1) as usize;
        StreamLedger {
            mask,
            half: 1u64 << (cfg.seq_bits - 1),
            bits: vec![0; words],
            counts: LedgerCounts::default(),
            gaps: Vec::with_capacity(cfg.max_ranges),
            last_hole: None,
            seg_gaps_start: 0,
            closed: Vec::with_capacity(cfg.max_segments),
            segments_dropped: 0,
            started: false,
            cur: Current {
                origin: 0,
                first_ext: BASE,
                highest_ext: BASE,
                highest: 0,
                seg: Segment { first: 0, last: 0, received: 0, lost: 0 },
            },
            pending: None,
            prev: None,
            finished: false,
            absent_pending: Absent::default(),
            absent_last: Absent::default(),
            cfg,
        }
    }

    /// Accounts for one packet's sequence number (only its low `seq_bits`
    /// bits are used) and says what it was. O(1) amortised; a jump costs up
    /// to O(window / 64). Never allocates.
    pub fn record(&mut self, seq: u64) -> Outcome {
        let seq = seq & self.mask;
        if self.finished {
            self.counts.stale += 1;
            return Outcome::Stale;
        }
        if !self.started {
            self.start_segment(seq);
            return Outcome::First;
        }
        if let Some(p) = self.pending.take() {
            if seq == p.seq.wrapping_add(1) & self.mask {
                return self.resync(p, seq);
            }
        }
        let fwd = seq.wrapping_sub(self.cur.highest) & self.mask;
        if let Some(prev) = self.prev.as_mut() {
            prev.left -= 1;
            let prev = *prev;
            if prev.left == 0 {
                self.prev = None;
            }
            if fwd != 1 && self.straggler(prev, seq, fwd) {
                self.counts.stale += 1;
                return Outcome::Stale;
            }
        }
        if fwd != 0 && fwd <= self.cfg.max_gap {
            self.advance(seq, fwd);
            return if fwd == 1 { Outcome::InOrder } else { Outcome::Gap { missing: fwd - 1 } };
        }
        let back = self.cur.highest.wrapping_sub(seq) & self.mask;
        if back < self.cfg.window {
            return self.behind(seq, back);
        }
        let backward = fwd >= self.half;
        self.pending = Some(Pending { seq, backward });
        if backward {
            self.counts.stale += 1;
            Outcome::Stale
        } else {
            self.counts.stray += 1;
            Outcome::Suspect
        }
    }

    /// Accounts for a datagram that shows numbers never sent ([`crate::wire::PacketInfo::absent`],
    /// the unused numbers of a short SPEAD heap). They are set aside, neither received nor lost,
    /// when the datagram is its heap's last or when the stream moves on to another heap: not
    /// before, so that the heap's own later packets are not read as late, and a lost last
    /// packet is still counted lost. Plain [`record`](Self::record) (one branch more) when
    /// nothing is absent.
    #[inline]
    pub fn record_with(&mut self, seq: u64, absent: Absent) -> Outcome {
        if self.absent_pending.count == 0 && absent.count == 0 && self.absent_last.count == 0 {
            return self.record(seq);
        }
        self.record_beside_absent(seq, absent)
    }

    fn record_beside_absent(&mut self, seq: u64, absent: Absent) -> Outcome {
        let l = self.absent_last;
        if l.count != 0 && (seq.wrapping_sub(l.first) & self.mask) < l.count {
            // A datagram numbered inside a run set aside: the run was wrong (a forged or
            // corrupt heap size). Its numbers are taken back, to be received or lost as any.
            self.absent_last = Absent::default();
            self.mark_run(l, false);
        }
        let p = self.absent_pending;
        if p.count != 0 && p != absent {
            // A datagram numbered inside the pending run contradicts it (a packet of a heap
            // said to be shorter): the run is dropped, never set aside over a real number.
            let inside = (seq.wrapping_sub(p.first) & self.mask) < p.count;
            if inside {
                self.absent_pending = Absent::default();
            } else {
                self.set_aside_absent();
            }
        }
        let out = self.record(seq);
        if absent.count != 0 {
            self.absent_pending = absent;
            if seq.wrapping_add(1) & self.mask == absent.first & self.mask {
                self.set_aside_absent();
            }
        }
        out
    }

    /// Takes the pending absent numbers into the window: a run ending ahead of the highest
    /// moves it there once (real numbers jumped over are holes, as for any jump), and the
    /// run's numbers are marked, a word at a time, wherever they lie in the window. Never
    /// counted as received, lost, late or duplicate.
    fn set_aside_absent(&mut self) {
        let a = std::mem::take(&mut self.absent_pending);
        if a.count == 0 || !self.started || self.finished || self.pending.is_some() {
            return;
        }
        // In pieces of half a window, so that a run longer than the window never leaves it
        // unmarked (a jump past the window counts what it skips as lost).
        let (mask, half) = (self.mask, (self.cfg.window / 2).max(1));
        let mut done = 0;
        while done < a.count {
            let piece = Absent { first: a.first.wrapping_add(done) & mask, count: (a.count - done).min(half) };
            let last = piece.first.wrapping_add(piece.count - 1) & mask;
            let fwd = last.wrapping_sub(self.cur.highest) & mask;
            if fwd != 0 && fwd <= self.cfg.max_gap {
                self.advance(last, fwd);
                self.counts.received -= 1;
                self.cur.seg.received -= 1;
            }
            self.mark_run(piece, true);
            done += piece.count;
        }
        self.absent_last = a;
    }

    /// Sets (`on`) or clears the window's bits of run `a`'s numbers that lie in the window at
    /// or behind the highest, a word at a time.
    fn mark_run(&mut self, a: Absent, on: bool) {
        let mask = self.mask;
        let last = a.first.wrapping_add(a.count - 1) & mask;
        let back = self.cur.highest.wrapping_sub(last) & mask;
        if back >= self.cfg.window {
            return;
        }
        let last_ext = self.cur.highest_ext - back;
        let lo = (last_ext - (a.count - 1).min(last_ext))
            .max(self.cur.first_ext)
            .max(self.cur.highest_ext - (self.cfg.window - 1));
        let mut p = lo;
        let mut n = (last_ext + 1).saturating_sub(lo);
        while n > 0 {
            let (word, off, len) = chunk(p, n, self.cfg.window);
            if on {
                self.bits[word] |= low_bits(len) << off;
            } else {
                self.bits[word] &= !(low_bits(len) << off);
            }
            p += len;
            n -= len;
        }
    }

    /// Counts a packet the caller rejected (bad length, magic, checksum), so
    /// the report accounts for every datagram. It does not affect a pending
    /// suspect: only sequenced packets can confirm a restart.
    pub fn invalid(&mut self) {
        self.counts.invalid += 1;
    }

    /// Closes the books: settles every number still in the window and, when
    /// the sender's first and last numbers are known, counts head loss
    /// (`sender.first ..= first_seen - 1`) and tail loss
    /// (`highest + 1 ..= sender.last`) on the current segment. Head and tail
    /// are only counted when they lie less than half the counter range away.
    /// With no packet received, the sender's whole range is one lost segment.
    ///
    /// Terminal and idempotent: a second call does nothing, and packets
    /// recorded afterwards only count as `stale`. A pending suspect keeps its
    /// provisional count.
    pub fn finish(&mut self, sender: Option<SenderEnd>) {
        if self.finished {
            return;
        }
        self.set_aside_absent();
        self.finished = true;
        self.pending = None;
        let mask = self.mask;
        if self.started {
            let h = self.cur.highest_ext;
            self.settle(h - (self.cfg.window - 1), h);
            let Some(sender) = sender else { return };
            let (s_first, s_last) = (sender.first & mask, sender.last & mask);
            let tail = s_last.wrapping_sub(self.cur.highest) & mask;
            if tail != 0 && tail < self.half {
                self.hole(h + 1, tail);
                self.cur.seg.last = s_last;
            }
            let first_wire = self.wire(self.cur.first_ext);
            let head = first_wire.wrapping_sub(s_first) & mask;
            if head != 0 && head < self.half {
                self.counts.lost += head;
                self.cur.seg.lost += head;
                self.cur.seg.first = s_first;
                let range = GapRange { first: s_first, last: first_wire.wrapping_sub(1) & mask, count: head };
                if self.gaps.len() < self.cfg.max_ranges {
                    self.gaps.insert(self.seg_gaps_start, range);
                } else {
                    self.counts.ranges_dropped += 1;
                }
            }
        } else if let Some(sender) = sender {
            let (first, last) = (sender.first & mask, sender.last & mask);
            let count = (last.wrapping_sub(first) & mask).saturating_add(1);
            self.counts.lost = self.counts.lost.saturating_add(count);
            if self.gaps.len() < self.cfg.max_ranges {
                self.gaps.push(GapRange { first, last, count });
            } else {
                self.counts.ranges_dropped += 1;
            }
            self.push_segment(Segment { first, last, received: 0, lost: count });
        }
    }

    /// A snapshot of the counters. O(1): `lost` holds settled loss only, so
    /// it can be polled for a live display (see [`pending_lost`]).
    ///
    /// [`pending_lost`]: StreamLedger::pending_lost
    pub fn counts(&self) -> LedgerCounts {
        self.counts
    }

    /// Numbers currently missing inside the window: they will become lost
    /// unless they still arrive. Lets a live display show loss before it is
    /// settled. O(window / 64); 0 after `finish`.
    pub fn pending_lost(&self) -> u64 {
        if !self.started || self.finished {
            return 0;
        }
        let h = self.cur.highest_ext;
        let mut p = (h - (self.cfg.window - 1)).max(self.cur.first_ext);
        let mut n = h - p + 1;
        let mut missing = 0;
        while n > 0 {
            let (word, off, len) = chunk(p, n, self.cfg.window);
            let got = (self.bits[word] >> off) & low_bits(len);
            missing += len - u64::from(got.count_ones());
            p += len;
            n -= len;
        }
        missing
    }

    /// The lost ranges kept so far (at most `max_ranges`), segment by segment
    /// in ascending order, so a user can see where the holes are.
    pub fn gaps(&self) -> &[GapRange] {
        &self.gaps
    }

    /// Closed segments (at most `max_segments`, the earliest ones) followed by
    /// the current one, so a restart is visible. Allocates; not for the hot
    /// path.
    pub fn segments(&self) -> Vec<Segment> {
        let mut out = self.closed.clone();
        if self.started {
            out.push(self.cur.seg);
        }
        out
    }

    /// Closed segments that did not fit in `max_segments`; their packets are
    /// still in the counts.
    pub fn segments_dropped(&self) -> u64 {
        self.segments_dropped
    }

    /// Lowest number received in the current segment (`None` before any
    /// packet), the start of the span in which holes count as loss.
    pub fn first_seen(&self) -> Option<u64> {
        self.started.then(|| self.wire(self.cur.first_ext))
    }

    /// The current segment as it stands (`None` before any packet), so a
    /// caller can compare it with the sender's account without allocating.
    pub fn current_segment(&self) -> Option<Segment> {
        self.started.then_some(self.cur.seg)
    }

    /// Highest number received in the current segment (`None` before any
    /// packet), against which every packet is classified.
    pub fn highest(&self) -> Option<u64> {
        self.started.then_some(self.cur.highest)
    }

    /// The normalised configuration in use (see [`LedgerConfig::effective`]).
    pub fn config(&self) -> &LedgerConfig {
        &self.cfg
    }

    /// Whether [`finish`](StreamLedger::finish) was called.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Wire number of an extended position of the current segment.
    #[inline]
    fn wire(&self, ext: u64) -> u64 {
        self.cur.origin.wrapping_add(ext.wrapping_sub(BASE)) & self.mask
    }

    #[inline]
    fn bit(&self, ext: u64) -> bool {
        let slot = ext & (self.cfg.window - 1);
        self.bits[(slot >> 6) as usize] & (1 << (slot & 63)) != 0
    }

    #[inline]
    fn set_bit(&mut self, ext: u64) {
        let slot = ext & (self.cfg.window - 1);
        self.bits[(slot >> 6) as usize] |= 1 << (slot & 63);
    }

    /// Starts a segment at `seq` with that packet received. The bitmap must
    /// be clear.
    fn start_segment(&mut self, seq: u64) {
        self.started = true;
        self.cur = Current {
            origin: seq,
            first_ext: BASE,
            highest_ext: BASE,
            highest: seq,
            seg: Segment { first: seq, last: seq, received: 1, lost: 0 },
        };
        self.set_bit(BASE);
        self.counts.received += 1;
        self.last_hole = None;
        self.seg_gaps_start = self.gaps.len();
    }

    /// Moves the highest number `fwd` (1..=max_gap) ahead to `seq`, settling
    /// what leaves the window.
    #[inline]
    fn advance(&mut self, seq: u64, fwd: u64) {
        let h = self.cur.highest_ext;
        let w = self.cfg.window;
        if fwd >= w {
            // The whole window leaves; what lies beyond it never entered.
            self.settle(h - (w - 1), h);
            if fwd > w {
                self.hole(h + 1, fwd - w);
            }
        } else {
            self.settle(h - (w - 1), h - (w - fwd));
        }
        let s = h + fwd;
        self.cur.highest_ext = s;
        self.cur.highest = seq;
        self.cur.seg.last = seq;
        self.cur.seg.received += 1;
        self.counts.received += 1;
        self.set_bit(s);
    }

    /// A packet `back` (0..window) behind the highest: late or duplicate.
    #[inline]
    fn behind(&mut self, seq: u64, back: u64) -> Outcome {
        let p = self.cur.highest_ext - back;
        if p < self.cur.first_ext {
            // Below the first packet: the segment now starts here, and the
            // numbers in between become holes of the window.
            self.cur.first_ext = p;
            self.cur.seg.first = seq;
        } else if self.bit(p) {
            self.counts.duplicate += 1;
            return Outcome::Duplicate;
        }
        self.set_bit(p);
        self.cur.seg.received += 1;
        self.counts.received += 1;
        self.counts.late += 1;
        Outcome::Late
    }

    /// Whether `seq` (`fwd` ahead of the highest) is a late packet of the
    /// segment before the last restart rather than one of the current
    /// segment: less than `window` from the old segment's highest (either
    /// side: its own lost tail may arrive late too), outside the
    /// current segment's span, and nearer to the old end than to the current
    /// segment. Drops `prev` once the current segment has counted up into the
    /// old segment's last window.
    fn straggler(&mut self, prev: Previous, seq: u64, fwd: u64) -> bool {
        let (mask, w) = (self.mask, self.cfg.window);
        let near_old = |x: u64| (prev.highest.wrapping_sub(x) & mask).min(x.wrapping_sub(prev.highest) & mask);
        let to_old = near_old(seq);
        if to_old >= w {
            return false;
        }
        if prev.highest.wrapping_sub(self.cur.highest) & mask < w {
            self.prev = None;
            return false;
        }
        let to_new = if fwd <= self.cfg.max_gap {
            fwd
        } else {
            let back = self.cur.highest.wrapping_sub(seq) & mask;
            if back < w {
                let p = self.cur.highest_ext - back;
                if p >= self.cur.first_ext {
                    return false; // inside the current segment: its own late or duplicate packet
                }
                self.cur.first_ext - p
            } else {
                u64::MAX
            }
        };
        to_old < to_new
    }

    /// The packet after suspect `p` is `p + 1`: the sender restarted.
    fn resync(&mut self, p: Pending, seq: u64) -> Outcome {
        if p.backward {
            self.counts.stale -= 1;
        } else {
            self.counts.stray -= 1;
        }
        let h = self.cur.highest_ext;
        // Clears the whole bitmap: bits below the first number are never set.
        self.settle(h - (self.cfg.window - 1), h);
        self.push_segment(self.cur.seg);
        self.prev = Some(Previous { highest: self.cur.highest, left: self.cfg.window });
        self.counts.resync += 1;
        self.start_segment(p.seq);
        self.advance(seq, 1);
        Outcome::Resync
    }

    fn push_segment(&mut self, seg: Segment) {
        if self.closed.len() < self.cfg.max_segments {
            self.closed.push(seg);
        } else {
            self.segments_dropped += 1;
        }
    }

    /// Settles positions `lo..=hi` (inside the window): unset bits at or
    /// above the segment's first number are lost; all their bits are cleared
    /// for reuse. Positions below the first number are never set.
    #[inline]
    fn settle(&mut self, lo: u64, hi: u64) {
        let mut p = lo.max(self.cur.first_ext);
        if p > hi {
            return;
        }
        let mut n = hi - p + 1;
        while n > 0 {
            let (word, off, len) = chunk(p, n, self.cfg.window);
            let lenmask = low_bits(len);
            let mut holes = !(self.bits[word] >> off) & lenmask;
            self.bits[word] &= !(lenmask << off);
            while holes != 0 {
                let tz = holes.trailing_zeros();
                let run = (holes >> tz).trailing_ones();
                self.hole(p + u64::from(tz), u64::from(run));
                holes &= !(low_bits(u64::from(run)) << tz);
            }
            p += len;
            n -= len;
        }
    }

    /// Counts `count` lost numbers from position `start`, extending the
    /// previous range when adjacent, else storing a new one if there is room
    /// (never growing the list).
    fn hole(&mut self, start: u64, count: u64) {
        self.counts.lost += count;
        self.cur.seg.lost += count;
        let end = start.wrapping_add(count - 1);
        let stored = match self.last_hole {
            Some(last) if last.end_ext.wrapping_add(1) == start => {
                if last.stored {
                    let last_wire = self.wire(end);
                    if let Some(r) = self.gaps.last_mut() {
                        r.last = last_wire;
                        r.count += count;
                    }
                }
                last.stored
            }
            _ if self.gaps.len() < self.cfg.max_ranges => {
                let range = GapRange { first: self.wire(start), last: self.wire(end), count };
                self.gaps.push(range);
                true
            }
            _ => {
                self.counts.ranges_dropped += 1;
                false
            }
        };
        self.last_hole = Some(LastHole { end_ext: end, stored });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(window: u64, max_gap: u64) -> LedgerConfig {
        LedgerConfig { window, max_gap, ..LedgerConfig::default() }
    }

    fn feed(l: &mut StreamLedger, seqs: impl IntoIterator<Item = u64>) -> Vec<Outcome> {
        seqs.into_iter().map(|s| l.record(s)).collect()
    }

    fn range(first: u64, last: u64, count: u64) -> GapRange {
        GapRange { first, last, count }
    }

    fn seg(first: u64, last: u64, received: u64, lost: u64) -> Segment {
        Segment { first, last, received, lost }
    }

    fn sender(first: u64, last: u64) -> Option<SenderEnd> {
        Some(SenderEnd { first, last })
    }

    /// Numbers a datagram says were never sent are set aside, neither received nor lost; a
    /// run contradicted by a datagram numbered inside it is dropped, never laid over it.
    #[test]
    fn absent_numbers_are_set_aside_and_a_contradicted_run_is_dropped() {
        let absent = |first, count| Absent { first, count };
        let mut l = StreamLedger::new(&cfg(1024, 1000));
        // Heap 0: numbers 0..8, all real. Heap 1: numbers 8..16, only 8 and 9 real.
        for n in 0..8 {
            l.record_with(n, Absent::default());
        }
        l.record_with(8, absent(10, 6));
        l.record_with(9, absent(10, 6)); // its last real packet: set aside now
        for n in 16..20 {
            l.record_with(n, Absent::default());
        }
        // Heap 3 (24..32) says 26.. are absent, and its packet 25 is then its last, so the run
        // is set aside at once; but datagrams numbered 27.. arrive: the run is taken back, 26
        // is lost, 27..32 received (late: the run had moved the highest to 31).
        l.record_with(24, absent(26, 6));
        l.record_with(25, absent(26, 6));
        l.record_with(27, Absent::default());
        for n in 28..40 {
            l.record_with(n, Absent::default());
        }
        l.finish(None);
        let c = l.counts();
        // Lost: 20..24 (4) and 26 (1); 10..16 set aside.
        assert_eq!((c.received, c.lost, c.late, c.duplicate), (8 + 2 + 4 + 2 + 1 + 12, 5, 5, 0));
        // A run not yet set aside (the heap's last packet not yet seen) is dropped by a number
        // inside it, without being laid over it.
        let mut l = StreamLedger::new(&cfg(1024, 1000));
        l.record_with(0, absent(4, 4));
        l.record_with(5, Absent::default());
        l.record_with(6, Absent::default());
        l.record_with(7, Absent::default());
        l.finish(None);
        assert_eq!((l.counts().received, l.counts().lost, l.counts().duplicate), (4, 4, 0));
        // A whole run far ahead is set aside by one move, with bounded work.
        let mut l = StreamLedger::new(&cfg(1024, 1 << 20));
        l.record_with(0, absent(1, 60_000));
        l.record_with(60_001, Absent::default());
        l.finish(None);
        assert_eq!((l.counts().received, l.counts().lost), (2, 0));
    }

    #[test]
    fn in_order_stream_has_no_loss() {
        let mut l = StreamLedger::new(&LedgerConfig::default());
        let out = feed(&mut l, 0..1000);
        assert_eq!(out[0], Outcome::First);
        assert!(out[1..].iter().all(|o| *o == Outcome::InOrder));
        l.finish(sender(0, 999));
        let c = l.counts();
        assert_eq!(c.received, 1000);
        assert_eq!(c, LedgerCounts { received: 1000, ..Default::default() });
        assert!(l.gaps().is_empty());
        assert_eq!(l.segments(), vec![seg(0, 999, 1000, 0)]);
        assert_eq!((l.first_seen(), l.highest()), (Some(0), Some(999)));
    }

    #[test]
    fn head_loss_comes_from_the_sender() {
        let mut l = StreamLedger::new(&LedgerConfig::default());
        feed(&mut l, 10..20);
        l.finish(None);
        assert_eq!(l.counts().lost, 0, "numbers before the first are not loss by themselves");

        let mut l = StreamLedger::new(&LedgerConfig::default());
        feed(&mut l, (10..20).chain(25..30));
        l.finish(sender(0, 29));
        assert_eq!(l.counts().lost, 15);
        assert_eq!(l.gaps(), &[range(0, 9, 10), range(20, 24, 5)]);
        assert_eq!(l.segments(), vec![seg(0, 29, 15, 15)]);
        assert_eq!(l.first_seen(), Some(10));
    }

    #[test]
    fn middle_gap_is_lost_once_it_leaves_the_window() {
        let mut l = StreamLedger::new(&cfg(8, 1000));
        let out = feed(&mut l, (0..10).chain(15..20));
        assert_eq!(out[10], Outcome::Gap { missing: 5 });
        // Highest 19, window covers 12..=19: 10 and 11 are settled.
        assert_eq!(l.counts().lost, 2);
        assert_eq!(l.pending_lost(), 3);
        l.finish(None);
        assert_eq!(l.counts().lost, 5);
        assert_eq!(l.pending_lost(), 0);
        assert_eq!(l.gaps(), &[range(10, 14, 5)]);
        assert_eq!(l.counts().received, 15);
    }

    #[test]
    fn tail_loss_comes_from_the_sender() {
        let mut l = StreamLedger::new(&LedgerConfig::default());
        feed(&mut l, 0..10);
        l.finish(sender(0, 14));
        assert_eq!(l.counts().lost, 5);
        assert_eq!(l.gaps(), &[range(10, 14, 5)]);
        assert_eq!(l.segments(), vec![seg(0, 14, 10, 5)]);
        assert_eq!(l.highest(), Some(9));
    }

    #[test]
    fn sender_range_inside_received_adds_nothing() {
        let mut l = StreamLedger::new(&LedgerConfig::default());
        feed(&mut l, 0..10);
        l.finish(sender(3, 5));
        assert_eq!(l.counts().lost, 0);
        assert_eq!(l.segments(), vec![seg(0, 9, 10, 0)]);
    }

    #[test]
    fn reordering_inside_the_window_is_late_not_lost() {
        let mut l = StreamLedger::new(&cfg(16, 1000));
        let out = feed(&mut l, [0, 1, 3, 2, 4, 9, 5, 8, 6, 7, 10]);
        assert_eq!(out[3], Outcome::Late);
        assert_eq!(out[5], Outcome::Gap { missing: 4 });
        l.finish(sender(0, 10));
        let c = l.counts();
        assert_eq!((c.received, c.late, c.lost, c.duplicate), (11, 5, 0, 0));
        assert!(l.gaps().is_empty());
    }

    #[test]
    fn late_packet_below_the_first_extends_the_segment() {
        let mut l = StreamLedger::new(&cfg(16, 1000));
        assert_eq!(feed(&mut l, [5, 3]), vec![Outcome::First, Outcome::Late]);
        assert_eq!(l.first_seen(), Some(3));
        l.finish(sender(0, 5));
        let c = l.counts();
        assert_eq!((c.received, c.late, c.lost), (2, 1, 4));
        // 4 became a hole of the window; 0..=2 is head loss.
        assert_eq!(l.gaps(), &[range(0, 2, 3), range(4, 4, 1)]);
        assert_eq!(l.segments(), vec![seg(0, 5, 2, 4)]);
    }

    #[test]
    fn reordering_beyond_the_window_is_stale_and_stays_lost() {
        let mut l = StreamLedger::new(&cfg(4, 1000));
        feed(&mut l, [0, 1]);
        feed(&mut l, 3..=10);
        assert_eq!(l.counts().lost, 1, "2 left the window unreceived");
        assert_eq!(l.record(2), Outcome::Stale);
        assert_eq!(l.record(11), Outcome::InOrder, "11 is not 2+1: no resync");
        l.finish(sender(0, 11));
        let c = l.counts();
        assert_eq!((c.received, c.lost, c.stale, c.resync), (11, 1, 1, 0));
        assert_eq!(l.gaps(), &[range(2, 2, 1)]);
    }

    #[test]
    fn duplicates_inside_the_window() {
        let mut l = StreamLedger::new(&cfg(16, 1000));
        let out = feed(&mut l, [0, 1, 2, 1, 2, 2, 0, 3]);
        assert_eq!(out[3..7], [Outcome::Duplicate, Outcome::Duplicate, Outcome::Duplicate, Outcome::Duplicate]);
        l.finish(None);
        let c = l.counts();
        assert_eq!((c.received, c.duplicate, c.late, c.lost), (4, 4, 0, 0));
    }

    #[test]
    fn late_then_duplicate_of_the_late_packet() {
        let mut l = StreamLedger::new(&cfg(16, 1000));
        let out = feed(&mut l, [0, 2, 1, 1]);
        assert_eq!(out[2..], [Outcome::Late, Outcome::Duplicate]);
        assert_eq!(l.counts().late, 1);
        assert_eq!(l.counts().duplicate, 1);
    }

    #[test]
    fn gap_just_under_max_gap_is_loss() {
        let mut l = StreamLedger::new(&cfg(64, 1000));
        assert_eq!(l.record(0), Outcome::First);
        assert_eq!(l.record(1000), Outcome::Gap { missing: 999 });
        assert_eq!(l.record(1001), Outcome::InOrder);
        l.finish(None);
        let c = l.counts();
        assert_eq!((c.received, c.lost, c.stray, c.resync), (3, 999, 0, 0));
        assert_eq!(l.gaps(), &[range(1, 999, 999)]);
    }

    #[test]
    fn gap_over_max_gap_confirmed_is_a_resync() {
        let mut l = StreamLedger::new(&cfg(64, 1000));
        feed(&mut l, [0]);
        assert_eq!(l.record(1001), Outcome::Suspect);
        assert_eq!(l.counts().stray, 1, "provisional");
        assert_eq!(l.record(1002), Outcome::Resync);
        assert_eq!(l.record(1003), Outcome::InOrder);
        l.finish(sender(1001, 1005));
        let c = l.counts();
        assert_eq!((c.received, c.lost, c.stray, c.resync), (4, 2, 0, 1));
        assert_eq!(l.segments(), vec![seg(0, 0, 1, 0), seg(1001, 1005, 3, 2)]);
        assert_eq!(l.gaps(), &[range(1004, 1005, 2)]);
        assert_eq!((l.first_seen(), l.highest()), (Some(1001), Some(1003)));
    }

    #[test]
    fn gap_over_max_gap_unconfirmed_is_stray() {
        let mut l = StreamLedger::new(&cfg(64, 1000));
        feed(&mut l, [0]);
        assert_eq!(l.record(1001), Outcome::Suspect);
        assert_eq!(l.record(1), Outcome::InOrder, "stray did not move the highest");
        assert_eq!(l.record(1002), Outcome::Suspect);
        assert_eq!(l.record(5000), Outcome::Suspect, "not 1002+1");
        l.finish(None);
        let c = l.counts();
        assert_eq!((c.received, c.lost, c.stray, c.resync), (2, 0, 3, 0));
        assert_eq!(l.segments().len(), 1);
    }

    #[test]
    fn pending_suspect_at_finish_stays_counted() {
        let mut l = StreamLedger::new(&cfg(64, 1000));
        feed(&mut l, [0, 1, 5000]);
        l.finish(None);
        assert_eq!(l.counts().stray, 1);
        assert_eq!(l.record(5001), Outcome::Stale, "after finish nothing resyncs");
        assert_eq!(l.counts().resync, 0);
    }

    #[test]
    fn backward_restart_to_zero_resyncs_on_the_second_packet() {
        let mut l = StreamLedger::new(&cfg(256, 1 << 20));
        feed(&mut l, 0..1000);
        assert_eq!(l.record(0), Outcome::Stale);
        assert_eq!(l.counts().stale, 1, "provisional");
        assert_eq!(l.record(1), Outcome::Resync);
        feed(&mut l, 2..10);
        l.finish(sender(0, 9));
        let c = l.counts();
        assert_eq!((c.received, c.lost, c.stale, c.resync, c.duplicate), (1010, 0, 0, 1, 0));
        assert_eq!(l.segments(), vec![seg(0, 999, 1000, 0), seg(0, 9, 10, 0)]);
    }

    #[test]
    fn restart_closes_the_old_segment_window_as_loss() {
        let mut l = StreamLedger::new(&cfg(256, 1 << 20));
        feed(&mut l, (0..1000).filter(|s| *s != 990 && *s != 500));
        assert_eq!(l.counts().lost, 1, "500 settled, 990 still in the window");
        feed(&mut l, [0, 1]);
        let c = l.counts();
        assert_eq!((c.lost, c.resync), (2, 1));
        assert_eq!(l.gaps(), &[range(500, 500, 1), range(990, 990, 1)]);
        assert_eq!(l.segments()[0], seg(0, 999, 998, 2));
    }

    #[test]
    fn straggler_after_a_backward_restart_is_stale_not_a_jump() {
        let mut l = StreamLedger::new(&cfg(256, 1 << 20));
        feed(&mut l, 0..1000);
        assert_eq!(feed(&mut l, [0, 1]), vec![Outcome::Stale, Outcome::Resync]);
        feed(&mut l, 2..6);
        // 998 of the old run, reordered behind the restart: not 992 numbers of the new one lost.
        assert_eq!(l.record(998), Outcome::Stale);
        assert_eq!(l.highest(), Some(5));
        feed(&mut l, 6..11);
        l.finish(sender(0, 10));
        let c = l.counts();
        assert_eq!((c.received, c.lost, c.stale, c.resync), (1011, 0, 1, 1));
        assert_eq!(l.segments(), vec![seg(0, 999, 1000, 0), seg(0, 10, 11, 0)]);
    }

    #[test]
    fn straggler_after_a_forward_restart_does_not_move_the_start_back() {
        let mut l = StreamLedger::new(&cfg(1024, 100));
        feed(&mut l, 0..50);
        assert_eq!(feed(&mut l, [1000, 1001]), vec![Outcome::Suspect, Outcome::Resync]);
        // 45 of the old run: not a late packet 955 below the new segment's first.
        assert_eq!(l.record(45), Outcome::Stale);
        assert_eq!(l.first_seen(), Some(1000));
        // The new segment's own late packet below its first still counts as late.
        assert_eq!(l.record(999), Outcome::Late);
        feed(&mut l, 1002..1010);
        l.finish(sender(999, 1009));
        let c = l.counts();
        assert_eq!((c.received, c.lost, c.stale, c.late), (61, 0, 1, 1));
        assert_eq!(l.segments(), vec![seg(0, 49, 50, 0), seg(999, 1009, 11, 0)]);
    }

    #[test]
    fn straggler_check_ends_when_the_new_segment_reaches_the_old_end() {
        let mut l = StreamLedger::new(&cfg(16, 1 << 20));
        feed(&mut l, 0..100);
        feed(&mut l, [0, 1]);
        // The new run counts up into the old run's last window: its numbers are its own.
        feed(&mut l, 2..90);
        assert_eq!(l.record(95), Outcome::Gap { missing: 5 });
        l.finish(None);
        assert_eq!((l.counts().lost, l.counts().stale), (5, 0));
    }

    #[test]
    fn restart_less_than_a_window_back_reads_as_duplicates() {
        // Documented limitation of the probation rule.
        let mut l = StreamLedger::new(&LedgerConfig::default());
        feed(&mut l, 0..1000);
        assert_eq!(feed(&mut l, [0, 1]), vec![Outcome::Duplicate; 2]);
        assert_eq!(l.counts().resync, 0);
    }

    #[test]
    fn backward_stale_unconfirmed_stays_stale() {
        let mut l = StreamLedger::new(&cfg(256, 1 << 20));
        feed(&mut l, 0..1000);
        assert_eq!(l.record(10), Outcome::Stale);
        assert_eq!(l.record(1000), Outcome::InOrder);
        assert_eq!(l.counts().stale, 1);
        assert_eq!(l.counts().received, 1001);
    }

    #[test]
    fn resync_confirmation_wraps_past_u64_max() {
        let mut l = StreamLedger::new(&cfg(256, 1 << 20));
        feed(&mut l, 1000..2000);
        assert_eq!(l.record(u64::MAX), Outcome::Stale);
        assert_eq!(l.record(0), Outcome::Resync);
        assert_eq!(l.segments()[1], seg(u64::MAX, 0, 2, 0));
    }

    #[test]
    fn resync_confirmation_wraps_on_a_short_counter() {
        let mut l = StreamLedger::new(&LedgerConfig { seq_bits: 8, ..LedgerConfig::default() });
        feed(&mut l, 0..=100);
        assert_eq!(l.record(255), Outcome::Stale);
        assert_eq!(l.record(0x100), Outcome::Resync, "255 + 1 is 0 in 8 bits");
        assert_eq!(l.segments()[1], seg(255, 0, 2, 0));
        // The old run's stragglers are watched until the new run nears the old end (100).
        feed(&mut l, 1..=40);
        assert_eq!(l.record(110), Outcome::Suspect);
        assert_eq!(l.record(111), Outcome::Resync);
        assert_eq!(l.counts().resync, 2);
    }

    #[test]
    fn counts_near_u64_max_and_wrap_through_zero() {
        let mut l = StreamLedger::new(&LedgerConfig::default());
        let start = u64::MAX - 5;
        let seqs: Vec<u64> = (0..20u64)
            .map(|i| start.wrapping_add(i))
            .filter(|s| ![u64::MAX - 3, u64::MAX - 1, u64::MAX, 0, 7].contains(s))
            .collect();
        let out = feed(&mut l, seqs.iter().copied());
        assert!(!out.contains(&Outcome::Suspect) && !out.contains(&Outcome::Stale));
        l.finish(sender(u64::MAX - 7, 15));
        let c = l.counts();
        assert_eq!((c.received, c.lost, c.resync), (15, 2 + 5 + 2, 0), "{c:?}");
        assert_eq!(
            l.gaps(),
            &[
                range(u64::MAX - 7, u64::MAX - 6, 2),
                range(u64::MAX - 3, u64::MAX - 3, 1),
                range(u64::MAX - 1, 0, 3),
                range(7, 7, 1),
                range(14, 15, 2),
            ]
        );
        assert_eq!(l.segments(), vec![seg(u64::MAX - 7, 15, 15, 9)]);
        assert_eq!(l.highest(), Some(13));
    }

    #[test]
    fn max_then_zero_is_in_order() {
        let mut l = StreamLedger::new(&LedgerConfig::default());
        assert_eq!(feed(&mut l, [u64::MAX, 0]), vec![Outcome::First, Outcome::InOrder]);
        assert_eq!(l.record(u64::MAX), Outcome::Duplicate);
    }

    /// Feeds `total` packets of a `bits`-wide counter starting at `start`,
    /// dropping every packet whose index satisfies `drop`.
    fn wrapping_run(bits: u32, total: u64, start: u64, drop: impl Fn(u64) -> bool) {
        let mask = u64::MAX >> (64 - bits);
        let mut l = StreamLedger::new(&LedgerConfig { seq_bits: bits, ..LedgerConfig::default() });
        let mut expected = Vec::new();
        for i in 0..total {
            let s = start.wrapping_add(i) & mask;
            if drop(i) {
                expected.push(s);
            } else {
                let o = l.record(s);
                assert!(!matches!(o, Outcome::Suspect | Outcome::Stale | Outcome::Resync));
            }
        }
        l.finish(sender(start & mask, start.wrapping_add(total - 1) & mask));
        let c = l.counts();
        assert_eq!(c.received, total - expected.len() as u64);
        assert_eq!(c.lost, expected.len() as u64);
        assert_eq!(c.ranges_dropped, 0);
        let mut got = Vec::new();
        for r in l.gaps() {
            for k in 0..r.count {
                got.push(r.first.wrapping_add(k) & mask);
            }
            assert_eq!(r.first.wrapping_add(r.count - 1) & mask, r.last);
        }
        assert_eq!(got, expected);
        assert_eq!(l.segments().len(), 1);
    }

    #[test]
    fn eight_bit_counter_wraps_many_cycles_with_loss() {
        wrapping_run(8, 10_000, 0, |i| i % 7 == 3 || (i / 100) % 13 == 5 && i % 100 < 40);
        wrapping_run(8, 10_000, 250, |i| i == 0 || i % 61 == 60);
    }

    #[test]
    fn sixteen_bit_counter_wraps_many_cycles_with_loss() {
        wrapping_run(16, 300_000, 65_000, |i| i % 1009 < 3 || (i / 7000) % 9 == 4 && i % 7000 < 5000);
    }

    #[test]
    fn thirty_two_bit_counter_wraps() {
        wrapping_run(32, 200_000, u64::from(u32::MAX) - 100_000, |i| i % 333 == 0);
    }

    #[test]
    fn eight_bit_reordering_and_restart() {
        let mut l = StreamLedger::new(&LedgerConfig { seq_bits: 8, ..LedgerConfig::default() });
        assert_eq!((l.config().window, l.config().max_gap), (64, 63));
        feed(&mut l, [250, 251, 253, 252, 254, 255, 1, 0, 2]);
        assert_eq!(l.counts().late, 2);
        assert_eq!(l.record(130), Outcome::Stale, "128 ahead reads as behind");
        assert_eq!(l.record(100), Outcome::Suspect, "98 ahead is over max_gap");
        assert_eq!(l.record(101), Outcome::Resync);
        l.finish(None);
        let c = l.counts();
        assert_eq!((c.received, c.late, c.lost, c.resync, c.stray, c.stale), (11, 2, 0, 1, 0, 1));
        assert_eq!(l.segments(), vec![seg(250, 2, 9, 0), seg(100, 101, 2, 0)]);
    }

    #[test]
    fn adjacent_holes_coalesce() {
        let mut l = StreamLedger::new(&cfg(4, 1000));
        feed(&mut l, [0, 10]);
        // 1..=6 settled by the jump, 7..=9 still in the window.
        assert_eq!(l.gaps(), &[range(1, 6, 6)]);
        l.finish(None);
        assert_eq!(l.gaps(), &[range(1, 9, 9)]);

        // A hole settled bit by bit as the window slides.
        let mut l = StreamLedger::new(&cfg(64, 1000));
        feed(&mut l, [0, 50, 51, 52, 200, 201]);
        l.finish(sender(0, 203));
        assert_eq!(l.gaps(), &[range(1, 49, 49), range(53, 199, 147), range(202, 203, 2)]);
        assert_eq!(l.counts().lost, 49 + 147 + 2);
    }

    #[test]
    fn holes_across_bitmap_words_and_window_wrap() {
        let mut l = StreamLedger::new(&cfg(256, 10_000));
        let kept: Vec<u64> = (0..5000).filter(|s| s % 97 > 40).collect();
        feed(&mut l, kept.iter().copied());
        l.finish(sender(0, 4999));
        let expect: Vec<GapRange> =
            (0..5000u64).step_by(97).map(|s| range(s, (s + 40).min(4999), (s + 40).min(4999) - s + 1)).collect();
        assert_eq!(l.gaps(), &expect[..]);
    }

    #[test]
    fn max_ranges_overflow_keeps_exact_loss() {
        let config = LedgerConfig { max_ranges: 3, ..cfg(64, 1000) };
        let mut l = StreamLedger::new(&config);
        let cap = l.gaps.capacity();
        feed(&mut l, (0..100).filter(|s| s % 10 != 5));
        l.finish(sender(0, 110));
        let c = l.counts();
        assert_eq!(c.lost, 10 + 11);
        assert_eq!(c.ranges_dropped, 11 - 3);
        assert_eq!(l.gaps(), &[range(5, 5, 1), range(15, 15, 1), range(25, 25, 1)]);
        assert_eq!(l.gaps.capacity(), cap, "never grows");
        assert_eq!(l.segments()[0].lost, 21);
    }

    #[test]
    fn dropped_range_extended_later_is_counted_once() {
        let config = LedgerConfig { max_ranges: 1, ..cfg(4, 1000) };
        let mut l = StreamLedger::new(&config);
        feed(&mut l, [0, 2, 20]);
        // 1 kept; 3..=16 dropped; 17..=19 extends the dropped one at finish.
        l.finish(None);
        let c = l.counts();
        assert_eq!((c.lost, c.ranges_dropped), (1 + 14 + 3, 1));
        assert_eq!(l.gaps(), &[range(1, 1, 1)]);
    }

    #[test]
    fn head_range_is_dropped_when_full() {
        let config = LedgerConfig { max_ranges: 1, ..cfg(64, 1000) };
        let mut l = StreamLedger::new(&config);
        feed(&mut l, [5, 7]);
        l.finish(sender(0, 7));
        let c = l.counts();
        assert_eq!((c.lost, c.ranges_dropped), (6, 1));
        assert_eq!(l.gaps(), &[range(6, 6, 1)]);
    }

    #[test]
    fn segments_overflow_is_counted() {
        let config = LedgerConfig { max_segments: 1, ..cfg(64, 1000) };
        let mut l = StreamLedger::new(&config);
        feed(&mut l, [0, 1, 5000, 5001, 9000, 9001, 20_000, 20_001]);
        assert_eq!(l.counts().resync, 3);
        assert_eq!(l.segments_dropped(), 2);
        assert_eq!(l.segments(), vec![seg(0, 1, 2, 0), seg(20_000, 20_001, 2, 0)]);
        assert_eq!(l.counts().received, 8);
    }

    #[test]
    fn merge_adds_and_saturates() {
        let mut a = LedgerCounts {
            received: 10,
            lost: 1,
            late: 2,
            duplicate: 3,
            stale: 4,
            stray: 5,
            invalid: 6,
            resync: 7,
            ranges_dropped: u64::MAX - 1,
        };
        let b = LedgerCounts {
            received: 1,
            lost: 2,
            late: 3,
            duplicate: 4,
            stale: 5,
            stray: 6,
            invalid: 7,
            resync: 8,
            ranges_dropped: 9,
        };
        a.merge(&b);
        assert_eq!(
            a,
            LedgerCounts {
                received: 11,
                lost: 3,
                late: 5,
                duplicate: 7,
                stale: 9,
                stray: 11,
                invalid: 13,
                resync: 15,
                ranges_dropped: u64::MAX,
            }
        );
    }

    #[test]
    fn drops_per_million() {
        let c = LedgerCounts { received: 999_000, lost: 1000, ..Default::default() };
        assert_eq!(c.drops_per_million(), 1000.0);
        assert_eq!(LedgerCounts::default().drops_per_million(), 0.0);
        let all_lost = LedgerCounts { lost: 5, ..Default::default() };
        assert_eq!(all_lost.drops_per_million(), 1e6);
        let huge = LedgerCounts { received: u64::MAX, lost: u64::MAX, ..Default::default() };
        assert!(huge.drops_per_million().is_finite());
    }

    #[test]
    fn counts_serialise() {
        let c = LedgerCounts { lost: 3, resync: 1, ..Default::default() };
        let back: LedgerCounts = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn finish_is_idempotent() {
        let mut l = StreamLedger::new(&cfg(16, 1000));
        feed(&mut l, [0, 3, 4, 9]);
        l.finish(sender(0, 12));
        let (c, g, s) = (l.counts(), l.gaps().to_vec(), l.segments());
        assert_eq!(c.lost, 2 + 4 + 3);
        l.finish(sender(0, 12));
        l.finish(sender(0, 100));
        l.finish(None);
        assert_eq!((l.counts(), l.gaps().to_vec(), l.segments()), (c, g, s));
        assert!(l.is_finished());
    }

    #[test]
    fn finish_with_no_packets() {
        let mut l = StreamLedger::new(&LedgerConfig::default());
        l.finish(sender(5, 14));
        assert_eq!(l.counts(), LedgerCounts { lost: 10, ..Default::default() });
        assert_eq!(l.gaps(), &[range(5, 14, 10)]);
        assert_eq!(l.segments(), vec![seg(5, 14, 0, 10)]);
        assert_eq!((l.first_seen(), l.highest()), (None, None));
        l.finish(sender(5, 14));
        assert_eq!(l.counts().lost, 10);

        let mut l = StreamLedger::new(&LedgerConfig::default());
        l.finish(None);
        assert_eq!(l.counts(), LedgerCounts::default());
        assert!(l.segments().is_empty() && l.gaps().is_empty());

        // A wrapping sender range on a 16-bit counter.
        let mut l = StreamLedger::new(&LedgerConfig { seq_bits: 16, ..LedgerConfig::default() });
        l.finish(sender(65_530, 3));
        assert_eq!(l.gaps(), &[range(65_530, 3, 10)]);
    }

    #[test]
    fn head_loss_wraps_on_a_short_counter() {
        let mut l = StreamLedger::new(&LedgerConfig { seq_bits: 16, ..LedgerConfig::default() });
        feed(&mut l, 2..10);
        l.finish(sender(65_530, 12));
        assert_eq!(l.gaps(), &[range(65_530, 1, 8), range(10, 12, 3)]);
        assert_eq!(l.counts().lost, 11);
        assert_eq!(l.segments(), vec![seg(65_530, 12, 8, 11)]);
    }

    #[test]
    fn record_after_finish_only_counts_stale() {
        let mut l = StreamLedger::new(&LedgerConfig::default());
        feed(&mut l, [0, 1, 2]);
        l.finish(sender(0, 5));
        let before = l.counts();
        assert_eq!(feed(&mut l, [3, 4, 2, 100]), vec![Outcome::Stale; 4]);
        let after = l.counts();
        assert_eq!(after, LedgerCounts { stale: 4, ..before });
        assert_eq!(after.lost, 3, "stragglers stay lost");
        assert_eq!(l.highest(), Some(2));

        let mut l = StreamLedger::new(&LedgerConfig::default());
        l.finish(None);
        assert_eq!(l.record(7), Outcome::Stale);
        assert_eq!(l.counts().received, 0);
    }

    #[test]
    fn invalid_is_only_counted() {
        let mut l = StreamLedger::new(&cfg(64, 1000));
        l.invalid();
        feed(&mut l, [0, 5000]);
        l.invalid();
        assert_eq!(l.record(5001), Outcome::Resync, "invalid() does not break probation");
        l.finish(None);
        l.invalid();
        let c = l.counts();
        assert_eq!((c.invalid, c.received, c.resync), (3, 3, 1));
    }

    #[test]
    fn config_is_normalised() {
        let e = |window, max_gap, seq_bits| {
            let c = LedgerConfig { window, max_gap, seq_bits, ..LedgerConfig::default() }.effective();
            (c.window, c.max_gap, c.seq_bits)
        };
        assert_eq!(e(65536, 1 << 24, 64), (65536, 1 << 24, 64));
        assert_eq!(e(1000, 1 << 24, 64), (512, 1 << 24, 64));
        assert_eq!(e(0, 0, 64), (1, 1, 64));
        assert_eq!(e(65536, 1 << 24, 16), (16384, 16383, 16));
        assert_eq!(e(65536, 1 << 24, 8), (64, 63, 8));
        assert_eq!(e(65536, 1 << 24, 3), (2, 1, 3));
        assert_eq!(e(1, 1 << 24, 3), (1, 2, 3));
        assert_eq!(e(65536, 1 << 24, 2), (1, 1, 2));
        assert_eq!(e(65536, 1 << 24, 1), (1, 1, 1));
        assert_eq!(e(65536, 1 << 24, 0), (1, 1, 1));
        assert_eq!(e(65536, 1 << 24, 99), (65536, 1 << 24, 64));
        assert_eq!(e(u64::MAX, u64::MAX, 64).1, (1 << 63) - (1 << 62) - 1);
        let l = StreamLedger::new(&LedgerConfig { window: 1000, ..Default::default() });
        assert_eq!(l.config().window, 512);
        assert_eq!(l.bits.len(), 8);
    }

    #[test]
    fn tiny_counters_work() {
        let mut l = StreamLedger::new(&LedgerConfig { seq_bits: 1, ..LedgerConfig::default() });
        let out = feed(&mut l, (0..10).map(|i| i % 2));
        assert!(out[1..].iter().all(|o| *o == Outcome::InOrder));
        assert_eq!(l.record(1), Outcome::Duplicate);

        let mut l = StreamLedger::new(&LedgerConfig { seq_bits: 3, window: 1, ..LedgerConfig::default() });
        let out = feed(&mut l, [0, 1, 3, 4, 5, 6, 7, 0, 9]);
        assert_eq!(out[2], Outcome::Gap { missing: 1 });
        assert_eq!(out[8], Outcome::InOrder, "9 is 1 in 3 bits");
        l.finish(None);
        assert_eq!((l.counts().received, l.counts().lost), (9, 1));
        assert_eq!(l.gaps(), &[range(2, 2, 1)]);
    }

    #[test]
    fn sequence_is_masked_to_its_width() {
        let mut l = StreamLedger::new(&LedgerConfig { seq_bits: 8, ..LedgerConfig::default() });
        assert_eq!(feed(&mut l, [0x1ff, 0x300]), vec![Outcome::First, Outcome::InOrder]);
        assert_eq!(l.highest(), Some(0));
    }

    #[test]
    fn window_of_one_and_small_windows() {
        for window in [1, 2, 8, 32, 64, 128] {
            let mut l = StreamLedger::new(&cfg(window, 1000));
            feed(&mut l, (0..500).filter(|s| s % 9 != 4));
            l.finish(sender(0, 499));
            let c = l.counts();
            assert_eq!((c.received, c.lost), (444, 56), "window {window}");
            assert_eq!(l.gaps().len(), 56);
        }
        let mut l = StreamLedger::new(&cfg(1, 1000));
        assert_eq!(feed(&mut l, [0, 2, 1]), vec![Outcome::First, Outcome::Gap { missing: 1 }, Outcome::Stale]);
    }

    #[test]
    fn pending_lost_tracks_unsettled_holes() {
        let mut l = StreamLedger::new(&cfg(128, 1000));
        assert_eq!(l.pending_lost(), 0);
        feed(&mut l, [0, 10, 100]);
        assert_eq!((l.counts().lost, l.pending_lost()), (0, 98));
        l.record(5);
        assert_eq!(l.pending_lost(), 97);
        l.record(150);
        // Window 23..=150: 1..=22 less 5 and 10 settled.
        assert_eq!((l.counts().lost, l.pending_lost()), (20, 77 + 49));
    }

    #[test]
    fn record_never_grows_its_buffers() {
        let config = LedgerConfig { max_ranges: 8, max_segments: 2, ..cfg(64, 1000) };
        let mut l = StreamLedger::new(&config);
        let caps = (l.bits.capacity(), l.gaps.capacity(), l.closed.capacity());
        let mut s = 0u64;
        for i in 0..100_000u64 {
            s = s.wrapping_add(1 + (i * 7919) % 5);
            l.record(if i % 1000 == 999 { s.wrapping_mul(31) } else { s });
        }
        assert!(l.counts().ranges_dropped > 0);
        assert_eq!((l.bits.capacity(), l.gaps.capacity(), l.closed.capacity()), caps);
    }
}
