//! The `wirespeed partition` subcommand: arguments and printing for the lab's `testbed` (`wirespeed_lab::testbed`).

use crate::args;
use crate::out::print_json;
use clap::{Args, Subcommand};
use std::time::Duration;
use wirespeed::{units, Error};
use wirespeed_lab::testbed::{self, topology};

#[derive(Args)]
pub(crate) struct PartitionArgs {
    /// Namespace prefix: partition N is namespace PREFIX<N>; state in /run/wirespeed/PREFIX.json.
    /// Different prefixes are independent sets of partitions.
    #[arg(long, global = true, default_value = "wsp")]
    prefix: String,
    #[command(subcommand)]
    cmd: PartCmd,
}

#[derive(Subcommand)]
enum PartCmd {
    /// Create partitions: -p ID -c CPUS, repeated (like mkpart -p 1 -m 1 2). Idempotent.
    Create(CreateArgs),
    /// One line per partition: id, CPUs, addresses, state as its peers' daemons see it (mkpart -l).
    List,
    /// The valid partition layouts of this host, with a command for each (the seed's Table 1).
    Plan {
        /// Print one JSON document instead of the table (schema wirespeed.partition-plan/1).
        #[arg(long)]
        json: bool,
    },
    /// Undo what `create` made: daemons, namespaces, links, cgroups, state (mkpart -init). Only
    /// what wirespeed recorded as its own is removed. Safe to repeat.
    Init,
    /// Run a command inside partition P: its namespace, CPUs and memory limit, inherited by children.
    Exec {
        /// Partition id.
        #[arg(value_parser = args::partition_id)]
        id: u32,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Isolate partition P: its links go down and its heartbeat stops (mkpart -d P).
    Deactivate {
        /// Partition id.
        #[arg(value_parser = args::partition_id)]
        id: u32,
    },
    /// Bring a deactivated partition back: links up, routes, heartbeat (mkpart -a).
    Activate {
        /// Partition id.
        #[arg(value_parser = args::partition_id)]
        id: u32,
    },
    /// The configuration and live state (namespaces, daemons, each daemon's view of its peers).
    Status {
        /// Print one JSON document (schema wirespeed.partition-status/1).
        #[arg(long)]
        json: bool,
        /// Then serve every partition's heartbeat state to Prometheus at
        /// http://ADDR:PORT/metrics until Ctrl-C or SIGTERM: daemon up, namespace present,
        /// deactivated, and each live peer daemon's view (unknown, active, inactive,
        /// incompatible), read from the daemons' views at each scrape. A bare PORT is
        /// 127.0.0.1:PORT. Run it on the host, beside the partitions.
        #[arg(long, value_name = "[ADDR:]PORT", value_parser = wirespeed_lab::exporter::parse_addr)]
        metrics: Option<std::net::SocketAddr>,
    },
    /// Daemon of partition P (mkpd and XPC): heartbeat, channels, raw devices; `create` starts one per partition.
    Daemon(DaemonArgs),
}

#[derive(Args)]
struct HbArgs {
    /// How often each daemon beats and checks its peers (e.g. 1s, 200ms).
    #[arg(long, default_value = "1s", value_parser = units::parse_duration)]
    hb_check: Duration,
    /// Checks without a new heartbeat before a peer is reported not responding.
    #[arg(long, default_value = "3", value_parser = args::hb_misses)]
    hb_misses: u32,
}

#[derive(Args)]
struct CreateArgs {
    /// Partition id (1..64); repeat -p ID -c CPUS per partition (the Nth -c belongs to the Nth -p).
    #[arg(short = 'p', long = "partition", value_name = "ID", required = true, value_parser = args::partition_id)]
    ids: Vec<u32>,
    /// CPUs of the partition: a Linux CPU list (0, 0-3, 0,2). SMT siblings must stay together.
    #[arg(short = 'c', long = "cpus", value_name = "CPUS", value_parser = parse_cpus, required = true)]
    cpus: Vec<std::collections::BTreeSet<usize>>,
    /// MTU of every link (9000 for jumbo frames).
    #[arg(long, default_value = "1500", value_parser = args::mtu)]
    mtu: u32,
    /// Memory limit per partition (e.g. 4G), through the cgroup memory controller.
    #[arg(long, value_parser = args::mem_limit)]
    mem: Option<u64>,
    /// Allow partitions to share cores (needed for more partitions than cores): timing
    /// isolation is lost, network and memory isolation remain.
    #[arg(long)]
    share_cpus: bool,
    /// Replace an existing, different configuration with the same prefix.
    #[arg(long)]
    force: bool,
    /// Do not start the heartbeat daemons.
    #[arg(long)]
    no_daemons: bool,
    #[command(flatten)]
    hb: HbArgs,
}

#[derive(Args)]
struct DaemonArgs {
    /// Partition id this daemon speaks for.
    #[arg(value_parser = args::partition_id)]
    id: u32,
    #[command(flatten)]
    hb: HbArgs,
    /// Partition-support version to announce (A.B); peers with another major ignore it.
    #[arg(long, default_value = "1.0", value_parser = parse_version, hide = true)]
    hb_version: (u32, u32),
    /// XPC version to announce on the control channels (A.B); another major is refused.
    #[arg(long, default_value = "1.0", value_parser = parse_version, hide = true)]
    xpc_version: (u32, u32),
    /// Speak no XPC: no channels, no raw devices (peers say it does not support XPC messaging).
    #[arg(long, hide = true)]
    no_xpc: bool,
}

fn parse_cpus(s: &str) -> Result<std::collections::BTreeSet<usize>, String> {
    testbed::parse_cpu_list(s)
}

fn parse_version(s: &str) -> Result<(u32, u32), String> {
    testbed::heartbeat::parse_version(s).ok_or_else(|| format!("'{s}' is not a version: write MAJOR.MINOR, e.g. 1.0"))
}

/// `-p 1 -c 0 -p 2 -c 1`: each -c must come after its own -p and before the next one, so
/// that a mistyped order is caught instead of silently pairing the wrong CPUs.
pub(crate) fn check_pairing(m: &clap::ArgMatches) -> Result<(), Error> {
    let ps: Vec<usize> = m.indices_of("ids").map(|i| i.collect()).unwrap_or_default();
    let cs: Vec<usize> = m.indices_of("cpus").map(|i| i.collect()).unwrap_or_default();
    for (n, (&p, &c)) in ps.iter().zip(&cs).enumerate() {
        let next = ps.get(n + 1).copied().unwrap_or(usize::MAX);
        if !(p < c && c < next) {
            return Err(Error::invalid(
                "write each partition as -p ID -c CPUS, in that order, e.g. -p 1 -c 0 -p 2 -c 1",
            ));
        }
    }
    Ok(())
}

fn hb_config(h: &HbArgs) -> Result<testbed::HbConfig, Error> {
    let ms = h.hb_check.as_millis();
    if !(10..=60_000).contains(&ms) {
        return Err(Error::invalid("--hb-check must be between 10ms and 60s"));
    }
    if h.hb_misses == 0 || h.hb_misses > 1000 {
        return Err(Error::invalid("--hb-misses must be between 1 and 1000"));
    }
    Ok(testbed::HbConfig { check_ms: ms as u64, misses: h.hb_misses })
}

/// Remove the partitions of runs (demo, bench, ping) that were killed before they could, one
/// line each on stderr.
fn reap_stale() {
    for line in testbed::reap_stale() {
        eprintln!("wirespeed: {line}");
    }
}

pub(crate) fn cmd_partition(a: PartitionArgs) -> Result<u8, Error> {
    let prefix = a.prefix;
    testbed::check_prefix(&prefix)?;
    match a.cmd {
        PartCmd::Create(c) => {
            if c.ids.len() != c.cpus.len() {
                return Err(Error::invalid(format!(
                    "{} -p but {} -c: give every partition its CPUs, e.g. -p 1 -c 0 -p 2 -c 1",
                    c.ids.len(),
                    c.cpus.len()
                )));
            }
            let hb = hb_config(&c.hb)?;
            let topo = topology::Topology::read_host()?;
            let layout = testbed::Layout {
                prefix: prefix.clone(),
                partitions: c
                    .ids
                    .iter()
                    .zip(&c.cpus)
                    .map(|(&id, cpus)| topology::PartSpec { id, cpus: cpus.clone() })
                    .collect(),
                mtu: c.mtu,
                mem: c.mem,
                share_cpus: c.share_cpus,
            };
            // Validate before asking for privilege: a wrong layout is worth knowing either way.
            if let Err(errs) = topology::validate(&topo, &layout.partitions, layout.share_cpus) {
                return Err(Error::invalid(errs.join("\nwirespeed: ")));
            }
            testbed::require_net_admin("create")?;
            let exe = if c.no_daemons {
                None
            } else {
                Some(
                    std::env::current_exe()
                        .map_err(|e| Error::failed(format!("cannot find this program's path: {e}")))?,
                )
            };
            let out = testbed::create(
                &topo,
                layout.clone(),
                &testbed::CreateOptions { force: c.force, hb, daemon_exe: exe, owner: None },
            )?;
            for l in &out.lines {
                eprintln!("{l}");
            }
            if out.changed {
                println!("partitions '{prefix}' ready: {}", testbed::describe(&layout));
            } else {
                println!("partitions '{prefix}' unchanged: they already are as asked ({})", testbed::describe(&layout));
            }
            Ok(0)
        }
        PartCmd::List => {
            let st = testbed::status(&prefix)?;
            for p in &st.partitions {
                let links: Vec<String> = p
                    .links
                    .iter()
                    .map(|(j, a)| format!("{a}->{j}"))
                    .chain(p.links6.iter().map(|(j, a)| format!("{a}->{j}")))
                    .collect();
                println!(
                    "partition: {} = cpus: {}  address: {}{}  links: {}  ns: {}{}  {}",
                    p.id,
                    p.cpus,
                    p.address,
                    p.address6.map(|a| format!(" {a}")).unwrap_or_default(),
                    if links.is_empty() { "-".to_string() } else { links.join(" ") },
                    p.namespace,
                    if p.namespace_present { "" } else { " (missing)" },
                    p.state
                );
            }
            Ok(0)
        }
        PartCmd::Plan { json } => {
            let topo = topology::Topology::read_host()?;
            if json {
                return print_json(&topology::plan_doc(&topo)).map(|_| 0);
            }
            let rows = topology::plan(&topo);
            println!(
                "this host: {} CPUs online ({}), {} cores, {} NUMA node(s)",
                topo.online.len(),
                topology::format_cpu_list(&topo.online),
                topo.cores.len(),
                topo.nodes().len()
            );
            println!("{:>10}  {:>19}  {:>18}  example", "partitions", "cores per partition", "CPUs per partition");
            for r in &rows {
                let cores = if r.shared { "shared".to_string() } else { r.cores_per_partition.to_string() };
                println!("{:>10}  {:>19}  {:>18}  {}", r.partitions, cores, r.cpus_per_partition, r.example);
            }
            println!("uneven splits are valid too, as long as every partition has whole cores (SMT siblings together)");
            Ok(0)
        }
        PartCmd::Init => {
            testbed::require_net_admin("init")?;
            reap_stale();
            let done = testbed::init(&prefix)?;
            for l in &done.removed {
                println!("{l}");
            }
            for l in &done.kept {
                println!("{l}");
            }
            if done.removed.is_empty() {
                println!("nothing to undo: no partitions with prefix '{prefix}' made by wirespeed");
            } else {
                println!("partitions '{prefix}' removed");
            }
            Ok(0)
        }
        PartCmd::Exec { id, cmd } => {
            testbed::require_net_admin("exec")?;
            match testbed::exec(&prefix, id, &cmd)? {}
        }
        PartCmd::Deactivate { id } => {
            testbed::require_net_admin("deactivate")?;
            if testbed::deactivate(&prefix, id)? {
                println!("partition {id} deactivated: its links are down and its heartbeat stopped");
            } else {
                println!("partition {id} was already deactivated");
            }
            Ok(0)
        }
        PartCmd::Activate { id } => {
            testbed::require_net_admin("activate")?;
            if testbed::activate(&prefix, id)? {
                println!("partition {id} activated: links up, routes back, heartbeat resumed");
            } else {
                println!("partition {id} was already active; links and routes checked");
            }
            Ok(0)
        }
        PartCmd::Status { json, metrics } => {
            if testbed::require_net_admin("status").is_ok() {
                reap_stale();
            }
            let st = testbed::status(&prefix)?;
            // Bound before anything is printed: a busy port is one line and exit 2.
            let server = match metrics {
                Some(addr) => {
                    let board = wirespeed_lab::exporter::Board::new("partition status");
                    let shown = wirespeed_lab::exporter::Shown { board, partitions: Some(prefix.clone()) };
                    Some(wirespeed_lab::exporter::Server::show(addr, shown)?)
                }
                None => None,
            };
            if json {
                print_json(&st)?;
            } else {
                print_status(&st);
            }
            if let Some(server) = server {
                return serve_status(&server);
            }
            Ok(0)
        }

        PartCmd::Daemon(d) => {
            testbed::require_net_admin("daemon")?;
            let hb = hb_config(&d.hb)?;
            let opts = testbed::DaemonOptions {
                check: Duration::from_millis(hb.check_ms),
                misses: hb.misses,
                version: d.hb_version,
                xpc_version: d.xpc_version,
                xpc: !d.no_xpc,
            };
            testbed::run_daemon(&prefix, d.id, opts, &mut |line| {
                use std::io::Write;
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "{line}");
                let _ = o.flush();
            })?;
            Ok(0)
        }
    }
}

/// `partition status` as text: one line per partition, then its channels and raw devices.
fn print_status(st: &testbed::Status) {
    for p in &st.partitions {
        println!(
            "partition {}: cpus {} ns {}{} address {}{} daemon {} state {}",
            p.id,
            p.cpus,
            p.namespace,
            if p.namespace_present { "" } else { " (missing)" },
            p.address,
            p.address6.map(|a| format!(" {a}")).unwrap_or_default(),
            p.daemon_pid.map_or("none".to_string(), |d| d.to_string()),
            p.state
        );
        for (j, x) in &p.xpc_by {
            println!("  xpc with partition {j}: {x}");
        }
        if let Some(d) = &p.devices {
            println!("  raw devices: {d}/raw (inside `partition exec {}`: /hw/xplink/raw)", p.id);
        }
    }
}

/// Serve the heartbeat state until Ctrl-C or SIGTERM.
fn serve_status(server: &wirespeed_lab::exporter::Server) -> Result<u8, Error> {
    let stop = wirespeed::sys::install_stop_handler();
    eprintln!("wirespeed partition status: metrics at {} (Prometheus text format); Ctrl-C stops", server.url());
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("wirespeed partition status: {}", server.serving().line());
    Ok(0)
}
