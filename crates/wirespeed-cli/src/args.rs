//! Value parsers with bounds, shared by every command's options.
//!
//! Each kind of value (datagram size, socket buffer, window, thread count, run length, ...) has
//! one parser here, with its limit and the reason for it, so a value no run could use is refused
//! by clap before anything is opened or allocated: one line naming the option (clap adds it), the
//! range and why, exit code 2. Numbers are read by `wirespeed::units`, so `1e6`, `10k` and `16M`
//! mean the same in every option that takes that kind.

use std::time::Duration;
use wirespeed::ledger::LedgerConfig;
use wirespeed::units::{self, in_range};

pub use wirespeed::rx::{MAX_BATCH, MAX_TRACKED_STREAMS, MAX_WINDOW};

/// Largest socket buffer to ask for: the kernel doubles the value and keeps it in an int.
pub const MAX_SOCKBUF: u64 = 1 << 30;

/// Shortest progress interval, as `ping` has it: 100 lines a second is already more than a
/// terminal or a log should take.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

fn size_in(s: &str, lo: u64, hi: u64, why: &str) -> Result<u64, String> {
    in_range(units::parse_bytes(s)?, lo, hi, why)
}

fn count_in(s: &str, lo: u64, hi: u64, why: &str) -> Result<u64, String> {
    let n = units::parse_count(s)?;
    if hi == u64::MAX && n < lo {
        return Err(format!("{n} is too few: give at least {lo} ({why})"));
    }
    in_range(n, lo, hi, why)
}

/// UDP payload bytes of one datagram.
pub fn udp_size(s: &str) -> Result<u64, String> {
    size_in(s, 1, units::MAX_UDP_PAYLOAD as u64, "more does not fit a UDP datagram over IPv4")
}

/// A socket buffer size to ask the kernel for.
pub fn sockbuf(s: &str) -> Result<u64, String> {
    size_in(s, 1, MAX_SOCKBUF, "the kernel doubles it and keeps it in an int")
}

/// A socket buffer size where 0 is refused later, by the command, with its own words (ttcp's
/// `-b 0`): only the upper bound here.
pub fn sockbuf_request(s: &str) -> Result<u64, String> {
    size_in(s, 0, MAX_SOCKBUF, "the kernel doubles it and keeps it in an int")
}

/// The ledger's reorder window: a power of two, one bit of memory per number per stream.
pub fn window(s: &str) -> Result<u64, String> {
    let n = count_in(s, 1, MAX_WINDOW, "one bit per number per stream, allocated up front")?;
    if !n.is_power_of_two() {
        return Err(format!("{n} must be a power of two, e.g. 65536"));
    }
    Ok(n)
}

/// Datagrams per receive or send call.
pub fn batch(s: &str) -> Result<usize, String> {
    count_in(s, 1, MAX_BATCH as u64, "the buffers for one call are allocated up front").map(|n| n as usize)
}

/// Streams a receiver tracks.
pub fn max_streams(s: &str) -> Result<usize, String> {
    count_in(s, 1, MAX_TRACKED_STREAMS as u64, "each stream's ledger is allocated up front").map(|n| n as usize)
}

/// Sender streams (one thread and one socket each).
pub fn send_streams(s: &str) -> Result<usize, String> {
    count_in(s, 1, 1024, "one thread and one socket per stream").map(|n| n as usize)
}

/// Datagrams per send call.
pub fn burst(s: &str) -> Result<usize, String> {
    count_in(s, 1, 1024, "the datagrams of one call are allocated up front").map(|n| n as usize)
}

/// N of --skip-every: 1 would leave out every number and send nothing.
pub fn skip_every(s: &str) -> Result<u64, String> {
    count_in(s, 2, u64::MAX, "1 would leave out every sequence number")
}

/// A number of datagrams to send or receive: 0 would do nothing and look like success.
pub fn run_count(s: &str) -> Result<u64, String> {
    count_in(s, 1, u64::MAX, "0 would send or receive nothing")
}

/// Writes per size in `bench ttcp`'s Table 3 (up to 1 MiB each, for 16 sizes).
pub fn table3_writes(s: &str) -> Result<u64, String> {
    count_in(s, 1, 1_000_000, "each of 16 sizes up to 1 MiB is written this many times")
}

/// How long to run: 0 would do nothing and look like success.
pub fn run_duration(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s)?;
    if d.is_zero() {
        return Err("0 would run for no time at all: give a length like 5 or 250ms".into());
    }
    Ok(d)
}

/// A progress interval: at least [`MIN_INTERVAL`], so progress cannot flood the terminal.
pub fn interval(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "{} is too short: give at least 10ms (shorter floods the terminal with progress lines)",
            s.trim()
        ));
    }
    Ok(d)
}

/// An IPv4 time-to-live: the header field is 8 bits and 0 never leaves the host.
pub fn ttl(s: &str) -> Result<u32, String> {
    count_in(s, 1, 255, "the IP header's TTL field is 8 bits; 0 never leaves the host").map(|n| n as u32)
}

/// Byte offset of a sequence field inside a datagram.
pub fn seq_offset(s: &str) -> Result<usize, String> {
    let top = units::MAX_UDP_PAYLOAD as u64 - 1;
    size_in(s, 0, top, "the field must lie inside a UDP payload").map(|n| n as usize)
}

/// Whether the `--skip` ranges leave out every one of the `count` numbers from `start`: such a
/// run would send nothing at all and still look like a success.
pub fn skips_everything(ranges: &[(u64, u64)], start: u64, count: u64) -> bool {
    let last = start.saturating_add(count - 1);
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable();
    let mut next = start;
    for (a, b) in sorted {
        if a > next {
            return false;
        }
        if b >= last {
            return true;
        }
        next = next.max(b + 1);
    }
    false
}

/// Longest wait for the last replies of a ping: a reply later than a minute is lost to any
/// reader, and a longer wait only makes a run look hung.
pub const MAX_LINGER: Duration = Duration::from_secs(60);

/// Longest pause between the rates of a ping sweep or a progress interval: an hour; longer is a
/// typo, not a test plan.
pub const MAX_PAUSE: Duration = Duration::from_secs(3600);

/// Largest disk write of `record --block` and `disk-test --block`: the writer keeps one such
/// buffer locked in RAM, and larger writes gain nothing on any disk.
pub const MAX_BLOCK: u64 = 1 << 30;

/// Largest file of `record --file-size` (ext4's largest file): the space is reserved up front.
pub const MAX_FILE_SIZE: u64 = 16 << 40;

/// Most `disk-test --size`: a terabyte measures any disk; more only wears it.
pub const MAX_DISK_TEST: u64 = 1 << 40;

/// Ring size used when physical memory cannot be read (no /proc): 64 GiB.
const FALLBACK_RAM: u64 = 64 << 30;

/// A bound as a user would write it: 0, 10ms, 60s.
fn duration_text(d: Duration) -> String {
    match (d.subsec_nanos(), d.as_secs()) {
        (0, 0) => "0".into(),
        (0, s) => format!("{s}s"),
        _ => format!("{}ms", d.as_millis()),
    }
}

fn duration_in(s: &str, lo: Duration, hi: Duration, why: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s)?;
    if d < lo || d > hi {
        return Err(format!("{} is out of range: give {}..{} ({why})", s.trim(), duration_text(lo), duration_text(hi)));
    }
    Ok(d)
}

/// How long ping waits for the last replies (0..1 min).
pub fn linger(s: &str) -> Result<Duration, String> {
    duration_in(s, Duration::ZERO, MAX_LINGER, "a reply later than that is lost to any reader")
}

/// Pause between the rates of a ping sweep (0..1 h).
pub fn pause(s: &str) -> Result<Duration, String> {
    duration_in(s, Duration::ZERO, MAX_PAUSE, "longer is a typo, not a test plan")
}

/// A progress or histogram interval with an upper bound too (10 ms..1 h).
pub fn bounded_interval(s: &str) -> Result<Duration, String> {
    interval(s)?;
    duration_in(s, MIN_INTERVAL, MAX_PAUSE, "shorter floods the terminal, longer shows nothing")
}

/// How long data may wait in the recorder before it is written anyway (10 ms..1 h).
pub fn flush(s: &str) -> Result<Duration, String> {
    duration_in(s, MIN_INTERVAL, MAX_PAUSE, "what a crash can lose at low rates")
}

/// Payload bytes of one latency probe: its 24-byte header up to a UDP datagram.
pub fn probe_size(s: &str) -> Result<usize, String> {
    let lo = wirespeed::latency::probe::MIN_SIZE as u64;
    size_in(s, lo, units::MAX_UDP_PAYLOAD as u64, "a probe carries a 24-byte header in one UDP datagram")
        .map(|n| n as usize)
}

/// Bytes of one disk write: a multiple of 4 KiB (O_DIRECT alignment), at most [`MAX_BLOCK`].
pub fn block(s: &str) -> Result<u64, String> {
    let n = units::parse_bytes(s)?;
    if n == 0 || n % 4096 != 0 {
        return Err(format!("{n} is not a non-zero multiple of 4 KiB (O_DIRECT writes are aligned): e.g. 8M"));
    }
    in_range(n, 4096, MAX_BLOCK, "a multiple of 4 KiB; one write buffer is allocated and locked up front")
}

/// Physical memory of this host in bytes (MemTotal), if it can be read.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The recorder's RAM ring: allocated, pre-faulted and locked up front, so it must fit in this
/// host's physical memory (checked here, before anything is allocated).
pub fn ring_buffer(s: &str) -> Result<u64, String> {
    let n = units::parse_bytes(s)?;
    let ram = physical_memory();
    let top = ram.unwrap_or(FALLBACK_RAM);
    if n == 0 || n > top {
        return Err(format!(
            "{} is out of range: give 1..{} ({})",
            s.trim(),
            units::bytes(top),
            if ram.is_some() {
                "the ring is locked in RAM, and this host has no more physical memory than that"
            } else {
                "the ring is locked in RAM"
            }
        ));
    }
    Ok(n)
}

/// Largest size of one recorded file (space is reserved up front).
pub fn file_size(s: &str) -> Result<u64, String> {
    size_in(s, 1 << 20, MAX_FILE_SIZE, "each file's space is reserved up front; ext4 holds no larger file")
}

/// How much `disk-test` writes.
pub fn disk_test_size(s: &str) -> Result<u64, String> {
    size_in(s, 1 << 20, MAX_DISK_TEST, "a terabyte measures any disk; more only wears it")
}

/// Probes a reflector client may send back to back beyond its cap.
pub fn client_burst(s: &str) -> Result<u64, String> {
    count_in(s, 1, 10_000_000, "the token bucket of one client; 0 would answer nothing")
}

/// A probe rate cap per reflector client: probes per second (fractions allowed, or 10kpps),
/// 0 for no cap, at most ping's own maximum rate times 100.
pub fn client_cap(s: &str) -> Result<f64, String> {
    let v = match wirespeed::units::Rate::parse(s) {
        Ok(wirespeed::units::Rate::Packets(p)) => Some(p),
        _ => s.trim().replace('_', "").parse::<f64>().ok(),
    };
    match v {
        Some(v) if v.is_finite() && (0.0..=1e9).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{s}' is not a probe rate: give probes per second up to 1e9, e.g. 100000 or 100kpps, or 0 for no cap"
        )),
    }
}

/// A partition id: 1..64, as namespaces PREFIX1..PREFIX64 (and their addresses) are laid out.
pub fn partition_id(s: &str) -> Result<u32, String> {
    let top = wirespeed::testbed::MAX_PARTITIONS as u64;
    count_in(s, 1, top, "partitions are numbered 1..64").map(|n| n as u32)
}

/// A link MTU: IPv4 needs at least 68, and the length field holds no more than 65535.
pub fn mtu(s: &str) -> Result<u32, String> {
    count_in(s, 68, 65535, "IPv4's smallest MTU up to its largest packet; 9000 for jumbo").map(|n| n as u32)
}

/// Checks without a heartbeat before a peer is reported not responding.
pub fn hb_misses(s: &str) -> Result<u32, String> {
    count_in(s, 1, 1000, "0 would report every peer at once").map(|n| n as u32)
}

/// A partition's memory limit: at least 16 MiB (a process needs some), at most this host's
/// physical memory.
pub fn mem_limit(s: &str) -> Result<u64, String> {
    let top = physical_memory().unwrap_or(FALLBACK_RAM);
    size_in(s, 16 << 20, top, "a limit above the host's physical memory limits nothing")
}

/// Gap ranges shown per stream: no ledger keeps more than its `max_ranges`.
pub fn gaps(s: &str) -> Result<usize, String> {
    let top = LedgerConfig::default().max_ranges as u64;
    count_in(s, 0, top, "a ledger keeps no more ranges than that").map(|n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed::rx::check_ledger_budget;

    #[test]
    fn bounds() {
        assert_eq!(window("65536").unwrap(), 65536);
        assert!(window("1099511627776").unwrap_err().contains("out of range"));
        assert!(window("1000").unwrap_err().contains("power of two"));
        assert!(udp_size("65508").is_err() && udp_size("0").is_err());
        assert!(ttl("300").is_err() && ttl("0").is_err() && ttl("255").is_ok());
        assert!(skip_every("1").is_err() && skip_every("2").is_ok());
        assert!(run_count("0").is_err() && run_duration("0").is_err() && run_duration("0ms").is_err());
        assert!(interval("0").is_err() && interval("9ms").is_err() && interval("10ms").is_ok());
        assert!(check_ledger_budget(64, 65536).is_ok());
        assert!(check_ledger_budget(65536, 65536).unwrap_err().to_string().contains("--max-streams"));
        assert!(check_ledger_budget(MAX_TRACKED_STREAMS, 65536).is_ok());
        assert!(check_ledger_budget(MAX_TRACKED_STREAMS, MAX_WINDOW).is_err());
        assert!(check_ledger_budget(64, MAX_WINDOW).is_ok());
        assert!(linger("1e6").is_err() && linger("0").is_ok() && linger("60s").is_ok());
        assert!(pause("2h").is_err() && pause("0").is_ok());
        assert!(probe_size("1K").unwrap() == 1024 && probe_size("1e3").unwrap() == 1000);
        assert!(probe_size("23").is_err() && probe_size("65508").is_err());
        assert!(block("0").is_err() && block("5000").is_err() && block("8M").is_ok() && block("2G").is_err());
        assert!(ring_buffer("1T").is_err() || physical_memory().is_some_and(|m| m >= 1 << 40));
        assert!(ring_buffer("0").is_err() && ring_buffer("16M").is_ok());
        assert!(file_size("1P").is_err() && file_size("1G").is_ok());
        assert!(disk_test_size("2T").is_err() && disk_test_size("0").is_err());
        assert!(flush("0").is_err() && flush("1s").is_ok() && flush("2h").is_err());
        assert!(client_burst("0").is_err() && client_cap("0").is_ok() && client_cap("1e12").is_err());
        assert!(bounded_interval("0").is_err() && bounded_interval("2h").is_err());
        assert!(skips_everything(&[(0, 4), (5, 9)], 0, 10));
        assert!(skips_everything(&[(3, 20)], 5, 10));
        assert!(!skips_everything(&[(0, 4), (6, 9)], 0, 10));
        assert!(!skips_everything(&[(1, 9)], 0, 10));
    }
}
