//! `wirespeed tap`: read a live recording that `record --share NAME` publishes.

use crate::args::{self, resolve_format, FormatArgs};
use crate::out::print_json;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::spool::share::Start;
use wirespeed::tap::{self, Output, TapConfig};
use wirespeed::units;
use wirespeed::{sys, Error};
use wirespeed_lab::exporter::WithMetrics;

pub const TAP_HELP: &str = "Read a live recording from any partition of this host.\n\n\
    `wirespeed record ... --file-format pcap --share NAME` publishes its RAM ring(s) read-only; \
    `wirespeed tap NAME` maps them, checks every record with the same ledger as verify \
    (received, lost, late, duplicate, invalid per source and stream), and writes them as a pcap \
    file (-w FILE), to stdout (-w -) or to a program's stdin (--exec CMD). Several taps may read \
    at once. A tap never slows the recorder: one that falls behind is lapped and counts the \
    records it lost as tap_overrun. It starts at the newest data (--from-start: the oldest the \
    ring still holds) and ends when the recorder does.\n\n\
    Descriptors live in /run/wirespeed/share (or $WIRESPEED_SHARE_DIR). The tap needs to read \
    the recorder's /proc entry: the same user, or root. It maps only the recorder's own memory \
    (/proc/PID/fd/N of the named recorder, memfds sealed against shrinking) and refuses a \
    descriptor naming anything else, or no ring (exit code 2). It faults the rings in before it \
    says attached, so it keeps up from the first record.\n\n\
    Try:  wirespeed record 7148 --size 8800 --file-format pcap -o /data/rec --share obs1\n      \
    wirespeed tap obs1 --interval 1                (in another terminal or partition)\n      \
    wirespeed tap obs1 -w - | tcpdump -r - -c 5\n\n\
    Exit codes: 0 success, 1 runtime failure, 2 bad usage (e.g. no such share).";

#[derive(Args)]
pub struct TapArgs {
    /// The share name a recorder publishes (`record --file-format pcap --share NAME`).
    pub name: String,
    /// Begin with the oldest records the ring still holds instead of the newest data.
    #[arg(long)]
    pub from_start: bool,
    /// Write the records as a pcap file (created new; `-` writes the pcap stream to stdout).
    #[arg(short = 'w', long = "write", value_name = "FILE|-", conflicts_with = "exec")]
    pub write: Option<String>,
    /// Hand the records to a program: `sh -c CMD` gets the pcap stream on its stdin (e.g.
    /// --exec 'tcpdump -r - -c 10'). A program that reads slowly makes this tap fall behind,
    /// never the recorder.
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,
    /// The format that checks the records. Default: the recorder's own (from its descriptor).
    #[command(flatten)]
    pub fmt: FormatArgs,
    /// Expected payload bytes per datagram (with --format counter). Default: the recorder's.
    #[arg(long, value_parser = args::udp_size)]
    pub size: Option<u64>,
    /// Stop after this long (e.g. 30s). Default: when the recorder ends.
    #[arg(long, value_parser = units::parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after this many records.
    #[arg(long, value_parser = units::parse_count)]
    pub count: Option<u64>,
    /// Print a progress line every SECS seconds (to stderr); at least 10ms.
    #[arg(long, value_name = "SECS", value_parser = args::interval)]
    pub interval: Option<Duration>,
    /// With --interval: each progress line as one JSON object.
    #[arg(long, requires = "interval")]
    pub interval_json: bool,
    #[command(flatten)]
    pub metrics: args::MetricsArgs,
    /// Print one JSON document (schema wirespeed.tap/1) instead of the summary.
    #[arg(long)]
    pub json: bool,
}

pub fn cmd_tap(a: TapArgs) -> Result<u8, Error> {
    let explicit = a.fmt.format != "counter" || a.fmt.seq_offset.is_some() || a.size.is_some();
    let format = if explicit { Some(resolve_format(&a.fmt, None, a.size)?.0) } else { None };
    let output = match (&a.write, &a.exec) {
        (Some(w), _) if w == "-" => Output::Stdout,
        (Some(w), _) => Output::File(PathBuf::from(w)),
        (None, Some(c)) => Output::Exec(c.clone()),
        (None, None) => Output::None,
    };
    if a.json && matches!(output, Output::Stdout) {
        return Err(Error::invalid("--json and -w - both want stdout: write the records to a file or drop --json"));
    }
    let cfg = TapConfig {
        name: a.name.clone(),
        start: if a.from_start { Start::Oldest } else { Start::Newest },
        output,
        format,
        duration: a.duration,
        count: a.count,
        live: None,
    };
    let exporter = a.metrics.start("tap")?;
    let cfg = TapConfig { live: exporter.as_ref().map(|e| e.board.attach_tap()), ..cfg };
    let stop = sys::install_stop_handler();
    let as_json = a.interval_json;
    let progress = |p: &tap::TapProgress| {
        let j = if as_json { serde_json::to_string(p).ok() } else { None };
        eprintln!("{}", j.unwrap_or_else(|| p.line()));
    };
    let attached = |d: &wirespeed::spool::share::Descriptor| {
        eprintln!(
            "wirespeed tap: attached to {} (recorder pid {}, {} ring(s), {}); reading until it ends, Ctrl-C stops",
            d.name,
            d.pid,
            d.rings.len(),
            d.format
        );
        if let Some(e) = &exporter {
            e.announce("tap");
        }
    };
    let report = tap::run(&cfg, stop, a.interval, &progress, &attached)?;
    let metrics = args::serving(&exporter);
    if a.json {
        print_json(&WithMetrics { report: &report, metrics })?;
    } else if matches!(cfg.output, Output::Stdout) {
        eprint!("{}", report.human());
        if let Some(s) = metrics {
            eprintln!("  {}", s.line());
        }
    } else {
        print!("{}", report.human());
        if let Some(s) = metrics {
            println!("  {}", s.line());
        }
    }
    Ok(0)
}
