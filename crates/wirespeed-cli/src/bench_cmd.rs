//! `wirespeed bench`: benchmark reports like the seeds' (issue #7). `max` searches for the
//! highest zero-loss rate, `rates` reproduces seed 002's table; `ttcp` is in ttcp_cmd.
//!
//! Options are read as text and checked here, so a bad value is one line and exit code 2.

use crate::print_json;
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Duration;
use wirespeed::bench::max::{self, MaxConfig, Progress};
use wirespeed::bench::point::Runner;
use wirespeed::bench::rates::{self, RatesConfig};
use wirespeed::bench::search::SearchConfig;
use wirespeed::units::{self, Rate};
use wirespeed::{sys, Error};

const MAX_HELP: &str = "The highest rate at which a sender and a receiver lose nothing, found by \
    binary search as RFC 2544's throughput test and spead2's benchmark do.\n\n\
    The first probe sends flat out (--rate max, or --hi): if even that loses nothing, the \
    receiver was never the limit and the result is '>= X (sender-bound)'. Otherwise each probe \
    sends for --duration at the geometric middle of the bracket; a probe that loses anything \
    (a ledger gap, an invalid datagram, or no end-of-stream message, so tail loss cannot hide) \
    lowers the top, a clean one raises the bottom, until top/bottom - 1 < --precision.\n\n\
    Zero loss is judged at the rate the sender ACHIEVED, not the rate it was asked for: a \
    sender asked for 8 Gb/s that manages 5 and loses nothing has shown zero loss at 5 only. The \
    result is the highest achieved rate of a clean probe below every lossy one (a clean probe \
    above a lossy one shows intermittent loss, not a safe rate, and a note says so); the 'loss \
    at' figure is the lowest achieved rate of a lossy probe.\n\n\
    --repeat runs independent searches and reports each and their median: one unlucky probe \
    (something else woke up on the host) can pull one search down, not the median.\n\n\
    Every probe is printed as it finishes: asked, achieved and received rates, packets sent, \
    lost (ledger), the receiving socket's kernel drop counter, the sender's real time, verdict.\n\n\
    Try:  wirespeed bench max                  (8800-byte datagrams, 5 s probes, 3 searches)\n      \
    wirespeed bench max --gso --size 1472 --precision 5%\n      \
    wirespeed bench max --loopback --duration 1 --repeat 1 --hi 2G --json\n\n\
    Exit codes: 0 done, 1 runtime failure or stopped by a signal (Ctrl-C: what was measured is \
    still reported, and partitions are removed), 2 bad usage.";

const RATES_HELP: &str = "Seed 002's table (Haystack, 'Burst Mode Benchmarking', 2010): a packet \
    emulator sent 8800-byte Mark5B packets for 1 s at 1024..8192 Mb/s to a capture host, timed \
    with the shell's `time`, and the table gave per rate the packets the receiving kernel \
    captured and lost. It found loss from 5120 Mb/s and concluded the receiver keeps up to at \
    least 4.5 Gb/s.\n\n\
    Here each rate is one point: a fresh receiver (wirespeed recv --once) and a sender \
    (wirespeed send --rate R --duration T), in two partitions joined by a veth link when root, \
    on loopback otherwise. Columns:\n  \
    -t (s)            seconds to send (--duration)\n  \
    -r (Mb/s)         the rate asked for, 10^6 bits/s of UDP payload\n  \
    time (s)          the sender's real execution time, start to exit (the seed's `time`)\n  \
    achieved (Mb/s)   what the sender really sent per second: below -r, the sender was the limit\n  \
    sent              datagrams the sender sent (its own count)\n  \
    packets captured  unique sequence numbers received (the ledger)\n  \
    lost (ledger)     sequence numbers that never arrived, exact, tail included\n  \
    lost (kernel)     the receiving socket's own drop counter (SO_RXQ_OVFL)\n  \
    drops/M           lost per million sent\n\n\
    Reading it: loss the kernel counted at the socket means the receiver did not keep up (its \
    buffer overflowed); ledger loss the kernel did not count happened before the socket \
    (sender, link, stack); an achieved rate below -r means the sender was the limit. The lines \
    after the table say this per lossy rate.\n\n\
    Try:  wirespeed bench rates              (the seed's rates, 1 s each, 8800-byte datagrams)\n      \
    wirespeed bench rates --rates 500M,1G,2G --duration 5 --repeat 3 -o results/\n\n\
    Exit codes: 0 done (loss is a result, not a failure), 1 runtime failure or stopped by a \
    signal (Ctrl-C: the rows measured are still reported, and partitions are removed), 2 bad usage.";

const SWEEP_HELP: &str = "Every offered rate x datagram size x receive buffer, each point a fresh \
    receiver (wirespeed recv --once) and sender (wirespeed send --rate R --duration T), in two \
    partitions joined by a veth link when root (made for the run, removed after it), on loopback \
    otherwise. It draws seed 004's figures (CASPER memo 21, 2008: received against transmitted \
    data rate, and packet rate, for three packet sizes) and a loss curve, and writes one \
    self-contained HTML report with the figures and tables.\n\n\
    Per point it records the offered, achieved (sent) and received rate in bits and packets, \
    the exact loss (ledger, tail included), drops per million, the kernel's drop counters, and \
    the CPU time per datagram of sender and receiver with the CPUs they ran on.\n\n\
    Files in -o DIR (default ./wirespeed-sweep-<UTC time>):\n  \
    results.csv, results.json   every run (written after every point)\n  \
    rx-vs-tx-rate.png/.svg      received vs transmitted data rate per size (seed 004, Figure 1)\n  \
    rx-vs-tx-pps.png/.svg       received vs transmitted packet rate per size (seed 004, Figure 2)\n  \
    loss-vs-offered.png/.svg    loss (% of sent) vs offered rate\n  \
    rx-cpu-per-packet.png/.svg  receiver CPU per datagram vs packet rate\n  \
    report.html                 all of it in one page (figures inline)\n  \
    summary.txt                 the medians table and the reading\n\n\
    The plots and the summary use the median of the --repeat runs of each point; every run is \
    in the tables. A sweep stopped part way (Ctrl-C, a killed shell) keeps what it measured: \
    run the same command with --resume -o DIR to measure only the missing points.\n\n\
    Try:  wirespeed bench sweep                               (1..9 Gb/s x 1080, 4096, 8800 B, 5 s points)\n      \
    wirespeed bench sweep --rates 1G:9G:1G --sizes 1080,4096,8800 --duration 5 --repeat 3 -o sweep/\n      \
    wirespeed bench sweep --rates 100kpps:600kpps:100kpps --sizes 1080 --gso\n      \
    wirespeed bench sweep --rates 2G,4G --sizes 8800 --rcvbuf 128K,1M,16M      (the buffer's effect)\n      \
    wirespeed bench sweep --resume -o sweep/                  (finish a stopped sweep)\n      \
    wirespeed bench sweep --rates 1G:8G:1G --sizes 8800 --record /data/sweep   (to disk: wirespeed record)\n\n\
    Exit codes: 0 done (loss is a result, not a failure), 1 runtime failure or stopped by a \
    signal (the results so far are saved and reported, partitions removed), 2 bad usage.";

#[derive(Args)]
pub struct SweepArgs {
    /// Offered rates: payload bits/s (2G), datagrams/s (500kpps), max, and ranges
    /// FIRST:LAST:STEP (1G:9G:1G), comma-separated.
    #[arg(long, default_value = "1G:9G:1G")]
    rates: String,
    /// UDP payload bytes per datagram, comma-separated (multiples of 8).
    #[arg(long, default_value = "1080,4096,8800", value_name = "BYTES,...")]
    sizes: String,
    /// Receive buffers the receiver asks for, comma-separated (128K,1M,16M).
    #[arg(long, default_value = "32M", value_name = "BYTES,...")]
    rcvbuf: String,
    /// Sending time of each point.
    #[arg(long, default_value = "5s")]
    duration: String,
    /// Passes over the whole grid; plots use the median of the passes.
    #[arg(long, default_value = "1")]
    repeat: String,
    /// Use UDP segmentation offload on the sender (a higher flat-out rate from one core).
    #[arg(long)]
    gso: bool,
    /// Stay on loopback (receiver on the second CPU, sender on the first) even as root.
    #[arg(long)]
    loopback: bool,
    /// Directory for the results, figures and report (created if needed).
    #[arg(short = 'o', long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Receive with `wirespeed record` writing to this directory instead of `recv`: every point
    /// measures the whole path to disk (RAM ring, O_DIRECT writer). Each point's files are
    /// removed after it.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// Continue the sweep whose results.json is in -o DIR: measure only the points it lacks.
    #[arg(long, requires = "out")]
    resume: bool,
    /// Print the results as one JSON document on stdout (progress goes to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: BenchCmd,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// The highest zero-loss rate, by binary search (RFC 2544 style).
    #[command(long_about = MAX_HELP)]
    Max(MaxArgs),
    /// Seed 002's table: per offered rate, packets captured and lost (ledger and kernel).
    #[command(long_about = RATES_HELP)]
    Rates(RatesArgs),
    /// Seed 000's ttcp tables: TCP and UDP by socket buffer size, and read/write sizes.
    Ttcp(crate::ttcp_cmd::BenchTtcpArgs),
    /// Rate x size x receive-buffer sweep with seed 004's figures and an HTML report.
    #[command(long_about = SWEEP_HELP)]
    Sweep(SweepArgs),
    /// A long zero-loss run with a record per minute (seed 001's 24- and 30-minute runs).
    #[command(long_about = crate::soak_cmd::SOAK_HELP)]
    Soak(crate::soak_cmd::SoakArgs),
    /// The same points with wirespeed and with iperf3, side by side in one table and one plot.
    #[command(long_about = crate::compare_cmd::COMPARE_HELP)]
    Compare(crate::compare_cmd::CompareArgs),
}

/// Where the probes run, shared by `max` and `rates`.
#[derive(Args)]
struct PlaceArgs {
    /// Stay on loopback (receiver on the second CPU, sender on the first) even when partitions
    /// could be made. Without it, as root, the sender and receiver run in two partitions joined by
    /// a veth link (made for the run, removed at the end).
    #[arg(long)]
    loopback: bool,
    /// Receive buffer the receiver asks for (16M = 16 MiB).
    #[arg(long, default_value = "32M", value_name = "BYTES")]
    rcvbuf: String,
    /// Use UDP segmentation offload on the sender (one system call carries many datagrams: a
    /// higher flat-out rate from one core).
    #[arg(long)]
    gso: bool,
    /// Write the report files into this directory (created if needed).
    #[arg(short = 'o', long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print one JSON document instead of the table (progress lines go to stderr).
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct MaxArgs {
    /// UDP payload bytes per datagram (a multiple of 8; 8800 suits a 9000-byte MTU).
    #[arg(long, default_value = "8800", value_name = "BYTES")]
    size: String,
    /// Sending time of each probe. Shorter probes miss slow leaks (a buffer that fills in 3 s).
    #[arg(long, default_value = "5s")]
    duration: String,
    /// Stop when the bracket's top/bottom - 1 is below this (0.1%..50%; 2% or 0.02).
    #[arg(long, default_value = "2%")]
    precision: String,
    /// Independent searches; each is reported, and their median is the result.
    #[arg(long, default_value = "3")]
    repeat: String,
    /// Bottom of the range, payload bits/s.
    #[arg(long, default_value = "10M", value_name = "RATE")]
    lo: String,
    /// Top of the range, payload bits/s. Default: the sender flat out (max).
    #[arg(long, value_name = "RATE")]
    hi: Option<String>,
    #[command(flatten)]
    place: PlaceArgs,
}

#[derive(Args)]
pub struct RatesArgs {
    /// Offered rates, comma-separated: payload bits/s (1024M = 1.024 * 10^9 b/s), datagrams/s
    /// (500kpps) or max.
    #[arg(long, default_value = rates::SEED_RATES)]
    rates: String,
    /// Seconds to send at each rate (the seed's -t).
    #[arg(long, default_value = "1")]
    duration: String,
    /// UDP payload bytes per datagram (a multiple of 8).
    #[arg(long, default_value = "8800", value_name = "BYTES")]
    size: String,
    /// Run the whole list this many times.
    #[arg(long, default_value = "1")]
    repeat: String,
    #[command(flatten)]
    place: PlaceArgs,
}

pub fn cmd_bench(a: BenchArgs) -> Result<u8, Error> {
    match a.cmd {
        BenchCmd::Max(m) => cmd_max(m),
        BenchCmd::Rates(r) => cmd_rates(r),
        BenchCmd::Ttcp(t) => crate::ttcp_cmd::cmd_bench_ttcp(t),
        BenchCmd::Sweep(s) => cmd_sweep(s),
        BenchCmd::Soak(s) => crate::soak_cmd::cmd_soak(s),
        BenchCmd::Compare(c) => crate::compare_cmd::cmd_compare(c),
    }
}

pub(crate) fn usage(s: String) -> Error {
    Error::Usage(s)
}

fn parse_size(s: &str) -> Result<usize, Error> {
    let n = units::parse_bytes(s).map_err(|e| usage(format!("--size: {e}")))?;
    if !(8..=units::MAX_UDP_PAYLOAD as u64).contains(&n) || n % 8 != 0 {
        return Err(usage(format!(
            "--size {n} is not a counter datagram: use a multiple of 8 from 8 to {} (8800 suits a 9000-byte MTU)",
            units::MAX_UDP_PAYLOAD - units::MAX_UDP_PAYLOAD % 8
        )));
    }
    Ok(n as usize)
}

fn parse_duration(s: &str) -> Result<Duration, Error> {
    let d = units::parse_duration(s).map_err(|e| usage(format!("--duration: {e}")))?;
    if d < Duration::from_millis(10) {
        return Err(usage(format!("--duration {s} is too short to measure: give at least 10ms (the seed used 1 s)")));
    }
    if d > Duration::from_secs(3600) {
        return Err(usage(format!("--duration {s} is more than an hour per point: give at most 1h")));
    }
    Ok(d)
}

pub(crate) fn parse_repeat(s: &str) -> Result<u32, Error> {
    match units::parse_count(s) {
        Ok(n) if (1..=100).contains(&n) => Ok(n as u32),
        _ => Err(usage(format!("--repeat '{s}' must be a whole number from 1 to 100"))),
    }
}

/// The receive buffer of `bench` commands: the same kind, and the same bound, as `recv --rcvbuf`.
pub(crate) fn parse_rcvbuf(s: &str) -> Result<u64, Error> {
    crate::args::sockbuf(s).map_err(|e| usage(format!("--rcvbuf {s}: {e}")))
}

fn parse_bits(flag: &str, s: &str) -> Result<f64, Error> {
    match Rate::parse(s) {
        Ok(Rate::Bits(b)) => Ok(b),
        Ok(_) => Err(usage(format!("{flag} {s}: give payload bits/s here, like 100M or 9.5G"))),
        Err(e) => Err(usage(format!("{flag}: {e}"))),
    }
}

fn parse_precision(s: &str) -> Result<f64, Error> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| usage(format!("--precision '{s}' is not a fraction: write 2% or 0.02")))?;
    if !(v.is_finite() && (0.001..=0.5).contains(&v)) {
        return Err(usage(format!("--precision {s} is out of range: use 0.1% to 50%")));
    }
    Ok(v)
}

fn parse_rates(s: &str) -> Result<Vec<Rate>, Error> {
    let v: Vec<Rate> = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| Rate::parse(p).map_err(|e| usage(format!("--rates: {e}"))))
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err(usage("--rates is empty: give rates like 1024M,2048M".into()));
    }
    Ok(v)
}

/// Create the output directory before any traffic, so a bad path fails at once.
pub(crate) fn out_dir(p: &Option<PathBuf>) -> Result<Option<PathBuf>, Error> {
    match p {
        None => Ok(None),
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::Runtime(format!("cannot create the output directory {}: {e}", d.display())))?;
            Ok(Some(d.clone()))
        }
    }
}

pub(crate) fn write_files(dir: &Path, files: &[(&str, &str)]) -> Result<(), Error> {
    for (name, body) in files {
        let p = dir.join(name);
        std::fs::write(&p, body).map_err(|e| Error::Runtime(format!("cannot write {}: {e}", p.display())))?;
    }
    Ok(())
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, Error> {
    serde_json::to_string_pretty(v).map_err(|e| Error::Runtime(format!("cannot encode JSON: {e}")))
}

fn cmd_max(a: MaxArgs) -> Result<u8, Error> {
    let hi = match a.hi.as_deref() {
        None => None,
        Some(h) if h.trim().eq_ignore_ascii_case("max") => None,
        Some(h) => Some(parse_bits("--hi", h)?),
    };
    let cfg = MaxConfig {
        search: SearchConfig {
            lo: parse_bits("--lo", &a.lo)?,
            hi,
            precision: parse_precision(&a.precision)?,
            max_probes: 40,
        },
        size: parse_size(&a.size)?,
        duration: parse_duration(&a.duration)?,
        gso: a.place.gso,
        rcvbuf: parse_rcvbuf(&a.place.rcvbuf)?,
        repeat: parse_repeat(&a.repeat)?,
    };
    cfg.search.validate().map_err(Error::Usage)?;
    let dir = out_dir(&a.place.out)?;
    // Ctrl-C reaches the children too; this process lives on to report and remove partitions.
    let stop = sys::install_stop_handler();
    let runner = Runner::auto(a.place.loopback, stop)?;
    let json = a.place.json;
    let head = max::header(&cfg, &runner.placement());
    let say = |l: &str| if json { eprintln!("{l}") } else { println!("{l}") };
    say(&head);
    let mut text = format!("{head}\n");
    let doc = max::run(&runner, &cfg, &mut |p| match p {
        Progress::Probe { search, n, point } => {
            let l = max::probe_line(search, n, point);
            say(&l);
            text.push_str(&l);
            text.push('\n');
        }
        Progress::Done { search, result } => {
            let l = max::search_line(search, result);
            say(&l);
            text.push_str(&l);
            text.push('\n');
        }
    })?;
    drop(runner);
    let summary = max::summary(&doc);
    text.push('\n');
    text.push_str(&summary);
    if let Some(d) = &dir {
        write_files(d, &[("max.txt", &text), ("max.json", &to_json(&doc)?)])?;
    }
    if json {
        print_json(&doc)?;
    } else {
        println!();
        print!("{summary}");
        if let Some(d) = &dir {
            println!("max.txt and max.json in {}", d.display());
        }
    }
    if doc.stopped {
        let n: usize = doc.searches.iter().map(|s| s.probes.len()).sum();
        return Err(Error::Runtime(format!("stopped by a signal after {n} probe(s); the results above are partial")));
    }
    Ok(0)
}

fn cmd_rates(a: RatesArgs) -> Result<u8, Error> {
    let cfg = RatesConfig {
        rates: parse_rates(&a.rates)?,
        size: parse_size(&a.size)?,
        duration: parse_duration(&a.duration)?,
        gso: a.place.gso,
        rcvbuf: parse_rcvbuf(&a.place.rcvbuf)?,
        repeat: parse_repeat(&a.repeat)?,
    };
    let dir = out_dir(&a.place.out)?;
    let stop = sys::install_stop_handler();
    let runner = Runner::auto(a.place.loopback, stop)?;
    let json = a.place.json;
    let head = rates::header(cfg.size, cfg.duration, &runner.placement());
    if json {
        eprint!("{head}");
    } else {
        print!("{head}");
    }
    let doc = rates::run(&runner, &cfg, &mut |r| {
        let l = rates::line(r);
        if json {
            eprintln!("{l}");
        } else {
            println!("{l}");
        }
    })?;
    drop(runner);
    if let Some(d) = &dir {
        write_files(
            d,
            &[("rates.txt", &rates::text(&doc)), ("rates.csv", &rates::csv(&doc)), ("rates.json", &to_json(&doc)?)],
        )?;
    }
    if json {
        print_json(&doc)?;
    } else {
        for l in &doc.summary {
            println!("=> {l}");
        }
        if let Some(d) = &dir {
            println!("rates.txt, rates.csv and rates.json in {}", d.display());
        }
    }
    if doc.stopped {
        return Err(Error::Runtime(format!(
            "stopped by a signal after {} of {} points; the rows above are partial",
            doc.rows.len(),
            cfg.rates.len() * cfg.repeat as usize
        )));
    }
    Ok(0)
}

fn parse_list<T>(flag: &str, s: &str, one: impl Fn(&str) -> Result<T, Error>) -> Result<Vec<T>, Error> {
    let v: Vec<T> = s.split(',').map(str::trim).filter(|p| !p.is_empty()).map(one).collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err(usage(format!("{flag} is empty: give at least one value")));
    }
    Ok(v)
}

/// A progress bar on a terminal: points done, the point running, elapsed and remaining time.
struct Bar {
    on: bool,
    t0: std::time::Instant,
    done_here: usize,
    drawn: bool,
}

impl Bar {
    fn new() -> Bar {
        use std::io::IsTerminal;
        Bar { on: std::io::stderr().is_terminal(), t0: std::time::Instant::now(), done_here: 0, drawn: false }
    }

    fn clear(&mut self) {
        if self.on && self.drawn {
            eprint!("\r\x1b[2K");
            self.drawn = false;
        }
    }

    fn draw(&mut self, n: usize, of: usize, what: &str, left_here: usize) {
        if !self.on {
            return;
        }
        let width = 30;
        let filled = ((n - 1) * width).checked_div(of).unwrap_or(0);
        let el = self.t0.elapsed().as_secs();
        let eta = if self.done_here > 0 {
            let per = self.t0.elapsed().as_secs_f64() / self.done_here as f64;
            let s = (per * left_here as f64) as u64;
            format!("  ~{}:{:02} left", s / 60, s % 60)
        } else {
            String::new()
        };
        eprint!(
            "\r\x1b[2K[{}{}] {}/{}  {what}  {}:{:02}{eta}",
            "#".repeat(filled),
            ".".repeat(width - filled),
            n,
            of,
            el / 60,
            el % 60
        );
        self.drawn = true;
    }
}

fn cmd_sweep(a: SweepArgs) -> Result<u8, Error> {
    use wirespeed::bench::sweep::{self, Meta, SweepConfig};
    let rates = sweep::parse_rates(&a.rates).map_err(|e| usage(format!("--rates: {e}")))?;
    let sizes = parse_list("--sizes", &a.sizes, parse_size)?;
    let rcvbufs = parse_list("--rcvbuf", &a.rcvbuf, parse_rcvbuf)?;
    let cfg = SweepConfig {
        rates,
        sizes,
        rcvbufs,
        duration: parse_duration(&a.duration)?,
        repeat: parse_repeat(&a.repeat)?,
        gso: a.gso,
    };
    // The same point twice would be one point in the results (its key): repeats are --repeat's.
    let twice = |flag: &str, keys: Vec<String>| -> Result<(), Error> {
        let mut seen = std::collections::BTreeSet::new();
        for k in keys {
            if !seen.insert(k.clone()) {
                return Err(usage(format!(
                    "{flag} lists {k} twice: give each once, and --repeat N to measure points N times"
                )));
            }
        }
        Ok(())
    };
    twice("--rates", cfg.rates.iter().map(|&r| sweep::rate_key(r)).collect())?;
    twice("--sizes", cfg.sizes.iter().map(|s| s.to_string()).collect())?;
    twice("--rcvbuf", cfg.rcvbufs.iter().map(|b| b.to_string()).collect())?;
    if cfg.points() > sweep::MAX_POINTS {
        return Err(usage(format!(
            "that sweep has {} points; at most {} in one run (fewer rates, sizes, buffers or passes)",
            cfg.points(),
            sweep::MAX_POINTS
        )));
    }
    let now = sweep::unix_ns();
    let dir = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("wirespeed-sweep-{}", wirespeed::spool::utc_compact(now))));
    if !a.resume && dir.join("results.json").exists() {
        return Err(usage(format!(
            "{} already holds a sweep's results: add --resume to continue it, or give another -o",
            dir.display()
        )));
    }
    // An earlier sweep is checked before anything is built, so a refused --resume costs nothing.
    let kind =
        if !a.loopback && wirespeed::testbed::require_net_admin("bench").is_ok() { "partitions" } else { "loopback" };
    let receiver = if a.record.is_some() { "record" } else { "recv" };
    let (earlier, started) = if a.resume {
        sweep::load_earlier(&dir, &cfg, kind, receiver)?
    } else {
        (Vec::new(), wirespeed::spool::utc_iso(now))
    };
    let dir = out_dir(&Some(dir))?.unwrap_or_default();
    let stop = sys::install_stop_handler();
    let mut runner = Runner::auto(a.loopback, stop)?;
    if let Some(r) = &a.record {
        runner.record_to(r.clone())?;
    }
    let placement = runner.placement();
    let json = a.json;
    let say = |l: &str| if json { eprintln!("{l}") } else { println!("{l}") };
    say(&sweep::header(&cfg, &placement, runner.receiver()));
    if !earlier.is_empty() {
        say(&format!("resuming: {} point(s) already in {}", earlier.len(), dir.join("results.json").display()));
    }
    let todo_total = cfg.missing(&earlier).len();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let meta = Meta { command, started, host: sweep::HostInfo::read() };
    let mut bar = Bar::new();
    let doc = sweep::run(&runner, &cfg, meta, earlier, &mut |p| {
        match p {
            sweep::Progress::Start { n, of, point } => {
                let what = format!(
                    "{} B, rcvbuf {}, {}",
                    point.size,
                    units::bytes(point.rcvbuf),
                    match point.rate {
                        Rate::Max => "max".to_string(),
                        r => r.to_string(),
                    }
                );
                bar.draw(n, of, &what, todo_total - bar.done_here);
            }
            sweep::Progress::Done { n, of, row, doc } => {
                bar.clear();
                bar.done_here += 1;
                say(&sweep::row_line(n, of, row));
                sweep::save(&dir, doc)?;
            }
        }
        Ok(())
    });
    bar.clear();
    let doc = doc?;
    drop(runner);
    sweep::save(&dir, &doc)?;
    let files = wirespeed::bench::report::write(&dir, &doc)?;
    let summary = sweep::text(&doc);
    sweep::write_atomic(&dir.join("summary.txt"), summary.as_bytes())?;
    if json {
        print_json(&doc)?;
    } else {
        println!();
        print!("{summary}");
        println!(
            "report: {}  (and results.csv, results.json, summary.txt, {} figure files)",
            dir.join("report.html").display(),
            files.len().saturating_sub(1)
        );
    }
    if doc.stopped {
        return Err(Error::Runtime(format!(
            "stopped by a signal after {} of {} points; the results so far are in {} (--resume -o {} runs the rest)",
            doc.rows.len(),
            doc.planned,
            dir.display(),
            dir.display()
        )));
    }
    Ok(0)
}
