//! Property tests of the stream ledger: exact loss accounting under random
//! loss, reordering and duplication; agreement with a simple reference model;
//! and independence from where a (wrapping) counter starts.

use std::collections::{BTreeSet, HashSet};

use proptest::prelude::*;
use wirespeed::ledger::{GapRange, LedgerConfig, LedgerCounts, Outcome, Segment, SenderEnd, StreamLedger};

/// Every number the ranges stand for, in order, masked to the counter width.
fn expand(gaps: &[GapRange], mask: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for r in gaps {
        assert!(r.count > 0);
        assert_eq!(r.first.wrapping_add(r.count - 1) & mask, r.last, "{r:?}");
        out.extend((0..r.count).map(|k| r.first.wrapping_add(k) & mask));
    }
    out
}

/// A stream of `0..n` with losses, bounded reordering and duplicates, as the
/// arrival order plus what an observer knows about it.
#[derive(Debug)]
struct Scenario {
    n: u64,
    window: u64,
    arrivals: Vec<u64>,
    deleted: Vec<u64>,
    duplicates: u64,
}

/// Per number: (roll for deletion, reorder jitter, roll for duplication,
/// duplicate's jitter). Jitters are below the window, so no packet is ever
/// older than the window when it arrives: a packet `u` seen before `v` has
/// `u + j_u <= v + j_v`, hence `u - v < window`.
fn scenario() -> impl Strategy<Value = Scenario> {
    (1u64..5000, 0u32..=8, 0u8..40, 0u8..15)
        .prop_flat_map(|(n, k, del_pct, dup_pct)| {
            let window = 1u64 << k;
            let elem = (0u8..100, 0..window, 0u8..100, 0..window);
            (
                Just((n, window, del_pct, dup_pct)),
                prop::collection::vec(elem, n as usize),
                prop::collection::vec((0..n, 0u64..400), 0..4),
            )
        })
        .prop_map(|((n, window, del_pct, dup_pct), elems, runs)| {
            let mut deleted = BTreeSet::new();
            for (i, e) in elems.iter().enumerate() {
                if e.0 < del_pct {
                    deleted.insert(i as u64);
                }
            }
            for (start, len) in runs {
                deleted.extend(start..(start + len).min(n));
            }
            let mut keyed = Vec::new();
            let mut duplicates = 0;
            for (i, e) in elems.iter().enumerate() {
                let v = i as u64;
                if deleted.contains(&v) {
                    continue;
                }
                keyed.push((v + e.1, v));
                if e.2 < dup_pct {
                    keyed.push((v + e.3, v));
                    duplicates += 1;
                }
            }
            keyed.sort_by_key(|k| k.0);
            Scenario {
                n,
                window,
                arrivals: keyed.into_iter().map(|k| k.1).collect(),
                deleted: deleted.into_iter().collect(),
                duplicates,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn loss_reorder_and_duplicates_are_exact(sc in scenario()) {
        let cfg = LedgerConfig { window: sc.window, ..LedgerConfig::default() };
        let mut l = StreamLedger::new(&cfg);
        let mut seen = HashSet::new();
        let mut max = None;
        let mut late = 0;
        for &v in &sc.arrivals {
            let o = l.record(v);
            prop_assert!(!matches!(o, Outcome::Stale | Outcome::Suspect | Outcome::Resync), "{o:?}");
            if seen.insert(v) {
                if max.is_some_and(|m| v < m) {
                    late += 1;
                }
                max = max.max(Some(v));
            }
        }
        l.finish(Some(SenderEnd { first: 0, last: sc.n - 1 }));
        let deleted = sc.deleted.len() as u64;
        let c = l.counts();
        prop_assert_eq!(c, LedgerCounts {
            received: sc.n - deleted,
            lost: deleted,
            late,
            duplicate: sc.duplicates,
            ..LedgerCounts::default()
        });
        prop_assert_eq!(expand(l.gaps(), u64::MAX), sc.deleted.clone());
        prop_assert_eq!(l.segments(), vec![Segment {
            first: 0,
            last: sc.n - 1,
            received: sc.n - deleted,
            lost: deleted,
        }]);
    }

    /// The same scenario shifted anywhere on an 8-, 16-, 32- or 64-bit counter
    /// (so it may wrap, possibly many times) gives the same outcomes, counts
    /// and shifted ranges as the unshifted run on a 64-bit counter.
    #[test]
    fn counter_width_and_start_do_not_matter(
        bits in prop::sample::select(vec![8u32, 16, 32, 64]),
        offset in any::<u64>(),
        steps in prop::collection::vec((0u8..100, 0u64..32, 0u64..40), 1..3000),
    ) {
        // Bounded reordering (< 32) and jumps (< 72), so every distance stays
        // well inside half of an 8-bit counter; a few jumps exceed max_gap.
        let mut keyed = Vec::new();
        let mut v = 0u64;
        for (i, &(roll, jitter, run)) in steps.iter().enumerate() {
            if roll < 5 {
                v += run;
            } else if roll < 15 {
                v += 1;
            }
            keyed.push((v + jitter, v, i));
            v += 1;
        }
        keyed.sort();
        let base = LedgerConfig { window: 32, max_gap: 63, ..LedgerConfig::default() };
        let wide = LedgerConfig { seq_bits: 64, ..base.clone() };
        let narrow = LedgerConfig { seq_bits: bits, ..base };
        let mask = u64::MAX >> (64 - bits);
        let mut a = StreamLedger::new(&wide);
        let mut b = StreamLedger::new(&narrow);
        prop_assert_eq!((b.config().window, b.config().max_gap), (32, 63));
        for &(_, v, _) in &keyed {
            let oa = a.record(v);
            let ob = b.record(v.wrapping_add(offset));
            prop_assert_eq!(oa, ob);
            prop_assert_eq!(a.counts(), b.counts());
            prop_assert_eq!(a.pending_lost(), b.pending_lost());
        }
        a.finish(None);
        b.finish(None);
        prop_assert_eq!(a.counts(), b.counts());
        let shift = |g: &GapRange| GapRange {
            first: g.first.wrapping_add(offset) & mask,
            last: g.last.wrapping_add(offset) & mask,
            count: g.count,
        };
        prop_assert_eq!(a.gaps().iter().map(shift).collect::<Vec<_>>(), b.gaps().to_vec());
        let shift_seg = |s: &Segment| Segment {
            first: s.first.wrapping_add(offset) & mask,
            last: s.last.wrapping_add(offset) & mask,
            ..*s
        };
        prop_assert_eq!(a.segments().iter().map(shift_seg).collect::<Vec<_>>(), b.segments());
    }
}

/// Reference ledger: the contract written as plainly as possible, with sets
/// and exact integers, for small non-negative numbers on a 64-bit counter.
struct Model {
    window: i128,
    max_gap: i128,
    counts: LedgerCounts,
    cur: Option<ModelSeg>,
    closed: Vec<(Segment, Vec<GapRange>)>,
    pending: Option<(i128, bool)>,
    /// The previous segment's highest number and how many packets its stragglers are watched.
    prev: Option<(i128, i128)>,
    finished: bool,
}

struct ModelSeg {
    first: i128,
    highest: i128,
    received: BTreeSet<i128>,
}

impl ModelSeg {
    fn new(first: i128) -> Self {
        ModelSeg { first, highest: first, received: BTreeSet::from([first]) }
    }

    /// Unreceived numbers in `lo..=hi`, restricted to the segment.
    fn holes(&self, lo: i128, hi: i128) -> Vec<i128> {
        (lo.max(self.first)..=hi).filter(|p| !self.received.contains(p)).collect()
    }

    /// Maximal runs of unreceived numbers between first and highest.
    fn ranges(&self) -> Vec<GapRange> {
        let mut out: Vec<GapRange> = Vec::new();
        for p in self.holes(self.first, self.highest) {
            let p = p as u64;
            match out.last_mut() {
                Some(r) if r.last + 1 == p => {
                    r.last = p;
                    r.count += 1;
                }
                _ => out.push(GapRange { first: p, last: p, count: 1 }),
            }
        }
        out
    }

    fn segment(&self) -> Segment {
        Segment {
            first: self.first as u64,
            last: self.highest as u64,
            received: self.received.len() as u64,
            lost: self.holes(self.first, self.highest).len() as u64,
        }
    }
}

impl Model {
    fn new(cfg: &LedgerConfig) -> Self {
        Model {
            window: i128::from(cfg.window),
            max_gap: i128::from(cfg.max_gap),
            counts: LedgerCounts::default(),
            cur: None,
            closed: Vec::new(),
            pending: None,
            prev: None,
            finished: false,
        }
    }

    /// The ledger's straggler rule, written out plainly: within a window of the previous
    /// segment's end, outside the current segment, nearer to the old end than to the current.
    fn straggler(&mut self, old: i128, v: i128) -> bool {
        let cur = self.cur.as_ref().expect("started");
        if (old - v).abs() >= self.window {
            return false;
        }
        if (0..self.window).contains(&(old - cur.highest)) {
            self.prev = None;
            return false;
        }
        let d = v - cur.highest;
        let to_new = if 1 <= d && d <= self.max_gap {
            d
        } else if -self.window < d && d <= 0 {
            if v >= cur.first {
                return false;
            }
            cur.first - v
        } else {
            i128::MAX
        };
        (old - v).abs() < to_new
    }

    fn record(&mut self, seq: u64) -> Outcome {
        let v = i128::from(seq);
        if self.finished {
            self.counts.stale += 1;
            return Outcome::Stale;
        }
        let Some(cur) = self.cur.as_mut() else {
            self.cur = Some(ModelSeg::new(v));
            self.counts.received += 1;
            return Outcome::First;
        };
        if let Some((x, backward)) = self.pending.take() {
            if v == x + 1 {
                if backward {
                    self.counts.stale -= 1;
                } else {
                    self.counts.stray -= 1;
                }
                self.closed.push((cur.segment(), cur.ranges()));
                self.prev = Some((cur.highest, self.window));
                let mut seg = ModelSeg::new(x);
                seg.received.insert(v);
                seg.highest = v;
                self.cur = Some(seg);
                self.counts.received += 2;
                self.counts.resync += 1;
                return Outcome::Resync;
            }
        }
        let mut d = v - cur.highest;
        if let Some((old, left)) = self.prev {
            self.prev = (left > 1).then_some((old, left - 1));
            if d != 1 && self.straggler(old, v) {
                self.counts.stale += 1;
                return Outcome::Stale;
            }
        }
        let cur = self.cur.as_mut().expect("started");
        d = v - cur.highest;
        if 1 <= d && d <= self.max_gap {
            cur.received.insert(v);
            cur.highest = v;
            self.counts.received += 1;
            return if d == 1 { Outcome::InOrder } else { Outcome::Gap { missing: (d - 1) as u64 } };
        }
        if -self.window < d && d <= 0 {
            if !cur.received.insert(v) {
                self.counts.duplicate += 1;
                return Outcome::Duplicate;
            }
            cur.first = cur.first.min(v);
            self.counts.received += 1;
            self.counts.late += 1;
            return Outcome::Late;
        }
        self.pending = Some((v, d < 0));
        if d < 0 {
            self.counts.stale += 1;
            Outcome::Stale
        } else {
            self.counts.stray += 1;
            Outcome::Suspect
        }
    }

    /// Settled loss: closed segments plus what left the current window.
    fn counts(&self) -> LedgerCounts {
        let mut c = self.counts;
        c.lost += self.closed.iter().map(|s| s.0.lost).sum::<u64>();
        if let Some(cur) = &self.cur {
            if !self.finished {
                c.lost += cur.holes(cur.first, cur.highest - self.window).len() as u64;
            }
        }
        c
    }

    fn pending_lost(&self) -> u64 {
        match &self.cur {
            Some(cur) if !self.finished => cur.holes(cur.highest - self.window + 1, cur.highest).len() as u64,
            _ => 0,
        }
    }

    fn finish(&mut self, sender: Option<SenderEnd>) {
        self.finished = true;
        self.pending = None;
        match (self.cur.take(), sender) {
            (Some(cur), sender) => {
                let mut seg = cur.segment();
                let mut ranges = cur.ranges();
                if let Some(s) = sender {
                    if s.last > seg.last {
                        ranges.push(GapRange { first: seg.last + 1, last: s.last, count: s.last - seg.last });
                        seg.lost += s.last - seg.last;
                        seg.last = s.last;
                    }
                    if s.first < seg.first {
                        ranges.insert(0, GapRange { first: s.first, last: seg.first - 1, count: seg.first - s.first });
                        seg.lost += seg.first - s.first;
                        seg.first = s.first;
                    }
                }
                self.closed.push((seg, ranges));
            }
            (None, Some(s)) => {
                let count = s.last.wrapping_sub(s.first).saturating_add(1);
                let range = GapRange { first: s.first, last: s.last, count };
                let seg = Segment { first: s.first, last: s.last, received: 0, lost: count };
                self.closed.push((seg, vec![range]));
            }
            (None, None) => {}
        }
    }
}

/// Small numbers: a random walk with small steps back and forth, wild values
/// and occasional restarts (a wild value followed by its successor).
fn model_seqs() -> impl Strategy<Value = Vec<u64>> {
    let walk = prop::collection::vec((0u8..100, -8i64..16, 0u64..400), 0..300).prop_map(|steps| {
        let mut v: i64 = 0;
        let mut out = Vec::new();
        for (kind, delta, big) in steps {
            match kind {
                0..=84 => {
                    v = (v + delta).max(0);
                    out.push(v as u64);
                }
                85..=94 => out.push(big),
                _ => {
                    out.extend([big, big + 1]);
                    v = big as i64 + 1;
                }
            }
        }
        out
    });
    prop_oneof![prop::collection::vec(0u64..120, 0..200), walk]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn agrees_with_reference_model(
        k in 0u32..5,
        max_gap in 1u64..40,
        seqs in model_seqs(),
        sender in prop::option::of((0u64..300, 0u64..300)),
        after in prop::collection::vec(0u64..300, 0..3),
    ) {
        let cfg = LedgerConfig {
            window: 1 << k,
            max_gap,
            max_ranges: 100_000,
            max_segments: 100_000,
            ..LedgerConfig::default()
        };
        let mut l = StreamLedger::new(&cfg);
        let mut m = Model::new(&cfg);
        for &s in &seqs {
            prop_assert_eq!(l.record(s), m.record(s), "seq {}", s);
            prop_assert_eq!(l.counts(), m.counts());
            prop_assert_eq!(l.pending_lost(), m.pending_lost());
            prop_assert_eq!(l.highest(), m.cur.as_ref().map(|c| c.highest as u64));
            prop_assert_eq!(l.first_seen(), m.cur.as_ref().map(|c| c.first as u64));
        }
        let sender = sender.map(|(first, last)| SenderEnd { first, last });
        l.finish(sender);
        m.finish(sender);
        l.finish(sender);
        for &s in &after {
            prop_assert_eq!(l.record(s), m.record(s));
        }
        prop_assert_eq!(l.counts(), m.counts());
        let segs: Vec<Segment> = m.closed.iter().map(|s| s.0).collect();
        let gaps: Vec<GapRange> = m.closed.iter().flat_map(|s| s.1.clone()).collect();
        prop_assert_eq!(l.segments(), segs);
        prop_assert_eq!(l.gaps(), &gaps[..]);
        prop_assert_eq!(l.counts().lost, gaps.iter().map(|g| g.count).sum::<u64>());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A sender restarts (back to 0, or far ahead) while a few packets of its old run's last
    /// window, its tail included, are still in flight and arrive among the new run's first
    /// packets. They belong to the old run: they count as stale, the new run books no loss,
    /// does not move its start and keeps its highest number.
    #[test]
    fn stragglers_of_a_restarted_run_book_no_phantom_loss(
        n in 300u64..3000,
        m in 2u64..60,
        backward in any::<bool>(),
        delayed in prop::collection::btree_set(0u64..64, 0..8),
        positions in prop::collection::vec(2usize..60, 8),
    ) {
        let cfg = LedgerConfig { window: 64, max_gap: 1 << 20, ..LedgerConfig::default() };
        let held: Vec<u64> = delayed.iter().map(|d| n - 1 - d).collect();
        let start = if backward { 0 } else { n + (1 << 21) };
        let mut arrivals: Vec<u64> = (0..n).filter(|s| !held.contains(s)).collect();
        let old_highest = *arrivals.last().expect("most of the old run arrives");
        let mut new: Vec<u64> = (start..start + m).collect();
        for (i, &h) in held.iter().enumerate() {
            new.insert(positions[i].min(new.len()), h);
        }
        arrivals.extend(new);
        let mut l = StreamLedger::new(&cfg);
        for &s in &arrivals {
            l.record(s);
        }
        prop_assert_eq!(l.first_seen(), Some(start));
        prop_assert_eq!(l.highest(), Some(start + m - 1));
        l.finish(Some(SenderEnd { first: start, last: start + m - 1 }));
        let c = l.counts();
        let lost_in_old = held.iter().filter(|&&h| h < old_highest).count() as u64;
        prop_assert_eq!(c.resync, 1);
        prop_assert_eq!(c.stale, held.len() as u64);
        prop_assert_eq!(c.lost, lost_in_old, "only the old run's held-back numbers below its end");
        prop_assert_eq!(c.received, n - held.len() as u64 + m);
        prop_assert_eq!(l.segments()[1], Segment { first: start, last: start + m - 1, received: m, lost: 0 });
    }
}
