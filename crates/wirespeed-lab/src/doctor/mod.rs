//! `wirespeed doctor`: the tuning that seed 001 (Cassini UDP, 2004) and seed 004 (CASPER memo 21,
//! 2008) did by hand, as one inspection with evidence.
//!
//! Seed 001's authors went from 70 % of packets received to zero loss by reading counters,
//! finding which resource ran out, and changing it: driver rings, interrupt moderation, socket
//! buffer limits, checksumming, processor sets, interrupt placement, the application's binding.
//! Seed 004 adds receive buffers of a few MB, jumbo frames, packet rates below ~500 kpps and a
//! high-priority receiver. The doctor reads the same things for the path a stream at a given rate
//! and size would take, and says, per finding, what it saw, why it matters (with the figure) and
//! the exact command that fixes it.
//!
//! The rooms:
//! - the [`inspect`] room reads the system (procfs, sysfs, ethtool) through a [`Root`] into
//!   [`Finding`]s ordered by expected effect; [`Report::text`] words them for people;
//! - the [`apply`] room makes the safe, reversible [`Change`]s (`--apply`, each printed, with an
//!   undo script) or writes them as sysctl.d / udev snippets (`--persist`).
//!
//! Everything is read through a [`Root`] directory, `/` for the live system, so tests point the
//! doctor at snapshots of other machines (SMT and two NUMA nodes, a NIC whose interrupts are on
//! the wrong CPU). What ethtool reports comes from ioctls on the live system, and from
//! `ethtool/IFACE.json` under a snapshot root.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub mod apply;
pub mod inspect;

/// The schema name of the doctor's JSON report.
pub const SCHEMA: &str = "wirespeed.doctor/1";

/// Where the doctor reads the system: `/` for the live system, or a snapshot directory laid out
/// the same way (`proc/`, `sys/`, `etc/`, and `ethtool/IFACE.json` for what ethtool would say).
#[derive(Clone, Debug)]
pub struct Root {
    dir: PathBuf,
}

impl Root {
    /// The live system.
    pub fn live() -> Root {
        Root { dir: PathBuf::from("/") }
    }

    /// A snapshot of a system under `dir`.
    pub fn at(dir: impl Into<PathBuf>) -> Root {
        Root { dir: dir.into() }
    }

    /// Whether this is the live system (ioctls, processes and the disk are only looked at
    /// there; a snapshot answers from its files).
    pub fn is_live(&self) -> bool {
        self.dir == Path::new("/")
    }

    /// The directory the system is read under.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The real path of a system path such as `/proc/sys/net/core/rmem_max`.
    pub fn path(&self, sys_path: &str) -> PathBuf {
        self.dir.join(sys_path.trim_start_matches('/'))
    }

    /// A system file's text, or `None` when it is not there or cannot be read.
    pub fn read(&self, sys_path: &str) -> Option<String> {
        std::fs::read_to_string(self.path(sys_path)).ok()
    }

    /// A system file's first line as a trimmed string.
    pub fn read_line(&self, sys_path: &str) -> Option<String> {
        self.read(sys_path).map(|s| s.lines().next().unwrap_or("").trim().to_string())
    }

    /// A system file holding one integer.
    pub fn read_u64(&self, sys_path: &str) -> Option<u64> {
        self.read_line(sys_path)?.parse().ok()
    }
}

/// What the stream the host must take looks like: the path and load the doctor inspects for.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Target {
    /// The interface the stream arrives on (`--iface`); `None`: the doctor picks the one the
    /// default route uses, and says so.
    pub iface: Option<String>,
    /// The stream's payload rate, bits/s (`--for 4G`).
    pub rate_bps: Option<f64>,
    /// UDP payload bytes per datagram (`--size 1080`).
    pub size: Option<u64>,
    /// The CPU the capture thread will run on (`--cpu N`).
    pub cpu: Option<usize>,
    /// The UDP port the stream arrives at (`--port`), for firewall and conntrack rules.
    pub port: Option<u16>,
    /// The directory `record` would write to (`--disk DIR`): its measured rate is set against the
    /// stream's.
    pub disk: Option<PathBuf>,
    /// Ask the NIC's driver whether it takes a setting, by writing back the values in force
    /// (`--apply`, `--persist`). A plain inspection never writes to the NIC: some drivers
    /// reset their queues on any set call, which would cost a running capture its packets.
    #[serde(skip)]
    pub ask_driver: bool,
}

impl Target {
    /// Datagrams per second the target implies, when both rate and size are known.
    pub fn pps(&self) -> Option<f64> {
        match (self.rate_bps, self.size) {
            (Some(r), Some(s)) if s > 0 => Some(r / (8.0 * s as f64)),
            _ => None,
        }
    }
}

/// What a finding is about: the layers a datagram crosses, in seed 001's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Area {
    /// Socket buffers and the kernel's backlog queue (net.core.*).
    Socket,
    /// The NIC: rings, coalescing, offloads, channels, MTU, NUMA node, driver counters.
    Nic,
    /// Which CPUs serve the NIC's interrupts.
    Irq,
    /// The capture CPU: governor, isolation, SMT sibling, what else runs there.
    Cpu,
    /// The IP stack: conntrack, firewall rules, rp_filter, IGMP.
    Stack,
    /// The capturing process: priority, locked-memory limit, huge pages.
    Process,
    /// The disk `record` writes to, against the stream's rate.
    Disk,
}

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Will lose packets at the target (or is losing them now: a counter says so).
    Problem,
    /// Worth changing: a margin is thin or a known lesson applies.
    Advice,
    /// Looked at, and fine for the target.
    Ok,
    /// Could not be read (not root, a veth has no rings, a snapshot without the file): said,
    /// not guessed.
    Unknown,
}

/// One change `--apply` can make and undo: safe (no link down, no reboot) and reversible (the
/// value before is read first and written back by the undo script).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// A sysctl by its dotted name (`net.core.rmem_max`), the value as `sysctl -w` takes it.
    Sysctl {
        /// Dotted name.
        key: String,
        /// New value.
        value: String,
    },
    /// An interrupt's CPU list (`/proc/irq/N/smp_affinity_list`).
    IrqAffinity {
        /// IRQ number.
        irq: u32,
        /// CPU list as the kernel writes it (`0`, `0-1`, `2,4`).
        cpus: String,
    },
    /// The NIC's receive ring size (`ethtool -G IFACE rx N`).
    Rings {
        /// Interface.
        iface: String,
        /// Receive ring entries.
        rx: u32,
    },
    /// Receive interrupt coalescing (`ethtool -C IFACE rx-usecs U rx-frames F`).
    Coalesce {
        /// Interface.
        iface: String,
        /// Microseconds to wait before interrupting.
        rx_usecs: u32,
        /// Frames to wait for before interrupting.
        rx_frames: u32,
    },
    /// Combined channels (queues) (`ethtool -L IFACE combined N`).
    Channels {
        /// Interface.
        iface: String,
        /// Combined channel count.
        combined: u32,
    },
    /// An offload by its ethtool name (`ethtool -K IFACE rx-udp-gro-forwarding on`).
    Feature {
        /// Interface.
        iface: String,
        /// The ethtool feature string (`rx-gro-list`, `rx-udp-gro-forwarding`, `rx-checksum`...).
        feature: String,
        /// On or off.
        on: bool,
    },
}

impl Change {
    /// The command a person would type for this change.
    pub fn command(&self) -> String {
        match self {
            Change::Sysctl { key, value } => format!("sysctl -w {key}={value}"),
            Change::IrqAffinity { irq, cpus } => format!("echo {cpus} > /proc/irq/{irq}/smp_affinity_list"),
            Change::Rings { iface, rx } => format!("ethtool -G {iface} rx {rx}"),
            Change::Coalesce { iface, rx_usecs, rx_frames } => {
                format!("ethtool -C {iface} rx-usecs {rx_usecs} rx-frames {rx_frames}")
            }
            Change::Channels { iface, combined } => format!("ethtool -L {iface} combined {combined}"),
            Change::Feature { iface, feature, on } => {
                format!("ethtool -K {iface} {feature} {}", if *on { "on" } else { "off" })
            }
        }
    }
}

/// One thing the doctor looked at.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    /// A stable name scripts and `recv`'s hints refer to (`socket.rmem_max`, `irq.placement`).
    pub id: String,
    /// The layer.
    pub area: Area,
    /// How much it matters.
    pub status: Status,
    /// What was seen, with the values (`net.core.rmem_max = 212992 (208 KiB)`).
    pub seen: String,
    /// Why it matters at the target, with the figure (`a 208 KiB buffer holds 0.4 ms at 4 Gb/s`).
    pub why: String,
    /// The exact command(s) that fix it, for a person; empty when nothing needs doing or the
    /// fix is not a command (buy a NIC with jumbo frames).
    pub fix: Vec<String>,
    /// What `--apply` would change: only safe, reversible changes; empty for advice that needs
    /// a person (MTU, isolcpus, BIOS).
    pub changes: Vec<Change>,
    /// Expected effect, 0..1: the order findings are printed in (largest first, problems
    /// before advice).
    pub effect: f64,
    /// Why `--apply` does not make this finding's fix, when a change was wanted but cannot be
    /// made here (the driver refuses the setting, the kernel makes the key read-only in this
    /// network namespace): so nobody is promised a change that would fail half-way. `None` when
    /// the changes listed are all that was wanted.
    #[serde(default)]
    pub no_apply: Option<String>,
}

/// The doctor's whole answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: String,
    /// What was inspected for.
    pub target: Target,
    /// The interface the path uses (given, or found from the default route).
    pub iface: Option<String>,
    /// Whether the inspection ran with root's view (some counters and all changes need it).
    pub privileged: bool,
    /// Notes about the inspection itself (a snapshot root, an interface picked for the user).
    pub notes: Vec<String>,
    /// Every finding, ordered by [`Status`] then by expected effect.
    pub findings: Vec<Finding>,
    /// What `--apply` changed, found already set, or could not change; absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<apply::Applied>,
    /// The files `--persist` wrote; absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persisted: Option<Vec<PathBuf>>,
}

impl Status {
    /// The word a person reads in the left column.
    pub fn word(self) -> &'static str {
        match self {
            Status::Problem => "PROBLEM",
            Status::Advice => "ADVICE",
            Status::Ok => "ok",
            Status::Unknown => "unknown",
        }
    }
}

/// Words folded at 100 columns under a 9-column indent, the first line led by `lead`.
fn wrap(o: &mut String, lead: &str, text: &str) {
    const WIDTH: usize = 100;
    let mut line = format!("{:<9}{lead}", "");
    let start = line.len();
    for w in text.split_whitespace() {
        if line.len() > start && line.len() + 1 + w.len() > WIDTH {
            o.push_str(line.trim_end());
            o.push('\n');
            line = format!("{:<9}{:<width$}", "", "", width = lead.len());
        }
        if line.len() > 9 + lead.len() {
            line.push(' ');
        }
        line.push_str(w);
    }
    o.push_str(line.trim_end());
    o.push('\n');
}

impl Report {
    /// Findings with this status.
    pub fn count(&self, s: Status) -> usize {
        self.findings.iter().filter(|f| f.status == s).count()
    }

    /// Every change `--apply` would make, in finding order.
    pub fn changes(&self) -> Vec<&Change> {
        self.findings.iter().flat_map(|f| f.changes.iter()).collect()
    }

    /// The finding a diagnosis points at, by id.
    pub fn finding(&self, id: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.id == id)
    }

    /// The report for people: a heading with the target, then each finding as status, id and
    /// what was seen, why it matters and the fix, problems first; `all` also prints the
    /// findings that are fine (their one line each).
    pub fn text(&self, all: bool) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let t = &self.target;
        let mut what = Vec::new();
        if let Some(r) = t.rate_bps {
            what.push(wirespeed::units::bits(r));
        }
        if let Some(s) = t.size {
            what.push(format!("{s}-byte datagrams"));
        }
        if let Some(p) = t.pps() {
            what.push(format!("({})", wirespeed::units::pps(p)));
        }
        let _ = writeln!(
            o,
            "wirespeed doctor: {}{}{}",
            self.iface.as_deref().map(|i| format!("interface {i}")).unwrap_or_else(|| "no interface".into()),
            if what.is_empty() { String::new() } else { format!(", for {}", what.join(" ")) },
            t.cpu.map(|c| format!(", capture on CPU {c}")).unwrap_or_default()
        );
        for n in &self.notes {
            let _ = writeln!(o, "  note: {n}");
        }
        let _ = writeln!(o);
        let mut hidden = 0;
        for f in &self.findings {
            if f.status == Status::Ok && !all {
                hidden += 1;
                continue;
            }
            let _ = writeln!(o, "{:<8} {}: {}", f.status.word(), f.id, f.seen);
            if !f.why.is_empty() {
                wrap(&mut o, "why: ", &f.why);
            }
            for (k, c) in f.fix.iter().enumerate() {
                let mark = if f.changes.iter().any(|ch| &ch.command() == c) { "   [--apply]" } else { "" };
                let _ = writeln!(o, "{:<9}{} {c}{mark}", "", if k == 0 { "fix:" } else { "    " });
            }
            if let Some(n) = &f.no_apply {
                wrap(&mut o, "no --apply: ", n);
            }
        }
        let _ = writeln!(o);
        let n = self.changes().len();
        let _ = writeln!(
            o,
            "{} problem(s), {} advice, {} fine{}, {} not readable.{}",
            self.count(Status::Problem),
            self.count(Status::Advice),
            self.count(Status::Ok),
            if hidden > 0 { " (--all lists them)" } else { "" },
            self.count(Status::Unknown),
            if n > 0 {
                format!(" --apply makes the {n} change(s) marked [--apply] and writes an undo script first; --persist DIR writes them as sysctl.d/udev files instead.")
            } else {
                String::new()
            }
        );
        o
    }
}
