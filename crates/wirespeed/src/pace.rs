//! Rate control for senders.
//!
//! Packet i of a stream is due at `start + i / pps`. The pacer sleeps until shortly before a
//! deadline and spins the rest, so that the achieved rate over any second is within a fraction
//! of a percent of the request while bursts stay bounded by the batch size. When the sender
//! falls behind by more than `max_lag` (a stall: the host could not keep up, or was
//! descheduled), the schedule is moved forward instead of catching up at full speed, which
//! would hit the receiver with a burst no instrument would send; `catch_up` restores the
//! "make up for lost time" behaviour when a user really wants the long-run count.

use crate::sys;

/// Spin, rather than sleep, for the last stretch before a deadline: sleeping wakes up late by
/// tens of microseconds on a loaded host.
const SPIN_NS: u64 = 25_000;

/// Schedule of packet deadlines for one stream.
#[derive(Debug)]
pub struct Pacer {
    start_ns: u64,
    period_ns: f64,
    max_lag_ns: u64,
    catch_up: bool,
    /// Times the schedule was moved forward because the sender was too far behind.
    pub slips: u64,
    /// Total time the schedule was moved forward by, in nanoseconds.
    pub slipped_ns: u64,
}

impl Pacer {
    /// A schedule of `pps` packets per second starting at `start_ns` (CLOCK_MONOTONIC).
    pub fn new(pps: f64, start_ns: u64, max_lag_ns: u64, catch_up: bool) -> Self {
        Pacer { start_ns, period_ns: 1e9 / pps, max_lag_ns, catch_up, slips: 0, slipped_ns: 0 }
    }

    /// When packet `index` is due.
    #[inline]
    pub fn due(&self, index: u64) -> u64 {
        self.start_ns + (index as f64 * self.period_ns) as u64
    }

    /// Block until packet `index` is due; returns the time at which it returns.
    #[inline]
    pub fn wait(&mut self, index: u64) -> u64 {
        let due = self.due(index);
        let mut now = sys::monotonic_ns();
        while now < due {
            if due - now > SPIN_NS {
                sys::sleep_until_monotonic_ns(due - SPIN_NS / 2);
            } else {
                std::hint::spin_loop();
            }
            now = sys::monotonic_ns();
        }
        let behind = now - due;
        if !self.catch_up && behind > self.max_lag_ns {
            self.start_ns += behind;
            self.slips += 1;
            self.slipped_ns += behind;
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_exact_and_slips_forward() {
        let p = Pacer::new(1000.0, 1_000_000_000, 1_000_000, false);
        assert_eq!(p.due(0), 1_000_000_000);
        assert_eq!(p.due(1000), 2_000_000_000);
        // A pacer whose start lies far in the past is behind: it must slip, not burst.
        let now = sys::monotonic_ns();
        let mut q = Pacer::new(1000.0, now.saturating_sub(5_000_000_000), 1_000_000, false);
        q.wait(0);
        assert_eq!(q.slips, 1);
        assert!(q.slipped_ns >= 5_000_000_000);
        // After the slip, the next packet is due about one period later, not in the past.
        assert!(q.due(1) > now);
        // With catch-up, no slip is taken.
        let mut c = Pacer::new(1000.0, now.saturating_sub(5_000_000_000), 1_000_000, true);
        c.wait(0);
        assert_eq!(c.slips, 0);
    }
}
