//! The PGM receive window: which sequence numbers (sqns) a receiver has, which it is still
//! trying to get back, and in what order the application gets them: RFC 3208's receiver
//! procedures (data recovery by NAK, NAK suppression) with its receiver timers NAK_BO_IVL,
//! NAK_RPT_IVL, NAK_RDATA_IVL and retry limits NAK_NCF_RETRIES, NAK_DATA_RETRIES, behaving as
//! OpenPGM's rxw.c and receiver.c do where the two differ in practice.
//!
//! Pure logic on the hot receive path: no sockets, no clock (every call takes the monotonic
//! time in ns), no locks, and no allocation after [`RxWindow::new`], which preallocates
//! `max_sqns` payload slots of `max_tsdu` bytes in one buffer plus one small state record per
//! slot. Randomness (the NAK back-off) comes from an internal xorshift seeded by the caller, so
//! a run is reproducible.
//!
//! # The NAK state machine (per missing sqn)
//!
//! ```text
//! gap noticed (data or SPM lead beyond ours) ─▶ BACK_OFF, timer: random 1..=NAK_BO_IVL
//! BACK_OFF  ── timer ─▶ NAK handed out by poll() ─▶ WAIT_NCF, timer NAK_RPT_IVL
//! BACK_OFF  ── NCF ─────────────────────────────▶ WAIT_DATA, timer NAK_RDATA_IVL (suppressed)
//! BACK_OFF  ── another receiver's NAK ──────────▶ WAIT_NCF, timer NAK_RPT_IVL (suppressed)
//! WAIT_NCF  ── NCF ─────────────────────────────▶ WAIT_DATA
//! WAIT_NCF  ── timer ─▶ BACK_OFF again, or LOST once NAK_NCF_RETRIES are used up
//! WAIT_DATA ── timer ─▶ BACK_OFF again, or LOST once NAK_DATA_RETRIES are used up
//! any of these ── RDATA or late ODATA ─▶ HAVE_DATA (repaired)
//! any of these ── source trail (SPM or data) passes it, or the window overflows ─▶ LOST
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

use super::{sqn_le, sqn_lt};

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

/// How far beyond the highest sqn received as data a control packet (an SPM's lead, an NCF,
/// RDATA) may make the window reach. Control packets cannot be authenticated and may come from
/// a second socket of the source (OpenPGM sends SPMs, NCFs and RDATA from its router-alert
/// socket), so nothing but the source's own data is trusted to say how far the stream has
/// gone: an SPM naming a lead 40,000 ahead opens at most this many gaps (NAKs), and more open
/// as data (ODATA or the repairs of those gaps) arrives. Small enough that a forged lead
/// costs a few NAK packets; large enough that the tail of a stream lost in one burst is
/// recovered in a few round trips.
pub const ANNOUNCE_AHEAD: u32 = 128;

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
        if !(self.max_sqns as usize).checked_mul(self.max_tsdu).is_some_and(|b| b <= isize::MAX as usize) {
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
    /// Missing sqns given up early so that held data behind them could be handed on instead
    /// of dropped ([`RxWindow::give_way`]); also counted in `unrecoverable` once popped.
    pub given_way: u64,
    /// Control packets (an SPM's trail or lead, an NCF, RDATA, another receiver's NAK) that
    /// named sqns beyond what the source's data has shown ([`ANNOUNCE_AHEAD`]): the part
    /// beyond was ignored, so no such packet can discard or give up data.
    pub beyond_data: u64,
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
    /// Already held, or already behind the delivery edge (delivered, or given up as lost).
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
    /// In WAIT_NCF because another receiver's NAK was heard, not ours: its expiry is no
    /// retry of ours (a peer's NAK, which anyone can forge, never uses up our retries).
    peer: bool,
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
    peer: false,
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
    /// The highest sqn received as data: what the source has proven it sent.
    seen_lead: u32,
    /// The highest lead SPMs announced, at most [`ANNOUNCE_AHEAD`] beyond `seen_lead` when
    /// announced; gaps are opened up to it as room allows.
    announced: u32,
    lost_first: u32,
    lost_count: u64,
    /// Sqns handed to the application since the window began (to tell duplicates from
    /// packets older than the window).
    popped: u64,
    rng: u64,
    stats: RxStats,
}

impl std::fmt::Debug for RxWindow {
    /// Its size and place, not its slots (a window holds up to hundreds of MiB).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxWindow").field("sqns", &self.n).field("trail", &self.trail).finish_non_exhaustive()
    }
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
            seen_lead: u32::MAX,
            announced: u32::MAX,
            lost_first: 0,
            lost_count: 0,
            popped: 0,
            // xorshift must not start at 0; mix the seed so nearby seeds differ at once.
            rng: (seed ^ 0x9E37_79B9_7F4A_7C15) | 1,
            stats: RxStats::default(),
        }
    }

    /// Fault every slot's page in now, so data landing in the window meets no page fault: for
    /// a window made before its receiver is said to listen. (Not in [`new`](Self::new): a
    /// window made for a further session is made on the capture thread, where faulting in
    /// tens of MiB at once, for a session anyone can start with one datagram, would stall
    /// the capture; its pages come lazily, as before.)
    pub fn prefault(&mut self) {
        crate::sys::prefault(&mut self.buf);
    }

    /// Seed the NAK back-off anew: a window made ahead of its session (so that the session's
    /// first datagrams meet memory already faulted in) takes the session's own seed.
    pub fn reseed(&mut self, seed: u64) {
        // xorshift must not start at 0; mix the seed so nearby seeds differ at once.
        self.rng = (seed ^ 0x9E37_79B9_7F4A_7C15) | 1;
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
            if repair {
                // Only original data starts a window: a repair names no stream position a
                // receiver can trust before it has seen the source's own data.
                self.stats.out_of_window += 1;
                return DataVerdict::OutOfWindow;
            }
            // OpenPGM _pgm_rxw_define(window, sqn - 1): the window starts at this packet and
            // the source trail it carries is not used for the first packet.
            self.define(sqn);
        } else if repair {
            // A repair reaches at most ANNOUNCE_AHEAD beyond the data seen, and never needs
            // room made by pushing anything out of the window.
            if !self.within_reach(sqn) {
                self.stats.beyond_data += 1;
                self.stats.out_of_window += 1;
                return DataVerdict::OutOfWindow;
            }
            let t = self.trail_bound(trail);
            self.update_trail(t);
        } else {
            self.update_trail(trail);
        }
        let ahead = sqn.wrapping_sub(self.trail);
        if ahead >= HALF {
            return self.behind(sqn);
        }
        if sqn_lt(self.seen_lead, sqn) {
            self.seen_lead = sqn;
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
                    self.open_announced(now_ns);
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
        self.open_announced(now_ns);
        DataVerdict::New
    }

    /// An SPM: lead beyond what we have opens gaps (sqns after the last received up to lead
    /// enter back-off); trail moving past sqns not yet received makes them unrecoverable.
    ///
    /// An SPM is a claim, not data, so it is bounded by what the source's data has shown:
    /// its trail counts at most up to the highest sqn received + 1 (sqns the source has not
    /// been seen to send are never given up on its word), and its lead opens gaps at most
    /// [`ANNOUNCE_AHEAD`] beyond that sqn and only into free room (it never pushes held or
    /// missing sqns out of the window); the rest of the lead is remembered and opened as data
    /// arrives. Before any data an SPM defines nothing (OpenPGM defines the window at the
    /// SPM's lead + 1, which lets a forged lead make every later packet "old"): the window
    /// begins at the first ODATA. Returns true when the SPM claimed more than that (counted in
    /// `beyond_data`).
    pub fn on_spm(&mut self, trail: u32, lead: u32, now_ns: u64) -> bool {
        if !self.defined {
            return false;
        }
        let t = self.trail_bound(trail);
        let mut beyond = t != trail;
        self.update_trail(t);
        let cap = self.seen_lead.wrapping_add(ANNOUNCE_AHEAD);
        let l = if sqn_lt(cap, lead) && lead.wrapping_sub(cap) < HALF {
            beyond = true;
            cap
        } else {
            lead
        };
        if sqn_lt(self.announced, l) && l.wrapping_sub(self.trail) < HALF {
            self.announced = l;
        }
        self.open_announced(now_ns);
        if beyond {
            self.stats.beyond_data += 1;
        }
        beyond
    }

    /// The session's source announced, before its first ODATA `first_data` arrived, that its
    /// data starts at `start` (an SPM's lead + 1, as OpenPGM's opening SPMs say): the window
    /// begins there, so ODATA lost before the first one that arrived is NAKed. Only when the
    /// data confirms it: `start` at or before `first_data` and at most [`ANNOUNCE_AHEAD`]
    /// before it (else the window begins at the first ODATA as usual). Returns whether it did.
    pub fn start_at(&mut self, start: u32, first_data: u32) -> bool {
        let before = first_data.wrapping_sub(start);
        if self.defined || before > ANNOUNCE_AHEAD {
            return false;
        }
        self.define(start);
        true
    }

    /// An NCF for these sqns: each in BACK_OFF or WAIT_NCF goes to WAIT_DATA (timer
    /// NAK_RDATA_IVL); one already in WAIT_DATA has its timer restarted, as OpenPGM's
    /// `_pgm_rxw_recovery_update` does. An NCF beyond the lead extends the window as
    /// OpenPGM's `pgm_rxw_confirm` does (the sqns skipped enter back-off, the NCF'd one waits
    /// for its data), but only into free room and at most [`ANNOUNCE_AHEAD`] beyond the data
    /// seen. Ignored before the window is defined.
    pub fn on_ncf(&mut self, sqns: &[u32], now_ns: u64) {
        self.stats.ncfs += sqns.len() as u64;
        if !self.defined {
            return;
        }
        let expiry = now_ns.saturating_add(self.cfg.nak_rdata_ivl_ns);
        for &sqn in sqns {
            let Some(i) = self.locate_or_extend(sqn, now_ns) else { continue };
            let slot = &mut self.slots[i as usize];
            slot.peer = false;
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
    /// peer's NAK does not prove the source heard it. A peer's NAK can come from any address,
    /// so it never extends the window, and the wait it causes is not one of our retries: a
    /// sqn whose wait a peer's NAK began goes back to back-off on expiry with no retry used,
    /// and the next wait is ours (a peer can delay our NAK by one NAK_RPT_IVL at a time, never
    /// make us give the sqn up without asking).
    pub fn on_foreign_nak(&mut self, sqns: &[u32], now_ns: u64) {
        if !self.defined {
            return;
        }
        let expiry = now_ns.saturating_add(self.cfg.nak_rpt_ivl_ns);
        for &sqn in sqns {
            let ahead = sqn.wrapping_sub(self.trail);
            if ahead >= self.len() {
                if ahead < HALF {
                    self.stats.beyond_data += 1;
                }
                continue;
            }
            let i = self.idx(sqn);
            let slot = &mut self.slots[i as usize];
            if slot.st == St::BackOff && !slot.peer {
                self.stats.suppressed += 1;
                slot.expiry_ns = expiry;
                slot.peer = true;
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
            self.slots[i as usize].peer = false;
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
            if !slot.peer {
                slot.ncf_retries = slot.ncf_retries.saturating_add(1);
            }
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

    /// True when admitting `sqn` would push a held (received, not yet popped) packet out of
    /// the full window. The caller then pops what it can and, if that is not enough, gives up
    /// the missing sqns in front of the held ones ([`RxWindow::give_way`]): a backlog larger
    /// than the window behind one gap (its repair queued in the socket behind the backlog)
    /// then costs the missing sqns only, never data that arrived.
    pub fn must_give_way(&self, sqn: u32) -> bool {
        if self.len() == 0 || !sqn_lt(self.lead, sqn) {
            return false;
        }
        let need = u64::from(sqn.wrapping_sub(self.trail)) + 1;
        need > u64::from(self.n) && self.held_in_the_way(need - u64::from(self.n))
    }

    /// Whether any of the `k` oldest sqns of the window is held data.
    fn held_in_the_way(&self, k: u64) -> bool {
        let k = k.min(u64::from(self.len())) as u32;
        (0..k).any(|j| self.slots[self.idx(self.trail.wrapping_add(j)) as usize].st == St::Have)
    }

    /// Gives up the missing sqns at the trail, up to the first held one (they become lost,
    /// counted unrecoverable when popped); returns how many.
    pub fn give_way(&mut self) -> u32 {
        let mut given = 0;
        let mut sqn = self.trail;
        while sqn_le(sqn, self.lead) {
            let i = self.idx(sqn);
            match self.slots[i as usize].st {
                St::BackOff | St::WaitNcf | St::WaitData => {
                    self.set_state(i, St::Lost);
                    given += 1;
                }
                St::Lost => {}
                St::Have | St::Free => break,
            }
            sqn = sqn.wrapping_add(1);
        }
        self.stats.given_way += u64::from(given);
        given
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
        self.seen_lead = first.wrapping_sub(1);
        self.announced = first.wrapping_sub(1);
        self.trail_idx = 0;
    }

    /// A control packet's trail, bounded by the data seen: the source cannot have moved its
    /// trail past a sqn it has not sent, so a claim beyond the highest sqn received + 1 counts
    /// only up to there.
    fn trail_bound(&self, trail: u32) -> u32 {
        let bound = self.seen_lead.wrapping_add(1);
        if sqn_lt(bound, trail) && trail.wrapping_sub(bound) < HALF {
            bound
        } else {
            trail
        }
    }

    /// `sqn` is in the window, or beyond it by no more than free room and [`ANNOUNCE_AHEAD`]
    /// past the data seen: where a control packet may reach.
    fn within_reach(&self, sqn: u32) -> bool {
        let ahead = sqn.wrapping_sub(self.trail);
        if ahead >= HALF {
            return true; // behind the trail: duplicate or out of window, nothing moves
        }
        if ahead < self.len() {
            return true;
        }
        ahead < self.n && sqn_le(sqn, self.seen_lead.wrapping_add(ANNOUNCE_AHEAD))
    }

    /// Opens gaps up to the lead SPMs announced, as far as free room allows (never pushing
    /// anything out) and no more than [`ANNOUNCE_AHEAD`] beyond the data seen.
    fn open_announced(&mut self, now_ns: u64) {
        if !sqn_lt(self.lead, self.announced) {
            return;
        }
        let room_end = self.trail.wrapping_add(self.n - 1);
        let reach = self.seen_lead.wrapping_add(ANNOUNCE_AHEAD);
        let mut to = self.announced;
        if sqn_lt(room_end, to) {
            to = room_end;
        }
        if sqn_lt(reach, to) {
            to = reach;
        }
        if sqn_lt(self.lead, to) && to.wrapping_sub(self.trail) < HALF {
            self.open_gaps(to, now_ns);
        }
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

    /// The slot of `sqn` if it is in the window; if it is beyond the lead but within reach of
    /// a control packet (free room, [`ANNOUNCE_AHEAD`] past the data seen), extends the window
    /// to it, gaps behind it in back-off, and returns its slot in state Free for the caller to
    /// set. None for sqns behind the trail or out of reach.
    fn locate_or_extend(&mut self, sqn: u32, now_ns: u64) -> Option<u32> {
        let ahead = sqn.wrapping_sub(self.trail);
        if ahead >= HALF {
            return None;
        }
        if ahead < self.len() {
            return Some(self.idx(sqn));
        }
        if !self.within_reach(sqn) {
            self.stats.beyond_data += 1;
            return None;
        }
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
        if k == 1 {
            // the per-packet case: no division
            self.trail_idx += 1;
            if self.trail_idx == self.n {
                self.trail_idx = 0;
            }
        } else {
            self.trail_idx = ((u64::from(self.trail_idx) + u64::from(k)) % u64::from(self.n)) as u32;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const BO: u64 = 5 * MS;
    const RPT: u64 = 50 * MS;
    const RDATA: u64 = 40 * MS;

    fn cfg(max_sqns: u32) -> RxConfig {
        RxConfig {
            max_sqns,
            max_tsdu: 64,
            nak_bo_ivl_ns: BO,
            nak_rpt_ivl_ns: RPT,
            nak_rdata_ivl_ns: RDATA,
            nak_ncf_retries: 3,
            nak_data_retries: 2,
        }
    }

    /// Payload that names its sqn, with a sqn-dependent length (0..=11 bytes).
    fn pl(sqn: u32) -> Vec<u8> {
        let mut v = sqn.to_le_bytes().to_vec();
        v.resize(4 + (sqn % 8) as usize, 0xA5);
        v.truncate((sqn % 12) as usize);
        v
    }

    #[derive(Debug, PartialEq, Eq, Clone, Copy)]
    enum Out {
        D(u32, bool),
        L(u32, u32),
    }
    use Out::{D, L};

    /// Pops everything poppable, checking each payload.
    fn drain(w: &mut RxWindow) -> Vec<Out> {
        let mut v = Vec::new();
        while let Some(d) = w.pop() {
            match d {
                Delivery::Data { sqn, payload, repaired } => {
                    assert_eq!(payload, &pl(sqn)[..], "payload of {sqn}");
                    v.push(D(sqn, repaired));
                }
                Delivery::Lost { first, count } => v.push(L(first, count)),
            }
        }
        v
    }

    fn data(w: &mut RxWindow, sqn: u32, now: u64) -> DataVerdict {
        w.on_data(sqn, 0, &pl(sqn), false, now)
    }

    fn rdata(w: &mut RxWindow, sqn: u32, now: u64) -> DataVerdict {
        w.on_data(sqn, 0, &pl(sqn), true, now)
    }

    fn poll(w: &mut RxWindow, now: u64) -> Vec<u32> {
        let mut out = [0u32; 64];
        let k = w.poll(now, &mut out);
        out[..k].to_vec()
    }

    #[test]
    fn in_order_data_is_delivered_in_order_with_no_naks() {
        let mut w = RxWindow::new(cfg(16), 1);
        for s in 100..110 {
            assert_eq!(data(&mut w, s, u64::from(s)), DataVerdict::New);
            if s % 3 == 0 {
                // pop in bursts and one at a time
                assert!(!drain(&mut w).is_empty());
            }
        }
        assert_eq!(drain(&mut w), vec![D(109, false)]);
        let mut all: Vec<u32> = Vec::new();
        let mut w2 = RxWindow::new(cfg(16), 1);
        for s in 100..110 {
            data(&mut w2, s, 0);
        }
        for o in drain(&mut w2) {
            match o {
                D(s, false) => all.push(s),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(all, (100..110).collect::<Vec<_>>());
        assert_eq!(w.pending(), 0);
        assert_eq!(w.next_deadline(), None);
        assert!(poll(&mut w, 10 * RPT).is_empty());
        let st = w2.stats();
        assert_eq!((st.received, st.odata, st.rdata, st.repaired, st.naks_sent), (10, 10, 0, 0, 0));
        assert_eq!(w.stats().received, 10);
    }

    #[test]
    fn gap_naks_after_back_off_then_ncf_and_rdata_repair_in_order() {
        let mut w = RxWindow::new(cfg(64), 7);
        let t0 = 1000 * MS;
        data(&mut w, 0, t0);
        data(&mut w, 1, t0);
        let noticed = t0 + 10 * MS;
        assert_eq!(data(&mut w, 4, noticed), DataVerdict::New);
        assert_eq!(w.pending(), 2);
        assert_eq!(drain(&mut w), vec![D(0, false), D(1, false)]);
        let due = w.next_deadline().expect("a NAK is pending");
        assert!(due > noticed && due <= noticed + BO, "back-off {} ns", due - noticed);
        assert!(poll(&mut w, due - 1).is_empty(), "no NAK before the back-off");
        assert_eq!(poll(&mut w, due), vec![2, 3]);
        assert_eq!(w.stats().naks_sent, 2);
        assert_eq!(w.pending(), 2);
        assert_eq!(w.next_deadline(), Some(due + RPT));
        // NCF: WAIT_NCF -> WAIT_DATA, timer NAK_RDATA_IVL
        w.on_ncf(&[2, 3], due + MS);
        assert_eq!(w.next_deadline(), Some(due + MS + RDATA));
        assert_eq!(w.stats().ncfs, 2);
        assert_eq!(w.stats().suppressed, 0);
        let t3 = due + 2 * MS;
        assert_eq!(rdata(&mut w, 3, t3), DataVerdict::Repaired { waited_ns: t3 - noticed });
        assert_eq!(drain(&mut w), vec![], "2 still missing blocks delivery");
        let t2 = due + 3 * MS;
        assert_eq!(rdata(&mut w, 2, t2), DataVerdict::Repaired { waited_ns: t2 - noticed });
        assert_eq!(drain(&mut w), vec![D(2, true), D(3, true), D(4, false)]);
        assert_eq!(w.pending(), 0);
        assert_eq!(w.next_deadline(), None);
        let st = *w.stats();
        assert_eq!((st.received, st.repaired, st.rdata, st.odata, st.unrecoverable), (5, 2, 2, 3, 0));
    }

    #[test]
    fn nak_is_repeated_after_nak_rpt_ivl_without_ncf() {
        let mut w = RxWindow::new(cfg(64), 3);
        data(&mut w, 10, 0);
        data(&mut w, 12, MS);
        let due = w.next_deadline().unwrap();
        assert_eq!(poll(&mut w, due), vec![11]);
        assert!(poll(&mut w, due + RPT - 1).is_empty());
        // NAK_RPT_IVL expires: back to BACK_OFF with a fresh back-off, not sent at once
        assert!(poll(&mut w, due + RPT).is_empty());
        let again = w.next_deadline().unwrap();
        assert!(again > due + RPT && again <= due + RPT + BO);
        assert_eq!(poll(&mut w, again), vec![11]);
        assert_eq!(w.stats().naks_sent, 2);
        assert_eq!(rdata(&mut w, 11, again + MS), DataVerdict::Repaired { waited_ns: again });
        assert_eq!(drain(&mut w), vec![D(10, false), D(11, true), D(12, false)]);
    }

    /// Runs poll at each deadline until nothing is pending; returns every NAKed sqn.
    fn run_timers(w: &mut RxWindow, ncf_each_nak: bool) -> Vec<u32> {
        let mut naks = Vec::new();
        let mut guard = 0;
        while let Some(t) = w.next_deadline() {
            let sent = poll(w, t);
            if ncf_each_nak && !sent.is_empty() {
                w.on_ncf(&sent, t);
            }
            naks.extend(sent);
            guard += 1;
            assert!(guard < 1000, "timers never settle");
        }
        naks
    }

    #[test]
    fn ncf_retries_exhausted_gives_lost_with_exact_counts() {
        let mut w = RxWindow::new(cfg(64), 11);
        data(&mut w, 0, 0);
        data(&mut w, 3, 0);
        let naks = run_timers(&mut w, false);
        // NAK_NCF_RETRIES = 3: three NAKs of each (OpenPGM counts the first one too)
        assert_eq!(naks, vec![1, 2, 1, 2, 1, 2]);
        assert_eq!(w.pending(), 0);
        assert_eq!(drain(&mut w), vec![D(0, false), L(1, 2), D(3, false)]);
        let st = *w.stats();
        assert_eq!((st.naks_sent, st.unrecoverable, st.received), (6, 2, 2));
    }

    #[test]
    fn data_retries_exhausted_gives_lost() {
        let mut w = RxWindow::new(cfg(64), 12);
        data(&mut w, 0, 0);
        data(&mut w, 2, 0);
        // every NAK is confirmed but RDATA never comes: NAK_DATA_RETRIES = 2
        let naks = run_timers(&mut w, true);
        assert_eq!(naks, vec![1, 1]);
        assert_eq!(drain(&mut w), vec![D(0, false), L(1, 1), D(2, false)]);
        assert_eq!(w.stats().unrecoverable, 1);
        assert_eq!(w.stats().ncfs, 2);
    }

    #[test]
    fn foreign_nak_suppresses_ours_and_we_retry_if_no_ncf_follows() {
        let mut w = RxWindow::new(cfg(64), 5);
        data(&mut w, 0, 0);
        data(&mut w, 3, 0); // 1, 2 in back-off
        w.on_foreign_nak(&[0], 0); // held: nothing to suppress
        assert_eq!(w.stats().suppressed, 0);
        let mut w = RxWindow::new(cfg(64), 5);
        data(&mut w, 0, 0);
        data(&mut w, 3, 0);
        w.on_foreign_nak(&[2], 0);
        assert_eq!(w.stats().suppressed, 1);
        let due = w.next_deadline().unwrap();
        assert_eq!(poll(&mut w, due), vec![1], "2 was NAKed by someone else");
        // no NCF for 2 within NAK_RPT_IVL of the foreign NAK: back off and NAK it ourselves
        assert!(poll(&mut w, RPT).is_empty());
        let again = w.next_deadline().unwrap();
        assert!(again > RPT && again <= RPT + BO);
        assert_eq!(poll(&mut w, again), vec![2]);
        // an NCF in BACK_OFF also suppresses
        data(&mut w, 5, again); // 4 in back-off
        w.on_ncf(&[4], again);
        assert_eq!(w.stats().suppressed, 2);
        assert_eq!(w.pending(), 3);
    }

    #[test]
    fn an_ncf_beyond_the_lead_extends_the_window_a_peers_nak_never_does() {
        let mut w = RxWindow::new(cfg(64), 5);
        data(&mut w, 0, 0);
        w.on_ncf(&[3], MS);
        assert_eq!(w.pending(), 3);
        assert_eq!(w.edges(), Some((0, 3)));
        assert_eq!(w.stats().suppressed, 1);
        let due = w.next_deadline().unwrap();
        assert!(due <= MS + BO);
        assert_eq!(poll(&mut w, due), vec![1, 2], "3 waits for data, not NAKed");
        // A NAK from anyone on the group: it may suppress ours, never move the window.
        w.on_foreign_nak(&[5], due);
        assert_eq!(w.pending(), 3);
        assert_eq!(w.edges(), Some((0, 3)));
        assert_eq!((w.stats().suppressed, w.stats().beyond_data), (1, 1));
        for s in 1..=3 {
            rdata(&mut w, s, due + BO);
        }
        assert_eq!(drain(&mut w), vec![D(0, false), D(1, true), D(2, true), D(3, true)]);
        // An NCF further ahead than ANNOUNCE_AHEAD past the data seen reaches nothing.
        w.on_ncf(&[3 + ANNOUNCE_AHEAD + 1], 2 * MS);
        assert_eq!((w.pending(), w.edges()), (0, Some((4, 3))));
        assert_eq!(w.stats().beyond_data, 2);
    }

    #[test]
    fn spm_lead_opens_trailing_gaps() {
        let mut w = RxWindow::new(cfg(64), 9);
        for s in 0..5 {
            data(&mut w, s, 0);
        }
        w.on_spm(0, 4, MS); // nothing new
        assert_eq!(w.pending(), 0);
        w.on_spm(0, 9, MS);
        assert_eq!(w.pending(), 5);
        let due = w.next_deadline().unwrap();
        assert!(due > MS && due <= MS + BO);
        assert_eq!(poll(&mut w, due), vec![5, 6, 7, 8, 9]);
        w.on_spm(0, 3, due); // an older lead changes nothing
        assert_eq!(w.pending(), 5);
        assert_eq!(drain(&mut w).len(), 5);
    }

    #[test]
    fn source_trail_passing_missing_sqns_makes_them_unrecoverable() {
        let mut w = RxWindow::new(cfg(64), 2);
        for s in [0, 1, 5] {
            data(&mut w, s, 0);
        }
        w.on_spm(4, 5, MS); // 2, 3 gone from the source; 4 still there
        assert_eq!(w.pending(), 1);
        assert_eq!(drain(&mut w), vec![D(0, false), D(1, false), L(2, 2)]);
        // a data packet's trail does the same
        assert_eq!(w.on_data(6, 5, &pl(6), false, 2 * MS), DataVerdict::New);
        assert_eq!(w.pending(), 0);
        assert_eq!(w.next_deadline(), None);
        assert_eq!(drain(&mut w), vec![L(4, 1), D(5, false), D(6, false)]);
        // a trail beyond the data seen counts only up to it: 7..=12 were never seen sent,
        // so they are NAKed, not given up on the SPM's word
        assert!(w.on_spm(10, 12, 3 * MS));
        assert_eq!(w.pending(), 6);
        assert_eq!(drain(&mut w), vec![]);
        let st = *w.stats();
        assert_eq!((st.unrecoverable, st.received, st.beyond_data), (3, 4, 1));

        // data for a sqn declared lost but not yet popped is still taken (OpenPGM does)
        let mut w = RxWindow::new(cfg(64), 2);
        data(&mut w, 0, 0);
        data(&mut w, 2, 0);
        w.on_spm(2, 2, MS);
        assert_eq!(w.pending(), 0);
        assert_eq!(w.on_data(1, 0, &pl(1), true, 3 * MS), DataVerdict::Repaired { waited_ns: 3 * MS });
        assert_eq!(drain(&mut w), vec![D(0, false), D(1, true), D(2, false)]);
    }

    #[test]
    fn duplicates_and_out_of_window() {
        let mut w = RxWindow::new(cfg(64), 4);
        assert_eq!(data(&mut w, 5, 0), DataVerdict::New);
        assert_eq!(data(&mut w, 5, 0), DataVerdict::Duplicate);
        assert_eq!(rdata(&mut w, 5, 0), DataVerdict::Duplicate);
        assert_eq!(drain(&mut w), vec![D(5, false)]);
        assert_eq!(data(&mut w, 5, 0), DataVerdict::Duplicate, "behind the delivered edge");
        assert_eq!(data(&mut w, 4, 0), DataVerdict::OutOfWindow, "before the window began");
        assert_eq!(data(&mut w, 6u32.wrapping_add(HALF), 0), DataVerdict::OutOfWindow);
        assert_eq!(w.on_data(7, 7u32.wrapping_add(HALF), &pl(7), false, 0), DataVerdict::OutOfWindow);
        assert_eq!(w.on_data(7, 0, &[0u8; 65], false, 0), DataVerdict::TooLong);
        assert_eq!(w.edges(), Some((6, 5)), "nothing changed");
        let st = *w.stats();
        assert_eq!((st.duplicates, st.out_of_window, st.too_long, st.odata, st.rdata), (3, 3, 1, 7, 1));
        assert_eq!(drain(&mut w), vec![]);

        // too long before anything else leaves the window undefined
        let mut w = RxWindow::new(cfg(64), 4);
        assert_eq!(w.on_data(9, 0, &[0u8; 100], false, 0), DataVerdict::TooLong);
        assert_eq!(w.edges(), None);
    }

    #[test]
    fn only_original_data_starts_the_window() {
        let mut w = RxWindow::new(cfg(64), 4);
        w.on_ncf(&[50], 0); // NCFs do not define the window
        assert_eq!(w.edges(), None);
        // Nor does an SPM (OpenPGM starts after its lead, so a forged lead made every later
        // packet "old"), nor a repair.
        assert!(!w.on_spm(0, 99, 0));
        assert_eq!(w.edges(), None);
        assert_eq!(rdata(&mut w, 7, 0), DataVerdict::OutOfWindow);
        assert_eq!(w.edges(), None);
        assert_eq!(data(&mut w, 3, 0), DataVerdict::New);
        assert_eq!(data(&mut w, 5, 0), DataVerdict::New);
        assert_eq!(w.pending(), 1);
        assert_eq!(drain(&mut w), vec![D(3, false)]);
    }

    #[test]
    fn an_opening_spm_starts_the_window_only_where_the_data_confirms_it() {
        // The source said its data starts at 10; 12 is the first ODATA to arrive: 10, 11 are
        // gaps to NAK.
        let mut w = RxWindow::new(cfg(64), 4);
        assert!(w.start_at(10, 12));
        assert_eq!(data(&mut w, 12, 0), DataVerdict::New);
        assert_eq!(w.pending(), 2);
        // A start after the first data, or far before it, is not believed.
        let mut w = RxWindow::new(cfg(64), 4);
        assert!(!w.start_at(13, 12));
        assert!(!w.start_at(12u32.wrapping_sub(ANNOUNCE_AHEAD + 1), 12));
        assert_eq!(data(&mut w, 12, 0), DataVerdict::New);
        assert_eq!((w.pending(), w.edges()), (0, Some((12, 12))));
    }

    #[test]
    fn a_forged_spm_far_ahead_discards_nothing_and_costs_few_naks() {
        // The issue's repro in the window: data flows in order, an SPM claims the source's
        // trail 30,000 and lead 40,000 ahead; the real data that follows is all delivered.
        let mut w = RxWindow::new(cfg(8192), 3);
        let mut out = Vec::new();
        for s in 0..100 {
            assert_eq!(data(&mut w, s, 0), DataVerdict::New);
        }
        out.extend(drain(&mut w));
        assert!(w.on_spm(30_099, 40_099, MS));
        assert_eq!(w.stats().beyond_data, 1);
        assert_eq!(w.pending(), ANNOUNCE_AHEAD, "gaps opened only ANNOUNCE_AHEAD past the data");
        // Twenty more forged SPMs change nothing further.
        for _ in 0..20 {
            w.on_spm(30_099, 40_099, MS);
        }
        assert_eq!(w.pending(), ANNOUNCE_AHEAD);
        let mut naks = 0;
        let mut now = MS;
        for s in 100..20_000u32 {
            now += 10_000;
            let v = data(&mut w, s, now);
            assert!(matches!(v, DataVerdict::New | DataVerdict::Repaired { .. }), "{s}: {v:?}");
            naks += poll(&mut w, now).len();
            out.extend(drain(&mut w));
            if s % 1000 == 0 {
                w.on_spm(30_099 + s, 40_099 + s, now);
            }
        }
        assert_eq!(out.len(), 20_000, "{:?}", &out[out.len() - 3..]);
        // The last SPM (at 19,000) reached 128 past its data; real data has filled all of it.
        assert_eq!(w.pending(), 0);
        assert!(out.iter().enumerate().all(|(i, o)| matches!(o, D(s, _) if *s == i as u32)), "all data, in order");
        let st = *w.stats();
        assert_eq!((st.unrecoverable, st.overrun, st.given_way, st.duplicates), (0, 0, 0, 0), "{st:?}");
        // What the forger can make us NAK: at most ANNOUNCE_AHEAD sqns beyond the data at any
        // time, each at most NAK_NCF_RETRIES times (here 3).
        assert!(naks as u32 <= 3 * ANNOUNCE_AHEAD * 21, "{naks} NAKs");
    }

    #[test]
    fn a_forged_trail_gives_up_nothing_the_source_was_not_seen_to_send() {
        let mut w = RxWindow::new(cfg(64), 3);
        data(&mut w, 0, 0);
        data(&mut w, 3, 0); // 1, 2 missing
        data(&mut w, 4, 0);
        w.on_spm(1_000, 1_001, MS);
        // 1, 2 were sent (3 and 4 came) and the source says it no longer has them: lost;
        // everything after 4 was never seen and is not given up.
        assert_eq!(drain(&mut w), vec![D(0, false), L(1, 2), D(3, false), D(4, false)]);
        assert_eq!(w.pending(), 59, "5..=63: the free room of the 64-sqn window when the SPM came");
        // A repair's trail is bounded the same way, and a repair far ahead is refused.
        assert_eq!(w.on_data(6, 6, &pl(6), true, MS), DataVerdict::Repaired { waited_ns: 0 });
        assert_eq!(w.pending(), 63, "5 was not given up by the repair's trail; 64..=68 opened into the room");
        assert_eq!(rdata(&mut w, 4 + ANNOUNCE_AHEAD + 1, MS), DataVerdict::OutOfWindow);
        assert_eq!(w.on_data(500, 0, &pl(500), true, MS), DataVerdict::OutOfWindow);
        let st = *w.stats();
        assert_eq!((st.unrecoverable, st.overrun, st.beyond_data), (2, 0, 3), "{st:?}");
    }

    #[test]
    fn peers_naks_never_use_up_our_retries() {
        // Someone repeats a NAK for our missing sqn just before each of our waits would end:
        // we still NAK it ourselves every other round, and give it up only after our own
        // NAK_NCF_RETRIES (3) NAKs went unanswered.
        let mut w = RxWindow::new(cfg(64), 5);
        data(&mut w, 0, 0);
        data(&mut w, 2, 0); // 1 in back-off
        let mut ours = 0;
        let mut now = 0;
        for _ in 0..40 {
            w.on_foreign_nak(&[1], now);
            let Some(t) = w.next_deadline() else { break };
            now = t;
            ours += poll(&mut w, now).len();
        }
        assert_eq!(ours, 3, "our own NAKs, all of them sent");
        assert_eq!(drain(&mut w), vec![D(0, false), L(1, 1), D(2, false)]);
    }

    #[test]
    fn sequence_numbers_wrap_at_u32_max() {
        let mut w = RxWindow::new(cfg(8), 6);
        let start = u32::MAX - 2;
        for s in [start, u32::MAX - 1, 0, 1] {
            // the source's trail is `start` throughout
            assert_eq!(w.on_data(s, start, &pl(s), false, 0), DataVerdict::New);
        }
        assert_eq!(w.pending(), 1);
        let due = w.next_deadline().unwrap();
        assert_eq!(poll(&mut w, due), vec![u32::MAX]);
        assert_eq!(drain(&mut w), vec![D(u32::MAX - 2, false), D(u32::MAX - 1, false)]);
        assert!(matches!(w.on_data(u32::MAX, start, &pl(u32::MAX), true, due), DataVerdict::Repaired { .. }));
        assert_eq!(drain(&mut w), vec![D(u32::MAX, true), D(0, false), D(1, false)]);
        assert_eq!(w.on_data(u32::MAX, start, &pl(u32::MAX), false, due), DataVerdict::Duplicate);
        // a lost run across the wrap
        let mut w = RxWindow::new(cfg(8), 6);
        w.on_data(u32::MAX - 1, u32::MAX - 1, &pl(u32::MAX - 1), false, 0);
        w.on_data(2, u32::MAX - 1, &pl(2), false, 0);
        assert_eq!(w.pending(), 3);
        w.abandon();
        assert_eq!(drain(&mut w), vec![D(u32::MAX - 1, false), L(u32::MAX, 3), D(2, false)]);
    }

    #[test]
    fn window_full_declares_the_oldest_missing_lost() {
        let mut w = RxWindow::new(cfg(8), 8);
        data(&mut w, 0, 0);
        assert_eq!(drain(&mut w).len(), 1);
        for s in 2..=8 {
            data(&mut w, s, 0); // 1 missing, window 1..=8 is full
        }
        assert_eq!(w.pending(), 1);
        assert_eq!(data(&mut w, 9, 0), DataVerdict::New);
        assert_eq!(w.pending(), 0, "1 left the window");
        let mut want = vec![L(1, 1)];
        want.extend((2..=9).map(|s| D(s, false)));
        assert_eq!(drain(&mut w), want);
        assert_eq!(w.stats().overrun, 0);

        // a jump far past the window: unpopped data is dropped (overrun, OpenPGM pulls the
        // trailing edge), the skipped sqns are lost in one run, the last max_sqns - 1 are NAKed
        let mut w = RxWindow::new(cfg(8), 8);
        data(&mut w, 0, 0);
        data(&mut w, 1, 0);
        assert_eq!(data(&mut w, 1000, 0), DataVerdict::New);
        assert_eq!(w.pending(), 7);
        assert_eq!(w.edges(), Some((993, 1000)));
        assert_eq!(drain(&mut w), vec![L(0, 993)]);
        let due = w.next_deadline().unwrap();
        assert_eq!(poll(&mut w, due), (993..1000).collect::<Vec<_>>());
        w.abandon();
        assert_eq!(drain(&mut w), vec![L(993, 7), D(1000, false)]);
        let st = *w.stats();
        assert_eq!((st.overrun, st.unrecoverable, st.received), (2, 1000, 1));
    }

    #[test]
    fn a_full_window_gives_up_missing_sqns_never_held_data() {
        // 0..7 in an 8-sqn window, 1 and 3 missing, nothing popped yet; 10 arrives (a backlog
        // read at once, the repairs queued behind it).
        let mut w = RxWindow::new(cfg(8), 0);
        for sqn in [0, 2, 4, 5, 6, 7] {
            data(&mut w, sqn, 0);
        }
        assert!(!w.must_give_way(7), "inside the window");
        assert!(w.must_give_way(10), "admitting 10 would push 0 and 2 out");
        // The receiver's loop: hand on what is in order, then give up what stands in front.
        let mut out = Vec::new();
        while w.must_give_way(10) {
            out.extend(drain(&mut w));
            if w.must_give_way(10) && w.give_way() == 0 {
                break;
            }
        }
        assert_eq!(out, vec![D(0, false), L(1, 1), D(2, false)], "only 1 was given up");
        assert_eq!(data(&mut w, 10, 0), DataVerdict::New);
        // 3, 8 and 9 are still being recovered; nothing held was dropped.
        assert_eq!(w.pending(), 3);
        let st = *w.stats();
        assert_eq!((st.overrun, st.given_way, st.unrecoverable), (0, 1, 1));
        rdata(&mut w, 3, 1);
        rdata(&mut w, 8, 1);
        rdata(&mut w, 9, 1);
        let mut want: Vec<Out> = vec![D(3, true), D(4, false), D(5, false), D(6, false), D(7, false)];
        want.extend([D(8, true), D(9, true), D(10, false)]);
        assert_eq!(drain(&mut w), want);
        // Nothing in the way: no give-way.
        assert!(!w.must_give_way(11));
    }

    #[test]
    fn next_deadline_is_the_earliest_timer() {
        let mut w = RxWindow::new(cfg(64), 10);
        assert_eq!(w.next_deadline(), None);
        data(&mut w, 0, 0);
        data(&mut w, 2, 0); // 1: back-off
        let bo1 = w.next_deadline().unwrap();
        assert_eq!(poll(&mut w, bo1), vec![1]);
        assert_eq!(w.next_deadline(), Some(bo1 + RPT));
        data(&mut w, 4, 10 * MS); // 3: back-off, earlier than 1's repeat
        let bo3 = w.next_deadline().unwrap();
        assert!(bo3 > 10 * MS && bo3 <= 10 * MS + BO);
        w.on_ncf(&[3], 20 * MS); // 3 now waits for data until 60 ms
        assert_eq!(w.next_deadline(), Some(bo1 + RPT), "1's repeat (at most 55 ms) comes first");
        w.on_ncf(&[1], 21 * MS);
        assert_eq!(w.next_deadline(), Some(20 * MS + RDATA));
        // a full out leaves the rest due: the deadline is then already past
        data(&mut w, 8, 20 * MS); // 5, 6, 7 in back-off
        let due = w.next_deadline().unwrap();
        let mut out = [0u32; 2];
        assert_eq!(w.poll(due, &mut out), 2);
        assert_eq!(out, [5, 6]);
        assert_eq!(w.next_deadline(), Some(due));
        assert_eq!(poll(&mut w, due), vec![7]);
        w.abandon();
        assert_eq!(w.next_deadline(), None);
        assert_eq!(w.pending(), 0);
    }

    #[test]
    fn abandon_turns_everything_missing_into_lost() {
        let mut w = RxWindow::new(cfg(64), 1);
        data(&mut w, 0, 0);
        data(&mut w, 3, 0);
        data(&mut w, 5, 0);
        let due = w.next_deadline().unwrap();
        poll(&mut w, due);
        w.on_ncf(&[2], due);
        assert_eq!(w.pending(), 3);
        w.abandon();
        assert_eq!(w.pending(), 0);
        assert_eq!(drain(&mut w), vec![D(0, false), L(1, 2), D(3, false), L(4, 1), D(5, false)]);
        let st = *w.stats();
        assert_eq!(st.received + st.unrecoverable, 6);
    }

    #[test]
    fn config_defaults_and_validation() {
        let d = RxConfig::default();
        assert_eq!((d.max_sqns, d.max_tsdu, d.nak_ncf_retries, d.nak_data_retries), (16384, 9000, 20, 20));
        assert_eq!((d.nak_bo_ivl_ns, d.nak_rpt_ivl_ns, d.nak_rdata_ivl_ns), (5 * MS, 50 * MS, 50 * MS));
        assert!(d.validate().is_ok());
        let bad = RxConfig { max_sqns: 0, ..d };
        assert!(bad.validate().unwrap_err().contains("use 1 to"));
        let bad = RxConfig { nak_bo_ivl_ns: 0, ..d };
        assert!(bad.validate().is_err());
        let w = RxWindow::new(RxConfig { max_sqns: 0, nak_bo_ivl_ns: 0, ..cfg(1) }, 0);
        assert_eq!((w.config().max_sqns, w.config().nak_bo_ivl_ns), (1, 1));
    }

    /// Deterministic xorshift for the simulation (not the window's).
    struct Sim(u64);
    impl Sim {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn chance(&mut self, permille: u64) -> bool {
            self.below(1000) < permille
        }
    }

    #[derive(Clone, Copy, Debug)]
    enum Pkt {
        Data { sqn: u32, trail: u32, repair: bool },
        Spm { trail: u32, lead: u32 },
        Ncf(u32),
        PeerNak(u32),
    }

    struct SimResult {
        out: Vec<Out>,
        stats: RxStats,
        new: u64,
        repaired: u64,
    }

    /// A source sending `count` sqns from `start` through a lossy, reordering, duplicating
    /// network to one receive window, answering its NAKs while the sqn is still in its
    /// transmit window of `keep` sqns; other receivers' NAKs are heard now and then.
    fn simulate(seed: u64, start: u32, count: u32, max_sqns: u32, keep: u32, loss: u64) -> SimResult {
        let mut rng = Sim(seed);
        let mut w =
            RxWindow::new(RxConfig { nak_ncf_retries: 20, nak_data_retries: 20, ..cfg(max_sqns) }, seed ^ 0x5555);
        let tick = 50_000u64; // 50 µs
        let mut net: Vec<(u64, u64, Pkt)> = Vec::new();
        let mut order = 0u64;
        let mut sent = 0u32;
        let mut res = SimResult { out: Vec::new(), stats: RxStats::default(), new: 0, repaired: 0 };
        let src_trail = |sent: u32| start.wrapping_add(sent.saturating_sub(keep));
        let mut send = |net: &mut Vec<(u64, u64, Pkt)>, rng: &mut Sim, now: u64, p: Pkt| {
            if rng.chance(loss) {
                return;
            }
            let copies = if rng.chance(20) { 2 } else { 1 };
            for _ in 0..copies {
                order += 1;
                net.push((now + 100_000 + rng.below(400_000), order, p));
            }
        };
        let mut now = 0u64;
        let mut naks = [0u32; 16];
        for step in 0..2_000_000u64 {
            now += tick;
            if sent < count {
                let sqn = start.wrapping_add(sent);
                sent += 1;
                send(&mut net, &mut rng, now, Pkt::Data { sqn, trail: src_trail(sent), repair: false });
            }
            if step % 20 == 0 {
                let lead = start.wrapping_add(sent).wrapping_sub(1);
                send(&mut net, &mut rng, now, Pkt::Spm { trail: src_trail(sent), lead });
            }
            if sent > 0 && rng.chance(5) {
                // another receiver NAKs something recent; the source repairs it for all
                let sqn = start.wrapping_add(sent - 1 - rng.below(u64::from(sent.min(32))) as u32);
                send(&mut net, &mut rng, now, Pkt::PeerNak(sqn));
                send(&mut net, &mut rng, now, Pkt::Ncf(sqn));
                send(&mut net, &mut rng, now, Pkt::Data { sqn, trail: src_trail(sent), repair: true });
            }
            net.sort_by_key(|&(t, o, _)| (t, o));
            let due = net.partition_point(|&(t, _, _)| t <= now);
            for (_, _, p) in net.drain(..due).collect::<Vec<_>>() {
                match p {
                    Pkt::Data { sqn, trail, repair } => {
                        let v = w.on_data(sqn, trail, &pl(sqn), repair, now);
                        match v {
                            DataVerdict::New => res.new += 1,
                            DataVerdict::Repaired { waited_ns } => {
                                assert!(waited_ns <= now);
                                res.repaired += 1;
                            }
                            _ => {}
                        }
                    }
                    Pkt::Spm { trail, lead } => {
                        w.on_spm(trail, lead, now);
                    }
                    Pkt::Ncf(sqn) => w.on_ncf(&[sqn], now),
                    Pkt::PeerNak(sqn) => w.on_foreign_nak(&[sqn], now),
                }
                res.out.extend(drain(&mut w));
            }
            if let Some(t) = w.next_deadline() {
                if t <= now {
                    loop {
                        let k = w.poll(now, &mut naks);
                        for &sqn in &naks[..k] {
                            // the NAK crosses the network; the source answers if it still can
                            if rng.chance(loss) {
                                continue;
                            }
                            let back = start.wrapping_add(sent).wrapping_sub(sqn);
                            if back >= 1 && back <= sent.min(keep) {
                                send(&mut net, &mut rng, now, Pkt::Ncf(sqn));
                                send(&mut net, &mut rng, now, Pkt::Data { sqn, trail: src_trail(sent), repair: true });
                            }
                        }
                        if k < naks.len() {
                            break;
                        }
                    }
                    res.out.extend(drain(&mut w));
                }
            }
            if sent == count && net.is_empty() && w.pending() == 0 && step % 20 == 1 {
                break;
            }
        }
        w.abandon();
        res.out.extend(drain(&mut w));
        assert_eq!(w.pending(), 0);
        assert_eq!(w.next_deadline(), None);
        res.stats = *w.stats();
        res
    }

    /// Every sqn from where the window began to the end comes out exactly once, in order.
    fn check_sim(r: &SimResult, start: u32, count: u32) -> u64 {
        let first = match r.out.first().expect("something delivered") {
            D(s, _) => *s,
            L(f, _) => *f,
        };
        assert!(first.wrapping_sub(start) < count, "window began inside the stream");
        let mut next = first;
        let (mut datas, mut lost, mut repaired) = (0u64, 0u64, 0u64);
        for o in &r.out {
            match *o {
                D(s, rep) => {
                    assert_eq!(s, next, "in order, no gaps, no repeats");
                    next = next.wrapping_add(1);
                    datas += 1;
                    repaired += u64::from(rep);
                }
                L(f, c) => {
                    assert_eq!(f, next, "lost run in order");
                    assert!(c > 0);
                    next = next.wrapping_add(c);
                    lost += u64::from(c);
                }
            }
        }
        assert_eq!(next, start.wrapping_add(count), "everything up to the source's last sqn");
        let span = u64::from(next.wrapping_sub(first));
        let st = r.stats;
        assert_eq!(st.received, datas);
        assert_eq!(st.unrecoverable, lost);
        assert_eq!(st.received + st.unrecoverable, span);
        assert_eq!(st.repaired, r.repaired);
        assert_eq!(st.odata + st.rdata, r.new + r.repaired + st.duplicates + st.out_of_window + st.too_long);
        // a repaired sqn comes out as repaired data unless the window dropped it (overrun)
        assert!(repaired <= st.repaired && st.repaired <= repaired + st.overrun);
        span
    }

    #[test]
    fn randomized_stream_comes_out_exactly_once_in_order() {
        // big window, the source keeps everything: all loss is repaired
        let (start, count) = (1_000, 20_000);
        let r = simulate(0xC0FFEE, start, count, 16384, u32::MAX, 100);
        let span = check_sim(&r, start, count);
        let st = r.stats;
        assert_eq!(st.unrecoverable, 0, "{st:?}");
        assert_eq!(st.overrun, 0);
        assert!(span > u64::from(count) - 10);
        // reordering makes many gaps that late ODATA fills before any NAK; real loss is NAKed
        assert!(st.repaired > 1000 && st.naks_sent > 1000 && st.rdata > 1000, "{st:?}");
        assert!(st.duplicates > 100 && st.suppressed > 0 && st.ncfs > 0, "{st:?}");

        // small window, short source memory, heavy loss, across the sequence wrap: some loss
        // is unrecoverable, yet every sqn still comes out exactly once
        let start = u32::MAX - 5_000;
        let r = simulate(0xBADC0DE, start, count, 256, 400, 200);
        check_sim(&r, start, count);
        let st = r.stats;
        assert!(st.unrecoverable > 0 && st.overrun > 0 && st.repaired > 1000, "{st:?}");
    }
}
