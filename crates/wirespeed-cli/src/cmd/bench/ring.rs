//! `wirespeed bench ring`: time from starting `wirespeed record` until it receives, per ring size.

use crate::args::{self, usage, List, OutputArgs};
use crate::out::{out_dir, print_json, say_line, to_json, write_files};
use clap::Args;
use std::path::PathBuf;
use wirespeed::bench::ring::{self, Build, RingConfig};
use wirespeed::{sys, Error};

pub const RING_HELP: &str = "How long wirespeed record takes from start until it can receive, per \
    RAM ring size: allocating, faulting in and locking the ring (--buffer) before the socket \
    opens. Each run starts `wirespeed record 127.0.0.1:0 --size 8800 --buffer SIZE --duration 1 -o DIR \
    --json` with no sender and reads two figures: the recorder's own ring.ready_s from its JSON \
    (n/a for a build that does not report it) and, for every build, the time from spawning it \
    to its 'listening on' line, measured here (process start included). Medians over --repeat \
    runs; the builds alternate run by run, so drift hits both.\n\n\
    With --other-build PATH another wirespeed binary (e.g. one built from main) is measured \
    beside this one: before and after. A ring larger than the memory that may be locked is \
    not locked (the table says so), and one larger than the host's memory is refused by the \
    recorder. Nothing is written: --dir (default: a new directory under the system's temporary \
    directory, removed after) only has to exist.\n\n\
    Try:  wirespeed bench ring                                   (1 GiB and 8 GiB, 3 runs each)\n      \
    wirespeed bench ring --sizes 1G,8G --repeat 3 --other-build /tmp/main/wirespeed -o results/ring\n      \
    wirespeed bench ring --sizes 64M --repeat 1 --json\n\n\
    Exit codes: 0 done, 1 runtime failure or stopped by a signal, 2 bad usage.";

#[derive(Args)]
pub struct RingArgs {
    /// Ring sizes, comma-separated (1G = 1 GiB; 16M..1T each).
    #[arg(long, default_value = "1G,8G", value_name = "LIST", value_parser = ring_sizes)]
    sizes: List<u64>,
    /// Runs per build and size; the table shows medians.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    /// Another wirespeed binary measured beside this one (before/after).
    #[arg(long, value_name = "PATH")]
    other_build: Option<PathBuf>,
    /// The directory the recorder is given (it writes nothing). Default: a new temporary one.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
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

/// A temporary directory this command made, removed when dropped (only if it made it).
struct Scratch(Option<PathBuf>);

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

pub fn cmd_ring(a: RingArgs) -> Result<u8, Error> {
    let this = std::env::current_exe().map_err(|e| Error::Runtime(format!("cannot find this program's path: {e}")))?;
    let mut builds = vec![Build { label: "this".into(), exe: this }];
    if let Some(p) = &a.other_build {
        let other = std::fs::canonicalize(p).map_err(|e| {
            usage(format!("--other-build {}: {e}: give the path of another wirespeed binary", p.display()))
        })?;
        builds.push(Build { label: "other".into(), exe: other });
    }
    let (dir, _scratch) = match &a.dir {
        Some(d) => {
            if !d.is_dir() {
                return Err(usage(format!("--dir {}: not a directory: give one that exists", d.display())));
            }
            (d.clone(), Scratch(None))
        }
        None => {
            let d = std::env::temp_dir().join(format!("wirespeed-bench-ring-{}", std::process::id()));
            std::fs::create_dir_all(&d).map_err(|e| Error::Runtime(format!("cannot create {}: {e}", d.display())))?;
            (d.clone(), Scratch(Some(d)))
        }
    };
    let cfg = RingConfig { sizes: a.sizes.0, repeat: a.repeat, builds, dir };
    let out = out_dir(&a.output.out)?;
    let stop = sys::install_stop_handler();
    let say = |l: &str| say_line(a.output.json, l);
    let head = format!(
        "wirespeed bench ring: time to ready of wirespeed record, rings of {}, {} run(s) each",
        cfg.sizes.iter().map(|&s| wirespeed::units::bytes(s)).collect::<Vec<_>>().join(", "),
        cfg.repeat
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
    text.push_str(&table);
    if let Some(d) = &out {
        write_files(d, &[("ring.txt", &text), ("ring.json", &to_json(&doc)?)])?;
    }
    if a.output.json {
        print_json(&doc)?;
    } else {
        println!();
        print!("{table}");
        if let Some(d) = &out {
            println!("ring.txt and ring.json in {}", d.display());
        }
    }
    if doc.stopped {
        return Err(Error::Runtime(format!("stopped by a signal after {} run(s)", doc.runs.len())));
    }
    Ok(0)
}
