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

/// A UTC time written as ISO 8601: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.fraction]]` (a space
/// may stand for the `T`), then `Z`, nothing (UTC too) or an offset `+HH:MM`/`-HH:MM`; in
/// nanoseconds since the Unix epoch. Every field is range-checked: a date that does not exist
/// is refused, never rolled over.
pub fn parse_utc(s: &str) -> Result<u64, String> {
    let bad = |why: &str| {
        format!("{s:?} is not a UTC time ({why}): write e.g. 2026-11-29T14:03:10Z or 2026-11-29T14:03:10.25Z")
    };
    let t = s.trim();
    let (date, rest) = match t.find(['T', 't', ' ']) {
        Some(i) => (&t[..i], &t[i + 1..]),
        None => (t, ""),
    };
    let num = |x: &str, len: usize, what: &str| -> Result<u32, String> {
        if x.len() != len || !x.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(&format!("{what} must be {len} digits")));
        }
        x.parse::<u32>().map_err(|_| bad(what))
    };
    let mut d = date.split('-');
    let (Some(y), Some(mo), Some(da), None) = (d.next(), d.next(), d.next(), d.next()) else {
        return Err(bad("the date is YYYY-MM-DD"));
    };
    let (y, mo, da) = (num(y, 4, "the year")?, num(mo, 2, "the month")?, num(da, 2, "the day")?);
    if !(1970..=2200).contains(&y) || !(1..=12).contains(&mo) || da == 0 {
        return Err(bad("no such date"));
    }
    let days = days_from_civil(i64::from(y), mo, da);
    if civil_from_days(days) != (i64::from(y), mo, da) {
        return Err(bad("no such date"));
    }
    // The time of day, then the zone.
    let (clock, zone_s) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let mut ns: u64 = 0;
    if !clock.is_empty() {
        let (hms, frac) = match clock.split_once('.') {
            Some((a, b)) => (a, Some(b)),
            None => (clock, None),
        };
        let mut p = hms.split(':');
        let h = num(p.next().unwrap_or(""), 2, "the hour")?;
        let mi = num(p.next().ok_or_else(|| bad("the time is HH:MM[:SS]"))?, 2, "the minute")?;
        let se = match p.next() {
            Some(x) => num(x, 2, "the second")?,
            None => 0,
        };
        if p.next().is_some() || h > 23 || mi > 59 || se > 60 {
            return Err(bad("no such time of day"));
        }
        ns = (u64::from(h) * 3600 + u64::from(mi) * 60 + u64::from(se)) * 1_000_000_000;
        if let Some(f) = frac {
            if f.is_empty() || f.len() > 9 || !f.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("the fraction of the second is 1 to 9 digits"));
            }
            ns += f.parse::<u64>().map_err(|_| bad("fraction"))? * 10u64.pow(9 - f.len() as u32);
        }
    } else if !zone_s.is_empty() {
        return Err(bad("a zone needs a time of day"));
    }
    let offset_s: i64 = match zone_s {
        "" | "Z" | "z" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            let (h, m) = z[1..].split_once(':').unwrap_or((&z[1..], "00"));
            let (h, m) = (num(h, 2, "the zone's hours")?, num(m, 2, "the zone's minutes")?);
            if h > 14 || m > 59 {
                return Err(bad("no such zone offset"));
            }
            sign * (i64::from(h) * 3600 + i64::from(m) * 60)
        }
    };
    let secs = days * DAY_SECS as i64 - offset_s;
    u64::try_from(secs).map(|s| s * 1_000_000_000 + ns).map_err(|_| bad("before 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times_parse_and_impossible_ones_are_refused() {
        assert_eq!(parse_utc("2026-11-22T12:34:56.789Z"), Ok(1_795_350_896_789_000_000));
        assert_eq!(parse_utc("2026-11-22 12:34:56.789"), Ok(1_795_350_896_789_000_000));
        assert_eq!(parse_utc("2026-11-22T13:34:56.789+01:00"), Ok(1_795_350_896_789_000_000));
        assert_eq!(parse_utc("2026-11-22T12:34Z"), Ok(1_795_350_840_000_000_000));
        assert_eq!(parse_utc("1970-01-01"), Ok(0));
        assert_eq!(parse_utc("2000-02-29T00:00:00.000000001Z"), Ok(951_782_400_000_000_001));
        for bad in [
            "",
            "now",
            "2026-02-29",
            "2026-13-01",
            "2026-11-22T24:00",
            "2026-11-22T12:34:56.",
            "26-11-22",
            "2026-11-22T12:34:56.1234567890Z",
            "2026-11-22T12:34:56+15:00",
            "1969-12-31T23:59:59Z",
            "2026-11-22T1:2:3",
        ] {
            assert!(parse_utc(bad).is_err(), "{bad}");
        }
    }

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
