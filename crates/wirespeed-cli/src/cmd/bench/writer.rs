//! `wirespeed bench writer`: the recorder's disk path alone, per write engine and depth.

use crate::args::{self, usage, OutputArgs};
use crate::out::{finish_bench, out_dir, say_line};
use clap::Args;
use std::path::PathBuf;
use wirespeed::{units, Error};
use wirespeed_lab::bench;

pub const WRITER_HELP: &str = "The recorder's disk path alone: a RAM ring of 8192-byte records is \
    filled first, then drained by record's writer into --dir with O_DIRECT and nothing else \
    running, per write engine and depth: io_uring (record's default) and pwrite threads. The \
    configurations alternate run by run so drift hits all of them; the table gives medians of \
    GB/s, the write calls' p50/p99 latency and the writer's CPU seconds per GB. The files are \
    removed after each run. --dir must be on the disk you mean to record to (a tmpfs measures \
    memory, not a disk).\n\n\
    Try:  wirespeed bench writer --dir /data                      (2 GiB, 3 runs of each)\n      \
    wirespeed bench writer --dir /data --size 8G --engines io_uring:4,threads:4,threads:1\n\n\
    Exit codes: 0 done, 1 runtime failure (a write failed, disk full), 2 bad usage.";

#[derive(Args)]
pub struct WriterArgs {
    /// Directory on the disk to measure (files are written there, then removed).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Bytes per run (the ring's size; it is held in RAM).
    #[arg(long, default_value = "2G", value_parser = ring_size)]
    size: u64,
    /// Engines and depths, ENGINE:DEPTH comma-separated (engines: io_uring, threads; depth 1..16).
    #[arg(long, default_value = "threads:1,threads:4,io_uring:4", value_parser = engines)]
    engines: args::List<(String, usize)>,
    /// Runs per configuration; the table shows medians.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    #[command(flatten)]
    output: OutputArgs,
}

fn ring_size(s: &str) -> Result<u64, String> {
    args::bytes_between(s, 16 << 20, 1 << 40, "a size from 16M to 1T")
}

fn engines(s: &str) -> Result<args::List<(String, usize)>, String> {
    args::list(s, "--engines", |p| {
        let (e, d) = p.split_once(':').unwrap_or((p, "4"));
        if e != "io_uring" && e != "threads" {
            return Err(format!("'{e}' is not a write engine: use io_uring or threads (e.g. io_uring:4)"));
        }
        let d: usize = d.parse().map_err(|_| format!("'{d}' is not a depth: use 1..16 (e.g. {e}:4)"))?;
        if !(1..=16).contains(&d) {
            return Err(format!("depth {d} is out of range: use 1..16"));
        }
        Ok((e.to_string(), d))
    })
}

pub fn cmd_writer(a: WriterArgs) -> Result<u8, Error> {
    if !a.dir.is_dir() {
        return Err(usage(format!("--dir {}: not a directory: give one on the disk to measure", a.dir.display())));
    }
    let json = a.output.json;
    let out = out_dir(&a.output.out)?;
    let mut text = String::new();
    let doc = bench::writer::run(&a.dir, a.size as usize, &a.engines.0, a.repeat, &mut |l| {
        say_line(json, l);
        text.push_str(l);
        text.push('\n');
    })?;
    let mut table = format!(
        "writer alone, {} per run into {} (medians of {} runs)\n{:>9} {:>5} {:>8} {:>9} {:>9} {:>9} {:>7}\n",
        units::bytes(a.size),
        a.dir.display(),
        a.repeat,
        "engine",
        "depth",
        "GB/s",
        "p50 ms",
        "p99 ms",
        "CPU s/GB",
        "O_DIRECT"
    );
    for r in &doc.rows {
        table.push_str(&format!(
            "{:>9} {:>5} {:>8.2} {:>9.2} {:>9.2} {:>9.3} {:>7}\n",
            r.engine,
            r.depth,
            r.gb_s,
            r.write_p50_ms,
            r.write_p99_ms,
            r.cpu_s_per_gb,
            if r.direct_io { "yes" } else { "no" }
        ));
    }
    finish_bench(json, out.as_deref(), "writer", text, &doc, &table)?;
    Ok(0)
}
