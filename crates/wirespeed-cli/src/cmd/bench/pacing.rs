//! `wirespeed bench pacing`: how exactly `wirespeed send` keeps the rate it is asked for.

use crate::args::{self, List, OutputArgs, PlaceArgs, RcvbufArgs};
use crate::out::{out_dir, print_json, say, say_line, to_json, write_files};
use clap::Args;
use std::time::Duration;
use wirespeed::bench::pacing::{self, Case, PacingConfig};
use wirespeed::bench::point::Runner;
use wirespeed::{sys, Error};

pub const PACING_HELP: &str = "How exactly `wirespeed send` keeps the rate it is asked for: for each \
    case (a datagram size and a rate), a sender and a receiver run for --duration, --repeat \
    times, and the sender's own report gives the figures. The pacer's requirement is 0.5 % over \
    any 1 s window; the last line says whether every window met it.\n\n\
    The sender and receiver run in two partitions joined by a veth link when root, on loopback \
    (sender on the first CPU, receiver on the second) otherwise. Columns:\n  \
    payload, rate            the case: UDP payload bytes, the rate asked (--gso: with UDP GSO)\n  \
    achieved / requested     sequence numbers sent per second over those asked (median of runs)\n  \
    lowest..highest window   the slowest and fastest 1 s window (sliding by 0.1 s) of any run,\n                           \
    over the request\n  \
    send-call gap p50 / p99  time between send calls (medians of the runs' percentiles)\n  \
    stalls given up          backlogs older than the sender's --max-lag that it gave up, all runs\n  \
    receiver lost            datagrams the receiver never got, all runs\n\n\
    Try:  wirespeed bench pacing                          (the six cases of BENCHMARKS.md, 5 s, 3 runs)\n      \
    wirespeed bench pacing --cases 1080@100kpps,8800@20G+gso --duration 2 --repeat 1\n      \
    wirespeed bench pacing --loopback --cases 1080@1000pps --duration 1 --json\n\n\
    Exit codes: 0 done (a window off target is a result, not a failure), 1 runtime failure or \
    stopped by a signal (Ctrl-C: the rows measured are still reported, and partitions are \
    removed), 2 bad usage.";

#[derive(Args)]
pub struct PacingArgs {
    /// Cases, comma-separated: SIZE@RATE, or SIZE@RATE+gso for UDP GSO; RATE in payload
    /// bits/s (942M, 5G) or datagrams/s (500kpps).
    #[arg(long, default_value = pacing::DEFAULT_CASES, value_parser = |s: &str| args::list(s, "--cases", Case::parse))]
    cases: List<Case>,
    /// Sending time of each run (at least 1 s for the window column).
    #[arg(long, default_value = "5s", value_parser = args::point_duration)]
    duration: Duration,
    /// Runs per case.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    #[command(flatten)]
    buf: RcvbufArgs,
    #[command(flatten)]
    place: PlaceArgs,
    #[command(flatten)]
    output: OutputArgs,
}

pub fn cmd_pacing(a: PacingArgs) -> Result<u8, Error> {
    let mut cases = a.cases.0;
    if a.place.gso {
        for c in &mut cases {
            c.gso = true;
        }
    }
    let cfg = PacingConfig { cases, duration: a.duration, repeat: a.repeat, rcvbuf: a.buf.rcvbuf };
    let dir = out_dir(&a.output.out)?;
    let stop = sys::install_stop_handler();
    let runner = Runner::auto(a.place.loopback, stop)?;
    let json = a.output.json;
    let head = pacing::header(&cfg, &runner.placement());
    say(json, &head);
    let doc = pacing::run(&runner, &cfg, &mut |r| {
        let l = pacing::line(r);
        say_line(json, &l);
    })?;
    drop(runner);
    if let Some(d) = &dir {
        write_files(d, &[("pacing.txt", &pacing::text(&doc, &cfg)), ("pacing.json", &to_json(&doc)?)])?;
    }
    if json {
        print_json(&doc)?;
    } else {
        println!("=> {}", pacing::verdict(&doc));
        if let Some(d) = &dir {
            println!("pacing.txt and pacing.json in {}", d.display());
        }
    }
    if doc.stopped {
        return Err(Error::Runtime(format!(
            "stopped by a signal after {} of {} cases; the rows above are partial",
            doc.rows.len(),
            cfg.cases.len()
        )));
    }
    Ok(0)
}
