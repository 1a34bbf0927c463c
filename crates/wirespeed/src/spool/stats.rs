//! The writer's disk writes as a latency histogram, for an exporter to read: relaxed atomics
//! the writer thread bumps a handful of times per write (one write moves a whole block), read at
//! scrape time. Here with the writer, so the writer names nothing of the exporter.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the write-latency histogram's buckets, seconds (`+Inf` follows): from half
/// a millisecond (an 8 MiB write to a fast NVMe disk) to 2.5 s (a disk that has stopped).
pub const WRITE_BUCKETS_S: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// [`WRITE_BUCKETS_S`] in nanoseconds, for the writer's integer comparison.
const WRITE_BUCKETS_NS: [u64; 12] = [
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
];

/// The writer's disk writes as a histogram of their latency, and the stalls among them.
/// `observe` is a handful of relaxed increments per write (one write moves a whole block,
/// 8 MiB by default), so the writer pays nothing measurable for it.
#[derive(Debug, Default)]
pub struct WriteStats {
    /// Writes per bucket (not cumulative); the last one is `+Inf`.
    buckets: [AtomicU64; 13],
    /// Sum of all write latencies, nanoseconds.
    sum_ns: AtomicU64,
    /// Writes slower than the stall threshold.
    stalls: AtomicU64,
}

/// A [`WriteStats`] read at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteSnapshot {
    /// Writes per bucket, `(upper bound in seconds, count)`, not cumulative, `+Inf` last.
    pub buckets: Vec<(f64, u64)>,
    /// Writes in all.
    pub count: u64,
    /// Their latencies' sum, seconds.
    pub sum_s: f64,
    /// Writes slower than the stall threshold.
    pub stalls: u64,
}

impl WriteStats {
    /// Count one write that took `ns` nanoseconds (`stall`: slower than the writer's stall
    /// threshold).
    #[inline]
    pub fn observe(&self, ns: u64, stall: bool) {
        let i = WRITE_BUCKETS_NS.iter().position(|&b| ns <= b).unwrap_or(WRITE_BUCKETS_NS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        if stall {
            self.stalls.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The histogram now (the count is the buckets' sum, so the two always agree).
    pub fn snapshot(&self) -> WriteSnapshot {
        let bounds = WRITE_BUCKETS_S.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds.zip(&self.buckets).map(|(b, n)| (b, n.load(Ordering::Relaxed))).collect();
        WriteSnapshot {
            count: buckets.iter().map(|b| b.1).sum(),
            buckets,
            sum_s: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
            stalls: self.stalls.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_land_in_their_buckets_and_stalls_are_counted() {
        let w = WriteStats::default();
        w.observe(400_000, false); // 0.4 ms: first bucket
        w.observe(500_000, false); // exactly on a bound: that bucket (le)
        w.observe(60_000_000, true); // 60 ms: the 0.1 s bucket, a stall
        w.observe(9_000_000_000, true); // 9 s: +Inf
        let s = w.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.stalls, 2);
        assert_eq!(s.buckets.len(), 13);
        assert_eq!(s.buckets[0], (0.0005, 2));
        assert_eq!(s.buckets[7], (0.1, 1));
        assert_eq!(s.buckets[12].1, 1);
        assert!(s.buckets[12].0.is_infinite());
        assert!((s.sum_s - 9.0609).abs() < 1e-9);
    }
}
