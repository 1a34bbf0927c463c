//! `wirespeed bench ttcp`: seed 000's Tables 3-5, the whole table set across two partitions.

use crate::out::{out_dir, BenchEnd};
use clap::Args;
use std::path::PathBuf;
use wirespeed::units;
use wirespeed::{sys, Error};
use wirespeed_lab::bench::ttcp::{self as bench_ttcp, TtcpBenchConfig};
use wirespeed_lab::ttcp::{Over, Proto};

#[derive(Args)]
#[command(
    after_help = "`wirespeed bench ttcp --help` explains what the tables measure and where they run.",
    after_long_help = "Seed 000's ttcp tables, regenerated: Table 4 (TCP) and Table 5 (UDP, with % data \
        dropped) give transmit and receive MB/s per socket buffer size (-b) for a fixed -l; \
        Table 3 (--table3) gives MB/s per read/write size, 32 B to 1 MiB, a column per \
        transport (--over) beside the seed's own figures.\n\n\
        Each row is one pair of `wirespeed ttcp` processes (this same binary): the receiver \
        (-r) first, then the transmitter (-t); one row per --buffers size plus a \"default\" \
        row without -b (the seed's shaded row). With CAP_NET_ADMIN (root) the receiver runs in \
        partition 2 and the transmitter in partition 1, made for the run (two network \
        namespaces with a core each, joined by a veth link) and removed however it ends; \
        otherwise, or with --loopback, both run over loopback on two different cores.\n\n\
        The seed used -l49152 -n 126976 (6 GB per run, between the two partitions of an \
        Origin 2000); the default -n here is 20000 (983 MB). UDP is \
        sent as fast as the transmitter can, as ttcp did, so the receive column and the \
        dropped share show what each receive buffer absorbs.\n\n\
        Table 3 in the seed timed 1000 reads in one partition against 1000 writes in the \
        other, of each size, on a raw partition-to-partition device, cache-line aligned at both \
        ends. Here (--over): devices is that, the transmitter in partition 1 writing \
        /hw/xplink/raw/02/00 and the receiver in partition 2 reading /hw/xplink/raw/01/00 \
        (needs partitions: root, no --loopback); pipe and unix are a FIFO and a Unix stream \
        socket between the same two places, the local references; tcp a TCP stream. The raw \
        ones are `wirespeed ttcp --device/--unix` pairs: 128-byte aligned buffers, every byte \
        checked, MB/s = bytes / the time from the first byte written to the last read. \
        --devices K runs K streams at once and shows their aggregate (the seed: several raw \
        devices add up).\n\n\
        Try:  wirespeed bench ttcp                                  (Tables 4 and 5)\n      \
        wirespeed bench ttcp --table3 --proto none            (Table 3 alone)\n      \
        wirespeed bench ttcp --over pipe,unix --loopback      (Table 3, local references)\n      \
        sudo wirespeed bench ttcp --over devices --devices 4  (4 raw devices at once)\n      \
        wirespeed bench ttcp --buffers 64K,1M -n 5000 -o out  (ttcp.txt, ttcp.csv, ttcp.json)\n\n\
        Exit codes: 0 done (UDP loss is a result, not a failure), 1 runtime failure or stopped by a \
        signal (Ctrl-C: the rows measured are still reported, and partitions are removed), 2 bad usage."
)]
pub struct BenchTtcpArgs {
    /// Which socket-buffer tables to run: tcp (Table 4), udp (Table 5), both (tcp,udp: the
    /// default, except with --over, which runs Table 3 alone) or none (with --table3, for
    /// Table 3 alone).
    #[arg(long, value_delimiter = ',', value_parser = parse_proto)]
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
    /// writes each, over each --over transport (default: the raw devices on partitions, a
    /// pipe, a Unix socket and a TCP stream).
    #[arg(long)]
    table3: bool,
    /// Writes per size in Table 3 (the seed's 1000).
    #[arg(long, default_value = "1000", value_parser = crate::args::table3_writes)]
    writes: u64,
    /// Table 3's transports, a column each: devices (the raw devices between partitions 1
    /// and 2: needs partitions), pipe and unix (a FIFO and a Unix stream socket between the
    /// same two places: the local references), tcp (a TCP stream). Implies --table3 and, unless
    /// --proto is given, Table 3 alone. Default: devices (on partitions),pipe,unix,tcp.
    #[arg(long, value_delimiter = ',', value_name = "LIST", value_parser = parse_over)]
    over: Vec<Over>,
    /// Table 3: run K streams at once for devices, pipe and unix (devices 00..K-1, or K FIFOs
    /// or sockets) and show their aggregate MB/s (the seed: several raw devices add up; the JSON
    /// has each stream's). 1 to 16; above 1, leave tcp out of --over.
    #[arg(long = "devices", value_name = "K", default_value = "1", value_parser = crate::args::table3_streams)]
    devices: usize,
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

fn parse_over(s: &str) -> Result<Over, String> {
    Over::parse(s).ok_or_else(|| {
        format!("'{s}' is not a Table 3 transport: use devices, pipe, unix or tcp, several as devices,pipe,unix")
    })
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
    let protos: Vec<Proto> = if a.proto.is_empty() && a.over.is_empty() {
        vec![Proto::Tcp, Proto::Udp]
    } else {
        a.proto.iter().flatten().copied().collect()
    };
    let cfg = TtcpBenchConfig {
        protos,
        buffers: a.buffers.clone(),
        buflen: a.buflen,
        nbuf: a.nbuf,
        table3: a.table3 || !a.over.is_empty(),
        writes: a.writes,
        loopback: a.loopback,
        over: a.over.clone(),
        streams: a.devices,
    };
    cfg.validate()?;
    let dir = out_dir(&a.out)?;
    let stop = sys::install_stop_handler();
    let place = bench_ttcp::open_place(cfg.loopback, cfg.wants_devices())?;
    cfg.check_place(&place)?;
    eprintln!("wirespeed bench ttcp: {}", bench_ttcp::description(&place));
    let r = bench_ttcp::run(&cfg, &place, stop, &mut |line| eprintln!("{line}"))?;
    BenchEnd {
        name: "ttcp",
        doc: &r.doc,
        text: r.text.clone(),
        extra: vec![("ttcp.csv".to_string(), r.csv.clone())],
        also: Vec::new(),
        shown: r.text.clone(),
    }
    .finish(a.json, dir.as_deref())?;
    if r.done < r.planned {
        return Err(Error::failed(format!(
            "stopped by a signal after {} of {} runs; the tables above are partial{}",
            r.done,
            r.planned,
            if place.is_partitions() { " (the partitions are removed)" } else { "" }
        )));
    }
    Ok(0)
}
