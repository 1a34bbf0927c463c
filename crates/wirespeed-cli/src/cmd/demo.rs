//! `wirespeed demo`: a first look, a sender and a receiver for a few seconds, then the ledger.

use crate::args::{self, counter_format, FormatArgs};
use clap::Args;
use std::time::Duration;
use wirespeed::units::Rate;
use wirespeed::wire::ByteOrder;
use wirespeed::{sys, Error};
use wirespeed_lab::demo::{self, DemoConfig};

#[derive(Args)]
pub struct DemoArgs {
    /// How long to send.
    #[arg(long, default_value = "3s", value_parser = args::run_duration)]
    duration: Duration,
    /// Send rate.
    #[arg(long, default_value = "2G", value_parser = Rate::parse)]
    rate: Rate,
    /// Payload bytes.
    #[arg(long, default_value = "8800", value_parser = args::udp_size)]
    size: u64,
    /// Leave out every Nth packet (N >= 2), to watch the ledger find them.
    #[arg(long, value_name = "N", value_parser = args::skip_every)]
    skip_every: Option<u64>,
    /// Print one JSON document with both reports.
    #[arg(long)]
    json: bool,
    /// Stay on loopback even when partitions could be made (by default, with CAP_NET_ADMIN the
    /// demo builds two partitions joined by a veth link, runs there, and removes them).
    #[arg(long)]
    loopback: bool,
    /// The demo between two real hosts over ssh: --tx the sender's, --rx the receiver's.
    #[command(flatten)]
    hosts: args::HostArgs,
}

pub fn cmd_demo(a: DemoArgs) -> Result<u8, Error> {
    let fa = FormatArgs {
        format: "counter".into(),
        byte_order: ByteOrder::Be,
        seq_offset: None,
        seq_width: 8,
        seq_endian: ByteOrder::Be,
    };
    let cfg = DemoConfig {
        duration: a.duration,
        rate: a.rate,
        size: a.size,
        skip_every: a.skip_every,
        json: a.json,
        loopback: a.loopback,
    };
    // On partitions Ctrl-C reaches the children too (same process group); this process must
    // live on to remove the partitions, so it only notes the signal.
    let stop = sys::install_stop_handler();
    if a.loopback && a.hosts.given() {
        return Err(args::usage("--loopback and --tx/--rx name different places: choose one".into()));
    }
    let run = match a.hosts.connect()? {
        Some(h) => demo::on_hosts(h, &cfg, stop, &mut |line| eprintln!("{line}"))?,
        None => demo::run(&cfg, || counter_format(a.size, &fa), stop, &mut |line| eprintln!("{line}"))?,
    };
    if a.json {
        println!("{}", run.to_json()?);
    } else {
        print!("{}", run.human());
    }
    Ok(0)
}
