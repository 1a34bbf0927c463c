//! The capture: a dedicated thread that receives in batches through the configured backend,
//! keeps every stream's ledger inline, and judges the senders' end-of-stream messages.
//!
//! The loop is generic over the [`Backend`] and the [`Sink`], so neither costs a call through
//! a pointer per datagram. It allocates nothing and makes no system call but the receive
//! itself: stream state and ledgers are preallocated, live counters are published with relaxed
//! atomic stores, and the clock is read through the vDSO. Between batches, the moderation
//! naps at moderate rates so that each receive call returns a useful batch.
//!
//! Where the sink lends ring memory, datagrams are received straight into it and checked and
//! accounted where they lie; the ledger's verdict then decides what the sink keeps: a
//! duplicate is taken back, and so is an invalid datagram unless the sink keeps those. Ring
//! space is still decided before the ledger (a datagram the ring had no room for is counted
//! ring-full and is in no ledger), so the ledger describes exactly what was kept or rejected.

use super::backend::{Landed, RunBackend};
use super::moderation::Moderation;
use super::relearn::{Relearn, Step};
use super::report::StrayEnd;
use super::sink::{Live, Reject, Sink};
use super::{Backend, RecvConfig};
use crate::control::{EndOfStream, END_LEN};
use crate::error::{Error, Result};
use crate::ledger::{LedgerConfig, LedgerCounts, Locked, Outcome, StreamLedger};
use crate::sys;
use crate::wire::{Format, Invalid, LengthLock, Mismatch, PacketInfo, UNSEQUENCED};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The fastest burst a nap must survive, bytes/s: 40 Gb/s, above what a veth pair or a
/// 25 GbE NIC delivers to one socket.
const BURST_BYTES_PER_SEC: f64 = 5e9;

/// Longest nap that keeps a burst at `BURST_BYTES_PER_SEC` (40 Gb/s) within an eighth of the granted
/// receive buffer (the kernel's accounting counts per-datagram overhead too, hence the margin).
pub fn nap_cap_ns(rcvbuf_granted: usize) -> u64 {
    (rcvbuf_granted as f64 / 8.0 / BURST_BYTES_PER_SEC * 1e9) as u64
}

/// One tracked stream: its ledger and what the report says about it.
pub(super) struct Slot {
    pub(super) src: Option<SocketAddr>,
    pub(super) stream: u32,
    pub(super) ledger: StreamLedger,
    /// The stream's datagram length, for formats that do not fix one.
    pub(super) len_lock: LengthLock,
    pub(super) datagrams: u64,
    pub(super) bytes: u64,
    pub(super) invalid_kinds: [u64; 3],
    pub(super) ring_full: u64,
    pub(super) end: Option<EndOfStream>,
    /// The range `end` claims, in the numbers the format's check reports.
    pub(super) end_range: (u64, u64),
    /// Two end-of-stream messages disagreed, or data contradicted an accepted one: this
    /// stream's end is unknown and no later message settles it.
    pub(super) end_disputed: bool,
    /// A message in the format itself (a SPEAD stop heap) closed the stream: the last number
    /// it had. Believed as an end-of-stream message is: from the source whose data was seen,
    /// beyond every number received; later data beyond it withdraws it.
    pub(super) closed_at: Option<u64>,
    pub(super) first_ns: u64,
    pub(super) last_ns: u64,
}

/// How long `--once` waits in silence by default (`RecvConfig::once_quiet`, `--once-quiet`),
/// after an end-of-stream message it could not trust
/// (from a source whose data never arrived, or contradicting the data), before it gives up
/// waiting for the run to end. Only once data has arrived: a receiver still waiting for its
/// first datagram ignores such messages entirely, so a stranger cannot end a run before it
/// starts (a sender whose data is all lost then leaves it to `--duration` or Ctrl-C, and the
/// report names the message). After data, a run whose own end message was lost or disputed
/// must not wait forever; a stranger's message sent while data flows changes nothing.
pub const ONCE_QUIET_NS: u64 = 3_000_000_000;

/// The run a stream closed by its own format (a SPEAD stop heap) counts as, for `--once`: such
/// a stream is a run of one stream.
const CLOSED_SESSION: u64 = u64::MAX;

/// Most end-of-stream messages from sources without data that a report lists (all are counted).
const STRAY_ENDS_LISTED: usize = 16;

impl Slot {
    /// A slot with nothing seen, its ledger allocated.
    fn fresh(cfg: &LedgerConfig) -> Slot {
        Slot {
            src: None,
            stream: 0,
            ledger: StreamLedger::new(cfg),
            len_lock: LengthLock::default(),
            datagrams: 0,
            bytes: 0,
            invalid_kinds: [0; 3],
            ring_full: 0,
            end: None,
            end_range: (0, 0),
            end_disputed: false,
            closed_at: None,
            first_ns: 0,
            last_ns: 0,
        }
    }
}

/// What the capture does with a refused datagram after offering it to the study of a change of
/// layout ([`Relearn`]).
enum Relearned {
    /// Count it refused.
    Refused,
    /// Count it refused, and keep it (the sink is not told to take it back).
    RefusedKept,
    /// Counted, or held to be: hand it to the sink, count nothing more.
    Held,
    /// The layout changed: check it again, by the new one.
    Recheck,
}

/// The capture's whole state: every stream's slot and ledger, allocated up front, and the
/// run's counts. Fed one datagram at a time by [`Capture::handle`].
pub(super) struct Capture<'a, S: Sink> {
    /// The layout the run began with.
    pub(super) fmt: &'a dyn Format,
    /// The layout in force after a change ([`Relearn`]), when there was one.
    now_fmt: Option<Arc<dyn Format>>,
    /// Every layout after the first, in order: layout k (from 1) is `layouts[k - 1]`.
    pub(super) layouts: Vec<Arc<dyn Format>>,
    /// The streams of earlier layouts, ended by a change, with their layout's index.
    pub(super) retired: Vec<(usize, Slot)>,
    /// The ledgers' settings (for the slots of a new layout).
    ledger_cfg: LedgerConfig,
    /// A run that learned its layout: the study of refused datagrams for a change of it.
    pub(super) relearn: Option<Box<Relearn>>,
    pub(super) sink: S,
    pub(super) ring_full: u64,
    pub(super) unsequenced: u64,
    pub(super) slots: Vec<Slot>,
    pub(super) active: usize,
    pub(super) last: usize,
    pub(super) untracked: u64,
    pub(super) datagrams: u64,
    pub(super) bytes: u64,
    pub(super) now: u64,
    pub(super) first_session: Option<(u64, u32, u32)>,
    pub(super) first_ns: u64,
    pub(super) last_ns: u64,
    /// Whether the format needs [`LengthLock`] per stream.
    pub(super) lock_len: bool,
    /// Sequence numbers' mask (the ledger's width).
    pub(super) seq_mask: u64,
    /// The format's stream count (VDIF threads), to check an end message's stream id.
    pub(super) fmt_streams: u32,
    /// End-of-stream messages from a source and stream that sent no data seen here.
    pub(super) stray_control: u64,
    /// End-of-stream messages that contradict themselves, the data seen, or another message.
    pub(super) invalid_control: u64,
    /// The first [`STRAY_ENDS_LISTED`] stray messages (capacity taken up front).
    pub(super) stray_ends: Vec<StrayEnd>,
    /// When the last stray or invalid control message arrived (0: none).
    pub(super) distrust_ns: u64,
    /// With several capture threads: the run's shared account of ended streams and this
    /// thread's index in it, so that `--once` ends when the run's streams, wherever they
    /// were steered, have all ended.
    pub(super) once_group: Option<(&'a super::run::OnceGroup, usize)>,
    /// The first datagram the format refused: where from, how long, and why, field by field
    /// (so the report can say "the stream does not match --format" and how).
    pub(super) first_invalid: Option<FirstInvalid>,
}

/// The first refused datagram of a capture thread (plain values: kept without allocating).
#[derive(Clone, Copy, Debug)]
pub(super) struct FirstInvalid {
    pub(super) src: Option<SocketAddr>,
    pub(super) len: usize,
    pub(super) why: Mismatch,
}

impl<'a, S: Sink> Capture<'a, S> {
    /// All the memory the capture will use: `max_streams` slots with their ledgers.
    pub(super) fn new(fmt: &'a dyn Format, sink: S, ledger_cfg: &LedgerConfig, max_streams: usize, now: u64) -> Self {
        let slots: Vec<Slot> = (0..max_streams).map(|_| Slot::fresh(ledger_cfg)).collect();
        Capture {
            fmt,
            now_fmt: None,
            layouts: Vec::new(),
            retired: Vec::new(),
            ledger_cfg: ledger_cfg.clone(),
            relearn: None,
            sink,
            ring_full: 0,
            unsequenced: 0,
            slots,
            active: 0,
            last: 0,
            untracked: 0,
            datagrams: 0,
            bytes: 0,
            now,
            first_session: None,
            first_ns: 0,
            last_ns: 0,
            lock_len: fmt.length_locked(),
            seq_mask: u64::MAX >> (64 - ledger_cfg.effective().seq_bits),
            fmt_streams: fmt.stream_count().max(1),
            stray_control: 0,
            invalid_control: 0,
            stray_ends: Vec::with_capacity(STRAY_ENDS_LISTED),
            distrust_ns: 0,
            once_group: None,
            first_invalid: None,
        }
    }

    /// The layout in force.
    #[inline(always)]
    fn fmt(&self) -> &dyn Format {
        match &self.now_fmt {
            Some(f) => &**f,
            None => self.fmt,
        }
    }

    /// Keep the first refused datagram and why: `known` when the caller knows it, else the
    /// format re-checks it field by field (which the per-datagram check does not). Called only
    /// while `first_invalid` is empty, so at most once per capture.
    #[cold]
    fn note_invalid(&mut self, data: &[u8], src: Option<SocketAddr>, kind: Invalid, known: Option<Mismatch>) {
        let why = known.or_else(|| self.fmt().explain(data)).unwrap_or(Mismatch::of(kind));
        self.first_invalid = Some(FirstInvalid { src, len: data.len(), why });
    }

    #[inline]
    fn slot(&mut self, src: Option<SocketAddr>, stream: u32) -> Option<usize> {
        let l = self.last;
        if l < self.active && self.slots[l].src == src && self.slots[l].stream == stream {
            return Some(l);
        }
        if let Some(i) = self.slots[..self.active].iter().position(|s| s.src == src && s.stream == stream) {
            self.last = i;
            return Some(i);
        }
        if self.active == self.slots.len() {
            return None;
        }
        let i = self.active;
        self.active += 1;
        let s = &mut self.slots[i];
        s.src = src;
        s.stream = stream;
        s.first_ns = self.now;
        self.last = i;
        Some(i)
    }

    /// Hand a datagram to the sink (`at`: the lease slot it already lies in); false (and
    /// counted) when the ring had no room for it.
    #[inline]
    fn keep(
        &mut self,
        data: &[u8],
        src: Option<SocketAddr>,
        checked: &std::result::Result<PacketInfo, Invalid>,
        at: Option<(&sys::Lease, usize)>,
    ) -> bool {
        let kept = match at {
            Some((lease, slot)) => self.sink.accept_in_place(lease, slot, data, src, checked, self.now),
            None => self.sink.accept(data, src, checked, self.now),
        };
        if !kept {
            self.ring_full += 1;
        }
        kept
    }

    /// One datagram from the backend, wherever it landed.
    #[inline]
    fn landed(&mut self, l: Landed<'_>) {
        match l {
            Landed::InPlace { data, src, lease, slot } => self.handle_at(data, src, Some((lease, slot))),
            Landed::Return(lease) => self.sink.give_back(lease),
            Landed::Copied { data, src } => self.handle_at(data, src, None),
        }
    }

    /// A datagram read before the capture began (while its layout was learned) at `at_ns`,
    /// counted (and, by a recorder, stamped) as arriving then.
    pub(super) fn replay(&mut self, data: &[u8], src: Option<SocketAddr>, at_ns: u64) {
        self.now = at_ns;
        self.handle_at(data, src, None)
    }

    #[cfg(test)]
    fn handle(&mut self, data: &[u8], src: Option<SocketAddr>) {
        self.handle_at(data, src, None)
    }

    #[inline]
    fn handle_at(&mut self, data: &[u8], src: Option<SocketAddr>, at: Option<(&sys::Lease, usize)>) {
        if data.len() == END_LEN {
            if let Some(e) = EndOfStream::decode(data) {
                self.on_end(e, src);
                return;
            }
        }
        self.datagrams += 1;
        self.bytes += data.len() as u64;
        if self.first_ns == 0 {
            self.first_ns = self.now;
        }
        self.last_ns = self.now;
        self.account::<true>(data, src, at)
    }

    /// Check and count one datagram: `SINK` false for a datagram held while a change of
    /// layout was studied, counted now (the sink had it when it arrived).
    #[inline(always)]
    fn account<const SINK: bool>(&mut self, data: &[u8], src: Option<SocketAddr>, at: Option<(&sys::Lease, usize)>) {
        let mut checked = self.fmt().check(data);
        let mut keep_refused = false;
        if SINK && checked.is_err() && self.relearn.is_some() {
            match self.relearned(data, src) {
                Relearned::Refused => {}
                Relearned::RefusedKept => keep_refused = true,
                Relearned::Held => {
                    self.keep(data, src, &checked, at);
                    return;
                }
                Relearned::Recheck => checked = self.fmt().check(data),
            }
        }
        let stream = checked.map(|i| i.stream).unwrap_or(0);
        if stream == UNSEQUENCED {
            // Valid but without a place in any sequence (SPEAD control heaps, headerless Mark5B
            // halves): kept, counted apart, kept out of every ledger.
            self.unsequenced += 1;
            if SINK {
                self.keep(data, src, &checked, at);
            }
            if let Some((stream, next)) = self.fmt().closes_stream(data) {
                self.on_close(src, stream, next);
            }
            return;
        }
        let Some(i) = self.slot(src, stream) else {
            // Beyond --max-streams: in no ledger (the report says so), but still recorded.
            self.untracked += 1;
            if SINK {
                self.keep(data, src, &checked, at);
            }
            return;
        };
        if SINK && !self.keep(data, src, &checked, at) {
            self.slots[i].ring_full += 1;
            return;
        }
        let now = self.now;
        let lock_len = self.lock_len;
        let s = &mut self.slots[i];
        let result = checked.map(|i| i.seq);
        s.datagrams += 1;
        s.bytes += data.len() as u64;
        s.last_ns = now;
        match result {
            Ok(seq) if !lock_len => {
                let absent = checked.map_or(Default::default(), |i| i.absent);
                let duplicate = s.ledger.record_with(seq, absent) == Outcome::Duplicate;
                if SINK && duplicate {
                    self.sink.reject(Reject::Duplicate);
                }
            }
            Ok(seq) => match s.ledger.record_locked_outcome(&mut s.len_lock, data.len(), seq) {
                Locked::Recorded(Outcome::Duplicate) => {
                    if SINK {
                        self.sink.reject(Reject::Duplicate)
                    }
                }
                Locked::Recorded(_) | Locked::Held => {}
                Locked::Wrong => {
                    s.invalid_kinds[Invalid::Length as usize] += 1;
                    if SINK {
                        self.sink.reject(Reject::Invalid);
                    }
                    if self.first_invalid.is_none() {
                        let why = Mismatch::length(data.len(), s.len_lock.known_len());
                        self.note_invalid(data, src, Invalid::Length, Some(why));
                    }
                    return;
                }
                // The earlier, held datagram was the invalid one (already kept); this one is held.
                Locked::ReplacedHeld => {
                    s.invalid_kinds[Invalid::Length as usize] += 1;
                    return;
                }
            },
            Err(kind) => {
                s.ledger.invalid();
                s.invalid_kinds[kind as usize] += 1;
                if SINK && !keep_refused {
                    self.sink.reject(Reject::Invalid);
                }
                if self.first_invalid.is_none() {
                    self.note_invalid(data, src, kind, None);
                }
                return;
            }
        };
        // Data beyond a stop heap: the stream went on (or the stop was not its own).
        if s.closed_at.is_some_and(|last| {
            result.is_ok_and(|seq| !in_range(seq, (s.ledger.first_seen().unwrap_or(seq), last), self.seq_mask))
        }) {
            s.closed_at = None;
            self.note_closed();
            return;
        }
        // A wirespeed sender sends nothing after its end message: data outside the range the
        // message claimed proves that message wrong (forged, or from another run).
        if s.end.is_some() {
            let seq = result.unwrap_or(0);
            if !in_range(seq, s.end_range, self.seq_mask) {
                self.retract_end(i, now);
            }
        }
    }

    /// An end-of-stream message. It settles a stream only when it is consistent in itself and
    /// with the data seen: from the source address and port and the format stream whose data
    /// arrived here, claiming a range that covers every number of the stream's current segment
    /// and at least as many datagrams sent as were received. Anything else is counted (stray
    /// or invalid control) and ignored: it never opens a ledger slot and never ends a run.
    fn on_end(&mut self, e: EndOfStream, src: Option<SocketAddr>) {
        let now = self.now;
        if !self.end_consistent(&e) {
            self.invalid_control += 1;
            self.distrust_ns = now;
            return;
        }
        let found = self.slots[..self.active].iter().position(|s| s.src == src && s.stream == e.format_stream);
        let Some(i) = found else {
            self.stray_end(e, src);
            return;
        };
        let mask = self.seq_mask;
        let s = &mut self.slots[i];
        s.ledger.record_held(&mut s.len_lock);
        let (Some(first), Some(highest)) = (s.ledger.first_seen(), s.ledger.highest()) else {
            // Only invalid datagrams came from there: nothing this message could settle.
            self.stray_end(e, src);
            return;
        };
        if s.end_disputed {
            self.invalid_control += 1;
            self.distrust_ns = now;
            return;
        }
        if let Some(old) = s.end {
            if old == e {
                return; // a repeated copy
            }
            // Two different accounts of one stream: at least one is false, and which cannot be
            // told. Neither is believed.
            self.invalid_control += 1;
            self.retract_end(i, now);
            return;
        }
        let received = s.ledger.current_segment().map_or(0, |g| g.received);
        // The layout in force, read field by field (`s` holds a slot).
        let fmt: &dyn Format = self.now_fmt.as_deref().unwrap_or(self.fmt);
        let range = fmt.checked_range(e.first_seq, e.last_seq);
        if !in_range(first, range, mask) || !in_range(highest, range, mask) || received > e.sent {
            self.invalid_control += 1;
            self.distrust_ns = now;
            return;
        }
        s.end = Some(e);
        s.end_range = range;
        match &mut self.first_session {
            None => self.first_session = Some((e.session, e.stream_count, 1)),
            Some((sess, _, ended)) if *sess == e.session => *ended += 1,
            _ => {}
        }
    }

    /// A refused datagram, offered to the study of a change of layout (a run that learned its
    /// layout only; off the path of accepted datagrams).
    #[cold]
    #[inline(never)]
    fn relearned(&mut self, data: &[u8], src: Option<SocketAddr>) -> Relearned {
        loop {
            let Some(rl) = self.relearn.as_deref_mut() else { return Relearned::Refused };
            let seen = (self.datagrams - 1).saturating_sub(self.unsequenced + self.untracked);
            match rl.offer(data, src, self.now, seen, self.first_ns) {
                Step::Held => return Relearned::Held,
                Step::Refused => return Relearned::Refused,
                Step::RefusedKept => return Relearned::RefusedKept,
                Step::Switch { fmt, held } => {
                    self.switch_layout(fmt);
                    self.count_held();
                    return if held { Relearned::Held } else { Relearned::Recheck };
                }
                Step::Drop { held } => {
                    self.count_held();
                    if held {
                        return Relearned::Held;
                    }
                }
            }
        }
    }

    /// Count the datagrams held by the study, by the layout now in force, as they arrived.
    #[cold]
    fn count_held(&mut self) {
        let Some(rl) = self.relearn.take() else { return };
        let now = self.now;
        for (data, src, at_ns) in rl.held() {
            self.now = at_ns;
            self.account::<false>(data, src, None);
        }
        self.now = now;
        let mut rl = rl;
        rl.clear();
        self.relearn = Some(rl);
    }

    /// Count by `fmt` from now: the streams seen so far end (their ledgers are kept for the
    /// report), and new ones begin with the next datagrams.
    #[cold]
    fn switch_layout(&mut self, fmt: Arc<dyn Format>) {
        let layout = self.layouts.len();
        let bits = fmt.seq_bits().clamp(1, 64);
        self.ledger_cfg.seq_bits = bits;
        self.seq_mask = u64::MAX >> (64 - bits);
        for i in 0..self.active {
            let old = std::mem::replace(&mut self.slots[i], Slot::fresh(&self.ledger_cfg));
            self.retired.push((layout, old));
        }
        self.active = 0;
        self.last = 0;
        self.lock_len = fmt.length_locked();
        self.fmt_streams = fmt.stream_count().max(1);
        // A run's end is judged on the streams of the layout in force.
        self.first_session = None;
        self.layouts.push(fmt.clone());
        self.now_fmt = Some(fmt);
    }

    /// The run is over: a study under way concludes with what it saw (a change, or its held
    /// datagrams counted refused).
    pub(super) fn settle_relearn(&mut self) {
        let seen = self.datagrams.saturating_sub(self.unsequenced + self.untracked);
        let (now, first) = (self.now, self.first_ns);
        let Some(rl) = self.relearn.as_deref_mut() else { return };
        if let Some(fmt) = rl.settle(now, seen, first) {
            self.switch_layout(fmt);
        }
        self.count_held();
    }

    /// A datagram of the format that closes a stream (a SPEAD stop heap) before number `next`.
    /// Believed only from the source and stream whose data arrived here, when every number
    /// received lies before `next`; it then ends the stream as an end message does (`--once`,
    /// loss at the tail), without claiming how many were sent. Anything else is ignored.
    #[cold]
    fn on_close(&mut self, src: Option<SocketAddr>, stream: u32, next: u64) {
        let mask = self.seq_mask;
        let Some(i) = self.slots[..self.active].iter().position(|s| s.src == src && s.stream == stream) else {
            return;
        };
        let s = &mut self.slots[i];
        let (Some(first), Some(highest)) = (s.ledger.first_seen(), s.ledger.highest()) else { return };
        let last = next.wrapping_sub(1) & mask;
        // No further ahead than the ledger reads a jump as loss: a stop heap far beyond the
        // data (a forged or corrupt counter) must not book a vast tail as lost.
        let ahead = last.wrapping_sub(highest) & mask;
        if s.end.is_some()
            || s.closed_at.is_some()
            || !in_range(highest, (first, last), mask)
            || ahead > s.ledger.config().max_gap
        {
            return;
        }
        s.closed_at = Some(last);
        self.note_closed();
    }

    /// `--once` after stop heaps: the run is over when every stream seen so far has closed
    /// (by a stop heap or an end message), not at the first of several sources' stop heaps.
    fn note_closed(&mut self) {
        if self.first_session.is_some_and(|(sess, _, _)| sess != CLOSED_SESSION) {
            return;
        }
        let active = &self.slots[..self.active];
        let closed = active.iter().filter(|s| s.closed_at.is_some() || s.end.is_some()).count();
        self.first_session = Some((CLOSED_SESSION, active.len() as u32, closed as u32));
    }

    /// Checks an end message can pass without any data: no more sent and skipped than its
    /// range holds (a wirespeed sender's add up exactly), its stream index fits its stream
    /// count, and its format stream is the one a wirespeed sender gives that index.
    fn end_consistent(&self, e: &EndOfStream) -> bool {
        let generated = e.last_seq.wrapping_sub(e.first_seq).wrapping_add(1);
        e.stream_count >= 1
            && e.stream_index < e.stream_count
            && e.format_stream == e.stream_index % self.fmt_streams
            && (generated == 0 || e.sent.checked_add(e.skipped).is_some_and(|n| n <= generated))
    }

    fn stray_end(&mut self, e: EndOfStream, src: Option<SocketAddr>) {
        self.stray_control += 1;
        self.distrust_ns = self.now;
        if self.stray_ends.len() < STRAY_ENDS_LISTED {
            self.stray_ends.push(StrayEnd { source: src, claimed: e });
        }
    }

    /// Withdraw slot `i`'s accepted end message (contradicted): the stream's end is unknown.
    fn retract_end(&mut self, i: usize, now: u64) {
        self.invalid_control += 1;
        self.distrust_ns = now;
        let s = &mut self.slots[i];
        s.end_disputed = true;
        if let Some(e) = s.end.take() {
            if let Some((sess, _, ended)) = &mut self.first_session {
                if *sess == e.session {
                    *ended -= 1;
                    if *ended == 0 {
                        self.first_session = None;
                    }
                }
            }
        }
    }

    fn first_run_done(&self) -> bool {
        if let Some((group, index)) = self.once_group {
            return group.done(index, self.first_session);
        }
        matches!(self.first_session, Some((_, expected, ended)) if ended >= expected)
    }

    fn publish(&self, live: &Live, socket_drops: Option<u64>) {
        let mut c = LedgerCounts::default();
        let cells = &live.streams;
        for (i, s) in self.slots[..self.active].iter().enumerate() {
            let counts = s.ledger.counts();
            c.merge(&counts);
            // Per-stream cells only when a metrics exporter asked for them (else empty).
            if let Some(cell) = cells.get(i) {
                cell.publish(s.src, s.stream, &counts, s.bytes);
            }
        }
        for (_, s) in &self.retired {
            c.merge(&s.ledger.counts());
        }
        live.streams_published.store(self.active.min(cells.len()), Ordering::Release);
        live.streams_tracked.store(self.active as u64, Ordering::Relaxed);
        live.datagrams.store(self.datagrams, Ordering::Relaxed);
        live.bytes.store(self.bytes, Ordering::Relaxed);
        live.lost.store(c.lost, Ordering::Relaxed);
        live.late.store(c.late, Ordering::Relaxed);
        live.duplicate.store(c.duplicate, Ordering::Relaxed);
        live.invalid.store(c.invalid, Ordering::Relaxed);
        live.socket_drops.store(socket_drops.unwrap_or(0), Ordering::Relaxed);
        live.ring_full.store(self.ring_full, Ordering::Relaxed);
    }
}

/// A quiet spell as the stop reason says it: "3 s", "250 ms", "10.5 ms".
fn quiet_words(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{} s", d.as_secs())
    } else if d.subsec_nanos() % 1_000_000 == 0 {
        format!("{} ms", d.as_millis())
    } else {
        let ms = format!("{:.6}", d.as_secs_f64() * 1e3);
        format!("{} ms", ms.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// Whether `seq` lies in the range an end message claims (numbers compared at the ledger's
/// width, `mask`). A range longer than the counter covers everything.
#[inline]
fn in_range(seq: u64, (first, last): (u64, u64), mask: u64) -> bool {
    let span = last.wrapping_sub(first);
    span >= mask || (seq.wrapping_sub(first) & mask) <= (span & mask)
}

/// The capture loop, waiting for whichever backend the listener opened.
pub(super) struct CaptureRun<'r, 'a, S: Sink> {
    pub(super) cfg: &'r RecvConfig,
    pub(super) cap: Capture<'a, S>,
    pub(super) stop: &'r AtomicBool,
    pub(super) live: &'r Live,
    pub(super) t0: u64,
    pub(super) nap_ns: u64,
}

impl<'a, S: Sink> RunBackend for CaptureRun<'_, 'a, S> {
    type Output = Result<LoopResult<'a, S>>;

    fn run<B: Backend>(self, backend: B) -> Self::Output {
        capture_loop(self.cfg, backend, self.cap, self.stop, self.live, self.t0, self.nap_ns)
    }
}

pub(super) type LoopResult<'a, S> = (Capture<'a, S>, Option<u64>, u64, String, u64, Option<usize>);

fn capture_loop<'a, B: Backend, S: Sink>(
    cfg: &RecvConfig,
    mut backend: B,
    mut cap: Capture<'a, S>,
    stop: &AtomicBool,
    live: &Live,
    t0: u64,
    nap_ns: u64,
) -> Result<LoopResult<'a, S>> {
    let cpu0 = sys::thread_cpu_ns();
    let deadline = cfg.duration.map(|d| t0 + d.as_nanos() as u64);
    let quiet_ns = u64::try_from(cfg.once_quiet.as_nanos()).unwrap_or(u64::MAX);
    let mut publish_at = t0;
    let mut moderation = Moderation::new(nap_ns, cfg.batch, t0, cpu0);
    // `--once`: the run counts as ended when every stream's end message was accepted and the
    // next receive call brought nothing that contradicts one (a wirespeed sender sends nothing
    // after its end message but copies of it; a forged one is followed by more data).
    let mut ended_once = false;
    let stopped_by;
    loop {
        if stop.load(Ordering::Relaxed) {
            stopped_by = format!("signal {}", sys::last_signal());
            break;
        }
        cap.now = sys::monotonic_ns();
        let lease = cap.sink.lend(cfg.batch);
        let n =
            backend.recv_into(lease, |l| cap.landed(l)).map_err(|e| Error::os(format!("receiving failed: {e}"), &e))?;
        let now = sys::monotonic_ns();
        cap.sink.end_batch(now, backend.kernel_drops());
        if let Some(why) = cap.sink.must_stop() {
            stopped_by = why.into();
            break;
        }
        moderation.after_batch(n);
        if now >= publish_at {
            cap.publish(live, backend.kernel_drops());
            publish_at = now + 50_000_000;
            // The thread's CPU time, once an interval (a system call, every 50 ms): what the
            // wait policy measures itself by.
            moderation.update(now, cap.datagrams, sys::thread_cpu_ns());
        }
        if deadline.is_some_and(|d| now >= d) {
            stopped_by = "duration".into();
            break;
        }
        if cfg.count.is_some_and(|c| cap.datagrams >= c) {
            stopped_by = "count".into();
            break;
        }
        if cfg.once {
            if cap.first_run_done() {
                if ended_once {
                    stopped_by = "end of stream".into();
                    break;
                }
                ended_once = true;
            } else {
                ended_once = false;
                if cap.datagrams > 0 && backend.end_unproven() && now.saturating_sub(cap.last_ns) >= quiet_ns {
                    stopped_by = format!(
                        "silence: {} without data after the transport gave up data that may have held the end-of-stream message",
                        quiet_words(cfg.once_quiet)
                    );
                    break;
                }
                if cap.distrust_ns != 0
                    && cap.datagrams > 0
                    && now.saturating_sub(cap.distrust_ns.max(cap.last_ns)) >= quiet_ns
                {
                    stopped_by = format!(
                        "silence: {} without data after an end-of-stream message that was not believed",
                        quiet_words(cfg.once_quiet)
                    );
                    break;
                }
            }
        }
    }
    backend.drain(|d, src| cap.handle_at(d, src, None));
    cap.sink.finish();
    let drops = backend.final_drops();
    cap.publish(live, drops);
    let cpu_ns = sys::thread_cpu_ns() - cpu0;
    Ok((cap, drops, backend.truncated(), stopped_by, cpu_ns, sys::current_cpu()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rx::NullSink;

    use crate::ledger::GapRange;
    use crate::wire::{ByteOrder, Counter};

    fn addr(port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    #[test]
    fn a_quiet_spell_reads_in_its_own_unit() {
        assert_eq!(quiet_words(Duration::from_secs(3)), "3 s");
        assert_eq!(quiet_words(Duration::from_millis(250)), "250 ms");
        assert_eq!(quiet_words(Duration::from_millis(1500)), "1500 ms");
        assert_eq!(quiet_words(Duration::from_micros(10_500)), "10.5 ms");
        assert_eq!(quiet_words(Duration::from_nanos(12_345_678)), "12.345678 ms");
    }

    fn end(session: u64, first: u64, last: u64) -> [u8; END_LEN] {
        EndOfStream {
            session,
            stream_index: 0,
            stream_count: 1,
            format_stream: 0,
            first_seq: first,
            last_seq: last,
            sent: last - first + 1,
            skipped: 0,
        }
        .encode()
    }

    /// A capture over 64-byte counter datagrams fed from source port `src`.
    fn feed(cap: &mut Capture<'_, NullSink>, fmt: &Counter, src: u16, seqs: impl IntoIterator<Item = u64>) {
        let mut b = [0u8; 64];
        for s in seqs {
            fmt.emit(0, s, &mut b);
            cap.handle(&b, addr(src));
        }
    }

    /// A SPEAD stop heap ends a stream only as an end message does: from the source whose data
    /// was seen, after every number received; then it ends `--once`, and data beyond it
    /// withdraws it.
    /// Frames `seqs` of `threads` (interleaved) of VDIF layout `spec`, from `port`.
    fn vdif_into(cap: &mut Capture<'_, NullSink>, spec: &str, threads: u32, seqs: std::ops::Range<u64>, port: u16) {
        let f = crate::wire::spec::parse(spec).unwrap();
        let mut b = vec![0u8; f.packet_len()];
        for seq in seqs {
            for t in 0..threads {
                f.emit(t, seq, &mut b);
                cap.handle(&b, addr(port));
            }
        }
    }

    fn learned(cap: &mut Capture<'_, NullSink>, spec: &str, follow: bool) {
        cap.relearn = Some(Box::new(Relearn::new("vdif", spec.into(), follow)));
    }

    /// (layout, received, lost, invalid) per stream, settled as the report settles them.
    fn by_layout(cap: &mut Capture<'_, NullSink>) -> Vec<(usize, u32, u64, u64, u64)> {
        cap.settle_relearn();
        let cur = cap.layouts.len();
        let mut v: Vec<_> = cap.retired.iter_mut().map(|(k, s)| (*k, s)).collect();
        v.extend(cap.slots[..cap.active].iter_mut().map(|s| (cur, s)));
        v.into_iter()
            .map(|(k, s)| {
                s.ledger.finish(None);
                let c = s.ledger.counts();
                (k, s.stream, c.received, c.lost, c.invalid)
            })
            .collect()
    }

    const A: &str = "vdif,frame=1032,threads=1,station=Xx,bits=2,chans=1,complex=0,fps=100,fill=any";
    const B: &str = "vdif,frame=2032,threads=1,station=Xx,bits=2,chans=4,complex=0,fps=50,fill=any";

    #[test]
    fn a_learned_layout_that_changes_mid_run_is_followed_and_counted_exactly() {
        let fa = crate::wire::spec::parse(A).unwrap();
        let mut cap = Capture::new(&*fa, NullSink, &LedgerConfig::default(), 8, 1);
        learned(&mut cap, &fa.spec(), true);
        vdif_into(&mut cap, A, 1, 0..300, 5000);
        // Seconds 6.. of the new layout, one frame lost.
        vdif_into(&mut cap, B, 1, 300..420, 5000);
        vdif_into(&mut cap, B, 1, 421..600, 5000);
        let changes = cap.relearn.as_ref().unwrap().changes.clone();
        assert_eq!(changes.len(), 1, "{changes:?}");
        let c = &changes[0];
        assert!(c.spec.contains("frame=2032") && c.spec.contains("chans=4") && c.spec.contains("fps=50"), "{c:?}");
        assert_eq!((c.after_datagrams, c.followed, c.from.clone()), (300, true, fa.spec()));
        assert!(c.assumed.is_empty(), "{c:?}");
        assert_eq!(by_layout(&mut cap), vec![(0, 0, 300, 0, 0), (1, 0, 299, 1, 0)]);
        assert!(cap.first_invalid.is_none(), "nothing was refused");
    }

    #[test]
    fn a_change_still_being_studied_when_the_run_ends_is_counted_by_what_was_seen() {
        let fa = crate::wire::spec::parse(A).unwrap();
        let mut cap = Capture::new(&*fa, NullSink, &LedgerConfig::default(), 8, 1);
        learned(&mut cap, &fa.spec(), true);
        vdif_into(&mut cap, A, 1, 0..300, 5000);
        // Less than a second of the new layout: its rate is not seen, and taken from the old.
        vdif_into(&mut cap, B, 1, 300..340, 5000);
        let rows = by_layout(&mut cap);
        let c = cap.relearn.as_ref().unwrap().changes[0].clone();
        assert!(c.spec.contains("frame=2032") && c.spec.contains("fps=100"), "{c:?}");
        assert_eq!(c.assumed.len(), 1, "{c:?}");
        assert_eq!(rows, vec![(0, 0, 300, 0, 0), (1, 0, 40, 0, 0)]);
    }

    #[test]
    fn noise_and_a_second_source_of_another_layout_are_refused_not_taken_for_a_change() {
        let fa = crate::wire::spec::parse(A).unwrap();
        let mut cap = Capture::new(&*fa, NullSink, &LedgerConfig::default(), 8, 1);
        learned(&mut cap, &fa.spec(), true);
        let fb = crate::wire::spec::parse(B).unwrap();
        let (mut a, mut b) = (vec![0u8; fa.packet_len()], vec![0u8; fb.packet_len()]);
        for seq in 0..600u64 {
            fa.emit(0, seq, &mut a);
            cap.handle(&a, addr(5000));
            fb.emit(0, seq, &mut b);
            cap.handle(&b, addr(6000));
            cap.handle(&[0xa5; 700], addr(7000));
        }
        assert!(cap.relearn.as_ref().unwrap().changes.is_empty());
        let rows = by_layout(&mut cap);
        assert!(cap.relearn.as_ref().unwrap().changes.is_empty());
        assert_eq!(rows, vec![(0, 0, 600, 0, 0), (0, 0, 0, 0, 600), (0, 0, 0, 0, 600)]);
    }

    #[test]
    fn a_stream_that_gains_threads_is_followed_though_its_old_threads_go_on() {
        let two = A.replace("threads=1", "threads=2");
        let fa = crate::wire::spec::parse(A).unwrap();
        let mut cap = Capture::new(&*fa, NullSink, &LedgerConfig::default(), 8, 1);
        learned(&mut cap, &fa.spec(), true);
        vdif_into(&mut cap, A, 1, 0..300, 5000);
        vdif_into(&mut cap, &two, 2, 300..700, 5000);
        let changes = cap.relearn.as_ref().unwrap().changes.clone();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].spec.contains("threads=2"), "{changes:?}");
        let rows = by_layout(&mut cap);
        let received: u64 = rows.iter().map(|r| r.2).sum();
        let (lost, invalid): (u64, u64) = (rows.iter().map(|r| r.3).sum(), rows.iter().map(|r| r.4).sum());
        assert_eq!((received, lost, invalid), (300 + 800, 0, 0), "{rows:?}");
        assert!(rows.iter().any(|r| r.0 == 1 && r.1 == 1), "thread 1 counted by the new layout: {rows:?}");
    }

    #[test]
    fn noise_among_the_new_layout_does_not_count_as_the_old_one_going_on() {
        let fa = crate::wire::spec::parse(A).unwrap();
        let mut cap = Capture::new(&*fa, NullSink, &LedgerConfig::default(), 8, 1);
        learned(&mut cap, &fa.spec(), true);
        vdif_into(&mut cap, A, 1, 0..300, 5000);
        let fb = crate::wire::spec::parse(B).unwrap();
        let mut b = vec![0u8; fb.packet_len()];
        for seq in 300..600u64 {
            fb.emit(0, seq, &mut b);
            cap.handle(&b, addr(5000));
            if seq % 3 == 0 {
                cap.handle(&[0xa5; 700], addr(5000));
            }
        }
        // Followed during the run, not only when it ended.
        assert_eq!(cap.relearn.as_ref().unwrap().changes.len(), 1);
        assert_eq!(cap.layouts.len(), 1);
        let rows = by_layout(&mut cap);
        // The noise is refused in the stream of its source and time, before or after the change.
        let got: Vec<_> = rows.iter().map(|r| (r.0, r.2, r.3)).collect();
        assert_eq!(got, vec![(0, 300, 0), (1, 300, 0)]);
        assert_eq!(rows[0].4 + rows[1].4, 100, "{rows:?}");
    }

    #[test]
    fn a_stream_that_keeps_changing_is_followed_at_most_max_changes_times() {
        use crate::rx::relearn::MAX_CHANGES;
        let fa = crate::wire::spec::parse(A).unwrap();
        let mut cap = Capture::new(&*fa, NullSink, &LedgerConfig::default(), 8, 1);
        learned(&mut cap, &fa.spec(), true);
        let mut at = 0;
        for round in 0..40u64 {
            let (spec, n) = if round % 2 == 0 { (A, 300) } else { (B, 150) };
            vdif_into(&mut cap, spec, 1, at..at + n, 5000);
            at += n;
        }
        let rl = cap.relearn.as_ref().unwrap();
        assert_eq!((rl.changes.len(), rl.exhausted()), (MAX_CHANGES, true));
        let rows = by_layout(&mut cap);
        let all: u64 = rows.iter().map(|r| r.2 + r.4).sum();
        assert_eq!(all, cap.datagrams, "every datagram counted once: {rows:?}");
        // Followed exactly up to the last change it follows; refused after it.
        assert!(rows[..MAX_CHANGES].iter().all(|r| r.3 == 0 && r.4 == 0), "{rows:?}");
        assert_eq!((rows.len(), rows[MAX_CHANGES].4), (MAX_CHANGES + 1, 12 * 150), "{rows:?}");
    }

    #[test]
    fn a_spead_stream_cut_into_other_packets_mid_run_is_followed() {
        let (a, b) = ("spead,heap=16384,payload=4096,fill=any", "spead,heap=65536,payload=8192,fill=any");
        let fa = crate::wire::spec::parse(a).unwrap();
        let fb = crate::wire::spec::parse(b).unwrap();
        let mut cap = Capture::new(&*fa, NullSink, &LedgerConfig::default(), 8, 1);
        cap.relearn = Some(Box::new(Relearn::new("spead", fa.spec(), true)));
        let (mut x, mut y) = (vec![0u8; fa.packet_len()], vec![0u8; fb.packet_len()]);
        for seq in 0..400u64 {
            fa.emit(0, seq, &mut x);
            cap.handle(&x, addr(5000));
        }
        // 100 heaps of 8 packets, the 2nd packet of every 10th heap lost.
        for seq in (0..800u64).filter(|s| s % 80 != 1) {
            fb.emit(0, seq, &mut y);
            cap.handle(&y, addr(5000));
        }
        let changes = cap.relearn.as_ref().unwrap().changes.clone();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].spec.starts_with("spead,heap=65536,payload=8192,"), "{changes:?}");
        assert_eq!(by_layout(&mut cap), vec![(0, 0, 400, 0, 0), (1, 0, 790, 10, 0)]);
    }

    #[test]
    fn a_recorder_says_the_layout_changed_and_counts_what_follows_refused() {
        let fa = crate::wire::spec::parse(A).unwrap();
        let mut cap = Capture::new(&*fa, NullSink, &LedgerConfig::default(), 8, 1);
        learned(&mut cap, &fa.spec(), false);
        vdif_into(&mut cap, A, 1, 0..300, 5000);
        vdif_into(&mut cap, B, 1, 300..600, 5000);
        let rows = by_layout(&mut cap);
        let changes = cap.relearn.as_ref().unwrap().changes.clone();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(!changes[0].followed && changes[0].spec.contains("frame=2032"), "{changes:?}");
        assert!(changes[0].lines()[0].contains("`wirespeed verify --format vdif,frame=2032"), "{changes:?}");
        assert_eq!(rows, vec![(0, 0, 300, 0, 300)]);
    }

    #[test]
    fn a_spead_stop_heap_closes_only_its_own_stream() {
        use crate::wire::spead::{
            ItemPointer, Packet, HEAP_CNT, HEAP_OFFSET, HEAP_SIZE, PAYLOAD_LENGTH, STREAM_CONTROL,
        };
        use crate::wire::{Fill, Spead, SpeadConfig};
        let fmt =
            Spead::new(SpeadConfig { heap: 4096, payload: 1024, fill: Fill::Any, ..SpeadConfig::default() }).unwrap();
        let stop = |cnt: u64| {
            let mut b = vec![0u8; 8 + 5 * 8];
            let mut p = Packet::new_unchecked(&mut b[..]);
            p.set_header(6, 5);
            let items = [(HEAP_CNT, cnt), (HEAP_SIZE, 0), (HEAP_OFFSET, 0), (PAYLOAD_LENGTH, 0), (STREAM_CONTROL, 2)];
            for (i, (id, value)) in items.into_iter().enumerate() {
                p.set_item(i, ItemPointer { immediate: true, id, value }.encode(48));
            }
            b
        };
        let mut cap = Capture::new(&fmt, NullSink, &LedgerConfig::default(), 8, 1);
        let mut b = vec![0u8; fmt.packet_len()];
        // Heaps 1..=10 (numbers 0..40), the last two packets of heap 10 lost.
        for seq in 0..38 {
            fmt.emit(0, seq, &mut b);
            cap.handle(&b, addr(5000));
        }
        cap.handle(&stop(11), addr(5001));
        assert!(!cap.first_run_done(), "a stop heap from a source that sent nothing here");
        cap.handle(&stop(9), addr(5000));
        assert!(!cap.first_run_done(), "a stop heap before numbers already received");
        // Counter 0 with first=1 wraps to 2^48 - 1 heaps ahead: far beyond any jump the ledger
        // reads as loss, so it closes nothing (it would book ~2^51 numbers lost).
        cap.handle(&stop(0), addr(5000));
        assert!(!cap.first_run_done(), "a stop heap far beyond the data");
        cap.handle(&stop(11), addr(5000));
        assert!(cap.first_run_done());
        assert_eq!(cap.slots[0].closed_at, Some(39));
        // More data beyond it: the stream went on.
        fmt.emit(0, 41, &mut b);
        cap.handle(&b, addr(5000));
        assert!(!cap.first_run_done());
        assert_eq!(cap.slots[0].closed_at, None);
    }

    #[test]
    fn the_first_refused_datagram_is_kept_with_its_reason() {
        let fmt = Counter::new(64, ByteOrder::Be).unwrap();
        let mut cap = Capture::new(&fmt, NullSink, &LedgerConfig::default(), 8, 1);
        feed(&mut cap, &fmt, 5000, 0..10);
        assert!(cap.first_invalid.is_none(), "valid datagrams leave nothing to explain");
        cap.handle(&[0u8; 40], addr(5001));
        cap.handle(&[0u8; 24], addr(5002));
        let f = cap.first_invalid.expect("kept");
        assert_eq!((f.src, f.len, f.why.kind), (addr(5001), 40, Invalid::Length));
        assert_eq!(f.why.to_string(), "datagram length (bytes): the stream has 40, the format expects 64");
    }

    #[test]
    fn end_of_stream_settles_only_a_stream_seen_and_consistent_with_it() {
        let fmt = Counter::new(64, ByteOrder::Be).unwrap();
        let mut cap = Capture::new(&fmt, NullSink, &LedgerConfig::default(), 8, 1);
        feed(&mut cap, &fmt, 5000, 0..100);
        // From a port that sent nothing: stray, no slot.
        cap.handle(&end(1, 0, 99), addr(5001));
        assert_eq!((cap.stray_control, cap.active, cap.first_run_done()), (1, 1, false));
        // From the sender's own address, but claiming less than was seen: not believed.
        cap.handle(&end(1, 0, 49), addr(5000));
        cap.handle(&end(1, 50, 120), addr(5000));
        // Counts that cannot add up: more sent than the range holds.
        let mut lie = EndOfStream::decode(&end(1, 0, 99)).unwrap();
        lie.sent = 1000;
        cap.handle(&lie.encode(), addr(5000));
        assert_eq!((cap.invalid_control, cap.first_run_done()), (3, false));
        // The real one.
        cap.handle(&end(7, 0, 99), addr(5000));
        cap.handle(&end(7, 0, 99), addr(5000)); // a repeated copy
        assert!(cap.first_run_done());
        assert_eq!((cap.stray_control, cap.invalid_control), (1, 3));
    }

    #[test]
    fn data_after_an_end_of_stream_withdraws_it() {
        let fmt = Counter::new(64, ByteOrder::Be).unwrap();
        let mut cap = Capture::new(&fmt, NullSink, &LedgerConfig::default(), 8, 1);
        feed(&mut cap, &fmt, 5000, 0..100);
        // Forged from the sender's own address with the numbers seen so far: believable...
        cap.handle(&end(1, 0, 99), addr(5000));
        assert!(cap.first_run_done());
        // ...until the sender goes on: the end is withdrawn and the stream's end is unknown.
        feed(&mut cap, &fmt, 5000, 100..200);
        assert!(!cap.first_run_done());
        cap.handle(&end(2, 0, 199), addr(5000));
        assert!(!cap.first_run_done(), "two accounts of one stream: neither is believed");
        assert_eq!(cap.invalid_control, 2);
        assert!(cap.slots[0].end.is_none() && cap.slots[0].end_disputed);
        assert_eq!(cap.slots[0].ledger.counts().received, 200);
    }

    #[test]
    fn two_different_ends_for_one_stream_are_both_disbelieved() {
        let fmt = Counter::new(64, ByteOrder::Be).unwrap();
        let mut cap = Capture::new(&fmt, NullSink, &LedgerConfig::default(), 8, 1);
        feed(&mut cap, &fmt, 5000, 0..100);
        cap.handle(&end(1, 0, 99), addr(5000));
        cap.handle(&end(2, 0, 120), addr(5000));
        assert!(!cap.first_run_done());
        assert_eq!(cap.invalid_control, 2);
    }

    #[test]
    fn without_size_a_stream_keeps_the_length_of_its_first_datagrams() {
        let fmt = Counter::any_len(ByteOrder::Be);
        let mut cap = Capture::new(&fmt, NullSink, &LedgerConfig::default(), 8, 1);
        let strict = Counter::new(8800, ByteOrder::Be).unwrap();
        let mut b = vec![0u8; 8800];
        let mut send = |cap: &mut Capture<'_, NullSink>, seq: u64, len: usize| {
            strict.emit(0, seq, &mut b);
            cap.handle(&b[..len], addr(6000));
        };
        send(&mut cap, 5, 8); // a truncated first datagram: seq 5500 if believed
        for s in 0..10 {
            send(&mut cap, s, 8800);
        }
        send(&mut cap, 10, 8);
        send(&mut cap, 10, 4400);
        for s in 11..20 {
            send(&mut cap, s, 8800);
        }
        let s = &mut cap.slots[0];
        s.ledger.finish(None);
        let c = s.ledger.counts();
        assert_eq!((c.received, c.lost, c.invalid, c.late), (19, 1, 3, 0));
        assert_eq!(s.invalid_kinds[Invalid::Length as usize], 3);
        assert_eq!(s.ledger.gaps(), &[GapRange { first: 10, last: 10, count: 1 }]);
    }

    #[test]
    fn nap_cap_protects_small_buffers() {
        // 8 MiB granted (4 MiB asked, the default rmem_max): a 40 Gb/s burst may fill 1/8 of it.
        assert_eq!(nap_cap_ns(8 << 20), 209_715);
        assert!(nap_cap_ns(64 << 20) > 1_000_000);
    }
}
