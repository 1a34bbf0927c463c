//! `wirespeed bench ttcp`: seed 000's Tables 3-5, the whole table set across two partitions.

use crate::out::print_json;
use clap::Args;
use std::path::{Path, PathBuf};
use wirespeed::bench::ttcp::{self as bench_ttcp, TtcpBenchConfig};
use wirespeed::ttcp::Proto;
use wirespeed::units;
use wirespeed::{sys, Error};

#[derive(Args)]
#[command(
    after_help = "`wirespeed bench ttcp --help` explains what the tables measure and where they run.",
    after_long_help = "Seed 000's ttcp tables, regenerated: Table 4 (TCP) and Table 5 (UDP, with % data \
        dropped) give transmit and receive MB/s per socket buffer size (-b) for a fixed -l; \
        Table 3 (--table3) gives MB/s per read/write size over a TCP stream.\n\n\
        Each row is one pair of `wirespeed ttcp` processes (this same binary): the receiver \
        (-r) first, then the transmitter (-t); one row per --buffers size plus a \"default\" \
        row without -b (the seed's shaded row). With CAP_NET_ADMIN (root) the receiver runs in \
        partition 2 and the transmitter in partition 1, made for the run (two network \
        namespaces with a core each, joined by a veth link) and removed however it ends; \
        otherwise, or with --loopback, both run over loopback on two different cores.\n\n\
        The seed used -l49152 -n 126976 (6 GB per run, between the two partitions of an \
        Origin 2000); the default -n here is 20000 (983 MB). UDP is \
        sent as fast as the transmitter can, as ttcp did, so the receive column and the \
        dropped share show what each receive buffer absorbs. Table 3 in the seed timed 1000 \
        reads against 1000 writes of each size on a raw partition-to-partition device; here \
        the same 1000 writes go over a TCP stream and the receiver reads with the same size.\n\n\
        Try:  wirespeed bench ttcp                                  (Tables 4 and 5)\n      \
        wirespeed bench ttcp --table3 --proto none            (Table 3 alone)\n      \
        wirespeed bench ttcp --buffers 64K,1M -n 5000 -o out  (ttcp.txt, ttcp.csv, ttcp.json)\n\n\
        Exit codes: 0 done (UDP loss is a result, not a failure), 1 runtime failure or stopped by a \
        signal (Ctrl-C: the rows measured are still reported, and partitions are removed), 2 bad usage."
)]
pub struct BenchTtcpArgs {
    /// Which socket-buffer tables to run: tcp (Table 4), udp (Table 5), both (default) or none
    /// (with --table3, for Table 3 alone).
    #[arg(long, value_delimiter = ',', default_value = "tcp,udp", value_parser = parse_proto)]
    proto: Vec<Option<Proto>>,
    /// Socket buffer sizes (-b), one row each, in this order (the seed's, largest first);
    /// a "default" row without -b is always added.
    #[arg(long, value_delimiter = ',', default_value = "1M,512K,256K,128K,64K", value_parser = crate::args::sockbuf_request)]
    buffers: Vec<u64>,
    /// Bytes per read/write and UDP datagram size for Tables 4 and 5 (the seed's -l49152).
    #[arg(short = 'l', long = "buflen", default_value = "49152", value_parser = units::parse_bytes)]
    buflen: u64,
    /// Buffers per run for Tables 4 and 5 (the seed used 126976, 6 GB per run).
    #[arg(short = 'n', long = "nbuf", default_value = "20000", value_parser = units::parse_count)]
    nbuf: u64,
    /// Also run Table 3: MB/s for read/write sizes 32 B to 1 MiB (powers of two), --writes
    /// writes each, over a TCP stream with default socket buffers.
    #[arg(long)]
    table3: bool,
    /// Writes per size in Table 3 (the seed's 1000).
    #[arg(long, default_value = "1000", value_parser = crate::args::table3_writes)]
    writes: u64,
    /// Run over loopback even with the privilege to make partitions.
    #[arg(long)]
    loopback: bool,
    /// Write ttcp.txt, ttcp.csv and ttcp.json into this directory (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print one JSON document (schema wirespeed.bench.ttcp/1) instead of the tables.
    #[arg(long)]
    json: bool,
}

fn parse_proto(s: &str) -> Result<Option<Proto>, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "tcp" => Ok(Some(Proto::Tcp)),
        "udp" => Ok(Some(Proto::Udp)),
        "none" => Ok(None),
        _ => Err(format!("'{s}' is not a protocol: use tcp, udp, both as tcp,udp, or none")),
    }
}

pub fn cmd_bench_ttcp(a: BenchTtcpArgs) -> Result<u8, Error> {
    let cfg = TtcpBenchConfig {
        protos: a.proto.iter().flatten().copied().collect(),
        buffers: a.buffers.clone(),
        buflen: a.buflen,
        nbuf: a.nbuf,
        table3: a.table3,
        writes: a.writes,
        loopback: a.loopback,
    };
    cfg.validate()?;
    if let Some(d) = &a.out {
        std::fs::create_dir_all(d)
            .map_err(|e| Error::Runtime(format!("cannot create the output directory {}: {e}", d.display())))?;
    }
    let stop = sys::install_stop_handler();
    let place = bench_ttcp::open_place(cfg.loopback)?;
    eprintln!("wirespeed bench ttcp: {}", bench_ttcp::description(&place));
    let r = bench_ttcp::run(&cfg, &place, stop, &mut |line| eprintln!("{line}"))?;
    if let Some(d) = &a.out {
        write_out(d, "ttcp.txt", &r.text)?;
        write_out(d, "ttcp.csv", &r.csv)?;
        let js =
            serde_json::to_string_pretty(&r.doc).map_err(|e| Error::Runtime(format!("cannot encode JSON: {e}")))?;
        write_out(d, "ttcp.json", &(js + "\n"))?;
    }
    if a.json {
        print_json(&r.doc)?;
    } else {
        print!("{}", r.text);
    }
    if r.done < r.planned {
        return Err(Error::Runtime(format!(
            "stopped by a signal after {} of {} runs; the tables above are partial{}",
            r.done,
            r.planned,
            if place.is_partitions() { " (the partitions are removed)" } else { "" }
        )));
    }
    Ok(0)
}

fn write_out(dir: &Path, name: &str, body: &str) -> Result<(), Error> {
    let p = dir.join(name);
    std::fs::write(&p, body).map_err(|e| Error::Runtime(format!("cannot write {}: {e}", p.display())))
}
