//! `wirespeed bench pacing`: how exactly `wirespeed send` keeps the rate it is asked for, and
//! at what CPU cost against iperf3.

use crate::args::{self, List, OutputArgs, PlaceArgs, RcvbufArgs};
use crate::out::{out_dir, say, say_line, stopped, BenchEnd};
use clap::Args;
use std::time::Duration;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::pacing::{self, Case, PacingConfig};

pub const PACING_HELP: &str = "How exactly `wirespeed send` keeps the rate it is asked for, and at \
    what CPU cost: for each case (a datagram size and a rate), a sender and a receiver run for \
    --duration, --repeat times, and the sender's own report gives the figures; iperf3 (-u -b RATE \
    -l SIZE, server and client) runs the same case in the same place, alternating with wirespeed, \
    unless --no-iperf3. The pacer's requirements: every 1 s window within 0.5 % of the request, \
    and at moderate rates a sender CPU per datagram at most 2x iperf3's; the verdict lines say \
    whether they were met.\n\n\
    The sender and receiver run in two partitions joined by a veth link when root, on loopback \
    (sender on the first CPU, receiver on the second) otherwise. Columns:\n  \
    payload, rate            the case: UDP payload bytes, the rate asked (--gso: with UDP GSO)\n  \
    achieved / requested     sequence numbers sent per second over those asked (median of runs)\n  \
    lowest..highest window   the slowest and fastest 1 s window (sliding by 0.1 s) of any run,\n                           \
    over the request\n  \
    send-call gap p50 / p99  time between send calls (medians of the runs' percentiles)\n  \
    stalls given up          backlogs older than the sender's --max-lag that it gave up, all runs\n  \
    receiver lost            datagrams the receiver never got, all runs\n\n\
    A second table gives, per tool: achieved / requested, the worst 1 s window (its distance \
    from the request), sender and receiver CPU per datagram (medians; wirespeed: the sending \
    thread with its pacing waits, and the capture thread; iperf3: the client and server \
    processes, CPU use x test time / datagrams) and wirespeed's sender CPU over iperf3's. \
    iperf3 runs whole seconds (-t); it sends no GSO.\n\n\
    Default cases: 1080@1G,8800@1G,1080@5G,8800@5G (5 s, 3 runs). BENCHMARKS.md section 2's \
    six: --cases 8800@1G,8800@5G,8800@20G+gso,1080@100kpps,1080@500kpps+gso,1080@942M.\n\n\
    Try:  wirespeed bench pacing                          (the four default cases against iperf3)\n      \
    wirespeed bench pacing --cases 1080@100kpps,8800@20G+gso --duration 2 --repeat 1\n      \
    wirespeed bench pacing --loopback --cases 1080@1000pps --duration 1 --json --no-iperf3\n\n\
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
    /// Leave iperf3 out (it runs every case by default; left out with a note when it is not
    /// installed).
    #[arg(long)]
    no_iperf3: bool,
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
    let iperf3 = !a.no_iperf3;
    if let (true, Some(why)) = (iperf3, pacing::iperf3_refuses(&cases)) {
        return Err(Error::invalid(why));
    }
    let cfg = PacingConfig { cases, duration: a.duration, repeat: a.repeat, rcvbuf: a.buf.rcvbuf, iperf3 };
    let dir = out_dir(&a.output.out)?;
    let stop = sys::install_stop_handler();
    let runner = a.place.runner(stop)?;
    let json = a.output.json;
    let head = pacing::header(&cfg, &runner.placement());
    say(json, &head);
    let doc = pacing::run(&runner, &cfg, &mut |r| {
        let l = pacing::line(r);
        say_line(json, &l);
    })?;
    drop(runner);
    let shown = format!("=> {}\n{}", pacing::verdict(&doc), pacing::tools_text(&doc));
    let end = BenchEnd {
        name: "pacing",
        doc: &doc,
        text: pacing::text(&doc, &cfg),
        extra: Vec::new(),
        also: Vec::new(),
        shown,
    };
    end.finish(json, dir.as_deref())?;
    if doc.stopped {
        return Err(stopped(&format!("{} of {} cases", doc.rows.len(), cfg.cases.len())));
    }
    Ok(0)
}
