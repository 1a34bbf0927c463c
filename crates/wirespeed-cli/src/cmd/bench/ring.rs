//! `wirespeed bench ring`: time from starting `wirespeed record` until it receives, per ring size.

use crate::args::{self, usage, List, OutputArgs};
use crate::out::{out_dir, say_line, stopped, BenchEnd};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::units::Rate;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::ring::{self, Build, HostState, RingConfig};

pub const RING_HELP: &str = "Time to zero-loss readiness of wirespeed record, per RAM ring size, \
    on a cold and on a warm host: from starting the recorder until a stream at full rate, started \
    the moment it says 'listening on', loses nothing. That is what 'listening' promises.\n\n\
    Each run starts `wirespeed record 127.0.0.1:0 --size SIZE --buffer RING --once --json` \
    pinned to the last CPU, times it to its 'listening on' line (process start and ring \
    included), starts `wirespeed send` at --rate for --stream pinned to the first CPU at that \
    line, and reads the recorder's ledger: every datagram sent must be recorded, no socket or \
    ring-full drop. The run's time to readiness is then its time to listening; a run that lost \
    data has none (that build said it listened before it could absorb the stream). Cold runs \
    first sync and drop the page cache (echo 3 > /proc/sys/vm/drop_caches, root) and wait 3 s, \
    so that a VM's free memory really is cold; each warm run follows its cold one at once. \
    Medians over --repeat runs; with --other-build PATH another wirespeed binary (e.g. one built \
    from main) is measured beside this one, run by run: before and after.\n\n\
    Each recording goes to a new directory inside --dir (default: the system's temporary \
    directory), removed after the run: the disk must take --rate (see wirespeed disk-test).\n\n\
    Try:  sudo wirespeed bench ring                           (1, 2 and 8 GiB, cold and warm, 3 runs, 100 kpps for 1 s)\n      \
    sudo wirespeed bench ring --rate 150kpps --stream 3s      (a stream longer than the ring: the disk too)\n      \
    sudo wirespeed bench ring --sizes 2G --repeat 1 --other-build /tmp/main/wirespeed -o results/ring\n      \
    wirespeed bench ring --sizes 256M --states warm --repeat 1 --json\n\n\
    Exit codes: 0 done, 1 runtime failure or stopped by a signal, 2 bad usage.";

#[derive(Args)]
pub struct RingArgs {
    /// Ring sizes, comma-separated (1G = 1 GiB; 16M..1T each).
    #[arg(long, default_value = "1G,2G,8G", value_name = "LIST", value_parser = ring_sizes)]
    sizes: List<u64>,
    /// Host states, comma-separated: cold (caches dropped, root) and/or warm.
    #[arg(long, default_value = "cold,warm", value_name = "LIST", value_parser = states)]
    states: List<HostState>,
    /// Runs per build, size and state; the table shows medians.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    /// The stream started at 'listening': datagrams per second (100kpps) or payload bits per
    /// second (7G). With --stream, the default (880 MB) fits in the smallest ring, so the run
    /// measures readiness alone; a stream longer than the ring also measures the disk.
    #[arg(long, default_value = "100kpps", value_parser = Rate::parse)]
    rate: Rate,
    /// The stream's datagram size, bytes (8..65507, a multiple of 8: counter datagrams).
    #[arg(long, default_value = "8800", value_parser = args::udp_size)]
    size: u64,
    /// How long the stream lasts (1s..1m).
    #[arg(long, default_value = "1s", value_parser = stream_len)]
    stream: Duration,
    /// Another wirespeed binary measured beside this one (before/after).
    #[arg(long, value_name = "PATH")]
    other_build: Option<PathBuf>,
    /// Where the recordings go, each in a new subdirectory removed after its run. Default: the
    /// system's temporary directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
}

fn states(s: &str) -> Result<List<HostState>, String> {
    let mut v = Vec::new();
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let st = HostState::parse(p)?;
        if !v.contains(&st) {
            v.push(st);
        }
    }
    if v.is_empty() {
        return Err("no host states: give cold, warm or cold,warm".into());
    }
    // Cold first: a warm run follows the cold one of the same build and size.
    v.sort_by_key(|s| *s != HostState::Cold);
    Ok(List(v))
}

fn stream_len(s: &str) -> Result<Duration, String> {
    let d = wirespeed::units::parse_duration(s)?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(60) {
        return Err(format!("{} is out of range: give 1s..1m", s.trim()));
    }
    Ok(d)
}

fn ring_sizes(s: &str) -> Result<List<u64>, String> {
    let mut v = Vec::new();
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        v.push(args::bytes_between(p, 16 << 20, 1 << 40, "a ring from 16M to 1T")?);
    }
    if v.is_empty() {
        return Err("no ring sizes: give e.g. 1G,8G".into());
    }
    Ok(List(v))
}

pub fn cmd_ring(a: RingArgs) -> Result<u8, Error> {
    let this = std::env::current_exe().map_err(|e| Error::failed(format!("cannot find this program's path: {e}")))?;
    let mut builds = vec![Build { label: "this".into(), exe: this }];
    if let Some(p) = &a.other_build {
        let other = std::fs::canonicalize(p).map_err(|e| {
            usage(format!("--other-build {}: {e}: give the path of another wirespeed binary", p.display()))
        })?;
        builds.push(Build { label: "other".into(), exe: other });
    }
    let dir = match &a.dir {
        Some(d) => {
            if !d.is_dir() {
                return Err(usage(format!("--dir {}: not a directory: give one that exists", d.display())));
            }
            d.clone()
        }
        None => std::env::temp_dir(),
    };
    if a.states.0.contains(&HostState::Cold) && !sys::fuse::is_root() {
        return Err(usage(
            "cold runs drop the page cache (/proc/sys/vm/drop_caches), which needs root: run with sudo, or give --states warm"
                .to_string(),
        ));
    }
    let pps = match a.rate {
        Rate::Packets(p) => p,
        Rate::Bits(b) => b / 8.0 / a.size.max(1) as f64,
        Rate::Max => {
            return Err(usage("--rate max has no rate to hold: give datagrams/s (100kpps) or bits/s (7G)".to_string()))
        }
    };
    if !(1.0..=10e6).contains(&pps) {
        return Err(usage(format!("--rate gives {pps:.0} datagrams/s: give 1..10,000,000")));
    }
    let cfg = RingConfig {
        sizes: a.sizes.0,
        states: a.states.0,
        repeat: a.repeat,
        builds,
        dir,
        pps: pps.round() as u64,
        size: a.size as usize,
        stream: a.stream,
    };
    let out = out_dir(&a.output.out)?;
    let stop = sys::install_stop_handler();
    let say = |l: &str| say_line(a.output.json, l);
    let head = format!(
        "wirespeed bench ring: time to zero-loss readiness of wirespeed record, rings of {}, {}, {} run(s) each, a {:.0} kpps stream of {} B from 'listening'",
        cfg.sizes.iter().map(|&s| wirespeed::units::bytes(s)).collect::<Vec<_>>().join(", "),
        cfg.states.iter().map(|s| s.name()).collect::<Vec<_>>().join(" and "),
        cfg.repeat,
        cfg.pps as f64 / 1e3,
        cfg.size
    );
    say(&head);
    let mut text = format!("{head}\n");
    let doc = ring::run(&cfg, stop, &mut |r| {
        let l = ring::run_line(r);
        say(&l);
        text.push_str(&l);
        text.push('\n');
    })?;
    let table = ring::table(&doc);
    let end = BenchEnd {
        name: "ring",
        doc: &doc,
        text: text + &table,
        extra: Vec::new(),
        also: Vec::new(),
        shown: format!("\n{table}"),
    };
    end.finish(a.output.json, out.as_deref())?;
    if doc.stopped {
        return Err(stopped(&format!("{} run(s)", doc.runs.len())));
    }
    Ok(0)
}
