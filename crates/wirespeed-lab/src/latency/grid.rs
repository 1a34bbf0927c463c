//! The heat map's data: packets counted by (time since start, round-trip time), in constant
//! memory for a run of any length.
//!
//! Latency rows are log-spaced, eight per octave (about 9 % wide), from 64 ns to about 69 s,
//! computed from the value's bits with no floating point. Time columns start at a width chosen
//! from the expected duration; when a run outlasts the columns, adjacent pairs are merged and
//! the width doubles, so memory never grows.

/// Rows per octave of latency.
const SUB: u32 = 8;
/// log2 of the lowest row's upper edge (64 ns): faster round trips share row 0.
const MIN_EXP: u32 = 6;
/// log2 of the highest row's upper edge (~69 s): slower ones share the last row.
const MAX_EXP: u32 = 36;
/// Number of latency rows.
pub const ROWS: usize = 1 + ((MAX_EXP - MIN_EXP) * SUB) as usize;
/// Time columns kept before pairs are merged.
pub const COLS: usize = 1024;

/// Counts of packets per (time column, latency row).
#[derive(Clone, Debug)]
pub struct Grid {
    col_ns: u64,
    counts: Vec<u32>,
    used: usize,
    folds: u32,
}

/// The latency row of a round-trip time.
#[inline]
pub fn row_of(ns: u64) -> usize {
    if ns < (1 << MIN_EXP) {
        return 0;
    }
    let e = 63 - ns.leading_zeros();
    if e >= MAX_EXP {
        return ROWS - 1;
    }
    let sub = ((ns >> (e - 3)) & 7) as u32;
    (1 + (e - MIN_EXP) * SUB + sub) as usize
}

/// The latency range `[lo, hi)` in ns of a row (row 0 is drawn from 32 ns).
pub fn row_bounds(row: usize) -> (u64, u64) {
    if row == 0 {
        return (1 << (MIN_EXP - 1), 1 << MIN_EXP);
    }
    let r = (row - 1) as u32;
    let e = MIN_EXP + r / SUB;
    let sub = u64::from(r % SUB);
    ((8 + sub) << (e - 3), (9 + sub) << (e - 3))
}

/// A column width for a run of `expected_ns`: about 600 columns, rounded to 1, 2 or 5 times a
/// power of ten, at least 1 ms.
pub fn column_for(expected_ns: u64) -> u64 {
    let want = (expected_ns / 600).max(1_000_000);
    let mut p = 1u64;
    while p.saturating_mul(10) <= want {
        p *= 10;
    }
    [1u64, 2, 5, 10].iter().map(|m| m * p).find(|&w| w >= want).unwrap_or(10 * p)
}

impl Grid {
    /// All memory up front (COLS x ROWS counters, ~1 MiB), so adding never allocates.
    pub fn new(col_ns: u64) -> Grid {
        Grid { col_ns: col_ns.max(1), counts: vec![0; COLS * ROWS], used: 0, folds: 0 }
    }

    /// Count one packet received `t_ns` after the start with round-trip time `rtt_ns`.
    #[inline]
    pub fn add(&mut self, t_ns: u64, rtt_ns: u64) {
        let mut col = (t_ns / self.col_ns) as usize;
        while col >= COLS {
            self.fold();
            col = (t_ns / self.col_ns) as usize;
        }
        let i = col * ROWS + row_of(rtt_ns);
        self.counts[i] = self.counts[i].saturating_add(1);
        self.used = self.used.max(col + 1);
    }

    /// Merge adjacent column pairs and double the width.
    fn fold(&mut self) {
        for c in 0..COLS / 2 {
            for r in 0..ROWS {
                let v = self.counts[2 * c * ROWS + r].saturating_add(self.counts[(2 * c + 1) * ROWS + r]);
                self.counts[c * ROWS + r] = v;
            }
        }
        self.counts[(COLS / 2) * ROWS..].fill(0);
        self.col_ns *= 2;
        self.used = self.used.div_ceil(2);
        self.folds += 1;
    }

    /// Column width in ns (after any merging).
    pub fn col_ns(&self) -> u64 {
        self.col_ns
    }

    /// Columns holding data (from the start up to the last packet).
    pub fn used_cols(&self) -> usize {
        self.used
    }

    /// How many times columns were merged.
    pub fn folds(&self) -> u32 {
        self.folds
    }

    /// Packets in a cell.
    pub fn count(&self, col: usize, row: usize) -> u32 {
        self.counts[col * ROWS + row]
    }

    /// All packets counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_contiguous_and_monotonic() {
        assert_eq!(row_of(0), 0);
        assert_eq!(row_of(63), 0);
        assert_eq!(row_of(64), 1);
        assert_eq!(row_bounds(1), (64, 72));
        let mut prev = 0;
        for ns in (0..5_000_000u64).step_by(7).chain([u64::MAX, 1 << 40]) {
            let r = row_of(ns);
            assert!(r >= prev || ns == u64::MAX || ns == 1 << 40);
            if r > 0 && r < ROWS - 1 {
                let (lo, hi) = row_bounds(r);
                assert!(lo <= ns && ns < hi, "{ns} in row {r} = [{lo},{hi})");
            }
            prev = r;
        }
        assert_eq!(row_of(u64::MAX), ROWS - 1);
        for r in 1..ROWS - 1 {
            assert_eq!(row_bounds(r).1, row_bounds(r + 1).0);
        }
    }

    #[test]
    fn column_widths_are_round() {
        assert_eq!(column_for(0), 1_000_000);
        assert_eq!(column_for(10_000_000_000), 20_000_000);
        assert_eq!(column_for(60_000_000_000), 100_000_000);
        assert_eq!(column_for(1_800_000_000_000), 5_000_000_000);
    }

    #[test]
    fn folding_keeps_every_count() {
        let mut g = Grid::new(1_000_000);
        for i in 0..5000u64 {
            g.add(i * 1_000_000, 1000 + i);
        }
        assert_eq!(g.total(), 5000);
        assert_eq!(g.folds(), 3);
        assert_eq!(g.col_ns(), 8_000_000);
        assert_eq!(g.used_cols(), 625);
        assert_eq!((0..ROWS).map(|r| u64::from(g.count(0, r))).sum::<u64>(), 8);
    }
}
