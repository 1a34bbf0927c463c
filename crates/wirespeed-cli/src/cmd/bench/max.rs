//! `wirespeed bench max`: the highest zero-loss rate, by binary search (RFC 2544 style).

use crate::args::{self, OutputArgs, PlaceArgs, RcvbufArgs};
use crate::out::{finish_bench, out_dir, say_line, stopped};
use clap::Args;
use std::time::Duration;
use wirespeed::units::Rate;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::max::{self, MaxConfig, Progress};
use wirespeed_lab::bench::search::SearchConfig;

pub const MAX_HELP: &str = "The highest rate at which a sender and a receiver lose nothing, found by \
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

#[derive(Args)]
pub struct MaxArgs {
    /// UDP payload bytes per datagram (a multiple of 8; 8800 suits a 9000-byte MTU).
    #[arg(long, default_value = "8800", value_name = "BYTES", value_parser = args::counter_size)]
    size: usize,
    /// Sending time of each probe. Shorter probes miss slow leaks (a buffer that fills in 3 s).
    #[arg(long, default_value = "5s", value_parser = args::point_duration)]
    duration: Duration,
    /// Stop when the bracket's top/bottom - 1 is below this (0.1%..50%; 2% or 0.02).
    #[arg(long, default_value = "2%", value_parser = args::precision)]
    precision: f64,
    /// Independent searches; each is reported, and their median is the result.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    /// Bottom of the range, payload bits/s.
    #[arg(long, default_value = "10M", value_name = "RATE", value_parser = args::bits_rate)]
    lo: f64,
    /// Top of the range, payload bits/s. Default: the sender flat out (max).
    #[arg(long, value_name = "RATE", value_parser = args::bits_or_max)]
    hi: Option<Rate>,
    #[command(flatten)]
    buf: RcvbufArgs,
    #[command(flatten)]
    place: PlaceArgs,
    #[command(flatten)]
    output: OutputArgs,
}

pub fn cmd_max(a: MaxArgs) -> Result<u8, Error> {
    let hi = match a.hi {
        Some(Rate::Bits(b)) => Some(b),
        _ => None,
    };
    let cfg = MaxConfig {
        search: SearchConfig { lo: a.lo, hi, precision: a.precision, max_probes: 40 },
        size: a.size,
        duration: a.duration,
        gso: a.place.gso,
        rcvbuf: a.buf.rcvbuf,
        repeat: a.repeat,
    };
    cfg.search.validate().map_err(Error::invalid)?;
    let dir = out_dir(&a.output.out)?;
    // Ctrl-C reaches the children too; this process lives on to report and remove partitions.
    let stop = sys::install_stop_handler();
    let runner = a.place.fleet_runner(stop)?;
    let json = a.output.json;
    let head = max::header(&cfg, &runner.placement());
    let say = |l: &str| say_line(json, l);
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
    finish_bench(json, dir.as_deref(), "max", text, &doc, &summary)?;
    if doc.stopped {
        let n: usize = doc.searches.iter().map(|s| s.probes.len()).sum();
        return Err(stopped(&format!("{n} probe(s)")));
    }
    Ok(0)
}
