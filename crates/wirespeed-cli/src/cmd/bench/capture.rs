//! `wirespeed bench capture`: the capture thread's CPU per datagram, one build or two (A/B).

use crate::args::{self, usage, OutputArgs};
use crate::out::{out_dir, say_line, stopped, BenchEnd};
use clap::Args;
use std::path::PathBuf;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::capture::{self, Build, CaptureConfig};
use wirespeed_lab::bench::point::Runner;

pub const CAPTURE_HELP: &str = "The receiver's capture-thread CPU time per datagram (its own \
    cpu_ns_per_packet) while a sender sends --count datagrams flat out: the figure a change on \
    the capture path is judged by. The receiver gets no --size (unless --fixed-size), so the \
    checks that formats without a fixed length need are on the measured path.\n\n\
    With --ab OTHER, the other build (A) and this one (B) run alternately, round by round, each \
    as both sender and receiver; the summary gives each build's median and spread and B/A as \
    the ratio of the medians and as the median of the pairwise ratios. On a shared host one run \
    differs from the next by a quarter: compare only builds run in the same session, and many \
    rounds of them.\n\n\
    The sender and receiver run on loopback (sender on the first CPU, receiver on the second), \
    or, as root without --loopback, in two partitions over a veth link.\n\n\
    Try:  wirespeed bench capture --loopback                         (10 runs of 300,000 x 1024 B)\n      \
    wirespeed bench capture --loopback --ab /tmp/old/wirespeed --repeat 15   (BENCHMARKS.md section 9)\n\n\
    Exit codes: 0 done, 1 runtime failure or stopped by a signal, 2 bad usage.";

#[derive(Args)]
pub struct CaptureArgs {
    /// UDP payload bytes per datagram (a multiple of 8).
    #[arg(long, default_value = "1024", value_name = "BYTES", value_parser = args::counter_size)]
    size: usize,
    /// Datagrams per run (1000..1e9).
    #[arg(long, default_value = "300000", value_parser = |s: &str| args::count_between(s, 1000, 1_000_000_000, "fewer is noise, more takes hours"))]
    count: u64,
    /// Runs per build.
    #[arg(long, default_value = "10", value_parser = args::repeat)]
    repeat: u32,
    /// Another wirespeed binary to compare with, run alternately as build A (this one is B).
    #[arg(long, value_name = "BINARY")]
    ab: Option<PathBuf>,
    /// Give the receiver --size, which takes the length lock off the path.
    #[arg(long)]
    fixed_size: bool,
    /// Stay on loopback even as root.
    #[arg(long)]
    loopback: bool,
    #[command(flatten)]
    hosts: args::HostArgs,
    #[command(flatten)]
    output: OutputArgs,
}

pub fn cmd_capture(a: CaptureArgs) -> Result<u8, Error> {
    let count = a.count;
    let this = std::env::current_exe().map_err(|e| Error::failed(format!("cannot find this program's path: {e}")))?;
    let builds = match &a.ab {
        None => vec![Build { label: "this".into(), exe: this }],
        Some(p) => {
            let other = std::fs::canonicalize(p)
                .map_err(|e| usage(format!("--ab {}: {e}: give the path of another wirespeed binary", p.display())))?;
            vec![Build { label: "A".into(), exe: other }, Build { label: "B".into(), exe: this }]
        }
    };
    let cfg = CaptureConfig { size: a.size, count, repeat: a.repeat, fixed_size: a.fixed_size, builds };
    let dir = out_dir(&a.output.out)?;
    let stop = sys::install_stop_handler();
    let runner = a.hosts.runner_or(a.loopback, stop, || Runner::auto(a.loopback, stop))?;
    let say = |l: &str| say_line(a.output.json, l);
    let head = capture::header(&cfg, &runner.placement());
    say(&head);
    let mut text = format!("{head}\n");
    let doc = capture::run(&runner, &cfg, &mut |r| {
        let l = capture::run_line(r);
        say(&l);
        text.push_str(&l);
        text.push('\n');
    })?;
    drop(runner);
    let summary = capture::summary(&doc);
    text.push_str(&summary);
    let end = BenchEnd { name: "capture", doc: &doc, text, extra: Vec::new(), also: Vec::new(), shown: summary };
    end.finish(a.output.json, dir.as_deref())?;
    if doc.stopped {
        return Err(stopped(&format!("{} run(s)", doc.runs.len())));
    }
    Ok(0)
}
