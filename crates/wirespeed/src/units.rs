//! Parsing and printing of rates, byte sizes and durations.
//!
//! One place decides what `942M`, `500kpps`, `16M` and `30s` mean, so that every command reads
//! them the same way. Rates are decimal SI (network convention); byte sizes are binary (buffer
//! and file convention: `16M` is 16 MiB). The strings printed here are what tables and
//! summaries show, so that a figure always carries its unit.

use std::fmt;
use std::time::Duration;

/// Bytes a UDP/IPv4 datagram adds on an Ethernet wire beyond its payload: UDP 8, IPv4 20,
/// Ethernet header 14, FCS 4, preamble + SFD 8, minimum inter-frame gap 12.
pub const WIRE_OVERHEAD: usize = 8 + 20 + 14 + 4 + 8 + 12;

/// Largest UDP payload over IPv4: 65535 - 20 (IP) - 8 (UDP).
pub const MAX_UDP_PAYLOAD: usize = 65507;

/// A requested send rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// UDP payload bits per second.
    Bits(f64),
    /// Packets (datagrams) per second.
    Packets(f64),
    /// As fast as the host can send: no pacing.
    Max,
}

/// A number as written: `digits[.digits][e[+-]digits]`, `_` allowed between digits. Kept
/// exact (`mant * 10^exp10`) so that counts and byte sizes are never rounded through a float,
/// and the same grammar serves every kind of value: `1e9` is a rate, a count and a size alike.
#[derive(Clone, Copy, Debug)]
struct Number {
    mant: u128,
    exp10: i32,
    float: f64,
}

/// Why a number could not be used (the caller words the message for its kind).
enum NumErr {
    /// Beyond what the kind can hold.
    TooLarge,
    /// Not a whole number where one is needed.
    Fraction,
}

fn split_number(s: &str) -> Option<(Number, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut text = String::new();
    let (mut mant, mut exp10, mut digits, mut overflow, mut seen_dot) = (0u128, 0i32, 0usize, false, false);
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() {
            digits += 1;
            text.push(c as char);
            match mant.checked_mul(10).and_then(|m| m.checked_add(u128::from(c - b'0'))) {
                Some(m) if !overflow => mant = m,
                _ => {
                    // Digits beyond u128: keep the magnitude, and remember it is no longer exact.
                    overflow = true;
                    exp10 += 1;
                }
            }
            if seen_dot {
                exp10 -= 1;
            }
        } else if c == b'_' && digits > 0 {
        } else if c == b'.' && !seen_dot {
            seen_dot = true;
            text.push('.');
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    // An exponent only when digits follow the `e`, so no unit is mistaken for one.
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let k = j + b[j..].iter().take_while(|c| c.is_ascii_digit()).count();
        if k > j {
            let e: i32 = s[i + 1..k].parse().unwrap_or(if b[i + 1] == b'-' { -100_000 } else { 100_000 });
            let e = e.clamp(-100_000, 100_000);
            exp10 = exp10.saturating_add(e);
            text.push_str(&s[i..k]);
            i = k;
        }
    }
    let float: f64 = text.parse().ok()?;
    if overflow {
        // Not exact: only the magnitude is known, which is enough to refuse it as too large.
        mant = u128::MAX;
    }
    Some((Number { mant, exp10, float }, &s[i..]))
}

impl Number {
    /// The exact whole value of `self * mult`.
    fn whole(&self, mult: u128) -> Result<u64, NumErr> {
        if self.mant == 0 {
            return Ok(0);
        }
        let v = self.mant.checked_mul(mult).ok_or(NumErr::TooLarge)?;
        let v = if self.exp10 >= 0 {
            let p = 10u128.checked_pow(self.exp10 as u32).ok_or(NumErr::TooLarge)?;
            v.checked_mul(p).ok_or(NumErr::TooLarge)?
        } else {
            match 10u128.checked_pow(self.exp10.unsigned_abs()) {
                Some(p) if v % p == 0 => v / p,
                _ => return Err(NumErr::Fraction),
            }
        };
        u64::try_from(v).map_err(|_| NumErr::TooLarge)
    }
}

fn si_multiplier(p: &str) -> Option<(f64, &str)> {
    let mut chars = p.chars();
    let m = match chars.next() {
        Some('k') | Some('K') => 1e3,
        Some('M') => 1e6,
        Some('G') | Some('g') => 1e9,
        Some('T') | Some('t') => 1e12,
        _ => return Some((1.0, p)),
    };
    Some((m, &p[1..]))
}

/// Highest bit rate `Rate::parse` accepts: beyond any link a host has (use `max` for unpaced).
pub const MAX_RATE_BITS: f64 = 10e12;

/// Highest packet rate `Rate::parse` accepts: beyond what any host sends (use `max`).
pub const MAX_RATE_PACKETS: f64 = 10e9;

/// Longest duration `parse_duration` accepts: a year (longer is a typo, not a run).
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

impl Rate {
    /// Parse `942M`, `9.5G`, `1e9`, plain bits/s such as `1000000`, `942Mbps`, `500kpps`,
    /// `2Mpps`, or `max`.
    pub fn parse(s: &str) -> Result<Rate, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("max") || t.eq_ignore_ascii_case("unlimited") {
            return Ok(Rate::Max);
        }
        let bad =
            || format!("cannot read rate '{s}': use payload bits/s like 942M or 9.5G, packets/s like 500kpps, or max");
        let (n, rest) = split_number(t).ok_or_else(bad)?;
        let (mult, unit) = si_multiplier(rest).ok_or_else(bad)?;
        let value = n.float * mult;
        let packets = match unit.to_ascii_lowercase().as_str() {
            "" | "b" | "bps" | "b/s" | "bit/s" | "bits" => false,
            "pps" | "p/s" => true,
            _ => return Err(bad()),
        };
        let (top, top_text) = if packets { (MAX_RATE_PACKETS, "10Gpps") } else { (MAX_RATE_BITS, "10T (10 Tb/s)") };
        if !value.is_finite() || value > top {
            return Err(format!("rate '{s}' is too large: at most {top_text}; for unpaced sending give max"));
        }
        if value <= 0.0 {
            return Err(format!("rate '{s}' must be greater than zero"));
        }
        Ok(if packets { Rate::Packets(value) } else { Rate::Bits(value) })
    }

    /// Packets per second for a payload size; `None` for `Max`.
    pub fn packets_per_sec(&self, payload: usize) -> Option<f64> {
        match *self {
            Rate::Bits(b) => Some(b / (payload.max(1) as f64 * 8.0)),
            Rate::Packets(p) => Some(p),
            Rate::Max => None,
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rate::Bits(b) => write!(f, "{}", bits(b)),
            Rate::Packets(p) => write!(f, "{}", pps(p)),
            Rate::Max => write!(f, "max (unpaced)"),
        }
    }
}

/// Parse a byte count: `8800`, `128K`, `16M`, `4G` (binary multiples), `16MiB`, `1500B`, `1e6`.
/// Exact: never rounded through a float; more than 2^64 - 1 is refused.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("cannot read size '{s}': use bytes like 8800, 128K, 16M or 4G (K = 1024)");
    let (n, rest) = split_number(t).ok_or_else(bad)?;
    let mult: u128 = match rest.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    n.whole(mult).map_err(|e| match e {
        NumErr::Fraction => format!("size '{s}' is not a whole number of bytes"),
        NumErr::TooLarge => format!("size '{s}' is too large: at most 2^64 - 1 bytes"),
    })
}

/// A duration the way a person writes it: `30d`, `2h`, `15m`, `90s`, `250ms` (the largest
/// unit that gives a whole number, else seconds with a fraction).
pub fn duration_short(d: Duration) -> String {
    let s = d.as_secs();
    if d.subsec_nanos() != 0 {
        return if s == 0 && d.subsec_nanos() % 1_000_000 == 0 {
            format!("{}ms", d.subsec_millis())
        } else {
            format!("{:.3}s", d.as_secs_f64())
        };
    }
    for (unit, n) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if s > 0 && s % n == 0 {
            return format!("{}{unit}", s / n);
        }
    }
    format!("{s}s")
}

/// Parse a duration: `5` (seconds), `5s`, `250ms`, `100us`, `2m`, `1h`, `7d`, `1.5s`, `1e-3`.
/// At most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("cannot read duration '{s}': use seconds like 5 or 2.5s, or 250ms, 2m, 1h, 7d");
    let (n, rest) = split_number(t).ok_or_else(bad)?;
    let v = n.float;
    let secs = match rest.to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "ns" => v / 1e9,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        "d" | "day" | "days" => v * 86_400.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || secs > MAX_DURATION.as_secs_f64() {
        return Err(format!("duration '{s}' is too long: at most 366 days"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parse a count with an optional decimal SI suffix: `1000`, `10k`, `2M`, `1e6`. Exact: never
/// rounded through a float; more than 2^64 - 1 is refused.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("cannot read count '{s}': use a whole number like 100000 or 10k or 2M");
    let (n, rest) = split_number(t).ok_or_else(bad)?;
    let mult: u128 = match rest {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" | "g" => 1_000_000_000,
        "T" | "t" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    n.whole(mult).map_err(|e| match e {
        NumErr::Fraction => format!("count '{s}' is not a whole number"),
        NumErr::TooLarge => format!("count '{s}' is too large: at most 2^64 - 1"),
    })
}

/// Check that `v` lies in `lo..=hi`; the message gives the range and `why` (what the limit
/// protects), so a refused value says what to give instead. For the command line's value
/// parsers, which name the option themselves.
pub fn in_range<T: PartialOrd + fmt::Display>(v: T, lo: T, hi: T, why: &str) -> Result<T, String> {
    if v < lo || v > hi {
        return Err(format!("{v} is out of range: give {lo}..{hi} ({why})"));
    }
    Ok(v)
}

/// Format bits per second with a decimal prefix, e.g. `9.50 Gb/s`.
pub fn bits(bps: f64) -> String {
    scaled(bps, "b/s")
}

/// Format packets per second, e.g. `500.0 kpps`.
pub fn pps(p: f64) -> String {
    let (v, prefix) = si_scale(p);
    format!("{v:.1} {prefix}pps")
}

fn si_scale(x: f64) -> (f64, &'static str) {
    let a = x.abs();
    if a >= 1e12 {
        (x / 1e12, "T")
    } else if a >= 1e9 {
        (x / 1e9, "G")
    } else if a >= 1e6 {
        (x / 1e6, "M")
    } else if a >= 1e3 {
        (x / 1e3, "k")
    } else {
        (x, "")
    }
}

fn scaled(x: f64, unit: &str) -> String {
    let (v, prefix) = si_scale(x);
    format!("{v:.2} {prefix}{unit}")
}

/// Format a byte count with binary prefixes, e.g. `16.0 MiB`.
pub fn bytes(b: u64) -> String {
    let f = b as f64;
    if f >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} GiB", f / (1024.0 * 1024.0 * 1024.0))
    } else if f >= 1024.0 * 1024.0 {
        format!("{:.1} MiB", f / (1024.0 * 1024.0))
    } else if f >= 1024.0 {
        format!("{:.1} KiB", f / 1024.0)
    } else {
        format!("{b} B")
    }
}

/// Format an integer with thousands separators, e.g. `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Format nanoseconds compactly: `850 ns`, `35.2 us`, `1.20 ms`, `2.50 s`.
pub fn nanos(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Ethernet wire rate in bits/s for a payload rate, counting every per-frame overhead
/// (headers, FCS, preamble, inter-frame gap), assuming one frame per datagram.
pub fn wire_bits(packets_per_sec: f64, payload: usize) -> f64 {
    packets_per_sec * (payload + WIRE_OVERHEAD) as f64 * 8.0
}

/// Read a rate list: comma-separated rates (`1G,2G,4G`, `500kpps`, `max`) and ranges
/// `FROM:TO:STEP` (`1G:9G:1G` is 1, 2, ... 9 Gb/s), so a sweep's grid is one short argument;
/// at most `max` rates (a range with a tiny step is a typo, not a plan).
pub fn parse_rate_list(s: &str, max: usize) -> Result<Vec<Rate>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if item.contains(':') {
            out.extend(parse_range(item, max)?);
        } else {
            out.push(Rate::parse(item)?);
        }
        if out.len() > max {
            return Err(format!("'{s}' gives more than {max} rates: use a larger step"));
        }
    }
    if out.is_empty() {
        return Err("no rates given: write rates like 1G,2G,4G or a range like 1G:9G:1G".into());
    }
    Ok(out)
}

fn parse_range(item: &str, max: usize) -> Result<Vec<Rate>, String> {
    let parts: Vec<&str> = item.split(':').map(str::trim).collect();
    let [a, b, step] = parts[..] else {
        return Err(format!("range '{item}' is not FROM:TO:STEP: write it like 1G:9G:1G"));
    };
    let (a, b, step) = (Rate::parse(a)?, Rate::parse(b)?, Rate::parse(step)?);
    let (a, b, step, make): (f64, f64, f64, fn(f64) -> Rate) = match (a, b, step) {
        (Rate::Bits(a), Rate::Bits(b), Rate::Bits(s)) => (a, b, s, Rate::Bits),
        (Rate::Packets(a), Rate::Packets(b), Rate::Packets(s)) => (a, b, s, Rate::Packets),
        _ => {
            return Err(format!(
                "range '{item}' mixes units: give FROM, TO and STEP all in bits/s (1G:9G:1G) or all in packets/s (100kpps:500kpps:100kpps)"
            ))
        }
    };
    if b < a {
        return Err(format!("range '{item}' runs downwards: give FROM below TO"));
    }
    // The tolerance keeps the top when the step divides the span but floating point says not.
    let n = ((b - a) / step * (1.0 + 1e-9)).floor();
    if n + 1.0 > max as f64 {
        return Err(format!("range '{item}' gives more than {max} rates: use a larger step"));
    }
    Ok((0..=n as usize).map(|i| make(a + i as f64 * step)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(Rate::parse("942M").unwrap(), Rate::Bits(942e6));
        assert_eq!(Rate::parse("9.5G").unwrap(), Rate::Bits(9.5e9));
        assert_eq!(Rate::parse("500kpps").unwrap(), Rate::Packets(500e3));
        assert_eq!(Rate::parse("2Mpps").unwrap(), Rate::Packets(2e6));
        assert_eq!(Rate::parse("1000").unwrap(), Rate::Bits(1000.0));
        assert_eq!(Rate::parse("942Mbps").unwrap(), Rate::Bits(942e6));
        assert_eq!(Rate::parse("max").unwrap(), Rate::Max);
        for bad in ["", "fast", "0", "-5M", "5X", "5Gpp", "M"] {
            assert!(Rate::parse(bad).is_err(), "{bad} should be refused");
        }
        assert!((Rate::parse("1080").unwrap().packets_per_sec(1080).unwrap() - 0.125).abs() < 1e-12);
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_bytes("8800").unwrap(), 8800);
        assert_eq!(parse_bytes("128K").unwrap(), 131072);
        assert_eq!(parse_bytes("16M").unwrap(), 16 << 20);
        assert_eq!(parse_bytes("16MiB").unwrap(), 16 << 20);
        assert!(parse_bytes("1.5").is_err());
        assert!(parse_bytes("lots").is_err());
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("soon").is_err());
        assert_eq!(parse_count("10k").unwrap(), 10_000);
        assert!(parse_count("1.5").is_err());
    }

    #[test]
    fn one_number_grammar_for_every_kind() {
        // Exponents are read everywhere, or they would be a trap in one place only.
        assert_eq!(Rate::parse("1e9").unwrap(), Rate::Bits(1e9));
        assert_eq!(Rate::parse("2.5e5pps").unwrap(), Rate::Packets(250e3));
        assert_eq!(parse_count("1e6").unwrap(), 1_000_000);
        assert_eq!(parse_count("1.5e3").unwrap(), 1500);
        assert_eq!(parse_bytes("1e3").unwrap(), 1000);
        assert_eq!(parse_bytes("1.5K").unwrap(), 1536);
        assert_eq!(parse_duration("1e-3").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_duration("2.5e2ms").unwrap(), Duration::from_millis(250));
        // Exact: no rounding through a float.
        assert_eq!(parse_count("9007199254740993").unwrap(), 9_007_199_254_740_993);
        assert_eq!(parse_count("18446744073709551615").unwrap(), u64::MAX);
        assert_eq!(parse_bytes("18_446_744_073_709_551_615").unwrap(), u64::MAX);
        // Overflow is refused, with one line saying so, for every kind.
        for s in ["18446744073709551616", "99999999999999999999999G", "1e20", "1e100000000000"] {
            assert!(parse_count(s).unwrap_err().contains("too large"), "count {s}");
            assert!(parse_bytes(s).unwrap_err().contains("too large"), "size {s}");
            assert!(Rate::parse(s).unwrap_err().contains("too large"), "rate {s}");
            let d = parse_duration(s.trim_end_matches('G')).unwrap_err();
            assert!(d.contains("too long"), "duration {s}: {d}");
        }
        assert!(Rate::parse("20Gpps").unwrap_err().contains("too large"));
        assert!(parse_count("1e-3").unwrap_err().contains("whole number"));
        assert!(parse_bytes("1.0001K").unwrap_err().contains("whole number"));
        for bad in ["nan", "inf", "-1", "1e", "e5", "1x"] {
            assert!(parse_count(bad).is_err(), "{bad}");
            assert!(parse_bytes(bad).is_err(), "{bad}");
            assert!(Rate::parse(bad).is_err(), "{bad}");
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(in_range(5u64, 1, 4, "why").unwrap_err().contains("1..4 (why)"));
    }

    #[test]
    fn formatting() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(12), "12");
        assert_eq!(bits(9.5e9), "9.50 Gb/s");
        assert_eq!(pps(500e3), "500.0 kpps");
        // The latency seed: 1500-byte IP frames (1472 UDP payload) on 1 Gb/s -> 81,274 frames/s.
        let fps = 1e9 / ((1472 + WIRE_OVERHEAD) as f64 * 8.0);
        assert_eq!(fps as u64, 81_274);
    }
}
