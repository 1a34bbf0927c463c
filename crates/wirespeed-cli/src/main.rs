//! The `wirespeed` command: argument parsing and printing only; the work is in the library.

#![forbid(unsafe_code)]

// Output that cannot be written (`wirespeed ping | head -1`, a closed terminal) must not panic:
// std's print macros do, and a panic mid-run skips the cleanup (a reflector thread left
// running, partitions left behind). These shadow them in every module below: what cannot be
// printed is dropped, and the run goes on to finish, clean up and exit with its own code.
macro_rules! print {
    ($($arg:tt)*) => { $crate::write_out(false, format_args!($($arg)*)) };
}
macro_rules! println {
    () => { $crate::write_out(false, format_args!("\n")) };
    ($($arg:tt)*) => { $crate::write_out(false, format_args!("{}\n", format_args!($($arg)*))) };
}
macro_rules! eprint {
    ($($arg:tt)*) => { $crate::write_out(true, format_args!($($arg)*)) };
}
macro_rules! eprintln {
    () => { $crate::write_out(true, format_args!("\n")) };
    ($($arg:tt)*) => { $crate::write_out(true, format_args!("{}\n", format_args!($($arg)*))) };
}

/// Write to stdout (or stderr), ignoring a reader that went away.
pub(crate) fn write_out(to_stderr: bool, text: std::fmt::Arguments) {
    use std::io::Write;
    let _ = if to_stderr { std::io::stderr().lock().write_fmt(text) } else { std::io::stdout().lock().write_fmt(text) };
}

mod args;
mod bench_cmd;
mod compare_cmd;
mod latency_cmd;
mod partition_cmd;
mod record_cmd;
mod soak_cmd;
mod ttcp_cmd;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use partition_cmd::{check_pairing, cmd_partition, PartitionArgs};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use wirespeed::error::{parse_listen, resolve};
use wirespeed::ledger::LedgerConfig;
use wirespeed::rx::{self, Listener, RecvConfig, RecvReport};
use wirespeed::testbed;
use wirespeed::tx::{self, SendConfig, SendReport};
use wirespeed::units::{self, Rate};
use wirespeed::wire::{spec, ByteOrder, Counter, Format};
use wirespeed::{sys, Error};

/// Exit code when --expect-zero-loss was given and packets were lost.
pub(crate) const EXIT_LOSS: u8 = 3;

#[derive(Parser)]
#[command(
    name = "wirespeed",
    version,
    about = "Move UDP at wire speed, lose nothing, and prove it.",
    long_about = "Move UDP at wire speed, lose nothing, and prove it.\n\n\
        wirespeed sends paced instrument-like UDP streams and receives them with an exact loss \
        ledger (lost, late, duplicate, invalid, located by sequence range), shown beside the \
        kernel's own drop counters so you can tell which layer lost what.\n\n\
        Rates are decimal SI: 942M and 9.5G are UDP payload bits/s, 500kpps is datagrams/s. \
        Byte sizes are binary: 16M is 16 MiB. Counts are decimal: 1M is 1,000,000. Sizes, \
        counts, rates and durations may carry an exponent (1e9); a value out of an option's range is refused \
        before anything runs.\n\n\
        Try:  wirespeed demo\n      \
        wirespeed recv 7148 --once            (in one terminal)\n      \
        wirespeed send 127.0.0.1:7148 --rate 2G --duration 5   (in another)\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 bad usage (or a value out of range), 3 loss \
        when --expect-zero-loss, 4 (verify) a recording is damaged, incomplete or differs from its \
        sidecar."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Send a paced UDP stream (CASPER 64-bit counter payload) to HOST:PORT.
    Send(SendArgs),
    /// Receive UDP streams and account for every packet: the loss ledger beside the kernel's counters.
    Recv(RecvArgs),
    /// Record UDP streams to disk through a RAM burst buffer, with the ledger per file.
    #[command(long_about = "Record UDP streams to disk with zero loss, and prove it.\n\n\
        A capture thread receives (as `recv` does, with the same ledger) into a RAM ring; a \
        writer thread moves the ring to disk in large aligned O_DIRECT writes. The capture \
        thread never waits for the disk: a burst faster than the disk fills the ring and is \
        written afterwards; if the ring overflows, the datagrams dropped are counted as \
        ring-full loss. Each file is written as NAME.part, renamed when complete, and gets a \
        JSON sidecar NAME.json with the ledger of exactly the records in it.\n\n\
        Try:  mkdir -p /data/rec && wirespeed record 7148 --size 8800 -o /data/rec --once\n      \
        wirespeed send 127.0.0.1:7148 --size 8800 --rate 4G --duration 10\n      \
        wirespeed verify /data/rec\n\n\
        Exit codes: 0 success, 1 runtime failure (e.g. disk full: the files written are valid), \
        2 bad usage, 3 loss when --expect-zero-loss.")]
    Record(record_cmd::RecordArgs),
    /// Re-read recordings, re-check every record, and compare with the sidecars.
    #[command(long_about = "Re-read recordings independently of the ledger kept while recording: every \
        record is checked again by its format (counter pattern, sync words, CRC...), each file \
        gets its own ledger and is compared with its sidecar, and the files of a directory are \
        read as one recording in name order, so loss between files shows too. A NAME.part file \
        (left by a killed recorder) is read up to its last whole record and reported incomplete.\n\n\
        Exit codes: 0 every file sound and matching its sidecar, 2 bad usage, 3 loss when \
        --expect-zero-loss, 4 a file is damaged, incomplete or differs from its sidecar.")]
    Verify(record_cmd::VerifyArgs),
    /// Measure the sustained write rate of a disk with the recorder's own I/O pattern.
    DiskTest(record_cmd::DiskTestArgs),
    /// Answer wirespeed probes from allowed clients, each within a rate cap (the far end of `ping`).
    #[command(
        long_about = "The far end of `wirespeed ping`: send each wirespeed probe straight back to its sender.\n\n\
        Only wirespeed probes are answered, and only to clients the rules allow: never the \
        reflector's own port (a forged source would make it answer itself) nor another \
        reflector's replies; source ports below 1024 only with --allow-low-ports; only sources in \
        --allow CIDR when given; each source address at most --max-pps-per-client probes per \
        second (burst --client-burst). What it refuses is counted per reason and shown.\n\n\
        Try:  wirespeed reflect 127.0.0.1:7149\n      \
        wirespeed ping 127.0.0.1:7149 --pps 10000 --duration 10   (in another terminal)\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 bad usage."
    )]
    Reflect(latency_cmd::ReflectArgs),
    /// Round-trip latency at fixed packet rates: percentiles, HdrHistogram logs and heat maps.
    #[command(long_about = "Round-trip latency at fixed packet rates, as seed 003 measured it.\n\n\
        Probes leave on a fixed schedule (open loop: ping never waits for a reply before sending \
        the next), a reflector sends each back at the application layer, and the round trip is \
        taken from one clock. Each rate gives the percentile table (min, p50, p90, p99, p99.9, \
        p99.99, max; one-way = RTT/2), lost, late and duplicate replies from the ledger, an \
        HdrHistogram interval log (ns; readable by the standard HdrHistogram tools) and a heat map \
        (PNG and SVG): time on x, latency on y, colour = packets per cell on a log scale.\n\n\
        Try:  wirespeed ping --pps 10000,20000,30000,40000      (seed 003's four rates, self-contained)\n      \
        wirespeed reflect 127.0.0.1:7149                      (in one terminal)\n      \
        wirespeed ping 127.0.0.1:7149 --pps 10000 --duration 60   (in another)\n\n\
        Against a far host, run reflect there and give ping its address.\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 bad usage, 3 replies lost with --expect-zero-loss.")]
    Ping(latency_cmd::PingArgs),
    /// Frames per second on the wire for a link speed and packet size (preamble, IFG, headers).
    Linerate(latency_cmd::LinerateArgs),
    /// ttcp in the classic style: TCP or UDP bulk transfer, MB/s and (UDP) % dropped.
    Ttcp(ttcp_cmd::TtcpArgs),
    /// Benchmark reports like the seeds': zero-loss rate search, rate tables, ttcp tables.
    Bench(bench_cmd::BenchArgs),
    /// List the payload formats, their spec keys, and the instrument presets.
    Formats,
    /// Sender and receiver on loopback for a few seconds, then the ledger: a first look.
    Demo(DemoArgs),
    /// Divide this host into isolated partitions (namespaces + CPU sets + veth mesh), like mkpart.
    #[command(long_about = "Divide this host into isolated test hosts, after the SGI Origin 2000's mkpart.\n\n\
        A partition is a network namespace (PREFIX<N>) with its own CPUs (a cpuset cgroup) and, \
        with --mem, a memory limit. Every pair of partitions gets a direct veth link (a full mesh) \
        with a /30 from 198.18.0.0/16, and each partition a stable address 198.19.0.N on its \
        loopback, routed to every other partition over their direct link only. A heartbeat \
        daemon per partition reports peers that stop responding, in the Origin's console wording.\n\n\
        Try:  wirespeed partition plan                      (valid layouts of this host)\n      \
        sudo wirespeed partition create -p 1 -c 0 -p 2 -c 1\n      \
        wirespeed partition list\n      \
        sudo wirespeed partition exec 2 -- wirespeed recv 7148 --once\n      \
        sudo wirespeed partition exec 1 -- wirespeed send 198.19.0.2:7148 --duration 5\n      \
        sudo wirespeed partition init                       (remove what wirespeed made)\n\n\
        Everything but list, plan and status needs root (CAP_NET_ADMIN).")]
    Partition(PartitionArgs),
}

#[derive(Args, Clone)]
struct FormatArgs {
    /// Payload format: `counter` (CASPER: each datagram W consecutive 64-bit words of one running
    /// counter), a preset (mark5b, mark5c, casper, vdif, vtp, spead, seq64), or a full spec such
    /// as `vdif,frame=8032,threads=4,fps=32000` or `mark5b,fps=25600,halves=1,psn=1`.
    /// `wirespeed formats` lists them all with their keys.
    #[arg(long, default_value = "counter", value_name = "FORMAT|PRESET|SPEC")]
    format: String,
    /// Byte order of the counter words: be (FPGA default) or le.
    #[arg(long, default_value = "be", value_parser = ByteOrder::parse)]
    byte_order: ByteOrder,
    /// Generic instrument header: the sequence number is the field at this byte offset (with
    /// --seq-width and --seq-endian); the rest of the datagram is not checked.
    #[arg(long, value_name = "BYTES", value_parser = args::seq_offset)]
    seq_offset: Option<usize>,
    /// Width of the sequence field in bytes, 1..8.
    #[arg(long, default_value_t = 8, value_name = "BYTES")]
    seq_width: u8,
    /// Byte order of the sequence field.
    #[arg(long, default_value = "be", value_parser = ByteOrder::parse)]
    seq_endian: ByteOrder,
}

#[derive(Args)]
struct SendArgs {
    /// Receiver address, HOST:PORT (a multicast group works too).
    target: String,
    /// UDP payload bytes per datagram (1..65507; the counter format needs a multiple of 8).
    /// Default 8800 (suits a 9000-byte MTU; use 1472 or less on a 1500-byte MTU to avoid IP
    /// fragments); formats with their own frame size (vdif, mark5b, ...) set it themselves.
    #[arg(long, value_parser = args::udp_size)]
    size: Option<u64>,
    /// Total rate over all streams: payload bits/s (942M, 9.5G), datagrams/s (500kpps) or max.
    /// Default 1G, or the preset's rate.
    #[arg(long, value_parser = Rate::parse)]
    rate: Option<Rate>,
    /// Replay an instrument: a preset sets --format, the datagram size and the default rate
    /// (e.g. `--preset mark5b` is Mark5B at 2048 Mb/s in whole 10016-byte frames, as seed 002;
    /// `--preset casper --size 8192 --rate 500kpps` is seed 004's FPGA). See `wirespeed formats`.
    #[arg(long, conflicts_with = "format")]
    preset: Option<String>,
    /// How long to send (5, 2.5s, 250ms, 2m). Default 10 s unless --count is given.
    #[arg(long, value_parser = args::run_duration)]
    duration: Option<Duration>,
    /// Sequence numbers to generate per stream (skipped ones included), e.g. 100000 or 1M.
    #[arg(long, value_parser = args::run_count)]
    count: Option<u64>,
    /// Independent streams (1..1024), each with its own source port, thread and sequence space;
    /// the rate is shared.
    #[arg(long, default_value = "1", value_parser = args::send_streams)]
    streams: usize,
    /// Use UDP segmentation offload: one system call carries up to 64 datagrams. Needed to
    /// offer a receiver more than ~200 kpps from one core.
    #[arg(long)]
    gso: bool,
    /// Most datagrams per send call, 1..1024 (default: about 50 us worth at the requested rate).
    #[arg(long, value_parser = args::burst)]
    burst: Option<usize>,
    /// Leave out every Nth sequence number (N-1, 2N-1, ...), to inject exactly known loss (N >= 2).
    #[arg(long, value_name = "N", value_parser = args::skip_every)]
    skip_every: Option<u64>,
    /// Leave out the sequence numbers A..B (inclusive); may be repeated.
    #[arg(long, value_name = "A..B", value_parser = parse_range)]
    skip: Vec<(u64, u64)>,
    /// First sequence number of every stream. Default 0, or for time-stamped formats (VDIF,
    /// Mark5B) the frame of the current time, so the frames carry the real time.
    #[arg(long, value_parser = units::parse_count)]
    start_seq: Option<u64>,
    /// Pin sender threads to these CPUs, round-robin (e.g. 1 or 0,1).
    #[arg(long, value_delimiter = ',')]
    cpu: Vec<usize>,
    /// After a stall, make up the backlog at up to this multiple of the rate (inf = full speed).
    #[arg(long, default_value_t = 1.5)]
    catch_up_factor: f64,
    /// Give up a backlog older than this (the schedule moves on; reported as a slip).
    #[arg(long, default_value = "50ms", value_parser = units::parse_duration)]
    max_lag: Duration,
    /// Send from this local address.
    #[arg(long)]
    bind: Option<std::net::IpAddr>,
    /// Multicast TTL, 1..255 (default 1: the local network only). Only for a multicast TARGET.
    #[arg(long, value_parser = args::ttl)]
    ttl: Option<u32>,
    #[command(flatten)]
    fmt: FormatArgs,
    /// Print one JSON document (schema wirespeed.send/1) instead of the summary.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RecvArgs {
    /// Where to listen: PORT, ADDR:PORT, or a multicast GROUP:PORT (joins the group).
    listen: String,
    /// Expected payload bytes per datagram; others count as invalid. Default: any multiple of 8.
    #[arg(long, value_parser = args::udp_size)]
    size: Option<u64>,
    /// Socket receive buffer to ask for (e.g. 16M). The granted size is printed; when
    /// net.core.rmem_max caps it, so is the sysctl that raises the cap. At most 1G.
    #[arg(long, default_value = "32M", value_parser = args::sockbuf)]
    rcvbuf: u64,
    /// Ask for UDP GRO: the kernel hands over coalesced datagrams, split here by segment size.
    #[arg(long)]
    gro: bool,
    /// Pin the capture thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Stop after this long (5, 2.5s, 2m). Default: until Ctrl-C, --count or --once.
    #[arg(long, value_parser = args::run_duration)]
    duration: Option<Duration>,
    /// Stop once this many datagrams have arrived.
    #[arg(long, value_parser = args::run_count)]
    count: Option<u64>,
    /// Stop when every stream of the first wirespeed sender has sent its end-of-stream message.
    #[arg(long)]
    once: bool,
    /// Print a progress line every SECS seconds (to stderr); at least 10ms.
    #[arg(long, value_name = "SECS", value_parser = args::interval)]
    interval: Option<Duration>,
    /// With --interval: print each progress line as one JSON object (elapsed_s, pps, bps and
    /// the cumulative counts) instead of text, so a program following a long run (bench soak)
    /// reads numbers, not a layout.
    #[arg(long, requires = "interval")]
    interval_json: bool,
    /// Exit with code 3 if any packet was lost.
    #[arg(long)]
    expect_zero_loss: bool,
    /// Datagrams per receive call, 1..1024.
    #[arg(long, default_value = "64", value_parser = args::batch)]
    batch: usize,
    /// Most streams (source address/port pairs) tracked, 1..8192; their ledgers are
    /// preallocated, and --max-streams x --window may take at most 1 GiB.
    #[arg(long, default_value = "64", value_parser = args::max_streams)]
    max_streams: usize,
    /// Reorder window in packets (a power of two up to 16M = 16777216): later arrivals count as
    /// stale, not late.
    #[arg(long, default_value = "65536", value_parser = args::window)]
    window: u64,
    /// Poll without blocking: lowest latency, but the capture core runs at 100%.
    #[arg(long)]
    busy_poll: bool,
    /// Longest nap after a receive call that found the socket nearly drained (like NIC interrupt
    /// moderation: one wake-up per batch, not per datagram; the socket buffer holds what arrives
    /// meanwhile). The nap adapts to the arrival rate and is skipped when a batch arrives within
    /// 200 us; it is capped so a 40 Gb/s burst fills at most 1/8 of the granted buffer. 0 disables.
    #[arg(long, default_value = "1ms", value_parser = units::parse_duration)]
    coalesce: Duration,
    /// Local interface address to join a multicast group on (only with a multicast GROUP:PORT).
    #[arg(long)]
    iface: Option<std::net::Ipv4Addr>,
    /// Gap ranges shown per stream in the summary (all are in --json), 0..4096.
    #[arg(long, default_value = "8", value_parser = args::gaps)]
    gaps: usize,
    #[command(flatten)]
    fmt: FormatArgs,
    /// Print one JSON document (schema wirespeed.recv/1, or record/1 for record) instead of the summary.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct DemoArgs {
    /// How long to send.
    #[arg(long, default_value = "3s", value_parser = args::run_duration)]
    duration: Duration,
    /// Send rate.
    #[arg(long, default_value = "2G", value_parser = Rate::parse)]
    rate: Rate,
    /// Payload bytes.
    #[arg(long, default_value = "8800", value_parser = args::udp_size)]
    size: u64,
    /// Leave out every Nth packet (N >= 2), to watch the ledger find them.
    #[arg(long, value_name = "N", value_parser = args::skip_every)]
    skip_every: Option<u64>,
    /// Print one JSON document with both reports.
    #[arg(long)]
    json: bool,
    /// Stay on loopback even when partitions could be made (by default, with CAP_NET_ADMIN the
    /// demo builds two partitions joined by a veth link, runs there, and removes them).
    #[arg(long)]
    loopback: bool,
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
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
fn resolve_format(
    f: &FormatArgs,
    preset: Option<&str>,
    size: Option<u64>,
) -> Result<(Arc<dyn Format>, Option<&'static spec::Preset>), Error> {
    if let Some(off) = f.seq_offset {
        let mut s = format!("seqfield,offset={off},width={},order={}", f.seq_width, f.seq_endian);
        if let Some(n) = size {
            s.push_str(&format!(",size={n}"));
        }
        return Ok((spec::parse(&s).map_err(Error::Usage)?, None));
    }
    let name = preset.unwrap_or(&f.format);
    let found = spec::presets().iter().find(|p| p.name == name);
    if preset.is_some() && found.is_none() {
        let names: Vec<&str> = spec::presets().iter().map(|p| p.name).collect();
        return Err(Error::Usage(format!("unknown preset '{name}': use one of {}", names.join(", "))));
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
        Some(p) => (spec::parse(p.spec).map_err(Error::Usage)?, Some(p)),
        None => (spec::parse(name).map_err(|e| Error::Usage(format!("--format: {e}")))?, None),
    };
    if let (Some(n), Some(len)) = (size, fmt.0.fixed_len()) {
        if n as usize != len {
            return Err(Error::Usage(format!(
                "--size {n} does not match {}, whose datagrams are {len} bytes: leave --size out",
                fmt.0.name()
            )));
        }
    }
    Ok(fmt)
}

fn counter_format(size: u64, f: &FormatArgs) -> Result<Arc<dyn Format>, Error> {
    if size == 0 || size > units::MAX_UDP_PAYLOAD as u64 {
        return Err(Error::Usage(format!(
            "--size {size} does not fit a UDP datagram: use 8..{} bytes (8800 is the usual jumbo size)",
            units::MAX_UDP_PAYLOAD
        )));
    }
    Ok(Arc::new(Counter::new(size as usize, f.byte_order).map_err(Error::Usage)?))
}

fn send_config(a: &SendArgs) -> Result<SendConfig, Error> {
    let dest = resolve(&a.target)?;
    let mut c = SendConfig::new(dest);
    c.bind = a.bind;
    c.rate = a.rate.unwrap_or(Rate::Bits(1e9));
    c.count = a.count;
    c.duration = match (a.duration, a.count) {
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    c.streams = a.streams;
    c.gso = a.gso;
    c.burst = a.burst;
    c.skip_every = a.skip_every;
    c.skip_ranges = a.skip.clone();
    c.start_seq = a.start_seq.unwrap_or(0);
    c.cpus = a.cpu.clone();
    if a.catch_up_factor.is_nan() || a.catch_up_factor < 1.0 {
        return Err(Error::Usage("--catch-up-factor must be at least 1 (1 = never faster than the rate)".into()));
    }
    c.catch_up_factor = a.catch_up_factor;
    c.max_lag = a.max_lag;
    if a.ttl.is_some() && !dest.ip().is_multicast() {
        return Err(Error::Usage(format!(
            "--ttl sets the multicast TTL, and {} is not a multicast group: leave --ttl out",
            dest.ip()
        )));
    }
    c.ttl = a.ttl.unwrap_or(1);
    Ok(c)
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<(), Error> {
    let s = serde_json::to_string_pretty(v).map_err(|e| Error::Runtime(format!("cannot encode JSON: {e}")))?;
    println!("{s}");
    Ok(())
}

fn cmd_send(a: SendArgs) -> Result<u8, Error> {
    let size = match (a.size, a.preset.as_deref(), a.fmt.format.as_str(), a.fmt.seq_offset) {
        (Some(n), ..) => Some(n),
        (None, None, "counter", _) | (None, _, _, Some(_)) => Some(8800),
        _ => None,
    };
    let (fmt, preset) = resolve_format(&a.fmt, a.preset.as_deref(), size)?;
    if fmt.fixed_len().is_none() {
        return Err(Error::Usage(format!("{} needs a datagram size to send: give --size", fmt.name())));
    }
    let mut cfg = send_config(&a)?;
    if a.start_seq.is_none() {
        // The frame of the current time: frames carry the real time, as an instrument's do.
        if let Some(seq) = fmt.seq_at(sys::realtime_ns()) {
            cfg.start_seq = seq;
        }
    }
    if let Some(n) = cfg.count {
        if args::skips_everything(&cfg.skip_ranges, cfg.start_seq, n) {
            return Err(Error::Usage(format!(
                "--skip leaves out all {n} sequence numbers of --count from {}: nothing would be sent",
                cfg.start_seq
            )));
        }
    }
    if a.rate.is_none() {
        if let Some(p) = preset {
            cfg.rate = Rate::parse(p.rate).map_err(Error::Usage)?;
        }
    }
    let stop = sys::install_stop_handler();
    let report = tx::run(&cfg, fmt, stop)?;
    if a.json {
        print_json(&report)?;
    } else {
        print!("{}", report.human());
    }
    Ok(0)
}

fn recv_config(a: &RecvArgs) -> Result<RecvConfig, Error> {
    let mut c = RecvConfig::new(parse_listen(&a.listen)?);
    c.rcvbuf = usize::try_from(a.rcvbuf).unwrap_or(usize::MAX);
    c.gro = a.gro;
    c.cpu = a.cpu;
    c.duration = a.duration;
    c.count = a.count;
    c.once = a.once;
    c.batch = a.batch;
    c.max_streams = a.max_streams;
    c.busy_poll = a.busy_poll;
    if a.coalesce > Duration::from_millis(100) {
        return Err(Error::Usage("--coalesce above 100ms risks overflowing the socket buffer: use 0..100ms".into()));
    }
    c.coalesce = a.coalesce;
    c.multicast_iface = a.iface;
    c.show_gaps = a.gaps;
    // The value parsers bound each option; their product is checked here, before any ledger
    // is allocated.
    wirespeed::rx::check_ledger_budget(a.max_streams, a.window)?;
    c.ledger = LedgerConfig { window: a.window, ..LedgerConfig::default() };
    if a.iface.is_some() && !c.listen.ip().is_multicast() {
        return Err(Error::Usage(format!(
            "--iface chooses where to join a multicast group, and {} is not one: leave --iface out",
            c.listen.ip()
        )));
    }
    Ok(c)
}

fn recv_format(a: &RecvArgs) -> Result<Arc<dyn Format>, Error> {
    resolve_format(&a.fmt, None, a.size).map(|(f, _)| f)
}

fn loss_verdict(r: &RecvReport, expect_zero: bool) -> u8 {
    if expect_zero && r.total.lost > 0 {
        eprintln!(
            "wirespeed: {} packets lost, zero loss was expected (--expect-zero-loss)",
            units::thousands(r.total.lost)
        );
        EXIT_LOSS
    } else if let Some(why) = r.zero_loss_unproven().filter(|_| expect_zero) {
        eprintln!("wirespeed: {why} (--expect-zero-loss)");
        EXIT_LOSS
    } else {
        0
    }
}

fn cmd_recv(a: RecvArgs) -> Result<u8, Error> {
    let cfg = recv_config(&a)?;
    let fmt = recv_format(&a)?;
    let stop = sys::install_stop_handler();
    let listener = Listener::bind(&cfg)?;
    // Always on stderr, so scripts that bind port 0 can learn the port even with --json.
    if let Some(addr) = listener.local_addr() {
        eprintln!("wirespeed recv: listening on {addr} ({}); Ctrl-C stops and prints the ledger", fmt.name());
    }
    let as_json = a.interval_json;
    let progress = |p: &rx::Progress| {
        let j = if as_json { serde_json::to_string(p).ok() } else { None };
        eprintln!("{}", j.unwrap_or_else(|| p.line()));
    };
    let report = rx::capture(&cfg, listener, fmt.as_ref(), stop, a.interval, &progress)?;
    if a.json {
        print_json(&report)?;
    } else {
        print!("{}", report.human(a.gaps));
    }
    Ok(loss_verdict(&report, a.expect_zero_loss))
}

#[derive(serde::Serialize)]
struct DemoReport<'a> {
    schema: &'static str,
    path: &'static str,
    send: &'a SendReport,
    recv: &'a RecvReport,
}

/// The demo across two partitions: sender in partition 1, receiver in partition 2, each a
/// `wirespeed` process started through `partition exec`, so the traffic crosses a real veth link.
fn demo_in_partitions(a: &DemoArgs) -> Result<u8, Error> {
    // Ctrl-C reaches the children too (same process group); this process must live on to
    // remove the partitions, so it only notes the signal.
    let _ = sys::install_stop_handler();
    let pair = testbed::pair::Pair::create("wsdemo", "demo")?;
    let (prefix, cpus) = (&pair.prefix, &pair.cpus);
    let dest = format!("{}:7148", testbed::partition_addr(2));
    if !a.json {
        eprintln!(
            "wirespeed demo: {} of {}-byte counter datagrams at {} from partition 1 (CPUs {:?}) to partition 2 (CPUs {:?}) over a veth link; partitions '{prefix}' are removed at the end (--loopback skips them)",
            units::nanos(a.duration.as_nanos() as f64),
            a.size,
            a.rate,
            cpus[0],
            cpus[1]
        );
    }
    let json = |mut v: Vec<String>| {
        if a.json {
            v.push("--json".into());
        }
        v
    };
    let recv_args = json(vec![
        "recv".into(),
        dest.clone(),
        "--once".into(),
        "--duration".into(),
        format!("{}", a.duration.as_secs_f64() + 10.0),
    ]);
    let mut recv = pair
        .command(2, &recv_args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::Runtime(format!("cannot start the receiver: {e}")))?;
    // Wait until the receiver says it is listening.
    {
        use std::io::BufRead;
        let mut line = String::new();
        let err = recv.stderr.take().ok_or_else(|| Error::Runtime("receiver has no stderr".into()))?;
        let mut r = std::io::BufReader::new(err);
        r.read_line(&mut line).map_err(|e| Error::Runtime(format!("receiver did not start: {e}")))?;
        if !line.contains("listening on") {
            let _ = recv.kill();
            return Err(Error::Runtime(format!("receiver did not start: {}", line.trim())));
        }
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut r, &mut rest);
        });
    }
    let mut send_args = json(vec![
        "send".into(),
        dest,
        "--rate".into(),
        match a.rate {
            Rate::Bits(b) => format!("{b}"),
            Rate::Packets(p) => format!("{p}pps"),
            Rate::Max => "max".into(),
        },
        "--size".into(),
        a.size.to_string(),
        "--duration".into(),
        format!("{}", a.duration.as_secs_f64()),
    ]);
    if let Some(n) = a.skip_every {
        send_args.extend(["--skip-every".into(), n.to_string()]);
    }
    let sent =
        pair.command(1, &send_args).output().map_err(|e| Error::Runtime(format!("cannot start the sender: {e}")))?;
    let recvd = recv.wait_with_output().map_err(|e| Error::Runtime(format!("receiver failed: {e}")))?;
    if !sent.status.success() || !recvd.status.success() {
        return Err(Error::Runtime(format!(
            "the demo failed: sender: {} receiver: {}",
            String::from_utf8_lossy(&sent.stderr).trim(),
            String::from_utf8_lossy(&recvd.stderr).trim()
        )));
    }
    if a.json {
        let parse = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b);
        let (Ok(s), Ok(r)) = (parse(&sent.stdout), parse(&recvd.stdout)) else {
            return Err(Error::Runtime("the demo's sender or receiver printed no JSON".into()));
        };
        let doc = serde_json::json!({"schema": "wirespeed.demo/1", "path": "partitions", "send": s, "recv": r});
        print_json(&doc)?;
    } else {
        print!("{}", String::from_utf8_lossy(&sent.stdout));
        println!();
        print!("{}", String::from_utf8_lossy(&recvd.stdout));
    }
    Ok(0)
}

fn cmd_demo(a: DemoArgs) -> Result<u8, Error> {
    if !a.loopback && testbed::require_net_admin("demo").is_ok() {
        return demo_in_partitions(&a);
    }
    let fa = FormatArgs {
        format: "counter".into(),
        byte_order: ByteOrder::Be,
        seq_offset: None,
        seq_width: 8,
        seq_endian: ByteOrder::Be,
    };
    let fmt = counter_format(a.size, &fa)?;
    let mut rcfg = RecvConfig::new("127.0.0.1:0".parse().expect("static address"));
    rcfg.once = true;
    rcfg.duration = Some(a.duration + Duration::from_secs(5));
    let listener = Listener::bind(&rcfg)?;
    let dest = listener.local_addr().ok_or_else(|| Error::Runtime("cannot read the receiver's port".into()))?;
    let mut scfg = SendConfig::new(dest);
    scfg.rate = a.rate;
    scfg.duration = Some(a.duration);
    scfg.skip_every = a.skip_every;
    let stop = sys::install_stop_handler();
    if !a.json {
        eprintln!(
            "wirespeed demo: {} of {}-byte counter datagrams at {} over loopback ({dest}); partitions come with `wirespeed partition`",
            units::nanos(a.duration.as_nanos() as f64),
            a.size,
            a.rate
        );
    }
    let (sent, recvd) = std::thread::scope(|s| {
        let r = s.spawn(|| rx::capture(&rcfg, listener, fmt.as_ref(), stop, None, &|_| {}));
        let sent = tx::run(&scfg, fmt.clone(), stop);
        (sent, r.join().expect("receiver thread panicked"))
    });
    let (sent, recvd) = (sent?, recvd?);
    if a.json {
        print_json(&DemoReport { schema: "wirespeed.demo/1", path: "loopback", send: &sent, recv: &recvd })?;
    } else {
        print!("{}", sent.human());
        println!();
        print!("{}", recvd.human(8));
    }
    Ok(0)
}

fn cmd_formats() -> Result<u8, Error> {
    println!("Formats (--format NAME or a spec NAME,KEY=VALUE,...):");
    for (name, line) in spec::formats_help() {
        println!("  {name:<9} {line}");
    }
    println!("\nPresets (send --preset NAME; --format NAME on recv, record and verify):");
    for p in spec::presets() {
        println!("  {:<8} {:>6} B at {:<9} {}", p.name, p.size, p.rate, p.description);
        println!("  {:<8} spec: {}", "", p.spec);
    }
    println!("\nGeneric instrument header: --seq-offset BYTES --seq-width 1..8 --seq-endian be|le (with --size).");
    Ok(0)
}

/// A command line clap refused, said in one line (what is wrong, with clap's tip folded in),
/// exit code 2; help and version requests are printed whole as clap has them.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let text = e.render().to_string();
    let first: Vec<&str> = text.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
    let msg = first.join(" ");
    eprintln!("wirespeed: {} (--help explains)", msg.strip_prefix("error: ").unwrap_or(&msg));
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    if let Some(m) = matches.subcommand_matches("partition").and_then(|m| m.subcommand_matches("create")) {
        if let Err(e) = check_pairing(m) {
            eprintln!("wirespeed: {e}");
            return ExitCode::from(e.exit_code() as u8);
        }
    }
    let r = match cli.cmd {
        Cmd::Send(a) => cmd_send(a),
        Cmd::Recv(a) => cmd_recv(a),
        Cmd::Record(a) => record_cmd::cmd_record(a),
        Cmd::Verify(a) => record_cmd::cmd_verify(a),
        Cmd::DiskTest(a) => record_cmd::cmd_disk_test(a),
        Cmd::Reflect(a) => latency_cmd::cmd_reflect(a),
        Cmd::Ping(a) => latency_cmd::cmd_ping(a),
        Cmd::Linerate(a) => latency_cmd::cmd_linerate(a),
        Cmd::Ttcp(a) => ttcp_cmd::cmd_ttcp(a),
        Cmd::Bench(a) => bench_cmd::cmd_bench(a),
        Cmd::Formats => cmd_formats(),
        Cmd::Demo(a) => cmd_demo(a),
        Cmd::Partition(a) => cmd_partition(a),
    };
    match r {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("wirespeed: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
