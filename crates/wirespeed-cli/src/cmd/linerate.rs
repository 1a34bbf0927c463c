//! `wirespeed linerate`: the Ethernet arithmetic that sizes a latency or rate test (frames per
//! second for a link speed and packet size).

use crate::out::print_json;
use clap::Args;
use wirespeed::units::{self, Rate};
use wirespeed::Error;
use wirespeed_lab::latency::linerate::{self, Layer};

#[derive(Args)]
pub struct LinerateArgs {
    /// Link speed in bits/s: 1G, 10G, 25G, 100G...
    #[arg(long, default_value = "1G", value_parser = parse_link)]
    link: f64,
    /// Packet sizes (comma list). By default the IP packet, which is what an MTU counts
    /// (seed 003's 1500); see --layer.
    #[arg(long, default_value = "1500", value_delimiter = ',', value_parser = units::parse_count)]
    size: Vec<u64>,
    /// What --size counts: ip (the IP packet), udp (the UDP payload, as `send --size`), or
    /// frame (the Ethernet frame, header to FCS).
    #[arg(long, default_value = "ip", value_parser = parse_layer)]
    layer: Layer,
    /// IPv6 (a 40-byte IP header instead of 20).
    #[arg(long)]
    ipv6: bool,
    /// Add an 802.1Q VLAN tag (4 bytes).
    #[arg(long)]
    vlan: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

fn parse_link(s: &str) -> Result<f64, String> {
    match Rate::parse(s) {
        Ok(Rate::Bits(b)) if b > 0.0 => Ok(b),
        _ => Err(format!("'{s}' is not a link speed: write bits/s like 1G, 10G or 100G")),
    }
}

fn parse_layer(s: &str) -> Result<Layer, String> {
    match s {
        "ip" => Ok(Layer::Ip),
        "udp" => Ok(Layer::Udp),
        "frame" => Ok(Layer::Frame),
        _ => Err(format!("'{s}' is not a layer: use ip, udp or frame")),
    }
}

pub fn cmd_linerate(a: LinerateArgs) -> Result<u8, Error> {
    let ip_header = if a.ipv6 { 40 } else { 20 };
    let rows = a
        .size
        .iter()
        .map(|&s| linerate::compute(a.link, s, a.layer, ip_header, a.vlan).map_err(Error::invalid))
        .collect::<Result<Vec<_>, Error>>()?;
    if a.json {
        return print_json(&serde_json::json!({"schema": "wirespeed.linerate/1", "rows": rows})).map(|_| 0);
    }
    println!(
        "Line rate of a {} Ethernet link{}{}: frame + preamble/SFD 8 B + inter-frame gap 12 B (96 bit times)",
        units::bits(a.link),
        if a.vlan { ", 802.1Q tag" } else { "" },
        if a.ipv6 { ", IPv6" } else { ", IPv4" }
    );
    println!(
        "{:>9} {:>9} {:>7} {:>7} {:>14} {:>11} {:>13} {:>12}",
        "UDP data", "IP packet", "frame", "on wire", "frames/s", "frame time", "UDP goodput", "IP rate"
    );
    for r in &rows {
        println!(
            "{:>9} {:>9} {:>7} {:>7} {:>14} {:>11} {:>13} {:>12}",
            r.udp_payload.map_or("-".into(), |u| u.to_string()),
            r.ip_packet,
            r.frame,
            r.wire,
            units::thousands(r.frames_per_s.floor() as u64),
            units::nanos(r.frame_time_ns),
            units::bits(r.udp_goodput_bps),
            units::bits(r.ip_bps)
        );
    }
    Ok(0)
}
