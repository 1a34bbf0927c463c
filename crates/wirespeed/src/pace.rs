//! Rate control for senders.
//!
//! Packet i of a stream is due at `start + i / pps`. The pacer sleeps until shortly before a
//! deadline and spins the rest, so that the achieved rate over any second is within a fraction
//! of a percent of the request, while each send call carries at most one burst.
//!
//! Hosts stall (a descheduled vCPU, an interrupt storm). After a stall the pacer makes up the
//! backlog at a *bounded* speed, `catch_up_factor` times the nominal rate (1.5 by default), so
//! the long-run rate stays exact without hitting the receiver with a full-speed burst no
//! instrument would send. A backlog older than `max_lag` is given up: the schedule moves
//! forward and the slip is counted, because a host that far behind cannot sustain the rate.
//! `catch_up_factor = inf` restores "make up for lost time at full speed".

use crate::sys;
use std::sync::atomic::{AtomicBool, Ordering};

/// Spin, rather than sleep, for the last stretch before a deadline: a sleeping thread wakes up
/// late, by a few microseconds on bare metal and by 50-100 us on a virtual machine whose idle
/// vCPU halts. The stretch adapts to the wake-up lateness actually observed, between these
/// bounds.
const MIN_SPIN_NS: u64 = 20_000;
const MAX_SPIN_NS: u64 = 2_000_000;
/// Longest single sleep, so that Ctrl-C ends a slow-rate sender promptly.
const MAX_SLICE_NS: u64 = 50_000_000;

/// Schedule of packet deadlines for one stream.
#[derive(Debug)]
pub struct Pacer {
    start_ns: u64,
    period_ns: f64,
    max_lag_ns: u64,
    catch_up_factor: f64,
    earliest_next: u64,
    spin_ns: u64,
    /// Times the schedule was moved forward because the backlog exceeded `max_lag`.
    pub slips: u64,
    /// Total time the schedule was moved forward by, in nanoseconds.
    pub slipped_ns: u64,
    /// Largest backlog seen (how far behind schedule a send started), nanoseconds.
    pub max_behind_ns: u64,
}

impl Pacer {
    /// A schedule of `pps` packets per second starting at `start_ns` (CLOCK_MONOTONIC).
    pub fn new(pps: f64, start_ns: u64, max_lag_ns: u64, catch_up_factor: f64) -> Self {
        Pacer {
            start_ns,
            period_ns: 1e9 / pps,
            max_lag_ns,
            catch_up_factor: catch_up_factor.max(1.0),
            earliest_next: 0,
            spin_ns: 4 * MIN_SPIN_NS,
            slips: 0,
            slipped_ns: 0,
            max_behind_ns: 0,
        }
    }

    /// When packet `index` is due.
    #[inline]
    pub fn due(&self, index: u64) -> u64 {
        self.start_ns + (index as f64 * self.period_ns) as u64
    }

    /// Block until a batch of `n` packets starting at `index` may go; returns the time at
    /// which it returns, or `None` when `stop` was set or `limit` (a CLOCK_MONOTONIC instant)
    /// would pass first, so that slow rates still end on time and on Ctrl-C.
    #[inline]
    pub fn wait(&mut self, index: u64, n: u64, limit: Option<u64>, stop: &AtomicBool) -> Option<u64> {
        let mut due = self.due(index);
        let now = sys::monotonic_ns();
        if now > due && now - due > self.max_lag_ns {
            let behind = now - due;
            self.start_ns += behind;
            self.slips += 1;
            self.slipped_ns += behind;
            due = now;
        }
        let target = due.max(self.earliest_next);
        if limit.is_some_and(|l| target >= l) {
            return None;
        }
        let now = self.wait_until(target, now, stop)?;
        self.max_behind_ns = self.max_behind_ns.max(now.saturating_sub(self.due(index)));
        // The next batch may start no sooner than this one's share of time at the bounded
        // catch-up speed (when on schedule, its own deadline is later anyway).
        self.earliest_next = now + (n as f64 * self.period_ns / self.catch_up_factor) as u64;
        Some(now)
    }
}

impl Pacer {
    /// Sleep for most of the wait and spin the rest; learn from each sleep how late the kernel
    /// wakes this thread, and keep the spin stretch at twice the worst recent lateness.
    #[inline]
    fn wait_until(&mut self, target: u64, mut now: u64, stop: &AtomicBool) -> Option<u64> {
        if target > now && target - now > self.spin_ns {
            let wake = target - self.spin_ns;
            // Long waits sleep in slices so that a stop request is noticed within 50 ms.
            while wake > now + MAX_SLICE_NS {
                sys::sleep_until_monotonic_ns(now + MAX_SLICE_NS);
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
                now = sys::monotonic_ns();
            }
            sys::sleep_until_monotonic_ns(wake);
            now = sys::monotonic_ns();
            let late = now.saturating_sub(wake);
            // Grow at once, decay slowly (1/1024 per sleep) so one quiet spell does not undo it.
            self.spin_ns = (self.spin_ns - (self.spin_ns >> 10)).max(2 * late).clamp(MIN_SPIN_NS, MAX_SPIN_NS);
        }
        // No PAUSE hint in this loop: on KVM-style hypervisors a stream of PAUSEs triggers
        // pause-loop exits and the vCPU is descheduled for milliseconds, the very stall the
        // spin is meant to avoid. Reading the clock (vDSO, rdtsc) is enough to pace the loop.
        while now < target {
            now = sys::monotonic_ns();
        }
        Some(now)
    }

    /// The current spin stretch, nanoseconds (reported so users see what the host costs).
    pub fn spin_ns(&self) -> u64 {
        self.spin_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_exact() {
        let p = Pacer::new(1000.0, 1_000_000_000, 1_000_000, 1.5);
        assert_eq!(p.due(0), 1_000_000_000);
        assert_eq!(p.due(1000), 2_000_000_000);
    }

    #[test]
    fn slow_rates_end_at_the_limit_and_on_stop() {
        let now = sys::monotonic_ns();
        // 0.1 pps: packet 1 is due 10 s after the start, past a 1 s limit.
        let mut p = Pacer::new(0.1, now, 50_000_000, 1.5);
        let go = AtomicBool::new(false);
        assert!(p.wait(0, 1, Some(now + 1_000_000_000), &go).is_some());
        assert_eq!(p.wait(1, 1, Some(now + 1_000_000_000), &go), None);
        // Without a limit, a stop request ends the wait within a slice.
        let stop = AtomicBool::new(true);
        let t = std::time::Instant::now();
        assert_eq!(p.wait(1, 1, None, &stop), None);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn a_long_stall_slips_instead_of_bursting() {
        let now = sys::monotonic_ns();
        let mut q = Pacer::new(1000.0, now.saturating_sub(5_000_000_000), 50_000_000, 1.5);
        q.wait(0, 1, None, &AtomicBool::new(false));
        assert_eq!(q.slips, 1);
        assert!(q.slipped_ns >= 5_000_000_000);
        assert!(q.due(1) > now, "after the slip the next packet is due in the future");
    }

    #[test]
    fn a_short_stall_is_made_up_at_bounded_speed() {
        // 10 ms behind at 10 kpps (100 us per packet), batches of 10 packets (1 ms each):
        // at 2x the catch-up spaces batches 0.5 ms apart, so the 10 ms backlog takes ~20 ms,
        // never a burst.
        let now = sys::monotonic_ns();
        let mut q = Pacer::new(10_000.0, now - 10_000_000, 50_000_000, 2.0);
        let go = AtomicBool::new(false);
        let t0 = q.wait(0, 10, None, &go).unwrap();
        let t1 = q.wait(10, 10, None, &go).unwrap();
        let t2 = q.wait(20, 10, None, &go).unwrap();
        assert_eq!(q.slips, 0, "a 10 ms backlog is within max_lag");
        assert!(t1 - t0 >= 500_000 && t2 - t1 >= 500_000, "batches spaced {} and {} ns", t1 - t0, t2 - t1);
        assert!(q.max_behind_ns >= 10_000_000);
        // Unbounded catch-up sends back to back.
        let mut f = Pacer::new(10_000.0, now - 10_000_000, 50_000_000, f64::INFINITY);
        let a = f.wait(0, 10, None, &go).unwrap();
        let b = f.wait(10, 10, None, &go).unwrap();
        assert!(b - a < 500_000);
    }
}
