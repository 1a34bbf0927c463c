//! `wirespeed bench pgm` (issue 19): PGM's repairs under injected loss, against an OpenPGM
//! pair, and what `--transport pgm` costs in zero-loss rate and CPU against plain UDP.

use crate::args::{self, List, OutputArgs, RcvbufArgs};
use crate::out::{finish_bench, out_dir, say_line, stopped};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::units::Rate;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::pgm::{self, Part, PgmBenchConfig};
use wirespeed_lab::bench::point::Runner;
use wirespeed_lab::testbed;

pub const PGM_HELP: &str = "What `--transport pgm` (PGM, RFC 3208 over UDP, as OpenPGM) buys \
    and what it costs, measured between two partitions joined by a veth link (MTU 9000, one \
    CPU each; made for the run and removed after it). Needs root.\n\n\
    Part repair: for each --sizes and --loss, an nftables rule in the receiver's partition \
    drops that share of the ODATA packets at random (`udp dport P @th,96,8 0x04 numgen random \
    mod 1000 < N counter drop`: RDATA passes, so every drop can be repaired); `send --transport \
    pgm --count --rate` sends into `recv --transport pgm --once`. Per point: what nft dropped \
    (its counter), what was delivered, lost (ledger) and unrecoverable, what PGM repaired, its \
    NAKs and RDATA, the repair overhead (RDATA bytes / all data bytes) and the mean and largest \
    added latency of a repaired packet (gap noticed to repair). 'exact' says every datagram \
    arrived and every drop was repaired. Then the same points with an OpenPGM pair (the test \
    peer of tests/pgm-peer/, built from the source tree with build.sh, or --openpgm-peer PATH; \
    --no-openpgm skips it): delivered, resets (OpenPGM's unrecoverable loss), NAKs and RDATA \
    counted on the wire.\n\n\
    Part cost: the highest zero-loss rate of recv --transport pgm on a clean link against \
    plain UDP, for each size, by `bench max`'s binary search (flat out first, then the \
    geometric middle of the bracket; judged at the achieved rate; PGM repairs are not loss, \
    unrecoverable ones are), and the sender's and receiver's CPU per datagram at --cpu-rate \
    for both transports.\n\n\
    Try:  sudo wirespeed bench pgm\n      \
    sudo wirespeed bench pgm --part repair --count 2000 --sizes 1080 --loss 1 --no-openpgm\n      \
    sudo wirespeed bench pgm --part cost --duration 1s --repeat 3 --json -o results/\n\n\
    Exit codes: 0 done (whatever was lost: the table says), 1 runtime failure, no privilege, \
    or stopped by a signal (partitions are removed), 2 bad usage.";

#[derive(Clone, Copy, ValueEnum)]
enum PartArg {
    Repair,
    Cost,
    Latency,
    All,
}

#[derive(Args)]
pub struct PgmArgs {
    /// Which part: repair (loss injected, PGM repairs), cost (zero-loss rate and CPU against UDP),
    /// latency (seed 003's heat maps: wirespeed ping/reflect over UDP and PGM, and OpenPGM's own
    /// pair, at --pps), or all.
    #[arg(long, value_enum, default_value = "all")]
    part: PartArg,
    /// Datagram payload sizes, bytes (multiples of 8; 8800 fits the link's 9000-byte MTU unfragmented).
    #[arg(long, default_value = "8800,1080", value_parser = args::counter_sizes)]
    sizes: List<usize>,
    /// ODATA loss rates of the repair part, percent, in steps of 0.1 (0.1..100).
    #[arg(long, default_value = "0.1,1,5", value_parser = loss_list)]
    loss: List<u32>,
    /// Datagrams per repair point.
    #[arg(long, default_value = "20000", value_parser = count)]
    count: u64,
    /// Sending rate of the repair points, datagrams/s (20kpps).
    #[arg(long, default_value = "20kpps", value_parser = pps)]
    rate: f64,
    /// Skip the OpenPGM pair.
    #[arg(long)]
    no_openpgm: bool,
    /// A built OpenPGM test peer (tests/pgm-peer/build.sh OUT) instead of building one.
    #[arg(long, value_name = "PATH", conflicts_with = "no_openpgm")]
    openpgm_peer: Option<PathBuf>,
    /// Sending time of each cost probe and CPU point.
    #[arg(long, default_value = "2s", value_parser = args::point_duration)]
    duration: Duration,
    /// Stop a search when the bracket's top/bottom - 1 is below this (0.1%..50%).
    #[arg(long, default_value = "5%", value_parser = args::precision)]
    precision: f64,
    /// Bottom of the search range, payload bits/s.
    #[arg(long, default_value = "10M", value_name = "RATE", value_parser = args::bits_rate)]
    lo: f64,
    /// Independent searches per size and transport; the median is the result.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    /// The fixed rate of the CPU comparison, datagrams/s.
    #[arg(long, default_value = "10kpps", value_parser = pps)]
    cpu_rate: f64,
    /// The repair points' send --pgm-repair-rate (default: the sender's, unpaced), to see
    /// what a cap on repair traffic does.
    #[arg(long, value_name = "RATE", value_parser = repair_rate)]
    repair_rate: Option<String>,
    /// Probe rates of the latency part, per second (seed 003's 10k to 40k).
    #[arg(long, default_value = "10000,20000,30000,40000", value_parser = pps_list)]
    pps: List<u64>,
    /// Probe size of the latency part, bytes.
    #[arg(long, default_value = "64", value_parser = probe_size)]
    probe_size: usize,
    /// Length of each rate's latency run.
    #[arg(long, default_value = "10s", value_parser = args::point_duration)]
    latency_duration: Duration,
    #[command(flatten)]
    buf: RcvbufArgs,
    #[command(flatten)]
    hosts: args::HostArgs,
    #[command(flatten)]
    output: OutputArgs,
}

/// Loss percentages in tenths: "0.1,1,5" -> [1, 10, 50] per mille.
fn loss_list(s: &str) -> Result<List<u32>, String> {
    args::list(s, "--loss", |p| {
        let v: f64 = p.parse().map_err(|_| format!("--loss: '{p}' is not a percentage like 0.1, 1 or 5"))?;
        let pm = (v * 10.0).round();
        if !(1.0..=1000.0).contains(&pm) || (v * 10.0 - pm).abs() > 1e-6 {
            return Err(format!("--loss: {p} % is not a loss rate from 0.1 to 100 in steps of 0.1"));
        }
        Ok(pm as u32)
    })
}

/// Probe rates: whole probes per second, 1..1,000,000.
fn pps_list(s: &str) -> Result<List<u64>, String> {
    args::list(s, "--pps", |p| {
        let v: u64 = p.trim().parse().map_err(|_| format!("--pps: '{p}' is not a whole number of probes/s"))?;
        if !(1..=1_000_000).contains(&v) {
            return Err(format!("--pps: {v} is not 1 to 1000000 probes/s"));
        }
        Ok(v)
    })
}

/// A probe size ping takes (its header to a jumbo frame's payload).
fn probe_size(s: &str) -> Result<usize, String> {
    let v: usize = s.trim().parse().map_err(|_| format!("--probe-size: '{s}' is not a size in bytes"))?;
    if !(24..=8948).contains(&v) {
        return Err(format!("--probe-size: {v} is not 24 to 8948 bytes"));
    }
    Ok(v)
}

/// A rate `send --pgm-repair-rate` takes, kept as written for its command line.
fn repair_rate(s: &str) -> Result<String, String> {
    Rate::parse(s).map(|_| s.trim().to_string())
}

fn count(s: &str) -> Result<u64, String> {
    args::count_between(s, 100, 100_000_000, "datagrams per repair point")
}

fn pps(s: &str) -> Result<f64, String> {
    match Rate::parse(s)? {
        Rate::Packets(p) if p >= 1.0 => Ok(p),
        _ => Err(format!("{}: give datagrams/s here, like 20kpps", s.trim())),
    }
}

pub fn cmd_pgm(a: PgmArgs) -> Result<u8, Error> {
    if testbed::require_net_admin("bench").is_err() {
        return Err(Error::permission(
            "bench pgm needs root: it makes two partitions and sets an nftables loss rule in one; run it with sudo",
        ));
    }
    let part = match a.part {
        PartArg::Repair => Part::Repair,
        PartArg::Cost => Part::Cost,
        PartArg::Latency => Part::Latency,
        PartArg::All => Part::All,
    };
    let dir = out_dir(&a.output.out)?;
    let json = a.output.json;
    let say = |l: &str| say_line(json, l);
    // The OpenPGM peer is built into a directory of this run's own, removed at the end.
    let build_dir = std::env::temp_dir().join(format!("wirespeed-bench-pgm-{}", std::process::id()));
    let _cleanup = RemoveDir(build_dir.clone());
    let (openpgm, openpgm_skipped) = if a.no_openpgm || part == Part::Cost {
        (None, a.no_openpgm.then(|| "--no-openpgm".to_string()))
    } else if a.hosts.given() {
        // The OpenPGM pair is built here and routes its groups over the partitions' link.
        let why = "on hosts (the OpenPGM pair runs between partitions only)".to_string();
        say(&format!("OpenPGM pair skipped: {why}"));
        (None, Some(why))
    } else {
        std::fs::create_dir_all(&build_dir)
            .map_err(|e| Error::io(format!("cannot create {}: {e}", build_dir.display())))?;
        match pgm::openpgm_peer(a.openpgm_peer.as_deref(), &build_dir) {
            Ok(p) => (Some(p), None),
            Err(why) if a.openpgm_peer.is_some() => return Err(Error::invalid(format!("--openpgm-peer: {why}"))),
            Err(why) => {
                say(&format!("OpenPGM pair skipped: {why}"));
                (None, Some(why))
            }
        }
    };
    let cfg = PgmBenchConfig {
        part,
        sizes: a.sizes.0.clone(),
        loss_permille: a.loss.0.clone(),
        count: a.count,
        rate_pps: a.rate,
        openpgm: openpgm.clone(),
        openpgm_skipped,
        duration: a.duration,
        precision: a.precision,
        lo_bps: a.lo,
        repeat: a.repeat,
        cpu_rate_pps: a.cpu_rate,
        rcvbuf: a.buf.rcvbuf,
        repair_rate: a.repair_rate.clone(),
        latency: wirespeed_lab::bench::pgm::LatencyConfig {
            pps: a.pps.0.clone(),
            size: a.probe_size,
            duration: a.latency_duration,
            dir: dir.clone(),
            openpgm,
        },
    };
    // Ctrl-C reaches the children too; this process lives on to report and remove partitions.
    let stop = sys::install_stop_handler();
    let runner = a.hosts.runner_or(false, stop, || Runner::partitions(stop))?;
    let head = pgm::header(&cfg, &runner.placement());
    say(&head);
    let mut text = format!("{head}\n");
    let doc = pgm::run(&runner, &cfg, &mut |l| {
        say(l);
        text.push_str(l);
        text.push('\n');
    })?;
    drop(runner);
    let table = pgm::table(&doc);
    finish_bench(json, dir.as_deref(), "pgm", text, &doc, &table)?;
    if doc.stopped {
        return Err(stopped(""));
    }
    Ok(0)
}

/// Removes the run's own build directory when the command ends, however it ends.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
