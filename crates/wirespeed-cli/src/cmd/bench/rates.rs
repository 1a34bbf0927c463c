//! `wirespeed bench rates`: seed 002's table, per offered rate the packets captured and lost.

use crate::args::{self, List, OutputArgs, PlaceArgs, RcvbufArgs};
use crate::out::{out_dir, say, say_line, stopped, BenchEnd};
use clap::Args;
use std::time::Duration;
use wirespeed::units::Rate;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::rates::{self, RatesConfig};

pub const RATES_HELP: &str = "Seed 002's table (Haystack, 'Burst Mode Benchmarking', 2010): a packet \
    emulator sent 8800-byte Mark5B packets for 1 s at 1024..8192 Mb/s to a capture host, timed \
    with the shell's `time`, and the table gave per rate the packets the receiving kernel \
    captured and lost. It found loss from 5120 Mb/s and concluded the receiver keeps up to at \
    least 4.5 Gb/s.\n\n\
    Here each rate is one point: a fresh receiver (wirespeed recv --once) and a sender \
    (wirespeed send --rate R --duration T), in two partitions joined by a veth link when root, \
    on loopback otherwise. Columns:\n  \
    -t (s)            seconds to send (--duration)\n  \
    -r (Mb/s)         the rate asked for, 10^6 bits/s of UDP payload\n  \
    time (s)          the sender's real execution time, start to exit (the seed's `time`)\n  \
    achieved (Mb/s)   what the sender really sent per second: below -r, the sender was the limit\n  \
    sent              datagrams the sender sent (its own count)\n  \
    packets captured  unique sequence numbers received (the ledger)\n  \
    lost (ledger)     sequence numbers that never arrived, exact, tail included\n  \
    lost (kernel)     the receiving socket's own drop counter (SO_RXQ_OVFL)\n  \
    drops/M           lost per million sent\n\n\
    Reading it: loss the kernel counted at the socket means the receiver did not keep up (its \
    buffer overflowed); ledger loss the kernel did not count happened before the socket \
    (sender, link, stack); an achieved rate below -r means the sender was the limit. The lines \
    after the table say this per lossy rate.\n\n\
    Try:  wirespeed bench rates              (the seed's rates, 1 s each, 8800-byte datagrams)\n      \
    wirespeed bench rates --rates 500M,1G,2G --duration 5 --repeat 3 -o results/\n\n\
    Exit codes: 0 done (loss is a result, not a failure), 1 runtime failure or stopped by a \
    signal (Ctrl-C: the rows measured are still reported, and partitions are removed), 2 bad usage.";

#[derive(Args)]
pub struct RatesArgs {
    /// Offered rates, comma-separated: payload bits/s (1024M = 1.024 * 10^9 b/s), datagrams/s
    /// (500kpps), max, or ranges FROM:TO:STEP.
    #[arg(long, default_value = rates::SEED_RATES, value_parser = |s: &str| args::rate_list(s, MAX_RATES))]
    rates: List<Rate>,
    /// Seconds to send at each rate (the seed's -t).
    #[arg(long, default_value = "1", value_parser = args::point_duration)]
    duration: Duration,
    /// UDP payload bytes per datagram (a multiple of 8).
    #[arg(long, default_value = "8800", value_name = "BYTES", value_parser = args::counter_size)]
    size: usize,
    /// Run the whole list this many times.
    #[arg(long, default_value = "1", value_parser = args::repeat)]
    repeat: u32,
    #[command(flatten)]
    buf: RcvbufArgs,
    #[command(flatten)]
    place: PlaceArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// Most rates in one table: a row each.
const MAX_RATES: usize = 200;

pub fn cmd_rates(a: RatesArgs) -> Result<u8, Error> {
    let cfg = RatesConfig {
        rates: a.rates.0,
        size: a.size,
        duration: a.duration,
        gso: a.place.gso,
        rcvbuf: a.buf.rcvbuf,
        repeat: a.repeat,
    };
    let dir = out_dir(&a.output.out)?;
    let stop = sys::install_stop_handler();
    let runner = a.place.fleet_runner(stop)?;
    let json = a.output.json;
    let head = rates::header(cfg.size, cfg.duration, &runner.placement());
    say(json, &head);
    let doc = rates::run(&runner, &cfg, &mut |r| {
        let l = rates::line(r);
        say_line(json, &l);
    })?;
    drop(runner);
    let shown: String = doc.summary.iter().map(|l| format!("=> {l}\n")).collect();
    let extra = vec![("rates.csv".to_string(), rates::csv(&doc))];
    let end = BenchEnd { name: "rates", doc: &doc, text: rates::text(&doc), extra, also: Vec::new(), shown };
    end.finish(json, dir.as_deref())?;
    if doc.stopped {
        return Err(stopped(&format!("{} of {} points", doc.rows.len(), cfg.rates.len() * cfg.repeat as usize)));
    }
    Ok(0)
}
