//! Value parsers with bounds, shared by every command's options.
//!
//! Each kind of value (datagram size, socket buffer, window, thread count, run length, ...) has
//! one parser here, with its limit and the reason for it, so a value no run could use is refused
//! by clap before anything is opened or allocated: one line naming the option (clap adds it), the
//! range and why, exit code 2. Numbers are read by `wirespeed::units`, so `1e6`, `10k` and `16M`
//! mean the same in every option that takes that kind.

use std::time::Duration;
use wirespeed::ledger::{GapRange, LedgerConfig, Segment, StreamLedger};
use wirespeed::units::{self, in_range};

/// Largest reorder window: 16 Mi sequence numbers (a 2 MiB bitmap per stream), several seconds
/// of reordering even at millions of datagrams per second.
pub const MAX_WINDOW: u64 = 1 << 24;

/// Most streams one receiver tracks (each has a preallocated ledger of about 100 KiB, most of
/// it room for gap ranges; 8192 of them stay under [`LEDGER_BUDGET`] with the default window).
pub const MAX_TRACKED_STREAMS: usize = 8192;

/// Most memory the ledgers of one receiver may take (`--max-streams` x per-stream ledger).
pub const LEDGER_BUDGET: u64 = 1 << 30;

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
    count_in(s, 1, 1024, "the buffers for one call are allocated up front").map(|n| n as usize)
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

/// Gap ranges shown per stream: no ledger keeps more than its `max_ranges`.
pub fn gaps(s: &str) -> Result<usize, String> {
    let top = LedgerConfig::default().max_ranges as u64;
    count_in(s, 0, top, "a ledger keeps no more ranges than that").map(|n| n as usize)
}

/// Bytes one stream's ledger takes with this window (what `StreamLedger::new` allocates).
pub fn ledger_bytes(window: u64) -> u64 {
    let cfg = LedgerConfig { window, ..LedgerConfig::default() };
    let bitmap = (window / 64).max(1) * 8;
    bitmap
        + (cfg.max_ranges * std::mem::size_of::<GapRange>()) as u64
        + (cfg.max_segments * std::mem::size_of::<Segment>()) as u64
        + std::mem::size_of::<StreamLedger>() as u64
}

/// Refuse a `--max-streams` x `--window` whose ledgers together would take more than
/// [`LEDGER_BUDGET`]: each bound alone is sane, their product need not be.
pub fn check_ledger_budget(max_streams: usize, window: u64) -> Result<(), String> {
    let per = ledger_bytes(window);
    let total = per.saturating_mul(max_streams as u64);
    if total > LEDGER_BUDGET {
        return Err(format!(
            "--max-streams {max_streams} with --window {window} needs {} of ledger memory ({} a stream), more than the {} allowed: lower --max-streams or --window",
            units::bytes(total),
            units::bytes(per),
            units::bytes(LEDGER_BUDGET)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(check_ledger_budget(65536, 65536).unwrap_err().contains("--max-streams"));
        assert!(check_ledger_budget(MAX_TRACKED_STREAMS, 65536).is_ok());
        assert!(check_ledger_budget(MAX_TRACKED_STREAMS, MAX_WINDOW).is_err());
        assert!(check_ledger_budget(64, MAX_WINDOW).is_ok());
        assert!(skips_everything(&[(0, 4), (5, 9)], 0, 10));
        assert!(skips_everything(&[(3, 20)], 5, 10));
        assert!(!skips_everything(&[(0, 4), (6, 9)], 0, 10));
        assert!(!skips_everything(&[(1, 9)], 0, 10));
    }
}
