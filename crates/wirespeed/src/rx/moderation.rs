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
pub(super) struct Moderation {
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

    /// Fewest datagrams a nap must gather, at the measured rate, to be worth its own wake-up
    /// (one nap and one receive call then serve them, where blocking would wake once per
    /// datagram).
    pub(super) const GATHER_MIN: f64 = 2.0;

    pub(super) fn new(max_sleep_ns: u64, batch: usize, t0: u64) -> Self {
        // No pause until the rate is known.
        Moderation { max_sleep_ns, batch, pause: Pause::None, rate_t: t0, rate_d: 0 }
    }

    pub(super) fn update(&mut self, now: u64, datagrams: u64) {
        let arrived = datagrams - self.rate_d;
        let elapsed = now.saturating_sub(self.rate_t) as f64;
        (self.rate_t, self.rate_d) = (now, datagrams);
        self.pause = if self.max_sleep_ns == 0 || arrived == 0 {
            Pause::None
        } else {
            let per_ns = arrived as f64 / elapsed.max(1.0);
            let fill_ns = self.batch as f64 / per_ns;
            let nap = fill_ns.min(self.max_sleep_ns as f64);
            if fill_ns >= Self::SLEEP_MIN_NS && nap * per_ns >= Self::GATHER_MIN {
                Pause::Sleep(nap as u64)
            } else {
                Pause::None
            }
        };
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
        // A nap capped short by a small buffer (10 us, Linux's default 208 KiB) gathers 0.15
        // datagrams at 14 kpps: not worth its wake-up, so block.
        let mut small = Moderation::new(10_600, 64, 0);
        small.update(50_000_000, 710);
        assert_eq!(small.pause, Pause::None);
        // The same rate with a 4 MiB buffer's 210 us nap gathers 3: nap.
        let mut big = Moderation::new(210_000, 64, 0);
        big.update(50_000_000, 710);
        assert_eq!(big.pause, Pause::Sleep(210_000));
        // Coalescing switched off.
        let mut off = Moderation::new(0, 64, 0);
        off.update(50_000_000, 2_500);
        assert_eq!(off.pause, Pause::None);
    }
}
