//! The PGM source side as pure logic: the transmit window that keeps sent packets for repair,
//! the repair queue that NAKs feed, the SPM schedule, and a token bucket for RDATA.
//!
//! Nothing here opens a socket or reads a clock: time comes in as monotonic nanoseconds, so
//! every behaviour is exact and testable. It sits on the hot send path, so after `new` nothing
//! allocates, nothing locks, and every per-packet operation is O(1).
//!
//! Sources: RFC 3208 (the source procedures: ODATA, SPMs, NCF and RDATA; TXW_SQNS, TXW_SECS) and
//! OpenPGM 5 (`txw.c`, `source.c`, `timer.c`, `rate_control.c`), read for behaviour, not copied.
//! Where the two differ in practice this follows OpenPGM and says so where it does.

/// "No slot": the end of the intrusive repair-queue list.
const NIL: u32 = u32::MAX;

/// Per-slot state of the transmit window (one entry per slot, allocated once in `new`).
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The sequence number the slot holds (valid while the slot is inside the window).
    sqn: u32,
    /// Committed packet length in bytes.
    len: u32,
    /// Repair queue links (slot indices; [`NIL`] at the ends).
    prev: u32,
    next: u32,
    /// When this sqn was last handed out for repair ([`TxWindow::next_repair`]).
    repaired_at: u64,
    /// In the repair queue now (OpenPGM's `waiting_retransmit`).
    queued: bool,
    /// `repaired_at` is meaningful.
    repaired: bool,
}

impl Slot {
    const EMPTY: Slot = Slot { sqn: 0, len: 0, prev: NIL, next: NIL, repaired_at: 0, queued: false, repaired: false };
}

/// What one NAK (or NAK list) did to the repair queue; every requested sqn lands in exactly one
/// of the six counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NakOutcome {
    /// Newly queued for RDATA.
    pub queued: u32,
    /// Already waiting in the repair queue: the one RDATA to come answers this NAK too
    /// (OpenPGM counts these as `nak_elimination_count`).
    pub already_queued: u32,
    /// Repaired less than the hold-off ago: the RDATA already multicast is still on its way to
    /// (or just reached) the receivers, so repeating it would only duplicate, and a NAK that
    /// repeats a fresh repair is what a forger replaying NAKs sends.
    pub held_off: u32,
    /// In the window, but the repair budget had no room for it: not queued (the receiver
    /// asks again after its NAK_RDATA_IVL, by when the budget may have room).
    pub over_budget: u32,
    /// Behind the window's trail (already left it): cannot be repaired. The receiver learns
    /// this from the next SPM's trail and declares the data unrecoverable.
    pub out_of_window: u32,
    /// Ahead of the window's lead: never sent, so no receiver can have lost it. Only a forged
    /// (or broken) NAK names one.
    pub not_sent: u32,
}

/// The transmit window (RFC 3208 TXW): the last `sqns` ODATA packets, whole, kept so that any
/// of them can be sent again as RDATA, plus the FIFO of repairs requested by NAKs.
///
/// Storage is one `Vec<u8>` of `sqns * slot_bytes` and one per-slot array, both allocated in
/// [`TxWindow::new`]; nothing allocates afterwards. The repair queue is an intrusive doubly
/// linked list through the per-slot array, so a packet leaving the window takes its pending
/// repair with it in O(1), as OpenPGM's `pgm_txw_remove_tail` unlinks it.
///
/// Sizing: OpenPGM sizes the window either in packets (TXW_SQNS) or as TXW_SECS × TXW_MAX_RTE /
/// max TPDU (`pgm_txw_create`); the caller does that arithmetic and passes `sqns`.
#[derive(Debug)]
pub struct TxWindow {
    buf: Vec<u8>,
    slots: Vec<Slot>,
    slot_bytes: usize,
    /// Number of slots (the window's size in sequence numbers), `1..2^31`.
    cap: u32,
    /// Oldest sqn held; while empty, the sqn the first commit will get.
    trail: u32,
    /// Slot index of `trail`.
    trail_idx: u32,
    /// Packets held, `0..=cap`; only 0 before the first commit.
    count: u32,
    /// Repair queue: oldest request (next out) and newest, as slot indices.
    rq_head: u32,
    rq_tail: u32,
    rq_len: u32,
    /// Requests dropped because their sqn left the window before the repair was sent.
    expired: u64,
}

impl TxWindow {
    /// `sqns` slots of `slot_bytes` each (`slot_bytes` = the largest whole PGM packet, header
    /// included). The first committed packet gets `first_sqn`.
    ///
    /// OpenPGM starts every source at sequence number 0 (`pgm_txw_create` sets lead = -1,
    /// trail = 0) and RFC 3208 does not require a random start; wirespeed's caller chooses,
    /// which also lets tests start just below the u32 wrap.
    ///
    /// # Panics
    /// If `sqns` is 0 or not below 2^31 (RFC 3208 compares sequence numbers as serial numbers,
    /// so a window must span less than half the space; OpenPGM asserts the same), if
    /// `slot_bytes` is 0 or above `u32::MAX`, or if the buffer size overflows `usize`. These are
    /// caller bugs: wirespeed validates user-supplied sizes before getting here.
    pub fn new(sqns: u32, slot_bytes: usize, first_sqn: u32) -> Self {
        assert!(sqns > 0 && sqns < 1 << 31, "transmit window of {sqns} sqns: must be 1..2^31");
        assert!(
            slot_bytes > 0 && slot_bytes <= u32::MAX as usize,
            "transmit window slot of {slot_bytes} bytes: must be 1..=u32::MAX"
        );
        let total = (sqns as usize).checked_mul(slot_bytes).expect("transmit window size overflows usize");
        let mut w = TxWindow {
            buf: vec![0; total],
            slots: vec![Slot::EMPTY; sqns as usize],
            slot_bytes,
            cap: sqns,
            trail: first_sqn,
            trail_idx: 0,
            count: 0,
            rq_head: NIL,
            rq_tail: NIL,
            rq_len: 0,
            expired: 0,
        };
        // Every slot's page now, not as the first datagrams are kept.
        crate::sys::prefault(&mut w.buf);
        w
    }

    /// Size of the window in sequence numbers (TXW_SQNS).
    pub fn capacity(&self) -> u32 {
        self.cap
    }

    /// Bytes per slot: the largest packet [`TxWindow::commit`] accepts.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Packets held now (`lead - trail + 1`, 0 before the first commit).
    pub fn len(&self) -> u32 {
        self.count
    }

    /// Nothing committed yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The sequence number the next commit gets.
    pub fn next_sqn(&self) -> u32 {
        self.trail.wrapping_add(self.count)
    }

    /// Slot index of the sqn `off` places after the trail (`off <= cap`).
    #[inline]
    fn idx(&self, off: u32) -> usize {
        let i = self.trail_idx as u64 + off as u64;
        let c = self.cap as u64;
        (if i >= c { i - c } else { i }) as usize
    }

    /// Slot index of `sqn` if the window holds it. `sqn - trail < count` is RFC 3208's
    /// `trail <= sqn <= lead` in serial-number order ([`super::sqn_le`]), exact because the
    /// window spans less than 2^31.
    #[inline]
    fn find(&self, sqn: u32) -> Option<usize> {
        let off = sqn.wrapping_sub(self.trail);
        (off < self.count).then(|| self.idx(off))
    }

    /// Drop the oldest packet (the trail advances) if the window is full, so the next sqn's slot
    /// is free. A pending repair for the dropped packet goes with it and is counted in
    /// [`TxWindow::repairs_expired`].
    #[inline]
    fn make_room(&mut self) {
        if self.count < self.cap {
            return;
        }
        let i = self.trail_idx as usize;
        if self.slots[i].queued {
            self.unlink(i);
            self.expired += 1;
        }
        self.slots[i] = Slot::EMPTY;
        self.trail = self.trail.wrapping_add(1);
        self.trail_idx = if self.trail_idx + 1 == self.cap { 0 } else { self.trail_idx + 1 };
        self.count -= 1;
    }

    /// The slot for the next sequence number: the caller writes the whole ODATA packet into it
    /// and calls [`TxWindow::commit`] with its length. If the window is full the oldest packet
    /// is dropped here, since its bytes are about to be overwritten (calling again before
    /// `commit` returns the same sqn and slot and drops nothing more). Returns (sqn, slot).
    pub fn next_slot(&mut self) -> (u32, &mut [u8]) {
        self.make_room();
        let sqn = self.next_sqn();
        let at = self.idx(self.count) * self.slot_bytes;
        (sqn, &mut self.buf[at..at + self.slot_bytes])
    }

    /// The packet written into [`TxWindow::next_slot`]'s slot is `len` bytes and is now sent:
    /// it gets the next sqn (the one `next_slot` returned) and becomes the lead.
    ///
    /// # Panics
    /// If `len` exceeds `slot_bytes` (the caller wrote past the slot it was given).
    pub fn commit(&mut self, len: usize) {
        assert!(len <= self.slot_bytes, "committed {len} bytes into a {}-byte transmit window slot", self.slot_bytes);
        self.make_room();
        let sqn = self.next_sqn();
        let i = self.idx(self.count);
        self.slots[i] = Slot { sqn, len: len as u32, ..Slot::EMPTY };
        self.count += 1;
    }

    /// Oldest sqn still held (the TXW_TRAIL an SPM or RDATA announces). While empty (before the
    /// first commit) it is the sqn the first packet will get, i.e. lead + 1 as RFC 3208 has it.
    pub fn trail(&self) -> u32 {
        self.trail
    }

    /// Newest committed sqn; `None` before the first commit.
    pub fn lead(&self) -> Option<u32> {
        (self.count > 0).then(|| self.trail.wrapping_add(self.count - 1))
    }

    /// The lead to put in an SPM: [`TxWindow::lead`], or trail - 1 while nothing has been sent
    /// (OpenPGM's empty window announces lead = -1 with trail = 0; RFC 3208: an empty window
    /// has trail = lead + 1).
    pub fn spm_lead(&self) -> u32 {
        self.trail.wrapping_add(self.count).wrapping_sub(1)
    }

    /// The whole packet committed as `sqn`, if the window still holds it.
    pub fn get(&self, sqn: u32) -> Option<&[u8]> {
        let i = self.find(sqn)?;
        let at = i * self.slot_bytes;
        Some(&self.buf[at..at + self.slots[i].len as usize])
    }

    /// As [`TxWindow::get`], writable: the caller rewrites the header in place to send the
    /// packet as RDATA (type, trail, checksum), as OpenPGM's `send_rdata` does.
    pub fn get_mut(&mut self, sqn: u32) -> Option<&mut [u8]> {
        let i = self.find(sqn)?;
        let at = i * self.slot_bytes;
        let len = self.slots[i].len as usize;
        Some(&mut self.buf[at..at + len])
    }

    fn push_back(&mut self, i: usize) {
        let iu = i as u32;
        self.slots[i].prev = self.rq_tail;
        self.slots[i].next = NIL;
        if self.rq_tail == NIL {
            self.rq_head = iu;
        } else {
            self.slots[self.rq_tail as usize].next = iu;
        }
        self.rq_tail = iu;
        self.slots[i].queued = true;
        self.rq_len += 1;
    }

    fn unlink(&mut self, i: usize) {
        let Slot { prev, next, .. } = self.slots[i];
        if prev == NIL {
            self.rq_head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.rq_tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        let s = &mut self.slots[i];
        s.prev = NIL;
        s.next = NIL;
        s.queued = false;
        self.rq_len -= 1;
    }

    /// A NAK (or a NAK with OPT_NAK_LIST) arrived for `sqns`: each one in the window, not
    /// already queued, not repaired within `holdoff_ns` before `now_ns`, and admitted by
    /// `admit` (called with the stored packet's length: the repair budget) is queued for RDATA
    /// in arrival order. Returns how many of each kind there were (the caller still sends one
    /// NCF for the whole NAK, whatever the outcome, as OpenPGM's `pgm_on_nak` does).
    ///
    /// NAK elimination: OpenPGM's source only folds a NAK into a repair still waiting in the
    /// queue (`pgm_txw_retransmit_push_selective`); `holdoff_ns = 0` reproduces exactly that.
    /// A positive `holdoff_ns` also ignores NAKs for a sqn whose RDATA went out less than
    /// `holdoff_ns` ago (the reasoning of RFC 3208's NAK elimination in network elements: NAKs
    /// crossing a repair in flight ask for what is already coming). It also bounds what
    /// replaying one NAK can make the source send: each sqn at most once per hold-off.
    pub fn on_nak<A: FnMut(usize) -> bool>(
        &mut self,
        sqns: &[u32],
        now_ns: u64,
        holdoff_ns: u64,
        admit: &mut A,
    ) -> NakOutcome {
        let mut out = NakOutcome::default();
        for &sqn in sqns {
            let Some(i) = self.find(sqn) else {
                // Serial order from the trail: less than 2^31 ahead is after the lead (the
                // window spans less than that), the rest is behind the trail.
                if (sqn.wrapping_sub(self.trail) as i32) >= 0 {
                    out.not_sent += 1;
                } else {
                    out.out_of_window += 1;
                }
                continue;
            };
            let s = self.slots[i];
            if s.queued {
                out.already_queued += 1;
            } else if s.repaired && now_ns.saturating_sub(s.repaired_at) < holdoff_ns {
                out.held_off += 1;
            } else if !admit(s.len as usize) {
                out.over_budget += 1;
            } else {
                self.push_back(i);
                out.queued += 1;
            }
        }
        out
    }

    /// The repair that [`TxWindow::next_repair`] would return, without taking it: the caller
    /// checks its length against the RDATA [`TokenBucket`] first.
    pub fn peek_repair(&self) -> Option<u32> {
        (self.rq_head != NIL).then(|| self.slots[self.rq_head as usize].sqn)
    }

    /// Take the oldest queued repair (FIFO, as OpenPGM pushes at the head of its retransmit
    /// queue and takes from the tail), marking it repaired at `now_ns` for NAK elimination;
    /// `None` if the queue is empty. The returned sqn is always in the window: requests whose
    /// packet left the window while queued were removed then and counted in
    /// [`TxWindow::repairs_expired`].
    pub fn next_repair(&mut self, now_ns: u64) -> Option<u32> {
        if self.rq_head == NIL {
            return None;
        }
        let i = self.rq_head as usize;
        self.unlink(i);
        let s = &mut self.slots[i];
        s.repaired = true;
        s.repaired_at = now_ns;
        Some(s.sqn)
    }

    /// Repairs waiting in the queue.
    pub fn repairs_queued(&self) -> usize {
        self.rq_len as usize
    }

    /// Queued repairs skipped because their packet left the window before it could be resent
    /// (the receiver will see the trail pass and count that data unrecoverable).
    pub fn repairs_expired(&self) -> u64 {
        self.expired
    }
}

/// Most heartbeat intervals an [`SpmSchedule`] holds (fixed array, no allocation).
pub const MAX_HEARTBEATS: usize = 16;

const MS: u64 = 1_000_000;

/// OpenPGM's example sources' ambient SPM interval (`examples/pgmsend.c`: 30 s).
pub const OPENPGM_AMBIENT_NS: u64 = 30_000 * MS;

/// OpenPGM's example sources' heartbeat list (`examples/pgmsend.c`, also what ZeroMQ's
/// `epgm://` sets): 100 ms ×4, 1.3 s, 7 s, 16 s, 25 s, 30 s.
pub const OPENPGM_HEARTBEAT_NS: [u64; 9] =
    [100 * MS, 100 * MS, 100 * MS, 100 * MS, 1_300 * MS, 7_000 * MS, 16_000 * MS, 25_000 * MS, 30_000 * MS];

/// wirespeed's LAN ambient SPM interval: 1 s (see [`SpmSchedule::lan_default`]).
pub const LAN_AMBIENT_NS: u64 = 1_000 * MS;

/// wirespeed's LAN heartbeat list: 1, 1, 2, 4, … 512 ms, doubling (RFC 3208's IHB_MIN to
/// IHB_MAX back-off): heartbeats 1, 2, 4, … 1024 ms after the last data
/// (see [`SpmSchedule::lan_default`]).
pub const LAN_HEARTBEAT_NS: [u64; 11] =
    [MS, MS, 2 * MS, 4 * MS, 8 * MS, 16 * MS, 32 * MS, 64 * MS, 128 * MS, 256 * MS, 512 * MS];

/// When the source sends SPMs (RFC 3208 source procedures: ambient SPMs always, heartbeat SPMs after
/// data so that receivers learn the lead, and so can NAK a lost tail, without more data).
///
/// Ambient: every `ambient_ns`, independent of data. Heartbeat: each data packet (ODATA, and
/// RDATA as OpenPGM's `send_rdata` does) restarts the list, and SPMs follow at the gaps
/// listed, each measured from the previous heartbeat's deadline; after the last one only
/// ambient SPMs remain until the next data. At most one SPM is due per [`SpmSchedule::due`]
/// call even if several deadlines passed (deadlines already missed are skipped, not bunched),
/// as in OpenPGM's `pgm_timer_dispatch`. As there, a heartbeat does not move the ambient
/// deadline, and a late ambient SPM schedules the next from now, not from its deadline.
///
/// One difference, deliberate: OpenPGM's timer repeats the first heartbeat gap and never uses
/// the last two (its 9-entry example list gives heartbeats 100 ms ×5, 1.3 s, 7 s, 16 s apart);
/// here each listed gap is used once, in order, as written.
#[derive(Clone, Debug)]
pub struct SpmSchedule {
    ambient_ns: u64,
    hb: [u64; MAX_HEARTBEATS],
    hb_len: usize,
    next_ambient: u64,
    /// Index into `hb` of the heartbeat pending at `next_hb`; `hb_len` when none is pending.
    hb_state: usize,
    next_hb: u64,
}

impl SpmSchedule {
    /// Ambient SPMs every `ambient_ns` starting `ambient_ns` after `now_ns` (OpenPGM sends its
    /// three SYN SPMs at connect and schedules the first ambient one an interval later);
    /// heartbeats after data at the gaps in `heartbeat_ns`, copied into a fixed array.
    ///
    /// # Panics
    /// If `ambient_ns` is 0 or `heartbeat_ns` has more than [`MAX_HEARTBEATS`] entries
    /// (caller bugs; user-supplied lists are validated before this).
    pub fn new(ambient_ns: u64, heartbeat_ns: &[u64], now_ns: u64) -> Self {
        assert!(ambient_ns > 0, "ambient SPM interval must be positive");
        assert!(
            heartbeat_ns.len() <= MAX_HEARTBEATS,
            "{} heartbeat SPM intervals: at most {MAX_HEARTBEATS}",
            heartbeat_ns.len()
        );
        let mut hb = [0; MAX_HEARTBEATS];
        hb[..heartbeat_ns.len()].copy_from_slice(heartbeat_ns);
        SpmSchedule {
            ambient_ns,
            hb,
            hb_len: heartbeat_ns.len(),
            next_ambient: now_ns.saturating_add(ambient_ns),
            hb_state: heartbeat_ns.len(),
            next_hb: u64::MAX,
        }
    }

    /// The LAN schedule wirespeed uses: ambient every 1 s ([`LAN_AMBIENT_NS`]) and heartbeats
    /// at 1, 1, 2, 4, … 512 ms ([`LAN_HEARTBEAT_NS`]).
    ///
    /// Why not OpenPGM's 100 ms ×4, 1.3 s, 7 s, 16 s, 25 s, 30 s with 30 s ambient: those suit
    /// a WAN. When the last packets of a burst are lost, nothing but an SPM tells a receiver
    /// they existed; on a LAN with round trips of ~0.1 ms, a first heartbeat at 100 ms adds
    /// 100 ms to every tail repair, and with a window of 64 Ki packets at 1 Mpps (65 ms) the
    /// data would already be gone by then if sending resumed. A first heartbeat at 1 ms, then
    /// doubling (RFC 3208's IHB_MIN..IHB_MAX back-off), learns a stopped lead within a
    /// millisecond and costs at most 11 small SPMs per idle period; at high rate the restart
    /// on every packet means none are sent at all. Ambient every 1 s (not 30 s) lets a late
    /// joiner or a receiver that lost every heartbeat learn the window quickly; receivers'
    /// peer expiry must stay at least 2× the ambient interval (OpenPGM `socket.c`).
    pub fn lan_default(now_ns: u64) -> SpmSchedule {
        SpmSchedule::new(LAN_AMBIENT_NS, &LAN_HEARTBEAT_NS, now_ns)
    }

    /// A data packet (ODATA or RDATA) was sent at `now_ns`: restart the heartbeats.
    pub fn on_data(&mut self, now_ns: u64) {
        if self.hb_len > 0 {
            self.hb_state = 0;
            self.next_hb = now_ns.saturating_add(self.hb[0]);
        }
    }

    /// True when an SPM is due now, scheduling the next; the caller sends exactly one SPM.
    pub fn due(&mut self, now_ns: u64) -> bool {
        if now_ns < self.next_deadline() {
            return false;
        }
        if now_ns >= self.next_ambient {
            self.next_ambient = now_ns.saturating_add(self.ambient_ns);
        }
        if self.hb_state < self.hb_len && now_ns >= self.next_hb {
            loop {
                self.hb_state += 1;
                if self.hb_state == self.hb_len {
                    self.next_hb = u64::MAX;
                    break;
                }
                self.next_hb = self.next_hb.saturating_add(self.hb[self.hb_state]);
                if now_ns < self.next_hb {
                    break;
                }
            }
        }
        true
    }

    /// When the next SPM is due (the earlier of the ambient and pending heartbeat deadlines),
    /// for the caller's poll timeout.
    pub fn next_deadline(&self) -> u64 {
        if self.hb_state < self.hb_len {
            self.next_ambient.min(self.next_hb)
        } else {
            self.next_ambient
        }
    }
}

/// A token bucket in bytes, exact to the nanosecond, for RDATA: the caller takes each repair's
/// wire size from it before sending, so repairs cannot take more than the configured rate away
/// from ODATA however many NAKs arrive. OpenPGM has one total bucket (TXW_MAX_RTE, shared by
/// ODATA and RDATA) plus optional per-kind buckets (`rdata_max_rte` in `send_rdata`,
/// `rate_control.c`); wirespeed paces ODATA itself and uses this for the RDATA share.
///
/// Never blocks: [`TokenBucket::take`] says no and [`TokenBucket::next_ok`] says when to try
/// again (OpenPGM's non-blocking `pgm_rate_check2` and `pgm_rate_remaining2`). Starts full, as
/// OpenPGM's `pgm_rate_create` pre-fills. A rate of 0 means unlimited, as in OpenPGM.
/// Count what goes on the wire (OpenPGM adds the IP and UDP header length to each packet).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: u64,
    burst: u64,
    /// Credit in byte-nanoseconds per second (bytes × 10^9), so refills are exact integers.
    credit: u128,
    /// Time of the last refill.
    last: u64,
}

const NS_PER_S: u128 = 1_000_000_000;

impl TokenBucket {
    /// `bytes_per_s` sustained (0 = unlimited), at most `burst` bytes at once, full at `now_ns`.
    /// A packet larger than `burst` never passes, so `burst` must be at least the largest
    /// packet ([`TokenBucket::openpgm_burst`] gives OpenPGM's choice).
    pub fn new(bytes_per_s: u64, burst: u64, now_ns: u64) -> Self {
        TokenBucket { rate: bytes_per_s, burst, credit: burst as u128 * NS_PER_S, last: now_ns }
    }

    /// OpenPGM's bucket depth (`pgm_rate_create`): one millisecond's worth of bytes if that
    /// holds a whole `max_tpdu`, else one second's worth.
    pub fn openpgm_burst(bytes_per_s: u64, max_tpdu: u64) -> u64 {
        if bytes_per_s / 1000 >= max_tpdu {
            bytes_per_s / 1000
        } else {
            bytes_per_s
        }
    }

    fn credit_at(&self, now_ns: u64) -> u128 {
        let cap = self.burst as u128 * NS_PER_S;
        let dt = now_ns.saturating_sub(self.last) as u128;
        self.credit.saturating_add(self.rate as u128 * dt).min(cap)
    }

    /// Take `bytes` at `now_ns` if the bucket holds them (true), else take nothing (false).
    pub fn take(&mut self, bytes: u64, now_ns: u64) -> bool {
        if self.rate == 0 {
            return true;
        }
        if now_ns > self.last {
            self.credit = self.credit_at(now_ns);
            self.last = now_ns;
        }
        let need = bytes as u128 * NS_PER_S;
        if self.credit >= need {
            self.credit -= need;
            true
        } else {
            false
        }
    }

    /// The earliest time at which `take(bytes, t)` succeeds if nothing else is taken first (a
    /// time already past if it would succeed now; 0 when unlimited; `u64::MAX` never, when
    /// `bytes` exceeds the burst).
    pub fn next_ok(&self, bytes: u64) -> u64 {
        if self.rate == 0 {
            return 0;
        }
        if bytes > self.burst {
            return u64::MAX;
        }
        let need = bytes as u128 * NS_PER_S;
        if self.credit >= need {
            return self.last;
        }
        let wait = (need - self.credit).div_ceil(self.rate as u128);
        u64::try_from(self.last as u128 + wait).unwrap_or(u64::MAX)
    }
}

/// The source's repair budget: repairs are paid for by the data the source sends. Every byte
/// of ODATA earns `share` percent of a byte of RDATA, up to `cap` bytes held; a repair is
/// admitted only if the budget holds its bytes. So whatever NAKs arrive (forged ones included:
/// RFC 3208 NAKs carry no authentication), the RDATA bytes sent over a session never exceed
/// `cap + share % of the ODATA bytes` ([`RepairBudget::bound`]), while an honest burst of loss
/// up to `cap` is repaired at once. Integer arithmetic (hundredths of a byte): exact.
#[derive(Clone, Copy, Debug)]
pub struct RepairBudget {
    /// Percent of each data byte earned; 0 = unlimited.
    share: u64,
    /// Most bytes held.
    cap: u64,
    /// Hundredths of a byte held now.
    credit: u64,
    /// Hundredths of a byte earned in all (before the cap): with `cap`, what the budget can
    /// ever have admitted.
    earned: u64,
}

impl RepairBudget {
    /// A budget earning `share_percent` of the data (0: unlimited) holding at most
    /// `cap_bytes`, full from the start (a session's first losses are repaired at once).
    pub fn new(share_percent: u32, cap_bytes: u64) -> Self {
        RepairBudget {
            share: u64::from(share_percent),
            cap: cap_bytes,
            credit: cap_bytes.saturating_mul(100),
            earned: 0,
        }
    }

    /// No budget: every repair admitted.
    pub fn unlimited() -> Self {
        RepairBudget::new(0, 0)
    }

    /// Whether it limits anything.
    pub fn is_limited(&self) -> bool {
        self.share > 0
    }

    /// `bytes` of data were sent.
    #[inline]
    pub fn earn(&mut self, bytes: u64) {
        if self.share > 0 {
            let e = bytes.saturating_mul(self.share);
            self.earned = self.earned.saturating_add(e);
            self.credit = self.credit.saturating_add(e).min(self.cap.saturating_mul(100));
        }
    }

    /// Spend `bytes` on a repair if the budget holds them (true), else spend nothing (false).
    #[inline]
    pub fn take(&mut self, bytes: u64) -> bool {
        if self.share == 0 {
            return true;
        }
        let need = bytes.saturating_mul(100);
        if self.credit >= need {
            self.credit -= need;
            true
        } else {
            false
        }
    }

    /// Bytes held now (whole bytes, rounded down).
    pub fn held(&self) -> u64 {
        self.credit / 100
    }

    /// The most repair bytes the budget can have admitted so far: `cap` plus everything
    /// earned (`share` % of the bytes passed to [`RepairBudget::earn`]); `u64::MAX` when
    /// unlimited.
    pub fn bound(&self) -> u64 {
        if self.share == 0 {
            return u64::MAX;
        }
        self.cap.saturating_add(self.earned / 100)
    }

    /// The most bytes held ([`RepairBudget::new`]'s `cap_bytes`).
    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// The share of data earned, percent (0: unlimited).
    pub fn share_percent(&self) -> u32 {
        self.share as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgm::sqn_le;

    /// A repair budget that admits everything.
    fn yes(_: usize) -> bool {
        true
    }

    /// Write a recognisable packet for `sqn` of a length that varies with it.
    fn fill(w: &mut TxWindow) -> u32 {
        let (sqn, slot) = w.next_slot();
        let len = 4 + (sqn % 5) as usize;
        slot[..4].copy_from_slice(&sqn.to_be_bytes());
        for b in &mut slot[4..len] {
            *b = sqn as u8;
        }
        w.commit(len);
        assert_eq!(w.lead(), Some(sqn));
        sqn
    }

    fn expect(sqn: u32) -> Vec<u8> {
        let len = 4 + (sqn % 5) as usize;
        let mut v = sqn.to_be_bytes().to_vec();
        v.resize(len, sqn as u8);
        v
    }

    #[test]
    fn empty_window_has_no_lead_and_trail_one_past_it() {
        let w = TxWindow::new(4, 16, 100);
        assert_eq!(w.trail(), 100);
        assert_eq!(w.lead(), None);
        assert_eq!(w.spm_lead(), 99);
        assert_eq!(w.len(), 0);
        assert!(w.is_empty());
        assert_eq!(w.get(100), None);
        assert_eq!(w.get(99), None);
        let w = TxWindow::new(4, 16, 0);
        assert_eq!(w.spm_lead(), u32::MAX);
    }

    #[test]
    fn slots_and_sqns_hold_through_many_wraps_of_window_and_u32() {
        // Sizes that do and do not divide 2^32: `sqn % size` indexing (OpenPGM) would collide
        // across the u32 wrap for 3, 5 and 7.
        for cap in [1u32, 2, 3, 5, 7, 8] {
            let first = u32::MAX - 3;
            let mut w = TxWindow::new(cap, 16, first);
            for n in 0..(cap * 9 + 4) {
                let sqn = fill(&mut w);
                assert_eq!(sqn, first.wrapping_add(n));
                assert_eq!(w.lead(), Some(sqn));
                let held = (n + 1).min(cap);
                assert_eq!(w.len(), held);
                assert_eq!(w.trail(), sqn.wrapping_sub(held - 1));
                assert_eq!(w.spm_lead(), sqn);
                assert_eq!(w.next_sqn(), sqn.wrapping_add(1));
                for k in 0..held {
                    let s = w.trail().wrapping_add(k);
                    assert_eq!(w.get(s), Some(&expect(s)[..]), "cap {cap} sqn {s}");
                }
                // Agrees with serial-number order around the window.
                for d in 0..(2 * cap + 2) {
                    let s = w.trail().wrapping_sub(cap + 1).wrapping_add(d);
                    let inside = sqn_le(w.trail(), s) && sqn_le(s, sqn);
                    assert_eq!(w.get(s).is_some(), inside, "cap {cap} sqn {s}");
                }
                // Just outside on both sides, and far away.
                assert_eq!(w.get(w.trail().wrapping_sub(1)), None);
                assert_eq!(w.get(sqn.wrapping_add(1)), None);
                assert_eq!(w.get(sqn.wrapping_add(1 << 31)), None);
            }
        }
    }

    #[test]
    fn next_slot_twice_before_commit_drops_only_one() {
        let mut w = TxWindow::new(3, 8, 10);
        for _ in 0..3 {
            fill(&mut w);
        }
        assert_eq!((w.trail(), w.lead()), (10, Some(12)));
        let (a, _) = w.next_slot();
        let (b, slot) = w.next_slot();
        slot[0] = 0xab;
        assert_eq!((a, b), (13, 13));
        assert_eq!(w.trail(), 11);
        assert_eq!(w.lead(), Some(12));
        assert_eq!(w.get(13), None, "not committed yet");
        w.commit(1);
        assert_eq!((w.trail(), w.lead()), (11, Some(13)));
        assert_eq!(w.get(13), Some(&[0xab][..]));
        // get_mut writes through.
        w.get_mut(11).unwrap()[0] = 0x77;
        assert_eq!(w.get(11).unwrap()[0], 0x77);
        assert!(w.get_mut(10).is_none());
        assert!(w.get_mut(14).is_none());
    }

    #[test]
    fn nak_counts_are_exact() {
        let mut w = TxWindow::new(8, 16, 100);
        for _ in 0..10 {
            fill(&mut w);
        }
        assert_eq!((w.trail(), w.lead()), (102, Some(109)));
        let out = w.on_nak(&[101, 102, 105, 102, 110, 109, 4_000_000_000], 1000, 0, &mut yes);
        assert_eq!(
            out,
            NakOutcome { queued: 3, already_queued: 1, out_of_window: 2, not_sent: 1, ..Default::default() }
        );
        assert_eq!(w.repairs_queued(), 3);
        assert_eq!(w.peek_repair(), Some(102));
        // Still queued: a second NAK folds into it.
        let out = w.on_nak(&[105], 1001, 0, &mut yes);
        assert_eq!(out.already_queued, 1);
        assert_eq!(w.repairs_queued(), 3);
        assert_eq!(w.next_repair(2000), Some(102));
        assert_eq!(w.next_repair(2000), Some(105));
        assert_eq!(w.next_repair(2001), Some(109));
        assert_eq!(w.next_repair(2002), None);
        assert_eq!(w.peek_repair(), None);
        assert_eq!(w.repairs_queued(), 0);

        // Elimination: 105 repaired at 2000, window 500 ns.
        let out = w.on_nak(&[105, 109], 2499, 500, &mut yes);
        assert_eq!(out, NakOutcome { held_off: 2, ..Default::default() });
        let out = w.on_nak(&[105, 109], 2500, 500, &mut yes);
        assert_eq!(out, NakOutcome { queued: 1, held_off: 1, ..Default::default() });
        assert_eq!(w.next_repair(2600), Some(105));
        // elim 0 = OpenPGM: only a pending repair eliminates.
        let out = w.on_nak(&[105, 109, 102], 2600, 0, &mut yes);
        assert_eq!(out.queued, 3);
        assert_eq!(w.repairs_queued(), 3);
        assert_eq!(w.repairs_expired(), 0);
    }

    #[test]
    fn nak_before_any_data_is_out_of_window() {
        let mut w = TxWindow::new(4, 16, 0);
        let out = w.on_nak(&[0, u32::MAX, 1], 0, 0, &mut yes);
        // 0 and 1 are the first sqns to come (not sent yet), u32::MAX is before the start.
        assert_eq!(out, NakOutcome { not_sent: 2, out_of_window: 1, ..Default::default() });
        assert_eq!(w.next_repair(0), None);
    }

    #[test]
    fn repairs_for_sqns_that_left_the_window_are_skipped_and_counted() {
        let first = u32::MAX - 3;
        let mut w = TxWindow::new(4, 16, first);
        for _ in 0..4 {
            fill(&mut w);
        }
        // Window: MAX-3 ..= MAX. Queue newest first, then oldest.
        let out = w.on_nak(&[u32::MAX, first, first + 1, first + 2], 0, 0, &mut yes);
        assert_eq!(out.queued, 4);
        // Two more packets: first and first+1 leave the window.
        fill(&mut w);
        fill(&mut w);
        assert_eq!(w.trail(), first + 2);
        assert_eq!(w.lead(), Some(1));
        assert_eq!(w.repairs_expired(), 2);
        assert_eq!(w.repairs_queued(), 2);
        assert_eq!(w.next_repair(10), Some(u32::MAX));
        assert_eq!(w.next_repair(10), Some(first + 2));
        assert_eq!(w.next_repair(10), None);
        // The reused slots carry no stale state: new sqns queue fresh.
        let out = w.on_nak(&[0, 1, first], 20, 1_000, &mut yes);
        assert_eq!(out, NakOutcome { queued: 2, out_of_window: 1, ..Default::default() });
        // A repaired sqn whose slot is reused is not held_off by the old repair time.
        for _ in 0..4 {
            fill(&mut w);
        }
        assert_eq!(w.repairs_expired(), 4);
        assert_eq!(w.repairs_queued(), 0);
        let lead = w.lead().unwrap();
        assert_eq!(lead, 5);
        let out = w.on_nak(&[2, 3, 4, 5], 30, 1_000_000, &mut yes);
        assert_eq!(out.queued, 4);
        assert_eq!(w.next_repair(31), Some(2));
    }

    #[test]
    fn repair_queue_is_fifo_across_interleaving_and_wrap() {
        let first = u32::MAX - 3;
        let mut w = TxWindow::new(16, 8, first);
        for _ in 0..12 {
            fill(&mut w);
        }
        let s = |k: u32| first.wrapping_add(k);
        assert_eq!(w.on_nak(&[s(5), s(1), s(9)], 0, 0, &mut yes).queued, 3);
        assert_eq!(w.next_repair(1), Some(s(5)));
        assert_eq!(w.on_nak(&[s(3), s(5), s(1)], 2, 0, &mut yes).queued, 2);
        let got: Vec<u32> = std::iter::from_fn(|| w.next_repair(3)).collect();
        assert_eq!(got, vec![s(1), s(9), s(3), s(5)]);
    }

    #[test]
    #[should_panic(expected = "committed 9 bytes into a 8-byte")]
    fn commit_longer_than_slot_panics() {
        let mut w = TxWindow::new(2, 8, 0);
        w.next_slot();
        w.commit(9);
    }

    /// Every time in `from..to` (step 1) at which `due` said yes.
    fn fire_times(s: &mut SpmSchedule, from: u64, to: u64) -> Vec<u64> {
        (from..to).filter(|&t| s.due(t)).collect()
    }

    #[test]
    fn spm_ambient_then_heartbeats_restarting_on_data() {
        let mut s = SpmSchedule::new(1000, &[10, 20, 40], 0);
        assert_eq!(s.next_deadline(), 1000);
        assert_eq!(fire_times(&mut s, 0, 1500), vec![1000]);
        assert_eq!(s.next_deadline(), 2000);
        s.on_data(1500);
        assert_eq!(s.next_deadline(), 1510);
        // Heartbeats at +10, +30, +70, then ambient only (2000, 3000).
        assert_eq!(fire_times(&mut s, 1500, 3001), vec![1510, 1530, 1570, 2000, 3000]);
        // Data restarts the list; data again before the first heartbeat restarts it again.
        s.on_data(3100);
        assert_eq!(s.next_deadline(), 3110);
        assert_eq!(fire_times(&mut s, 3100, 3105), Vec::<u64>::new());
        s.on_data(3105);
        assert_eq!(s.next_deadline(), 3115);
        assert_eq!(fire_times(&mut s, 3105, 3130), vec![3115]);
        // Data in the middle of the list starts over at the first gap.
        s.on_data(3130);
        assert_eq!(fire_times(&mut s, 3130, 4100), vec![3140, 3160, 3200, 4000]);
    }

    #[test]
    fn spm_late_check_sends_one_and_skips_missed_deadlines() {
        let mut s = SpmSchedule::new(1000, &[10, 20, 40, 80], 0);
        s.on_data(100);
        // Deadlines 110, 130, 170, 250. Checked first at 175: one SPM, next heartbeat 250.
        assert!(s.due(175));
        assert!(!s.due(175));
        assert_eq!(s.next_deadline(), 250);
        // Ambient checked late (1234): next ambient from now, not from the deadline.
        assert!(s.due(250));
        assert_eq!(s.next_deadline(), 1000);
        assert!(s.due(1234));
        assert_eq!(s.next_deadline(), 2234);
        // Both due at once: still one SPM.
        s.on_data(2224);
        assert!(s.due(2234));
        assert!(!s.due(2234));
        assert_eq!(s.next_deadline(), 2254);
    }

    #[test]
    fn spm_without_heartbeats_is_ambient_only() {
        let mut s = SpmSchedule::new(500, &[], 7);
        s.on_data(10);
        assert_eq!(s.next_deadline(), 507);
        assert_eq!(fire_times(&mut s, 0, 1600), vec![507, 1007, 1507]);
    }

    #[test]
    fn spm_lan_default_heartbeats_double_from_one_ms() {
        let mut s = SpmSchedule::lan_default(0);
        assert_eq!(s.next_deadline(), 1_000 * MS);
        s.on_data(5);
        let mut got = Vec::new();
        let mut t = 5;
        while got.len() < LAN_HEARTBEAT_NS.len() + 1 {
            t = s.next_deadline();
            assert!(s.due(t));
            got.push(t - 5);
        }
        // 1, 2, 4, ... 1024 ms after the data; the first ambient (1 s after creation)
        // falls between 512 and 1024 ms.
        let mut want: Vec<u64> = LAN_HEARTBEAT_NS
            .iter()
            .scan(0, |acc, &g| {
                *acc += g;
                Some(*acc)
            })
            .collect();
        want.insert(10, 1_000 * MS - 5);
        assert_eq!(got, want);
        assert_eq!(t, 5 + 1_024 * MS);
        assert_eq!(s.next_deadline(), 2_000 * MS);
    }

    #[test]
    fn token_bucket_exact_at_given_times() {
        let mut b = TokenBucket::new(1000, 100, 0);
        assert!(b.take(60, 0));
        assert!(!b.take(60, 0));
        // 40 bytes left, 20 more at 1000 B/s = 20 ms.
        assert_eq!(b.next_ok(60), 20_000_000);
        assert!(!b.take(60, 19_999_999));
        assert_eq!(b.next_ok(60), 20_000_000);
        assert!(b.take(60, 20_000_000));
        assert_eq!(b.next_ok(0), 20_000_000);
        assert_eq!(b.next_ok(1), 21_000_000);
        // Sub-byte credit is kept exactly: 1 byte per ms, so 1.5 ms gives 1 byte and half.
        assert!(b.take(1, 21_500_000));
        assert_eq!(b.next_ok(1), 22_000_000);
        // Never more than the burst, however long idle.
        assert!(b.take(100, 10_000_000_000));
        assert!(!b.take(1, 10_000_000_000));
        assert_eq!(b.next_ok(101), u64::MAX);
        assert_eq!(b.next_ok(100), 10_100_000_000);
        // A time before the last refill neither refills nor goes backwards.
        assert!(!b.take(1, 5));
        assert_eq!(b.next_ok(1), 10_001_000_000);
    }

    #[test]
    fn token_bucket_unlimited_and_openpgm_depth() {
        let mut b = TokenBucket::new(0, 0, 0);
        assert!(b.take(1 << 40, 0));
        assert_eq!(b.next_ok(1 << 40), 0);
        assert_eq!(TokenBucket::openpgm_burst(10_000_000, 1500), 10_000);
        assert_eq!(TokenBucket::openpgm_burst(1_000_000, 1500), 1_000_000);
        // 1 Gbit/s worth of bytes, a 9000-byte jumbo packet: 125 kB per ms.
        let mut b = TokenBucket::new(125_000_000, 125_000, 1_000);
        let mut sent = 0;
        while b.take(9_000, 1_000) {
            sent += 1;
        }
        assert_eq!(sent, 13);
        // 8000 bytes left; 1000 more take 8 µs.
        assert_eq!(b.next_ok(9_000), 1_000 + 8_000);
    }

    #[test]
    fn a_repaired_sqn_is_held_off_then_repaired_again() {
        let mut w = TxWindow::new(8, 16, 0);
        for _ in 0..8 {
            fill(&mut w);
        }
        let hold = 25_000_000;
        assert_eq!(w.on_nak(&[3], 0, hold, &mut yes).queued, 1);
        assert_eq!(w.next_repair(1_000), Some(3));
        // Every NAK for 3 within 25 ms of its repair (at 1 us) is held off, however many.
        for t in [1_000, 2_000_000, 25_000_999] {
            assert_eq!(w.on_nak(&[3, 3, 3], t, hold, &mut yes), NakOutcome { held_off: 3, ..Default::default() });
        }
        assert_eq!(w.repairs_queued(), 0);
        // From 25 ms after the repair it is repaired again (once; the rest fold into it).
        assert_eq!(
            w.on_nak(&[3, 3], 25_001_000, hold, &mut yes),
            NakOutcome { queued: 1, already_queued: 1, ..Default::default() }
        );
        assert_eq!(w.next_repair(25_002_000), Some(3));
        assert_eq!(w.on_nak(&[3], 25_003_000, hold, &mut yes).held_off, 1);
        // Other sqns are not held off by 3's repair.
        assert_eq!(w.on_nak(&[2, 4], 25_003_000, hold, &mut yes).queued, 2);
    }

    #[test]
    fn the_budget_admits_what_the_data_earned_and_no_more() {
        // 25 % of the data, holding at most 1000 bytes: full at the start.
        let mut b = RepairBudget::new(25, 1000);
        assert!(b.is_limited());
        assert!(b.take(600));
        assert!(!b.take(401), "400 left");
        assert!(b.take(400));
        assert!(!b.take(1));
        // 10 bytes of data earn 2.5 bytes: 2 pass, the half byte is kept.
        b.earn(10);
        assert!(!b.take(3));
        assert!(b.take(2));
        b.earn(2);
        assert!(b.take(1), "0.5 + 0.5");
        assert!(!b.take(1));
        // The bound: cap + 25 % of the 12 bytes of data so far.
        assert_eq!(b.bound(), 1003);
        // Never more than the cap held, however much data; the bound counts all of it.
        b.earn(1 << 40);
        assert_eq!(b.held(), 1000);
        assert!(!b.take(1001));
        assert_eq!(b.bound(), 1003 + (1 << 38));
        let mut u = RepairBudget::unlimited();
        assert!(!u.is_limited());
        assert!(u.take(u64::MAX));
        assert_eq!(u.bound(), u64::MAX);
    }

    #[test]
    fn naks_over_budget_are_counted_and_not_queued() {
        let mut w = TxWindow::new(8, 16, 0);
        for _ in 0..8 {
            fill(&mut w);
        }
        // Packets of 4..8 bytes (fill): a budget of 10 bytes admits sqn 0 (4 bytes) and 1 (5).
        let mut b = RepairBudget::new(50, 10);
        let out = w.on_nak(&[0, 1, 2, 3, 9], 0, 0, &mut |len| b.take(len as u64));
        assert_eq!(out, NakOutcome { queued: 2, over_budget: 2, not_sent: 1, ..Default::default() });
        assert_eq!(w.repairs_queued(), 2);
        // 12 bytes of data earn 6: sqn 2 (6 bytes) now fits.
        b.earn(12);
        let out = w.on_nak(&[2, 3], 0, 0, &mut |len| b.take(len as u64));
        assert_eq!(out, NakOutcome { queued: 1, over_budget: 1, ..Default::default() });
    }
}
