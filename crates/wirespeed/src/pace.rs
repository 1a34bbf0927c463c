//! Rate control for senders.
//!
//! Packet i of a stream is due at `start + i / pps`. Two ways to wait for it:
//!
//! - [`Pacer::wait_due`], the sender's: sleep on a timer until the batch's first packet is due,
//!   then send what is due by the time the thread woke, at least the plan's per-wake-up batch
//!   and at most the burst. A wake-up that comes late (50-100 us on a virtual machine whose
//!   idle vCPU halts) only makes that batch larger; the schedule is absolute, so the rate over
//!   any second stays exact and no CPU is burnt spinning. When the host wakes threads later
//!   than a batch lasts, batches grow (up to the burst) instead.
//! - [`Pacer::wait`], for callers that send a fixed number per call: sleep until shortly before
//!   the deadline and spin the rest, the spin stretch adapting to the lateness observed.
//!
//! Hosts stall (a descheduled vCPU, an interrupt storm). After a stall the pacer makes up the
//! backlog at a *bounded* speed, `catch_up_factor` times the nominal rate (1.5 by default), so
//! the long-run rate stays exact without hitting the receiver with a full-speed burst no
//! instrument would send. A backlog older than `max_lag` is given up: the schedule moves
//! forward and the slip is counted, because a host that far behind cannot sustain the rate.
//! `catch_up_factor = inf` restores "make up for lost time at full speed".

use crate::sys;
use std::sync::atomic::{AtomicBool, Ordering};

/// [`Pacer::wait`] spins, rather than sleeps, for the last stretch before a deadline: a
/// sleeping thread wakes up late, by a few microseconds on bare metal and by 50-100 us on a
/// virtual machine whose idle vCPU halts. The stretch adapts to the wake-up lateness actually
/// observed, between these bounds.
const MIN_SPIN_NS: u64 = 20_000;
const MAX_SPIN_NS: u64 = 2_000_000;
/// Longest single sleep, so that Ctrl-C ends a slow-rate sender promptly.
const MAX_SLICE_NS: u64 = 50_000_000;
/// [`Pacer::wait_due`]'s first guess of how late a timed sleep wakes, before it has slept.
const FIRST_LATE_NS: u64 = 50_000;
/// Lateness above this is a stall, not the host's usual wake-up delay: the estimate stops
/// here so that one stall does not turn every later batch into a burst.
const MAX_LATE_NS: u64 = 1_000_000;
/// [`Pacer::wait_due`] batches at least this many wake-up latenesses' worth of packets, so that
/// the next batch is due well after this wake-up, and the thread sleeps instead of spinning.
const LATE_BATCHES: f64 = 3.0;

/// Schedule of packet deadlines for one stream.
#[derive(Debug)]
pub struct Pacer {
    start_ns: u64,
    period_ns: f64,
    max_lag_ns: u64,
    catch_up_factor: f64,
    earliest_next: u64,
    spin_ns: u64,
    late_ns: u64,
    /// Times the schedule was moved forward because the backlog exceeded `max_lag`.
    pub slips: u64,
    /// Total time the schedule was moved forward by, in nanoseconds.
    pub slipped_ns: u64,
    /// Largest backlog seen (how far behind schedule a send started), nanoseconds.
    pub max_behind_ns: u64,
    /// Timed sleeps taken: with [`Pacer::wait_due`], about one per batch.
    pub sleeps: u64,
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
            late_ns: FIRST_LATE_NS,
            slips: 0,
            slipped_ns: 0,
            max_behind_ns: 0,
            sleeps: 0,
        }
    }

    /// When packet `index` is due.
    #[inline]
    pub fn due(&self, index: u64) -> u64 {
        self.start_ns + (index as f64 * self.period_ns) as u64
    }

    /// Packets due by `now`: `due(i) <= now` for every `i` below it.
    #[inline]
    fn due_by(&self, now: u64) -> u64 {
        if now < self.start_ns {
            return 0;
        }
        let mut k = ((now - self.start_ns) as f64 / self.period_ns) as u64 + 1;
        // The float division may land one off the truncated `due`; settle on `due`'s side.
        while k > 0 && self.due(k - 1) > now {
            k -= 1;
        }
        while self.due(k) <= now {
            k += 1;
        }
        k
    }

    /// The deadline of a batch starting at `index`, after giving up a backlog past `max_lag`.
    #[inline]
    fn target(&mut self, index: u64, now: u64) -> u64 {
        let mut due = self.due(index);
        if now > due && now - due > self.max_lag_ns {
            let behind = now - due;
            self.start_ns += behind;
            self.slips += 1;
            self.slipped_ns += behind;
            due = now;
        }
        due.max(self.earliest_next)
    }

    /// After a batch of `n` went at `now`: the next may start no sooner than this one's share of
    /// time at the bounded catch-up speed (when on schedule, its own deadline is later anyway).
    #[inline]
    fn sent(&mut self, index: u64, n: u64, now: u64) {
        self.max_behind_ns = self.max_behind_ns.max(now.saturating_sub(self.due(index)));
        self.earliest_next = now + (n as f64 * self.period_ns / self.catch_up_factor) as u64;
    }

    /// Block until a batch of `n` packets starting at `index` may go; returns the time at
    /// which it returns, or `None` when `stop` was set or `limit` (a CLOCK_MONOTONIC instant)
    /// would pass first, so that slow rates still end on time and on Ctrl-C.
    ///
    /// The batch size is the caller's, so a late wake-up cannot be absorbed by sending more:
    /// this wait spins the last stretch. A sender that may vary its batch uses
    /// [`Pacer::wait_due`], which needs no spin.
    #[inline]
    pub fn wait(&mut self, index: u64, n: u64, limit: Option<u64>, stop: &AtomicBool) -> Option<u64> {
        let now = sys::monotonic_ns();
        let target = self.target(index, now);
        if limit.is_some_and(|l| target >= l) {
            return None;
        }
        let now = self.wait_until(target, now, stop)?;
        self.sent(index, n, now);
        Some(now)
    }

    /// Block until the batch starting at `index` may go, then say in `n` how many packets to
    /// send now: those due by the time the thread woke (so a late wake-up sends more, not
    /// later), at least `least` (the plan's batch per wake-up) and enough to cover a few
    /// wake-up latenesses, at most `n` as given (the burst, cut to what the count leaves).
    /// Returns the time it returns, or `None` when `stop` was set or `limit` would pass
    /// first.
    ///
    /// The wait is a timed sleep, without a spin: the next batch is due some wake-up
    /// latenesses later, so the host's lateness delays a batch but never the schedule, and
    /// every 1 s window keeps its exact count. Only when the burst is too small to cover the
    /// lateness (a `--burst` cut down by hand) does the last stretch spin.
    #[inline]
    pub fn wait_due(
        &mut self,
        index: u64,
        least: u64,
        n: &mut u64,
        limit: Option<u64>,
        stop: &AtomicBool,
    ) -> Option<u64> {
        let most = (*n).max(1);
        let mut now = sys::monotonic_ns();
        let target = self.target(index, now);
        if limit.is_some_and(|l| target >= l) {
            return None;
        }
        if target > now {
            if target - now > self.late_ns {
                now = self.sleep_until(target, now, stop)?;
                let late = now.saturating_sub(target).min(MAX_LATE_NS);
                // An average, not the worst case: one long stall must not size every batch.
                self.late_ns = self.late_ns - self.late_ns / 8 + late / 8;
            }
            while now < target {
                now = sys::monotonic_ns();
            }
        }
        let cover = (LATE_BATCHES * self.late_ns as f64 / self.period_ns).ceil() as u64;
        let mut k = self.due_by(now).saturating_sub(index).max(least).max(cover).clamp(1, most);
        if let Some(l) = limit {
            // Nothing due at or after the limit goes, however large the batch: a run bounded
            // in time sends exactly its schedule (the first packet of this batch is due before).
            k = k.min(self.due_by(l.saturating_sub(1)).saturating_sub(index).max(1));
        }
        *n = k;
        self.sent(index, k, now);
        Some(now)
    }

    /// Sleep until `target` in slices, so that a stop request is noticed within 50 ms; the
    /// time on waking.
    #[inline]
    fn sleep_until(&mut self, target: u64, mut now: u64, stop: &AtomicBool) -> Option<u64> {
        while target > now + MAX_SLICE_NS {
            sys::sleep_until_monotonic_ns(now + MAX_SLICE_NS);
            self.sleeps += 1;
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            now = sys::monotonic_ns();
        }
        sys::sleep_until_monotonic_ns(target);
        self.sleeps += 1;
        Some(sys::monotonic_ns())
    }

    /// Sleep for most of the wait and spin the rest; learn from each sleep how late the kernel
    /// wakes this thread, and keep the spin stretch at twice the worst recent lateness.
    #[inline]
    fn wait_until(&mut self, target: u64, mut now: u64, stop: &AtomicBool) -> Option<u64> {
        if target > now && target - now > self.spin_ns {
            let wake = target - self.spin_ns;
            now = self.sleep_until(wake, now, stop)?;
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

    /// [`Pacer::wait`]'s current spin stretch, nanoseconds (reported so users see what the
    /// host costs).
    pub fn spin_ns(&self) -> u64 {
        self.spin_ns
    }

    /// How late a timed sleep of [`Pacer::wait_due`] wakes on this host, on average,
    /// nanoseconds (what sizes its batches beyond the plan's).
    pub fn late_ns(&self) -> u64 {
        self.late_ns
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

    #[test]
    fn due_by_counts_exactly_the_packets_due() {
        let p = Pacer::new(3.0, 1_000, 1_000_000, 1.5);
        assert_eq!(p.due_by(999), 0);
        assert_eq!(p.due_by(1_000), 1);
        for i in 0..1000 {
            let d = p.due(i);
            assert_eq!(p.due_by(d), i + 1, "at packet {i}'s deadline");
            assert_eq!(p.due_by(d - 1), i, "just before packet {i}'s deadline");
        }
    }

    #[test]
    fn wait_due_sends_what_is_due_within_least_and_most() {
        let go = AtomicBool::new(false);
        // 10 kpps, 3 ms behind: 30 or more packets are due, so a late wake-up sends them all.
        let now = sys::monotonic_ns();
        let mut p = Pacer::new(10_000.0, now - 3_000_000, 50_000_000, 1.5);
        let mut n = 64;
        p.wait_due(0, 1, &mut n, None, &go).unwrap();
        assert!((31..=64).contains(&n), "{n}");
        // The burst caps it (and so does the count, which the caller cuts `n` to).
        let mut p = Pacer::new(10_000.0, now - 20_000_000, 50_000_000, 1.5);
        let mut n = 16;
        p.wait_due(0, 1, &mut n, None, &go).unwrap();
        assert_eq!(n, 16);
        let mut n = 0;
        p.wait_due(16, 1, &mut n, None, &go).unwrap();
        assert_eq!(n, 1, "a batch is never empty");
        // On schedule: at least the plan's batch, never before its first packet is due.
        let start = sys::monotonic_ns() + 5_000_000;
        let mut p = Pacer::new(10_000.0, start, 50_000_000, 1.5);
        let mut idx = 0;
        for _ in 0..5 {
            let mut n = 64;
            let t = p.wait_due(idx, 8, &mut n, None, &go).unwrap();
            assert!(t >= p.due(idx), "batch at {idx} went {} ns early", p.due(idx) - t);
            assert!((8..=64).contains(&n), "{n}");
            idx += n;
        }
        assert!(p.sleeps >= 1);
    }

    #[test]
    fn wait_due_batches_over_the_wake_up_lateness() {
        // A host that wakes 1 ms late: at 10 kpps each batch covers 3 ms (30 packets), so the
        // next one is due well after the next wake-up instead of a spin.
        let go = AtomicBool::new(false);
        let mut p = Pacer::new(10_000.0, sys::monotonic_ns(), 50_000_000, 1.5);
        p.late_ns = MAX_LATE_NS;
        let mut n = 64;
        p.wait_due(0, 1, &mut n, None, &go).unwrap();
        assert!(n >= 30, "{n}");
        let mut n = 8;
        p.wait_due(64, 1, &mut n, None, &go).unwrap();
        assert_eq!(n, 8, "never beyond the burst");
    }

    #[test]
    fn wait_due_ends_at_the_limit_and_on_stop_and_slips_like_wait() {
        let now = sys::monotonic_ns();
        let mut p = Pacer::new(0.1, now, 50_000_000, 1.5);
        let go = AtomicBool::new(false);
        let mut n = 10;
        assert!(p.wait_due(0, 1, &mut n, Some(now + 1_000_000_000), &go).is_some());
        assert_eq!(n, 1);
        assert_eq!(p.wait_due(1, 1, &mut n, Some(now + 1_000_000_000), &go), None);
        let stop = AtomicBool::new(true);
        let t = std::time::Instant::now();
        assert_eq!(p.wait_due(1, 1, &mut n, None, &stop), None);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        let mut q = Pacer::new(1000.0, now.saturating_sub(5_000_000_000), 50_000_000, 1.5);
        let mut n = 64;
        q.wait_due(0, 1, &mut n, None, &go).unwrap();
        assert_eq!(q.slips, 1);
        assert!(q.due(1) > now, "after the slip the next packet is due in the future");
    }

    #[test]
    fn wait_due_sends_nothing_due_at_or_after_the_limit() {
        // 10 kpps from now, the run ends 550 us in: packets 0..=5 are due before the end, so a
        // batch of at least 10 is cut to those 6, and the next wait ends the run.
        let now = sys::monotonic_ns();
        let mut p = Pacer::new(10_000.0, now, 50_000_000, 1.5);
        let go = AtomicBool::new(false);
        let limit = Some(now + 550_000);
        let mut n = 20;
        assert!(p.wait_due(0, 10, &mut n, limit, &go).is_some());
        assert_eq!(n, 6);
        let mut n = 20;
        assert_eq!(p.wait_due(6, 10, &mut n, limit, &go), None);
    }

    #[test]
    fn wait_due_makes_up_a_stall_at_bounded_speed() {
        // 10 ms behind at 10 kpps, bursts of 10 (1 ms of schedule each): at 2x the batches are
        // spaced 0.5 ms apart or more.
        let now = sys::monotonic_ns();
        let mut q = Pacer::new(10_000.0, now - 10_000_000, 50_000_000, 2.0);
        let go = AtomicBool::new(false);
        let (mut n0, mut n1, mut n2) = (10, 10, 10);
        let t0 = q.wait_due(0, 1, &mut n0, None, &go).unwrap();
        let t1 = q.wait_due(10, 1, &mut n1, None, &go).unwrap();
        let t2 = q.wait_due(20, 1, &mut n2, None, &go).unwrap();
        assert_eq!((n0, n1, n2), (10, 10, 10), "the backlog fills every burst");
        assert_eq!(q.slips, 0, "a 10 ms backlog is within max_lag");
        assert!(t1 - t0 >= 500_000 && t2 - t1 >= 500_000, "batches spaced {} and {} ns", t1 - t0, t2 - t1);
    }
}
