//! The small figures every benchmark report shares: the middle of repeated runs, and a rate
//! written in Mb/s. One home, so a sweep, a comparison, a soak and the rates table take the
//! same median and print the same number the same way.

/// The median of the finite values in `v` (the mean of the middle two for an even count);
/// `None` for none. Repeats of a point are summarised by it: one disturbed run moves the mean,
/// not the median.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// The middle of the finite values in `v`, the upper of the two for an even count: a figure
/// one run really measured (a percentile or a CPU time averaged across runs would be a value no
/// run had). `None` for none.
pub fn upper_median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// The median of several zero-loss searches' results, a search that found nothing counting
/// lowest; with an even count the lower middle, so a zero-loss claim is never rounded up
/// (unlike [`median`], which averages the middle two).
pub fn lower_median(results: &[Option<f64>]) -> Option<f64> {
    if results.is_empty() {
        return None;
    }
    let mut v: Vec<Option<f64>> = results.to_vec();
    v.sort_by(|a, b| match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(x), Some(y)) => x.total_cmp(y),
    });
    v[(v.len() - 1) / 2]
}

/// Mb/s in prose, with no needless decimals: `942`, `691`, `20.5` ("asked 942 Mb/s").
pub fn mbps(bps: f64) -> String {
    let v = bps / 1e6;
    if (v - v.round()).abs() < 0.05 {
        format!("{:.0}", v.round())
    } else {
        format!("{v:.1}")
    }
}

/// Mb/s in a table column: whole numbers from 100 up, one decimal below (`942`, `20.0`), so
/// the figures of a column have the same shape whether or not they happen to be round.
pub fn mbps_column(bps: f64) -> String {
    let v = bps / 1e6;
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_median_is_a_value_some_run_had() {
        assert_eq!(upper_median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(upper_median(vec![70.0, 100.0]), Some(100.0));
        assert_eq!(upper_median(vec![f64::NAN, 5.0]), Some(5.0));
        assert_eq!(upper_median(vec![]), None);
    }

    #[test]
    fn rates_read_as_written() {
        assert_eq!(mbps(942e6), "942");
        assert_eq!(mbps(941.98e6), "942");
        assert_eq!(mbps(20.5e6), "20.5");
        assert_eq!(mbps_column(942.3e6), "942");
        assert_eq!(mbps_column(20e6), "20.0");
        assert_eq!(median(vec![3.0, f64::NAN, 1.0, 2.0]), Some(2.0));
    }
}
