//! The receiver: a dedicated capture thread, batched receive, the ledger inline, and the
//! kernel's counters beside it.
//!
//! Receive backends implement [`Backend`]; the capture loop is generic over it, so a new
//! backend (AF_PACKET, io_uring, AF_XDP) is a new type, not a new branch in the loop. The loop
//! allocates nothing and makes no system call but the receive itself: stream state and ledgers
//! are preallocated, live counters are published with relaxed atomic stores, and the clock is
//! read through the vDSO.

use crate::control::{EndOfStream, END_LEN};
use crate::error::{bind_error, Error, Result};
use crate::kernel::{self, KernelCounters};
use crate::ledger::{GapRange, LedgerConfig, LedgerCounts, Segment, SenderEnd, StreamLedger};
use crate::sys;
use crate::units;
use crate::wire::{Format, Invalid, LengthLock, PacketInfo, UNSEQUENCED};
use serde::Serialize;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Receive buffer asked for by default: enough for tens of milliseconds at 10 Gb/s.
pub const DEFAULT_RCVBUF: usize = 32 << 20;

/// Default nap after a partial batch: turns one wake-up per datagram into one per batch at
/// moderate rates (on a VM, where a wake-up from idle costs tens of microseconds, this cuts
/// receive CPU per datagram about fourfold). Capped by [`nap_cap_ns`] for small buffers.
pub const DEFAULT_COALESCE: Duration = Duration::from_millis(1);

/// The fastest burst a nap must survive, bytes/s: 40 Gb/s, above what a veth pair or a
/// 25 GbE NIC delivers to one socket.
const BURST_BYTES_PER_SEC: f64 = 5e9;

/// Longest nap that keeps a burst at [`BURST_BYTES_PER_SEC`] within an eighth of the granted
/// receive buffer (the kernel's accounting counts per-datagram overhead too, hence the margin).
pub fn nap_cap_ns(rcvbuf_granted: usize) -> u64 {
    (rcvbuf_granted as f64 / 8.0 / BURST_BYTES_PER_SEC * 1e9) as u64
}

/// Everything a receive run needs.
#[derive(Clone, Debug)]
pub struct RecvConfig {
    /// Address to bind: `0.0.0.0:PORT`, a local address, or a multicast group.
    pub listen: SocketAddr,
    /// Socket receive buffer to ask for, bytes.
    pub rcvbuf: usize,
    /// Ask the kernel for UDP GRO (coalesced datagrams, split again here).
    pub gro: bool,
    /// CPU to pin the capture thread to.
    pub cpu: Option<usize>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop once this many datagrams have been received (the last batch is finished).
    pub count: Option<u64>,
    /// Stop when every stream of the first sender run has said it ended.
    pub once: bool,
    /// Datagrams per receive call.
    pub batch: usize,
    /// Most streams tracked (their ledgers are preallocated).
    pub max_streams: usize,
    /// Ledger settings (reorder window, resync threshold...).
    pub ledger: LedgerConfig,
    /// Interface address for multicast joins (default: the kernel's choice).
    pub multicast_iface: Option<Ipv4Addr>,
    /// Poll without blocking (burns the capture core, saves wake-up latency).
    pub busy_poll: bool,
    /// After a receive call that did not fill the batch, nap this long before the next one, so
    /// that datagrams are taken in batches instead of one wake-up each (user-space interrupt
    /// moderation). The socket buffer holds what arrives meanwhile; zero disables.
    pub coalesce: Duration,
    /// How many gap ranges each stream shows in the human summary.
    pub show_gaps: usize,
}

impl RecvConfig {
    /// Defaults for a listen address.
    pub fn new(listen: SocketAddr) -> Self {
        RecvConfig {
            listen,
            rcvbuf: DEFAULT_RCVBUF,
            gro: false,
            cpu: None,
            duration: None,
            count: None,
            once: false,
            batch: 64,
            max_streams: 64,
            ledger: LedgerConfig::default(),
            multicast_iface: None,
            busy_poll: false,
            coalesce: DEFAULT_COALESCE,
            show_gaps: 8,
        }
    }
}

/// Largest reorder window: 16 Mi sequence numbers (a 2 MiB bitmap per stream), several seconds
/// of reordering even at millions of datagrams per second.
pub const MAX_WINDOW: u64 = 1 << 24;

/// Most streams one receiver tracks (each has a preallocated ledger of about 100 KiB, most of
/// it room for gap ranges; 8192 of them stay under [`LEDGER_BUDGET`] with the default window).
pub const MAX_TRACKED_STREAMS: usize = 8192;

/// Most memory the ledgers of one receiver may take (streams x per-stream ledger).
pub const LEDGER_BUDGET: u64 = 1 << 30;

/// Most datagrams per receive call (the buffers for one call are allocated up front).
pub const MAX_BATCH: usize = 1024;

impl RecvConfig {
    /// Refuse a configuration whose preallocated buffers no run could use, before anything is
    /// allocated: the library's own guard, so that every front end (the CLI's parsers give the
    /// same limits earlier, with the option's name) is held to it.
    pub fn check_limits(&self) -> Result<()> {
        if self.max_streams == 0 || self.batch == 0 {
            return Err(Error::Usage("--max-streams and --batch must be at least 1".into()));
        }
        if self.batch > MAX_BATCH {
            return Err(Error::Usage(format!("--batch {} is more than {MAX_BATCH} datagrams a call", self.batch)));
        }
        if self.max_streams > MAX_TRACKED_STREAMS {
            return Err(Error::Usage(format!(
                "--max-streams {} is more than the {MAX_TRACKED_STREAMS} streams one receiver tracks",
                self.max_streams
            )));
        }
        if self.ledger.window == 0 || self.ledger.window > MAX_WINDOW {
            return Err(Error::Usage(format!(
                "--window {} is out of range: give 1..{MAX_WINDOW} (one bit per number per stream, allocated up front)",
                self.ledger.window
            )));
        }
        check_ledger_budget(self.max_streams, self.ledger.window)
    }
}

/// Refuse a streams x window whose ledgers together would take more than [`LEDGER_BUDGET`]:
/// each bound alone is sane, their product need not be.
pub fn check_ledger_budget(max_streams: usize, window: u64) -> Result<()> {
    let per = StreamLedger::bytes_for(window);
    let total = per.saturating_mul(max_streams as u64);
    if total > LEDGER_BUDGET {
        return Err(Error::Usage(format!(
            "--max-streams {max_streams} with --window {window} needs {} of ledger memory ({} a stream), more than the {} allowed: lower --max-streams or --window",
            units::bytes(total),
            units::bytes(per),
            units::bytes(LEDGER_BUDGET)
        )));
    }
    Ok(())
}

/// One receive path into the capture loop.
pub trait Backend {
    /// Name shown in reports, e.g. `recvmmsg`.
    fn name(&self) -> &'static str;
    /// Wait briefly for datagrams and hand each to `f` (after splitting GRO buffers).
    /// Returns how many buffers the kernel returned; 0 on a timeout.
    fn recv<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, f: F) -> io::Result<usize>;
    /// The socket's cumulative drop count as last reported by the kernel (SO_RXQ_OVFL).
    fn kernel_drops(&self) -> Option<u64>;
    /// Datagrams the kernel truncated (larger than the receive buffer).
    fn truncated(&self) -> u64;
}

/// recvmmsg on a UDP socket, with optional GRO.
pub struct MmsgBackend {
    fd: RawFd,
    batch: sys::RecvBatch,
    nonblocking: bool,
    rxq_ovfl: Option<u64>,
    truncated: u64,
}

impl MmsgBackend {
    /// Wrap a bound socket; `batch` datagrams per call.
    pub fn new(fd: RawFd, batch: usize, nonblocking: bool, rxq_ovfl_enabled: bool) -> Self {
        // GRO buffers can hold up to 64 KiB of coalesced datagrams. The kernel attaches the
        // drop count only once it is non-zero, so an enabled counter starts at 0.
        let rxq_ovfl = rxq_ovfl_enabled.then_some(0);
        MmsgBackend { fd, batch: sys::RecvBatch::new(batch, 65536), nonblocking, rxq_ovfl, truncated: 0 }
    }
}

impl Backend for MmsgBackend {
    fn name(&self) -> &'static str {
        "recvmmsg"
    }

    #[inline]
    fn recv<F: FnMut(&[u8], Option<SocketAddr>)>(&mut self, mut f: F) -> io::Result<usize> {
        let n = match self.batch.recv(self.fd, self.nonblocking) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                return Ok(0)
            }
            Err(e) => return Err(e),
        };
        for i in 0..n {
            let meta = self.batch.meta(i);
            if let Some(d) = meta.rxq_ovfl {
                self.rxq_ovfl = Some(d as u64);
            }
            let data = self.batch.data(i);
            if meta.truncated {
                self.truncated += 1;
            }
            match meta.gro_segment {
                Some(seg) if seg > 0 && data.len() > seg as usize => {
                    for chunk in data.chunks(seg as usize) {
                        f(chunk, meta.src);
                    }
                }
                _ => f(data, meta.src),
            }
        }
        Ok(n)
    }

    fn kernel_drops(&self) -> Option<u64> {
        self.rxq_ovfl
    }

    fn truncated(&self) -> u64 {
        self.truncated
    }
}

/// Where captured datagrams go besides the ledger: nowhere for `recv`, a recording ring for
/// `record`. The capture loop is generic over it, so `recv` pays nothing for recording.
pub trait Sink: Send {
    /// Keep one datagram (`info` is the format's verdict on it, `now_ns` the monotonic time of
    /// its receive call). False: no room, the datagram is not kept. The capture loop then
    /// counts it as ring-full loss and leaves it out of the ledger, so that the ledger describes
    /// exactly what was kept.
    fn accept(
        &mut self,
        data: &[u8],
        src: Option<SocketAddr>,
        info: &std::result::Result<PacketInfo, Invalid>,
        now_ns: u64,
    ) -> bool;
    /// Called after each receive call with the socket's cumulative drop count.
    fn end_batch(&mut self, now_ns: u64, socket_drops: Option<u64>);
    /// Why the run must end now (e.g. the disk is full), if it must.
    fn must_stop(&self) -> Option<&'static str>;
    /// The run is over: make everything kept visible downstream.
    fn finish(&mut self);
}

/// The sink of `recv`: keeps nothing.
pub struct NullSink;

impl Sink for NullSink {
    #[inline(always)]
    fn accept(
        &mut self,
        _: &[u8],
        _: Option<SocketAddr>,
        _: &std::result::Result<PacketInfo, Invalid>,
        _: u64,
    ) -> bool {
        true
    }
    #[inline(always)]
    fn end_batch(&mut self, _: u64, _: Option<u64>) {}
    #[inline(always)]
    fn must_stop(&self) -> Option<&'static str> {
        None
    }
    fn finish(&mut self) {}
}

/// Counters the capture thread publishes for progress displays (relaxed atomics, no locks).
#[derive(Debug, Default)]
pub struct Live {
    /// Datagrams received (valid and invalid).
    pub datagrams: AtomicU64,
    /// Payload bytes received.
    pub bytes: AtomicU64,
    /// Settled loss so far.
    pub lost: AtomicU64,
    /// Late (reordered) so far.
    pub late: AtomicU64,
    /// Duplicates so far.
    pub duplicate: AtomicU64,
    /// Invalid so far.
    pub invalid: AtomicU64,
    /// Socket drops reported by SO_RXQ_OVFL so far.
    pub socket_drops: AtomicU64,
    /// Datagrams dropped because the recording ring was full, so far.
    pub ring_full: AtomicU64,
}

/// A progress sample for `--interval` lines.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Progress {
    /// Seconds since the receiver started.
    pub elapsed_s: f64,
    /// Datagrams per second over the last interval.
    pub pps: f64,
    /// Payload bits per second over the last interval.
    pub bps: f64,
    /// Cumulative counts.
    pub datagrams: u64,
    /// Settled loss so far.
    pub lost: u64,
    /// Late so far.
    pub late: u64,
    /// Duplicates so far.
    pub duplicate: u64,
    /// Invalid so far.
    pub invalid: u64,
    /// Socket drops so far (SO_RXQ_OVFL).
    pub socket_drops: u64,
    /// UDP RcvbufErrors since start (whole namespace).
    pub rcvbuf_errors: u64,
    /// Datagrams dropped at a full recording ring so far.
    pub ring_full: u64,
}

impl Progress {
    /// One progress line for a terminal.
    pub fn line(&self) -> String {
        format!(
            "[{:7.1} s] {:>12} {:>12}  lost {}  late {}  dup {}  invalid {}  kernel drops {} (socket) {} (udp)",
            self.elapsed_s,
            units::bits(self.bps),
            units::pps(self.pps),
            units::thousands(self.lost),
            units::thousands(self.late),
            units::thousands(self.duplicate),
            units::thousands(self.invalid),
            units::thousands(self.socket_drops),
            units::thousands(self.rcvbuf_errors),
        )
    }
}

struct Slot {
    src: Option<SocketAddr>,
    stream: u32,
    ledger: StreamLedger,
    /// The stream's datagram length, for formats that do not fix one.
    len_lock: LengthLock,
    datagrams: u64,
    bytes: u64,
    invalid_kinds: [u64; 3],
    ring_full: u64,
    end: Option<EndOfStream>,
    /// The range `end` claims, in the numbers the format's check reports.
    end_range: (u64, u64),
    /// Two end-of-stream messages disagreed, or data contradicted an accepted one: this
    /// stream's end is unknown and no later message settles it.
    end_disputed: bool,
    first_ns: u64,
    last_ns: u64,
}

/// How long `--once` waits in silence, after an end-of-stream message it could not trust
/// (from a source whose data never arrived, or contradicting the data), before it gives up
/// waiting for the run to end. Only once data has arrived: a receiver still waiting for its
/// first datagram ignores such messages entirely, so a stranger cannot end a run before it
/// starts (a sender whose data is all lost then leaves it to `--duration` or Ctrl-C, and the
/// report names the message). After data, a run whose own end message was lost or disputed
/// must not wait forever; a stranger's message sent while data flows changes nothing.
pub const ONCE_QUIET_NS: u64 = 3_000_000_000;

/// Most end-of-stream messages from sources without data that a report lists (all are counted).
const STRAY_ENDS_LISTED: usize = 16;

/// An end-of-stream message that matched no stream this receiver saw data from.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StrayEnd {
    /// Where it came from.
    pub source: Option<SocketAddr>,
    /// What it claimed.
    pub claimed: EndOfStream,
}

struct Capture<'a, S: Sink> {
    fmt: &'a dyn Format,
    sink: S,
    ring_full: u64,
    unsequenced: u64,
    slots: Vec<Slot>,
    active: usize,
    last: usize,
    untracked: u64,
    datagrams: u64,
    bytes: u64,
    now: u64,
    first_session: Option<(u64, u32, u32)>,
    first_ns: u64,
    last_ns: u64,
    /// Whether the format needs [`LengthLock`] per stream.
    lock_len: bool,
    /// Sequence numbers' mask (the ledger's width).
    seq_mask: u64,
    /// The format's stream count (VDIF threads), to check an end message's stream id.
    fmt_streams: u32,
    /// End-of-stream messages from a source and stream that sent no data seen here.
    stray_control: u64,
    /// End-of-stream messages that contradict themselves, the data seen, or another message.
    invalid_control: u64,
    /// The first [`STRAY_ENDS_LISTED`] stray messages (capacity taken up front).
    stray_ends: Vec<StrayEnd>,
    /// When the last stray or invalid control message arrived (0: none).
    distrust_ns: u64,
}

impl<'a, S: Sink> Capture<'a, S> {
    /// All the memory the capture will use: `max_streams` slots with their ledgers.
    fn new(fmt: &'a dyn Format, sink: S, ledger_cfg: &LedgerConfig, max_streams: usize, now: u64) -> Self {
        let slots: Vec<Slot> = (0..max_streams)
            .map(|_| Slot {
                src: None,
                stream: 0,
                ledger: StreamLedger::new(ledger_cfg),
                len_lock: LengthLock::default(),
                datagrams: 0,
                bytes: 0,
                invalid_kinds: [0; 3],
                ring_full: 0,
                end: None,
                end_range: (0, 0),
                end_disputed: false,
                first_ns: 0,
                last_ns: 0,
            })
            .collect();
        Capture {
            fmt,
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
        }
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

    /// Hand a datagram to the sink; false (and counted) when the ring had no room for it.
    #[inline]
    fn keep(
        &mut self,
        data: &[u8],
        src: Option<SocketAddr>,
        checked: &std::result::Result<PacketInfo, Invalid>,
    ) -> bool {
        let kept = self.sink.accept(data, src, checked, self.now);
        if !kept {
            self.ring_full += 1;
        }
        kept
    }

    #[inline]
    fn handle(&mut self, data: &[u8], src: Option<SocketAddr>) {
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
        let checked = self.fmt.check(data);
        let stream = checked.map(|i| i.stream).unwrap_or(0);
        if stream == UNSEQUENCED {
            // Valid but without a place in any sequence (SPEAD control heaps, headerless Mark5B
            // halves): kept, counted apart, kept out of every ledger.
            self.unsequenced += 1;
            self.keep(data, src, &checked);
            return;
        }
        let Some(i) = self.slot(src, stream) else {
            // Beyond --max-streams: in no ledger (the report says so), but still recorded.
            self.untracked += 1;
            self.keep(data, src, &checked);
            return;
        };
        if !self.keep(data, src, &checked) {
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
                s.ledger.record(seq);
            }
            Ok(seq) => {
                if !s.ledger.record_locked(&mut s.len_lock, data.len(), seq) {
                    s.invalid_kinds[Invalid::Length as usize] += 1;
                    return;
                }
            }
            Err(kind) => {
                s.ledger.invalid();
                s.invalid_kinds[kind as usize] += 1;
                return;
            }
        };
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
        let range = self.fmt.checked_range(e.first_seq, e.last_seq);
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
        matches!(self.first_session, Some((_, expected, ended)) if ended >= expected)
    }

    fn publish(&self, live: &Live, socket_drops: Option<u64>) {
        let mut c = LedgerCounts::default();
        for s in &self.slots[..self.active] {
            c.merge(&s.ledger.counts());
        }
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

/// Whether `seq` lies in the range an end message claims (numbers compared at the ledger's
/// width, `mask`). A range longer than the counter covers everything.
#[inline]
fn in_range(seq: u64, (first, last): (u64, u64), mask: u64) -> bool {
    let span = last.wrapping_sub(first);
    span >= mask || (seq.wrapping_sub(first) & mask) <= (span & mask)
}

/// The ledger of one stream, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct StreamReport {
    /// Source address and port.
    pub source: String,
    /// Format stream id within the source.
    pub stream: u32,
    /// The counts.
    #[serde(flatten)]
    pub counts: LedgerCounts,
    /// Lost per million expected.
    pub drops_per_million: f64,
    /// Payload bytes received.
    pub bytes: u64,
    /// First and last sequence number seen.
    pub first_seq: Option<u64>,
    /// Highest sequence number seen.
    pub last_seq: Option<u64>,
    /// Where the holes are (coalesced ranges).
    pub gaps: Vec<GapRange>,
    /// Segments (more than one after a sender restart).
    pub segments: Vec<Segment>,
    /// Invalid datagrams by reason: length, header, payload.
    pub invalid_by_reason: InvalidReasons,
    /// Datagrams received but dropped because the recording ring was full (they are not in the
    /// recording, and so count among `lost`).
    pub ring_full: u64,
    /// The sender's own account, when its end-of-stream message arrived.
    pub sender: Option<EndOfStream>,
    /// Seconds from this stream's first to its last datagram.
    pub active_s: f64,
}

/// Invalid datagrams split by reason.
#[derive(Clone, Copy, Debug, Default, Serialize, serde::Deserialize)]
pub struct InvalidReasons {
    /// Wrong length.
    pub length: u64,
    /// Impossible header.
    pub header: u64,
    /// Payload broke the pattern.
    pub payload: u64,
}

/// The kernel's view over the same interval.
#[derive(Clone, Debug, Serialize)]
pub struct KernelView {
    /// This socket's drops from SO_RXQ_OVFL (as last attached to a datagram).
    pub socket_drops_rxq_ovfl: Option<u64>,
    /// This socket's drops from /proc/net/udp at the end (covers drops after the last datagram).
    pub socket_drops_proc: Option<u64>,
    /// UDP and backlog counter increases in this network namespace during the run (all sockets).
    pub namespace_delta: KernelCounters,
    /// Receive buffer the kernel granted, bytes (as reported by getsockopt, i.e. doubled).
    pub rcvbuf_granted: usize,
    /// Receive buffer asked for, bytes.
    pub rcvbuf_requested: usize,
}

/// The result of a receive run.
#[derive(Clone, Debug, Serialize)]
pub struct RecvReport {
    /// Schema name and version of this document.
    pub schema: &'static str,
    /// Listen address.
    pub listen: String,
    /// Payload format.
    pub format: String,
    /// Receive backend.
    pub backend: &'static str,
    /// GRO in use.
    pub gro: bool,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Seconds from the first to the last data datagram.
    pub active_s: f64,
    /// Datagrams received (valid and invalid, end-of-stream messages excluded).
    pub datagrams: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Datagrams per second over the active period.
    pub pps: f64,
    /// Payload bits per second over the active period.
    pub bps: f64,
    /// Totals over all streams.
    pub total: LedgerCounts,
    /// Lost per million expected, all streams.
    pub drops_per_million: f64,
    /// Sequence numbers the senders left out on purpose (from their end messages).
    pub sender_skipped: u64,
    /// Streams whose end message never arrived (their tail loss is unknowable).
    pub streams_without_end: usize,
    /// End-of-stream messages from a source and stream whose data never arrived here: a
    /// sender whose data was all lost, or a forgery. Ignored: they settle nothing.
    pub stray_control: u64,
    /// End-of-stream messages not believed: inconsistent in themselves, with the data seen
    /// (a range that does not cover it, data after the end), or with another message for the
    /// same stream. Ignored, and the stream's end counts as unknown.
    pub invalid_control: u64,
    /// The first stray end messages, with what they claimed.
    pub stray_ends: Vec<StrayEnd>,
    /// Datagrams from streams beyond --max-streams (not in any ledger).
    pub untracked: u64,
    /// Datagrams truncated by the kernel.
    pub truncated: u64,
    /// Datagrams received but dropped at a full recording ring (`record` only; among `lost`).
    pub ring_full: u64,
    /// Valid datagrams that carry no sequence position (SPEAD stream control and descriptor
    /// heaps, headerless Mark5B halves): in no ledger.
    pub unsequenced: u64,
    /// Per-stream ledgers.
    pub streams: Vec<StreamReport>,
    /// The kernel's counters.
    pub kernel: KernelView,
    /// Which layer lost what, in words.
    pub diagnosis: Vec<String>,
    /// CPU the capture thread ran on (at the end).
    pub capture_cpu: Option<usize>,
    /// CPU time of the capture thread, nanoseconds.
    pub capture_cpu_ns: u64,
    /// Capture-thread CPU time per datagram, nanoseconds.
    pub cpu_ns_per_packet: f64,
    /// Notes (buffer clamps, fallbacks).
    pub notes: Vec<String>,
    /// How the run ended: duration, count, end-of-stream, signal.
    pub stopped_by: String,
    /// Nap after a partial batch actually used, nanoseconds (0: none).
    pub coalesce_ns: u64,
}

/// A bound, configured receive socket, ready for [`capture`].
pub struct Listener {
    sock: UdpSocket,
    rcvbuf_granted: usize,
    notes: Vec<String>,
    gro: bool,
    rxq_ovfl: bool,
}

impl Listener {
    /// Bind and configure; failures are explained for the user.
    pub fn bind(cfg: &RecvConfig) -> Result<Listener> {
        let mut notes = Vec::new();
        let ip = cfg.listen.ip();
        let sock = UdpSocket::bind(cfg.listen).map_err(|e| bind_error(cfg.listen, e))?;
        if ip.is_multicast() {
            match ip {
                std::net::IpAddr::V4(g) => {
                    let iface = cfg.multicast_iface.unwrap_or(Ipv4Addr::UNSPECIFIED);
                    sock.join_multicast_v4(&g, &iface).map_err(|e| {
                        Error::Runtime(format!(
                            "cannot join multicast group {g} on {iface}: {e} (is there a multicast route? `ip route add 224.0.0.0/4 dev IFACE`)"
                        ))
                    })?;
                }
                std::net::IpAddr::V6(g) => {
                    sock.join_multicast_v6(&g, 0)
                        .map_err(|e| Error::Runtime(format!("cannot join multicast group {g}: {e}")))?;
                }
            }
        }
        let fd = sock.as_raw_fd();
        let want = cfg.rcvbuf;
        let mut granted = sys::set_rcvbuf(fd, want, false).unwrap_or(0);
        if granted / 2 < want {
            if let Ok(g) = sys::set_rcvbuf(fd, want, true) {
                if g / 2 >= want {
                    notes.push(format!(
                        "receive buffer {} is above net.core.rmem_max: granted through SO_RCVBUFFORCE (CAP_NET_ADMIN)",
                        units::bytes(want as u64)
                    ));
                }
                granted = g;
            }
        }
        if granted / 2 < want {
            notes.push(rcvbuf_clamp_note(want, granted));
        }
        let rxq_ovfl = match sys::enable_rxq_ovfl(fd) {
            Ok(()) => true,
            Err(e) => {
                notes.push(format!("per-socket drop counter (SO_RXQ_OVFL) unavailable: {e}"));
                false
            }
        };
        let mut gro = false;
        if cfg.gro {
            match sys::enable_gro(fd) {
                Ok(()) => gro = true,
                Err(e) => {
                    notes.push(format!("UDP GRO unavailable on this kernel ({e}): receiving one datagram per buffer"))
                }
            }
        }
        sys::set_rcvtimeo(fd, Duration::from_millis(100))
            .map_err(|e| Error::Runtime(format!("cannot set a receive timeout: {e}")))?;
        Ok(Listener { sock, rcvbuf_granted: granted, notes, gro, rxq_ovfl })
    }

    /// The bound address (useful when binding port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok()
    }
}

/// The message for a receive buffer clamped by `net.core.rmem_max`.
pub fn rcvbuf_clamp_note(requested: usize, granted: usize) -> String {
    format!(
        "the kernel granted a {} receive buffer of the {} asked for (capped by net.core.rmem_max): raise the cap with `sysctl -w net.core.rmem_max={}`",
        units::bytes(granted as u64 / 2),
        units::bytes(requested as u64),
        requested
    )
}

/// Receive until the duration, the count, the senders' end messages or `stop` ends the run.
/// `progress` is called every `interval` from a helper thread, never from the capture thread.
pub fn capture(
    cfg: &RecvConfig,
    listener: Listener,
    fmt: &dyn Format,
    stop: &AtomicBool,
    interval: Option<Duration>,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<RecvReport> {
    capture_with(cfg, listener, fmt, stop, interval, progress, NullSink).map(|(r, _)| r)
}

/// [`capture`], handing every datagram to `sink` as well (the recorder's ring). The sink comes
/// back with the report.
pub fn capture_with<S: Sink>(
    cfg: &RecvConfig,
    listener: Listener,
    fmt: &dyn Format,
    stop: &AtomicBool,
    interval: Option<Duration>,
    progress: &(dyn Fn(&Progress) + Sync),
    sink: S,
) -> Result<(RecvReport, S)> {
    cfg.check_limits()?;
    let mut ledger_cfg = cfg.ledger.clone();
    ledger_cfg.seq_bits = ledger_cfg.seq_bits.min(fmt.seq_bits());
    let live = Live::default();
    let done = AtomicBool::new(false);
    let fd = listener.sock.as_raw_fd();
    let nap_ns =
        if cfg.busy_poll { 0 } else { (cfg.coalesce.as_nanos() as u64).min(nap_cap_ns(listener.rcvbuf_granted)) };
    let k0 = KernelCounters::read();
    let t0 = sys::monotonic_ns();

    let result = std::thread::scope(|s| {
        let reporter = interval.map(|iv| {
            let live = &live;
            let done = &done;
            s.spawn(move || report_loop(live, done, iv, t0, &k0, progress))
        });
        let capture_thread = std::thread::Builder::new()
            .name("ws-capture".into())
            .spawn_scoped(s, || {
                if let Some(cpu) = cfg.cpu {
                    sys::pin_current_thread(cpu).map_err(|e| {
                        Error::Usage(format!("cannot pin the capture thread to CPU {cpu}: {e} (see `nproc`)"))
                    })?;
                }
                let backend = MmsgBackend::new(fd, cfg.batch, cfg.busy_poll, listener.rxq_ovfl);
                let cap = Capture::new(fmt, sink, &ledger_cfg, cfg.max_streams, t0);
                capture_loop(cfg, backend, cap, stop, &live, t0, nap_ns)
            })
            .expect("spawning the capture thread");
        let r = capture_thread.join().expect("capture thread panicked");
        done.store(true, Ordering::Relaxed);
        if let Some(h) = reporter {
            let _ = h.join();
        }
        r
    });
    let (mut cap, backend_drops, truncated, stopped_by, cpu_ns, cpu) = result?;
    let mut notes_extra = Vec::new();
    if nap_ns < cfg.coalesce.as_nanos() as u64 && !cfg.busy_poll {
        notes_extra.push(format!(
            "--coalesce cut to {} so that a 40 Gb/s burst fits the receive buffer",
            units::nanos(nap_ns as f64)
        ));
    }
    let wall_ns = sys::monotonic_ns() - t0;
    let k1 = KernelCounters::read();
    let proc_drops = sys::socket_inode(fd).and_then(kernel::socket_drops);
    let report = build_report(
        cfg,
        &listener,
        fmt,
        &mut cap,
        KernelView {
            socket_drops_rxq_ovfl: backend_drops,
            socket_drops_proc: proc_drops,
            namespace_delta: k1.since(&k0),
            rcvbuf_granted: listener.rcvbuf_granted,
            rcvbuf_requested: cfg.rcvbuf,
        },
        truncated,
        stopped_by,
        wall_ns,
        cpu_ns,
        cpu,
        (nap_ns, notes_extra),
    );
    Ok((report, cap.sink))
}

/// What the capture loop does after a receive call that found the queue nearly empty.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pause {
    /// Go straight back to the (blocking) receive.
    None,
    /// Sleep this long: at moderate rates, one wake-up per batch instead of per datagram.
    /// (Spinning instead at high rates was measured: more CPU per datagram and loss at
    /// 470 kpps of 8800 B where blocking lost none, so high rates simply block.)
    Sleep(u64),
}

/// Adaptive receive moderation, re-tuned every publish interval (50 ms) from the measured
/// arrival rate: after a receive call that found the queue nearly drained, sleep about as long
/// as a batch takes to arrive, so that each call returns a useful batch. No pause until a rate
/// is known.
struct Moderation {
    max_sleep_ns: u64,
    batch: usize,
    pause: Pause,
    rate_t: u64,
    rate_d: u64,
}

impl Moderation {
    /// Below this batch fill time a sleep does not pay (a sleep on a VM wakes ~100 us late):
    /// block in the receive call instead.
    const SLEEP_MIN_NS: f64 = 200_000.0;

    fn new(max_sleep_ns: u64, batch: usize, t0: u64) -> Self {
        // No pause until the rate is known.
        Moderation { max_sleep_ns, batch, pause: Pause::None, rate_t: t0, rate_d: 0 }
    }

    fn update(&mut self, now: u64, datagrams: u64) {
        let arrived = datagrams - self.rate_d;
        let elapsed = now.saturating_sub(self.rate_t) as f64;
        (self.rate_t, self.rate_d) = (now, datagrams);
        self.pause = if self.max_sleep_ns == 0 || arrived == 0 {
            Pause::None
        } else {
            let fill_ns = elapsed * self.batch as f64 / arrived as f64;
            if fill_ns >= Self::SLEEP_MIN_NS {
                Pause::Sleep(fill_ns.min(self.max_sleep_ns as f64) as u64)
            } else {
                Pause::None
            }
        };
    }

    #[inline]
    fn after_batch(&self, n: usize) {
        if n == 0 || n > self.batch / 2 {
            return;
        }
        match self.pause {
            Pause::None => {}
            Pause::Sleep(ns) => sys::sleep_until_monotonic_ns(sys::monotonic_ns() + ns),
        }
    }
}

type LoopResult<'a, S> = (Capture<'a, S>, Option<u64>, u64, String, u64, Option<usize>);

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
    let mut publish_at = t0;
    let mut moderation = Moderation::new(nap_ns, cfg.batch, t0);
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
        let n =
            backend.recv(|d, src| cap.handle(d, src)).map_err(|e| Error::Runtime(format!("receiving failed: {e}")))?;
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
            moderation.update(now, cap.datagrams);
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
                if cap.distrust_ns != 0
                    && cap.datagrams > 0
                    && now.saturating_sub(cap.distrust_ns.max(cap.last_ns)) >= ONCE_QUIET_NS
                {
                    stopped_by = format!(
                        "silence: {} s without data after an end-of-stream message that was not believed",
                        ONCE_QUIET_NS / 1_000_000_000
                    );
                    break;
                }
            }
        }
    }
    cap.sink.finish();
    cap.publish(live, backend.kernel_drops());
    let cpu_ns = sys::thread_cpu_ns() - cpu0;
    Ok((cap, backend.kernel_drops(), backend.truncated(), stopped_by, cpu_ns, sys::current_cpu()))
}

fn report_loop(
    live: &Live,
    done: &AtomicBool,
    interval: Duration,
    t0: u64,
    k0: &KernelCounters,
    progress: &(dyn Fn(&Progress) + Sync),
) {
    let (mut last_t, mut last_d, mut last_b) = (t0, 0u64, 0u64);
    let mut next = t0 + interval.as_nanos() as u64;
    while !done.load(Ordering::Relaxed) {
        let now = sys::monotonic_ns();
        if now < next {
            std::thread::sleep(Duration::from_nanos((next - now).min(50_000_000)));
            continue;
        }
        next += interval.as_nanos() as u64;
        let d = live.datagrams.load(Ordering::Relaxed);
        let b = live.bytes.load(Ordering::Relaxed);
        let dt = (now - last_t) as f64 / 1e9;
        let k = KernelCounters::read().since(k0);
        progress(&Progress {
            elapsed_s: (now - t0) as f64 / 1e9,
            pps: (d - last_d) as f64 / dt,
            bps: (b - last_b) as f64 * 8.0 / dt,
            datagrams: d,
            lost: live.lost.load(Ordering::Relaxed),
            late: live.late.load(Ordering::Relaxed),
            duplicate: live.duplicate.load(Ordering::Relaxed),
            invalid: live.invalid.load(Ordering::Relaxed),
            socket_drops: live.socket_drops.load(Ordering::Relaxed),
            rcvbuf_errors: k.rcvbuf_errors,
            ring_full: live.ring_full.load(Ordering::Relaxed),
        });
        (last_t, last_d, last_b) = (now, d, b);
    }
}

#[allow(clippy::too_many_arguments)]
fn build_report<S: Sink>(
    cfg: &RecvConfig,
    listener: &Listener,
    fmt: &dyn Format,
    cap: &mut Capture<'_, S>,
    kernel: KernelView,
    truncated: u64,
    stopped_by: String,
    wall_ns: u64,
    cpu_ns: u64,
    cpu: Option<usize>,
    (nap_ns, notes_extra): (u64, Vec<String>),
) -> RecvReport {
    let mut streams = Vec::with_capacity(cap.active);
    let mut total = LedgerCounts::default();
    let mut sender_skipped = 0;
    let mut without_end = 0;
    for s in &mut cap.slots[..cap.active] {
        s.ledger.record_held(&mut s.len_lock);
        let (first, last) = s.end_range;
        let sender = s.end.filter(|e| !e.is_empty()).map(|_| SenderEnd { first, last });
        s.ledger.finish(sender);
        match s.end {
            Some(e) => sender_skipped += e.skipped,
            None => without_end += 1,
        }
        let counts = s.ledger.counts();
        total.merge(&counts);
        streams.push(StreamReport {
            source: s.src.map(|a| a.to_string()).unwrap_or_else(|| "?".into()),
            stream: s.stream,
            counts,
            drops_per_million: counts.drops_per_million(),
            bytes: s.bytes,
            first_seq: s.ledger.first_seen(),
            last_seq: s.ledger.highest(),
            gaps: s.ledger.gaps().to_vec(),
            segments: s.ledger.segments(),
            invalid_by_reason: InvalidReasons {
                length: s.invalid_kinds[Invalid::Length as usize],
                header: s.invalid_kinds[Invalid::Header as usize],
                payload: s.invalid_kinds[Invalid::Payload as usize],
            },
            ring_full: s.ring_full,
            sender: s.end,
            active_s: s.last_ns.saturating_sub(s.first_ns) as f64 / 1e9,
        });
    }
    let active_ns = cap.last_ns.saturating_sub(cap.first_ns);
    let active_s = active_ns as f64 / 1e9;
    let rate_s = active_s.max(1e-9);
    let pps = if cap.datagrams > 1 { (cap.datagrams - 1) as f64 / rate_s } else { 0.0 };
    let mut notes = listener.notes.clone();
    notes.extend(notes_extra);
    if cap.untracked > 0 {
        notes.push(format!(
            "{} datagrams came from more than --max-streams {} sources and are in no ledger: raise --max-streams",
            cap.untracked, cfg.max_streams
        ));
    }
    let mut r = RecvReport {
        schema: "wirespeed.recv/1",
        listen: cfg.listen.to_string(),
        format: fmt.name(),
        backend: "recvmmsg",
        gro: listener.gro,
        wall_s: wall_ns as f64 / 1e9,
        active_s,
        datagrams: cap.datagrams,
        bytes: cap.bytes,
        pps,
        bps: if cap.datagrams > 1 { pps * (cap.bytes as f64 / cap.datagrams as f64) * 8.0 } else { 0.0 },
        total,
        drops_per_million: total.drops_per_million(),
        sender_skipped,
        streams_without_end: without_end,
        stray_control: cap.stray_control,
        invalid_control: cap.invalid_control,
        stray_ends: cap.stray_ends.clone(),
        untracked: cap.untracked,
        truncated,
        ring_full: cap.ring_full,
        unsequenced: cap.unsequenced,
        streams,
        kernel,
        diagnosis: Vec::new(),
        capture_cpu: cpu,
        capture_cpu_ns: cpu_ns,
        cpu_ns_per_packet: if cap.datagrams > 0 { cpu_ns as f64 / cap.datagrams as f64 } else { 0.0 },
        notes,
        stopped_by,
        coalesce_ns: nap_ns,
    };
    r.diagnosis = diagnose(&r);
    r
}

/// Say, in words, which layer lost what: the ledger against the kernel's own counters.
pub fn diagnose(r: &RecvReport) -> Vec<String> {
    let mut d = Vec::new();
    let lost = r.total.lost;
    let unexplained = lost.saturating_sub(r.sender_skipped).saturating_sub(r.ring_full);
    let sock = r.kernel.socket_drops_proc.or(r.kernel.socket_drops_rxq_ovfl).unwrap_or(0);
    if r.datagrams == 0 && r.streams.is_empty() {
        d.push(format!("nothing arrived on {}: is the sender pointed at this address and port?", r.listen));
        d.extend(control_diagnosis(r));
        return d;
    }
    let distrusted = r.stray_control + r.invalid_control;
    if lost == 0 && sock == 0 && distrusted == 0 {
        d.push("no loss: every sequence number was received, and the kernel reports no drops at this socket".into());
    } else if lost == 0 && sock == 0 {
        d.push(format!(
            "no loss in the streams whose data arrived, but {} end-of-stream message(s) could not be trusted: this run is no proof of zero loss",
            units::thousands(distrusted)
        ));
    } else {
        if r.sender_skipped > 0 {
            d.push(format!(
                "{} of the {} lost were left out on purpose by the sender (--skip-every/--skip)",
                units::thousands(r.sender_skipped.min(lost)),
                units::thousands(lost)
            ));
        }
        if r.ring_full > 0 {
            d.push(format!(
                "{} were received but dropped because the recording ring was full: the disk did not keep up for longer than the ring could absorb; use a larger --buffer, a faster disk, or a lower rate",
                units::thousands(r.ring_full)
            ));
        }
        if unexplained > 0 {
            if sock >= unexplained {
                d.push(format!(
                    "the kernel dropped {} at this socket (receive buffer full): the receiver did not keep up; raise --rcvbuf, pin with --cpu, or lower the rate",
                    units::thousands(sock)
                ));
            } else if sock > 0 {
                d.push(format!(
                    "the kernel dropped {} at this socket; the other {} were lost before this host's UDP layer (sender, NIC, wire, switch or firewall)",
                    units::thousands(sock),
                    units::thousands(unexplained - sock)
                ));
            } else {
                d.push(format!(
                    "{} lost, yet the kernel reports no drops at this socket: they were lost before it (sender, NIC, wire, switch or firewall)",
                    units::thousands(unexplained)
                ));
            }
        }
        if sock > unexplained {
            d.push(format!(
                "the kernel counted {} drops at this socket, more than the ledger's {} unexplained loss: the extra were not data of a tracked stream (e.g. after the run ended)",
                units::thousands(sock),
                units::thousands(unexplained)
            ));
        }
    }
    d.extend(control_diagnosis(r));
    if r.streams_without_end > 0 {
        d.push(format!(
            "{} stream(s) sent no end-of-stream message (not a wirespeed sender, or it was lost): loss after their last received packet cannot be known",
            r.streams_without_end
        ));
    }
    if r.kernel.namespace_delta.rcvbuf_errors > sock {
        d.push(format!(
            "UDP RcvbufErrors rose by {} in this network namespace: other sockets are dropping too",
            units::thousands(r.kernel.namespace_delta.rcvbuf_errors - sock)
        ));
    }
    d
}

/// What the end-of-stream messages that were not believed mean, in words.
fn control_diagnosis(r: &RecvReport) -> Vec<String> {
    let mut d = Vec::new();
    if r.stray_control > 0 {
        let example = r
            .stray_ends
            .first()
            .map(|s| {
                format!(
                    " (e.g. {} claimed {} datagrams sent)",
                    s.source.map(|a| a.to_string()).unwrap_or_else(|| "?".into()),
                    units::thousands(s.claimed.sent)
                )
            })
            .unwrap_or_default();
        d.push(format!(
            "{} end-of-stream message(s) came from a source whose data never arrived here{example}: all of its data was lost, or the message was forged; ignored",
            units::thousands(r.stray_control)
        ));
    }
    if r.invalid_control > 0 {
        d.push(format!(
            "{} end-of-stream message(s) contradicted the data seen or each other (range, counts, data after the end): ignored, and those streams' tail loss is unknown",
            units::thousands(r.invalid_control)
        ));
    }
    d
}

/// The ledger table that `recv`, `record` and `verify` print alike: one row per stream (name,
/// counts, gap ranges), a total row when there are several, then where the holes are.
pub fn ledger_table(
    o: &mut String,
    rows: &[(String, &LedgerCounts, &[GapRange])],
    total: &LedgerCounts,
    show_gaps: usize,
) {
    use std::fmt::Write;
    let _ = writeln!(
        o,
        "  {:<24} {:>12} {:>10} {:>8} {:>8} {:>8} {:>7} {:>6} {:>10}",
        "stream", "received", "lost", "late", "dup", "invalid", "stale", "resync", "drops/M"
    );
    let row = |o: &mut String, name: &str, c: &LedgerCounts| {
        let _ = writeln!(
            o,
            "  {:<24} {:>12} {:>10} {:>8} {:>8} {:>8} {:>7} {:>6} {:>10.2}",
            name,
            units::thousands(c.received),
            units::thousands(c.lost),
            units::thousands(c.late),
            units::thousands(c.duplicate),
            units::thousands(c.invalid + c.stray),
            units::thousands(c.stale),
            c.resync,
            c.drops_per_million()
        );
    };
    for (name, c, _) in rows {
        row(o, name, c);
    }
    if rows.len() > 1 {
        row(o, "total", total);
    }
    for (name, c, gaps) in rows {
        if gaps.is_empty() {
            continue;
        }
        let shown: Vec<String> = gaps
            .iter()
            .take(show_gaps)
            .map(|g| if g.first == g.last { format!("{}", g.first) } else { format!("{}..{}", g.first, g.last) })
            .collect();
        let more = gaps.len().saturating_sub(show_gaps) as u64 + c.ranges_dropped;
        let _ = writeln!(
            o,
            "  gaps {}: {}{}",
            name,
            shown.join(", "),
            if more > 0 { format!(" (+{more} more ranges; --json lists them)") } else { String::new() }
        );
    }
}

impl RecvReport {
    /// Why this run cannot prove zero loss even though its ledger counted none, if it cannot.
    ///
    /// An end-of-stream message that settled nothing is either a sender whose data was all
    /// lost or a forgery, and the receiver cannot tell which; a disputed one leaves a stream's
    /// tail unknown. `--expect-zero-loss` must not pass on either.
    pub fn zero_loss_unproven(&self) -> Option<String> {
        if self.stray_control == 0 && self.invalid_control == 0 {
            return None;
        }
        Some(format!(
            "zero loss is not proven: {} end-of-stream message(s) came from sources whose data never arrived \
             (a sender whose data was all lost, or a forgery) and {} contradicted the data or each other",
            units::thousands(self.stray_control),
            units::thousands(self.invalid_control)
        ))
    }

    /// The human summary printed at the end of `wirespeed recv`.
    pub fn human(&self, show_gaps: usize) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "wirespeed recv {}  {}  {}{}  stopped by {}",
            self.listen,
            self.format,
            self.backend,
            if self.gro { "+GRO" } else { "" },
            self.stopped_by
        );
        let _ = writeln!(
            o,
            "  received {} datagrams, {} in {:.3} s: {} payload, {}",
            units::thousands(self.datagrams),
            units::bytes(self.bytes),
            self.active_s,
            units::bits(self.bps),
            units::pps(self.pps)
        );
        let rows: Vec<(String, &LedgerCounts, &[GapRange])> = self
            .streams
            .iter()
            .map(|s| {
                let name = if s.stream == 0 { s.source.clone() } else { format!("{}#{}", s.source, s.stream) };
                (name, &s.counts, s.gaps.as_slice())
            })
            .collect();
        ledger_table(&mut o, &rows, &self.total, show_gaps);
        if self.stray_control + self.invalid_control > 0 {
            let _ = writeln!(
                o,
                "  end-of-stream messages ignored: {} stray (no data seen from their source), {} invalid (contradicted by the data or each other)",
                units::thousands(self.stray_control),
                units::thousands(self.invalid_control)
            );
        }
        if self.unsequenced > 0 {
            let _ = writeln!(
                o,
                "  unsequenced: {} valid datagrams with no sequence position (e.g. SPEAD stream-control heaps), in no ledger",
                units::thousands(self.unsequenced)
            );
        }
        let k = &self.kernel;
        let _ = writeln!(
            o,
            "  kernel, same interval: socket drops {} (SO_RXQ_OVFL) / {} (/proc/net/udp); UDP RcvbufErrors +{}, InErrors +{}; softnet dropped +{}; rcvbuf {}",
            k.socket_drops_rxq_ovfl.map(units::thousands).unwrap_or_else(|| "n/a".into()),
            k.socket_drops_proc.map(units::thousands).unwrap_or_else(|| "n/a".into()),
            units::thousands(k.namespace_delta.rcvbuf_errors),
            units::thousands(k.namespace_delta.in_errors),
            units::thousands(k.namespace_delta.softnet_dropped),
            units::bytes(k.rcvbuf_granted as u64 / 2),
        );
        let _ = writeln!(
            o,
            "  capture thread: {} CPU, {} per datagram{}",
            units::nanos(self.capture_cpu_ns as f64),
            units::nanos(self.cpu_ns_per_packet),
            self.capture_cpu.map(|c| format!(", on CPU {c}")).unwrap_or_default()
        );
        for line in &self.diagnosis {
            let _ = writeln!(o, "  => {line}");
        }
        for n in &self.notes {
            let _ = writeln!(o, "  note: {n}");
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moderation_sleeps_only_at_moderate_rates() {
        let mut m = Moderation::new(1_000_000, 64, 0);
        assert_eq!(m.pause, Pause::None, "no pause before a rate is known");
        // 50 kpps: 2,500 datagrams in 50 ms, a batch of 64 takes 1.28 ms: sleep, capped at 1 ms.
        m.update(50_000_000, 2_500);
        assert_eq!(m.pause, Pause::Sleep(1_000_000));
        // 200 kpps: a batch takes 320 us: sleep that long.
        m.update(100_000_000, 2_500 + 10_000);
        assert_eq!(m.pause, Pause::Sleep(320_000));
        // 1 Mpps: a batch takes 64 us, less than a sleep costs: block instead.
        m.update(150_000_000, 12_500 + 50_000);
        assert_eq!(m.pause, Pause::None);
        // Coalescing switched off.
        let mut off = Moderation::new(0, 64, 0);
        off.update(50_000_000, 2_500);
        assert_eq!(off.pause, Pause::None);
    }

    use crate::wire::{ByteOrder, Counter};

    fn addr(port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
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

    /// The library's own guard: a front end that skips the CLI's parsers still cannot make a
    /// receiver allocate 128 GiB of ledger (issue 13's `--window 1099511627776`).
    #[test]
    fn limits_are_checked_before_anything_is_allocated() {
        let mut c = RecvConfig::new("127.0.0.1:0".parse().unwrap());
        assert!(c.check_limits().is_ok());
        c.ledger.window = 1 << 40;
        assert!(c.check_limits().unwrap_err().to_string().contains("--window"));
        c.ledger.window = MAX_WINDOW;
        c.max_streams = MAX_TRACKED_STREAMS;
        assert!(c.check_limits().unwrap_err().to_string().contains("ledger memory"));
        c.ledger.window = 65536;
        c.batch = MAX_BATCH + 1;
        assert!(c.check_limits().unwrap_err().to_string().contains("--batch"));
        c.batch = 0;
        assert!(c.check_limits().is_err());
    }

    #[test]
    fn clamp_note_names_the_sysctl() {
        let n = rcvbuf_clamp_note(1 << 30, 8 << 20);
        assert!(n.contains("sysctl -w net.core.rmem_max=1073741824"), "{n}");
        assert!(n.contains("4.0 MiB"), "{n}");
    }
}
