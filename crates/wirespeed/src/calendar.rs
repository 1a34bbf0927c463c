//! Calendar arithmetic on UTC days: the one place that turns civil dates into day counts and
//! back.
//!
//! Time-stamped wire formats count their seconds from calendar dates (VDIF reference epochs are
//! 1 January and 1 July, Mark5B headers carry a Modified Julian Date), and recordings name their
//! files by the UTC time they were opened. Both directions of the proleptic Gregorian calendar
//! are Howard Hinnant's branch-light algorithms; days are 86400 seconds (no leap seconds: Unix
//! time has none either).

/// Seconds in a calendar day.
pub const DAY_SECS: u64 = 86_400;

/// Unix time of 2000-01-01 00:00:00 UTC, the origin of VDIF reference epochs.
pub const UNIX_2000: u64 = 946_684_800;

/// Modified Julian Date of 1970-01-01, the Unix epoch (Mark5B headers carry MJDs).
pub const MJD_UNIX_EPOCH: i64 = 40_587;

/// Days from 1970-01-01 to the civil date `y-m-d` (proleptic Gregorian; negative before 1970).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let (m, d) = (i64::from(m), i64::from(d));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date `(year, month, day)` of the day `days` after 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m, d)
}

/// Calendar date and time of day of a Unix time in seconds: (year, month, day, hour, minute,
/// second).
pub fn civil(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let (y, m, d) = civil_from_days((secs / DAY_SECS) as i64);
    let rem = secs % DAY_SECS;
    (y, m, d, (rem / 3600) as u32, ((rem / 60) % 60) as u32, (rem % 60) as u32)
}

/// UTC calendar time of a Unix time in nanoseconds: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn utc_iso(unix_ns: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(unix_ns / 1_000_000_000);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z", (unix_ns / 1_000_000) % 1000)
}

/// Compact UTC time for file names: `YYYYMMDDTHHMMSSZ`.
pub fn utc_compact(unix_ns: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(unix_ns / 1_000_000_000);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_directions_agree_over_four_centuries() {
        // Every day from 1800 to 2400 (leap centuries 2000 and 2400, non-leap 1900 and 2100).
        let (from, to) = (days_from_civil(1800, 1, 1), days_from_civil(2400, 12, 31));
        let mut prev = civil_from_days(from - 1);
        for days in from..=to {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
            assert!((y, m, d) > prev, "dates increase: {prev:?} then {y}-{m}-{d}");
            prev = (y, m, d);
        }
    }

    #[test]
    fn known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 1, 1) as u64 * DAY_SECS, UNIX_2000);
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(days_from_civil(2100, 3, 1) - days_from_civil(2100, 2, 28), 1, "2100 is not a leap year");
        // MJD 51544 is 2000-01-01.
        assert_eq!(MJD_UNIX_EPOCH + days_from_civil(2000, 1, 1), 51_544);
        assert_eq!(civil(UNIX_2000 + 3723), (2000, 1, 1, 1, 2, 3));
    }
}
