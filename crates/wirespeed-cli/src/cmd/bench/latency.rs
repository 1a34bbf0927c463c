//! `wirespeed bench latency`: wirespeed ping/reflect beside sockperf, open and closed loop.

use crate::args::{self, List, OutputArgs};
use crate::out::{finish_bench, out_dir, say_line};
use clap::Args;
use std::time::Duration;
use wirespeed::units::Rate;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::latency::{self, LatencyConfig, Tool};
use wirespeed_lab::bench::point::Runner;
use wirespeed_lab::latency::ping;
use wirespeed_lab::testbed;

pub const LATENCY_HELP: &str = "Round-trip percentiles of wirespeed ping/reflect beside sockperf, \
    each tool a client on one side and its server on the other, one after the other in the \
    same placement, the order reversed on every other repeat; medians of the repeats.\n\n\
    Tools (--tools):\n  \
    ws-closed     wirespeed ping --closed-loop, against wirespeed reflect\n  \
    sp-pp         sockperf ping-pong --full-rtt, against sockperf server (closed loop)\n  \
    ws-open       wirespeed ping (open loop, its default)\n  \
    sp-ul         sockperf under-load --reply-every 1 --full-rtt (sockperf's open loop)\n  \
    ws-open-spin  wirespeed ping --spin against reflect --spin (both poll; two busy cores)\n\n\
    Compare like with like: a closed loop sends only after the previous reply, so a stall \
    shows as one slow sample (coordinated omission; wirespeed counts the slots it skipped); an \
    open loop keeps its schedule and measures every probe a stall delayed. sockperf's figures \
    are its own percentiles as it prints them, over its run less its 400 ms warm-up; it takes \
    whole seconds (--duration is rounded up for it).\n\n\
    Paths (--paths): loopback (client on the first CPU, server on the second, by taskset) and, \
    as root, partition (client in partition 1, server in partition 2, a veth link between; \
    made for the run and removed). Default: both as root, loopback otherwise.\n\n\
    Columns: min, p50, p90, p99, p99.9, p99.99, max round trip (microseconds); client CPU/msg \
    = the client process's user + system time over the messages it sent (the same measure for \
    every tool); lost = replies lost (wirespeed's ledger, sockperf's 'dropped messages'). Then \
    the ratios wirespeed / sockperf of the medians.\n\n\
    sockperf is a separate package: apt-get install sockperf. --tools ws-open,ws-closed runs \
    without it.\n\n\
    Try:  wirespeed bench latency                           (64 B at 10,000/s, 10 s, 3 repeats)\n      \
    wirespeed bench latency --paths loopback --tools ws-open-spin,sp-ul,ws-open\n      \
    wirespeed bench latency --loopback --tools ws-open,ws-closed --duration 1 --repeat 1 --json\n\n\
    Exit codes: 0 done, 1 runtime failure (sockperf missing or failed) or stopped by a signal \
    (Ctrl-C: the runs measured are still reported, and partitions are removed), 2 bad usage.";

#[derive(Args)]
pub struct LatencyArgs {
    /// Messages per second (1..10,000,000; 10000 or 10kpps).
    #[arg(long, default_value = "10000", value_parser = parse_pps)]
    pps: f64,
    /// UDP payload bytes per message (24..65507; wirespeed's probe header is 24 bytes).
    #[arg(long, default_value = "64", value_parser = args::probe_size)]
    size: usize,
    /// Length of each run (sockperf: rounded up to whole seconds).
    #[arg(long, default_value = "10s", value_parser = args::point_duration)]
    duration: Duration,
    /// Runs of each tool per path.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    /// Tools, comma-separated, in the order of the first repeat.
    #[arg(long, default_value = latency::DEFAULT_TOOLS, value_parser = |s: &str| args::list(s, "--tools", Tool::parse))]
    tools: List<Tool>,
    /// Paths, comma-separated: loopback, partition (root). Default: both as root, else loopback.
    #[arg(long, value_parser = |s: &str| args::list(s, "--paths", parse_path))]
    paths: Option<List<Path>>,
    /// Loopback only, even as root (the same as --paths loopback).
    #[arg(long, conflicts_with = "paths")]
    loopback: bool,
    /// Real hosts as client and server (--tx the client, --rx the server), instead of --paths.
    #[command(flatten)]
    hosts: args::HostArgs,
    #[command(flatten)]
    output: OutputArgs,
}

fn parse_pps(s: &str) -> Result<f64, String> {
    let v = match Rate::parse(s) {
        Ok(Rate::Packets(p)) => p,
        _ => s
            .replace('_', "")
            .parse::<f64>()
            .map_err(|_| format!("'{s}' is not a message rate: give messages per second, e.g. 10000 or 10kpps"))?,
    };
    if !(v.is_finite() && (1.0..=ping::MAX_PPS).contains(&v)) {
        return Err(format!("{s} messages/s is out of range: use 1..{}", ping::MAX_PPS));
    }
    Ok(v)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    Loopback,
    Partition,
    Hosts,
}

fn parse_path(s: &str) -> Result<Path, String> {
    match s {
        "loopback" => Ok(Path::Loopback),
        "partition" | "partitions" => Ok(Path::Partition),
        _ => Err(format!("unknown path '{s}': choose from loopback, partition")),
    }
}

pub fn cmd_latency(a: LatencyArgs) -> Result<u8, Error> {
    let tools = a.tools.0;
    if a.hosts.given() && (a.paths.is_some() || a.loopback) {
        return Err(args::usage("--tx/--rx is a path of its own: leave out --paths and --loopback".into()));
    }
    let paths = match (a.paths, a.loopback) {
        _ if a.hosts.given() => vec![Path::Hosts],
        (Some(p), _) => p.0,
        (None, true) => vec![Path::Loopback],
        (None, false) if testbed::require_net_admin("bench").is_ok() => vec![Path::Loopback, Path::Partition],
        (None, false) => vec![Path::Loopback],
    };
    let cfg = LatencyConfig { pps: a.pps, size: a.size, duration: a.duration, repeat: a.repeat, tools };
    // Before any partition is made: a missing sockperf is one line, nothing measured.
    let sockperf = if cfg.tools.iter().any(|t| t.is_sockperf()) { Some(latency::sockperf_version()?) } else { None };
    let dir = out_dir(&a.output.out)?;
    let stop = sys::install_stop_handler();
    let say = |l: &str| say_line(a.output.json, l);
    let mut runs = Vec::new();
    let mut placements = Vec::new();
    let mut stopped = false;
    let mut text = String::new();
    for p in paths {
        let runner = match p {
            Path::Loopback => Runner::loopback(stop)?,
            Path::Partition => Runner::partitions(stop)?,
            Path::Hosts => a.hosts.runner_or(false, stop, || Runner::partitions(stop))?,
        };
        let head = latency::header(&cfg, &latency::placement(&runner));
        say(&head);
        text.push_str(&head);
        text.push('\n');
        stopped = latency::run_path(&runner, &cfg, &mut runs, &mut |r| {
            let l = latency::run_line(r);
            say(&l);
            text.push_str(&l);
            text.push('\n');
        })?;
        placements.push(latency::placement(&runner));
        drop(runner);
        if stopped {
            break;
        }
    }
    let doc = latency::finish(&cfg, placements, runs, sockperf, stopped);
    let tables = latency::tables(&doc);
    finish_bench(a.output.json, dir.as_deref(), "latency", text, &doc, &tables)?;
    if doc.stopped {
        return Err(crate::out::stopped(&format!("{} run(s)", doc.runs.len())));
    }
    Ok(0)
}
