//! `doctor --apply` and `--persist`: make the safe, reversible changes the findings list (each
//! printed, with an undo script written first), or write them as sysctl.d / udev snippets.
//!
//! The order in [`apply`] is what makes a change reversible: every value in force is read
//! *before* anything is written, the undo script holding those values is on disk before the
//! first change, and it is rewritten at the end to hold only what was really changed. A change
//! the kernel refuses is said in one line and does not stop the others. Nothing here changes the
//! system unless `apply` is called, and `apply` refuses a snapshot [`Root`] and a process
//! without the privilege.
//!
//! Sysctl keys are dotted as `sysctl(8)` writes them. A name part that itself holds a dot (a
//! VLAN interface `eth0.100`) is written with a slash in the dotted form,
//! `net.ipv4.conf.eth0/100.rp_filter`, exactly as `sysctl` and `sysctl.d` read it: when the first
//! separator of a key is a dot, dots and slashes swap to make the `/proc/sys` path. A key given
//! in slash form (`net/ipv4/conf/eth0.100/rp_filter`) is taken as the path.

use super::{Change, Report, Root};
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use wirespeed::{Error, Result};

/// The one line a process without the privilege gets.
pub const NOT_PRIVILEGED: &str =
    "doctor --apply changes kernel settings: run it as root (sudo wirespeed doctor --apply ...)";

/// The first line of every file `--persist` writes: it rewrites only files that start with it.
pub const PERSIST_MARK: &str = "# Written by wirespeed doctor --persist.";

/// The sysctl.d file `--persist` writes.
pub const SYSCTL_FILE: &str = "90-wirespeed.conf";

/// The udev rules file `--persist` writes for NIC settings.
pub const UDEV_FILE: &str = "90-wirespeed.rules";

/// Every change of every finding, once, in the order of the findings (largest effect first).
///
/// Two findings may want the same thing (the rmem_max finding and the socket-buffer finding
/// both raise `net.core.rmem_max`): one change is kept per sysctl key, per interrupt, per
/// interface setting and per interface feature. When they want different values, see
/// [`plan_with_notes`], which also says which was kept.
pub fn plan(report: &Report) -> Vec<Change> {
    plan_with_notes(report).0
}

/// [`plan`], and one line per conflict it settled: for a numeric sysctl the larger value is
/// kept (every finding that asks for a floor is then satisfied), for anything else the first
/// (the finding with the larger expected effect).
pub fn plan_with_notes(report: &Report) -> (Vec<Change>, Vec<String>) {
    let mut out: Vec<Change> = Vec::new();
    let mut notes = Vec::new();
    for c in report.findings.iter().flat_map(|f| f.changes.iter()) {
        let Some(i) = out.iter().position(|o| same_target(o, c)) else {
            out.push(c.clone());
            continue;
        };
        if same_value(&out[i], c) {
            continue;
        }
        let (a, b) = (wanted(&out[i]), wanted(c));
        match (&out[i], c) {
            (Change::Sysctl { key, .. }, Change::Sysctl { value, .. }) => {
                match (a.trim().parse::<i128>(), value.trim().parse::<i128>()) {
                    (Ok(x), Ok(y)) => {
                        let kept = x.max(y);
                        notes.push(format!("{key}: two findings ask for {a} and {b}: kept the larger, {kept}"));
                        if y > x {
                            out[i] = c.clone();
                        }
                    }
                    _ => notes.push(format!("{key}: two findings ask for '{a}' and '{b}': kept the first, '{a}'")),
                }
            }
            _ => notes.push(format!("{}: two findings ask for {a} and {b}: kept the first, {a}", subject(c))),
        }
    }
    (out, notes)
}

/// Whether two changes touch the same thing (and so only one of them can stand).
fn same_target(a: &Change, b: &Change) -> bool {
    match (a, b) {
        (Change::Sysctl { key: x, .. }, Change::Sysctl { key: y, .. }) => match (sysctl_path(x), sysctl_path(y)) {
            (Ok(p), Ok(q)) => p == q,
            _ => x == y,
        },
        (Change::IrqAffinity { irq: x, .. }, Change::IrqAffinity { irq: y, .. }) => x == y,
        (Change::Rings { iface: x, .. }, Change::Rings { iface: y, .. }) => x == y,
        (Change::Coalesce { iface: x, .. }, Change::Coalesce { iface: y, .. }) => x == y,
        (Change::Channels { iface: x, .. }, Change::Channels { iface: y, .. }) => x == y,
        (Change::Feature { iface: x, feature: f, .. }, Change::Feature { iface: y, feature: g, .. }) => {
            x == y && f == g
        }
        _ => false,
    }
}

/// Whether two changes of the same target ask for the same value, as the kernel would see it
/// (whitespace in a sysctl, `0-1` against `0,1` in a CPU list).
fn same_value(a: &Change, b: &Change) -> bool {
    match (a, b) {
        (Change::IrqAffinity { cpus: x, .. }, Change::IrqAffinity { cpus: y, .. }) => match (cpu_set(x), cpu_set(y)) {
            (Some(p), Some(q)) => p == q,
            _ => x.trim() == y.trim(),
        },
        _ => norm(&wanted(a)) == norm(&wanted(b)),
    }
}

/// What a change is about, for a person: `net.core.rmem_max`, `irq 24 affinity`, `eth0 rx ring`.
pub fn subject(change: &Change) -> String {
    match change {
        Change::Sysctl { key, .. } => key.clone(),
        Change::IrqAffinity { irq, .. } => format!("irq {irq} affinity"),
        Change::Rings { iface, .. } => format!("{iface} rx ring"),
        Change::Coalesce { iface, .. } => format!("{iface} rx coalescing"),
        Change::Channels { iface, .. } => format!("{iface} combined channels"),
        Change::Feature { iface, feature, .. } => format!("{iface} {feature}"),
    }
}

/// The value a change sets, in the words [`current`] uses for the value in force.
pub fn wanted(change: &Change) -> String {
    match change {
        Change::Sysctl { value, .. } => norm(value),
        Change::IrqAffinity { cpus, .. } => cpus.trim().to_string(),
        Change::Rings { rx, .. } => rx.to_string(),
        Change::Coalesce { rx_usecs, rx_frames, .. } => format!("rx-usecs {rx_usecs} rx-frames {rx_frames}"),
        Change::Channels { combined, .. } => combined.to_string(),
        Change::Feature { on, .. } => on_off(*on).to_string(),
    }
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// Whitespace collapsed to single spaces: the kernel prints multi-value sysctls with tabs
/// (`net.ipv4.tcp_rmem`) and reads any whitespace.
fn norm(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `/proc/sys` path of a sysctl key, as `sysctl(8)` maps it (see the module's doc: a dotted
/// key swaps dots and slashes, a slashed key is the path). Refuses keys that would leave
/// `/proc/sys` or that hold characters no sysctl has.
pub fn sysctl_path(key: &str) -> io::Result<String> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("sysctl key '{key}' {why}"));
    if key.is_empty() {
        return Err(bad("is empty"));
    }
    if !key.chars().all(|c| c.is_ascii_alphanumeric() || "._-/+@:".contains(c)) {
        return Err(bad("holds a character no sysctl name has"));
    }
    let first_dot = key.find('.');
    let first_slash = key.find('/');
    let path: String = match (first_dot, first_slash) {
        (Some(d), Some(s)) if s < d => key.to_string(),
        (None, Some(_)) => key.to_string(),
        _ => key
            .chars()
            .map(|c| {
                if c == '.' {
                    '/'
                } else if c == '/' {
                    '.'
                } else {
                    c
                }
            })
            .collect(),
    };
    if path.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
        return Err(bad("has an empty, '.' or '..' part"));
    }
    Ok(format!("/proc/sys/{path}"))
}

/// A CPU list (`0-3,8`) as sorted, merged ranges, so two spellings of one set compare equal;
/// `None` when it is not a CPU list.
fn cpu_set(list: &str) -> Option<Vec<(u32, u32)>> {
    let list = list.trim();
    if list.is_empty() {
        return None;
    }
    let mut r = Vec::new();
    for part in list.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let a = part.trim().parse::<u32>().ok()?;
                (a, a)
            }
        };
        if a > b {
            return None;
        }
        r.push((a, b));
    }
    r.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(r.len());
    for (a, b) in r {
        match merged.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    Some(merged)
}

/// Whether an interface name is one this module puts into a shell line and a udev rule:
/// what the kernel allows, less the characters a shell or udev would read as syntax.
fn valid_iface(iface: &str) -> bool {
    !iface.is_empty()
        && iface.len() < 16
        && iface != "."
        && iface != ".."
        && iface.chars().all(|c| c.is_ascii_alphanumeric() || "_.-+@".contains(c))
}

/// Why a change cannot even be tried (a name that is not one, a value with a newline), or `None`.
fn invalid(change: &Change) -> Option<String> {
    let iface_bad =
        |i: &str| (!valid_iface(i)).then(|| format!("'{i}' is not an interface name this tool writes into a script"));
    match change {
        Change::Sysctl { key, value } => {
            if let Err(e) = sysctl_path(key) {
                return Some(e.to_string());
            }
            if value.contains(['\n', '\r', '\0']) {
                return Some(format!("the value for {key} spans several lines: sysctl -w cannot set it"));
            }
            None
        }
        Change::IrqAffinity { cpus, .. } => {
            cpu_set(cpus).is_none().then(|| format!("'{cpus}' is not a CPU list (such as 0-3,8)"))
        }
        Change::Rings { iface, .. } | Change::Coalesce { iface, .. } | Change::Channels { iface, .. } => {
            iface_bad(iface)
        }
        Change::Feature { iface, feature, .. } => iface_bad(iface).or_else(|| {
            let ok = !feature.is_empty() && feature.chars().all(|c| c.is_ascii_alphanumeric() || "-_".contains(c));
            (!ok).then(|| format!("'{feature}' is not an ethtool feature name"))
        }),
    }
}

/// The change that puts back what is in force now for what `change` touches: the same kind,
/// holding the value read (a sysctl's text, an interrupt's CPU list, the ring size, the
/// coalescing pair, the channel count, the feature's state). This is what the undo script runs.
///
/// Sysctls and interrupts are read through `root`; NIC settings through [`wirespeed::sys::ethtool`]
/// on the live system only (under a snapshot root the inspection reads `ethtool/IFACE.json`,
/// which this does not: it says `Unsupported`).
pub fn original(change: &Change, root: &Root) -> io::Result<Change> {
    Ok(read_before(change, root)?.restore)
}

/// The value in force now for what `change` touches, in the words of [`wanted`] (so the two
/// compare): see [`original`].
pub fn current(change: &Change, root: &Root) -> io::Result<String> {
    Ok(wanted(&read_before(change, root)?.restore))
}

/// What was read before a change.
struct Before {
    /// The change that restores it.
    restore: Change,
    /// False for an offload the driver fixes (`[fixed]` in `ethtool -k`).
    changeable: bool,
}

fn read_text(path: &Path) -> io::Result<String> {
    let s = std::fs::read_to_string(path)?;
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() > 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the value spans several lines: it cannot be put back with one line",
        ));
    }
    Ok(norm(lines.first().copied().unwrap_or("")))
}

fn no_ethtool_under_snapshot() -> io::Result<Before> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "NIC settings are read with ethtool on the live system only, not under a snapshot root",
    ))
}

fn read_before(change: &Change, root: &Root) -> io::Result<Before> {
    if let Some(why) = invalid(change) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    }
    use wirespeed::sys::ethtool;
    let restore = match change {
        Change::Sysctl { key, .. } => {
            let value = read_text(&root.path(&sysctl_path(key)?))?;
            Change::Sysctl { key: key.clone(), value }
        }
        Change::IrqAffinity { irq, .. } => {
            let cpus = read_text(&root.path(&format!("/proc/irq/{irq}/smp_affinity_list")))?;
            if cpu_set(&cpus).is_none() {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("'{cpus}' is not a CPU list")));
            }
            Change::IrqAffinity { irq: *irq, cpus }
        }
        _ if !root.is_live() => return no_ethtool_under_snapshot(),
        Change::Rings { iface, .. } => Change::Rings { iface: iface.clone(), rx: ethtool::rings(iface)?.rx },
        Change::Coalesce { iface, .. } => {
            let c = ethtool::coalesce(iface)?;
            Change::Coalesce { iface: iface.clone(), rx_usecs: c.rx_usecs, rx_frames: c.rx_frames }
        }
        Change::Channels { iface, .. } => {
            Change::Channels { iface: iface.clone(), combined: ethtool::channels(iface)?.combined }
        }
        Change::Feature { iface, feature, .. } => {
            let all = ethtool::features(iface)?;
            let Some(f) = all.iter().find(|f| &f.name == feature) else {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{iface} has no feature {feature} (`ethtool -k {iface}` lists them)"),
                ));
            };
            return Ok(Before {
                restore: Change::Feature { iface: iface.clone(), feature: feature.clone(), on: f.active },
                changeable: f.changeable,
            });
        }
    };
    Ok(Before { restore, changeable: true })
}

/// Why `change` cannot be made here, found without changing anything; `None` when nothing
/// says it cannot (the kernel may still refuse it: [`apply`] then puts back what it made).
///
/// - a sysctl or interrupt file without write permission bits is read-only for everyone here,
///   root included (host-wide `net.core` keys inside another network namespace);
/// - with `ask_driver` (only for `--apply` and `--persist`), a NIC setting is asked of the
///   driver by writing back the values in force ([`wirespeed::sys::ethtool::probe_coalesce`] and
///   its siblings): a driver without the setter refuses; without the privilege to ask, nothing
///   is concluded. A plain inspection writes nothing to the NIC;
/// - virtio_net takes interrupt coalescing in microseconds, or more than one frame per
///   interrupt, only when the host offers notification coalescing (VIRTIO_NET_F_NOTF_COAL,
///   feature bit 53 in `/sys/class/net/IF/device/features`): without it the driver refuses
///   both, whatever the no-op write says.
///
/// Under a snapshot root, NIC settings are judged by what the snapshot's `ethtool/IF.json`
/// records in `refuses` (part name -> why).
pub fn cannot_make(
    change: &Change,
    root: &Root,
    refuses: &std::collections::BTreeMap<String, String>,
    ask_driver: bool,
) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    use wirespeed::sys::ethtool;
    if let Some(why) = invalid(change) {
        return Some(why);
    }
    let read_only = |path: &str, what: &str| -> Option<String> {
        match std::fs::metadata(root.path(path)) {
            Err(_) => Some(format!("{path} does not exist here: this kernel has no {what}")),
            Ok(m) if m.permissions().mode() & 0o222 == 0 => {
                Some(if root.is_live() && wirespeed::sys::netns::is_init() == Some(false) {
                    "read-only here: this process is in a network namespace other than the host's, where host-wide keys are read-only; set it on the host".to_string()
                } else {
                    format!("{path} is read-only for everyone here (the kernel allows no change to {what})")
                })
            }
            Ok(_) => None,
        }
    };
    let driver_says = |part: &str, probe: &dyn Fn() -> io::Result<()>| -> Option<String> {
        if !root.is_live() {
            return refuses.get(part).cloned();
        }
        if !ask_driver {
            return None;
        }
        match probe() {
            Ok(()) => None,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => None,
            Err(e) => Some(format!("the driver refuses any change ({}): nothing to set on this NIC", err_text(&e))),
        }
    };
    match change {
        Change::Sysctl { key, .. } => read_only(&sysctl_path(key).ok()?, key),
        Change::IrqAffinity { irq, .. } => {
            read_only(&format!("/proc/irq/{irq}/smp_affinity_list"), &format!("interrupt {irq}'s placement"))
        }
        Change::Rings { iface, .. } => driver_says("rings", &|| ethtool::probe_rings(iface)),
        Change::Channels { iface, .. } => driver_says("channels", &|| ethtool::probe_channels(iface)),
        Change::Coalesce { iface, rx_usecs, rx_frames } => {
            if let Some(w) = driver_says("coalesce", &|| ethtool::probe_coalesce(iface)) {
                return Some(w);
            }
            virtio_coalesce(root, iface, *rx_usecs, *rx_frames)
        }
        Change::Feature { .. } => None,
    }
}

/// VIRTIO_NET_F_NOTF_COAL: the host coalesces notifications, so virtio_net takes rx-usecs and
/// rx-frames (linux/virtio_net.h).
const VIRTIO_NET_F_NOTF_COAL: usize = 53;

/// What virtio_net refuses of a coalescing change, by its rule (see [`cannot_make`]): read from
/// the device's negotiated feature bits, which sysfs prints as a string of 0s and 1s, bit 0
/// first.
fn virtio_coalesce(root: &Root, iface: &str, rx_usecs: u32, rx_frames: u32) -> Option<String> {
    let driver = std::fs::read_link(root.path(&format!("/sys/class/net/{iface}/device/driver"))).ok()?;
    if driver.file_name()? != "virtio_net" {
        return None;
    }
    let bits = root.read_line(&format!("/sys/class/net/{iface}/device/features"))?;
    let has = bits.as_bytes().get(VIRTIO_NET_F_NOTF_COAL) == Some(&b'1');
    if has || (rx_usecs == 0 && rx_frames <= 1) {
        return None;
    }
    Some(format!(
        "the virtio_net driver takes rx-usecs or rx-frames only when the hypervisor offers notification coalescing (virtio feature {VIRTIO_NET_F_NOTF_COAL}), and {iface}'s does not: interrupt moderation is the hypervisor's here, nothing to set in this guest"
    ))
}

/// Whether what `change` touches is already as it asks.
fn at_value(change: &Change, before: &Change) -> bool {
    same_value(change, before)
}

/// What this process may change, read from `/proc/thread-self/status` (the effective user and
/// capabilities are the thread's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Privilege {
    /// Effective user id.
    pub euid: u32,
    /// CAP_NET_ADMIN in the effective set: net sysctls, ethtool settings.
    pub net_admin: bool,
    /// CAP_DAC_OVERRIDE: writing root's files such as `/proc/irq/N/smp_affinity_list`.
    pub dac_override: bool,
}

impl Privilege {
    /// No privilege at all (also what an unreadable status file gives: never assume more).
    pub fn none() -> Privilege {
        Privilege { euid: u32::MAX, net_admin: false, dac_override: false }
    }

    /// The calling thread's.
    pub fn current() -> Privilege {
        std::fs::read_to_string("/proc/thread-self/status")
            .or_else(|_| std::fs::read_to_string("/proc/self/status"))
            .map(|s| Privilege::parse(&s))
            .unwrap_or_else(|_| Privilege::none())
    }

    /// From the text of a `/proc/PID/status` (its `Uid:` and `CapEff:` lines).
    pub fn parse(status: &str) -> Privilege {
        let mut p = Privilege::none();
        for line in status.lines() {
            if let Some(rest) = line.strip_prefix("Uid:") {
                if let Some(e) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
                    p.euid = e;
                }
            } else if let Some(rest) = line.strip_prefix("CapEff:") {
                if let Ok(caps) = u64::from_str_radix(rest.trim(), 16) {
                    p.dac_override = caps & (1 << 1) != 0;
                    p.net_admin = caps & (1 << 12) != 0;
                }
            }
        }
        p
    }

    /// Whether the kernel would let this process make `change`: net sysctls take CAP_NET_ADMIN
    /// or root, other sysctls root (their files are root's and sysctl checks only the owner),
    /// interrupts root or CAP_DAC_OVERRIDE, ethtool settings CAP_NET_ADMIN.
    pub fn allows(&self, change: &Change) -> bool {
        let root = self.euid == 0;
        match change {
            Change::Sysctl { key, .. } if key.starts_with("net.") || key.starts_with("net/") => self.net_admin || root,
            Change::Sysctl { .. } => root,
            Change::IrqAffinity { .. } => root || self.dac_override,
            _ => self.net_admin,
        }
    }
}

/// One change `--apply` made or found already made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Done {
    /// The change asked for.
    pub change: Change,
    /// The value before, as read ([`current`]).
    pub before: String,
    /// The value after, as read back from the kernel (which may round it).
    pub after: String,
}

/// One change `--apply` did not make, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    /// The change asked for.
    pub change: Change,
    /// The value in force, when it could be read.
    pub before: Option<String>,
    /// Why not, and what to do: the text after `not applied: SUBJECT: `.
    pub reason: String,
}

/// What `--apply` did, for `--json` and for the exit code.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// Changed, in the order made.
    pub changed: Vec<Done>,
    /// Already at the value asked for: left alone, and not in the undo script.
    pub unchanged: Vec<Done>,
    /// Not made (refused by the kernel, or the value before could not be read so it could not
    /// be undone): the system is as it was for these.
    pub failed: Vec<Failed>,
    /// Made, then put back because a later change was refused (all or none): the system is as
    /// it was for these too. Newest first.
    #[serde(default)]
    pub rolled_back: Vec<Done>,
    /// The undo script, holding exactly the changes in `changed`; `None` when there was nothing
    /// to apply.
    pub undo: Option<PathBuf>,
}

impl Applied {
    /// The error `--apply` exits with when a change was not made (exit code 1), or `None`.
    pub fn failure(&self) -> Option<Error> {
        if self.failed.is_empty() {
            return None;
        }
        let n = self.failed.len();
        let of = n + self.changed.len() + self.unchanged.len();
        let of = of + self.rolled_back.len();
        let undo = match &self.undo {
            Some(u) if !self.changed.is_empty() => {
                format!("; `sh {}` puts back the {} that were", u.display(), self.changed.len())
            }
            _ => String::new(),
        };
        let back = if self.rolled_back.is_empty() {
            String::new()
        } else {
            format!(", so the {} made before were put back", self.rolled_back.len())
        };
        Some(Error::failed(format!("{n} of {of} changes were not applied (said above){back}{undo}")))
    }
}

/// `doctor --apply`: make `changes` on the live system, each printed through `say`, with an undo
/// script at `undo`; an error (exit code 1) when any was not made, after making the others.
///
/// Refused, before anything is read or written, on a snapshot `root` and without the privilege
/// the changes need ([`NOT_PRIVILEGED`]). See [`apply_report`] for a caller that prints the
/// [`Applied`] record (`--json`) before exiting.
pub fn apply(changes: &[Change], root: &Root, undo: &Path, say: &mut dyn FnMut(&str)) -> Result<Applied> {
    let a = apply_report(changes, root, undo, say)?;
    match a.failure() {
        Some(e) => Err(e),
        None => Ok(a),
    }
}

/// [`apply`], but changes that were not made are in the returned [`Applied`] rather than an
/// error ([`Applied::failure`] gives that error), so `--json` can print the whole record first.
/// Refusals and an undo script that cannot be written are still errors.
pub fn apply_report(changes: &[Change], root: &Root, undo: &Path, say: &mut dyn FnMut(&str)) -> Result<Applied> {
    apply_as(changes, root, undo, &Privilege::current(), say)
}

/// [`apply_report`] with the privilege given rather than read: what the refusal is decided on,
/// so it can be tested without changing users.
pub fn apply_as(
    changes: &[Change],
    root: &Root,
    undo: &Path,
    privilege: &Privilege,
    say: &mut dyn FnMut(&str),
) -> Result<Applied> {
    if !root.is_live() {
        return Err(Error::invalid(format!(
            "doctor --apply changes the live system, but this run reads a snapshot at {}: run it on the host itself, or use --persist to write the settings as files",
            root.dir().display()
        )));
    }
    if changes.is_empty() {
        say("nothing to apply: no finding has a change --apply can make");
        return Ok(Applied::default());
    }
    if !changes.iter().all(|c| privilege.allows(c)) {
        return Err(Error::permission(NOT_PRIVILEGED));
    }
    let mut out = Applied::default();
    // 1. Every value in force, before anything is written.
    let mut todo: Vec<(&Change, Change)> = Vec::new();
    for c in changes {
        match read_before(c, root) {
            Err(e) => {
                let reason = if e.kind() == io::ErrorKind::InvalidInput {
                    format!("{}: left as it is", err_text(&e))
                } else {
                    format!(
                        "cannot read the value in force ({}), so it could not be undone: left as it is",
                        err_text(&e)
                    )
                };
                say(&format!("not applied: {}: {reason}", subject(c)));
                out.failed.push(Failed { change: c.clone(), before: None, reason });
            }
            Ok(b) if at_value(c, &b.restore) => {
                let v = wanted(&b.restore);
                say(&format!("already {} = {v}", subject(c)));
                out.unchanged.push(Done { change: c.clone(), before: v.clone(), after: v });
            }
            Ok(b) if !b.changeable => {
                let reason = format!(
                    "the driver fixes it at {} (`[fixed]` in `ethtool -k`): it cannot be changed on this NIC",
                    wanted(&b.restore)
                );
                say(&format!("not applied: {}: {reason}", subject(c)));
                out.failed.push(Failed { change: c.clone(), before: Some(wanted(&b.restore)), reason });
            }
            Ok(b) => todo.push((c, b.restore)),
        }
    }
    // 2. The undo script, before the first change: if this process dies half-way, running it
    // puts back everything (restoring a value not yet changed writes what is already there).
    let stamp = stamp();
    let all: Vec<Change> = todo.iter().map(|(_, r)| r.clone()).collect();
    write_undo(undo, &undo_script_text(&all, &stamp), true)?;
    out.undo = Some(undo.to_path_buf());
    // 3. The changes, each said. One refused stops the run and puts back what was made before
    // it, newest first: --apply makes the whole set or nothing, never half of it. (What the
    // inspection could tell cannot be made was already left out of the set.)
    let init_netns = wirespeed::sys::netns::is_init();
    let mut made: Vec<Change> = Vec::new();
    let mut stopped = false;
    for (c, restore) in todo {
        if stopped {
            let reason = "not attempted: an earlier change was refused, and --apply makes all or none".to_string();
            say(&format!("not applied: {}: {reason}", subject(c)));
            out.failed.push(Failed { change: c.clone(), before: Some(wanted(&restore)), reason });
            continue;
        }
        let before = wanted(&restore);
        // A change made whose read-back fails is still made (and so in the undo script).
        let result =
            make(c, root).map(|()| read_before(c, root).map(|b| wanted(&b.restore)).unwrap_or_else(|_| wanted(c)));
        match result {
            Ok(after) if norm(&after) == norm(&before) => {
                let reason = format!("the kernel took {} but still reports {before}: left as it was", wanted(c));
                say(&format!("not applied: {}: {reason}", subject(c)));
                out.failed.push(Failed { change: c.clone(), before: Some(before), reason });
            }
            Ok(after) => {
                say(&format!("changed {} {before} -> {after}", subject(c)));
                out.changed.push(Done { change: c.clone(), before, after });
                made.push(restore);
            }
            Err(e) => {
                let reason = refusal(c, root, &e, init_netns);
                say(&format!("not applied: {}: {reason}", subject(c)));
                out.failed.push(Failed { change: c.clone(), before: Some(before), reason });
                stopped = true;
            }
        }
    }
    if stopped && !made.is_empty() {
        // Put back, newest first; what cannot be put back stays in the undo script.
        let mut kept = Vec::new();
        for restore in made.drain(..).rev() {
            let done = out.changed.pop();
            match make(&restore, root) {
                Ok(()) => {
                    say(&format!("put back {} = {}", subject(&restore), wanted(&restore)));
                    if let Some(d) = done {
                        out.rolled_back.push(d);
                    }
                }
                Err(e) => {
                    say(&format!("could not put back {}: {}", subject(&restore), err_text(&e)));
                    if let Some(d) = done {
                        out.changed.insert(0, d);
                    }
                    kept.push(restore);
                }
            }
        }
        kept.reverse();
        made = kept;
    }
    // 4. The undo script again, holding only what was changed.
    write_undo(undo, &undo_script_text(&made, &stamp), false)?;
    if made.is_empty() {
        say(&format!("nothing was changed: {} puts nothing back", undo.display()));
    } else {
        say(&format!("undo: sh {} (as root, in this network namespace)", undo.display()));
    }
    Ok(out)
}

/// Make one change.
fn make(change: &Change, root: &Root) -> io::Result<()> {
    use wirespeed::sys::ethtool;
    let write = |path: PathBuf, text: &str| -> io::Result<()> {
        let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.write_all(format!("{text}\n").as_bytes())
    };
    match change {
        Change::Sysctl { key, value } => write(root.path(&sysctl_path(key)?), value.trim()),
        Change::IrqAffinity { irq, cpus } => {
            write(root.path(&format!("/proc/irq/{irq}/smp_affinity_list")), cpus.trim())
        }
        Change::Rings { iface, rx } => ethtool::set_rx_ring(iface, *rx),
        Change::Coalesce { iface, rx_usecs, rx_frames } => ethtool::set_rx_coalesce(iface, *rx_usecs, *rx_frames),
        Change::Channels { iface, combined } => ethtool::set_combined_channels(iface, *combined),
        Change::Feature { iface, feature, on } => ethtool::set_feature(iface, feature, *on),
    }
}

/// An I/O error's words without the `(os error N)` tail.
fn err_text(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Why the kernel refused `change`, and what to do, in words: `init_netns` is whether this
/// thread is in the host's network namespace (`None`: unknown), which is why a host-wide key
/// such as `net.core.rmem_max` is read-only here.
fn refusal(change: &Change, root: &Root, e: &io::Error, init_netns: Option<bool>) -> String {
    use io::ErrorKind as K;
    let what = err_text(e);
    let denied = matches!(e.kind(), K::PermissionDenied) || e.raw_os_error() == Some(libc::EPERM);
    match change {
        Change::Sysctl { key, value } => {
            let read_only = sysctl_path(key)
                .ok()
                .and_then(|p| std::fs::metadata(root.path(&p)).ok())
                .map(|m| {
                    use std::os::unix::fs::PermissionsExt;
                    m.permissions().mode() & 0o222 == 0
                })
                .unwrap_or(false);
            if denied && init_netns == Some(false) {
                format!(
                    "{what}: this process is in a network namespace other than the host's, where host-wide keys such as this one are read-only: set it on the host (`sysctl -w {key}={value}` outside the namespace)"
                )
            } else if denied && read_only {
                format!("{what}: the kernel makes {key} read-only here: set it where it is writable (on the host, outside any container)")
            } else if denied {
                format!("{what}: run as root")
            } else if e.kind() == K::NotFound {
                format!("{what}: this kernel has no {key} (a module not loaded, or an interface that is gone)")
            } else if e.kind() == K::InvalidInput {
                format!("{what}: the kernel refused {value} for {key} (out of its range?): check the value")
            } else {
                what
            }
        }
        Change::IrqAffinity { irq, cpus } => match e.raw_os_error() {
            Some(libc::EIO) => format!(
                "{what}: the kernel does not let interrupt {irq} be moved (a managed interrupt: its driver places it)"
            ),
            Some(libc::EINVAL) => {
                format!("{what}: the kernel refused CPUs {cpus} for interrupt {irq} (offline, or not ones it can use)")
            }
            _ if e.kind() == K::NotFound => {
                format!("{what}: there is no interrupt {irq} now (the driver was reloaded?): run the doctor again")
            }
            _ if denied => format!("{what}: run as root"),
            _ => what,
        },
        Change::Rings { iface, .. }
        | Change::Coalesce { iface, .. }
        | Change::Channels { iface, .. }
        | Change::Feature { iface, .. } => match e.kind() {
            K::Unsupported => format!("{what}: ethtool cannot change this on {iface} (its driver does not support it)"),
            K::NotFound => format!("{what}: there is no interface {iface} here (another network namespace?)"),
            K::InvalidInput => format!("{what}: {iface}'s driver refused {} (beyond its maximum?)", wanted(change)),
            _ if denied => format!("{what}: ethtool settings need CAP_NET_ADMIN: run as root"),
            _ => what,
        },
    }
}

/// When and where this run was: the comment line at the top of what it writes.
fn stamp() -> String {
    let when = wirespeed::calendar::utc_iso(wirespeed::sys::realtime_ns());
    match wirespeed::sys::netns::current_id() {
        Some(ns) => format!("{when}, in network namespace {ns}"),
        None => when,
    }
}

/// Write the undo script: `fresh` refuses a path that exists (one line), else it rewrites the
/// file written a moment ago. Mode 0700: it is root's, and a script.
fn write_undo(path: &Path, text: &str, fresh: bool) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut o = std::fs::OpenOptions::new();
    o.write(true).mode(0o700);
    if fresh {
        o.create_new(true);
    } else {
        o.truncate(true);
    }
    let mut f = o.open(path).map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            Error::busy(format!(
                "{} already exists (the undo of an earlier --apply?): run or move it, or give another undo path; nothing was changed",
                path.display()
            ))
        } else {
            Error::io(format!(
                "cannot write the undo script {}: {}: nothing was changed",
                path.display(),
                err_text(&e)
            ))
        }
    })?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(0o700)))
        .and_then(|()| f.sync_all())
        .map_err(|e| Error::io(format!("cannot write the undo script {}: {}", path.display(), err_text(&e))))
}

/// Quote a word for `sh` when it needs it.
fn sh_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.,:/@%+=-".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The shell line that makes `change` (the undo script's lines are the restoring changes').
fn shell_line(change: &Change) -> String {
    match change {
        // Not `sysctl -w`: procps-ng 4.0.2 exits 0 when the kernel refuses a read-only key, so
        // a failed line would pass unseen; printf into the file fails when the write does.
        Change::Sysctl { key, value } => match sysctl_path(key) {
            Ok(path) => format!("printf '%s\\n' {} > {}", sh_quote(value.trim()), sh_quote(&path)),
            Err(_) => format!("sysctl -q -w {}", sh_quote(&format!("{key}={}", value.trim()))),
        },
        Change::IrqAffinity { irq, cpus } => {
            format!("echo {} > /proc/irq/{irq}/smp_affinity_list", sh_quote(cpus.trim()))
        }
        Change::Rings { iface, rx } => format!("ethtool -G {} rx {rx}", sh_quote(iface)),
        Change::Coalesce { iface, rx_usecs, rx_frames } => {
            format!("ethtool -C {} rx-usecs {rx_usecs} rx-frames {rx_frames}", sh_quote(iface))
        }
        Change::Channels { iface, combined } => format!("ethtool -L {} combined {combined}", sh_quote(iface)),
        Change::Feature { iface, feature, on } => {
            format!("ethtool -K {} {} {}", sh_quote(iface), sh_quote(feature), on_off(*on))
        }
    }
}

/// The undo script for `restores` (the changes that put back the values read, in the order the
/// changes were made), `stamp` saying which run wrote it.
///
/// It undoes newest first, and every line sets a value rather than stepping it, so running it
/// twice leaves the same values. A sysctl is put back by writing its `/proc/sys` file
/// (`printf '%s\n' VALUE > /proc/sys/...`) rather than with `sysctl -w`, whose exit code
/// (procps-ng 4.0.2) is 0 when the kernel refuses the write. Each line is guarded (`|| failed=1`): under `set -e` one line
/// the kernel refuses does not stop the others from being put back, and the exit code says that
/// one did fail.
pub fn undo_script_text(restores: &[Change], stamp: &str) -> String {
    let mut s = String::from("#!/bin/sh\n");
    s.push_str(&format!("# Undo of `wirespeed doctor --apply` run at {stamp}.\n"));
    s.push_str("# Puts back the values read just before the changes, newest first; safe to run twice.\n");
    s.push_str("# Run it as root in the same network namespace (`ip netns exec NS sh FILE` for one).\n");
    s.push_str("set -e\n");
    s.push_str("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n");
    if restores.is_empty() {
        s.push_str("# Nothing was changed: nothing to put back.\nexit 0\n");
        return s;
    }
    s.push_str("failed=0\n");
    for r in restores.iter().rev() {
        s.push_str(&format!("{} || failed=1\n", shell_line(r)));
    }
    s.push_str("exit \"$failed\"\n");
    s
}

/// `doctor --persist`: write `changes` as files under `dir` for the next boot, and change
/// nothing live. Sysctls go to `DIR/90-wirespeed.conf` (sysctl.d; `sysctl --system` loads it
/// now), NIC settings to `DIR/90-wirespeed.rules` (udev runs them when the interface appears),
/// interrupt placement only as a comment saying how (udev cannot pin it reliably). Returns the
/// files written.
///
/// A file that is there already is rewritten only when it starts with [`PERSIST_MARK`]; what it
/// held is kept unless a change now sets the same thing, because a doctor run after the
/// settings took effect no longer lists them and must not drop them.
pub fn persist(changes: &[Change], dir: &Path, say: &mut dyn FnMut(&str)) -> Result<Vec<PathBuf>> {
    persist_at(changes, dir, &stamp(), say)
}

fn persist_at(changes: &[Change], dir: &Path, stamp: &str, say: &mut dyn FnMut(&str)) -> Result<Vec<PathBuf>> {
    let conf_path = dir.join(SYSCTL_FILE);
    let rules_path = dir.join(UDEV_FILE);
    // Both files are checked before either is written.
    let old_conf = ours(&conf_path)?;
    let old_rules = ours(&rules_path)?;

    let mut sysctls: Vec<(String, String)> = Vec::new();
    let mut rules: Vec<(String, String)> = Vec::new();
    let mut irq_notes = Vec::new();
    if let Some(old) = &old_conf {
        for line in old.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';')) {
            if let Some((k, v)) = line.split_once('=') {
                upsert(&mut sysctls, k.trim().to_string(), norm(v));
            }
        }
    }
    if let Some(old) = &old_rules {
        for line in old.lines().map(str::trim).filter(|l| l.starts_with("ACTION==")) {
            if let Some(k) = rule_key(line) {
                upsert(&mut rules, k, line.to_string());
            }
        }
    }
    for c in changes {
        if let Some(why) = invalid(c) {
            say(&format!("not persisted: {}: {why}", subject(c)));
            continue;
        }
        match c {
            Change::Sysctl { key, value } => upsert(&mut sysctls, key.clone(), norm(value)),
            Change::IrqAffinity { irq, cpus } => {
                let note = format!(
                    "interrupt {irq} on CPUs {cpus}: not persisted: interrupt numbers can change across boots and irqbalance moves them back; ban it from irqbalance (IRQBALANCE_BANNED_INTERRUPTS=\"{irq}\", or --banirq={irq}) and set it at boot from a systemd unit running `echo {cpus} > /proc/irq/{irq}/smp_affinity_list`"
                );
                say(&format!("not persisted: {note}"));
                irq_notes.push(note);
            }
            Change::Rings { iface, .. }
            | Change::Coalesce { iface, .. }
            | Change::Channels { iface, .. }
            | Change::Feature { iface, .. } => {
                let line = format!(
                    "ACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"{iface}\", RUN+=\"/usr/sbin/{}\"",
                    shell_line(c)
                );
                if let Some(k) = rule_key(&line) {
                    upsert(&mut rules, k, line);
                }
            }
        }
    }

    let mut written = Vec::new();
    if !sysctls.is_empty() || !irq_notes.is_empty() {
        let mut s = format!("{PERSIST_MARK} Load it now with `sysctl --system`; it is read at every boot.\n");
        s.push_str(&format!(
            "# Last written at {stamp}. Keep the first line, or wirespeed will not rewrite this file.\n"
        ));
        for n in &irq_notes {
            s.push_str(&format!("# {n}\n"));
        }
        for (k, v) in &sysctls {
            s.push_str(&format!("{k} = {v}\n"));
        }
        write_file(&conf_path, &s)?;
        say(&format!("wrote {} ({} sysctls): load it now with `sysctl --system`", conf_path.display(), sysctls.len()));
        written.push(conf_path);
    }
    if !rules.is_empty() {
        let mut s = format!(
            "{PERSIST_MARK} udev runs these when the interface appears (at boot); `udevadm control --reload` reads this file now.\n"
        );
        s.push_str(&format!(
            "# Last written at {stamp}. Keep the first line, or wirespeed will not rewrite this file.\n"
        ));
        s.push_str(
            "# KERNEL== is the name the kernel gives the interface; if that name is one udev gives by renaming\n",
        );
        s.push_str("# (enp3s0), write NAME== instead: this file runs after the renaming rules.\n");
        for (_, line) in &rules {
            s.push_str(line);
            s.push('\n');
        }
        write_file(&rules_path, &s)?;
        say(&format!(
            "wrote {} ({} NIC settings): udev applies them when the interface appears (next boot)",
            rules_path.display(),
            rules.len()
        ));
        written.push(rules_path);
    }
    if written.is_empty() {
        say("nothing to persist: no finding has a change to write");
    }
    Ok(written)
}

/// Replace the entry with key `k`, in place, or add it at the end.
fn upsert(v: &mut Vec<(String, String)>, k: String, val: String) {
    match v.iter_mut().find(|(x, _)| *x == k) {
        Some(e) => e.1 = val,
        None => v.push((k, val)),
    }
}

/// What a udev line of ours sets (`-G eth0`, `-K eth0 rx-gro-list`): two lines with one key set
/// the same thing, and the newer one stands.
fn rule_key(line: &str) -> Option<String> {
    let run = line.split("RUN+=\"").nth(1)?;
    let cmd = run.split('"').next()?;
    let mut w = cmd.split_whitespace().skip(1);
    let (opt, iface) = (w.next()?, w.next()?);
    Some(if opt == "-K" { format!("{opt} {iface} {}", w.next()?) } else { format!("{opt} {iface}") })
}

/// The text of `path` when it is a file `--persist` wrote, `None` when there is none, and an
/// error (one line) when someone else's file is in the way.
fn ours(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) if s.lines().next().is_some_and(|l| l.starts_with(PERSIST_MARK)) => Ok(Some(s)),
        Ok(_) => Err(Error::failed(format!(
            "{} is there and was not written by wirespeed doctor --persist: move it away or persist into another directory; nothing was written",
            path.display()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!(
            "cannot read {} to see whose it is: {}: nothing was written",
            path.display(),
            err_text(&e)
        ))),
    }
}

/// Write a file through a temporary beside it and a rename, so a reader never sees half of it.
fn write_file(path: &Path, text: &str) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(format!("cannot write {}: {}", path.display(), err_text(&e)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::{Area, Finding, Status, Target, SCHEMA};

    fn sysctl(key: &str, value: &str) -> Change {
        Change::Sysctl { key: key.into(), value: value.into() }
    }
    fn irq(irq: u32, cpus: &str) -> Change {
        Change::IrqAffinity { irq, cpus: cpus.into() }
    }
    fn feature(iface: &str, feature: &str, on: bool) -> Change {
        Change::Feature { iface: iface.into(), feature: feature.into(), on }
    }
    fn finding(changes: Vec<Change>) -> Finding {
        Finding {
            id: "t".into(),
            area: Area::Socket,
            status: Status::Problem,
            seen: String::new(),
            why: String::new(),
            fix: vec![],
            changes,
            effect: 1.0,
            no_apply: None,
        }
    }
    fn report(findings: Vec<Finding>) -> Report {
        Report {
            schema: SCHEMA.into(),
            target: Target::default(),
            iface: None,
            privileged: false,
            notes: vec![],
            findings,
            applied: None,
            persisted: None,
        }
    }
    /// A fresh directory for one test, gone at the end (and at the start, from a killed run).
    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("ws-apply-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }
        fn put(&self, path: &str, text: &str) {
            let p = self.0.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn plan_keeps_one_change_per_target_and_says_which() {
        let r = report(vec![
            finding(vec![
                sysctl("net.core.rmem_max", "8388608"),
                irq(24, "2"),
                feature("eth0", "rx-gro-list", true),
                sysctl("net.ipv4.tcp_rmem", "4096 87380 6291456"),
            ]),
            finding(vec![
                sysctl("net.core.rmem_max", "33554432"),
                sysctl("net/core/rmem_max", "33554432"),
                irq(24, "3"),
                irq(25, "0-1"),
                irq(25, "0,1"),
                feature("eth0", "rx-gro-list", true),
                feature("eth0", "rx-udp-gro-forwarding", true),
                feature("eth1", "rx-gro-list", false),
                sysctl("net.ipv4.tcp_rmem", "4096\t87380  6291456"),
                sysctl("net.ipv4.tcp_rmem", "4096 131072 6291456"),
                sysctl("net.core.default_qdisc", "fq"),
                sysctl("net.core.default_qdisc", "fq_codel"),
            ]),
            finding(vec![]),
        ]);
        let (changes, notes) = plan_with_notes(&r);
        assert_eq!(
            changes,
            vec![
                sysctl("net.core.rmem_max", "33554432"),
                irq(24, "2"),
                feature("eth0", "rx-gro-list", true),
                sysctl("net.ipv4.tcp_rmem", "4096 87380 6291456"),
                irq(25, "0-1"),
                feature("eth0", "rx-udp-gro-forwarding", true),
                feature("eth1", "rx-gro-list", false),
                sysctl("net.core.default_qdisc", "fq"),
            ]
        );
        assert_eq!(
            notes,
            vec![
                "net.core.rmem_max: two findings ask for 8388608 and 33554432: kept the larger, 33554432",
                "irq 24 affinity: two findings ask for 2 and 3: kept the first, 2",
                "net.ipv4.tcp_rmem: two findings ask for '4096 87380 6291456' and '4096 131072 6291456': kept the first, '4096 87380 6291456'",
                "net.core.default_qdisc: two findings ask for 'fq' and 'fq_codel': kept the first, 'fq'",
            ]
        );
        assert_eq!(plan(&r), changes);
        assert!(plan(&report(vec![])).is_empty());
    }

    #[test]
    fn sysctl_keys_map_to_proc_sys_as_sysctl_maps_them() {
        assert_eq!(sysctl_path("net.core.rmem_max").unwrap(), "/proc/sys/net/core/rmem_max");
        assert_eq!(
            sysctl_path("net.ipv4.conf.eth0/100.rp_filter").unwrap(),
            "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
        );
        assert_eq!(
            sysctl_path("net/ipv4/conf/eth0.100/rp_filter").unwrap(),
            "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
        );
        for bad in
            ["", "net..core", "net.core.", "../etc/passwd", "net/../../etc", "net.core.rmem max", "a;b", "/net/core"]
        {
            assert!(sysctl_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cpu_lists_compare_as_sets() {
        assert_eq!(cpu_set("0-1,3"), cpu_set("3,0,1"));
        assert_eq!(cpu_set("0-3"), Some(vec![(0, 3)]));
        assert_eq!(cpu_set("0-4294967295"), Some(vec![(0, u32::MAX)]));
        for bad in ["", "3-1", "a", "1,", "-1", "1-2-3"] {
            assert_eq!(cpu_set(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_undo_script_restores_each_kind_exactly() {
        let restores = vec![
            sysctl("net.ipv4.conf.eth0/100.rp_filter", "2"),
            sysctl("net.core.rmem_max", "212992"),
            sysctl("net.ipv4.tcp_rmem", "4096 131072 6291456"),
            sysctl("kernel.core_pattern", "|/bin/it's %p"),
            irq(24, "0-1"),
            Change::Rings { iface: "eth0".into(), rx: 512 },
            Change::Coalesce { iface: "eth0".into(), rx_usecs: 50, rx_frames: 0 },
            Change::Channels { iface: "eth0".into(), combined: 4 },
            feature("eth0.100", "rx-gro-list", false),
            feature("eth0", "rx-udp-gro-forwarding", true),
        ];
        let text = undo_script_text(&restores, "2026-11-26T12:00:00.000Z");
        assert_eq!(
            text,
            "#!/bin/sh\n\
             # Undo of `wirespeed doctor --apply` run at 2026-11-26T12:00:00.000Z.\n\
             # Puts back the values read just before the changes, newest first; safe to run twice.\n\
             # Run it as root in the same network namespace (`ip netns exec NS sh FILE` for one).\n\
             set -e\n\
             PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
             failed=0\n\
             ethtool -K eth0 rx-udp-gro-forwarding on || failed=1\n\
             ethtool -K eth0.100 rx-gro-list off || failed=1\n\
             ethtool -L eth0 combined 4 || failed=1\n\
             ethtool -C eth0 rx-usecs 50 rx-frames 0 || failed=1\n\
             ethtool -G eth0 rx 512 || failed=1\n\
             echo 0-1 > /proc/irq/24/smp_affinity_list || failed=1\n\
             printf '%s\\n' '|/bin/it'\\''s %p' > /proc/sys/kernel/core_pattern || failed=1\n\
             printf '%s\\n' '4096 131072 6291456' > /proc/sys/net/ipv4/tcp_rmem || failed=1\n\
             printf '%s\\n' 212992 > /proc/sys/net/core/rmem_max || failed=1\n\
             printf '%s\\n' 2 > /proc/sys/net/ipv4/conf/eth0.100/rp_filter || failed=1\n\
             exit \"$failed\"\n"
        );
        let none = undo_script_text(&[], "T");
        assert!(none.ends_with("# Nothing was changed: nothing to put back.\nexit 0\n"), "{none}");
    }

    #[test]
    fn values_reach_the_file_through_sh_exactly() {
        // No root: the same printf line, aimed at a file of ours, run twice by sh.
        let d = Dir::new("undo-sh");
        for v in ["212992", "4096 131072 6291456", "|/bin/it's %p \\n $HOME `x`", "-n", ""] {
            let f = d.0.join("value");
            let line = shell_line(&sysctl("kernel.x", v))
                .replace(" > /proc/sys/kernel/x", &format!(" > {}", sh_quote(&f.display().to_string())));
            assert!(line.starts_with("printf '%s\\n' "), "{line}");
            for _ in 0..2 {
                let st = std::process::Command::new("sh").arg("-c").arg(&line).status().unwrap();
                assert!(st.success(), "{line}");
                assert_eq!(std::fs::read_to_string(&f).unwrap(), format!("{v}\n"), "{line}");
            }
        }
    }

    #[test]
    fn a_snapshot_is_never_changed() {
        let d = Dir::new("snapshot");
        d.put("proc/sys/net/core/rmem_max", "212992\n");
        let root = Root::at(&d.0);
        let undo = d.0.join("undo.sh");
        let mut said = vec![];
        let all = Privilege { euid: 0, net_admin: true, dac_override: true };
        let e =
            apply_as(&[sysctl("net.core.rmem_max", "33554432")], &root, &undo, &all, &mut |l| said.push(l.to_string()))
                .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "doctor --apply changes the live system, but this run reads a snapshot at {}: run it on the host itself, or use --persist to write the settings as files",
                d.0.display()
            )
        );
        assert_eq!(e.exit_code(), 2);
        assert!(said.is_empty());
        assert!(!undo.exists());
        assert_eq!(std::fs::read_to_string(d.0.join("proc/sys/net/core/rmem_max")).unwrap(), "212992\n");
    }

    #[test]
    fn without_privilege_nothing_is_read_or_written() {
        let undo = std::env::temp_dir().join(format!("ws-apply-noundo-{}", std::process::id()));
        let nobody = Privilege { euid: 65534, net_admin: false, dac_override: false };
        let mut said = vec![];
        for c in [sysctl("net.core.rmem_max", "1"), irq(0, "0"), feature("lo", "rx-gro-list", true)] {
            let e = apply_as(&[c], &Root::live(), &undo, &nobody, &mut |l| said.push(l.to_string())).unwrap_err();
            assert_eq!(e.to_string(), NOT_PRIVILEGED);
            assert_eq!(e.exit_code(), 1);
        }
        // CAP_NET_ADMIN alone is enough for net sysctls and ethtool, not for an interrupt or vm.*.
        let admin = Privilege { euid: 1000, net_admin: true, dac_override: false };
        assert!(admin.allows(&sysctl("net.core.rmem_max", "1")));
        assert!(admin.allows(&feature("lo", "rx-gro-list", true)));
        assert!(!admin.allows(&sysctl("vm.swappiness", "1")));
        let e = apply_as(&[sysctl("net.core.rmem_max", "1"), irq(0, "0")], &Root::live(), &undo, &admin, &mut |_| {})
            .unwrap_err();
        assert_eq!(e.to_string(), NOT_PRIVILEGED);
        assert!(said.is_empty());
        assert!(!undo.exists());
        // Nothing to do is not a refusal.
        let a = apply_as(&[], &Root::live(), &undo, &nobody, &mut |l| said.push(l.to_string())).unwrap();
        assert_eq!(a, Applied::default());
        assert_eq!(said, ["nothing to apply: no finding has a change --apply can make"]);
    }

    #[test]
    fn values_already_in_force_and_unreadable_ones_change_nothing() {
        // Live root, privilege claimed, but nothing to write: one value is already as asked,
        // the other cannot be read (so it could not be undone). Safe without root.
        let d = Dir::new("noop");
        let undo = d.0.join("undo.sh");
        let all = Privilege { euid: 0, net_admin: true, dac_override: true };
        let now = Root::live().read_line("/proc/sys/net/core/somaxconn").expect("somaxconn");
        let changes = [sysctl("net.core.somaxconn", &now), sysctl("net.core.wirespeed_no_such_key", "1")];
        let mut said = vec![];
        let a = apply_as(&changes, &Root::live(), &undo, &all, &mut |l| said.push(l.to_string())).unwrap();
        assert_eq!(a.unchanged, vec![Done { change: changes[0].clone(), before: now.clone(), after: now.clone() }]);
        assert!(a.changed.is_empty());
        assert_eq!(a.failed.len(), 1);
        assert_eq!(
            said,
            [
                format!("already net.core.somaxconn = {now}"),
                "not applied: net.core.wirespeed_no_such_key: cannot read the value in force (No such file or directory), so it could not be undone: left as it is".to_string(),
                format!("nothing was changed: {} puts nothing back", undo.display()),
            ]
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&undo).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(std::fs::read_to_string(&undo)
            .unwrap()
            .ends_with("# Nothing was changed: nothing to put back.\nexit 0\n"));
        assert_eq!(a.failure().unwrap().to_string(), "1 of 2 changes were not applied (said above)");

        // An undo script already there is not overwritten, and nothing is changed.
        let e = apply_as(&changes, &Root::live(), &undo, &all, &mut |_| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} already exists (the undo of an earlier --apply?): run or move it, or give another undo path; nothing was changed",
                undo.display()
            )
        );
    }

    #[test]
    fn privilege_is_read_from_the_status_file() {
        let root = "Name:\tx\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n";
        assert_eq!(Privilege::parse(root), Privilege { euid: 0, net_admin: true, dac_override: true });
        let user = "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000001000\n";
        assert_eq!(Privilege::parse(user), Privilege { euid: 1000, net_admin: true, dac_override: false });
        assert_eq!(Privilege::parse("garbage\nUid:\nCapEff:\tzz\n"), Privilege::none());
    }

    #[test]
    fn current_reads_through_the_root() {
        let d = Dir::new("current");
        d.put("proc/sys/net/core/rmem_max", "212992\n");
        d.put("proc/sys/net/ipv4/tcp_rmem", "4096\t131072\t6291456\n");
        d.put("proc/sys/net/ipv4/conf/eth0.100/rp_filter", "2\n");
        d.put("proc/sys/net/ipv4/two_lines", "1\n2\n");
        d.put("proc/irq/24/smp_affinity_list", "0-1\n");
        let root = Root::at(&d.0);
        assert_eq!(current(&sysctl("net.core.rmem_max", "1"), &root).unwrap(), "212992");
        assert_eq!(current(&sysctl("net.ipv4.tcp_rmem", "1"), &root).unwrap(), "4096 131072 6291456");
        assert_eq!(current(&sysctl("net.ipv4.conf.eth0/100.rp_filter", "1"), &root).unwrap(), "2");
        assert_eq!(original(&irq(24, "3"), &root).unwrap(), irq(24, "0-1"));
        assert_eq!(current(&sysctl("net.ipv4.two_lines", "1"), &root).unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(current(&sysctl("net.core.nope", "1"), &root).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(current(&sysctl("../../etc", "1"), &root).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let e = current(&feature("eth0", "rx-gro-list", true), &root).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert!(at_value(&irq(24, "1,0"), &irq(24, "0-1")));
        assert!(at_value(
            &sysctl("net.ipv4.tcp_rmem", "4096 131072  6291456"),
            &sysctl("net.ipv4.tcp_rmem", "4096 131072 6291456")
        ));
    }

    #[test]
    fn a_refusal_says_why_in_one_line() {
        let root = Root::at("/nonexistent");
        let eacces = io::Error::from_raw_os_error(libc::EACCES);
        let c = sysctl("net.core.rmem_max", "33554432");
        assert_eq!(
            refusal(&c, &root, &eacces, Some(false)),
            "Permission denied: this process is in a network namespace other than the host's, where host-wide keys such as this one are read-only: set it on the host (`sysctl -w net.core.rmem_max=33554432` outside the namespace)"
        );
        assert_eq!(refusal(&c, &root, &eacces, Some(true)), "Permission denied: run as root");
        let einval = io::Error::from_raw_os_error(libc::EINVAL);
        assert_eq!(
            refusal(&c, &root, &einval, Some(true)),
            "Invalid argument: the kernel refused 33554432 for net.core.rmem_max (out of its range?): check the value"
        );
        let eio = io::Error::from_raw_os_error(libc::EIO);
        assert!(refusal(&irq(30, "1"), &root, &eio, None).contains("managed interrupt"));
        let unsup = io::Error::from(io::ErrorKind::Unsupported);
        assert!(refusal(&feature("veth0", "rx-gro-list", true), &root, &unsup, None).contains("veth0"));
        for c in [sysctl("k", "1"), irq(1, "1"), feature("x", "y", true)] {
            assert!(!refusal(&c, &root, &eacces, None).contains('\n'));
        }
    }

    #[test]
    fn applied_serializes_for_json() {
        let a = Applied {
            changed: vec![Done {
                change: sysctl("net.core.somaxconn", "8192"),
                before: "4096".into(),
                after: "8192".into(),
            }],
            unchanged: vec![],
            rolled_back: vec![],
            failed: vec![Failed { change: irq(3, "1"), before: Some("0".into()), reason: "no".into() }],
            undo: Some(PathBuf::from("/tmp/u.sh")),
        };
        let j = serde_json::to_string(&a).unwrap();
        assert!(j.contains(r#""change":{"kind":"sysctl","key":"net.core.somaxconn","value":"8192"}"#), "{j}");
        assert_eq!(serde_json::from_str::<Applied>(&j).unwrap(), a);
        assert_eq!(
            a.failure().unwrap().to_string(),
            "1 of 2 changes were not applied (said above); `sh /tmp/u.sh` puts back the 1 that were"
        );
        assert!(Applied::default().failure().is_none());
    }

    const RUN: &str = "2026-11-26T12:00:00.000Z";

    #[test]
    fn persist_writes_exact_files_and_keeps_what_it_wrote_before() {
        let d = Dir::new("persist");
        let changes = vec![
            sysctl("net.core.rmem_max", "33554432"),
            sysctl("net.ipv4.tcp_rmem", "4096\t131072 6291456"),
            irq(24, "2"),
            Change::Rings { iface: "eth0".into(), rx: 4096 },
            Change::Coalesce { iface: "eth0".into(), rx_usecs: 0, rx_frames: 1 },
            Change::Channels { iface: "eth0".into(), combined: 2 },
            feature("eth0", "rx-udp-gro-forwarding", true),
        ];
        let mut said = vec![];
        let files = persist_at(&changes, &d.0, RUN, &mut |l| said.push(l.to_string())).unwrap();
        assert_eq!(files, vec![d.0.join(SYSCTL_FILE), d.0.join(UDEV_FILE)]);
        let conf = "# Written by wirespeed doctor --persist. Load it now with `sysctl --system`; it is read at every boot.\n\
             # Last written at 2026-11-26T12:00:00.000Z. Keep the first line, or wirespeed will not rewrite this file.\n\
             # interrupt 24 on CPUs 2: not persisted: interrupt numbers can change across boots and irqbalance moves them back; ban it from irqbalance (IRQBALANCE_BANNED_INTERRUPTS=\"24\", or --banirq=24) and set it at boot from a systemd unit running `echo 2 > /proc/irq/24/smp_affinity_list`\n\
             net.core.rmem_max = 33554432\n\
             net.ipv4.tcp_rmem = 4096 131072 6291456\n";
        assert_eq!(std::fs::read_to_string(d.0.join(SYSCTL_FILE)).unwrap(), conf);
        let head = "# Written by wirespeed doctor --persist. udev runs these when the interface appears (at boot); `udevadm control --reload` reads this file now.\n\
             # Last written at 2026-11-26T12:00:00.000Z. Keep the first line, or wirespeed will not rewrite this file.\n\
             # KERNEL== is the name the kernel gives the interface; if that name is one udev gives by renaming\n\
             # (enp3s0), write NAME== instead: this file runs after the renaming rules.\n";
        let rules = "ACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"eth0\", RUN+=\"/usr/sbin/ethtool -G eth0 rx 4096\"\n\
             ACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"eth0\", RUN+=\"/usr/sbin/ethtool -C eth0 rx-usecs 0 rx-frames 1\"\n\
             ACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"eth0\", RUN+=\"/usr/sbin/ethtool -L eth0 combined 2\"\n\
             ACTION==\"add\", SUBSYSTEM==\"net\", KERNEL==\"eth0\", RUN+=\"/usr/sbin/ethtool -K eth0 rx-udp-gro-forwarding on\"\n";
        assert_eq!(std::fs::read_to_string(d.0.join(UDEV_FILE)).unwrap(), format!("{head}{rules}"));
        assert!(said.iter().any(|l| l.starts_with("not persisted: interrupt 24 on CPUs 2")), "{said:?}");
        assert!(said.iter().any(|l| l.ends_with("(2 sysctls): load it now with `sysctl --system`")), "{said:?}");

        // A later run that lists less keeps what the first wrote, and changes what it sets again.
        let files = persist(
            &[sysctl("net.core.rmem_max", "67108864"), feature("eth0", "rx-udp-gro-forwarding", false)],
            &d.0,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(files.len(), 2);
        let conf2 = std::fs::read_to_string(d.0.join(SYSCTL_FILE)).unwrap();
        assert!(conf2.starts_with(PERSIST_MARK));
        assert!(conf2.ends_with("net.core.rmem_max = 67108864\nnet.ipv4.tcp_rmem = 4096 131072 6291456\n"), "{conf2}");
        let rules2 = std::fs::read_to_string(d.0.join(UDEV_FILE)).unwrap();
        assert!(rules2.ends_with(&rules.replace("rx-udp-gro-forwarding on", "rx-udp-gro-forwarding off")), "{rules2}");
        assert!(!d.0.join(format!("{SYSCTL_FILE}.tmp")).exists());

        // Nothing to persist writes nothing.
        let e = Dir::new("persist-empty");
        assert!(persist(&[], &e.0, &mut |_| {}).unwrap().is_empty());
        assert_eq!(std::fs::read_dir(&e.0).unwrap().count(), 0);
    }

    #[test]
    fn persist_leaves_files_it_did_not_write() {
        let d = Dir::new("persist-foreign");
        d.put(UDEV_FILE, "# mine\nACTION==\"add\"\n");
        let e = persist(&[sysctl("net.core.rmem_max", "1"), feature("eth0", "rx-gro-list", true)], &d.0, &mut |_| {})
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is there and was not written by wirespeed doctor --persist: move it away or persist into another directory; nothing was written",
                d.0.join(UDEV_FILE).display()
            )
        );
        assert!(!d.0.join(SYSCTL_FILE).exists());
        assert_eq!(std::fs::read_to_string(d.0.join(UDEV_FILE)).unwrap(), "# mine\nACTION==\"add\"\n");
        // Names that would be syntax in a rule or a script are not written.
        let mut said = vec![];
        let f = persist(&[feature("a\"b", "x", true), sysctl("a b", "1")], &d.0.join("sub"), &mut |l| {
            said.push(l.to_string())
        });
        assert!(f.unwrap().is_empty());
        assert_eq!(said.len(), 3, "{said:?}");
    }
}
