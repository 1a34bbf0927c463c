//! The daemon of each partition (its `mkpd` and its XPC): started by `create` inside the
//! partition's network namespace only (its mounts stay the host's, so its raw devices are seen
//! from everywhere), its cgroups and a process group of its own, so it outlives the command;
//! found again by its pid file and command line. Its check loop ([`run_daemon`]) beats in its
//! XPC page, watches the others' with [`super::heartbeat`], and activates or deactivates their
//! XPC channels and raw devices.
//!
//! Its files live in the configuration's work directory: `daemon-N.pid`, `daemon-N.log` (the
//! console lines), `hb-N` (the beat, for people), `view-N.json` (what it saw, for `status`),
//! `xpc/` (pages and channel halves) and `N/xplink` (where its devices are mounted).

use super::cgroup::join_cgroups;
use super::heartbeat::{self, Beat, PeerState, PeerWatch};
use super::net::{ns_exists, ns_held, ns_inode, ns_name, ns_path};
use super::state::{alive, check_prefix, find, load, load_existing, work_dir, Held, State};
use super::xplink;
use super::Undone;
use crate::xpc;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wirespeed::{sys, Error, Result};

/// Pid file of partition `id`'s daemon.
pub(super) fn pid_file(prefix: &str, id: u32) -> PathBuf {
    work_dir(prefix).join(format!("daemon-{id}.pid"))
}

/// Heartbeat file partition `id`'s daemon publishes.
pub(super) fn hb_file(prefix: &str, id: u32) -> PathBuf {
    work_dir(prefix).join(format!("hb-{id}"))
}

/// What partition `id`'s daemon saw at its last check.
pub(super) fn view_file(prefix: &str, id: u32) -> PathBuf {
    work_dir(prefix).join(format!("view-{id}.json"))
}

/// Log file of partition `id`'s daemon (its console lines).
pub fn log_file(prefix: &str, id: u32) -> PathBuf {
    work_dir(prefix).join(format!("daemon-{id}.log"))
}

/// Whether process `pid` is the heartbeat daemon of partition `id` of `st`: its command line
/// is `... partition daemon ID --prefix PREFIX ...` and, where this process may look, it runs
/// in the namespace wirespeed made for the partition. A pid file naming a pid since reused by
/// another process must not get that process killed.
pub(super) fn is_our_daemon(pid: u32, st: &State, id: u32) -> bool {
    let prefix = &st.layout.prefix;
    let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<String> = cmd.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let seq = |a: &str, b: &str| args.windows(2).any(|w| w[0] == a && w[1] == b);
    if !(seq("daemon", &id.to_string()) && seq("--prefix", prefix) && args.iter().any(|a| a == "partition")) {
        return false;
    }
    let ns = ns_name(prefix, id);
    match ns_inode(Path::new(&format!("/proc/{pid}/ns/net"))) {
        // Without privilege the namespace of a root process cannot be read: the command line is
        // enough to show a status; only a privileged caller ever signals it.
        None => true,
        Some(ino) => ns_held(&st.made, &ns) == Held::Ours && ns_inode(&ns_path(&ns)) == Some(ino),
    }
}

/// Pid of partition `id`'s running daemon, if it runs.
pub fn daemon_pid(st: &State, id: u32) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file(&st.layout.prefix, id)).ok()?.trim().parse().ok()?;
    (alive(pid) && is_our_daemon(pid, st, id)).then_some(pid)
}

/// Start partition `id`'s daemon inside its namespace and cgroups, in a process group of
/// its own so that it outlives this command.
pub(super) fn start_daemon(st: &State, id: u32, exe: &Path) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let prefix = &st.layout.prefix;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file(prefix, id))
        .map_err(|e| Error::io(format!("cannot open the daemon log: {e}")))?;
    let log2 = log.try_clone().map_err(|e| Error::io(format!("cannot open the daemon log: {e}")))?;
    let ns = ns_name(prefix, id);
    let ns_file = std::fs::File::open(ns_path(&ns))
        .map_err(|e| Error::io(format!("cannot open namespace {ns} for partition {id}'s daemon: {e}")))?;
    let mut cmd = Command::new(exe);
    // In the partition's network namespace only: the daemon mounts the partition's raw devices,
    // and they must be seen from the host (and so from every partition), which a mount
    // namespace of `ip netns exec`'s would hide.
    sys::proc::in_netns(&mut cmd, ns_file);
    let child = cmd
        .args(["partition", "daemon", &id.to_string(), "--prefix", prefix])
        .args(["--hb-check", &format!("{}ms", st.hb.check_ms), "--hb-misses", &st.hb.misses.to_string()])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(|e| Error::failed(format!("cannot start the heartbeat daemon of partition {id}: {e}")))?;
    let pid = child.id();
    // The daemon is not our child to wait for: it outlives this command. Its exit status is
    // collected by init (the process is re-parented when we exit).
    drop(child);
    std::fs::write(pid_file(prefix, id), pid.to_string())
        .map_err(|e| Error::io(format!("cannot write the daemon pid file: {e}")))?;
    join_cgroups(st, id, pid)?;
    Ok(())
}

/// The id of a daemon's `view-N.json`.
pub const VIEW_SCHEMA: &str = "wirespeed.partition-view/1";

/// What one daemon saw at its last check (`view-N.json`), read by [`super::status()`] and left
/// for people and scripts to read (the README says so), hence an id of its own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct View {
    /// [`VIEW_SCHEMA`] (absent in the views of daemons from before it).
    #[serde(default)]
    pub(super) schema: String,
    /// The daemon's partition.
    pub(super) id: u32,
    /// When it wrote the view, Unix time in milliseconds.
    pub(super) time_ms: u64,
    /// What it sees of each peer partition: active, inactive, not responding.
    pub(super) peers: BTreeMap<u32, PeerState>,
    /// Its XPC with each peer: connected, connecting, refused (and why) or down.
    #[serde(default)]
    pub(super) xpc: BTreeMap<u32, String>,
}

/// Wall-clock milliseconds, as the views are stamped.
pub(super) fn now_ms() -> u64 {
    sys::realtime_ns() / 1_000_000
}

/// Options of the heartbeat daemon.
#[derive(Debug, Clone, Copy)]
pub struct DaemonOptions {
    /// Check interval.
    pub check: Duration,
    /// Checks without progress before a peer is declared not responding.
    pub misses: u32,
    /// Version to announce (tests use another major to see the NOTICE).
    pub version: (u32, u32),
    /// XPC version to announce on the control channels (tests use another major to see the
    /// seed's "xpc: Local version A.B does not support Remote version C.D").
    pub xpc_version: (u32, u32),
    /// Whether this partition speaks XPC (channels and raw devices); `false` makes its peers
    /// print "Partition X does not support XPC messaging".
    pub xpc: bool,
}

/// Run partition `id`'s daemon until stopped (SIGTERM/SIGINT), until its namespace is
/// deleted, or until the configuration is removed by `init`. Console lines (Table 2 wording)
/// go to `console`.
///
/// The daemon is the partition's `mkpd` and its XPC: it opens the partition's XPC node (whose
/// page carries the heartbeat counter the other partitions read through a read-only mapping),
/// mounts the raw devices, and every check: beats, reads each peer's counter, and activates a
/// peer that beats (its control channel connects with a version exchange, then its 16 device
/// channels) or deactivates one that stopped (its channels are closed: users of its devices get
/// ENOTCONN at once). The heartbeat file and the view stay, for `status`.
pub fn run_daemon(prefix: &str, id: u32, o: DaemonOptions, console: &mut dyn FnMut(&str)) -> Result<()> {
    check_prefix(prefix)?;
    let st = load_existing(prefix)?;
    find(&st, id)?;
    let stop = sys::install_stop_handler();
    let ns = ns_name(prefix, id);
    console(&format!(
        "NOTICE: partition {id}: heartbeat daemon up, version {}.{}, pid {}",
        o.version.0,
        o.version.1,
        std::process::id()
    ));
    // The namespace this daemon runs in; if PREFIXN is deleted and made again, it is another one.
    let my_ns = ns_inode(Path::new("/proc/self/ns/net"));
    if my_ns.is_none() || ns_inode(&Path::new("/run/netns").join(&ns)) != my_ns {
        return Err(Error::invalid(format!(
            "the daemon of partition {id} must run inside namespace {ns}: `ip netns exec {ns} wirespeed partition daemon {id} --prefix {prefix}` (create starts it for you)"
        )));
    }
    let _ = std::fs::create_dir_all(work_dir(prefix));
    std::fs::write(pid_file(prefix, id), std::process::id().to_string())
        .map_err(|e| Error::io(format!("cannot write the daemon pid file: {e}")))?;
    let dir = xpc::dir(prefix);
    let node = xpc::Node::open(&dir, id, xpc::NodeOptions { version: o.version, xpc: o.xpc })?;
    let link = Arc::new(xplink::xpc::XpcDevLink::new(node));
    let devices = if o.xpc {
        let dl: Arc<dyn xplink::DevLink> = link.clone();
        match xplink::Devices::mount(&xplink::mount_dir(prefix, id), id, dl) {
            Ok(d) => {
                console(&format!(
                    "NOTICE: partition {id}: raw devices at {}/raw",
                    xplink::mount_dir(prefix, id).display()
                ));
                Some(d)
            }
            Err(e) => {
                console(&format!("WARNING: partition {id}: no raw devices: {e}"));
                None
            }
        }
    } else {
        None
    };
    let mut watches: BTreeMap<u32, PeerWatch> = BTreeMap::new();
    let mut pages: BTreeMap<u32, xpc::RemotePage> = BTreeMap::new();
    let mut xpcs: BTreeMap<u32, XpcPeer> = BTreeMap::new();
    let mut counter: u64 = 0;
    let mut last_deact = false;
    let end = loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break format!("NOTICE: partition {id}: heartbeat daemon stopped");
        }
        let tick = Instant::now();
        let Some(st) = load(prefix).ok().flatten() else {
            break format!("NOTICE: partition {id}: configuration removed; daemon exits");
        };
        if !ns_exists(&ns) || ns_inode(&Path::new("/run/netns").join(&ns)) != my_ns {
            break format!("WARNING: partition {id}: namespace {ns} deleted; daemon exits");
        }
        let deact = st.deactivated.contains(&id);
        if deact != last_deact {
            console(&if deact {
                format!("NOTICE: partition {id}: deactivated; heartbeat stopped")
            } else {
                format!("NOTICE: partition {id}: activated; heartbeat resumed")
            });
            last_deact = deact;
        }
        if !deact {
            counter += 1;
            link.node().beat();
            let _ = heartbeat::publish(&hb_file(prefix, id), Beat { version: o.version, counter });
        }
        let peers: BTreeSet<u32> = st.layout.partitions.iter().map(|p| p.id).filter(|&p| p != id).collect();
        watches.retain(|k, _| peers.contains(k));
        for &p in &peers {
            let w = watches.entry(p).or_insert_with(|| PeerWatch::new(p));
            // A deactivated partition sees nobody, as with `mkpart -d`.
            let beat = if deact { None } else { read_page(&mut pages, &dir, p) };
            if let Some(line) = w.observe(beat, o.misses, o.version) {
                console(&line);
            }
            let up = w.state == PeerState::Active;
            if o.xpc {
                xpc_step(&link, &mut xpcs, p, up, o.xpc_version, console);
            }
        }
        let view = View {
            schema: VIEW_SCHEMA.into(),
            id,
            time_ms: now_ms(),
            peers: watches.iter().map(|(k, w)| (*k, w.state)).collect(),
            xpc: xpcs.iter().map(|(k, x)| (*k, x.state.clone())).collect(),
        };
        if let Ok(s) = serde_json::to_string(&view) {
            let vf = view_file(prefix, id);
            let tmp = vf.with_extension("tmp");
            let _ = std::fs::write(&tmp, s).and_then(|_| std::fs::rename(&tmp, &vf));
        }
        while tick.elapsed() < o.check && !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep((o.check - tick.elapsed().min(o.check)).min(Duration::from_millis(50)));
        }
    };
    for &p in xpcs.keys() {
        link.deactivate(p);
    }
    if let Some(d) = devices {
        if let Err(e) = d.unmount() {
            console(&format!("WARNING: partition {id}: {e}"));
        }
    }
    console(&end);
    Ok(())
}

/// A peer partition's page, opened once and again when it was replaced (a restarted daemon);
/// what it says as a heartbeat, `None` when it cannot be read.
fn read_page(pages: &mut BTreeMap<u32, xpc::RemotePage>, dir: &Path, p: u32) -> Option<Beat> {
    if pages.get(&p).is_some_and(|pg| pg.replaced()) {
        pages.remove(&p);
    }
    let page = match pages.entry(p) {
        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::btree_map::Entry::Vacant(e) => e.insert(xpc::RemotePage::open(dir, p).ok()?),
    };
    let v = page.read()?;
    Some(Beat { version: v.version, counter: v.counter })
}

/// This daemon's XPC with one peer: the control channel and what was said about it.
struct XpcPeer {
    ctl: Option<xpc::Channel>,
    /// "connected", "connecting", "refused: ..." or "down", for the view.
    state: String,
    /// The refusal already printed, so it is said once.
    told: Option<xpc::Refusal>,
}

/// One check's XPC step with peer `p`: while it beats, connect its control channel (version
/// exchange) and, once connected, activate its devices; when it stops, deactivate them.
fn xpc_step(
    link: &Arc<xplink::xpc::XpcDevLink>,
    xpcs: &mut BTreeMap<u32, XpcPeer>,
    p: u32,
    up: bool,
    version: (u32, u32),
    console: &mut dyn FnMut(&str),
) {
    let x = xpcs.entry(p).or_insert(XpcPeer { ctl: None, state: "down".into(), told: None });
    if !up {
        if link.is_active(p) {
            link.deactivate(p);
            console(&format!("NOTICE: xpc: partition {p} deactivated: its channels are closed"));
        }
        if let Some(mut c) = x.ctl.take() {
            c.close();
        }
        x.state = "down".into();
        return;
    }
    if x.ctl.is_none() {
        let opts = xpc::ChannelOptions { xpc_version: version, ..Default::default() };
        match xpc::Channel::open_with(link.node(), p, 0, opts) {
            Ok(c) => x.ctl = Some(c),
            Err(e) => {
                x.state = format!("error: {e}");
                return;
            }
        }
    }
    let Some(ctl) = x.ctl.as_mut() else { return };
    match ctl.poll_connect() {
        Ok(xpc::ChanState::Connected) => {
            if !link.is_active(p) {
                match link.activate(p) {
                    Ok(()) => console(&format!("NOTICE: xpc: partition {p} activated: channels and raw devices up")),
                    Err(e) => console(&format!("WARNING: xpc: partition {p}: cannot open its channels: {e}")),
                }
            }
            x.state = "connected".into();
            x.told = None;
        }
        Ok(xpc::ChanState::Refused(r)) => {
            if x.told.as_ref() != Some(&r) {
                for l in r.lines() {
                    console(&format!("NOTICE: {l}"));
                }
                x.told = Some(r.clone());
            }
            x.state = format!("refused: {}", r.lines().join("; "));
        }
        Ok(xpc::ChanState::Closed(why)) => {
            // The peer's end went away (its daemon restarted): open a new control channel next time.
            if link.is_active(p) {
                link.deactivate(p);
            }
            x.ctl = None;
            x.state = format!("closed: {why}");
        }
        Ok(xpc::ChanState::Connecting) => x.state = "connecting".into(),
        Err(e) => {
            x.ctl = None;
            x.state = format!("error: {e}");
        }
    }
}

/// Start the daemon of every partition of `st` that has none running.
pub(super) fn start_missing(st: &State, exe: &Path, out: &mut super::Outcome) -> Result<()> {
    for p in &st.layout.partitions {
        if daemon_pid(st, p.id).is_none() {
            start_daemon(st, p.id, exe)?;
            out.lines.push(format!("partition {}: heartbeat daemon started", p.id));
            out.changed = true;
        }
    }
    Ok(())
}

/// Ask every running daemon of `st` to stop (SIGTERM), each said in `u.removed`; returns their
/// pids, for the caller to wait on.
pub(super) fn stop_all(st: &State, u: &mut Undone) -> Vec<u32> {
    // By id, once each, even from a hand-edited state that names a partition twice.
    let ids: BTreeSet<u32> = st.layout.partitions.iter().map(|p| p.id).collect();
    let mut pids = Vec::new();
    for &i in &ids {
        if let Some(pid) = daemon_pid(st, i) {
            let _ = sys::send_signal(pid, libc::SIGTERM);
            pids.push(pid);
            u.removed.push(format!("partition {i}: daemon {pid} stopped"));
        }
    }
    pids
}

/// Remove the daemons' files (pid files, heartbeats, views, logs) from the work directory of
/// `prefix`, then the directory if nothing else is in it.
pub(super) fn remove_files(prefix: &str, u: &mut Undone) {
    let wd = work_dir(prefix);
    if let Ok(rd) = std::fs::read_dir(&wd) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if ["daemon-", "hb-", "view-"].iter().any(|p| name.starts_with(p)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        if std::fs::remove_dir(&wd).is_err() && wd.exists() {
            u.kept.push(format!("directory {} left: it holds files wirespeed did not make", wd.display()));
        }
    }
}
