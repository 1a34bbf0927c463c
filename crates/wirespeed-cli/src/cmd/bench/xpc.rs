//! `wirespeed bench xpc`: XPC messages between two processes against a Unix datagram socket
//! pair; and the hidden `bench xpc-peer`, the second process.

use crate::args::{self, OutputArgs};
use crate::out::{finish_bench, out_dir, say_line};
use clap::Args;
use std::path::PathBuf;
use wirespeed::Error;
use wirespeed_lab::bench::xpc::{self, XpcConfig};

pub const XPC_HELP: &str = "XPC (wirespeed's cross-partition messages: shared memory halves, a \
    doorbell eventfd rung only when the receiver sleeps) against a Unix datagram socket pair, \
    between two processes of this machine, in the same run. This process starts a second one \
    (this binary again) and, for each transport in turn (the order alternates between \
    repetitions), measures:\n\n  \
    msgs/s         one-way rate: --messages messages of --size bytes, sent as fast as the \
    receiver takes them (flow control: nothing is dropped; the receiver counts them)\n  \
    CPU/msg        CPU time per message of the sending and of the receiving thread\n  \
    RTT p50, p99   round-trip latency of --pings ping-pongs of one message each way\n\n\
    and, with --bulk N, N transfers of 1 MiB over XPC by rendezvous (the receiver pulls \
    straight from the sender's buffer with process_vm_readv) and out of line (copied through \
    the sender's shared area), in MB/s. Figures are medians over --repeat repetitions. Both \
    processes run unpinned: on a busy machine the figures move; compare the two transports of \
    the same run.\n\n\
    Try:  wirespeed bench xpc                                  (200k messages of 64 B, 3 repetitions)\n      \
    wirespeed bench xpc --messages 1M --pings 50000 --repeat 5 -o results/xpc\n      \
    wirespeed bench xpc --messages 1000 --pings 100 --bulk 2 --repeat 1 --json\n\n\
    Exit codes: 0 done, 1 runtime failure, 2 bad usage.";

#[derive(Args)]
pub struct XpcArgs {
    /// One-way messages per transport and repetition (1..100M).
    #[arg(long, default_value = "200000", value_parser = |s: &str| args::count_between(s, 1, 100_000_000, "a rate needs at least one message"))]
    messages: u64,
    /// Message size, bytes (1..65536; up to 96 travel in the XPC slot, longer out of line).
    #[arg(long, default_value = "64", value_parser = |s: &str| args::count_between(s, 1, 65536, "a Unix datagram of more is not the reference"))]
    size: u64,
    /// Round trips per transport and repetition (1..10M).
    #[arg(long, default_value = "20000", value_parser = |s: &str| args::count_between(s, 1, 10_000_000, "a percentile needs samples"))]
    pings: u64,
    /// 1 MiB transfers per mode (rendezvous, out of line) and repetition; 0: none (0..100k).
    #[arg(long, default_value = "64", value_parser = |s: &str| args::count_between(s, 0, 100_000, "more only takes longer"))]
    bulk: u64,
    /// Repetitions; the table shows medians.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    /// How long XPC's blocking calls watch the peer before sleeping on the doorbell, ns (0..1M).
    #[arg(long, default_value_t = wirespeed_lab::xpc::DEFAULT_SPIN_NS, value_parser = |s: &str| args::count_between(s, 0, 1_000_000, "longer is a busy loop"))]
    spin_ns: u64,
    #[command(flatten)]
    output: OutputArgs,
}

#[derive(Args)]
pub struct XpcPeerArgs {
    /// The scratch directory the measuring process made.
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    messages: u64,
    #[arg(long)]
    size: usize,
    #[arg(long)]
    pings: u64,
    #[arg(long)]
    bulk: u64,
    #[arg(long)]
    repeat: u32,
    #[arg(long)]
    spin_ns: u64,
}

pub fn cmd_xpc(a: XpcArgs) -> Result<u8, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::failed(format!("cannot find this program's path: {e}")))?;
    let cfg = XpcConfig {
        messages: a.messages,
        size: a.size as usize,
        pings: a.pings,
        bulk: a.bulk,
        repeat: a.repeat,
        spin_ns: a.spin_ns,
    };
    let out = out_dir(&a.output.out)?;
    let head = format!(
        "wirespeed bench xpc: XPC vs Unix datagram socket, {} B messages, {} repetition(s)",
        cfg.size, cfg.repeat
    );
    let json = a.output.json;
    say_line(json, &head);
    let mut text = format!("{head}\n");
    let rep = xpc::run(&exe, &cfg, &mut |l| {
        say_line(json, l);
        text.push_str(l);
        text.push('\n');
    })?;
    let table = xpc::table(&rep);
    finish_bench(json, out.as_deref(), "xpc", text, &rep, &table)?;
    Ok(0)
}

pub fn cmd_xpc_peer(a: XpcPeerArgs) -> Result<u8, Error> {
    let cfg = XpcConfig {
        messages: a.messages,
        size: a.size,
        pings: a.pings,
        bulk: a.bulk,
        repeat: a.repeat,
        spin_ns: a.spin_ns,
    };
    xpc::peer(&a.dir, &cfg)?;
    Ok(0)
}
