//! `wirespeed bench formats`: payload build and check cost per format, on one core.

use crate::args::{self, List, OutputArgs};
use crate::out::{out_dir, BenchEnd};
use clap::Args;
use wirespeed::{units, Error};
use wirespeed_lab::bench::formats::{self, FormatsConfig};

pub const FORMATS_HELP: &str = "What building a datagram's payload (the sender's `emit`) and checking \
    it (the receiver's `check`: header, sequence number, and the payload as its fill allows) cost \
    per datagram, for every payload format, on one core. No network: each runs in a tight loop \
    over one buffer, and the median of --reps timing loops is reported.\n\n\
    Compare the check with the receiver's CPU per datagram (`recv_cpu_ns_per_packet` of `bench \
    max` or `bench rates`): format handling is meant to be a small part of it. The counter's \
    check uses AVX2 when the CPU has it (the last line says which).\n\n\
    Columns:\n  \
    bytes           UDP payload bytes per datagram\n  \
    build ns/dgram  median ns to build one datagram's payload\n  \
    check ns/dgram  median ns to check one datagram\n  \
    build, check GB/s  10^9 payload bytes per second at that cost\n  \
    format          the spec (as --format and `wirespeed formats` write it)\n  \
    check/recv      with --recv-cpu: the check over the receiver's CPU per datagram\n\n\
    Try:  wirespeed bench formats                          (every format, 5 loops each)\n      \
    wirespeed bench formats --recv-cpu 1352@1080,1526@8800   (BENCHMARKS.md section 6)\n      \
    wirespeed bench formats --format counter,size=8800,order=be --reps 9\n      \
    wirespeed bench formats --reps 1 --bytes 1M --json    (a quick look)\n\n\
    Exit codes: 0 done, 1 runtime failure, 2 bad usage.";

#[derive(Args)]
pub struct FormatsArgs {
    /// A format to time, as a spec with its size (repeatable, e.g. --format vdif,frame=8032,fps=32000).
    /// Default: every format with its fills (the list of BENCHMARKS.md sections 3 and 6).
    #[arg(long = "format", value_name = "SPEC")]
    format: Vec<String>,
    /// Timing loops per figure; the median is reported (1..101).
    #[arg(long, default_value = "5", value_parser = |s: &str| args::count_between(s, 1, 101, "the median of more says nothing new"))]
    reps: u64,
    /// Payload bytes each timing loop handles (1M..10G; at least 1,000 datagrams).
    #[arg(long, default_value = "100M", value_name = "BYTES", value_parser = |s: &str| args::bytes_between(s, 1_000_000, 10_000_000_000, "less is timer noise, more only takes longer"))]
    bytes: u64,
    /// The receiver's CPU per datagram to set the checks against, ns at a size: NS@BYTES,...
    /// (e.g. 1352@1080,1526@8800, from `bench max`'s recv_cpu_ns_per_packet) or one NS for
    /// every size. Adds the column check/recv, using the figure of the nearest size.
    #[arg(long, value_name = "NS@BYTES,...", value_parser = |s: &str| args::list(s, "--recv-cpu", recv_cpu))]
    recv_cpu: Option<List<(f64, usize)>>,
    #[command(flatten)]
    output: OutputArgs,
}

/// One NS@BYTES (or NS alone, for every size).
fn recv_cpu(s: &str) -> Result<(f64, usize), String> {
    let (ns, size) = s.split_once('@').unwrap_or((s, "0"));
    let ns: f64 = ns
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not NS@BYTES: write the receiver's ns per datagram, e.g. 1352@1080"))?;
    if !(ns.is_finite() && ns > 0.0) {
        return Err(format!("{ns} ns must be above 0"));
    }
    let size = units::parse_bytes(size.trim()).map_err(|e| format!("'{s}': {e}"))?;
    Ok((ns, size as usize))
}

pub fn cmd_formats(a: FormatsArgs) -> Result<u8, Error> {
    let reps = a.reps as u32;
    let bytes = a.bytes;
    let specs: Vec<String> = if a.format.is_empty() {
        formats::DEFAULT_SPECS.iter().map(|s| s.to_string()).collect()
    } else {
        a.format.clone()
    };
    let recv_cpu = a.recv_cpu.map(|l| l.0).unwrap_or_default();
    let cfg = FormatsConfig { specs, reps, bytes, recv_cpu };
    formats::parse_specs(&cfg.specs)?;
    let dir = out_dir(&a.output.out)?;
    let head = formats::header(&cfg);
    if a.output.json {
        eprint!("{head}");
    } else {
        print!("{head}");
    }
    let doc = formats::run(&cfg, &mut |r| {
        let l = formats::line(r);
        if a.output.json {
            eprintln!("{l}");
        } else {
            println!("{l}");
        }
    })?;
    let text = formats::text(&doc, &cfg);
    let shown = text.lines().last().map(|l| format!("{l}\n")).unwrap_or_default();
    let extra = vec![("formats.csv".to_string(), formats::csv(&doc))];
    BenchEnd { name: "formats", doc: &doc, text, extra, also: Vec::new(), shown }
        .finish(a.output.json, dir.as_deref())?;
    Ok(0)
}
