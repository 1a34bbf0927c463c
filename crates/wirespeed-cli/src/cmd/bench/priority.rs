//! `wirespeed bench priority`: seed 004's nice -20 vs +20 on this host, against a CPU hog.

use crate::args::{self, usage, OutputArgs, PlaceArgs, RcvbufArgs};
use crate::out::{finish_bench, out_dir, say_line, stopped};
use clap::Args;
use std::time::Duration;
use wirespeed::units::Rate;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::max::MaxConfig;
use wirespeed_lab::bench::priority::{self, PriorityConfig};
use wirespeed_lab::bench::search::SearchConfig;

pub const PRIORITY_HELP: &str = "How much the receiver's scheduling priority is worth when \
    something else wants its core: seed 004 (CASPER) ran its receiver at nice -20 and found \
    about twice the throughput of one at +20.\n\n\
    The receiver shares its CPU with a hog: a busy loop at nice 0 started inside the receiver's \
    partition (its namespace and CPUs; on --loopback pinned to the receiver's CPU). For each \
    receiver setting, nice +19, 0, -20 and SCHED_FIFO 10 (recv --priority N, --realtime), \
    bench max's zero-loss binary search finds the highest rate at which nothing is lost; each \
    setting's result is the median of --repeat searches, and the rounds are interleaved (every \
    setting once, then again) so a drift of the host does not land on one setting.\n\n\
    The table gives each setting's median zero-loss rate with the lowest and highest search, \
    in datagrams/s too, and the factor over nice +19: seed 004's figure. '>=' marks a search \
    the receiver never lost in (the sender was the limit). --no-hog runs the same on an idle \
    core: the control, where priority should matter little.\n\n\
    Needs root: partitions, and the receiver at nice -20 and SCHED_FIFO (CAP_SYS_NICE).\n\n\
    Try:  wirespeed bench priority                      (8800-byte datagrams, 2 s probes, 3 searches each)\n      \
    wirespeed bench priority --size 1472 --gso --precision 10%\n      \
    wirespeed bench priority --loopback --duration 250ms --repeat 1 --hi 2G --json\n\n\
    Exit codes: 0 done, 1 runtime failure, no privilege, or stopped by a signal (what was \
    measured is still reported, and partitions are removed), 2 bad usage.";

#[derive(Args)]
#[group(id = "BenchPriorityArgs")]
pub struct PriorityArgs {
    /// UDP payload bytes per datagram (a multiple of 8; 8800 suits a 9000-byte MTU).
    #[arg(long, default_value = "8800", value_name = "BYTES", value_parser = args::counter_size)]
    size: usize,
    /// Sending time of each probe (4 settings x --repeat searches of several probes each).
    #[arg(long, default_value = "2s", value_parser = args::point_duration)]
    duration: Duration,
    /// Stop a search when the bracket's top/bottom - 1 is below this (0.1%..50%).
    #[arg(long, default_value = "5%", value_parser = args::precision)]
    precision: f64,
    /// Searches per setting; their median is the setting's result.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    /// Bottom of the range, payload bits/s (low: a receiver at nice +19 beside a hog gets
    /// little of its core).
    #[arg(long, default_value = "1M", value_name = "RATE", value_parser = args::bits_rate)]
    lo: f64,
    /// Top of the range, payload bits/s. Default: the sender flat out (max).
    #[arg(long, value_name = "RATE", value_parser = args::bits_or_max)]
    hi: Option<Rate>,
    /// No CPU hog: the same searches on an idle receiver core (the control).
    #[arg(long)]
    no_hog: bool,
    #[command(flatten)]
    buf: RcvbufArgs,
    #[command(flatten)]
    place: PlaceArgs,
    #[command(flatten)]
    output: OutputArgs,
}

pub fn cmd_priority(a: PriorityArgs) -> Result<u8, Error> {
    if a.place.prio.priority.is_some() || a.place.prio.realtime.is_some() {
        return Err(usage(
            "bench priority sets the receiver's --priority and --realtime itself, setting by setting: leave them out (--lock-memory applies to every setting)".into(),
        ));
    }
    let hi = match a.hi {
        Some(Rate::Bits(b)) => Some(b),
        _ => None,
    };
    let cfg = PriorityConfig {
        max: MaxConfig {
            search: SearchConfig { lo: a.lo, hi, precision: a.precision, max_probes: 40 },
            size: a.size,
            duration: a.duration,
            gso: a.place.gso,
            rcvbuf: a.buf.rcvbuf,
            repeat: a.repeat,
        },
        hog: !a.no_hog,
        lock_memory: a.place.prio.lock_memory,
    };
    cfg.max.search.validate().map_err(Error::invalid)?;
    if !sys::sched::has_capability(sys::sched::CAP_SYS_NICE) {
        return Err(Error::permission(
            "bench priority needs root: its receiver runs at nice -20 and under SCHED_FIFO (CAP_SYS_NICE), and its partitions need CAP_NET_ADMIN",
        ));
    }
    priority::check(&cfg)?;
    let dir = out_dir(&a.output.out)?;
    // Ctrl-C reaches the children too; this process lives on to report and remove partitions.
    let stop = sys::install_stop_handler();
    let mut runner = a.place.runner(stop)?;
    let json = a.output.json;
    let head = priority::header(&cfg, &runner.placement());
    let say = |l: &str| say_line(json, l);
    say(&head);
    let mut text = format!("{head}\n");
    let doc = priority::run(&mut runner, &cfg, &mut |p| {
        let l = priority::progress_line(&p);
        say(&l);
        text.push_str(&l);
        text.push('\n');
    })?;
    drop(runner);
    let table = priority::table(&doc);
    finish_bench(json, dir.as_deref(), "priority", text, &doc, &table)?;
    if doc.stopped {
        return Err(stopped(""));
    }
    Ok(0)
}
