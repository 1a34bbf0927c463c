//! Receive moderation: at moderate rates, nap between receive calls so that each call returns a
//! useful batch instead of one datagram per wake-up.

use crate::sys;

/// What the capture loop does after a receive call that found the queue nearly empty.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Pause {
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
///
/// A nap costs a wake-up of its own, so it pays only when it gathers datagrams that would
/// otherwise each have woken the thread: one that, at the measured rate, brings fewer than
/// [`Moderation::GATHER_MIN`] is not taken, and the receive call blocks as a plain blocking
/// receiver's does. That is the case whenever the granted buffer caps the nap short (the
/// nap must let a 40 Gb/s burst fit an eighth of the buffer): with Linux's default 208 KiB a
/// nap is about 10 us, which at 14 kpps gathers 0.15 datagrams and doubled the wake-ups.
///
/// Where a nap could gather, whether it pays still depends on the host (what a timed wake-up
/// costs against a socket's, how cold the queued data is by then): measured on one VM, 1 ms
/// naps cost from 0.5x to 2x a blocking receive per datagram from run to run. So the policy
/// measures itself: each interval's capture-thread CPU per datagram is booked to the way it
/// waited (napping or blocking), the cheaper way is kept, and the other is tried again for one
/// interval in [`Moderation::RETRY_EVERY`], or at once when the rate is more than four times
/// above or below the one its cost was last booked at (a stream whose rate swings less than
/// that from interval to interval keeps comparing the two). Either way is safe for bursts: a
/// nap is still capped so that a 40 Gb/s burst fits an eighth of the buffer.
pub(super) struct Moderation {
    max_sleep_ns: u64,
    batch: usize,
    pause: Pause,
    rate_t: u64,
    rate_d: u64,
    rate_cpu: u64,
    /// Measured CPU per datagram (ns) of napping and of blocking, with the arrival rate
    /// (datagrams per ns) of its last booking.
    cost_nap: Option<(f64, f64)>,
    cost_block: Option<(f64, f64)>,
    /// Intervals since the way not in force was last tried.
    since_try: u32,
}

impl Moderation {
    /// Below this batch fill time a sleep does not pay (a sleep on a VM wakes ~100 us late):
    /// block in the receive call instead.
    const SLEEP_MIN_NS: f64 = 200_000.0;

    /// Fewest datagrams a nap must gather, at the measured rate, to be worth its own wake-up
    /// (one nap and one receive call then serve them, where blocking would wake once per
    /// datagram).
    pub(super) const GATHER_MIN: f64 = 2.0;

    /// Intervals (of 50 ms) between tries of the way of waiting not in force: one interval in
    /// this many is spent measuring the dearer way again.
    pub(super) const RETRY_EVERY: u32 = 20;

    /// Fewest datagrams in an interval for its CPU per datagram to be booked.
    const SAMPLE_MIN: u64 = 32;

    pub(super) fn new(max_sleep_ns: u64, batch: usize, t0: u64, cpu0: u64) -> Self {
        // No pause until the rate is known.
        Moderation {
            max_sleep_ns,
            batch,
            pause: Pause::None,
            rate_t: t0,
            rate_d: 0,
            rate_cpu: cpu0,
            cost_nap: None,
            cost_block: None,
            since_try: 0,
        }
    }

    /// Once an interval: `datagrams` received so far, and the capture thread's CPU time.
    pub(super) fn update(&mut self, now: u64, datagrams: u64, cpu_ns: u64) {
        let arrived = datagrams - self.rate_d;
        let elapsed = now.saturating_sub(self.rate_t) as f64;
        let cpu = cpu_ns.saturating_sub(self.rate_cpu) as f64;
        (self.rate_t, self.rate_d, self.rate_cpu) = (now, datagrams, cpu_ns);
        let per_ns = arrived as f64 / elapsed.max(1.0);
        if arrived >= Self::SAMPLE_MIN {
            let c = cpu / arrived as f64;
            let slot = match self.pause {
                Pause::Sleep(_) => &mut self.cost_nap,
                Pause::None => &mut self.cost_block,
            };
            // Half the last measurement, half the earlier ones (at a rate like this one).
            *slot = Some(match *slot {
                Some((old, r)) if near(r, per_ns) => ((old + c) / 2.0, per_ns),
                _ => (c, per_ns),
            });
        }
        let nap = if self.max_sleep_ns == 0 || arrived == 0 {
            None
        } else {
            let fill_ns = self.batch as f64 / per_ns;
            let nap = fill_ns.min(self.max_sleep_ns as f64);
            (fill_ns >= Self::SLEEP_MIN_NS && nap * per_ns >= Self::GATHER_MIN).then_some(nap as u64)
        };
        let Some(nap) = nap else {
            self.pause = Pause::None;
            return;
        };
        // A cost measured at a rather different rate says nothing of this one.
        let known = |c: Option<(f64, f64)>| c.filter(|&(_, r)| near(r, per_ns)).map(|(c, _)| c);
        let napping = match (known(self.cost_nap), known(self.cost_block)) {
            (None, _) => true,
            (_, None) => false,
            (Some(n), Some(b)) => {
                self.since_try += 1;
                let cheaper = n <= b;
                if self.since_try >= Self::RETRY_EVERY {
                    self.since_try = 0;
                    !cheaper
                } else {
                    cheaper
                }
            }
        };
        self.pause = if napping { Pause::Sleep(nap) } else { Pause::None };
    }

    #[inline]
    pub(super) fn after_batch(&self, n: usize) {
        if n == 0 || n > self.batch / 2 {
            return;
        }
        match self.pause {
            Pause::None => {}
            Pause::Sleep(ns) => sys::sleep_until_monotonic_ns(sys::monotonic_ns() + ns),
        }
    }
}

/// Whether two arrival rates are alike enough to share a measured cost (within a factor 4).
fn near(a: f64, b: f64) -> bool {
    a > 0.0 && b > 0.0 && a.max(b) / a.min(b) <= 4.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The capture's clock, datagram count and CPU time, as a test drives them.
    #[derive(Default)]
    struct Run {
        t: u64,
        d: u64,
        cpu: u64,
    }

    /// `intervals` of 50 ms at `per` datagrams each, the thread's CPU per datagram being
    /// `nap` or `block` ns as it waits; how many intervals napped.
    fn drive(m: &mut Moderation, r: &mut Run, intervals: u32, per: u64, (nap, block): (u64, u64)) -> u32 {
        let mut napped = 0;
        for _ in 0..intervals {
            let sleeping = matches!(m.pause, Pause::Sleep(_));
            napped += u32::from(sleeping);
            (r.t, r.d, r.cpu) = (r.t + 50_000_000, r.d + per, r.cpu + per * if sleeping { nap } else { block });
            m.update(r.t, r.d, r.cpu);
        }
        napped
    }

    #[test]
    fn a_nap_is_tried_only_where_it_can_gather() {
        let first = |max: u64, per: u64| {
            let mut m = Moderation::new(max, 64, 0, 0);
            assert_eq!(m.pause, Pause::None, "no pause before a rate is known");
            m.update(50_000_000, per, 0);
            m.pause
        };
        // 50 kpps: a batch of 64 takes 1.28 ms: nap, capped at 1 ms.
        assert_eq!(first(1_000_000, 2_500), Pause::Sleep(1_000_000));
        // 200 kpps: a batch takes 320 us: that long.
        assert_eq!(first(1_000_000, 10_000), Pause::Sleep(320_000));
        // 1 Mpps: a batch takes 64 us, less than a sleep costs: block.
        assert_eq!(first(1_000_000, 50_000), Pause::None);
        // A nap capped short by a small buffer (10 us, Linux's default 208 KiB) gathers 0.15
        // datagrams at 14 kpps: not worth its wake-up, so block.
        assert_eq!(first(10_600, 710), Pause::None);
        // The same rate with a 4 MiB buffer's 210 us nap gathers 3: tried.
        assert_eq!(first(210_000, 710), Pause::Sleep(210_000));
        // Coalescing switched off.
        assert_eq!(first(0, 2_500), Pause::None);
    }

    #[test]
    fn the_cheaper_way_of_waiting_is_kept_and_the_other_retried() {
        let mut r = Run::default();
        let mut m = Moderation::new(1_000_000, 64, 0, 0);
        // 14.2 kpps; napping costs 3 us a datagram here, blocking 6 us: napping is kept, and
        // blocking retried one interval in RETRY_EVERY.
        let napped = drive(&mut m, &mut r, 200, 710, (3_000, 6_000));
        assert!((185..=195).contains(&napped), "napped {napped} of 200");
        // The host changes: napping now costs twice what blocking does. Within a few retries
        // blocking is kept.
        drive(&mut m, &mut r, 100, 710, (12_000, 6_000));
        let napped = drive(&mut m, &mut r, 200, 710, (12_000, 6_000));
        assert!((5..=15).contains(&napped), "napped {napped} of 200");
        // A rate that swings threefold from interval to interval still compares the two.
        let swing = |m: &mut Moderation, r: &mut Run| -> u32 {
            (0..100).map(|i| drive(m, r, 1, if i % 2 == 0 { 710 } else { 2_130 }, (12_000, 6_000))).sum()
        };
        let napped = swing(&mut m, &mut r);
        assert!(napped <= 10, "napped {napped} of 100");
        // The rate moves sevenfold: costs booked at the old rate are forgotten, and a nap is
        // tried again (the interval the new rate arrives in is booked to blocking, which is
        // then known at it).
        drive(&mut m, &mut r, 1, 14_200, (12_000, 6_000));
        assert!(matches!(m.pause, Pause::Sleep(_)), "{:?}", m.pause);
    }
}
