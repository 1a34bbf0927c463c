//! `wirespeed doctor`: inspect this host for a stream and say what to change, with the figure
//! and the command; `--apply` and `--persist` make or write the safe changes.

use crate::args::udp_size;
use crate::out::print_json;
use clap::Args;
use std::path::PathBuf;
use wirespeed::units::Rate;
use wirespeed::{sys, Error};
use wirespeed_lab::doctor::{self, apply, Root, Target};

pub const DOCTOR_HELP: &str = "Inspect this host for a UDP stream at a given rate and size, and say \
    what to change: each finding with what was seen, why it matters for that stream (with the \
    figure: \"a 208 KiB buffer holds 0.43 ms at 4.00 Gb/s\") and the exact command that fixes it, \
    problems first, then advice, largest expected effect first.\n\n\
    It looks where seeds 001 and 004 looked by hand: socket buffer limits and the kernel's \
    backlog; the NIC (link speed, MTU against the datagram, rings, interrupt coalescing, offloads, \
    channels, its NUMA node against the capture CPU, the driver's drop counters); which CPUs \
    take its interrupts and whether irqbalance moves them; the capture CPU (governor, isolation, \
    SMT sibling, what else ran there in the last half second); the stack (conntrack, firewall \
    rules for the port, rp_filter, IGMP); the process (priority, locked-memory limit, huge \
    pages); and with --disk, the disk's measured write rate against the stream's. What cannot be \
    read (a veth has no rings; not root) is said, never guessed.\n\n\
    Nothing is changed without --apply. --apply makes only the safe, reversible changes \
    (sysctls, IRQ affinity, ethtool settings), prints each, and writes an undo script first; \
    --persist DIR writes them as sysctl.d and udev files instead of changing the live system. \
    Only changes that can be made here are marked [--apply] (a read-only sysctl is not offered; \
    with --apply or --persist the NIC's driver is asked first, by writing back the values in \
    force; a plain inspection writes nothing to the NIC); a finding whose fix cannot be made \
    says why on a \"no --apply:\" line. --apply makes all or none: when the kernel refuses one, \
    what was made before it is put back.\n\n\
    Try:  wirespeed doctor --for 4G --size 1080 --cpu 1\n      \
    wirespeed doctor --for 2G --size 8800 --port 7148 --disk /data/rec --json\n      \
    sudo wirespeed doctor --for 4G --size 1080 --apply\n\n\
    Exit codes: 0 inspected (findings or not), 1 a change failed or the privilege is missing, \
    2 bad usage.";

#[derive(Args)]
pub struct DoctorArgs {
    /// The interface the stream arrives on. Default: the one the default route uses.
    #[arg(long, value_name = "IF")]
    iface: Option<String>,
    /// The stream's rate: payload bits/s (4G, 942M) or datagrams/s with --size (500kpps).
    #[arg(long = "for", value_name = "RATE", value_parser = parse_for)]
    rate: Option<Rate>,
    /// UDP payload bytes per datagram (1..65507).
    #[arg(long, value_name = "BYTES", value_parser = udp_size)]
    size: Option<u64>,
    /// The CPU the capture thread will run on (recv/record --cpu).
    #[arg(long, value_name = "N")]
    cpu: Option<usize>,
    /// The UDP port the stream arrives at (1..65535): firewall and conntrack findings look
    /// for it.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,
    /// The directory `record` will write to: its write rate is measured (512 MiB, O_DIRECT)
    /// and set against the stream's.
    #[arg(long, value_name = "DIR")]
    disk: Option<PathBuf>,
    /// Read the system under DIR instead of / (a snapshot laid out as proc/, sys/, and
    /// ethtool/IF.json, nft/ruleset for what those commands say).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// List the findings that are fine too.
    #[arg(long)]
    all: bool,
    /// Print the report as one JSON document (schema wirespeed.doctor/1).
    #[arg(long)]
    json: bool,
    /// Make the safe, reversible changes the findings list (sysctls, IRQ affinity, ethtool
    /// settings; never the MTU, the kernel command line or anything that takes a link down),
    /// each printed with the value before and after. The values in force are read and an undo
    /// script written before anything changes. Root only.
    #[arg(long, conflicts_with_all = ["persist", "root"])]
    apply: bool,
    /// Where --apply writes the undo script (must not exist). Default:
    /// ./wirespeed-doctor-undo-YYYYMMDDTHHMMSSZ.sh
    #[arg(long, value_name = "FILE", requires = "apply")]
    undo: Option<PathBuf>,
    /// Write the changes as DIR/90-wirespeed.conf (sysctl.d) and DIR/90-wirespeed.rules (udev)
    /// instead of making them: e.g. --persist /etc/sysctl.d, then `sysctl --system`. Files
    /// wirespeed did not write are never overwritten.
    #[arg(long, value_name = "DIR")]
    persist: Option<PathBuf>,
    /// Inspect HOST instead of this machine: its own wirespeed runs this doctor there over ssh
    /// ([user@]host[:port]; the same version), and its findings, commands and --apply are that
    /// host's. The one to ask when a bench on hosts says a far receiver lost.
    #[arg(long, value_name = "HOST", value_parser = far_host, conflicts_with = "root")]
    host: Option<wirespeed_lab::testbed::hosts::Host>,
    /// With --host: pass `-o KEY=VALUE` to ssh (repeats).
    #[arg(long = "ssh-option", value_name = "KEY=VALUE", requires = "host")]
    ssh_option: Vec<String>,
    /// With --host: pass `-F FILE` to ssh.
    #[arg(long = "ssh-config", value_name = "FILE", requires = "host")]
    ssh_config: Option<PathBuf>,
    /// With --host: the far wirespeed, when it is not on that host's PATH.
    #[arg(long = "remote-wirespeed", value_name = "PATH", default_value = "wirespeed", requires = "host")]
    remote_wirespeed: String,
}

fn parse_for(s: &str) -> Result<Rate, String> {
    match Rate::parse(s)? {
        Rate::Max => Err("--for needs a rate the stream has: bits/s (4G) or datagrams/s (500kpps), not max".into()),
        r => Ok(r),
    }
}

/// The inspection's target from the options: a datagram rate needs --size to become bits.
fn target(a: &DoctorArgs) -> Result<Target, Error> {
    let rate_bps = match a.rate {
        None => None,
        Some(Rate::Bits(b)) => Some(b),
        Some(Rate::Packets(p)) => match a.size {
            Some(s) => Some(p * s as f64 * 8.0),
            None => return Err(Error::invalid("--for in datagrams/s needs --size BYTES to know the bit rate")),
        },
        Some(Rate::Max) => None,
    };
    if let Some(i) = &a.iface {
        if i.is_empty() || i.len() > 15 || i.contains('/') || i.contains(char::is_whitespace) || i == "." || i == ".." {
            return Err(Error::invalid(format!(
                "'{i}' is not an interface name (at most 15 characters, no '/' or spaces): `ip -br link` lists them"
            )));
        }
    }
    if let Some(d) = &a.disk {
        if !d.is_dir() {
            return Err(Error::invalid(format!(
                "--disk {}: not a directory: give the directory record will write to",
                d.display()
            )));
        }
    }
    Ok(Target {
        iface: a.iface.clone(),
        rate_bps,
        size: a.size,
        cpu: a.cpu,
        port: a.port,
        disk: a.disk.clone(),
        ask_driver: a.apply || a.persist.is_some(),
    })
}

/// The options that name things on the host (an interface, a CPU) or files to write, checked
/// against the system the inspection reads before anything is inspected: a name that is not
/// there is a mistake to say in one line, not a report about nothing.
fn check_against(a: &DoctorArgs, root: &Root) -> Result<(), Error> {
    let place =
        if root.is_live() { "on this host".to_string() } else { format!("in the snapshot {}", root.dir().display()) };
    if let Some(i) = &a.iface {
        if root.read_line(&format!("/sys/class/net/{i}/mtu")).is_none() {
            return Err(Error::invalid(format!(
                "--iface {i}: there is no interface {i} {place} (`ip -br link` lists them)"
            )));
        }
    }
    if let Some(c) = a.cpu {
        if let Ok(t) = wirespeed_lab::testbed::topology::Topology::read_from(&root.path("/sys/devices/system")) {
            if !t.online.contains(&c) {
                return Err(Error::invalid(format!(
                    "--cpu {c}: CPU {c} is not online {place} (online: {}): give the CPU the capture will run on",
                    wirespeed_lab::testbed::topology::format_cpu_list(&t.online)
                )));
            }
        }
    }
    if let Some(d) = &a.persist {
        if !d.is_dir() {
            return Err(Error::invalid(format!(
                "--persist {}: not a directory: give the directory to write 90-wirespeed.conf and .rules into (e.g. /etc/sysctl.d)",
                d.display()
            )));
        }
    }
    if let Some(u) = &a.undo {
        if std::fs::symlink_metadata(u).is_ok() {
            return Err(Error::invalid(format!(
                "--undo {}: the file exists: the undo script is written new, never over another file; name another",
                u.display()
            )));
        }
    }
    Ok(())
}

fn far_host(s: &str) -> Result<wirespeed_lab::testbed::hosts::Host, String> {
    match wirespeed_lab::testbed::hosts::Host::parse(s)? {
        wirespeed_lab::testbed::hosts::Host::Local => {
            Err("--host local is this machine: leave --host out to inspect it".into())
        }
        h => Ok(h),
    }
}

/// This command line as the far doctor gets it: without the options that reach the host.
fn far_args() -> Vec<String> {
    let ours = ["--host", "--ssh-option", "--ssh-config", "--remote-wirespeed"];
    let mut out = Vec::new();
    let mut args = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned());
    while let Some(a) = args.next() {
        if ours.contains(&a.as_str()) {
            args.next();
        } else if !ours.iter().any(|o| a.starts_with(&format!("{o}="))) {
            out.push(a);
        }
    }
    out
}

/// `doctor --host HOST`: greet the host, then run this doctor there through the leash,
/// printing what it prints; its exit code is this command's.
fn on_host(a: &DoctorArgs, host: &wirespeed_lab::testbed::hosts::Host) -> Result<u8, Error> {
    use wirespeed_lab::testbed::{hosts, proc};
    let ssh = hosts::Ssh {
        options: a.ssh_option.clone(),
        config: a.ssh_config.clone(),
        remote_exe: a.remote_wirespeed.clone(),
    };
    ssh.check()?;
    let end = hosts::greet(&ssh, host, env!("CARGO_PKG_VERSION"))?;
    let cmd = match end.command(&ssh, None, far_args()) {
        (c, Some(line)) => proc::Placed::leashed(c, line),
        (c, None) => c.into(),
    };
    let stop = sys::install_stop_handler();
    let exit = proc::Proc::spawn_inherit(cmd, &format!("the doctor on {}", host.name()))?
        .wait(proc::Wait::new().stop(stop))?;
    Ok(exit.status.code().map(|c| c as u8).unwrap_or(1))
}

pub fn cmd_doctor(a: DoctorArgs) -> Result<u8, Error> {
    if let Some(h) = &a.host {
        return on_host(&a, h);
    }
    let t = target(&a)?;
    let root = match &a.root {
        Some(d) if !d.is_dir() => {
            return Err(Error::invalid(format!(
                "--root {}: not a directory (a snapshot with proc/ and sys/ inside)",
                d.display()
            )))
        }
        Some(d) if d.canonicalize().is_ok_and(|c| c == std::path::Path::new("/")) => Root::live(),
        Some(d) => Root::at(d.clone()),
        None => Root::live(),
    };
    check_against(&a, &root)?;
    let stop = sys::install_stop_handler();
    if t.disk.is_some() && root.is_live() && !a.json {
        eprintln!("wirespeed doctor: measuring the disk (512 MiB with record's own writes)...");
    }
    let mut report = doctor::inspect::inspect(&root, &t, stop);
    if !a.json {
        print!("{}", report.text(a.all));
    }
    let json = a.json;
    let mut say = |l: &str| {
        if json {
            eprintln!("wirespeed doctor: {l}");
        } else {
            println!("{l}");
        }
    };
    let mut failure = None;
    if a.apply || a.persist.is_some() {
        let (changes, notes) = apply::plan_with_notes(&report);
        for n in &notes {
            say(n);
        }
        if changes.is_empty() {
            say("nothing to change: no finding lists a change --apply or --persist can make");
        } else if let Some(dir) = &a.persist {
            report.persisted = Some(apply::persist(&changes, dir, &mut say)?);
        } else {
            let undo = a.undo.clone().unwrap_or_else(default_undo);
            let done = apply::apply_report(&changes, &root, &undo, &mut say)?;
            failure = done.failure();
            report.applied = Some(done);
        }
    }
    if json {
        print_json(&report)?;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(0),
    }
}

/// `./wirespeed-doctor-undo-YYYYMMDDTHHMMSSZ.sh`: in the directory the user ran from, named by
/// the time, so two runs never take each other's undo.
fn default_undo() -> PathBuf {
    let stamp = wirespeed::calendar::utc_compact(wirespeed::sys::realtime_ns());
    PathBuf::from(format!("wirespeed-doctor-undo-{stamp}.sh"))
}
