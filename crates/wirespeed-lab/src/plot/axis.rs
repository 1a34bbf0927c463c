//! An axis: its range, its ticks and their labels, the same for heat maps and line charts.

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;

/// Tick values for a log axis over `lo..=hi` (both > 0), at most `max_n` of them: 1-2-5 per
/// decade when they fit, else powers of ten (every k-th decade if need be); for a range
/// narrower than a decade, 1..9 x 10^k, and failing that evenly spaced round numbers, so
/// an axis never ends up without labels.
pub(super) fn nice_log_ticks(lo: f64, hi: f64, max_n: usize) -> Vec<f64> {
    if !(lo > 0.0 && hi > lo && hi.is_finite()) {
        return if lo > 0.0 && lo.is_finite() { vec![lo] } else { Vec::new() };
    }
    let max_n = max_n.max(2);
    let (e0, e1) = (lo.log10().floor() as i32 - 1, hi.log10().ceil() as i32 + 1);
    let with = |mantissas: &[f64], every: i32| -> Vec<f64> {
        let mut out = Vec::new();
        for e in (e0..=e1).filter(|e| e.rem_euclid(every) == 0) {
            for m in mantissas {
                let v = m * 10f64.powi(e);
                if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                    out.push(v);
                }
            }
        }
        out
    };
    let one_two_five = with(&[1.0, 2.0, 5.0], 1);
    let chosen = if one_two_five.len() <= max_n {
        one_two_five
    } else {
        (1..=e1 - e0 + 1).map(|every| with(&[1.0], every)).find(|t| t.len() <= max_n).unwrap_or_default()
    };
    if chosen.len() >= 3 {
        return chosen;
    }
    let all_digits = with(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 1);
    if all_digits.len() >= 2 && all_digits.len() <= max_n {
        return all_digits;
    }
    if chosen.len() >= 2 {
        return chosen;
    }
    nice_linear_ticks(lo, hi, max_n.min(5))
}

/// Round-number ticks over `lo..=hi` with a 1-2-5 step, about `n` of them.
fn nice_linear_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = hi - lo;
    if !(span > 0.0 && span.is_finite()) {
        return Vec::new();
    }
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).take(50).map(|k| k as f64 * step).collect()
}

/// A tick label: up to 6 significant digits, no trailing zeros, thousands separated
/// ("1,000", "0.5", "12.5"), so axis labels read like the numbers in the subtitle.
pub(super) fn fmt_tick(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let a = v.abs();
    if !(1e-4..1e15).contains(&a) {
        return fmt_exp(v);
    }
    let decimals = (5 - a.log10().floor() as i32).clamp(0, 10) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    let (sign, s) = s.strip_prefix('-').map_or(("", s.as_str()), |r| ("-", r));
    let (int, frac) = s.split_once('.').map_or((s, None), |(i, f)| (i, Some(f)));
    let int = group_thousands(int);
    let out = match frac {
        Some(f) => format!("{sign}{int}.{f}"),
        None => format!("{sign}{int}"),
    };
    if out == "-0" {
        "0".to_string()
    } else {
        out
    }
}

/// A count for the colour bar: grouped digits up to 9,999,999, then "1.23e7" so the label
/// stays inside the bar's margin.
pub(super) fn fmt_count(v: u64) -> String {
    if v < 10_000_000 {
        group_thousands(&v.to_string())
    } else {
        fmt_exp(v as f64)
    }
}

/// Scientific notation with at most 3 significant digits and no trailing zeros: "1e-5",
/// "2.5e12".
fn fmt_exp(v: f64) -> String {
    let s = format!("{v:.2e}");
    match s.split_once('e') {
        Some((m, e)) if m.contains('.') => format!("{}e{e}", m.trim_end_matches('0').trim_end_matches('.')),
        _ => s,
    }
}

fn group_thousands(digits: &str) -> String {
    if digits.len() <= 3 {
        return digits.to_string();
    }
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Round ticks over `lo..=hi`, about `n` of them; whole numbers only when `integer` (counts).
pub(super) fn linear_ticks(lo: f64, hi: f64, n: usize, integer: bool) -> Vec<f64> {
    let mut ticks = nice_linear_ticks(lo, hi, n);
    if integer {
        ticks.retain(|t| t.fract() == 0.0);
        if ticks.len() < 2 {
            ticks = vec![lo.ceil(), hi.floor()];
            ticks.dedup();
        }
    }
    ticks
}

/// A linear axis with the tick values we chose (whole numbers for counts): plotters'
/// `with_key_points` gives a plain f64 axis no label formatter.
pub(super) struct Ticked {
    pub(super) inner: RangedCoordf64,
    pub(super) ticks: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

impl ValueFormatter<f64> for Ticked {
    fn format(value: &f64) -> String {
        fmt_tick(*value)
    }
}

/// The range of a linear y axis for `values` (and the band, if any, which must show whole).
///
/// Rates, counts, percentages and CPU times are never negative, and for them the axis starts at
/// zero: the height of a line is then its size, and a steady 942 Mb/s with minutes that differ
/// by 0.15 % is a flat line near the top, not a saw-tooth filling the plot (which is what an axis
/// fitted to the data, 941.3 to 942.6, drew). All zero gives 0 to 1, so "nothing lost" is a line
/// on the bottom axis with 1 above it. Only data that goes below zero gets an axis fitted to it.
pub fn linear_y_range(values: impl Iterator<Item = f64>, band: Option<(f64, f64)>) -> (f64, f64) {
    let finite = values.filter(|v| v.is_finite());
    let band = band.filter(|(a, b)| a.is_finite() && b.is_finite());
    let span = axis_span_opt(finite.chain(band.into_iter().flat_map(|(a, b)| [a, b])));
    padded_linear(span)
}

/// The full span of `values`, widened when it is empty or a single point so an axis can
/// still be drawn.
pub(super) fn axis_span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if !(lo.is_finite() && hi.is_finite()) {
        (0.0, 1.0)
    } else if lo < hi {
        (lo, hi)
    } else {
        let pad = (lo.abs() * 0.1).max(0.5);
        (lo - pad, hi + pad)
    }
}

pub(super) fn axis_span_opt(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
    })
}

/// A linear axis range around the data with 5 % headroom, from 0 whenever the data is
/// non-negative (see [`linear_y_range`]); all zero gives 0 to 1.
pub(super) fn padded_linear(span: Option<(f64, f64)>) -> (f64, f64) {
    let Some((lo, hi)) = span else { return (0.0, 1.0) };
    if lo >= 0.0 {
        if hi <= 0.0 {
            // All zero (a loss curve of a clean run): 0..1, not ticks around -0.5..0.5.
            return (0.0, 1.0);
        }
        return (0.0, hi * 1.05);
    }
    if lo >= hi {
        return axis_span([lo, hi].into_iter());
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad, if hi == 0.0 { 0.0 } else { hi + pad })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_are_round_and_never_empty() {
        assert_eq!(nice_log_ticks(1.0, 1000.0, 20), vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(nice_log_ticks(1.0, 1e6, 8), vec![1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]);
        assert_eq!(nice_log_ticks(30.0, 80.0, 10), vec![30.0, 40.0, 50.0, 60.0, 70.0, 80.0]);
        assert!(nice_log_ticks(41.0, 44.0, 10).len() >= 2);
        assert!(nice_log_ticks(1.0, 1e12, 4).len() <= 4);
        assert!(nice_log_ticks(5.0, 5.0, 4).len() <= 1);
    }

    #[test]
    fn tick_labels_read_like_numbers() {
        assert_eq!(fmt_tick(1000.0), "1,000");
        assert_eq!(fmt_tick(0.5), "0.5");
        assert_eq!(fmt_tick(0.30000000000000004), "0.3");
        assert_eq!(fmt_tick(12.5), "12.5");
        assert_eq!(fmt_tick(-2500.0), "-2,500");
        assert_eq!(fmt_tick(100000.0), "100,000");
        assert_eq!(fmt_count(1234567), "1,234,567");
        assert_eq!(fmt_count(12_345_678), "1.23e7");
        assert_eq!(fmt_tick(1e-5), "1e-5");
        assert_eq!(fmt_tick(1.0000000006e202), "1e202");
        assert_eq!(fmt_tick(-2.5e20), "-2.5e20");
    }

    #[test]
    fn counts_get_whole_number_ticks() {
        assert_eq!(linear_ticks(0.0, 1.0, 10, true), vec![0.0, 1.0]);
        assert_eq!(linear_ticks(0.0, 3.15, 10, true), vec![0.0, 1.0, 2.0, 3.0]);
        assert!(linear_ticks(0.0, 1.0, 10, false).len() > 2);
    }

    #[test]
    fn a_steady_rate_is_drawn_from_zero_not_zoomed_into_its_wobble() {
        // The 30-minute soak at 942 Mb/s: every minute within 0.15 %. Fitted to the data the
        // axis ran from 941.3 to 942.6 and a steady run looked like a saw-tooth.
        let minutes = [941.3, 942.6, 941.8, 942.4, 941.5, 942.1];
        assert_eq!(padded_linear(Some((941.3, 942.6))).0, 0.0);
        let (lo, hi) = linear_y_range(minutes.iter().copied(), None);
        assert_eq!(lo, 0.0);
        assert!((942.6..=942.6 * 1.06).contains(&hi), "{hi}");
        assert!((942.6 - 941.3) / (hi - lo) < 0.002);
        // The band (98-100 % of 942) is shown whole, on the same axis from 0.
        let (lo, hi) = linear_y_range(minutes.iter().copied(), Some((923.16, 960.0)));
        assert_eq!(lo, 0.0);
        assert!(hi >= 960.0, "{hi}");
        // All zero (nothing lost): 0 to 1. Nothing: 0 to 1. Non-finite values are ignored.
        assert_eq!(linear_y_range([0.0, 0.0].into_iter(), None), (0.0, 1.0));
        assert_eq!(linear_y_range(std::iter::empty(), None), (0.0, 1.0));
        assert_eq!(linear_y_range([f64::NAN, 5.0].into_iter(), None).0, 0.0);
        // Only data below zero gets an axis fitted to it.
        let (lo, hi) = linear_y_range([-5.0, 5.0].into_iter(), None);
        assert!(lo < -5.0 && hi > 5.0);
    }
}
