//! `wirespeed ping`: round-trip latency at fixed packet rates (seed 003): percentile tables,
//! HdrHistogram logs and heat maps.

use crate::args;
use crate::out::print_json;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::addr::resolve;
use wirespeed::units::Rate;
use wirespeed::{sys, Error};
use wirespeed_lab::latency::ping;
use wirespeed_lab::latency::sweep::{self, Progress, SweepConfig, Swept};
use wirespeed_lab::testbed;

#[derive(Args, Clone)]
pub struct PingArgs {
    /// The reflector, HOST:PORT (`wirespeed reflect PORT` there, or any UDP echo service).
    /// Without it, ping starts its own reflector: across two partitions joined by a veth link
    /// when it has CAP_NET_ADMIN (created and removed again), otherwise on loopback.
    target: Option<String>,
    /// Probes per second; a comma list runs one after the other, as seed 003 did with
    /// 10000,20000,30000,40000, and writes a heat map per rate and one percentile table.
    #[arg(long, default_value = "10000", value_delimiter = ',', value_parser = parse_pps)]
    pps: Vec<f64>,
    /// UDP payload bytes per probe (24..65507, e.g. 64, 1K or 1e3; the probe header is 24 bytes).
    #[arg(long, default_value = "64", value_parser = args::probe_size)]
    size: usize,
    /// How long to probe at each rate (5, 30s, 2m).
    #[arg(long, default_value = "10s", value_parser = args::run_duration)]
    duration: Duration,
    /// Probes per rate instead of a duration.
    #[arg(long, value_parser = args::run_count)]
    count: Option<u64>,
    /// Histogram interval: one log entry and one progress line per interval (seed 003 used 2 s;
    /// 10ms..1h).
    #[arg(long, default_value = "2s", value_parser = args::bounded_interval)]
    interval: Duration,
    /// How long to wait for the last replies (0..60s); later ones count as lost. Ctrl-C or
    /// SIGTERM cuts the wait short.
    #[arg(long, default_value = "1s", value_parser = args::linger)]
    linger: Duration,
    /// Pause between the rates of a sweep (0..1h), so one rate's queues do not spill into the
    /// next.
    #[arg(long, default_value = "1s", value_parser = args::pause)]
    pause: Duration,
    /// Pin the ping thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Closed loop, the way sockperf ping-pong measures: each probe waits for the previous reply.
    /// Probes that could not leave on time are skipped and counted; the open loop (the default)
    /// shows what happens to them, so use this only to compare with closed-loop tools.
    #[arg(long)]
    closed_loop: bool,
    /// Poll without sleeping (ping and, when ping starts it, the reflector): lower and steadier
    /// latency, but each uses a whole core.
    #[arg(long)]
    spin: bool,
    /// Directory for the heat maps (PNG and SVG), HdrHistogram logs and tables.
    /// Default: ./wirespeed-ping-<UTC time>.
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
    /// Write no files; print the table only.
    #[arg(long, conflicts_with = "out")]
    no_files: bool,
    /// Without TARGET: stay on loopback even when partitions could be made.
    #[arg(long)]
    loopback: bool,
    /// Name of the path in titles (default: loopback, partition link, or the target).
    #[arg(long)]
    label: Option<String>,
    /// Exit with code 3 if any reply was lost.
    #[arg(long)]
    expect_zero_loss: bool,
    /// Print one JSON document (schema wirespeed.latency/1) instead of the tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    transport: crate::args::TransportArgs,
    /// With --transport pgm: the port replies come back to on this host, as a PGM session
    /// from the reflector (default: the target's port + 1; the reflector must be told the
    /// same with its --reply-port).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    reply_port: Option<u16>,
    /// Without TARGET: ping from one real host to a reflector on another, over ssh (--tx the
    /// pinging host, --rx the reflecting one); the files come back here.
    #[command(flatten)]
    hosts: crate::args::HostArgs,
}

fn parse_pps(s: &str) -> Result<f64, String> {
    let r = Rate::parse(s).ok();
    let v = match r {
        Some(Rate::Packets(p)) => p,
        _ => s
            .replace('_', "")
            .parse::<f64>()
            .map_err(|_| format!("'{s}' is not a probe rate: give probes per second, e.g. 10000 or 10kpps"))?,
    };
    if !(v.is_finite() && v > 0.0 && v <= ping::MAX_PPS) {
        return Err(format!("{s} probes/s is out of range: use 1..{}", ping::MAX_PPS));
    }
    Ok(v)
}

impl PingArgs {
    fn sweep_config(&self) -> Result<SweepConfig, Error> {
        let pgm = self.transport.pgm()?.map(|p| (p, self.reply_port.unwrap_or(0)));
        if pgm.is_none() && self.reply_port.is_some() {
            return Err(Error::invalid("--reply-port is for --transport pgm: leave it out"));
        }
        Ok(SweepConfig {
            pps: self.pps.clone(),
            size: self.size,
            duration: self.duration,
            count: self.count,
            interval: self.interval,
            linger: self.linger,
            pause: self.pause,
            cpu: self.cpu,
            closed_loop: self.closed_loop,
            spin: self.spin,
            out: self.out.clone(),
            no_files: self.no_files,
            label: self.label.clone(),
            expect_zero_loss: self.expect_zero_loss,
            json: self.json,
            pgm,
        })
    }
}

/// Progress lines to stderr, each rate's report to stdout.
fn show(p: Progress) {
    match p {
        Progress::Note(line) => eprintln!("{line}"),
        Progress::Run(r) => {
            print!("{}", r.human());
            println!();
        }
    }
}

pub fn cmd_ping(a: PingArgs) -> Result<u8, Error> {
    // --size, --count, --duration, --interval, --linger and --pause were bounded by their parsers.
    let cfg = a.sweep_config()?;
    if a.hosts.given() && (a.target.is_some() || a.loopback) {
        return Err(crate::args::usage(
            "--tx/--rx place ping and its reflector themselves: leave out TARGET and --loopback".into(),
        ));
    }
    if let Some(h) = a.hosts.connect()? {
        let stop = sys::install_stop_handler();
        return sweep::on_hosts(h, &cfg, stop, &mut show);
    }
    match &a.target {
        Some(t) => {
            let target = resolve(t)?;
            let label = a.label.clone().unwrap_or_else(|| target.to_string());
            let stop = sys::install_stop_handler();
            finish(&a, sweep::sweep(&cfg, target, &label, stop, &mut show)?)
        }
        None if !a.loopback && testbed::require_net_admin("ping").is_ok() => {
            let stop = sys::install_stop_handler();
            sweep::in_partitions(&cfg, stop, &mut show)
        }
        None => {
            let stop = sys::install_stop_handler();
            let (swept, reflector) = sweep::loopback(&cfg, stop, &mut show)?;
            let code = swept.and_then(|s| finish(&a, s));
            if !a.json {
                eprintln!("reflector: {reflector}");
            }
            code
        }
    }
}

/// Print the table (or the document) and the exit code it earns.
fn finish(a: &PingArgs, s: Swept) -> Result<u8, Error> {
    if a.json {
        print_json(&s.doc)?;
    } else {
        print!("{}", s.text);
        if let Some(d) = &s.dir {
            println!("heat maps, HdrHistogram logs (ns) and latency.{{txt,csv,json}} in {}", d.display());
        }
    }
    if a.expect_zero_loss && s.lost > 0 {
        return Ok(crate::out::EXIT_LOSS);
    }
    Ok(0)
}
