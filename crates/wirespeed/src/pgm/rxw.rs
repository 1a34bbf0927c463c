//! The PGM receive window: which sequence numbers a receiver has, which it is still trying to
//! get back, and in what order the application gets them (RFC 3208 §5.3 receiver procedures,
//! §6.3 NAK suppression and the receiver timers NAK_BO_IVL, NAK_RPT_IVL, NAK_RDATA_IVL,
//! NAK_NCF_RETRIES and NAK_DATA_RETRIES).
//!
//! Pure logic on the hot receive path: no sockets, no clock (every call takes the monotonic
//! time in ns), no locks, and no allocation after [`RxWindow::new`], which preallocates
//! `max_sqns` payload slots of `max_tsdu` bytes in one buffer plus one small state record per
//! slot. Randomness (the NAK back-off) comes from an internal xorshift seeded by the caller, so
//! a run is reproducible.
//!
//! # The NAK state machine (per missing sequence number)
//!
//! ```text
//!  gap noticed ──▶ BACK_OFF ──(random 1..=NAK_BO_IVL expires: poll() hands out the NAK)──▶ WAIT_NCF
//!                    ▲  │ NCF ─────────────────────────────────────────────▶ WAIT_DATA
//!                    │  │ another receiver's NAK ─────────────────────────▶ WAIT_NCF
//!                    │  └─────────────────────────────────────────────────────────┐
//!   WAIT_NCF ──NCF──▶ WAIT_DATA ──(RDATA or late ODATA)──▶ HAVE_DATA              │
//!   WAIT_NCF ──NAK_RPT_IVL expires──▶ BACK_OFF again, or LOST after NAK_NCF_RETRIES
//!   WAIT_DATA ──NAK_RDATA_IVL expires──▶ BACK_OFF again, or LOST after NAK_DATA_RETRIES
//!   any missing state ──source trail (SPM or data) moves past it──▶ LOST
//! ```
//!
//! # Costs
//!
//! The three recovering states each live in an intrusive doubly linked FIFO threaded through the
//! slot records (as OpenPGM's `nak_backoff_queue`, `wait_ncf_queue`, `wait_data_queue` in
//! rxw.c), so every state change is O(1) and [`RxWindow::poll`] only looks at entries that are
//! due plus one that is not: it never scans the window. WAIT_NCF and WAIT_DATA entries all get
//! `now + constant` timers, so their FIFOs are sorted by expiry. BACK_OFF entries get random
//! timers; like OpenPGM (`nak_rb_state` in receiver.c stops at the first unexpired entry) the
//! queue is served in arrival order. An entry can thus wait behind an older one with a later
//! timer, but every older entry's timer is at most NAK_BO_IVL after *its* arrival, hence at most
//! NAK_BO_IVL after the younger one's: each NAK still goes out no sooner than its own back-off
//! and no later than NAK_BO_IVL after its gap was noticed (given a monotonic `now`).
//!
//! [`RxWindow::on_data`] is O(1) for in-order data plus O(g) for g newly noticed gap sqns (each
//! sqn enters the window once, so this is O(1) amortised per sqn; a jump further than the window
//! costs O(`max_sqns`), the part beyond the window being declared lost in O(1)). An advancing
//! source trail marks missing sqns lost in O(sqns it passes), each sqn at most once.
//! [`RxWindow::pop`] is O(1) per item (a run of lost sqns costs O(run) once).

use super::sqn_lt;

/// Sentinel for "no slot" in the intrusive queues.
const NIL: u32 = u32::MAX;
/// Half the sequence space: sequence numbers compare as serial numbers within it.
const HALF: u32 = 1 << 31;
/// OpenPGM's protocol sanity bound on how far a packet's sqn may be ahead of the trail it
/// carries (`pgm_rxw_add`: `sequence - data_trail >= (UINT32_MAX/2)-1` is out of bounds).
const TRAIL_SANITY: u32 = (u32::MAX / 2) - 1;

/// The largest receive window [`RxWindow::new`] accepts, in sequence numbers: it must stay well
/// inside half the sequence space so "ahead" and "behind" never meet.
pub const MAX_SQNS_LIMIT: u32 = 1 << 30;

/// Receive-window size and the receiver's NAK timers (RFC 3208 §5.3, names as in the RFC).
#[derive(Clone, Copy, Debug)]
pub struct RxConfig {
    /// Window size in sequence numbers (OpenPGM `PGM_RXW_SQNS`): how much undelivered data and
    /// how many missing sqns are held at once.
    pub max_sqns: u32,
    /// Largest payload (TSDU) accepted, in bytes; each slot preallocates this much.
    pub max_tsdu: usize,
    /// NAK_BO_IVL: a missing sqn's NAK waits a random 1..=this ns, so that of many receivers
    /// missing the same packet usually one NAKs and the NCF silences the rest.
    pub nak_bo_ivl_ns: u64,
    /// NAK_RPT_IVL: how long a sent NAK waits for its NCF before it is sent again.
    pub nak_rpt_ivl_ns: u64,
    /// NAK_RDATA_IVL: how long a confirmed (NCF'd) sqn waits for its RDATA before NAKing again.
    pub nak_rdata_ivl_ns: u64,
    /// NAK_NCF_RETRIES: NAK_RPT_IVL expiries after which a sqn is unrecoverable. As in OpenPGM
    /// (`nak_rpt_state`: `++ncf_retry_count >= nak_ncf_retries`), this is the total number of
    /// NAKs sent without an NCF, not 1 + retries as the RFC's wording suggests.
    pub nak_ncf_retries: u32,
    /// NAK_DATA_RETRIES: NAK_RDATA_IVL expiries after which a sqn is unrecoverable (counted as
    /// in OpenPGM's `nak_rdata_state`).
    pub nak_data_retries: u32,
}

impl Default for RxConfig {
    /// LAN defaults. OpenPGM has none (socket.c refuses to bind while any NAK option is 0) and
    /// its examples use WAN values (50 ms back-off, 2 s repeat and RDATA waits, 50 retries).
    /// On a LAN a round trip is well under a millisecond, so: a 5 ms back-off still spreads
    /// many receivers' NAKs while keeping repair latency low; 50 ms for an NCF or the RDATA is
    /// tens of round trips, room for a busy source; 20 retries of each ride out a second or
    /// more of trouble before giving up. 16384 sqns of 9000-byte (jumbo) payloads is 147 MB of
    /// address space; pages are only touched as slots are used.
    fn default() -> Self {
        RxConfig {
            max_sqns: 16384,
            max_tsdu: 9000,
            nak_bo_ivl_ns: 5_000_000,
            nak_rpt_ivl_ns: 50_000_000,
            nak_rdata_ivl_ns: 50_000_000,
            nak_ncf_retries: 20,
            nak_data_retries: 20,
        }
    }
}

impl RxConfig {
    /// Checks the values so a caller can refuse a bad configuration with one clear line
    /// ([`RxWindow::new`] clamps rather than fails).
    pub fn validate(&self) -> Result<(), String> {
        if self.max_sqns == 0 || self.max_sqns > MAX_SQNS_LIMIT {
            return Err(format!("receive window of {} sequence numbers: use 1 to {MAX_SQNS_LIMIT}", self.max_sqns));
        }
        if self.max_tsdu == 0 {
            return Err("largest payload of 0 bytes: use at least 1".into());
        }
        if (self.max_sqns as usize).checked_mul(self.max_tsdu).is_none_or(|b| b > isize::MAX as usize) {
            return Err(format!(
                "receive window of {} x {} bytes does not fit in memory: make one of them smaller",
                self.max_sqns, self.max_tsdu
            ));
        }
        if self.nak_bo_ivl_ns == 0 || self.nak_rpt_ivl_ns == 0 || self.nak_rdata_ivl_ns == 0 {
            return Err("NAK intervals must be longer than 0".into());
        }
        Ok(())
    }
}

/// What the receive window did and saw, for reports; all counts since [`RxWindow::new`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxStats {
    /// Unique sqns handed to the application as data by [`RxWindow::pop`].
    pub received: u64,
    /// ODATA packets given to [`RxWindow::on_data`], whatever became of them.
    pub odata: u64,
    /// RDATA packets given to [`RxWindow::on_data`], whatever became of them.
    pub rdata: u64,
    /// Sqns that were missing and came as RDATA or late ODATA.
    pub repaired: u64,
    /// Data packets for sqns already held or already handed to the application.
    pub duplicates: u64,
    /// Sqns NAKed (by [`RxWindow::poll`]), retries included.
    pub naks_sent: u64,
    /// NAK packets sent: the window never touches it; the caller that builds the packets
    /// from [`RxWindow::poll`]'s list counts them here if it likes.
    pub nak_packets: u64,
    /// Sqns named by NCFs ([`RxWindow::on_ncf`]), matched or not.
    pub ncfs: u64,
    /// NAKs not sent because an NCF or another receiver's NAK came first.
    pub suppressed: u64,
    /// Sqns handed to the application as lost by [`RxWindow::pop`].
    pub unrecoverable: u64,
    /// Data packets outside the window (more than 2^31 away, or before the window began).
    pub out_of_window: u64,
    /// Data packets with a payload longer than `max_tsdu` (ignored).
    pub too_long: u64,
    /// Sqns whose data had arrived but was dropped before the application popped it, because
    /// the window was full (a slow consumer); also counted in `unrecoverable` once popped.
    pub overrun: u64,
}

/// What [`RxWindow::on_data`] did with a data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataVerdict {
    /// A sqn not seen before and not known to be missing (it may have opened gaps behind it).
    New,
    /// A missing sqn filled by RDATA or late ODATA.
    Repaired {
        /// ns since the gap was first noticed.
        waited_ns: u64,
    },
    /// Already held, or already handed to the application (as data or as lost).
    Duplicate,
    /// Before the window began, or 2^31 or more away from it: ignored.
    OutOfWindow,
    /// Payload longer than `max_tsdu`: ignored, window unchanged.
    TooLong,
}

/// One in-order item for the application from [`RxWindow::pop`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery<'a> {
    /// The data of sqn `sqn`.
    Data {
        /// Its sequence number.
        sqn: u32,
        /// Its payload, valid until the window is used again.
        payload: &'a [u8],
        /// It was missing and came as RDATA or late ODATA.
        repaired: bool,
    },
    /// `count` consecutive sqns from `first` (wrapping) that will never come.
    Lost {
        /// The first lost sqn.
        first: u32,
        /// How many.
        count: u32,
    },
}

/// A slot's place in the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// Not in the window.
    Free,
    BackOff,
    WaitNcf,
    WaitData,
    Have,
    Lost,
}

const Q_BACK_OFF: usize = 0;
const Q_WAIT_NCF: usize = 1;
const Q_WAIT_DATA: usize = 2;

impl St {
    fn queue(self) -> Option<usize> {
        match self {
            St::BackOff => Some(Q_BACK_OFF),
            St::WaitNcf => Some(Q_WAIT_NCF),
            St::WaitData => Some(Q_WAIT_DATA),
            _ => None,
        }
    }
}

/// Per-slot record (the payload bytes live in `RxWindow::buf`).
#[derive(Clone, Copy, Debug)]
struct Slot {
    sqn: u32,
    len: u32,
    st: St,
    repaired: bool,
    ncf_retries: u32,
    data_retries: u32,
    /// When the gap was noticed (for `Repaired::waited_ns`).
    noticed_ns: u64,
    /// The running timer of BACK_OFF, WAIT_NCF or WAIT_DATA.
    expiry_ns: u64,
    /// Queue links (slot indices), towards older and newer entries.
    prev: u32,
    next: u32,
}

const FREE_SLOT: Slot = Slot {
    sqn: 0,
    len: 0,
    st: St::Free,
    repaired: false,
    ncf_retries: 0,
    data_retries: 0,
    noticed_ns: 0,
    expiry_ns: 0,
    prev: NIL,
    next: NIL,
};

/// A FIFO of slots threaded through `Slot::prev/next`.
#[derive(Clone, Copy, Debug)]
struct Queue {
    oldest: u32,
    newest: u32,
    len: u32,
}

const EMPTY_QUEUE: Queue = Queue { oldest: NIL, newest: NIL, len: 0 };

/// The receive window of one PGM source (one TSI). See the module documentation.
///
/// The window holds sqns `trail..=lead` (wrapping), `trail` being the next one the application
/// gets. Sqns already passed over as lost but not yet popped wait just before `trail` as one
/// run (`lost_first`, `lost_count`).
pub struct RxWindow {
    cfg: RxConfig,
    n: u32,
    buf: Vec<u8>,
    slots: Vec<Slot>,
    queues: [Queue; 3],
    defined: bool,
    trail: u32,
    lead: u32,
    trail_idx: u32,
    /// The source's transmit-window trail, the highest advertised (OpenPGM `rxw_trail`).
    rxw_trail: u32,
    lost_first: u32,
    lost_count: u64,
    /// Sqns handed to the application since the window began (to tell duplicates from
    /// packets older than the window).
    popped: u64,
    rng: u64,
    stats: RxStats,
}

impl RxWindow {
    /// A window for `cfg` (out-of-range values are clamped: `max_sqns` to
    /// 1..=[`MAX_SQNS_LIMIT`], `max_tsdu` and intervals to at least 1; check with
    /// [`RxConfig::validate`] first to refuse them instead). `seed` drives the NAK back-off.
    /// Allocates `max_sqns * max_tsdu` bytes (zeroed lazily by the OS) and nothing after.
    pub fn new(cfg: RxConfig, seed: u64) -> Self {
        let mut cfg = cfg;
        cfg.max_sqns = cfg.max_sqns.clamp(1, MAX_SQNS_LIMIT);
        cfg.max_tsdu = cfg.max_tsdu.max(1);
        cfg.nak_bo_ivl_ns = cfg.nak_bo_ivl_ns.max(1);
        cfg.nak_rpt_ivl_ns = cfg.nak_rpt_ivl_ns.max(1);
        cfg.nak_rdata_ivl_ns = cfg.nak_rdata_ivl_ns.max(1);
        let n = cfg.max_sqns;
        RxWindow {
            cfg,
            n,
            buf: vec![0u8; n as usize * cfg.max_tsdu],
            slots: vec![FREE_SLOT; n as usize],
            queues: [EMPTY_QUEUE; 3],
            defined: false,
            trail: 0,
            lead: u32::MAX,
            trail_idx: 0,
            rxw_trail: 0,
            lost_first: 0,
            lost_count: 0,
            popped: 0,
            // xorshift must not start at 0; mix the seed so nearby seeds differ at once.
            rng: (seed ^ 0x9E37_79B9_7F4A_7C15) | 1,
            stats: RxStats::default(),
        }
    }

    /// The configuration in use (after clamping).
    pub fn config(&self) -> &RxConfig {
        &self.cfg
    }

    /// `(next sqn to deliver, highest sqn known)` once the first packet defined the window.
    pub fn edges(&self) -> Option<(u32, u32)> {
        self.defined.then_some((self.trail, self.lead))
    }

    /// ODATA (repair=false) or RDATA. The first packet ever received defines the window's
    /// start (no NAKs for what came before: OpenPGM's default, no late join). `trail` is the
    /// source's transmit-window trail carried in the packet.
    pub fn on_data(&mut self, sqn: u32, trail: u32, payload: &[u8], repair: bool, now_ns: u64) -> DataVerdict {
        if repair {
            self.stats.rdata += 1;
        } else {
            self.stats.odata += 1;
        }
        if payload.len() > self.cfg.max_tsdu {
            self.stats.too_long += 1;
            return DataVerdict::TooLong;
        }
        // OpenPGM pgm_rxw_add: a trail too far behind its own sqn is out of bounds.
        if sqn.wrapping_sub(trail) >= TRAIL_SANITY {
            self.stats.out_of_window += 1;
            return DataVerdict::OutOfWindow;
        }
        if !self.defined {
            // OpenPGM _pgm_rxw_define(window, sqn - 1): the window starts at this packet and
            // the source trail it carries is not used for the first packet.
            self.define(sqn);
        } else {
            self.update_trail(trail);
        }
        let ahead = sqn.wrapping_sub(self.trail);
        if ahead >= HALF {
            return self.behind(sqn);
        }
        if ahead < self.len() {
            let i = self.idx(sqn);
            return match self.slots[i as usize].st {
                St::Have => {
                    self.stats.duplicates += 1;
                    DataVerdict::Duplicate
                }
                // OpenPGM _pgm_rxw_insert also fills a sqn already marked lost while it is
                // still in the window: the data is better late than never.
                St::BackOff | St::WaitNcf | St::WaitData | St::Lost => {
                    let waited_ns = now_ns.saturating_sub(self.slots[i as usize].noticed_ns);
                    self.store(i, payload, true);
                    self.stats.repaired += 1;
                    DataVerdict::Repaired { waited_ns }
                }
                St::Free => unreachable!("every slot inside the window is in use"),
            };
        }
        // Beyond the lead: make room, open gaps for what was skipped, append.
        self.make_room(sqn);
        self.open_gaps(sqn.wrapping_sub(1), now_ns);
        let i = self.admit(sqn, now_ns);
        self.store(i, payload, false);
        DataVerdict::New
    }

    /// An SPM: lead beyond what we have opens gaps (sqns after the last received up to lead
    /// enter back-off); trail moving past sqns not yet received makes them unrecoverable.
    /// Before any data, an SPM defines the window to start at its lead + 1, as OpenPGM's
    /// `pgm_rxw_update` does (`_pgm_rxw_define(window, txw_lead)`): data at or before that
    /// lead is then out of window, and nothing is NAKed for it.
    pub fn on_spm(&mut self, trail: u32, lead: u32, now_ns: u64) {
        if !self.defined {
            self.define(lead.wrapping_add(1));
            return;
        }
        self.update_trail(trail);
        if sqn_lt(self.lead, lead) && lead.wrapping_sub(self.trail) < HALF {
            self.make_room(lead);
            self.open_gaps(lead, now_ns);
        }
    }

    /// An NCF for these sqns: each in BACK_OFF or WAIT_NCF goes to WAIT_DATA (timer
    /// NAK_RDATA_IVL); one already in WAIT_DATA has its timer restarted, as OpenPGM's
    /// `_pgm_rxw_recovery_update` does. An NCF beyond the lead extends the window as
    /// OpenPGM's `pgm_rxw_confirm` does: the sqns skipped enter back-off, the NCF'd one waits
    /// for its data. Ignored before the window is defined.
    pub fn on_ncf(&mut self, sqns: &[u32], now_ns: u64) {
        self.stats.ncfs += sqns.len() as u64;
        if !self.defined {
            return;
        }
        let expiry = now_ns.saturating_add(self.cfg.nak_rdata_ivl_ns);
        for &sqn in sqns {
            let Some(i) = self.locate_or_extend(sqn, now_ns) else { continue };
            let slot = &mut self.slots[i as usize];
            match slot.st {
                St::Free | St::BackOff => {
                    // Free: just admitted beyond the lead; either way we never NAKed it.
                    self.stats.suppressed += 1;
                }
                St::WaitNcf | St::WaitData => {}
                St::Have | St::Lost => continue,
            }
            slot.expiry_ns = expiry;
            self.set_state(i, St::WaitData);
        }
    }

    /// Another receiver's NAK heard on the group (multicast NAK suppression): sqns in
    /// BACK_OFF go to WAIT_NCF as if we had sent the NAK (counted in `suppressed`); if no NCF
    /// follows within NAK_RPT_IVL we NAK ourselves. OpenPGM's `pgm_on_peer_nak` instead treats
    /// such a NAK as an NCF (straight to WAIT_DATA); WAIT_NCF is used here because hearing a
    /// peer's NAK does not prove the source heard it. Beyond the lead it extends the window as
    /// an NCF does.
    pub fn on_foreign_nak(&mut self, sqns: &[u32], now_ns: u64) {
        if !self.defined {
            return;
        }
        let expiry = now_ns.saturating_add(self.cfg.nak_rpt_ivl_ns);
        for &sqn in sqns {
            let Some(i) = self.locate_or_extend(sqn, now_ns) else { continue };
            if matches!(self.slots[i as usize].st, St::Free | St::BackOff) {
                self.stats.suppressed += 1;
                self.slots[i as usize].expiry_ns = expiry;
                self.set_state(i, St::WaitNcf);
            }
        }
    }

    /// Sqns whose NAK is due by now, written to `out` (at most `out.len()`, returns how many),
    /// oldest first; each moves BACK_OFF -> WAIT_NCF (timer now + NAK_RPT_IVL). Also runs the
    /// expiries: WAIT_NCF past its timer -> BACK_OFF with a fresh random back-off, or
    /// unrecoverable once NAK_NCF_RETRIES are used up; WAIT_DATA likewise with
    /// NAK_DATA_RETRIES. Order as OpenPGM's `pgm_check_peer_state`: back-off, then NCF
    /// waits, then data waits. If `out` fills up, the rest stay due and
    /// [`next_deadline`](Self::next_deadline) is already past: call again.
    pub fn poll(&mut self, now_ns: u64, out: &mut [u32]) -> usize {
        let mut sent = 0;
        // nak_rb_state
        while sent < out.len() {
            let i = self.queues[Q_BACK_OFF].oldest;
            if i == NIL || self.slots[i as usize].expiry_ns > now_ns {
                break;
            }
            out[sent] = self.slots[i as usize].sqn;
            sent += 1;
            self.slots[i as usize].expiry_ns = now_ns.saturating_add(self.cfg.nak_rpt_ivl_ns);
            self.set_state(i, St::WaitNcf);
        }
        self.stats.naks_sent += sent as u64;
        // nak_rpt_state
        loop {
            let i = self.queues[Q_WAIT_NCF].oldest;
            if i == NIL || self.slots[i as usize].expiry_ns > now_ns {
                break;
            }
            let slot = &mut self.slots[i as usize];
            slot.ncf_retries = slot.ncf_retries.saturating_add(1);
            if slot.ncf_retries >= self.cfg.nak_ncf_retries {
                self.set_state(i, St::Lost);
            } else {
                let rb = self.rb_ivl();
                self.slots[i as usize].expiry_ns = now_ns.saturating_add(rb);
                self.set_state(i, St::BackOff);
            }
        }
        // nak_rdata_state
        loop {
            let i = self.queues[Q_WAIT_DATA].oldest;
            if i == NIL || self.slots[i as usize].expiry_ns > now_ns {
                break;
            }
            let slot = &mut self.slots[i as usize];
            slot.data_retries = slot.data_retries.saturating_add(1);
            if slot.data_retries >= self.cfg.nak_data_retries {
                self.set_state(i, St::Lost);
            } else {
                let rb = self.rb_ivl();
                self.slots[i as usize].expiry_ns = now_ns.saturating_add(rb);
                self.set_state(i, St::BackOff);
            }
        }
        sent
    }

    /// The earliest time anything [`poll`](Self::poll) does is due (None: nothing pending),
    /// so the caller can sleep exactly until then. O(1): the oldest entry of each queue.
    pub fn next_deadline(&self) -> Option<u64> {
        self.queues.iter().filter(|q| q.oldest != NIL).map(|q| self.slots[q.oldest as usize].expiry_ns).min()
    }

    /// The next in-order item for the application: received data in sequence order, or a run
    /// of unrecoverable sqns; None when the next sqn is still missing and recoverable (or
    /// nothing is there). A Data's payload stays valid until the window is used again.
    pub fn pop(&mut self) -> Option<Delivery<'_>> {
        if self.lost_count == 0 && self.len() > 0 {
            let i = self.trail_idx as usize;
            match self.slots[i].st {
                St::Have => {
                    let slot = self.slots[i];
                    self.set_state(i as u32, St::Free);
                    self.advance_trail(1);
                    self.popped += 1;
                    self.stats.received += 1;
                    let start = i * self.cfg.max_tsdu;
                    return Some(Delivery::Data {
                        sqn: slot.sqn,
                        payload: &self.buf[start..start + slot.len as usize],
                        repaired: slot.repaired,
                    });
                }
                St::Lost => {}
                _ => return None,
            }
        }
        // A lost run: what was passed over, then every lost sqn at the trail.
        while self.len() > 0 && self.slots[self.trail_idx as usize].st == St::Lost {
            self.set_state(self.trail_idx, St::Free);
            self.pass_over(1);
        }
        if self.lost_count == 0 {
            return None;
        }
        let count = self.lost_count.min(u64::from(u32::MAX)) as u32;
        let first = self.lost_first;
        self.lost_first = first.wrapping_add(count);
        self.lost_count -= u64::from(count);
        self.popped += u64::from(count);
        self.stats.unrecoverable += u64::from(count);
        Some(Delivery::Lost { first, count })
    }

    /// Counters so far.
    pub fn stats(&self) -> &RxStats {
        &self.stats
    }

    /// Sqns currently missing and still being recovered (for reports and --once ends). O(1).
    pub fn pending(&self) -> u32 {
        self.queues.iter().map(|q| q.len).sum()
    }

    /// Give up on everything still missing (run ends): makes them unrecoverable so
    /// [`pop`](Self::pop) returns them as Lost. O(pending).
    pub fn abandon(&mut self) {
        for q in 0..3 {
            while self.queues[q].oldest != NIL {
                self.set_state(self.queues[q].oldest, St::Lost);
            }
        }
    }

    // ---- internals ----

    /// Sqns in the window.
    fn len(&self) -> u32 {
        self.lead.wrapping_add(1).wrapping_sub(self.trail)
    }

    /// Slot index of a sqn inside the window.
    fn idx(&self, sqn: u32) -> u32 {
        let off = sqn.wrapping_sub(self.trail);
        debug_assert!(off < self.len());
        let i = self.trail_idx + off;
        if i >= self.n {
            i - self.n
        } else {
            i
        }
    }

    /// The window begins at `first` (nothing held, nothing missing).
    fn define(&mut self, first: u32) {
        self.defined = true;
        self.trail = first;
        self.lead = first.wrapping_sub(1);
        self.rxw_trail = first;
        self.trail_idx = 0;
    }

    /// Data for a sqn behind the delivery edge.
    fn behind(&mut self, sqn: u32) -> DataVerdict {
        let back = u64::from(self.trail.wrapping_sub(sqn));
        if back <= self.popped + self.lost_count && back < u64::from(HALF) {
            self.stats.duplicates += 1;
            DataVerdict::Duplicate
        } else {
            self.stats.out_of_window += 1;
            DataVerdict::OutOfWindow
        }
    }

    /// The slot of `sqn` if it is in the window; if it is beyond the lead (and less than
    /// 2^31 ahead), extends the window to it, gaps behind it in back-off, and returns its
    /// slot in state Free for the caller to set. None for sqns behind the trail.
    fn locate_or_extend(&mut self, sqn: u32, now_ns: u64) -> Option<u32> {
        let ahead = sqn.wrapping_sub(self.trail);
        if ahead >= HALF {
            return None;
        }
        if ahead < self.len() {
            return Some(self.idx(sqn));
        }
        self.make_room(sqn);
        self.open_gaps(sqn.wrapping_sub(1), now_ns);
        Some(self.admit(sqn, now_ns))
    }

    /// The source's trail advanced to `t`: every sqn before it that we still miss is
    /// unrecoverable (OpenPGM `_pgm_rxw_update_trail`). Each sqn is looked at once: the scan
    /// starts where the previous advance stopped. Sqns before `t` that are not yet in the
    /// window become lost when admitted (see `open_gaps`).
    fn update_trail(&mut self, t: u32) {
        if !sqn_lt(self.rxw_trail, t) {
            return;
        }
        let old = self.rxw_trail;
        self.rxw_trail = t;
        let mut s = if sqn_lt(old, self.trail) { self.trail } else { old };
        while sqn_lt(s, t) && s.wrapping_sub(self.trail) < self.len() {
            let i = self.idx(s);
            if self.slots[i as usize].st.queue().is_some() {
                self.set_state(i, St::Lost);
            }
            s = s.wrapping_add(1);
        }
    }

    /// Makes room for `sqn` (beyond the lead) to enter the window. When the window would
    /// exceed `max_sqns`, the oldest sqns leave it as OpenPGM does (`_pgm_rxw_remove_trail`
    /// on a full window, with no data held by the application): missing ones become lost
    /// and received-but-unpopped data is dropped too (counted in `overrun`): the source keeps
    /// sending, so the window moves on rather than refuse new data. Beyond an emptied window
    /// the skipped sqns are passed over in O(1).
    fn make_room(&mut self, sqn: u32) {
        let need = u64::from(sqn.wrapping_sub(self.trail)) + 1;
        if need <= u64::from(self.n) {
            return;
        }
        let mut excess = need - u64::from(self.n);
        while excess > 0 && self.len() > 0 {
            let i = self.trail_idx;
            if self.slots[i as usize].st == St::Have {
                self.stats.overrun += 1;
            }
            self.set_state(i, St::Free);
            self.pass_over(1);
            excess -= 1;
        }
        if excess > 0 {
            // Empty window: skip straight on; none of these ever entered it.
            let k = excess as u32;
            self.pass_over(k);
            self.lead = self.trail.wrapping_sub(1);
        }
    }

    /// Moves the trail `k` sqns on, adding them to the lost run before it.
    fn pass_over(&mut self, k: u32) {
        if self.lost_count == 0 {
            self.lost_first = self.trail;
        }
        self.lost_count += u64::from(k);
        self.advance_trail(k);
    }

    /// Moves the trail (and its slot index) `k` sqns on.
    fn advance_trail(&mut self, k: u32) {
        self.trail = self.trail.wrapping_add(k);
        self.trail_idx = ((u64::from(self.trail_idx) + u64::from(k)) % u64::from(self.n)) as u32;
    }

    /// Admits every sqn after the lead up to `to` as missing: back-off, all with one random
    /// timer as OpenPGM draws one `nak_rb_expiry` per packet; or lost at once if the source's
    /// trail has already passed it. Room must have been made.
    fn open_gaps(&mut self, to: u32, now_ns: u64) {
        let mut expiry = None;
        while sqn_lt(self.lead, to) {
            let sqn = self.lead.wrapping_add(1);
            let i = self.admit(sqn, now_ns);
            if sqn_lt(sqn, self.rxw_trail) {
                self.set_state(i, St::Lost);
            } else {
                let e = match expiry {
                    Some(e) => e,
                    None => {
                        let e = now_ns.saturating_add(self.rb_ivl());
                        expiry = Some(e);
                        e
                    }
                };
                self.slots[i as usize].expiry_ns = e;
                self.set_state(i, St::BackOff);
            }
        }
    }

    /// Makes `sqn` (the lead + 1, room made) the new lead; returns its fresh slot (Free).
    fn admit(&mut self, sqn: u32, now_ns: u64) -> u32 {
        debug_assert_eq!(sqn, self.lead.wrapping_add(1));
        debug_assert!(self.len() < self.n);
        self.lead = sqn;
        let i = self.idx(sqn);
        let slot = &mut self.slots[i as usize];
        debug_assert_eq!(slot.st, St::Free);
        *slot = Slot { sqn, noticed_ns: now_ns, ..FREE_SLOT };
        i
    }

    /// Copies a payload into slot `i` and marks it held.
    fn store(&mut self, i: u32, payload: &[u8], repaired: bool) {
        let start = i as usize * self.cfg.max_tsdu;
        self.buf[start..start + payload.len()].copy_from_slice(payload);
        let slot = &mut self.slots[i as usize];
        slot.len = payload.len() as u32;
        slot.repaired = repaired;
        self.set_state(i, St::Have);
    }

    /// Moves slot `i` to state `st`, leaving its old queue and joining the new one as its
    /// newest entry (OpenPGM `_pgm_rxw_state`); re-entering the same queue re-queues it.
    fn set_state(&mut self, i: u32, st: St) {
        if let Some(q) = self.slots[i as usize].st.queue() {
            self.unlink(q, i);
        }
        self.slots[i as usize].st = st;
        if let Some(q) = st.queue() {
            self.push(q, i);
        }
    }

    fn push(&mut self, q: usize, i: u32) {
        let newest = self.queues[q].newest;
        self.slots[i as usize].prev = newest;
        self.slots[i as usize].next = NIL;
        if newest == NIL {
            self.queues[q].oldest = i;
        } else {
            self.slots[newest as usize].next = i;
        }
        self.queues[q].newest = i;
        self.queues[q].len += 1;
    }

    fn unlink(&mut self, q: usize, i: u32) {
        let Slot { prev, next, .. } = self.slots[i as usize];
        if prev == NIL {
            self.queues[q].oldest = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.queues[q].newest = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
        self.queues[q].len -= 1;
        self.slots[i as usize].prev = NIL;
        self.slots[i as usize].next = NIL;
    }

    /// NAK_RB_IVL: uniform in 1..=NAK_BO_IVL ns (OpenPGM `nak_rb_ivl`: 1 µs..NAK_BO_IVL).
    fn rb_ivl(&mut self) -> u64 {
        1 + self.next_rand() % self.cfg.nak_bo_ivl_ns
    }

    /// xorshift64*.
    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}
