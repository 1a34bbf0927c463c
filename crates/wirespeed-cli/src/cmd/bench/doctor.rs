//! `wirespeed bench doctor`: whether the doctor's fixes work, reproducibly: `doctor --apply` before/after
//! with net.core.rmem_max at the kernel default, and seed 001's starved-resource runs.

use crate::args::{self, usage, OutputArgs};
use crate::out::{finish_bench, out_dir, say_line};
use clap::{Args, ValueEnum};
use std::time::Duration;
use wirespeed::{sys, units, Error};
use wirespeed_lab::bench::doctor::{self, DoctorBenchConfig, Part};
use wirespeed_lab::bench::point::Runner;
use wirespeed_lab::testbed;

pub const DOCTOR_HELP: &str = "Whether `wirespeed doctor` names the right fix, shown with real \
    traffic. The sender and the receiver run in two partitions (network \
    namespaces joined by a veth link, one CPU each); the doctor runs in the host's namespace.\n\n\
    Part rmem: net.core.rmem_max is set to the kernel default (212992); a receiver run without \
    CAP_NET_ADMIN (so its --rcvbuf 32M is capped: root's SO_RCVBUFFORCE would ignore the \
    sysctl) gets 8800-byte datagrams in bursts bigger than 208 KiB holds and loses. Then \
    `wirespeed doctor --for RATE --size BYTES --cpu C` is run and its socket.rmem_max finding \
    shown, then `doctor ... --apply --undo FILE`, then the same run again, then `sh FILE`: every \
    value the apply changed (all the report's safe changes: other sysctls, eth0's interrupt \
    affinity and coalescing too) is read back and compared with its value before.\n\n\
    Part starve: three runs, each starved of one resource: the socket buffer (as above), the \
    CPU (a busy loop at --hog-nice, default -10, on the receiver's CPU, kept running while the doctor looks; first the same run without it, the control), the disk \
    (`record` to an ext4 loop device whose writes are throttled with cgroup v1 blkio, with a \
    small --buffer); each shows the ledger, the receiver's diagnosis line naming a doctor \
    command, and that command's findings.\n\n\
    What it changes on the host, and how it puts it back: net.core.rmem_max (its value is read \
    first and written back at the end, on error and on Ctrl-C too); whatever `doctor --apply` \
    changes (its undo script is run, also on error); the loop device, its mount and its \
    throttle (removed); the partitions (removed).\n\n\
    Needs root.\n\n\
    Try:  sudo wirespeed bench doctor\n      \
    sudo wirespeed bench doctor --part rmem --duration 1s --json\n      \
    sudo wirespeed bench doctor --part starve -o results/\n\n\
    Exit codes: 0 done (whatever the doctor found), 1 runtime failure, no privilege, or stopped \
    by a signal (host values are still put back), 2 bad usage.";

#[derive(Clone, Copy, ValueEnum)]
enum PartArg {
    Rmem,
    Starve,
    All,
}

#[derive(Args)]
pub struct DoctorArgs {
    /// Which part: rmem (before/after doctor --apply), starve (three starved runs), or all.
    #[arg(long, value_enum, default_value = "all")]
    part: PartArg,
    /// UDP payload bytes of the socket-buffer and disk runs (a multiple of 8).
    #[arg(long, default_value = "8800", value_name = "BYTES", value_parser = args::counter_size)]
    size: usize,
    /// Rate of the socket-buffer runs, payload bits/s.
    #[arg(long, default_value = "2G", value_name = "RATE", value_parser = args::bits_rate)]
    rate: f64,
    /// Datagrams per send call in the socket-buffer runs (1..1024): bursts bigger than a
    /// 208 KiB buffer holds.
    #[arg(long, default_value = "1024", value_parser = clap::value_parser!(u32).range(1..=1024))]
    burst: u32,
    /// Sending time of every run.
    #[arg(long, default_value = "2s", value_parser = args::point_duration)]
    duration: Duration,
    /// Rate of the CPU run, payload bits/s: one an idle receiver core keeps.
    #[arg(long, default_value = "1G", value_name = "RATE", value_parser = args::bits_rate)]
    cpu_rate: f64,
    /// UDP payload bytes of the CPU run (small: the receiver's cost per datagram counts).
    #[arg(long, default_value = "1080", value_name = "BYTES", value_parser = args::counter_size)]
    cpu_size: usize,
    /// Nice value of the CPU run's busy loop (-20..19): below the receiver's 0, so it takes
    /// most of the shared CPU.
    #[arg(long, default_value = "-10", allow_hyphen_values = true, value_parser = clap::value_parser!(i32).range(-20..=19))]
    hog_nice: i32,
    /// Rate of the disk run, payload bits/s (above the throttled disk's rate).
    #[arg(long, default_value = "1G", value_name = "RATE", value_parser = args::bits_rate)]
    disk_rate: f64,
    /// Write rate of the disk run's throttled loop device, bytes/s (e.g. 50M).
    #[arg(long, default_value = "50M", value_name = "BYTES")]
    disk_bps: String,
    /// The recorder's RAM ring in the disk run.
    #[arg(long, default_value = "16M", value_name = "BYTES")]
    disk_buffer: String,
    #[command(flatten)]
    output: OutputArgs,
}

pub fn cmd_doctor(a: DoctorArgs) -> Result<u8, Error> {
    let disk_bps = units::parse_bytes(&a.disk_bps).map_err(|e| usage(format!("--disk-bps {}: {e}", a.disk_bps)))?;
    if disk_bps < 1 << 20 {
        return Err(usage("--disk-bps: at least 1M (the doctor writes 512 MiB to the device)".into()));
    }
    let cfg = DoctorBenchConfig {
        part: match a.part {
            PartArg::Rmem => Part::Rmem,
            PartArg::Starve => Part::Starve,
            PartArg::All => Part::All,
        },
        size: a.size,
        rate_bps: a.rate,
        burst: a.burst,
        duration: a.duration,
        rcvbuf: 32 << 20,
        cpu_rate_bps: a.cpu_rate,
        cpu_size: a.cpu_size,
        hog_nice: a.hog_nice,
        disk_rate_bps: a.disk_rate,
        disk_bps,
        disk_buffer: a.disk_buffer.clone(),
    };
    if testbed::require_net_admin("bench").is_err()
        || std::fs::OpenOptions::new().write(true).open("/proc/sys/net/core/rmem_max").is_err()
    {
        return Err(Error::permission(
            "bench doctor needs root: it sets net.core.rmem_max, runs doctor --apply and makes partitions",
        ));
    }
    let dir = out_dir(&a.output.out)?;
    // Ctrl-C reaches the children too; this process lives on to put the host back and report.
    let stop = sys::install_stop_handler();
    let mut runner = Runner::partitions(stop)?;
    let json = a.output.json;
    let head = doctor::header(&cfg, &runner.placement());
    let say = |l: &str| say_line(json, l);
    say(&head);
    let mut text = format!("{head}\n");
    let doc = doctor::run(&mut runner, &cfg, stop, &mut |p| {
        let l = doctor::progress_line(&p);
        say(&l);
        text.push_str(&l);
        text.push('\n');
    })?;
    drop(runner);
    let table = doctor::table(&doc);
    finish_bench(json, dir.as_deref(), "doctor", text, &doc, &table)?;
    if doc.stopped {
        return Err(Error::failed("stopped by a signal; the results above are partial (host values put back)"));
    }
    Ok(0)
}
