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

fn split_number(s: &str) -> Option<(f64, &str)> {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(s.len());
    let num: String = s[..end].chars().filter(|&c| c != '_').collect();
    let v: f64 = num.parse().ok()?;
    Some((v, &s[end..]))
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

impl Rate {
    /// Parse `942M`, `9.5G`, plain bits/s such as `1000000`, `942Mbps`, `500kpps`,
    /// `2Mpps`, or `max`.
    pub fn parse(s: &str) -> Result<Rate, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("max") || t.eq_ignore_ascii_case("unlimited") {
            return Ok(Rate::Max);
        }
        let bad =
            || format!("cannot read rate '{s}': use payload bits/s like 942M or 9.5G, packets/s like 500kpps, or max");
        let (v, rest) = split_number(t).ok_or_else(bad)?;
        let (mult, unit) = si_multiplier(rest).ok_or_else(bad)?;
        let value = v * mult;
        if !(value.is_finite() && value > 0.0) {
            return Err(format!("rate '{s}' must be greater than zero"));
        }
        match unit.to_ascii_lowercase().as_str() {
            "" | "b" | "bps" | "b/s" | "bit/s" | "bits" => Ok(Rate::Bits(value)),
            "pps" | "p/s" => Ok(Rate::Packets(value)),
            _ => Err(bad()),
        }
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

/// Parse a byte count: `8800`, `128K`, `16M`, `4G` (binary multiples), `16MiB`, `1500B`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("cannot read size '{s}': use bytes like 8800, 128K, 16M or 4G (K = 1024)");
    let (v, rest) = split_number(t).ok_or_else(bad)?;
    let mult: f64 = match rest.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0f64.powi(4),
        _ => return Err(bad()),
    };
    let b = v * mult;
    if !b.is_finite() || b < 0.0 || b > u64::MAX as f64 {
        return Err(bad());
    }
    if b.fract() != 0.0 {
        return Err(format!("size '{s}' is not a whole number of bytes"));
    }
    Ok(b as u64)
}

/// Parse a duration: `5` (seconds), `5s`, `250ms`, `100us`, `2m`, `1h`, `1.5s`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("cannot read duration '{s}': use seconds like 5 or 2.5s, or 250ms, 2m, 1h");
    let (v, rest) = split_number(t).ok_or_else(bad)?;
    let secs = match rest.to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "ns" => v / 1e9,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parse a count with an optional decimal SI suffix: `1000`, `10k`, `2M`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("cannot read count '{s}': use a whole number like 100000 or 10k or 2M");
    let (v, rest) = split_number(t).ok_or_else(bad)?;
    let (mult, unit) = si_multiplier(rest).ok_or_else(bad)?;
    if !unit.is_empty() {
        return Err(bad());
    }
    let c = v * mult;
    if !c.is_finite() || c < 0.0 || c.fract() != 0.0 || c > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(c as u64)
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
