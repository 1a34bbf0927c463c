//! Where the capture loop hands its results besides the ledger: a [`Sink`] for every kept
//! datagram (nothing for `recv`, the recording ring for `record`), and the live counters and
//! progress samples that displays read from other threads.

use crate::sys::Lease;
use crate::units;
use crate::wire::{Invalid, PacketInfo};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;

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
