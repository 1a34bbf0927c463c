//! Reading the system into findings: socket buffers, the NIC, interrupts, CPUs, the stack, the
//! process and the disk, each set against the target stream.
//!
//! One file per layer below, in the order a datagram meets them (seed 001's order of tuning):
//! [`socket`], [`nic`], [`irq`], [`cpu`], [`stack`], [`process`]. Each reads through the
//! [`Root`] only, so a snapshot of another machine is inspected exactly as the live one is;
//! what only the live system can answer (ioctls, other processes' CPU use, a disk's speed) is
//! asked only when [`Root::is_live`], and a snapshot says "cannot be read" instead.

use super::{Area, Change, Finding, Report, Root, Status, Target, SCHEMA};
use crate::testbed::topology::Topology;
use std::sync::atomic::AtomicBool;
use wirespeed::units;

pub mod cpu;
pub mod irq;
pub mod nic;
pub mod process;
pub mod socket;
pub mod stack;

/// How long a capture thread may be kept off its CPU (the scheduler's tick, another task's
/// time slice, a burst of softirq work) before its socket buffer must have absorbed the stream:
/// the buffer is judged by how many milliseconds of the stream it holds, against this.
pub const HOLD_MS: f64 = 20.0;

/// What `wirespeed recv` and `record` ask for by default (`--rcvbuf 32M`): a cap below it
/// silently shrinks every wirespeed receiver's buffer.
pub const RECV_DEFAULT_RCVBUF: u64 = 32 << 20;

/// Seed 004's ceiling: "keep the packet rate below 500 000 packets/second" on a receiving PC.
pub const SEED004_PPS: f64 = 500_000.0;

/// Everything one inspection shares: where to read, what for, and the findings so far.
pub struct Ctx<'a> {
    /// Where the system is read.
    pub root: &'a Root,
    /// What the stream looks like.
    pub target: &'a Target,
    /// The interface the stream arrives on, when one was given or found.
    pub iface: Option<String>,
    /// The CPUs, their cores and NUMA nodes (empty when sysfs cannot be read).
    pub topo: Option<Topology>,
    /// Whether the reader has root's view (euid 0, or CAP_NET_ADMIN).
    pub privileged: bool,
    /// Raised by Ctrl-C: a disk measurement stops early.
    pub stop: &'a AtomicBool,
    findings: Vec<Finding>,
    notes: Vec<String>,
}

/// A finding under construction: the builder keeps each check's code to what it saw and why.
pub struct F {
    f: Finding,
}

impl F {
    /// A finding about `id` in `area`, with what was seen.
    pub fn new(id: &str, area: Area, status: Status, seen: impl Into<String>) -> F {
        F {
            f: Finding {
                id: id.into(),
                area,
                status,
                seen: seen.into(),
                why: String::new(),
                fix: Vec::new(),
                changes: Vec::new(),
                effect: 0.0,
                no_apply: None,
            },
        }
    }
    /// Why it matters, with the figure.
    pub fn why(mut self, why: impl Into<String>) -> F {
        self.f.why = why.into();
        self
    }
    /// A command a person types to fix it (not made by `--apply`).
    pub fn fix(mut self, cmd: impl Into<String>) -> F {
        self.f.fix.push(cmd.into());
        self
    }
    /// A change `--apply` makes; its command is also listed as a fix.
    pub fn change(mut self, c: Change) -> F {
        self.f.fix.push(c.command());
        self.f.changes.push(c);
        self
    }
    /// The rank among findings, 0..1 (clamped).
    pub fn effect(mut self, e: f64) -> F {
        self.f.effect = if e.is_finite() { e.clamp(0.0, 1.0) } else { 0.0 };
        self
    }
}

impl<'a> Ctx<'a> {
    /// Add a finding.
    pub fn push(&mut self, f: F) {
        self.findings.push(f.f);
    }
    /// Add a note about the inspection itself.
    pub fn note(&mut self, n: impl Into<String>) {
        self.notes.push(n.into());
    }
    /// The stream's datagrams per second, when rate and size are both known.
    pub fn pps(&self) -> Option<f64> {
        self.target.pps()
    }
    /// The stream's payload bytes per second.
    pub fn bytes_per_s(&self) -> Option<f64> {
        self.target.rate_bps.map(|b| b / 8.0)
    }
    /// "4.00 Gb/s" for the target, or "the stream" when no rate was given.
    pub fn rate_words(&self) -> String {
        self.target.rate_bps.map(units::bits).unwrap_or_else(|| "the stream".into())
    }
    /// A sysctl's value through the root (`net.core.rmem_max`).
    pub fn sysctl(&self, key: &str) -> Option<String> {
        self.root.read_line(&super::apply::sysctl_path(key).ok()?)
    }
    /// A sysctl holding one integer.
    pub fn sysctl_u64(&self, key: &str) -> Option<u64> {
        self.sysctl(key)?.parse().ok()
    }
    /// A file under the interface's sysfs directory (`mtu`, `device/numa_node`).
    pub fn iface_file(&self, rel: &str) -> Option<String> {
        let i = self.iface.as_ref()?;
        self.root.read_line(&format!("/sys/class/net/{i}/{rel}"))
    }
}

/// The interface the default route leaves by, from `/proc/net/route` (IPv4) or
/// `/proc/net/ipv6_route`: the path a stream from elsewhere most likely arrives on.
pub fn default_iface(root: &Root) -> Option<String> {
    if let Some(t) = root.read("/proc/net/route") {
        for l in t.lines().skip(1) {
            let c: Vec<&str> = l.split_whitespace().collect();
            if c.len() > 7 && c[1] == "00000000" && c[7] == "00000000" {
                return Some(c[0].to_string());
            }
        }
    }
    let t = root.read("/proc/net/ipv6_route")?;
    t.lines().find_map(|l| {
        let c: Vec<&str> = l.split_whitespace().collect();
        (c.len() >= 10 && c[0].chars().all(|ch| ch == '0') && c[1] == "00" && c[9] != "lo").then(|| c[9].to_string())
    })
}

/// Whether the reader runs with root's view: effective uid 0 or CAP_NET_ADMIN in CapEff
/// (`/proc/self/status` under the root, so a snapshot says what its reader had).
pub fn privileged(root: &Root) -> bool {
    let Some(s) = root.read("/proc/self/status") else { return false };
    let euid0 = s
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false);
    euid0 || has_cap(&s, 12)
}

/// Whether `/proc/.../status` text shows capability `bit` in CapEff.
pub fn has_cap(status: &str, bit: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|m| m & (1u64 << bit) != 0)
}

/// Inspect the system under `root` for `target`: every finding, ordered by status then expected
/// effect. Never changes anything. `stop` ends a disk measurement early (Ctrl-C).
pub fn inspect(root: &Root, target: &Target, stop: &AtomicBool) -> Report {
    let topo = Topology::read_from(&root.path("/sys/devices/system")).ok();
    let mut cx = Ctx {
        root,
        target,
        iface: target.iface.clone(),
        topo,
        privileged: privileged(root),
        stop,
        findings: Vec::new(),
        notes: Vec::new(),
    };
    if !root.is_live() {
        cx.note(format!(
            "a snapshot under {}: ioctls, other processes and the disk are not asked",
            root.dir().display()
        ));
    }
    if cx.iface.is_none() {
        match default_iface(root) {
            Some(i) => {
                cx.note(format!("interface {i}: the one the default route uses (--iface names another)"));
                cx.iface = Some(i);
            }
            None => cx.note("no interface given and no default route: NIC and interrupt findings need --iface IF"),
        }
    }
    if let Some(i) = &cx.iface {
        if root.read_line(&format!("/sys/class/net/{i}/mtu")).is_none() {
            cx.note(format!("interface {i} does not exist here (`ip -br link` lists them): its findings are left out"));
            cx.iface = None;
        }
    }
    if target.rate_bps.is_none() {
        cx.note("no --for RATE: findings judge the host, not a stream (--for 4G --size 1080 sets one)");
    }
    if !cx.privileged {
        cx.note("not root: some counters cannot be read and --apply is refused");
    }
    if let Some(c) = target.cpu {
        if let Some(t) = &cx.topo {
            if !t.online.contains(&c) {
                cx.note(format!(
                    "CPU {c} is not online here (online: {}): CPU findings are left out",
                    crate::testbed::topology::format_cpu_list(&t.online)
                ));
            }
        }
    }
    socket::check(&mut cx);
    let nic = nic::read(&cx);
    nic::check(&mut cx, &nic);
    irq::check(&mut cx);
    cpu::check(&mut cx);
    stack::check(&mut cx);
    process::check(&mut cx);
    let privileged = cx.privileged;
    let iface = cx.iface.clone();
    let mut findings = cx.findings;
    for f in &mut findings {
        only_what_can_be_made(f, root, &nic, target.ask_driver);
    }
    sort(&mut findings);
    Report {
        schema: SCHEMA.into(),
        target: target.clone(),
        iface,
        privileged,
        notes: cx.notes,
        findings,
        applied: None,
        persisted: None,
    }
}

/// Keep in a finding only the changes that can be made here, found without changing anything
/// ([`apply::cannot_make`]): the others are taken out of `changes` (so `--apply` never starts
/// what it cannot finish, and `--persist` never writes it), and `no_apply` says why. A NIC
/// setting the driver refuses is taken out of `fix` too (typing it would fail the same way); a
/// key read-only only here (another network namespace) keeps its command, for the host.
pub fn only_what_can_be_made(f: &mut Finding, root: &Root, nic: &nic::NicView, ask_driver: bool) {
    let mut why = Vec::new();
    let mut drop_fix = Vec::new();
    f.changes.retain(|c| match super::apply::cannot_make(c, root, &nic.refuses, ask_driver) {
        None => true,
        Some(w) => {
            why.push(format!("{}: {w}", super::apply::subject(c)));
            if !matches!(c, Change::Sysctl { .. } | Change::IrqAffinity { .. }) {
                drop_fix.push(c.command());
            }
            false
        }
    });
    f.fix.retain(|c| !drop_fix.contains(c));
    if !why.is_empty() {
        f.no_apply = Some(why.join("; "));
    }
}

/// Problems first, then advice, then what is fine, then what could not be read; inside each,
/// the largest expected effect first, then by id so the order is stable.
pub fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        a.status
            .cmp(&b.status)
            .then(b.effect.partial_cmp(&a.effect).unwrap_or(std::cmp::Ordering::Equal))
            .then(a.id.cmp(&b.id))
    });
}

/// Milliseconds of a stream of `bytes_per_s` that `bytes` of buffer hold.
pub fn hold_ms(bytes: f64, bytes_per_s: f64) -> f64 {
    if bytes_per_s > 0.0 {
        bytes / bytes_per_s * 1e3
    } else {
        f64::INFINITY
    }
}

/// "0.4 ms", "12 ms", "1.2 s": a holding time for a sentence.
pub fn ms_words(ms: f64) -> String {
    if !ms.is_finite() {
        "forever".into()
    } else if ms >= 1000.0 {
        format!("{:.1} s", ms / 1e3)
    } else if ms >= 10.0 {
        format!("{ms:.0} ms")
    } else if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_times_read_as_people_write_them() {
        // The issue's own example: 208 KiB at 4 Gb/s.
        assert_eq!(ms_words(hold_ms(212_992.0, 4e9 / 8.0)), "0.43 ms");
        assert_eq!(ms_words(hold_ms(33_554_432.0, 4e9 / 8.0)), "67 ms");
        assert_eq!(ms_words(hold_ms(1.0, 0.0)), "forever");
    }

    #[test]
    fn capability_bits_are_read_from_cap_eff() {
        assert!(has_cap("CapEff:\t0000000000001000\n", 12));
        assert!(!has_cap("CapEff:\t0000000000000000\n", 12));
        assert!(!has_cap("no such line", 12));
    }
}
