//! Live counters that exist for the exporter alone: the reflector's and the tap's running
//! totals (the writer's latency histogram is the writer's own: `spool::stats`). Relaxed atomics, written by their one producer
//! thread (a few stores per batch or per disk write, never a lock, allocation or system call)
//! and read by the exporter at scrape time.

use crate::spool::share::TapRing;
use std::sync::atomic::{AtomicU64, Ordering};

/// The reflector's running totals, published once per receive batch.
#[derive(Debug, Default)]
pub struct ReflectLive {
    /// Datagrams received.
    pub received: AtomicU64,
    /// Datagrams sent back.
    pub reflected: AtomicU64,
    /// Bytes sent back.
    pub bytes: AtomicU64,
    /// Replies that could not be sent.
    pub send_errors: AtomicU64,
    /// Refused datagrams per reason, in [`REFUSED_REASONS`] order.
    pub refused: [AtomicU64; 6],
}

/// The `reason` label values of refused datagrams, in [`ReflectLive::refused`] order.
pub const REFUSED_REASONS: [&str; 6] = ["own_port", "low_port", "not_allowed", "reply", "not_probe", "rate_capped"];

impl ReflectLive {
    /// Publish the reflector's counts so far; `refused` per reason, in [`REFUSED_REASONS`] order.
    #[inline]
    pub fn publish(&self, received: u64, reflected: u64, bytes: u64, send_errors: u64, refused: [u64; 6]) {
        self.received.store(received, Ordering::Relaxed);
        self.reflected.store(reflected, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        self.send_errors.store(send_errors, Ordering::Relaxed);
        for (cell, n) in self.refused.iter().zip(refused) {
            cell.store(n, Ordering::Relaxed);
        }
    }
}

/// A tap's running totals, published every 50 ms and at its end.
#[derive(Debug, Default)]
pub struct TapLive {
    /// Records delivered.
    pub records: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Records lost by falling behind the recorder.
    pub overrun_records: AtomicU64,
    /// Ring bytes skipped with them.
    pub overrun_bytes: AtomicU64,
    /// Bytes published by the recorder and not yet read, over all rings.
    pub behind_bytes: AtomicU64,
}

impl TapLive {
    /// Publish the tap's counts so far.
    pub fn publish(&self, records: u64, bytes: u64, rings: &[TapRing]) {
        self.records.store(records, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        self.overrun_records.store(rings.iter().map(|r| r.overrun.records).sum(), Ordering::Relaxed);
        self.overrun_bytes.store(rings.iter().map(|r| r.overrun.bytes).sum(), Ordering::Relaxed);
        self.behind_bytes.store(rings.iter().map(|r| r.behind()).sum(), Ordering::Relaxed);
    }
}
