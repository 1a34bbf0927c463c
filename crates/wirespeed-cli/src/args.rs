//! Value parsers with bounds, shared by every command's options.
//!
//! Each kind of value (datagram size, socket buffer, window, thread count, run length, ...) has
//! one parser here, with its limit and the reason for it, so a value no run could use is refused
//! by clap before anything is opened or allocated: one line naming the option (clap adds it), the
//! range and why, exit code 2. Numbers are read by `wirespeed::units`, so `1e6`, `10k` and `16M`
//! mean the same in every option that takes that kind.

use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use wirespeed::addr::parse_listen;
use wirespeed::ledger::LedgerConfig;
use wirespeed::rx::{BackendKind, RecvConfig};
use wirespeed::units::Rate;
use wirespeed::units::{self, in_range};
use wirespeed::wire::{spec, ByteOrder, Counter, Format};
use wirespeed::Error;

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

/// Capture threads of a receiver (each has its own socket, buffers and ledgers).
pub fn threads(s: &str) -> Result<usize, String> {
    let top = wirespeed::rx::MAX_THREADS as u64;
    count_in(s, 1, top, "each thread has its own socket, buffers and ledgers").map(|n| n as usize)
}

/// A CPU list as `taskset -c` takes it: ranges and single CPUs, comma-separated (2-5,8).
pub fn cpu_list(s: &str) -> Result<List<usize>, String> {
    let top = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1024).max(1);
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("'{part}' is not a CPU or a range of CPUs: write e.g. 2-5 or 2,3,6");
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => {
                (a.trim().parse::<usize>().map_err(|_| bad())?, b.trim().parse::<usize>().map_err(|_| bad())?)
            }
            None => {
                let c = part.parse::<usize>().map_err(|_| bad())?;
                (c, c)
            }
        };
        if a > b {
            return Err(format!("range {part} is empty: write the smaller CPU first"));
        }
        if b >= 1024 {
            return Err(format!("CPU {b} is beyond what Linux numbers (this host has {top}; see `nproc`)"));
        }
        for c in a..=b {
            if cpus.contains(&c) {
                return Err(format!("CPU {c} is named twice: give each capture thread its own CPU"));
            }
            cpus.push(c);
        }
    }
    if cpus.is_empty() {
        return Err("--cpus is empty: give CPUs like 2-5".into());
    }
    Ok(List(cpus))
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

/// Streams at once in `bench ttcp`'s Table 3: a remote partition has 16 raw devices.
pub fn table3_streams(s: &str) -> Result<usize, String> {
    count_in(s, 1, 16, "a remote partition has 16 raw devices, 00..0f").map(|n| n as usize)
}

/// How long to run: 0 would do nothing and look like success.
pub fn run_duration(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s)?;
    if d.is_zero() {
        return Err("0 would run for no time at all: give a length like 5 or 250ms".into());
    }
    Ok(d)
}

/// `--once-quiet`: at least 10 ms (a receive call's wait could outlast less, and a pause between
/// two batches would end the run) and at most an hour.
pub fn once_quiet(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s)?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(3600) {
        return Err(format!("{} is out of range: give 10ms to 1h, e.g. 500ms or 10s", s.trim()));
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

/// A nice value, as `nice -n` takes it: -20 (most favoured) to 19 (least).
pub fn nice_value(s: &str) -> Result<i32, String> {
    let v: i64 =
        s.trim().parse().map_err(|_| format!("'{}' is not a nice value: give a whole number -20..19", s.trim()))?;
    if !(-20..=19).contains(&v) {
        return Err(format!(
            "{v} is out of range: give -20..19 (-20 is the most favoured, as seed 004's receiver ran)"
        ));
    }
    Ok(v as i32)
}

/// A SCHED_FIFO priority: 1..99, as the kernel numbers them.
pub fn rt_priority(s: &str) -> Result<u8, String> {
    match s.trim().parse::<u8>() {
        Ok(v) if (1..=99).contains(&v) => Ok(v),
        _ => Err(format!(
            "'{}' is not a SCHED_FIFO priority: give 1..99 (default {}; the kernel's own threads run at 50 and 99)",
            s.trim(),
            wirespeed::priority::DEFAULT_REALTIME
        )),
    }
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
pub fn duration_text(d: Duration) -> String {
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
    let lo = wirespeed_lab::latency::probe::MIN_SIZE as u64;
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

/// A scan's chunk (FlexBuff) or block (Mark6) size: rounded down to whole frames when used.
pub fn chunk_size(s: &str) -> Result<u64, String> {
    size_in(s, 64 << 10, 2 << 30, "a chunk is held in RAM until its disk has it; Mark6 blocks hold at most 2 GiB")
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
    let top = wirespeed_lab::testbed::MAX_PARTITIONS as u64;
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

/// A multicast interface: an IPv4 address, an interface name or an index.
pub fn iface(s: &str) -> Result<wirespeed::addr::Iface, String> {
    wirespeed::addr::parse_iface(s)
}

/// An IP address, IPv4 or IPv6 (`::1`, `[::1]`), as `--bind` takes it.
pub fn ip_addr(s: &str) -> Result<std::net::IpAddr, String> {
    wirespeed::addr::parse_ip(s)
}

/// A receive backend by name (`wirespeed recv --help` lists them).
pub fn backend(s: &str) -> Result<BackendKind, String> {
    s.trim().parse().map_err(|e: Error| e.to_string())
}

/// Gap ranges shown per stream: no ledger keeps more than its `max_ranges`.
pub fn gaps(s: &str) -> Result<usize, String> {
    let top = LedgerConfig::default().max_ranges as u64;
    count_in(s, 0, top, "a ledger keeps no more ranges than that").map(|n| n as usize)
}

// ---- Shared option groups: the payload format (send, recv, record, verify) and the capture
// (recv, record). ----

#[derive(Args, Clone)]
pub struct FormatArgs {
    /// Payload format: `counter` (CASPER: each datagram W consecutive 64-bit words of one running
    /// counter), a preset (mark5b, mark5c, casper, vdif, vtp, spead, seq64), or a full spec such
    /// as `vdif,frame=8032,threads=4,fps=32000` or `mark5b,fps=25600,halves=1,psn=1`.
    /// `wirespeed formats` lists them all with their keys. On recv and record, `vdif`, `vtp`,
    /// `mark5b` or `spead` alone learns the layout from the stream's own headers first (the
    /// datagrams read meanwhile are counted too) and says what it learned and assumed; give any
    /// key to count by that spec instead (`wirespeed probe` prints the full one).
    #[arg(long, default_value = "counter", value_name = "FORMAT|PRESET|SPEC")]
    pub format: String,
    /// Byte order of the counter words: be (FPGA default) or le.
    #[arg(long, default_value = "be", value_parser = ByteOrder::parse)]
    pub byte_order: ByteOrder,
    /// Generic instrument header: the sequence number is the field at this byte offset (with
    /// --seq-width and --seq-endian); the rest of the datagram is not checked.
    #[arg(long, value_name = "BYTES", value_parser = seq_offset)]
    pub seq_offset: Option<usize>,
    /// Width of the sequence field in bytes, 1..8.
    #[arg(long, default_value_t = 8, value_name = "BYTES")]
    pub seq_width: u8,
    /// Byte order of the sequence field.
    #[arg(long, default_value = "be", value_parser = ByteOrder::parse)]
    pub seq_endian: ByteOrder,
}

/// What carries the datagrams: plain UDP, or a PGM session over UDP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// Plain UDP: loss is counted, never repaired.
    #[default]
    Udp,
    /// PGM (RFC 3208) over UDP, as OpenPGM and ZeroMQ's epgm:// carry it: receivers NAK what
    /// the path dropped and the source repairs it from its transmit window.
    Pgm,
}

/// `--transport` and the PGM session's settings (send, recv, record, ping, reflect).
#[derive(Args, Clone)]
pub struct TransportArgs {
    /// udp (default): plain datagrams, loss counted. pgm: a PGM session (RFC 3208 over UDP,
    /// OpenPGM's encapsulation: one UDP port for data and NAKs): a receiver NAKs what the path
    /// dropped, the source repairs it, and the ledger still counts what could not be repaired.
    /// Costs: a NAK socket at the sender (bound to its address and the same port), a
    /// transmit window in RAM (--pgm-window x datagram size), repair traffic. IPv4.
    #[arg(long, value_enum, default_value = "udp")]
    pub transport: Transport,
    /// PGM data-destination port (inside the PGM header; OpenPGM's pgm_bind port). Sender and
    /// receivers must agree; OpenPGM's default is 7500.
    #[arg(long, default_value = "7500", value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub pgm_dport: u16,
    /// PGM window in sequence numbers: the sender keeps this many datagrams for repairs, a
    /// receiver holds this many out of order while it waits for one (16..1048576).
    #[arg(long, default_value = "8192", value_name = "SQNS")]
    pub pgm_window: u32,
    /// NAK_BO_IVL: a receiver waits a random time below this before NAKing a gap (one NAK
    /// then stands for every receiver that lost the packet).
    #[arg(long, default_value = "5ms", value_parser = units::parse_duration)]
    pub nak_backoff: Duration,
    /// NAK_RPT_IVL: a NAK not confirmed by an NCF within this is sent again.
    #[arg(long, default_value = "50ms", value_parser = units::parse_duration)]
    pub nak_repeat: Duration,
    /// NAK_RDATA_IVL: a confirmed NAK whose repair does not come within this is sent again.
    #[arg(long, default_value = "50ms", value_parser = units::parse_duration)]
    pub nak_rdata: Duration,
    /// NAK_NCF_RETRIES and NAK_DATA_RETRIES: tries before a datagram is unrecoverable (counted
    /// lost).
    #[arg(long, default_value = "20", value_name = "N")]
    pub nak_retries: u32,
    /// Sender: how long to stay for NAKs after the last datagram, at most (it leaves sooner
    /// once no NAK has come for --pgm-quiet).
    #[arg(long, default_value = "5s", value_parser = units::parse_duration)]
    pub pgm_linger: Duration,
    /// Sender: leave the linger once no NAK has come for this long. Raise it when a receiver
    /// may start late or run far behind (it NAKs what it missed only when it catches up).
    #[arg(long, default_value = "300ms", value_parser = units::parse_duration)]
    pub pgm_quiet: Duration,
    /// Sender: the address its SPMs give receivers for NAKs (default: the address the route to
    /// the destination leaves from).
    #[arg(long, value_name = "ADDR", value_parser = ip_addr)]
    pub pgm_nla: Option<std::net::IpAddr>,
    /// Sender: most repair (RDATA) traffic per second, e.g. 500M (payload bits) or 20kpps.
    /// Default: unlimited, every repair sent as soon as it is asked for (fastest recovery).
    /// A cap sends no repair twice into a receiver whose socket overflows, but the receiver
    /// waits longer and NAKs again meanwhile (BENCHMARKS.md 14e measures both).
    #[arg(long, value_name = "RATE", value_parser = Rate::parse)]
    pub pgm_repair_rate: Option<Rate>,
    /// Sender: the repair budget, in percent of the data sent: each ODATA byte earns this share
    /// of a byte of RDATA (IP/UDP headers counted), on top of --pgm-repair-burst. NAKs cannot be
    /// authenticated, so this bounds what forged NAKs can make the source multicast: at most
    /// this share of the data rate (plus the burst), instead of the whole window per NAK.
    /// Honest loss up to this share is repaired at once; NAKs beyond it wait for the budget
    /// and are reported (BENCHMARKS.md 14f). 1-10000, or off (no budget, as OpenPGM).
    #[arg(long, default_value = "25", value_name = "PERCENT|off", value_parser = repair_share)]
    pub pgm_repair_share: RepairShare,
    /// Sender: the most the repair budget holds, in datagrams of the largest size: a burst of
    /// loss up to this is repaired at once. Default: a quarter of --pgm-window.
    #[arg(long, value_name = "DATAGRAMS")]
    pub pgm_repair_burst: Option<u32>,
    /// Sender: a datagram repaired less than this ago is not repaired again (its RDATA is
    /// still on the way; replayed NAKs get it once per hold-off). Default: half of
    /// --nak-rdata, so a receiver asking again after its own --nak-rdata is never held off.
    #[arg(long, value_name = "DURATION", value_parser = units::parse_duration)]
    pub pgm_repair_holdoff: Option<Duration>,
}

/// `--pgm-repair-share`: a percentage, or no budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepairShare(pub Option<u32>);

fn repair_share(s: &str) -> Result<RepairShare, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(RepairShare(None));
    }
    let p: u32 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage: give 1 to 10000, or off for no repair budget"))?;
    if !(1..=10_000).contains(&p) {
        return Err(format!("{p} is out of range: give 1 to 10000 (percent of the data sent), or off"));
    }
    Ok(RepairShare(Some(p)))
}

impl TransportArgs {
    /// The PGM settings when `--transport pgm`, checked; None for UDP.
    pub fn pgm(&self) -> Result<Option<wirespeed::pgm::PgmConfig>, Error> {
        if self.transport != Transport::Pgm {
            return Ok(None);
        }
        let c = wirespeed::pgm::PgmConfig {
            dport: self.pgm_dport,
            window: self.pgm_window,
            nak_backoff: self.nak_backoff,
            nak_repeat: self.nak_repeat,
            nak_rdata: self.nak_rdata,
            nak_retries: self.nak_retries,
            linger: self.pgm_linger,
            quiet: self.pgm_quiet,
            nla: self.pgm_nla,
            repair_rate: self.pgm_repair_rate,
            repair_share: self.pgm_repair_share.0,
            repair_burst: self.pgm_repair_burst,
            repair_holdoff: self.pgm_repair_holdoff,
        };
        c.validate().map_err(Error::invalid)?;
        Ok(Some(c))
    }
}

/// `--metrics`: serve the run's live counters to Prometheus (recv, record, reflect, tap).
#[derive(Args, Clone, Default)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics while the command runs: each
    /// stream's received/lost/late/duplicate/invalid counts, socket drops, and for record the
    /// ring fill, ring-full drops, bytes and files written and write latency (README, "Metrics").
    /// A bare PORT listens on 127.0.0.1 only; 0.0.0.0:PORT lets other hosts scrape. Idle or
    /// slow clients never delay a scrape: at most 128 connections, 16 per client address, 2 s
    /// each.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = wirespeed_lab::exporter::parse_addr)]
    pub metrics: Option<std::net::SocketAddr>,
}

/// A running exporter and the board the run shows it its counters on.
pub struct Exporter {
    pub server: wirespeed_lab::exporter::Server,
    pub board: wirespeed_lab::exporter::Board,
}

impl MetricsArgs {
    /// Start the exporter when --metrics asks for one, before the run opens anything else: a
    /// busy port is one line and exit code 2 before any capture starts.
    pub fn start(&self, command: &str) -> Result<Option<Exporter>, Error> {
        let Some(addr) = self.metrics else { return Ok(None) };
        let board = wirespeed_lab::exporter::Board::new(command);
        let server = wirespeed_lab::exporter::Server::start(addr, board.clone())?;
        Ok(Some(Exporter { server, board }))
    }
}

impl Exporter {
    /// The start line on stderr (after the command's own "listening on" line).
    pub fn announce(&self, command: &str) {
        eprintln!("wirespeed {command}: metrics at {} (Prometheus text format)", self.server.url());
    }
}

/// Where an optional exporter served, for the report.
pub fn serving(e: &Option<Exporter>) -> Option<wirespeed_lab::exporter::Serving> {
    e.as_ref().map(|e| e.server.serving())
}

/// How hard the scheduler backs the run (recv, record, send, and a bench's receiver): seed 004's
/// receiver at nice -20 took twice the rate of one at +20.
#[derive(Args, Clone, Default)]
pub struct PriorityArgs {
    /// Nice value of the whole process, -20..19, as `nice -n N` (seed 004 ran its receiver at
    /// -20). Below the present value (any negative one) needs CAP_SYS_NICE (root).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = nice_value)]
    pub priority: Option<i32>,
    /// Run the capture threads (send: the sending threads) under SCHED_FIFO at PRIO, 1..99
    /// (default 10: above every normal thread, below the kernel's own interrupt threads at 50);
    /// other threads keep the normal scheduler. Needs CAP_SYS_NICE. Guarded against a runaway
    /// thread freezing its CPU: refused when kernel.sched_rt_runtime_us is -1 (throttling off)
    /// and with --busy-poll; RLIMIT_RTTIME is 2 s soft (SIGXCPU: the run stops with its
    /// report) and 3 s hard (SIGKILL) of running without blocking.
    #[arg(
        long,
        value_name = "PRIO",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "10",
        value_parser = rt_priority
    )]
    pub realtime: Option<u8>,
    /// Lock all memory of the process, present and future, in RAM (mlockall): the capture path
    /// never waits on a page fault or on swap. Needs CAP_IPC_LOCK (root) or an RLIMIT_MEMLOCK
    /// large enough (ulimit -l).
    #[arg(long)]
    pub lock_memory: bool,
}

impl PriorityArgs {
    /// The library's settings these options ask for.
    pub fn priority(&self) -> wirespeed::priority::Priority {
        wirespeed::priority::Priority { nice: self.priority, realtime: self.realtime, lock_memory: self.lock_memory }
    }
}

#[derive(Args)]
pub struct RecvArgs {
    /// Where to listen: PORT (every address, IPv4 and IPv6), ADDR:PORT, [IPV6]:PORT (e.g.
    /// [::1]:7148), or a multicast GROUP:PORT (joins the group; 239.1.2.3:7148, [ff05::1234]:7148).
    pub listen: String,
    /// Expected payload bytes per datagram; others count as invalid. Default: any multiple of 8.
    #[arg(long, value_parser = udp_size)]
    pub size: Option<u64>,
    /// Socket receive buffer to ask for (e.g. 16M). Default: 32M for recv, 256M for record
    /// (it covers the capture thread being kept off its CPU for about 200 ms at 1.3 GB/s; 32M
    /// covers 27 ms; the kernel uses it only while datagrams wait). The granted size is
    /// printed; when net.core.rmem_max caps it, so is the sysctl that raises the cap. At most 1G.
    #[arg(long, value_parser = sockbuf)]
    pub rcvbuf: Option<u64>,
    /// Ask for UDP GRO: the kernel hands over coalesced datagrams, split here by segment size.
    #[arg(long)]
    pub gro: bool,
    /// Pin the capture thread to this CPU (one capture thread; --cpus for several).
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Capture threads, 1..64. Each has its own socket (all in one SO_REUSEPORT group on the
    /// same port), its own ledgers and, for record, its own ring, writer and file series
    /// (PREFIX-tN-...). A classic BPF program in the kernel steers every stream to one thread:
    /// by source address and port, or by the format's stream id (the VDIF thread) for formats
    /// with several. Reports give the merged ledger and each thread's share and CPU.
    /// Example: --threads 2 --cpus 2-3.
    #[arg(long, default_value = "1", value_parser = threads)]
    pub threads: usize,
    /// Pin the capture threads, one CPU each, thread N to the Nth CPU of the list: a range
    /// (2-5), a list (2,4,6) or both (2-3,6). Must name at least --threads CPUs.
    #[arg(long, value_name = "LIST", value_parser = cpu_list, conflicts_with = "cpu")]
    pub cpus: Option<List<usize>>,
    /// Stop after this long (5, 2.5s, 2m). Default: until Ctrl-C, --count or --once.
    #[arg(long, value_parser = run_duration)]
    pub duration: Option<Duration>,
    /// Stop once this many datagrams have arrived.
    #[arg(long, value_parser = run_count)]
    pub count: Option<u64>,
    /// Stop when every stream of the first wirespeed sender has sent its end-of-stream message.
    #[arg(long)]
    pub once: bool,
    /// With --once, after data has arrived: how long to wait in silence after an end-of-stream
    /// message that could not be believed (a stranger's, or one the data contradicts), or after
    /// PGM gave up data that may have held the end, before stopping without the run's own end;
    /// the report's stopped_by says "silence". Default 3s. Raise it for a stream that pauses
    /// longer; lower it to give up on a lost end sooner.
    #[arg(long, value_name = "DURATION", requires = "once", value_parser = once_quiet)]
    pub once_quiet: Option<Duration>,
    /// Print a progress line every SECS seconds (to stderr); at least 10ms.
    #[arg(long, value_name = "SECS", value_parser = interval)]
    pub interval: Option<Duration>,
    /// With --interval: print each progress line as one JSON object (elapsed_s, pps, bps and
    /// the cumulative counts) instead of text, so a program following a long run (bench soak)
    /// reads numbers, not a layout.
    #[arg(long, requires = "interval")]
    pub interval_json: bool,
    /// Exit with code 3 if any packet was lost.
    #[arg(long)]
    pub expect_zero_loss: bool,
    /// Datagrams per receive call, 1..1024.
    #[arg(long, default_value = "64", value_parser = batch)]
    pub batch: usize,
    /// Most streams (source address/port pairs) tracked, 1..8192; their ledgers are
    /// preallocated, and --max-streams x --window may take at most 1 GiB.
    #[arg(long, default_value = "64", value_parser = max_streams)]
    pub max_streams: usize,
    /// Reorder window in packets (a power of two up to 16M = 16777216): later arrivals count as
    /// stale, not late.
    #[arg(long, default_value = "65536", value_parser = window)]
    pub window: u64,
    /// How datagrams are taken from the kernel: recvmmsg (default: batches of --batch
    /// datagrams per system call, --gro optional, received straight into the recording ring);
    /// packet (AF_PACKET TPACKET_V3 ring with a kernel filter to the port; needs CAP_NET_RAW;
    /// one fanout ring per --threads thread); xdp (AF_XDP, root, an address on a real interface
    /// such as a veth, IPv4, one thread; switch UDP segmentation offload off at veth senders).
    #[arg(long, default_value = "recvmmsg", value_name = "BACKEND", value_parser = backend)]
    pub backend: BackendKind,
    /// Poll without blocking: lowest latency, but the capture core runs at 100%.
    #[arg(long)]
    pub busy_poll: bool,
    /// Longest nap after a receive call that found the socket nearly drained (like NIC interrupt
    /// moderation: one wake-up per batch, not per datagram; the socket buffer holds what arrives
    /// meanwhile). The nap adapts to the arrival rate and is skipped when a batch arrives within
    /// 200 us; it is capped so a 40 Gb/s burst fills at most 1/8 of the granted buffer. 0 disables.
    #[arg(long, default_value = "1ms", value_parser = units::parse_duration)]
    pub coalesce: Duration,
    /// Interface to join a multicast group on (only with a multicast GROUP:PORT): an IPv4
    /// address of it, its name (eth0) or its index. A link-local IPv6 group (ff02::) needs it,
    /// or a scope in the address: [ff02::1234%eth0]:7148.
    #[arg(long, value_name = "IFACE", value_parser = iface)]
    pub iface: Option<wirespeed::addr::Iface>,
    /// Gap ranges shown per stream in the summary (all are in --json), 0..4096.
    #[arg(long, default_value = "8", value_parser = gaps)]
    pub gaps: usize,
    #[command(flatten)]
    pub fmt: FormatArgs,
    #[command(flatten)]
    pub prio: PriorityArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    #[command(flatten)]
    pub transport: TransportArgs,
    /// Print one JSON document (schema wirespeed.recv/1, or record/1 for record) instead of the summary.
    #[arg(long)]
    pub json: bool,
}

pub fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s.split_once("..").ok_or_else(|| format!("'{s}' is not a range: write A..B, e.g. 100..199"))?;
    let a = units::parse_count(a).map_err(|e| format!("'{a}' in '{s}' is not a sequence number: {e}"))?;
    let b = units::parse_count(b).map_err(|e| format!("'{b}' in '{s}' is not a sequence number: {e}"))?;
    if a > b {
        return Err(format!("range {s} is empty: write the smaller number first"));
    }
    Ok((a, b))
}

/// The format named by --format/--preset and the seq-field options, with the size the user gave
/// (`None`: the format's own, or for the counter receiver, any multiple of 8; `send` passes its
/// default). Returns the preset too, for its default rate.
pub fn resolve_format(
    f: &FormatArgs,
    preset: Option<&str>,
    size: Option<u64>,
) -> Result<(Arc<dyn Format>, Option<&'static spec::Preset>), Error> {
    if let Some(off) = f.seq_offset {
        let mut s = format!("seqfield,offset={off},width={},order={}", f.seq_width, f.seq_endian);
        if let Some(n) = size {
            s.push_str(&format!(",size={n}"));
        }
        return Ok((spec::parse(&s).map_err(Error::invalid)?, None));
    }
    let name = preset.unwrap_or(&f.format);
    let found = spec::presets().iter().find(|p| p.name == name);
    if preset.is_some() && found.is_none() {
        let names: Vec<&str> = spec::presets().iter().map(|p| p.name).collect();
        return Err(Error::invalid(format!("unknown preset '{name}': use one of {}", names.join(", "))));
    }
    if name == "counter" {
        return match size {
            Some(n) => Ok((counter_format(n, f)?, None)),
            None => Ok((Arc::new(Counter::any_len(f.byte_order)), None)),
        };
    }
    let fmt = match found {
        Some(p) if p.spec.starts_with("counter") && size.is_some() => {
            (counter_format(size.unwrap_or(p.size as u64), f)?, Some(p))
        }
        Some(p) => (spec::parse(p.spec).map_err(Error::invalid)?, Some(p)),
        None => (spec::parse(name).map_err(|e| Error::invalid(format!("--format: {e}")))?, None),
    };
    if let (Some(n), Some(len)) = (size, fmt.0.fixed_len()) {
        if n as usize != len {
            return Err(Error::invalid(format!(
                "--size {n} does not match {}, whose datagrams are {len} bytes: leave --size out",
                fmt.0.name()
            )));
        }
    }
    Ok(fmt)
}

pub fn counter_format(size: u64, f: &FormatArgs) -> Result<Arc<dyn Format>, Error> {
    if size == 0 || size > units::MAX_UDP_PAYLOAD as u64 {
        return Err(Error::invalid(format!(
            "--size {size} does not fit a UDP datagram: use 8..{} bytes (8800 is the usual jumbo size)",
            units::MAX_UDP_PAYLOAD
        )));
    }
    Ok(Arc::new(Counter::new(size as usize, f.byte_order).map_err(Error::invalid)?))
}

pub fn recv_config(a: &RecvArgs) -> Result<RecvConfig, Error> {
    let mut c = RecvConfig::new(parse_listen(&a.listen)?);
    c.rcvbuf = a.rcvbuf.map_or(wirespeed::rx::DEFAULT_RCVBUF, |b| usize::try_from(b).unwrap_or(usize::MAX));
    c.gro = a.gro;
    c.cpu = a.cpu;
    c.threads = a.threads;
    c.cpus = a.cpus.as_ref().map(|l| l.0.clone()).unwrap_or_default();
    if !c.cpus.is_empty() && c.cpus.len() < c.threads {
        return Err(Error::invalid(format!(
            "--cpus names {} CPU(s) for --threads {}: give one CPU per capture thread, e.g. --cpus 2-{}",
            c.cpus.len(),
            c.threads,
            1 + c.threads
        )));
    }
    c.duration = a.duration;
    c.count = a.count;
    c.once = a.once;
    if let Some(q) = a.once_quiet {
        c.once_quiet = q;
    }
    c.batch = a.batch;
    c.max_streams = a.max_streams;
    c.busy_poll = a.busy_poll;
    c.backend = a.backend;
    if let Some(p) = a.transport.pgm()? {
        if a.backend != BackendKind::Mmsg {
            return Err(Error::invalid(format!(
                "--transport pgm receives through its own UDP socket: leave out --backend {}",
                a.backend
            )));
        }
        c.backend = BackendKind::Pgm;
        // PGM runs over IPv4 here: a bare PORT listens on every IPv4 address.
        if c.listen.ip().is_unspecified() {
            c.listen = std::net::SocketAddr::from(([0, 0, 0, 0], c.listen.port()));
        }
        c.pgm = p;
    } else if a.backend == BackendKind::Pgm {
        return Err(Error::invalid("the pgm backend is chosen with --transport pgm"));
    }
    if a.coalesce > Duration::from_millis(100) {
        return Err(Error::invalid("--coalesce above 100ms risks overflowing the socket buffer: use 0..100ms"));
    }
    c.coalesce = a.coalesce;
    c.multicast_iface = a.iface.clone();
    c.show_gaps = a.gaps;
    c.priority = a.prio.priority();
    // The value parsers bound each option; their product is checked here, before any ledger
    // is allocated.
    wirespeed::rx::check_ledger_budget(a.max_streams, a.window)?;
    c.ledger = LedgerConfig { window: a.window, ..LedgerConfig::default() };
    // The library's own guard too (threads, CPUs), before any socket is opened.
    c.check_limits()?;
    if a.iface.is_some() && !c.listen.ip().is_multicast() {
        return Err(Error::invalid(format!(
            "--iface chooses where to join a multicast group, and {} is not one: leave --iface out",
            c.listen.ip()
        )));
    }
    Ok(c)
}

/// The format family whose layout `recv` and `record` learn from the stream: `--format`
/// naming only `vdif`, `vtp`, `mark5b` or `spead`, with no keys and no `--seq-offset`.
pub fn learn_family(a: &RecvArgs) -> Option<&'static str> {
    if a.fmt.seq_offset.is_some() {
        return None;
    }
    wirespeed::rx::learn::LEARNABLE.iter().copied().find(|f| *f == a.fmt.format)
}

pub fn recv_format(a: &RecvArgs) -> Result<Arc<dyn Format>, Error> {
    resolve_format(&a.fmt, None, a.size).map(|(f, _)| f)
}

// ---- Shared by the bench commands: where the traffic runs, where the report goes, and the
// kinds of value their options take. ----

/// Where a bench command's traffic runs and how its sender sends, the same for every bench
/// command.
#[derive(Args)]
pub struct PlaceArgs {
    /// Stay on loopback (receiver on the second CPU, sender on the first) even when partitions
    /// could be made. Without it, as root, the sender and receiver run in two partitions joined by
    /// a veth link (made for the run, removed at the end).
    #[arg(long)]
    pub loopback: bool,
    /// Use UDP segmentation offload on wirespeed's sender (one system call carries many
    /// datagrams: a higher flat-out rate from one core; iperf3 has none).
    #[arg(long)]
    pub gso: bool,
    /// wirespeed's sender builds Ethernet/IP/UDP frames itself and sends them through
    /// AF_PACKET on its partition's link (send --raw): about 0.65x a UDP socket's CPU per
    /// datagram, so one sender core pushes the receiver harder. Partitions only.
    #[arg(long, conflicts_with = "gso")]
    pub raw: bool,
    /// Run the traffic over IPv6: ::1 on loopback, 2001:2::1 to 2001:2::2 between partitions.
    #[arg(long)]
    pub ipv6: bool,
    /// The receiver's scheduling (`recv --priority/--realtime/--lock-memory`), for every point.
    #[command(flatten)]
    pub prio: PriorityArgs,
    /// Real hosts as the two ends, over ssh.
    #[command(flatten)]
    pub hosts: HostArgs,
}

/// Real hosts as a run's two ends, reached with the `ssh` on PATH: the same options for every
/// command that places a sender and a receiver.
#[derive(Args, Clone, Default)]
pub struct HostArgs {
    /// Run the sender on HOST, reached with ssh: [user@]host[:port] (the user's ssh config
    /// applies, so an alias works), or `local` for this machine. Needs --rx. The far host runs
    /// its own wirespeed (the same version), which ends when this command ends.
    #[arg(long, value_name = "HOST", requires = "rx", value_parser = host)]
    pub tx: Option<wirespeed_lab::testbed::hosts::Host>,
    /// Run the receiver on HOST ([user@]host[:port], or `local`). Needs --tx. The data goes to
    /// the address ssh reached it at, unless --data-address says otherwise.
    #[arg(long, value_name = "HOST", requires = "tx", value_parser = host)]
    pub rx: Vec<wirespeed_lab::testbed::hosts::Host>,
    /// Pass `-o KEY=VALUE` to ssh (repeats; yours come first, so they win over wirespeed's
    /// BatchMode=yes, ConnectTimeout=10 and ServerAliveInterval=10).
    #[arg(long = "ssh-option", value_name = "KEY=VALUE", requires = "tx")]
    pub ssh_option: Vec<String>,
    /// Pass `-F FILE` to ssh: an ssh config file for this run (hosts, keys, jump hosts).
    #[arg(long = "ssh-config", value_name = "FILE", requires = "tx")]
    pub ssh_config: Option<PathBuf>,
    /// The receiver's address on the data network, where it differs from the address ssh
    /// reaches it at (a 100G data link beside a 1G management network).
    /// Repeats with --rx: one per receiver, in the same order.
    #[arg(long = "data-address", value_name = "ADDR", requires = "tx")]
    pub data_address: Vec<std::net::IpAddr>,
    /// The far hosts' wirespeed, when it is not on their PATH.
    #[arg(long = "remote-wirespeed", value_name = "PATH", default_value = "wirespeed", requires = "tx")]
    pub remote_wirespeed: String,
}

fn host(s: &str) -> Result<wirespeed_lab::testbed::hosts::Host, String> {
    wirespeed_lab::testbed::hosts::Host::parse(s)
}

impl HostArgs {
    /// The two ends greeted over ssh, when --tx and --rx were given: for a command that runs
    /// one receiver (a fleet, --rx repeated, is refused in one line).
    pub fn connect(&self) -> wirespeed::Result<Option<wirespeed_lab::testbed::hosts::Hosts>> {
        if self.rx.len() > 1 {
            return Err(usage(
                "--rx given more than once: this command runs one receiver; a fleet of receivers runs with bench max, rates and sweep".into(),
            ));
        }
        self.connect_fleet()
    }

    /// The sender's host and every receiver's, greeted over ssh, when --tx and --rx were given.
    pub fn connect_fleet(&self) -> wirespeed::Result<Option<wirespeed_lab::testbed::hosts::Hosts>> {
        let Some(tx) = &self.tx else { return Ok(None) };
        let ssh = wirespeed_lab::testbed::hosts::Ssh {
            options: self.ssh_option.clone(),
            config: self.ssh_config.clone(),
            remote_exe: self.remote_wirespeed.clone(),
        };
        wirespeed_lab::testbed::hosts::Hosts::connect(ssh, tx, &self.rx, &self.data_address, env!("CARGO_PKG_VERSION"))
            .map(Some)
    }

    /// Whether the run is on hosts.
    pub fn given(&self) -> bool {
        self.tx.is_some()
    }

    /// The runner on the hosts when --tx/--rx were given, else `other` (refused with
    /// `--loopback`: the two name different places).
    pub fn runner_or(
        &self,
        loopback: bool,
        stop: &'static std::sync::atomic::AtomicBool,
        other: impl FnOnce() -> wirespeed::Result<wirespeed_lab::bench::point::Runner>,
    ) -> wirespeed::Result<wirespeed_lab::bench::point::Runner> {
        self.runner_with(loopback, false, stop, other)
    }

    fn runner_with(
        &self,
        loopback: bool,
        fleet: bool,
        stop: &'static std::sync::atomic::AtomicBool,
        other: impl FnOnce() -> wirespeed::Result<wirespeed_lab::bench::point::Runner>,
    ) -> wirespeed::Result<wirespeed_lab::bench::point::Runner> {
        if loopback && self.given() {
            return Err(usage("--loopback and --tx/--rx name different places: choose one".into()));
        }
        let hosts = if fleet { self.connect_fleet()? } else { self.connect()? };
        match hosts {
            Some(h) => wirespeed_lab::bench::point::Runner::hosts(h, stop),
            None => other(),
        }
    }
}

impl PlaceArgs {
    /// The runner these options ask for: partitions as root (unless --loopback), with the raw
    /// sender when --raw, and the receiver's priority (refused here, before any point, when
    /// this host does not allow it).
    pub fn runner(
        &self,
        stop: &'static std::sync::atomic::AtomicBool,
    ) -> wirespeed::Result<wirespeed_lab::bench::point::Runner> {
        self.make_runner(false, stop)
    }

    /// [`PlaceArgs::runner`] for a command whose points a fleet of receivers may take
    /// (`--rx` repeated): bench max, rates and sweep.
    pub fn fleet_runner(
        &self,
        stop: &'static std::sync::atomic::AtomicBool,
    ) -> wirespeed::Result<wirespeed_lab::bench::point::Runner> {
        self.make_runner(true, stop)
    }

    fn make_runner(
        &self,
        fleet: bool,
        stop: &'static std::sync::atomic::AtomicBool,
    ) -> wirespeed::Result<wirespeed_lab::bench::point::Runner> {
        let mut r = self.hosts.runner_with(self.loopback, fleet, stop, || {
            wirespeed_lab::bench::point::Runner::auto(self.loopback, stop)
        })?;
        if self.raw {
            r.raw_sender()?;
        }
        if self.ipv6 {
            r.ipv6()?;
        }
        r.receiver_priority(self.prio.priority())?;
        Ok(r)
    }
}

/// The receive buffer a bench command's receiver asks for, the same option for every bench
/// command that runs one receiver (a sweep takes a list; compare words it for two tools).
#[derive(Args)]
pub struct RcvbufArgs {
    /// Receive buffer the receiver asks for (16M = 16 MiB).
    #[arg(long, default_value = "32M", value_name = "BYTES", value_parser = sockbuf)]
    pub rcvbuf: u64,
}

/// Where a bench command's report goes: files in a directory, and JSON instead of the table.
#[derive(Args)]
pub struct OutputArgs {
    /// Write the report files into this directory (created if needed).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print one JSON document instead of the table (progress lines go to stderr).
    #[arg(long)]
    pub json: bool,
}

/// The values of a comma-separated list option, as one parsed value: clap hands a list option's
/// text to one parser, so an empty list and a bad element are refused the same way as a bad
/// single value.
#[derive(Clone, Debug, PartialEq)]
pub struct List<T>(pub Vec<T>);

/// A comma-separated list of values `one` reads, refused whole when empty or when one is bad.
pub fn list<T>(s: &str, flag: &str, one: impl Fn(&str) -> Result<T, String>) -> Result<List<T>, String> {
    let v = s.split(',').map(str::trim).filter(|p| !p.is_empty()).map(one).collect::<Result<Vec<_>, _>>()?;
    if v.is_empty() {
        return Err(format!("{flag} is empty: give at least one value"));
    }
    Ok(List(v))
}

/// A count within bounds, for the bench options that take one (their reasons in the message).
pub fn count_between(s: &str, lo: u64, hi: u64, why: &str) -> Result<u64, String> {
    count_in(s, lo, hi, why)
}

/// A byte size within bounds, for the bench options that take one.
pub fn bytes_between(s: &str, lo: u64, hi: u64, why: &str) -> Result<u64, String> {
    size_in(s, lo, hi, why)
}

/// Largest counter datagram: the largest UDP payload that is a whole number of 64-bit words.
const COUNTER_TOP: u64 = (units::MAX_UDP_PAYLOAD - units::MAX_UDP_PAYLOAD % 8) as u64;

/// A bench datagram size: the counter format's (whole 64-bit words, one UDP payload).
pub fn counter_size(s: &str) -> Result<usize, String> {
    let n = units::parse_bytes(s)?;
    if !(8..=COUNTER_TOP).contains(&n) || n % 8 != 0 {
        return Err(format!(
            "{n} is not a counter datagram: use a multiple of 8 from 8 to {COUNTER_TOP} (8800 suits a 9000-byte MTU)"
        ));
    }
    Ok(n as usize)
}

/// Datagram sizes of a sweep or comparison, comma-separated counter sizes.
pub fn counter_sizes(s: &str) -> Result<List<usize>, String> {
    let v = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| counter_size(p).map_err(|e| format!("{e}; give multiples of 8 such as 1080,8800")))
        .collect::<Result<Vec<_>, _>>()?;
    if v.is_empty() {
        return Err("--sizes is empty: give sizes like 1080,8800".into());
    }
    Ok(List(v))
}

/// Receive buffers of a sweep, comma-separated, each bounded as `recv --rcvbuf` is.
pub fn sockbufs(s: &str) -> Result<List<u64>, String> {
    let v = s.split(',').map(str::trim).filter(|p| !p.is_empty()).map(sockbuf).collect::<Result<Vec<_>, _>>()?;
    if v.is_empty() {
        return Err("--rcvbuf is empty: give buffers like 128K,1M,16M".into());
    }
    Ok(List(v))
}

/// Offered rates of a bench command: a list of rates and FROM:TO:STEP ranges, at most `max`.
pub fn rate_list(s: &str, max: usize) -> Result<List<Rate>, String> {
    if s.split(',').all(|p| p.trim().is_empty()) {
        return Err("--rates is empty: no rates given; write rates like 1024M,2048M or a range like 1G:9G:1G".into());
    }
    units::parse_rate_list(s, max).map(List)
}

/// The sending time of one bench point: long enough to measure, short enough to be a point.
pub fn point_duration(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s)?;
    if d < Duration::from_millis(10) {
        return Err(format!("{} is too short to measure: give at least 10ms (the seed used 1 s)", s.trim()));
    }
    if d > Duration::from_secs(3600) {
        return Err(format!("{} is more than an hour per point: give at most 1h", s.trim()));
    }
    Ok(d)
}

/// The length of a soak: at least a second, at most a day (seed 001 ran 24 and 30 minutes).
pub fn soak_duration(s: &str) -> Result<Duration, String> {
    let d = units::parse_duration(s)?;
    if d < Duration::from_secs(1) {
        return Err(format!("{} is too short for a soak: give at least 1s (the seed ran 30m)", s.trim()));
    }
    if d > Duration::from_secs(24 * 3600) {
        return Err(format!("{} is more than a day: give at most 24h", s.trim()));
    }
    Ok(d)
}

/// Passes over a bench's points: their median is the result, so one is allowed, 100 is plenty.
pub fn repeat(s: &str) -> Result<u32, String> {
    match units::parse_count(s) {
        Ok(n) if (1..=100).contains(&n) => Ok(n as u32),
        _ => Err(format!("'{}' must be a whole number from 1 to 100", s.trim())),
    }
}

/// A payload rate in bits/s (a search bound): packet rates have no place in a bits bracket.
pub fn bits_rate(s: &str) -> Result<f64, String> {
    match Rate::parse(s)? {
        Rate::Bits(b) => Ok(b),
        _ => Err(format!("{}: give payload bits/s here, like 100M or 9.5G", s.trim())),
    }
}

/// The top of a search: payload bits/s, or `max` (the sender flat out).
pub fn bits_or_max(s: &str) -> Result<Rate, String> {
    match Rate::parse(s)? {
        Rate::Packets(_) => Err(format!("{}: give payload bits/s here, like 100M or 9.5G, or max", s.trim())),
        r => Ok(r),
    }
}

/// A search's precision: a fraction (0.02) or a percentage (2%), 0.1% to 50%.
pub fn precision(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("'{s}' is not a fraction: write 2% or 0.02"))?;
    if !(v.is_finite() && (0.001..=0.5).contains(&v)) {
        return Err(format!("{s} is out of range: use 0.1% to 50%"));
    }
    Ok(v)
}

/// A command-level refusal (a check across options), exit code 2.
pub fn usage(s: String) -> Error {
    Error::invalid(s)
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
        assert!(counter_size("1081").unwrap_err().contains("multiple of 8") && counter_size("8").is_ok());
        assert_eq!(counter_sizes("1080, 8800").unwrap(), List(vec![1080, 8800]));
        assert!(counter_sizes(",").unwrap_err().contains("--sizes is empty"));
        assert!(counter_sizes("1080,1081").unwrap_err().contains("multiples of 8"));
        assert!(sockbufs("1M,lots").unwrap_err().contains("cannot read size") && sockbufs(" , ").is_err());
        assert_eq!(rate_list("1G:3G:1G", 200).unwrap().0.len(), 3);
        assert!(rate_list(",", 200).unwrap_err().contains("--rates is empty"));
        assert!(point_duration("0").unwrap_err().contains("too short") && point_duration("2h").is_err());
        assert!(soak_duration("25h").unwrap_err().contains("more than a day") && soak_duration("30m").is_ok());
        assert!(repeat("0").is_err() && repeat("101").is_err() && repeat("3").unwrap() == 3);
        assert!(bits_rate("100kpps").is_err() && bits_rate("1G").unwrap() == 1e9);
        assert!(bits_or_max("max").unwrap() == Rate::Max && bits_or_max("5kpps").is_err());
        assert!(precision("80%").unwrap_err().contains("out of range") && precision("2%").unwrap() == 0.02);
        assert_eq!(cpu_list("2-5").unwrap(), List(vec![2, 3, 4, 5]));
        assert_eq!(cpu_list("0, 2-3,6").unwrap(), List(vec![0, 2, 3, 6]));
        assert!(cpu_list("5-2").unwrap_err().contains("empty") && cpu_list("x").unwrap_err().contains("2-5"));
        assert!(cpu_list("1,1").unwrap_err().contains("twice") && cpu_list(",").is_err());
        assert!(threads("0").is_err() && threads("65").is_err() && threads("2").unwrap() == 2);
        assert!(nice_value("-20").unwrap() == -20 && nice_value("19").unwrap() == 19);
        assert!(nice_value("30").unwrap_err().contains("-20..19") && nice_value("x").is_err());
        assert!(rt_priority("0").is_err() && rt_priority("100").is_err() && rt_priority("99").unwrap() == 99);
        assert_eq!(rt_priority("10").unwrap(), wirespeed::priority::DEFAULT_REALTIME, "--realtime's default");
    }
}
