//! `wirespeed bench sweep`: rate x size x receive buffer, seed 004's figures and an HTML report.

use crate::args::{self, usage, List, OutputArgs, PlaceArgs};
use crate::out::{out_dir, print_json, say_line};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::units::{self, Rate};
use wirespeed::{sys, Error};
use wirespeed_lab::bench::sweep::{self, Meta, SweepConfig};

pub const SWEEP_HELP: &str = "Every offered rate x datagram size x receive buffer, each point a fresh \
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
    #[arg(long, default_value = "1G:9G:1G", value_parser = |s: &str| args::rate_list(s, sweep::MAX_POINTS))]
    rates: List<Rate>,
    /// UDP payload bytes per datagram, comma-separated (multiples of 8).
    #[arg(long, default_value = "1080,4096,8800", value_name = "BYTES,...", value_parser = args::counter_sizes)]
    sizes: List<usize>,
    /// Receive buffers the receiver asks for, comma-separated (128K,1M,16M).
    #[arg(long, default_value = "32M", value_name = "BYTES,...", value_parser = args::sockbufs)]
    rcvbuf: List<u64>,
    /// Sending time of each point.
    #[arg(long, default_value = "5s", value_parser = args::point_duration)]
    duration: Duration,
    /// Passes over the whole grid; plots use the median of the passes.
    #[arg(long, default_value = "1", value_parser = args::repeat)]
    repeat: u32,
    #[command(flatten)]
    place: PlaceArgs,
    /// Receive with `wirespeed record` writing to this directory instead of `recv`: every point
    /// measures the whole path to disk (RAM ring, O_DIRECT writer). Each point's files are
    /// removed after it.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// Continue the sweep whose results.json is in -o DIR: measure only the points it lacks.
    #[arg(long, requires = "out")]
    resume: bool,
    #[command(flatten)]
    output: OutputArgs,
}

pub fn cmd_sweep(a: SweepArgs) -> Result<u8, Error> {
    let cfg = SweepConfig {
        rates: a.rates.0,
        sizes: a.sizes.0,
        rcvbufs: a.rcvbuf.0,
        duration: a.duration,
        repeat: a.repeat,
        gso: a.place.gso,
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
        .output
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
    let kind = if a.place.hosts.given() {
        "hosts"
    } else if !a.place.loopback && wirespeed_lab::testbed::require_net_admin("bench").is_ok() {
        "partitions"
    } else {
        "loopback"
    };
    let receiver = if a.record.is_some() { "record" } else { "recv" };
    let (earlier, started) = if a.resume {
        sweep::load_earlier(&dir, &cfg, kind, receiver)?
    } else {
        (Vec::new(), wirespeed::spool::utc_iso(now))
    };
    let dir = out_dir(&Some(dir))?.unwrap_or_default();
    let stop = sys::install_stop_handler();
    let mut runner = a.place.fleet_runner(stop)?;
    if let Some(r) = &a.record {
        runner.record_to(r.clone())?;
    }
    let placement = runner.placement();
    let json = a.output.json;
    let say = |l: &str| say_line(json, l);
    say(&sweep::header(&cfg, &placement, runner.receiver()));
    if !earlier.is_empty() {
        say(&format!("resuming: {} point(s) already in {}", earlier.len(), dir.join("results.json").display()));
    }
    let todo_total = cfg.missing(&earlier).len();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let meta = Meta { command, started, host: sweep::HostInfo::read() };
    let bar = wirespeed_lab::bench::progress::Bar::new(todo_total);
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
                bar.start(n, of, &what);
            }
            sweep::Progress::Done { n, of, row, doc } => {
                bar.done();
                bar.suspend(|| say(&sweep::row_line(n, of, row)));
                sweep::save(&dir, doc)?;
            }
        }
        Ok(())
    });
    bar.clear();
    let doc = doc?;
    drop(runner);
    sweep::save(&dir, &doc)?;
    let files = wirespeed_lab::bench::report::write(&dir, &doc)?;
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
        return Err(Error::failed(format!(
            "stopped by a signal after {} of {} points; the results so far are in {} (--resume -o {} runs the rest)",
            doc.rows.len(),
            doc.planned,
            dir.display(),
            dir.display()
        )));
    }
    Ok(0)
}
