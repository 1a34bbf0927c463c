//! `wirespeed reflect`: the far end of `ping`, answering wirespeed probes within each client's cap.

use crate::args;
use crate::out::print_json;
use clap::Args;
use std::time::Duration;
use wirespeed::addr::parse_listen;
use wirespeed::units::{self};
use wirespeed::{sys, Error};
use wirespeed_lab::exporter::WithMetrics;
use wirespeed_lab::latency::reflect::{Cidr, ReflectConfig, Reflector};

#[derive(Args)]
pub struct ReflectArgs {
    /// Where to listen: PORT (every address, IPv4 and IPv6), ADDR:PORT or [IPV6]:PORT.
    listen: String,
    /// Stop after this long (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_parser = args::run_duration)]
    duration: Option<Duration>,
    /// Stop after reflecting this many datagrams.
    #[arg(long, value_parser = args::run_count)]
    count: Option<u64>,
    /// Pin the reflecting thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Poll without sleeping: lowest latency, but one core at 100 %.
    #[arg(long)]
    spin: bool,
    /// Datagrams per receive (and send) call, 1..1024.
    #[arg(long, default_value = "64", value_parser = args::batch)]
    batch: usize,
    /// Answer only sources in this network: ADDRESS or ADDRESS/BITS, e.g. 198.18.0.0/15
    /// (repeatable). Default: any source, as a reflector is there to be pinged from wherever
    /// the test runs; the other rules below still hold.
    #[arg(long = "allow", value_name = "CIDR")]
    allow: Vec<String>,
    /// Also answer source ports below 1024. They are refused by default: system services (echo,
    /// chargen, DNS) live there, and answering them is how a forged datagram starts a loop.
    #[arg(long)]
    allow_low_ports: bool,
    /// Most probes per second answered to one source address; 0 = no cap. The default is
    /// ping's own maximum --pps, so no wirespeed ping is throttled; lower it on an exposed host.
    #[arg(long, value_name = "PPS", default_value = "10000000", value_parser = args::client_cap)]
    max_pps_per_client: f64,
    /// Probes one source may send back to back beyond its cap (the token bucket's size).
    /// Default: 100 ms at the cap, at least 64.
    #[arg(long, value_name = "N", value_parser = args::client_burst)]
    client_burst: Option<u64>,
    #[command(flatten)]
    metrics: args::MetricsArgs,
    #[command(flatten)]
    transport: args::TransportArgs,
    /// With --transport pgm: the port reflections go to at each pinger's address, as a PGM
    /// session (default: the listening port + 1, which is ping's default too).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    reply_port: Option<u16>,
    /// Print one JSON document (schema wirespeed.reflect/1) instead of the summary.
    #[arg(long)]
    json: bool,
}

pub fn cmd_reflect(a: ReflectArgs) -> Result<u8, Error> {
    let listen = parse_listen(&a.listen)?;
    if let Some(p) = a.transport.pgm()? {
        return reflect_pgm(&a, p, listen);
    }
    if a.reply_port.is_some() {
        return Err(Error::invalid("--reply-port is for --transport pgm: leave it out"));
    }
    let mut cfg = ReflectConfig::new(listen);
    cfg.duration = a.duration;
    cfg.count = a.count;
    cfg.cpu = a.cpu;
    cfg.spin = a.spin;
    cfg.batch = a.batch;
    cfg.allow = a.allow.iter().map(|c| c.parse::<Cidr>().map_err(Error::invalid)).collect::<Result<_, _>>()?;
    cfg.allow_low_ports = a.allow_low_ports;
    cfg.max_pps_per_client = a.max_pps_per_client;
    cfg.client_burst = a.client_burst;
    cfg.validate()?;
    let exporter = a.metrics.start("reflect")?;
    cfg.metrics = exporter.as_ref().map(|e| e.board.clone());
    let r = Reflector::bind(&cfg)?;
    let addr = wirespeed::addr::shown(r.local_addr().unwrap_or(listen));
    eprintln!(
        "wirespeed reflect: listening on {addr} (every wirespeed probe goes back to its sender; {}); Ctrl-C stops",
        policy_text(&cfg)
    );
    if let Some(e) = &exporter {
        e.announce("reflect");
    }
    let stop = sys::install_stop_handler();
    let rep = r.run(&cfg, stop, None)?;
    if a.json {
        print_json(&WithMetrics { report: &rep, metrics: args::serving(&exporter) })?;
    } else {
        print!("{}", rep.human());
        if let Some(s) = args::serving(&exporter) {
            println!("  {}", s.line());
        }
    }
    Ok(0)
}

/// The reflector's answering rules in a few words, for its start line.
fn policy_text(cfg: &ReflectConfig) -> String {
    let who = if cfg.allow.is_empty() {
        "any source".to_string()
    } else {
        format!("sources in {}", cfg.allow.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "))
    };
    let cap = if cfg.max_pps_per_client > 0.0 {
        let rate = if cfg.max_pps_per_client >= 1.0 {
            units::pps(cfg.max_pps_per_client)
        } else {
            format!("{} pps", cfg.max_pps_per_client)
        };
        format!("at most {rate} per client (burst {})", cfg.burst())
    } else {
        "no per-client cap".to_string()
    };
    format!("{who}{}, {cap}", if cfg.allow_low_ports { "" } else { " with ports 1024 and up" })
}

/// `reflect --transport pgm`: probes arrive on a PGM session, each goes back on another.
fn reflect_pgm(a: &ReflectArgs, p: wirespeed::pgm::PgmConfig, listen: std::net::SocketAddr) -> Result<u8, Error> {
    use wirespeed_lab::latency::pgm::{ReflectWire, MAX_PROBE};
    if a.metrics.metrics.is_some() || !a.allow.is_empty() || a.spin {
        return Err(Error::invalid(
            "--transport pgm reflects one pinger's session: leave out --metrics, --allow and --spin",
        ));
    }
    let w = ReflectWire::bind(&p, listen, a.reply_port, MAX_PROBE)?;
    let reply = w.reply_port();
    eprintln!(
        "wirespeed reflect: listening on {} (PGM sessions; each probe goes back on a PGM session to its pinger at port {reply}); Ctrl-C stops",
        wirespeed::addr::shown(w.local_addr())
    );
    let stop = sys::install_stop_handler();
    let rep = w.run(stop, a.duration, a.count)?;
    if a.json {
        print_json(&rep)?;
    } else {
        print!("{}", rep.human());
    }
    Ok(0)
}
