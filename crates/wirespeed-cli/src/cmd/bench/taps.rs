//! `wirespeed bench taps`: the recorder's capture CPU per datagram with 0, 1 and 3 live taps.

use crate::args::{self, OutputArgs};
use crate::out::{out_dir, say_line, stopped, BenchEnd};
use clap::Args;
use std::path::PathBuf;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::taps::{self, TapsConfig};

pub const TAPS_HELP: &str = "What live taps cost a recorder: its capture-thread CPU time per \
    datagram (its own cpu_ns_per_packet) while it records --count datagrams at a fixed --pps to \
    pcap with --share, with each number of taps in --taps attached (`wirespeed tap NAME`, \
    checking only). Every round runs each tap count once, the order rotating by one per round; \
    the summary gives each count's median, spread and ratio to the fewest taps. Each run also \
    shows the recorder's ring-full drops (taps never cause any) and what each tap delivered and \
    lost to overruns.\n\n\
    Everything runs on loopback as this binary. On a shared host runs spread by a quarter: \
    compare medians of many rounds from one session.\n\n\
    Try:  wirespeed bench taps                        (0, 1, 3 taps; 5 rounds of 200,000 x 1024 B at 50 kpps)\n      \
    wirespeed bench taps --repeat 15 --taps 0,1,3 --pps 100000 --json > taps.json\n\n\
    Exit codes: 0 done, 1 runtime failure or stopped by a signal, 2 bad usage.";

#[derive(Args)]
pub struct TapsArgs {
    /// UDP payload bytes per datagram (a multiple of 8).
    #[arg(long, default_value = "1024", value_name = "BYTES", value_parser = args::counter_size)]
    size: usize,
    /// Datagrams per run (1000..1e9).
    #[arg(long, default_value = "200000", value_parser = |s: &str| args::count_between(s, 1000, 1_000_000_000, "fewer is noise, more takes hours"))]
    count: u64,
    /// Sender rate, datagrams per second (the same for every run).
    #[arg(long, default_value = "50000", value_parser = |s: &str| args::count_between(s, 1000, 10_000_000, "a fixed, sustainable rate"))]
    pps: u64,
    /// Tap counts to compare, comma-separated (0..16 each).
    #[arg(long, default_value = "0,1,3", value_delimiter = ',', value_parser = clap::value_parser!(u8).range(0..=16))]
    taps: Vec<u8>,
    /// Rounds.
    #[arg(long, default_value = "5", value_parser = args::repeat)]
    repeat: u32,
    /// Where the recordings go for the while they run (each is removed after its run).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Recorder ring size (e.g. 64M).
    #[arg(long, default_value = "64M", value_parser = args::ring_buffer)]
    buffer: u64,
    #[command(flatten)]
    output: OutputArgs,
}

pub fn cmd_taps(a: TapsArgs) -> Result<u8, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::failed(format!("cannot find this program's path: {e}")))?;
    let cfg = TapsConfig {
        exe,
        size: a.size,
        count: a.count,
        pps: a.pps,
        taps: a.taps.iter().map(|&t| t as usize).collect(),
        repeat: a.repeat,
        dir: a.dir.clone().unwrap_or_else(std::env::temp_dir),
        buffer: a.buffer,
    };
    let dir = out_dir(&a.output.out)?;
    let stop = sys::install_stop_handler();
    let mut text = String::new();
    let doc = taps::run(&cfg, stop, &mut |r| {
        let l = taps::run_line(r);
        say_line(a.output.json, &l);
        text.push_str(&l);
        text.push('\n');
    })?;
    let summary = taps::summary(&doc);
    text.push_str(&summary);
    let end = BenchEnd { name: "taps", doc: &doc, text, extra: Vec::new(), also: Vec::new(), shown: summary };
    end.finish(a.output.json, dir.as_deref())?;
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(stopped(""));
    }
    Ok(0)
}
