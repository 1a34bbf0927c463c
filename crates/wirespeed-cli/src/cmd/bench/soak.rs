//! `wirespeed bench soak`: one long run at one rate with a record per interval (seed 001).
//!
//! Options are read as text and checked here, so a bad value is one line and exit code 2.

use crate::args::{self, usage, OutputArgs, PlaceArgs, RcvbufArgs};
use crate::out::{out_dir, say_line, BenchEnd};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::units::{self, Rate};
use wirespeed::{sys, Error};
use wirespeed_lab::bench::soak::{self, SoakConfig};
use wirespeed_lab::plot;

pub const SOAK_HELP: &str = "Seed 001 (Sun, 'Cassini UDP performance', 2004) sent 1080-byte UDP \
    packets for long runs and reported zero loss at 691 Mb/s sustained for 24 minutes, 864 Mb/s \
    for 30 minutes and 940 Mb/s for 1 to 2 minutes. A short probe (bench max, bench rates) \
    cannot show that: a buffer that creeps full, or a job that wakes up on the receiving host \
    every few minutes, only shows over a long run.\n\n\
    Here one receiver (wirespeed recv --once) and one sender (wirespeed send --rate R \
    --duration D) run for the whole duration, in two partitions joined by a veth link when \
    root, on loopback otherwise. The receiver reports its counts every --every, and each row \
    is what happened in that interval; the last row is closed by the receiver's final report \
    and holds the tail (numbers after the last one received, known from the sender's \
    end-of-stream message), so the rows add up to the run's exact totals. Columns:\n  \
    #                 row number (* = runs to the end and holds the tail; on screen it \
    follows the live rows and names the one it replaces, so add up either, not both)\n  \
    ended (UTC)       time of day the row ended\n  \
    t (s)             seconds since the receiver started (just before the sender)\n  \
    offered (Mb/s)    received + lost in the row: the sequence numbers the sender used\n  \
    received (Mb/s)   UDP payload received, 10^6 bits/s; received (pps) the same in datagrams/s\n  \
    datagrams         datagrams received in the row\n  \
    lost              sequence numbers that never arrived (the ledger; settles ~0.1 s late)\n  \
    kernel            the receiving socket's own drop counter (SO_RXQ_OVFL)\n  \
    udp               UDP RcvbufErrors in the receiver's namespace (on loopback: the host's)\n  \
    lost so far       the ledger's loss since the start\n\n\
    After the table: sent, received, lost (tail included), kernel drops, drops per million, \
    the longest clean stretch, the rate the sender achieved, CPU time per packet of sender and \
    receiver and the CPUs they ran on, and one verdict: 'zero loss for 30 min at 942 Mb/s' or \
    how much was lost in which minutes. Zero loss is judged at the rate the sender achieved: \
    one that fell short of the rate asked (below 98%) is named, and the verdict then speaks of \
    the rate achieved ('zero loss for 30 min at 870 Mb/s achieved (942 Mb/s asked; the sender \
    was the limit)'; JSON sender_bound). A run whose end-of-stream message never came is lossy \
    or unproven, never clean.\n\n\
    The defaults are the seed's challenge: 1080-byte datagrams at 942 Mb/s (Gigabit \
    Ethernet's line rate for that size) for 30 minutes, one row a minute. The seed's own runs:\n      \
    wirespeed bench soak --rate 691M --duration 24m\n      \
    wirespeed bench soak --rate 864M --duration 30m\n      \
    wirespeed bench soak --rate 940M --duration 2m\n\n\
    Try:  wirespeed bench soak -o results/soak    (30 min: soak.txt, .csv, .json, rate and loss charts)\n      \
    wirespeed bench soak --loopback --rate 200M --duration 20s --every 2s\n\n\
    --record DIR is the seed's whole challenge: the receiving side is the recorder (wirespeed \
    record -o DIR, RAM ring and O_DIRECT writer) instead of recv, so the soak proves the path \
    to disk, not only the network. Each row adds what the recorder did in it: bytes written, \
    its ring's high water so far, datagrams dropped at a full ring, and writer stalls (n/a \
    when the recorder does not report one). After the run, wirespeed verify DIR re-reads every \
    file against its sidecar; its verdict joins the soak's (table, JSON 'record.verify', the \
    loss chart's note), and the files must hold exactly what the recorder's ledger received. \
    DIR must be new or empty (created if missing), so verify judges this run alone; the \
    recording is left there (30 min at 942 Mb/s is about 200 GB). A disk that cannot hold the \
    run takes --prune: a file a minute, each verified as it is finished, then deleted.\n      \
    wirespeed bench soak --record /data/soak -o results/soak-record\n      \
    wirespeed bench soak --record /var/tmp/soak --prune -o results/soak-record\n      \
    wirespeed bench soak --record /var/tmp/soak --rate 20M --duration 20s --every 2s\n\n\
    Exit codes: 0 done (loss is a result, not a failure; but see 3), 1 runtime failure or \
    stopped by a signal (Ctrl-C, or a failure part-way: the rows measured are still reported \
    and written, and partitions are removed), 2 bad usage, 3 with --record only: loss, or the \
    recording failed verify.";

/// The options of `bench soak`; `--help` opens with [`SOAK_HELP`] (set on the variant in
/// bench_cmd.rs, as for max and rates).
#[derive(Args)]
pub struct SoakArgs {
    /// Offered rate: payload bits/s (942M = 942 * 10^6 b/s), datagrams/s (100kpps) or max.
    #[arg(long, default_value = soak::DEFAULT_RATE, value_parser = Rate::parse)]
    rate: Rate,
    /// How long to send (30m, 24m, 90s, 1h; at most 24h).
    #[arg(long, default_value = soak::DEFAULT_DURATION, value_parser = args::soak_duration)]
    duration: Duration,
    /// One row per this much time (1m, 10s; from 100ms, at most --duration).
    #[arg(long, default_value = soak::DEFAULT_EVERY, value_parser = units::parse_duration)]
    every: Duration,
    /// UDP payload bytes per datagram (a multiple of 8; the seed's 1080 fits a 1500-byte MTU).
    #[arg(long, default_value = "1080", value_name = "BYTES", value_parser = args::counter_size)]
    size: usize,
    #[command(flatten)]
    buf: RcvbufArgs,
    #[command(flatten)]
    place: PlaceArgs,
    // -o DIR gets soak.txt, .csv, .json and the rate and loss charts; --json prints the
    // document (schema wirespeed.bench.soak/1), the rows still going to stderr as they come.
    #[command(flatten)]
    output: OutputArgs,
    /// Leave out every Nth sequence number at the sender: known loss, to test the record.
    #[arg(long, value_name = "N", hide = true, value_parser = args::skip_every)]
    skip_every: Option<u64>,
    /// Record to this new or empty directory with wirespeed record instead of recv, then
    /// verify it (wirespeed verify DIR); exit code 3 on loss or a failed verify.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// With --record: a file a minute (--rotate 1m), each verified as soon as the recorder
    /// finishes it and then deleted with its sidecar, so a run longer than the disk holds is
    /// still verified whole (the verdicts add up; a file that fails verify is kept).
    #[arg(long, requires = "record")]
    prune: bool,
}

/// The row interval, checked against the soak's length (a bound no single value carries).
fn check_every(every: Duration, duration: Duration) -> Result<Duration, Error> {
    let s = args::duration_text(every);
    if every < Duration::from_millis(100) {
        return Err(usage(format!("--every {s} is too short: give at least 100ms (the default is one row a minute)")));
    }
    if every > duration {
        return Err(usage(format!(
            "--every {s} is longer than --duration {}: give a shorter --every",
            soak::human_duration(duration.as_secs_f64())
        )));
    }
    Ok(every)
}

/// Run `bench soak`: header, one row per interval as the receiver reports it, then the last
/// row (with the tail), the totals and the verdict.
pub fn cmd_soak(a: SoakArgs) -> Result<u8, Error> {
    let cfg = SoakConfig {
        rate: a.rate,
        size: a.size,
        duration: a.duration,
        every: check_every(a.every, a.duration)?,
        gso: a.place.gso,
        rcvbuf: a.buf.rcvbuf,
        skip_every: a.skip_every,
        record: a.record.clone(),
        prune: a.prune,
    };
    if let Some(d) = &cfg.record {
        soak::record::check_empty(d)?;
    }
    let dir = out_dir(&a.output.out)?;
    // Ctrl-C reaches the children too; this process lives on to report and remove partitions.
    let stop = sys::install_stop_handler();
    let mut runner = a.place.runner(stop)?;
    if let Some(d) = &cfg.record {
        runner.record_to(d.clone())?;
        runner.keep_recordings();
    }
    let json = a.output.json;
    let say = |l: &str| say_line(json, l);
    say(soak::header(&cfg, &runner.placement()).trim_end());
    let mut live_rows = 0;
    let doc = soak::run(&runner, &cfg, &mut |r| {
        live_rows += 1;
        say(&soak::line(r))
    })?;
    drop(runner);
    // The last row is closed by the receiver's final report (with the tail when the end-of-stream
    // message came); when it replaces rows shown live, it says which, so none is counted twice.
    if let Some(l) = soak::final_line(&doc, live_rows) {
        say(&l);
    }
    if doc.stopped {
        say("(stopped early)");
    }
    // The charts are named in the closing line only when they were drawn; a chart that fails
    // still leaves the data files written, and its error follows.
    let charts = match &dir {
        Some(d) => {
            let (rate, loss) = soak::charts(&doc);
            plot::line_chart_files(&rate, &d.join("soak-rate"))
                .and_then(|_| plot::line_chart_files(&loss, &d.join("soak-loss")))
                .map(|_| ())
        }
        None => Ok(()),
    };
    let shown = format!("\n{}=> {}\n", doc.summary.iter().map(|l| format!("{l}\n")).collect::<String>(), doc.verdict);
    let extra = vec![("soak.csv".to_string(), soak::csv(&doc))];
    let also = if charts.is_ok() {
        vec!["soak-rate.png/.svg".to_string(), "soak-loss.png/.svg".to_string()]
    } else {
        Vec::new()
    };
    BenchEnd { name: "soak", doc: &doc, text: soak::text(&doc), extra, also, shown }.finish(json, dir.as_deref())?;
    charts?;
    let upto = doc.intervals.last().map_or(0.0, |r| r.end_s);
    if let Some(e) = &doc.error {
        // The rows measured before the failure are printed and written above; then the failure.
        return Err(Error::failed(format!(
            "{e} (after {} of {}; the {} row(s) measured are reported{})",
            soak::human_duration(upto),
            soak::human_duration(cfg.duration.as_secs_f64()),
            doc.intervals.len(),
            if dir.is_some() { " and written" } else { "" }
        )));
    }
    if doc.stopped {
        return Err(crate::out::stopped(&format!(
            "{} of {} ({} row(s))",
            soak::human_duration(upto),
            soak::human_duration(cfg.duration.as_secs_f64()),
            doc.intervals.len()
        )));
    }
    if cfg.record.is_some() && !doc.zero_loss {
        return Ok(3);
    }
    Ok(0)
}
