//! `wirespeed send`: a paced stream of one payload format to HOST:PORT.

use crate::args::{self, parse_range, resolve_format, FormatArgs, PriorityArgs, TransportArgs};
use crate::out::{guard_verdict, print_json, WithPriority};
use clap::Args;
use std::time::Duration;
use wirespeed::addr::resolve;
use wirespeed::tx::{self, SendConfig};
use wirespeed::units::{self, Rate};
use wirespeed::{sys, Error};

#[derive(Args)]
pub struct SendArgs {
    /// Receiver address: HOST:PORT, ADDR:PORT or [IPV6]:PORT (e.g. [::1]:7148); a multicast
    /// group works too (239.1.2.3:7148, [ff05::1234]:7148).
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
    /// Most datagrams per wake-up and send call, 1..1024. By default a paced sender wakes about
    /// every 1 ms, as iperf3 does, with batches of at most 128 KiB over all streams, but never
    /// more often than every 250 us (at high rates a batch then holds 250 us of the stream); a
    /// late wake-up sends what is due, up to 1 ms of the stream. A smaller burst spaces
    /// datagrams more evenly, as an instrument does, at more CPU (1: a wake-up per datagram,
    /// spinning where the host wakes late).
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
    /// Send from this local address (with --raw: the source address written into the frames;
    /// default: the address IFACE would send from).
    #[arg(long, value_name = "ADDR", value_parser = args::ip_addr)]
    bind: Option<std::net::IpAddr>,
    /// Build the Ethernet/IP/UDP frames here and send them through a raw AF_PACKET socket on
    /// IFACE, past the qdisc, instead of a UDP socket: a sender core then offers more datagrams
    /// per second. Same payloads, pacing, skips and end-of-stream messages; one source port per
    /// stream. Needs CAP_NET_RAW. The destination's hardware address comes from the neighbour
    /// table (or --dst-mac); `lo` works too. Example:
    /// `wirespeed send 198.18.0.2:7000 --raw veth0 --size 1080 --rate max --count 1M`
    #[arg(long, value_name = "IFACE", conflicts_with = "gso")]
    raw: Option<String>,
    /// With --raw: the next hop's hardware address (aa:bb:cc:dd:ee:ff), when the neighbour
    /// table does not have it.
    #[arg(long, value_name = "MAC", requires = "raw", value_parser = tx::raw::Mac::parse)]
    dst_mac: Option<tx::raw::Mac>,
    /// Multicast TTL (IPv6: hop limit), 1..255 (default 1: the local network only). Only for a
    /// multicast TARGET.
    #[arg(long, value_parser = args::ttl)]
    ttl: Option<u32>,
    /// Interface a multicast TARGET leaves by: an IPv4 address of it, its name (eth0) or its
    /// index. A link-local IPv6 group (ff02::) needs it, or a scope in the target:
    /// [ff02::1234%eth0]:7148.
    #[arg(long, value_name = "IFACE", value_parser = args::iface)]
    iface: Option<wirespeed::addr::Iface>,
    #[command(flatten)]
    fmt: FormatArgs,
    #[command(flatten)]
    prio: PriorityArgs,
    #[command(flatten)]
    transport: TransportArgs,
    /// Print one JSON document (schema wirespeed.send/1) instead of the summary.
    #[arg(long)]
    json: bool,
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
        return Err(Error::invalid("--catch-up-factor must be at least 1 (1 = never faster than the rate)"));
    }
    c.catch_up_factor = a.catch_up_factor;
    c.max_lag = a.max_lag;
    if a.ttl.is_some() && !dest.ip().is_multicast() {
        return Err(Error::invalid(format!(
            "--ttl sets the multicast TTL, and {} is not a multicast group: leave --ttl out",
            dest.ip()
        )));
    }
    c.ttl = a.ttl.unwrap_or(1);
    c.multicast_iface = a.iface.clone();
    c.raw = a.raw.clone().map(|iface| tx::config::RawConfig { iface, dst_mac: a.dst_mac });
    c.priority = a.prio.priority();
    c.pgm = a.transport.pgm()?;
    if c.pgm.is_some() && a.gso {
        return Err(Error::invalid("--transport pgm sends one PGM packet per datagram: leave out --gso"));
    }
    Ok(c)
}

pub fn cmd_send(a: SendArgs) -> Result<u8, Error> {
    let size = match (a.size, a.preset.as_deref(), a.fmt.format.as_str(), a.fmt.seq_offset) {
        (Some(n), ..) => Some(n),
        (None, None, "counter", _) | (None, _, _, Some(_)) => Some(8800),
        _ => None,
    };
    let (fmt, preset) = resolve_format(&a.fmt, a.preset.as_deref(), size)?;
    if let Some(why) = fmt.cannot_send() {
        return Err(Error::invalid(why));
    }
    if fmt.fixed_len().is_none() {
        return Err(Error::invalid(format!("{} needs a datagram size to send: give --size", fmt.name())));
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
            return Err(Error::invalid(format!(
                "--skip leaves out all {n} sequence numbers of --count from {}: nothing would be sent",
                cfg.start_seq
            )));
        }
    }
    if a.rate.is_none() {
        if let Some(p) = preset {
            cfg.rate = Rate::parse(p.rate).map_err(Error::invalid)?;
        }
    }
    // Refused before anything is opened; then applied once for the process (the sending
    // threads take their SCHED_FIFO themselves).
    cfg.priority.check(false, 0)?;
    let stop = sys::install_stop_handler();
    let applied = cfg.priority.apply_process()?;
    let report = tx::run(&cfg, fmt, stop)?;
    if a.json {
        print_json(&WithPriority { report: &report, priority: &applied })?;
    } else {
        print!("{}", report.human());
        if !cfg.priority.is_default() {
            println!("  {}", applied.line("sending thread(s)"));
        }
    }
    Ok(guard_verdict(0))
}
