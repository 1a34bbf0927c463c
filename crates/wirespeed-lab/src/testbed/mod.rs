//! Partitions of one Linux host, after the SGI Origin 2000's `mkpart`/`mkpd`.
//!
//! A capture chain (instrument emulator, switch, recorder) needs several hosts; this module
//! makes them out of one. A partition is a network namespace plus a CPU set (a cpuset cgroup,
//! and a memory limit where the memory controller allows); every pair of partitions gets its
//! own veth link (the Craylink of the model, a full mesh) with a /30 from 198.18.0.0/15, and
//! each partition one stable address on its loopback, `198.19.0.N`, reached from every other
//! partition over their direct link only. A daemon per partition ([`heartbeat`], `daemon.rs`)
//! is its `mkpd` and its XPC: it beats in its XPC page, watches the others' pages and reports
//! failures in the seed's console wording, connects an XPC control channel to every peer that
//! beats (with the version exchange) and serves the partition's raw devices ([`xplink`]) over
//! XPC channels ([`crate::xpc`]); `devices.rs` shows them at `/hw/xplink` inside `exec`.
//!
//! The configuration is kept in `/run/wirespeed/PREFIX.json`; creation converges the host to
//! it (what exists and matches is left alone, so running it twice changes nothing). Everything
//! is undone by [`init`]. The rules a layout must satisfy are in [`topology`], pure and tested.
//!
//! The rooms: `state.rs` keeps the state file and the record of what was made and by whom
//! (and removes what a dead run left), `net.rs` the namespaces, links, addresses and routes,
//! `cgroup.rs` the CPU sets and memory limits, `daemon.rs` the heartbeat daemons and
//! `status.rs` the live view. This file holds the lifecycle that walks through them in order:
//! [`create`], [`activate`], [`deactivate`], [`exec`] and [`init`].

pub mod heartbeat;
pub mod hosts;
pub mod place;
pub mod proc;
pub mod topology;
pub mod xplink;

mod cgroup;
mod daemon;
mod devices;
mod net;
mod state;
mod status;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use wirespeed::{sys, Error, Result};

use cgroup::{cgroup_dirs, cgroup_held, cgroup_pids, join_cgroups};
pub use daemon::{daemon_pid, log_file, run_daemon, DaemonOptions};
pub use net::{
    check_routes, ipv6_for, link_name, links, ns_name, partition_addr, partition_addr6, require_net_admin, Link,
};
use net::{foreign_ns, ns_held, ns_path, ns_pids};
use state::{alive, find, save, state_path, Held};
pub use state::{
    check_prefix, describe, load, load_existing, reap_stale, run_dir, HbConfig, Ident, Layout, Made, Owner, State,
    SCHEMA,
};
pub use status::{status, PartStatus, Status, STATUS_SCHEMA};
pub use topology::{format_cpu_list, parse_cpu_list, validate, PartSpec, Topology, MAX_PARTITIONS};

/// What `create` did: lines to print, and whether anything changed.
#[derive(Debug, Default)]
pub struct Outcome {
    /// One line per change or warning.
    pub lines: Vec<String>,
    /// Whether the host was changed.
    pub changed: bool,
}

/// Options of [`create`] beyond the layout.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Replace a different existing configuration.
    pub force: bool,
    /// Heartbeat settings for the daemons.
    pub hb: HbConfig,
    /// Binary to run as `EXE partition daemon N ...` in each partition; `None`: no daemons.
    pub daemon_exe: Option<PathBuf>,
    /// The run these partitions are made for, when they are to go with it (see [`reap_stale`]).
    pub owner: Option<Owner>,
}

/// Validate `layout` against `topo` and bring the host to it.
///
/// Validation runs before anything is changed: a refused layout leaves the host as it was.
/// An existing identical configuration is repaired where pieces are missing (a deleted
/// namespace, a dead daemon) and otherwise left alone; a different one is refused unless
/// `force`, which tears it down first. A namespace or cgroup of the same name that wirespeed
/// did not make is never used nor removed: `create` refuses, naming it, before changing anything.
pub fn create(topo: &Topology, mut layout: Layout, opts: &CreateOptions) -> Result<Outcome> {
    check_prefix(&layout.prefix)?;
    layout.partitions.sort_by_key(|p| p.id);
    if !(68..=65535).contains(&layout.mtu) {
        return Err(Error::invalid(format!(
            "--mtu {} is not a usable IPv4 MTU: use 68..65535 (9000 for jumbo)",
            layout.mtu
        )));
    }
    if let Some(m) = layout.mem {
        if m < 16 << 20 {
            return Err(Error::invalid(format!("--mem {m} bytes is too small for a partition: use at least 16M")));
        }
    }
    let verdict = match validate(topo, &layout.partitions, layout.share_cpus) {
        Ok(v) => v,
        Err(errs) => return Err(Error::invalid(errs.join("\nwirespeed: "))),
    };
    let mut out = Outcome { lines: verdict.warnings, changed: false };
    let mut deactivated = BTreeSet::new();
    let mut made = Made::default();
    if let Some(old) = load(&layout.prefix)? {
        // Partitions made for a run that still goes on are that run's: never taken over.
        if let Some(o) = old.owner.as_ref().filter(|o| o.alive() && opts.owner.as_ref() != Some(*o)) {
            return Err(Error::invalid(format!(
                "partitions '{}' belong to a running {} (pid {}), which removes them when it ends: choose another --prefix",
                layout.prefix, o.what, o.pid
            )));
        }
        if old.layout != layout || old.hb != opts.hb || old.daemons != opts.daemon_exe.is_some() {
            if !opts.force {
                let what = if old.layout != layout {
                    describe(&old.layout)
                } else {
                    format!(
                        "same partitions, but heartbeat every {} ms, {} misses, daemons {}",
                        old.hb.check_ms,
                        old.hb.misses,
                        if old.daemons { "on" } else { "off" }
                    )
                };
                return Err(Error::invalid(format!(
                    "partitions with prefix '{}' already exist with another configuration ({what}): add --force to replace them, or `wirespeed partition init --prefix {}` first",
                    layout.prefix, layout.prefix
                )));
            }
            let undone = init(&layout.prefix)?;
            out.lines.push(format!("replaced the previous configuration ({} removed)", undone.removed.len()));
            out.lines.extend(undone.kept);
            out.changed = true;
        } else {
            deactivated = old.deactivated;
            made = old.made;
        }
    }
    refuse_foreign(&layout, &made)?;
    let mut st = State {
        schema: SCHEMA.into(),
        layout: layout.clone(),
        hb: opts.hb,
        daemons: opts.daemon_exe.is_some(),
        deactivated,
        made,
        owner: opts.owner.clone(),
    };
    // The state (and the owner) is on disk before anything is made.
    save(&st)?;
    converge(&mut st, opts.daemon_exe.as_deref(), &mut out)?;
    check_routes(&st)?;
    Ok(out)
}

/// Refuse, in one line, if a namespace or cgroup `layout` would use exists and is not one this
/// configuration made: wirespeed neither adopts nor removes what is not its own.
fn refuse_foreign(layout: &Layout, made: &Made) -> Result<()> {
    let (mut foreign, mut undo) = (Vec::new(), Vec::new());
    for p in &layout.partitions {
        let ns = ns_name(&layout.prefix, p.id);
        if ns_held(made, &ns) == Held::Foreign {
            foreign.push(format!("namespace {ns}"));
            undo.push(format!("ip netns del {ns}"));
        }
        for dir in cgroup_dirs(&layout.prefix, p.id) {
            if cgroup_held(made, &dir) == Held::Foreign {
                foreign.push(format!("cgroup {}", dir.display()));
                undo.push(format!("rmdir {}", dir.display()));
            }
        }
    }
    if foreign.is_empty() {
        return Ok(());
    }
    let one = foreign.len() == 1;
    let last = foreign.pop().unwrap_or_default();
    let names = if foreign.is_empty() { last } else { format!("{} and {last}", foreign.join(", ")) };
    Err(Error::invalid(format!(
        "{names} already exist{} and {} not made by wirespeed, so partitions '{}' were not created and nothing was changed: choose another --prefix, or remove {} yourself if {} yours to remove (`{}`)",
        if one { "s" } else { "" },
        if one { "was" } else { "were" },
        layout.prefix,
        if one { "it" } else { "them" },
        if one { "it is" } else { "they are" },
        undo.join("; ")
    )))
}

/// Bring the host to `st`: network first (namespaces, links, routes), then each partition's
/// cgroups, then the daemons (started inside both).
fn converge(st: &mut State, daemon_exe: Option<&Path>, out: &mut Outcome) -> Result<()> {
    net::converge(st, out)?;
    for p in &st.layout.partitions.clone() {
        cgroup::cgroups_for(st, p, out)?;
    }
    if let Some(exe) = daemon_exe {
        devices::ensure_hw()?;
        for p in &st.layout.partitions {
            if daemon::daemon_pid(st, p.id).is_none() {
                out.lines.extend(devices::detach_stale(&st.layout.prefix, p.id));
            }
        }
        daemon::start_missing(st, exe, out)?;
    }
    Ok(())
}

/// What [`init`] did: one line per thing removed, and one per thing of a wirespeed-like name
/// it left alone because wirespeed has no record of making it.
#[derive(Debug, Default)]
pub struct Undone {
    /// Removed: daemons, processes, namespaces, cgroups, files.
    pub removed: Vec<String>,
    /// Left alone, and why.
    pub kept: Vec<String>,
}

/// Undo what wirespeed made for `prefix`, as its state file records it: daemons, processes left
/// in its namespaces and cgroups, namespaces (and so their links), cgroups, its files and the
/// state file. A namespace or cgroup of a matching name that the state does not record (or
/// that was replaced since) is left alone and named in [`Undone::kept`]; with no state file,
/// nothing is removed. Succeeds when nothing exists.
pub fn init(prefix: &str) -> Result<Undone> {
    check_prefix(prefix)?;
    let mut u = Undone::default();
    let sp = state_path(prefix);
    let st = match load(prefix) {
        Ok(Some(st)) => st,
        Ok(None) => {
            left_alone(prefix, &Made::default(), &mut u, "wirespeed has no record of making it");
            return Ok(u);
        }
        Err(e) => {
            // Unreadable: what it recorded is unknown, so only the file itself goes.
            std::fs::remove_file(&sp).map_err(|e| Error::io(format!("cannot remove {}: {e}", sp.display())))?;
            u.removed.push(format!("unreadable state {} removed ({e})", sp.display()));
            left_alone(prefix, &Made::default(), &mut u, "its record was unreadable");
            return Ok(u);
        }
    };
    // Daemons first, so none re-publishes while the rest goes.
    let mut pids = daemon::stop_all(&st, &mut u);
    // Processes left in our partitions: in our cgroups, or in our namespaces (started with
    // `ip netns exec` directly). A namespace lives, with its links, as long as one remains.
    let mut left: Vec<(String, u32)> = Vec::new();
    for (dir, _) in st.made.cgroups.iter().filter(|(d, _)| cgroup_held(&st.made, d) == Held::Ours) {
        left.extend(cgroup_pids(dir).into_iter().map(|p| (format!("cgroup {}", dir.display()), p)));
    }
    for (ns, _) in st.made.namespaces.iter().filter(|(n, _)| ns_held(&st.made, n) == Held::Ours) {
        left.extend(ns_pids(ns).into_iter().map(|p| (format!("namespace {ns}"), p)));
    }
    for (where_, pid) in left {
        if pid != std::process::id() && !pids.contains(&pid) {
            let _ = sys::send_signal(pid, libc::SIGKILL);
            pids.push(pid);
            u.removed.push(format!("process {pid} in {where_} killed"));
        }
    }
    let t = Instant::now();
    while pids.iter().any(|&p| alive(p)) && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &p in &pids {
        if alive(p) {
            let _ = sys::send_signal(p, libc::SIGKILL);
        }
    }
    devices::remove(&st, &mut u);
    net::remove(&st, &mut u)?;
    cgroup::remove(&st, &mut u)?;
    daemon::remove_files(prefix, &mut u);
    left_alone(prefix, &st.made, &mut u, "wirespeed has no record of making it");
    let _ = std::fs::remove_file(sp.with_extension("json.tmp"));
    if sp.exists() {
        std::fs::remove_file(&sp).map_err(|e| Error::io(format!("cannot remove {}: {e}", sp.display())))?;
        u.removed.push(format!("state {} removed", sp.display()));
    }
    Ok(u)
}

/// Name, in `u.kept`, every namespace `PREFIX<N>` and cgroup `wirespeed-PREFIX-N` that exists
/// and that `made` does not record: they are someone else's.
fn left_alone(prefix: &str, made: &Made, u: &mut Undone, why: &str) {
    for i in 1..=MAX_PARTITIONS as u32 {
        let ns = ns_name(prefix, i);
        if !made.namespaces.contains_key(&ns) && ns_path(&ns).exists() {
            u.kept.push(format!("namespace {ns} left alone: {why}"));
        }
        for dir in cgroup_dirs(prefix, i) {
            if !made.cgroups.contains_key(&dir) && dir.exists() {
                u.kept.push(format!("cgroup {} left alone: {why}", dir.display()));
            }
        }
    }
}

/// Isolate partition `id` (like `mkpart -d`): its links go down and its daemon stops beating,
/// so every other partition sees it stop responding. Returns false if it already was.
pub fn deactivate(prefix: &str, id: u32) -> Result<bool> {
    let mut st = load_existing(prefix)?;
    find(&st, id)?;
    let ns = ns_name(prefix, id);
    if ns_held(&st.made, &ns) == Held::Foreign {
        return Err(foreign_ns(&ns, prefix));
    }
    net::isolate(&st, id)?;
    let changed = st.deactivated.insert(id);
    save(&st)?;
    Ok(changed)
}

/// Undo [`deactivate`] (like `mkpart -a`): links up, routes back, heartbeats resume.
pub fn activate(prefix: &str, id: u32) -> Result<bool> {
    let mut st = load_existing(prefix)?;
    find(&st, id)?;
    let changed = st.deactivated.remove(&id);
    save(&st)?;
    let mut out = Outcome::default();
    converge(&mut st, None, &mut out)?;
    check_routes(&st)?;
    Ok(changed)
}

/// Run `cmd` inside partition `id`: its cgroups (CPU set, memory), its CPU affinity and its
/// network namespace, all inherited by the command's children. Returns only on failure.
pub fn exec(prefix: &str, id: u32, cmd: &[String]) -> Result<std::convert::Infallible> {
    use std::os::unix::process::CommandExt;
    let st = load_existing(prefix)?;
    let p = find(&st, id)?;
    let ns = ns_name(prefix, id);
    match ns_held(&st.made, &ns) {
        Held::Ours => {}
        Held::Gone => {
            return Err(Error::failed(format!(
                "partition {id}'s namespace {ns} is gone: run `wirespeed partition create` again to repair it"
            )))
        }
        Held::Foreign => return Err(foreign_ns(&ns, prefix)),
    }
    if cmd.is_empty() {
        return Err(Error::invalid("no command given: write `wirespeed partition exec N -- CMD ARGS...`"));
    }
    join_cgroups(&st, id, std::process::id())?;
    devices::exec_view(prefix, id)?;
    let cpus: Vec<usize> = p.cpus.iter().copied().collect();
    sys::set_process_affinity(&cpus)
        .map_err(|e| Error::failed(format!("cannot restrict to CPUs {}: {e}", format_cpu_list(&p.cpus))))?;
    let e = Command::new("ip").args(["netns", "exec", &ns]).args(cmd).exec();
    Err(Error::failed(format!("cannot run `ip netns exec {ns} {}`: {e}", cmd.join(" "))))
}
