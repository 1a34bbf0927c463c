//! `wirespeed station`: a persistent recorder a Field System drives over VSI-S.

use crate::args;
use crate::out::print_json;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use wirespeed::addr::Cidr;
use wirespeed::spool::scan::ScanLayout;
use wirespeed::station::{self, vsis, StationConfig};
use wirespeed::{sys, units, Error};

#[derive(Args)]
pub struct StationArgs {
    /// Serve VSI-S here (jive5ab's port is 2620). Bound to loopback unless told otherwise;
    /// another address needs --allow.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:2620")]
    control: SocketAddr,
    /// Client networks allowed to connect, e.g. 192.0.2.10/32 (repeat for more). Without it
    /// only loopback clients are served.
    #[arg(long, value_name = "CIDR")]
    allow: Vec<String>,
    /// The mount points scans go to, until `set_disks=` says otherwise (repeat, or a quoted
    /// glob such as '/mnt/disk*').
    #[arg(long = "disks", short = 'o', value_name = "DIR")]
    disks: Vec<PathBuf>,
    /// Scan layout until `record=mk6:N` says otherwise: flexbuff (jive5ab's default) or mark6.
    #[arg(long, default_value = "flexbuff", value_parser = ScanLayout::parse)]
    layout: ScanLayout,
    /// The stream's mode until `mode=` says otherwise, e.g. vdif_8000-2048-4-2 (payload bytes,
    /// Mb/s, channels, bits), mark5b:0xffffffff, or a wirespeed format spec.
    #[arg(long)]
    mode: Option<String>,
    /// Data port until `net_port=` says otherwise (jive5ab's default is 2630).
    #[arg(long, default_value = "2630")]
    port: u16,
    /// How frames arrive until `net_protocol=` says otherwise: pudp (one frame per datagram)
    /// or udps (an 8-byte sequence number first, not written to disk).
    #[arg(long, default_value = "pudp")]
    protocol: String,
    /// Chunk (FlexBuff) or block (Mark6) size until `net_protocol=...:WORKBUF` says otherwise,
    /// rounded down to whole frames. Default 128M for flexbuff, 8M for mark6.
    #[arg(long, value_parser = args::chunk_size)]
    chunk_size: Option<u64>,
    /// RAM ring between capture and disks, made ready once at start (every page faulted in
    /// and locked) and used by every scan. It must hold at least two chunks.
    #[arg(long, default_value = "1G", value_parser = args::ring_buffer)]
    buffer: u64,
    /// Bytes per disk write (a multiple of 4K).
    #[arg(long, default_value = "8M", value_parser = args::block)]
    block: u64,
    /// Write through the page cache instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
    /// Let `set_disks=` take directories on the root file system (jive5ab refuses them, and
    /// so does the station unless told: a scan must not fill the system disk).
    #[arg(long)]
    allow_root_fs: bool,
    /// Pin the capture thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Pin the disk writer threads to this CPU.
    #[arg(long)]
    writer_cpu: Option<usize>,
    /// Print the station's report (every scan recorded) as JSON when it stops.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    metrics: args::MetricsArgs,
}

pub fn cmd_station(a: StationArgs) -> Result<u8, Error> {
    let allow = a.allow.iter().map(|c| c.parse::<Cidr>().map_err(Error::invalid)).collect::<Result<Vec<_>, _>>()?;
    let mut settings = vsis::Settings { layout: a.layout, port: a.port, ..Default::default() };
    settings.disks = station::start_disks(&a.disks)?;
    if let Some(m) = &a.mode {
        let args: Vec<String> = m.split(':').map(str::to_string).collect();
        settings.mode = Some(vsis::parse_mode(&args).map_err(|e| Error::param("mode", e))?);
    }
    settings.protocol = match a.protocol.as_str() {
        "pudp" => vsis::Protocol::Plain,
        "udp" | "udps" => vsis::Protocol::Udps,
        "udpsnor" => vsis::Protocol::Udpsnor,
        other => return Err(Error::param("protocol", format!("'{other}': use pudp, udps or udpsnor"))),
    };
    settings.workbuf = a.chunk_size.unwrap_or(match a.layout {
        ScanLayout::FlexBuff => wirespeed::spool::scan::FLEXBUFF_CHUNK,
        ScanLayout::Mark6 => wirespeed::spool::scan::MARK6_BLOCK,
    });
    let exporter = a.metrics.start("station")?;
    let say: wirespeed::spool::scatter::Say = std::sync::Arc::new(|l: &str| eprintln!("{l}"));
    let cfg = StationConfig {
        control: a.control,
        allow,
        buffer: usize::try_from(a.buffer).unwrap_or(usize::MAX),
        block: usize::try_from(a.block).unwrap_or(8 << 20),
        direct: !a.buffered,
        settings,
        allow_root_fs: a.allow_root_fs,
        cpu: a.cpu,
        writer_cpu: a.writer_cpu,
        say,
        show: exporter.as_ref().map(|e| std::sync::Arc::new(e.board.clone()) as _),
        show_rings: exporter.as_ref().map(|e| std::sync::Arc::new(e.board.clone()) as _),
    };
    if let Some(e) = &exporter {
        e.announce("station");
    }
    let stop = sys::install_stop_handler();
    let report = station::run(cfg, stop)?;
    if a.json {
        print_json(&report)?;
    } else {
        println!(
            "wirespeed station on {}: {} scan(s); ring {} made ready once in {:.2} s",
            report.control,
            report.scans.len(),
            units::bytes(report.ring_bytes),
            report.ring_ready_s
        );
        for s in &report.scans {
            println!(
                "  {:>3} {}  {} received, lost {}, invalid {}, {} on {} disk(s){}",
                s.number,
                s.name,
                units::thousands(s.received),
                units::thousands(s.lost),
                units::thousands(s.invalid),
                units::bytes(s.bytes),
                s.disks.len(),
                s.error.as_ref().map(|e| format!("  !! {e}")).unwrap_or_default()
            );
        }
    }
    Ok(if report.scans.iter().any(|s| s.error.is_some()) { 1 } else { 0 })
}
