//! Where the capture loop hands its results besides the ledger: a [`Sink`] for every kept
//! datagram (nothing for `recv`, the recording ring for `record`), and the live counters and
//! progress samples that displays read from other threads.

use crate::sys::Lease;
use crate::units;
use crate::wire::{Invalid, PacketInfo};
use serde::Serialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

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
    /// Lend memory for the next receive call of up to `batch` datagrams to land in, in the
    /// form they are kept in (see [`crate::sys::ring`]); `None`: receive into the backend's
    /// own buffers and [`accept`](Self::accept) copies.
    #[inline(always)]
    fn lend(&mut self, _batch: usize) -> Option<Lease> {
        None
    }
    /// [`accept`](Self::accept) for a datagram that already lies in slot `slot` of `lease`:
    /// kept without a copy. Always true (the slot was lent because there was room).
    #[inline(always)]
    fn accept_in_place(
        &mut self,
        _lease: &Lease,
        _slot: usize,
        data: &[u8],
        src: Option<SocketAddr>,
        info: &std::result::Result<PacketInfo, Invalid>,
        now_ns: u64,
    ) -> bool {
        self.accept(data, src, info, now_ns)
    }
    /// The lease comes back after the datagrams in place were accepted or not: settle them.
    #[inline(always)]
    fn give_back(&mut self, _lease: Lease) {}
    /// The datagram last accepted is not to be kept after all (the ledger found it a
    /// duplicate, or it is invalid): take back its bytes and count it as not written. A sink
    /// may keep invalid ones (pcap evidence) or, where its records cannot be taken back,
    /// keep them as before.
    #[inline(always)]
    fn reject(&mut self, _why: Reject) {}
    /// Called after each receive call with the socket's cumulative drop count.
    fn end_batch(&mut self, now_ns: u64, socket_drops: Option<u64>);
    /// Why the run must end now (e.g. the disk is full), if it must.
    fn must_stop(&self) -> Option<&'static str>;
    /// The run is over: make everything kept visible downstream.
    fn finish(&mut self);
}

/// Why the capture takes back a datagram it handed to [`Sink::accept`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Its number was already received (the ledger's [`Outcome::Duplicate`](crate::ledger::Outcome)).
    Duplicate,
    /// It failed the format's check (length, header, payload).
    Invalid,
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

/// Someone shown a capture's live counters while it runs (the lab's metrics exporter): handed
/// them once, when the capture threads start, and reading them whenever it likes. The capture
/// never calls it again, so nothing on the capture path waits for it.
pub trait ShowCapture: Send + Sync + std::fmt::Debug {
    /// The capture threads' counters, in thread order.
    fn capture(&self, lives: std::sync::Arc<[Live]>);
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
    /// Streams tracked so far (how many `streams` cells hold one).
    pub streams_tracked: AtomicU64,
    /// Per-stream counters, one cell per ledger slot, for a metrics exporter: empty unless the
    /// run was given room for them ([`Live::with_streams`]); the capture thread fills them in
    /// with its 50 ms publish, never per datagram.
    pub streams: Box<[StreamLive]>,
    /// How many cells of `streams` hold a stream (stored with Release after their source).
    pub streams_published: AtomicUsize,
}

impl Live {
    /// Live counters with room for `n` streams' own counters (0: totals only, as a run without
    /// a metrics exporter has).
    pub fn with_streams(n: usize) -> Live {
        Live { streams: (0..n).map(|_| StreamLive::default()).collect(), ..Live::default() }
    }

    /// The cells that hold a stream, as published so far.
    pub fn published_streams(&self) -> &[StreamLive] {
        let n = self.streams_published.load(Ordering::Acquire).min(self.streams.len());
        &self.streams[..n]
    }
}

/// One stream's live counters (relaxed atomics): what its ledger says so far, published by the
/// capture thread between receive calls for readers on other threads (the metrics exporter).
#[derive(Debug, Default)]
pub struct StreamLive {
    /// The source address as 128 bits (IPv4 mapped into IPv6).
    ip: [AtomicU64; 2],
    /// `family << 48 | port << 32 | format stream id`; family 0: no source address, 4 or 6.
    meta: AtomicU64,
    /// Unique sequence numbers received (late ones included), as the ledger counts them.
    pub received: AtomicU64,
    /// Payload bytes of the stream's datagrams that reached its ledger.
    pub bytes: AtomicU64,
    /// Settled loss so far.
    pub lost: AtomicU64,
    /// Late (reordered) so far.
    pub late: AtomicU64,
    /// Duplicates so far.
    pub duplicate: AtomicU64,
    /// Invalid so far.
    pub invalid: AtomicU64,
}

impl StreamLive {
    /// Publish the stream's source and counts (the capture thread, between receive calls).
    pub fn publish(&self, src: Option<SocketAddr>, stream: u32, c: &crate::ledger::LedgerCounts, bytes: u64) {
        let (bits, family, port) = match src {
            Some(SocketAddr::V4(a)) => (u128::from(a.ip().to_ipv6_mapped()), 4u64, a.port()),
            Some(SocketAddr::V6(a)) => (u128::from(*a.ip()), 6, a.port()),
            None => (0, 0, 0),
        };
        self.ip[0].store((bits >> 64) as u64, Ordering::Relaxed);
        self.ip[1].store(bits as u64, Ordering::Relaxed);
        self.meta.store(family << 48 | u64::from(port) << 32 | u64::from(stream), Ordering::Relaxed);
        self.received.store(c.received, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        self.lost.store(c.lost, Ordering::Relaxed);
        self.late.store(c.late, Ordering::Relaxed);
        self.duplicate.store(c.duplicate, Ordering::Relaxed);
        self.invalid.store(c.invalid, Ordering::Relaxed);
    }

    /// The stream's source address and port (None: the backend gives none) and its format
    /// stream id.
    pub fn source(&self) -> (Option<SocketAddr>, u32) {
        let bits =
            u128::from(self.ip[0].load(Ordering::Relaxed)) << 64 | u128::from(self.ip[1].load(Ordering::Relaxed));
        let meta = self.meta.load(Ordering::Relaxed);
        let port = (meta >> 32) as u16;
        let ip = match meta >> 48 {
            4 => Some(IpAddr::V4(Ipv6Addr::from(bits).to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED))),
            6 => Some(IpAddr::V6(Ipv6Addr::from(bits))),
            _ => None,
        };
        (ip.map(|ip| SocketAddr::new(ip, port)), meta as u32)
    }
}

/// The id of a receiver's `--interval-json` line ([`Progress`] as JSON).
pub const INTERVAL_SCHEMA: &str = "wirespeed.recv.interval/1";

/// A progress sample for `--interval` lines; as JSON (`--interval-json`), one document of its
/// own per line, with its id first like every document wirespeed writes.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Progress {
    /// [`INTERVAL_SCHEMA`] (a recorder's lines say `wirespeed.record.interval/1`).
    pub schema: &'static str,
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
