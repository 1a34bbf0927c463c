//! Partitions of one Linux host, after the SGI Origin 2000's `mkpart`/`mkpd`.
//!
//! A capture chain (instrument emulator, switch, recorder) needs several hosts; this module
//! makes them out of one. A partition is a network namespace plus a CPU set (a cpuset cgroup,
//! and a memory limit where the memory controller allows); every pair of partitions gets its
//! own veth link (the Craylink of the model, a full mesh) with a /30 from 198.18.0.0/15, and
//! each partition one stable address on its loopback, `198.19.0.N`, reached from every other
//! partition over their direct link only. A heartbeat daemon per partition ([`heartbeat`])
//! watches the others and reports failures in the seed's console wording.
//!
//! The configuration is kept in `/run/wirespeed/PREFIX.json`; creation converges the host to
//! it (what exists and matches is left alone, so running it twice changes nothing). Everything
//! is undone by [`init`]. The rules a layout must satisfy are in [`topology`], pure and tested.

pub mod heartbeat;
pub mod pair;
pub mod place;
pub mod proc;
pub mod topology;

use crate::{sys, Error, Result};
use heartbeat::{Beat, PeerState, PeerWatch};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
pub use topology::{format_cpu_list, parse_cpu_list, validate, PartSpec, Topology, MAX_PARTITIONS};

/// Schema name of the state file and of `status --json`.
pub const SCHEMA: &str = "wirespeed.partition/1";

/// Where state, heartbeats, daemon logs and pid files live (a tmpfs: gone after a reboot, like
/// the namespaces themselves). `WIRESPEED_RUN_DIR` overrides it.
pub fn run_dir() -> PathBuf {
    std::env::var_os("WIRESPEED_RUN_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/run/wirespeed"))
}

/// The requested layout: what `create` was asked for. Two layouts that compare equal describe
/// the same partitions, which is what makes `create` idempotent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Namespace name prefix: partition N lives in namespace `PREFIXN`.
    pub prefix: String,
    /// The partitions, sorted by id.
    pub partitions: Vec<PartSpec>,
    /// MTU of every link.
    pub mtu: u32,
    /// Memory limit per partition in bytes (cgroup memory controller), if any.
    pub mem: Option<u64>,
    /// Whether partitions may share cores.
    pub share_cpus: bool,
}

/// Heartbeat settings, kept with the state so every daemon uses the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HbConfig {
    /// Interval between checks, milliseconds.
    pub check_ms: u64,
    /// Checks without progress before a peer is declared not responding.
    pub misses: u32,
}

impl Default for HbConfig {
    fn default() -> Self {
        HbConfig { check_ms: 1000, misses: 3 }
    }
}

/// The persisted state: layout, heartbeat settings, and which partitions are deactivated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// What was asked for.
    pub layout: Layout,
    /// Heartbeat settings.
    pub hb: HbConfig,
    /// Whether create starts a daemon per partition.
    pub daemons: bool,
    /// Partitions isolated by `deactivate`.
    pub deactivated: BTreeSet<u32>,
    /// What wirespeed made for this configuration: only these are ever removed.
    #[serde(default)]
    pub made: Made,
    /// The run that made these partitions for itself (demo, bench, ping); `None` for partitions
    /// made by `partition create`, which stay until `partition init`.
    #[serde(default)]
    pub owner: Option<Owner>,
}

/// The identity of a namespace or cgroup directory: its inode and when that inode was made.
/// A same-named object made later by someone else has another identity, even if the kernel
/// hands out the same inode number again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ident {
    /// Inode number.
    pub ino: u64,
    /// Inode change time, seconds.
    pub ctime: i64,
    /// Inode change time, nanoseconds.
    pub ctime_nsec: i64,
}

impl Ident {
    fn of(p: &Path) -> Option<Ident> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| Ident { ino: m.ino(), ctime: m.ctime(), ctime_nsec: m.ctime_nsec() })
    }
}

/// Everything a configuration made on the host, recorded in the state file before each object
/// is made (with no identity yet) and again once it exists (with its identity), so that even a
/// run killed half-way through `create` knows what it made, and nothing else is ever removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Made {
    /// Namespaces by name; `None`: being made when the state was last written.
    pub namespaces: BTreeMap<String, Option<Ident>>,
    /// Veth ends, as `NAMESPACE/DEVICE` (they go with their namespace).
    pub links: BTreeSet<String>,
    /// Cgroup directories; `None`: being made when the state was last written.
    pub cgroups: BTreeMap<PathBuf, Option<Ident>>,
}

/// The process that made a set of partitions for one run: a pid and its start time, so that a
/// pid reused by another process is not taken for the owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Process id.
    pub pid: u32,
    /// Its start time, clock ticks after boot.
    pub start: u64,
    /// What it was (`demo`, `bench`, `ping`, ...), for the message that removes its leftovers.
    pub what: String,
}

impl Owner {
    /// This process, running `what`.
    pub fn me(what: &str) -> Owner {
        let pid = std::process::id();
        Owner { pid, start: sys::proc::start_time(pid).unwrap_or(0), what: what.into() }
    }

    /// Whether the owner still runs (same pid, same start time).
    pub fn alive(&self) -> bool {
        sys::proc::start_time(self.pid) == Some(self.start)
    }
}

/// Whether an object on the host is one this configuration made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// It exists and is the one recorded as made.
    Ours,
    /// Nothing of that name exists.
    Gone,
    /// Something of that name exists that wirespeed did not make (or not this one).
    Foreign,
}

fn held(recorded: Option<&Option<Ident>>, path: &Path) -> Held {
    let Some(now) = Ident::of(path) else { return Held::Gone };
    match recorded {
        // Recorded just before it was made, and the run stopped before its identity was.
        Some(None) => Held::Ours,
        Some(Some(id)) if *id == now => Held::Ours,
        _ => Held::Foreign,
    }
}

fn ns_path(ns: &str) -> PathBuf {
    Path::new("/run/netns").join(ns)
}

fn ns_held(made: &Made, ns: &str) -> Held {
    held(made.namespaces.get(ns), &ns_path(ns))
}

fn cgroup_held(made: &Made, dir: &Path) -> Held {
    held(made.cgroups.get(dir), dir)
}

/// Check a namespace prefix: short, lower-case letters, digits and `-`, so names stay valid
/// for `ip netns` and for cgroup directories.
pub fn check_prefix(p: &str) -> Result<()> {
    let ok = !p.is_empty()
        && p.len() <= 16
        && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && p.starts_with(|c: char| c.is_ascii_lowercase())
        // A trailing digit would make PREFIX1 + partition 1 and PREFIX + partition 11 collide.
        && !p.ends_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "--prefix '{p}' is not usable: 1-16 characters of a-z, 0-9 and -, starting with a letter and not ending with a digit"
        )))
    }
}

/// Namespace of partition `id`.
pub fn ns_name(prefix: &str, id: u32) -> String {
    format!("{prefix}{id}")
}

/// The stable partition address (on its loopback): 198.19.0.N.
pub fn partition_addr(id: u32) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, 0, id as u8)
}

/// Interface name, inside partition `local`, of its link to partition `peer`.
pub fn link_name(peer: u32) -> String {
    format!("p{peer}")
}

/// The link between partitions `a < b`: its /30 in 198.18.0.0/16 and both ends' addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Link {
    /// Lower partition id.
    pub a: u32,
    /// Higher partition id.
    pub b: u32,
    /// Address of `a`'s end.
    pub a_addr: Ipv4Addr,
    /// Address of `b`'s end.
    pub b_addr: Ipv4Addr,
}

impl Link {
    /// The link between two partition ids (either order); the /30 is a function of the pair only,
    /// so adding a partition never renumbers existing links.
    pub fn between(x: u32, y: u32) -> Link {
        let (a, b) = (x.min(y), x.max(y));
        // Pairs of 1..=64 indexed as (b-1)(b-2)/2 + (a-1): below 2016, times 4 fits a /16.
        // Saturating: ids are validated to 1..=64 before any link exists; this only keeps a
        // hand-edited state file from causing an overflow.
        let k = b.saturating_sub(1) * b.saturating_sub(2) / 2 + a.saturating_sub(1);
        let base = u32::from(Ipv4Addr::new(198, 18, 0, 0)) + 4 * k;
        Link { a, b, a_addr: Ipv4Addr::from(base + 1), b_addr: Ipv4Addr::from(base + 2) }
    }

    /// Address of the end in partition `id`.
    pub fn addr_of(&self, id: u32) -> Ipv4Addr {
        if id == self.a {
            self.a_addr
        } else {
            self.b_addr
        }
    }
}

/// All links of a layout (full mesh).
pub fn links(layout: &Layout) -> Vec<Link> {
    let ids: Vec<u32> = layout.partitions.iter().map(|p| p.id).collect();
    let mut out = Vec::new();
    for (i, &a) in ids.iter().enumerate() {
        for &b in &ids[i + 1..] {
            out.push(Link::between(a, b));
        }
    }
    out
}

fn state_path(prefix: &str) -> PathBuf {
    run_dir().join(format!("{prefix}.json"))
}

fn work_dir(prefix: &str) -> PathBuf {
    run_dir().join(prefix)
}

/// Load the state of `prefix`, if any.
pub fn load(prefix: &str) -> Result<Option<State>> {
    let p = state_path(prefix);
    match std::fs::read_to_string(&p) {
        Ok(s) => {
            let bad = |why: String| {
                Error::Runtime(format!(
                    "{} is not a usable wirespeed partition state ({why}): run `wirespeed partition init --prefix {prefix}` to start over",
                    p.display()
                ))
            };
            let st: State = serde_json::from_str(&s).map_err(|e| bad(e.to_string()))?;
            if st.layout.prefix != prefix
                || st.layout.partitions.iter().any(|q| q.id == 0 || q.id as usize > MAX_PARTITIONS)
            {
                return Err(bad("wrong prefix or partition id out of 1..64".into()));
            }
            Ok(Some(st))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Runtime(format!("cannot read {}: {e}", p.display()))),
    }
}

/// Load the state of `prefix`, or say how to create it.
pub fn load_existing(prefix: &str) -> Result<State> {
    load(prefix)?.ok_or_else(|| {
        Error::Usage(format!(
            "no partitions with prefix '{prefix}': create them first, e.g. `wirespeed partition create --prefix {prefix} -p 1 -c 0 -p 2 -c 1`"
        ))
    })
}

fn save(st: &State) -> Result<()> {
    let dir = run_dir();
    std::fs::create_dir_all(work_dir(&st.layout.prefix))
        .map_err(|e| Error::Runtime(format!("cannot create {}: {e}", dir.display())))?;
    let p = state_path(&st.layout.prefix);
    let tmp = p.with_extension("json.tmp");
    let s = serde_json::to_string_pretty(st).map_err(|e| Error::Runtime(format!("cannot encode state: {e}")))?;
    std::fs::write(&tmp, s + "\n")
        .and_then(|_| std::fs::rename(&tmp, &p))
        .map_err(|e| Error::Runtime(format!("cannot write {}: {e}", p.display())))
}

/// Fail with one line unless the process has CAP_NET_ADMIN; `what` names the subcommand.
pub fn require_net_admin(what: &str) -> Result<()> {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0");
    let ok = sock.map(|s| sys::has_net_admin(std::os::fd::AsRawFd::as_raw_fd(&s))).unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(Error::Runtime(format!(
            "`wirespeed partition {what}` needs CAP_NET_ADMIN (network namespaces, links, cgroups): run it as root, e.g. with sudo"
        )))
    }
}

/// Run `ip ARGS`, returning stdout; failures become one line naming the command.
fn ip(args: &[&str]) -> Result<String> {
    let out = Command::new("ip").args(args).stdin(Stdio::null()).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Runtime("the `ip` command (iproute2) is not installed: apt-get install iproute2".into())
        } else {
            Error::Runtime(format!("cannot run `ip`: {e}"))
        }
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Runtime(format!("`ip {}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())))
    }
}

fn ns_exists(ns: &str) -> bool {
    Path::new("/run/netns").join(ns).exists()
}

fn link_exists(ns: &str, dev: &str) -> bool {
    ns_exists(ns) && ip(&["-n", ns, "link", "show", "dev", dev]).is_ok()
}

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
        return Err(Error::Usage(format!(
            "--mtu {} is not a usable IPv4 MTU: use 68..65535 (9000 for jumbo)",
            layout.mtu
        )));
    }
    if let Some(m) = layout.mem {
        if m < 16 << 20 {
            return Err(Error::Usage(format!("--mem {m} bytes is too small for a partition: use at least 16M")));
        }
    }
    let verdict = match validate(topo, &layout.partitions, layout.share_cpus) {
        Ok(v) => v,
        Err(errs) => return Err(Error::Usage(errs.join("\nwirespeed: "))),
    };
    let mut out = Outcome { lines: verdict.warnings, changed: false };
    let mut deactivated = BTreeSet::new();
    let mut made = Made::default();
    if let Some(old) = load(&layout.prefix)? {
        // Partitions made for a run that still goes on are that run's: never taken over.
        if let Some(o) = old.owner.as_ref().filter(|o| o.alive() && opts.owner.as_ref() != Some(*o)) {
            return Err(Error::Usage(format!(
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
                return Err(Error::Usage(format!(
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
    Err(Error::Usage(format!(
        "{names} already exist{} and {} not made by wirespeed, so partitions '{}' were not created and nothing was changed: choose another --prefix, or remove {} yourself if {} yours to remove (`{}`)",
        if one { "s" } else { "" },
        if one { "was" } else { "were" },
        layout.prefix,
        if one { "it" } else { "them" },
        if one { "it is" } else { "they are" },
        undo.join("; ")
    )))
}

/// One-line description of a layout, like `mkpart -l` would print it.
pub fn describe(l: &Layout) -> String {
    let parts: Vec<String> =
        l.partitions.iter().map(|p| format!("partition {} = cpus {}", p.id, format_cpu_list(&p.cpus))).collect();
    format!("{}; mtu {}", parts.join(", "), l.mtu)
}

/// Record `what` as being made (identity unknown), save, make it with `make`, then record its
/// identity; if `make` fails, the record goes again. The state on disk always names every
/// object that may exist because of us.
fn make_recorded(
    st: &mut State,
    record: impl Fn(&mut Made, Option<Option<Ident>>),
    make: impl FnOnce() -> Result<()>,
    ident: impl FnOnce() -> Option<Ident>,
) -> Result<()> {
    record(&mut st.made, Some(None));
    save(st)?;
    if let Err(e) = make() {
        record(&mut st.made, None);
        save(st)?;
        return Err(e);
    }
    record(&mut st.made, Some(ident()));
    save(st)
}

fn record_ns(ns: &str) -> impl Fn(&mut Made, Option<Option<Ident>>) + '_ {
    move |m, v| match v {
        Some(v) => {
            m.namespaces.insert(ns.to_string(), v);
        }
        None => {
            m.namespaces.remove(ns);
        }
    }
}

fn record_cgroup(dir: &Path) -> impl Fn(&mut Made, Option<Option<Ident>>) + '_ {
    move |m, v| match v {
        Some(v) => {
            m.cgroups.insert(dir.to_path_buf(), v);
        }
        None => {
            m.cgroups.remove(dir);
        }
    }
}

fn foreign_ns(ns: &str, prefix: &str) -> Error {
    Error::Usage(format!(
        "namespace {ns} exists but is not the one wirespeed made for partitions '{prefix}': it is left alone; remove it yourself if it is yours to remove, then `wirespeed partition init --prefix {prefix}`"
    ))
}

fn converge(st: &mut State, daemon_exe: Option<&Path>, out: &mut Outcome) -> Result<()> {
    let l = st.layout.clone();
    for p in &l.partitions {
        let ns = ns_name(&l.prefix, p.id);
        match ns_held(&st.made, &ns) {
            Held::Ours => {}
            Held::Foreign => return Err(foreign_ns(&ns, &l.prefix)),
            Held::Gone => {
                make_recorded(
                    st,
                    record_ns(&ns),
                    || ip(&["netns", "add", &ns]).map(|_| ()),
                    || Ident::of(&ns_path(&ns)),
                )?;
                out.lines.push(format!("partition {}: namespace {ns} created", p.id));
                out.changed = true;
            }
        }
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        ip(&["-n", &ns, "addr", "replace", &format!("{}/32", partition_addr(p.id)), "dev", "lo"])?;
    }
    let mtu = l.mtu.to_string();
    for k in links(&l) {
        let (na, nb) = (ns_name(&l.prefix, k.a), ns_name(&l.prefix, k.b));
        let (da, db) = (link_name(k.b), link_name(k.a));
        let (ea, eb) = (format!("{na}/{da}"), format!("{nb}/{db}"));
        let (xa, xb) = (link_exists(&na, &da), link_exists(&nb, &db));
        for (x, e, ns, dev) in [(xa, &ea, &na, &da), (xb, &eb, &nb, &db)] {
            if x && !st.made.links.contains(e) {
                return Err(Error::Usage(format!(
                    "link {dev} in namespace {ns} was not made by wirespeed: it is left alone; remove it yourself (`ip -n {ns} link del {dev}`) or `wirespeed partition init --prefix {}` and create again",
                    l.prefix
                )));
            }
        }
        if !(xa && xb) {
            // Half a pair is left of one of ours: remove our end, and make the pair again.
            for (x, ns, dev) in [(xa, &na, &da), (xb, &nb, &db)] {
                if x {
                    ip(&["-n", ns, "link", "del", dev])?;
                }
            }
            st.made.links.insert(ea.clone());
            st.made.links.insert(eb.clone());
            save(st)?;
            ip(&[
                "link", "add", &da, "netns", &na, "mtu", &mtu, "type", "veth", "peer", "name", &db, "netns", &nb,
                "mtu", &mtu,
            ])?;
            out.lines.push(format!("link {}-{}: {na}/{da} {} <-> {nb}/{db} {}", k.a, k.b, k.a_addr, k.b_addr));
            out.changed = true;
        }
        for (ns, dev, me, peer) in [(&na, &da, k.a, k.b), (&nb, &db, k.b, k.a)] {
            ip(&["-n", ns, "link", "set", "dev", dev, "mtu", &mtu])?;
            ip(&["-n", ns, "addr", "replace", &format!("{}/30", k.addr_of(me)), "dev", dev])?;
            if !st.deactivated.contains(&me) && !st.deactivated.contains(&peer) {
                ip(&["-n", ns, "link", "set", "dev", dev, "up"])?;
            }
        }
        if !st.deactivated.contains(&k.a) && !st.deactivated.contains(&k.b) {
            routes_for(&l, &k)?;
        }
    }
    for p in &l.partitions {
        cgroups_for(st, p, out)?;
    }
    if let Some(exe) = daemon_exe {
        for p in &l.partitions {
            if daemon_pid(st, p.id).is_none() {
                start_daemon(st, p.id, exe)?;
                out.lines.push(format!("partition {}: heartbeat daemon started", p.id));
                out.changed = true;
            }
        }
    }
    Ok(())
}

fn routes_for(l: &Layout, k: &Link) -> Result<()> {
    for (me, peer) in [(k.a, k.b), (k.b, k.a)] {
        let ns = ns_name(&l.prefix, me);
        ip(&[
            "-n",
            &ns,
            "route",
            "replace",
            &format!("{}/32", partition_addr(peer)),
            "via",
            &k.addr_of(peer).to_string(),
            "dev",
            &link_name(peer),
            "src",
            &partition_addr(me).to_string(),
        ])?;
    }
    Ok(())
}

/// Verify that from every active partition, each active peer's address is routed over their
/// own direct link and nothing else.
pub fn check_routes(st: &State) -> Result<()> {
    let l = &st.layout;
    for k in links(l) {
        if st.deactivated.contains(&k.a) || st.deactivated.contains(&k.b) {
            continue;
        }
        for (me, peer) in [(k.a, k.b), (k.b, k.a)] {
            let ns = ns_name(&l.prefix, me);
            let r = ip(&["-n", &ns, "route", "get", &partition_addr(peer).to_string()])?;
            let want = format!("dev {} ", link_name(peer));
            if !r.contains(&want) {
                return Err(Error::Runtime(format!(
                    "route check failed: in {ns}, {} goes `{}` instead of over {}: run `wirespeed partition init --prefix {}` and create again",
                    partition_addr(peer),
                    r.trim(),
                    link_name(peer),
                    l.prefix
                )));
            }
        }
    }
    Ok(())
}

fn cgroup_dirs(prefix: &str, id: u32) -> [PathBuf; 2] {
    let name = format!("wirespeed-{prefix}-{id}");
    [Path::new("/sys/fs/cgroup/cpuset").join(&name), Path::new("/sys/fs/cgroup/memory").join(&name)]
}

/// Make cgroup directory `dir` (recorded as ours) unless our own already exists; a foreign
/// one of that name is refused. Returns whether it was made now.
fn own_cgroup(st: &mut State, dir: &Path) -> Result<bool> {
    match cgroup_held(&st.made, dir) {
        Held::Ours => Ok(false),
        Held::Foreign => Err(Error::Usage(format!(
            "cgroup {} exists but was not made by wirespeed: it is left alone; remove it yourself (rmdir) if it is yours to remove, or choose another --prefix",
            dir.display()
        ))),
        Held::Gone => {
            make_recorded(
                st,
                record_cgroup(dir),
                || {
                    std::fs::create_dir(dir)
                        .map_err(|e| Error::Runtime(format!("cannot create cgroup {}: {e}", dir.display())))
                },
                || Ident::of(dir),
            )?;
            Ok(true)
        }
    }
}

fn cgroups_for(st: &mut State, p: &PartSpec, out: &mut Outcome) -> Result<()> {
    let [cpuset, memory] = cgroup_dirs(&st.layout.prefix, p.id);
    if Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists() {
        let new = own_cgroup(st, &cpuset)?;
        let mems = std::fs::read_to_string("/sys/fs/cgroup/cpuset/cpuset.mems").unwrap_or_else(|_| "0".into());
        let r = std::fs::write(cpuset.join("cpuset.mems"), mems.trim())
            .and_then(|_| std::fs::write(cpuset.join("cpuset.cpus"), format_cpu_list(&p.cpus)));
        if let Err(e) = r {
            return Err(Error::Runtime(format!("cannot set up cpuset cgroup {}: {e}", cpuset.display())));
        }
        if new {
            out.changed = true;
        }
    } else if !out.lines.iter().any(|l| l.contains("no cgroup v1 cpuset")) {
        out.lines
            .push("warning: no cgroup v1 cpuset controller: CPU sets are applied by affinity in `exec` only".into());
    }
    if let Some(limit) = st.layout.mem {
        if Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists() {
            let new = own_cgroup(st, &memory)?;
            std::fs::write(memory.join("memory.limit_in_bytes"), limit.to_string())
                .map_err(|e| Error::Runtime(format!("cannot set up memory cgroup {}: {e}", memory.display())))?;
            if new {
                out.changed = true;
            }
        } else if !out.lines.iter().any(|l| l.contains("no cgroup v1 memory")) {
            out.lines.push("warning: no cgroup v1 memory controller: --mem is not enforced".into());
        }
    }
    Ok(())
}

/// Put process `pid` into partition `id`'s cgroups (CPU set, memory limit) where they exist
/// and are the ones wirespeed made.
fn join_cgroups(st: &State, id: u32, pid: u32) -> Result<()> {
    for dir in cgroup_dirs(&st.layout.prefix, id) {
        if cgroup_held(&st.made, &dir) == Held::Ours {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())
                .map_err(|e| Error::Runtime(format!("cannot move process {pid} into {}: {e}", dir.display())))?;
        }
    }
    Ok(())
}

fn pid_file(prefix: &str, id: u32) -> PathBuf {
    work_dir(prefix).join(format!("daemon-{id}.pid"))
}

fn hb_file(prefix: &str, id: u32) -> PathBuf {
    work_dir(prefix).join(format!("hb-{id}"))
}

fn view_file(prefix: &str, id: u32) -> PathBuf {
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
fn is_our_daemon(pid: u32, st: &State, id: u32) -> bool {
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

fn start_daemon(st: &State, id: u32, exe: &Path) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let prefix = &st.layout.prefix;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file(prefix, id))
        .map_err(|e| Error::Runtime(format!("cannot open the daemon log: {e}")))?;
    let log2 = log.try_clone().map_err(|e| Error::Runtime(format!("cannot open the daemon log: {e}")))?;
    let ns = ns_name(prefix, id);
    let child = Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(exe)
        .args(["partition", "daemon", &id.to_string(), "--prefix", prefix])
        .args(["--hb-check", &format!("{}ms", st.hb.check_ms), "--hb-misses", &st.hb.misses.to_string()])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(|e| Error::Runtime(format!("cannot start the heartbeat daemon of partition {id}: {e}")))?;
    let pid = child.id();
    // The daemon is not our child to wait for: it outlives this command. Its exit status is
    // collected by init (the process is re-parented when we exit).
    drop(child);
    std::fs::write(pid_file(prefix, id), pid.to_string())
        .map_err(|e| Error::Runtime(format!("cannot write the daemon pid file: {e}")))?;
    join_cgroups(st, id, pid)?;
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
            std::fs::remove_file(&sp).map_err(|e| Error::Runtime(format!("cannot remove {}: {e}", sp.display())))?;
            u.removed.push(format!("unreadable state {} removed ({e})", sp.display()));
            left_alone(prefix, &Made::default(), &mut u, "its record was unreadable");
            return Ok(u);
        }
    };
    let ids: BTreeSet<u32> = st.layout.partitions.iter().map(|p| p.id).collect();
    // Daemons first, so none re-publishes while the rest goes.
    let mut pids = Vec::new();
    for &i in &ids {
        if let Some(pid) = daemon_pid(&st, i) {
            let _ = sys::send_signal(pid, libc::SIGTERM);
            pids.push(pid);
            u.removed.push(format!("partition {i}: daemon {pid} stopped"));
        }
    }
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
    for ns in st.made.namespaces.keys() {
        match ns_held(&st.made, ns) {
            Held::Ours => {
                ip(&["netns", "del", ns])?;
                u.removed.push(format!("namespace {ns} deleted"));
            }
            Held::Foreign => u.kept.push(format!(
                "namespace {ns} left alone: it is not the one wirespeed made (deleted and made again by someone else)"
            )),
            Held::Gone => {}
        }
    }
    for dir in st.made.cgroups.keys() {
        match cgroup_held(&st.made, dir) {
            Held::Ours => {
                let t = Instant::now();
                loop {
                    match std::fs::remove_dir(dir) {
                        Ok(()) => break,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                        Err(_) if t.elapsed() < Duration::from_secs(2) => std::thread::sleep(Duration::from_millis(20)),
                        Err(e) => {
                            return Err(Error::Runtime(format!(
                                "cannot remove cgroup {} ({e}): a process is still in it; kill it and run init again",
                                dir.display()
                            )))
                        }
                    }
                }
                u.removed.push(format!("cgroup {} removed", dir.display()));
            }
            Held::Foreign => u.kept.push(format!(
                "cgroup {} left alone: it is not the one wirespeed made (removed and made again by someone else)",
                dir.display()
            )),
            Held::Gone => {}
        }
    }
    // Our files in the work directory (pid files, heartbeats, views, logs), then the directory
    // if nothing else is in it.
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
    left_alone(prefix, &st.made, &mut u, "wirespeed has no record of making it");
    let _ = std::fs::remove_file(sp.with_extension("json.tmp"));
    if sp.exists() {
        std::fs::remove_file(&sp).map_err(|e| Error::Runtime(format!("cannot remove {}: {e}", sp.display())))?;
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

/// Remove every set of partitions made for one run (a `demo`, `bench` or `ping`) whose run is
/// gone (killed, say, by `kill -9`, so it could not remove them itself). Partitions made by
/// `partition create` have no owner and are never touched. Returns one line per set removed
/// (or that could not be). Needs CAP_NET_ADMIN.
pub fn reap_stale() -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(run_dir()) else { return out };
    let mut prefixes: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).map(str::to_string))
        .filter(|p| check_prefix(p).is_ok())
        .collect();
    prefixes.sort();
    for prefix in prefixes {
        let Ok(Some(st)) = load(&prefix) else { continue };
        let Some(owner) = &st.owner else { continue };
        if owner.alive() {
            continue;
        }
        let who = format!("{} (pid {})", owner.what, owner.pid);
        match init(&prefix) {
            Ok(u) => {
                let n = u.removed.iter().filter(|l| l.starts_with("namespace")).count();
                let mut line = format!(
                    "removed partitions '{prefix}' left behind by {who}, which is gone: {n} namespace(s), their links, cgroups and state"
                );
                if !u.kept.is_empty() {
                    line.push_str(&format!("; {}", u.kept.join("; ")));
                }
                out.push(line);
            }
            Err(e) => out.push(format!("could not remove partitions '{prefix}' left behind by {who}: {e}")),
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie still answers signal 0; start_time counts it as gone.
    sys::proc::start_time(pid).is_some()
}

/// Processes whose network namespace is `ns` (compared by the namespace's inode).
fn ns_pids(ns: &str) -> Vec<u32> {
    let Some(target) = ns_inode(&Path::new("/run/netns").join(ns)) else { return Vec::new() };
    let Ok(rd) = std::fs::read_dir("/proc") else { return Vec::new() };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| ns_inode(Path::new(&format!("/proc/{pid}/ns/net"))) == Some(target))
        .collect()
}

fn cgroup_pids(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn find(st: &State, id: u32) -> Result<&PartSpec> {
    st.layout.partitions.iter().find(|p| p.id == id).ok_or_else(|| {
        let ids: Vec<String> = st.layout.partitions.iter().map(|p| p.id.to_string()).collect();
        Error::Usage(format!(
            "there is no partition {id} (partitions: {}): see `wirespeed partition list`",
            ids.join(", ")
        ))
    })
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
    for p in &st.layout.partitions {
        if p.id != id && link_exists(&ns, &link_name(p.id)) {
            ip(&["-n", &ns, "link", "set", "dev", &link_name(p.id), "down"])?;
        }
    }
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
            return Err(Error::Runtime(format!(
                "partition {id}'s namespace {ns} is gone: run `wirespeed partition create` again to repair it"
            )))
        }
        Held::Foreign => return Err(foreign_ns(&ns, prefix)),
    }
    if cmd.is_empty() {
        return Err(Error::Usage("no command given: write `wirespeed partition exec N -- CMD ARGS...`".into()));
    }
    join_cgroups(&st, id, std::process::id())?;
    let cpus: Vec<usize> = p.cpus.iter().copied().collect();
    sys::set_process_affinity(&cpus)
        .map_err(|e| Error::Runtime(format!("cannot restrict to CPUs {}: {e}", format_cpu_list(&p.cpus))))?;
    let e = Command::new("ip").args(["netns", "exec", &ns]).args(cmd).exec();
    Err(Error::Runtime(format!("cannot run `ip netns exec {ns} {}`: {e}", cmd.join(" "))))
}

/// One partition as `list` and `status` show it.
#[derive(Debug, Clone, Serialize)]
pub struct PartStatus {
    /// Partition id.
    pub id: u32,
    /// Its CPUs, as a list string.
    pub cpus: String,
    /// Its namespace.
    pub namespace: String,
    /// Whether the namespace exists.
    pub namespace_present: bool,
    /// Its stable address.
    pub address: Ipv4Addr,
    /// Its link addresses, by peer id.
    pub links: BTreeMap<u32, Ipv4Addr>,
    /// Deactivated with `deactivate`.
    pub deactivated: bool,
    /// Pid of its running daemon.
    pub daemon_pid: Option<u32>,
    /// Overall state as the other daemons see it: active, inactive, mixed, or unknown.
    pub state: String,
    /// Each live peer daemon's view of this partition.
    pub seen_by: BTreeMap<u32, PeerState>,
}

/// The whole configuration with live state, for `list` and `status --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Namespace prefix.
    pub prefix: String,
    /// Link MTU.
    pub mtu: u32,
    /// Memory limit per partition.
    pub mem: Option<u64>,
    /// Cores shared.
    pub share_cpus: bool,
    /// Heartbeat settings.
    pub hb: HbConfig,
    /// The partitions.
    pub partitions: Vec<PartStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct View {
    id: u32,
    time_ms: u64,
    peers: BTreeMap<u32, PeerState>,
}

fn ns_inode(p: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| m.ino())
}

fn now_ms() -> u64 {
    sys::realtime_ns() / 1_000_000
}

/// Read the configuration and the daemons' views. Needs no privilege.
pub fn status(prefix: &str) -> Result<Status> {
    check_prefix(prefix)?;
    let st = load_existing(prefix)?;
    let l = &st.layout;
    // A view older than a few check intervals belongs to a dead daemon: ignore it.
    let fresh = Duration::from_millis(st.hb.check_ms * 3 + 500).as_millis() as u64;
    // A deactivated partition sees nobody; its view says nothing about the others.
    let views: Vec<View> = l
        .partitions
        .iter()
        .filter(|p| !st.deactivated.contains(&p.id))
        .filter_map(|p| std::fs::read_to_string(view_file(prefix, p.id)).ok())
        .filter_map(|s| serde_json::from_str::<View>(&s).ok())
        .filter(|v| now_ms().saturating_sub(v.time_ms) <= fresh)
        .collect();
    let mut parts = Vec::new();
    for p in &l.partitions {
        let seen_by: BTreeMap<u32, PeerState> =
            views.iter().filter_map(|v| v.peers.get(&p.id).map(|s| (v.id, *s))).collect();
        let daemon = daemon_pid(&st, p.id);
        let states: BTreeSet<PeerState> = seen_by.values().copied().collect();
        let state = if st.deactivated.contains(&p.id) && states.iter().all(|s| *s != PeerState::Active) {
            "inactive (deactivated)".to_string()
        } else if states.len() == 1 {
            states.iter().next().map(|s| s.name().to_string()).unwrap_or_default()
        } else if states.is_empty() {
            match (l.partitions.len(), daemon) {
                (1, Some(_)) => "active".into(),
                (_, Some(_)) => "active (its daemon runs; no active peer is watching it)".into(),
                _ if st.daemons => "unknown (no live daemon has seen it yet)".into(),
                _ => "unknown (no daemons: created with --no-daemons)".into(),
            }
        } else {
            let parts: Vec<String> = seen_by.iter().map(|(j, s)| format!("{} by {j}", s.name())).collect();
            format!("mixed ({})", parts.join(", "))
        };
        let links = l
            .partitions
            .iter()
            .filter(|q| q.id != p.id)
            .map(|q| (q.id, Link::between(p.id, q.id).addr_of(p.id)))
            .collect();
        parts.push(PartStatus {
            id: p.id,
            cpus: format_cpu_list(&p.cpus),
            namespace: ns_name(prefix, p.id),
            namespace_present: ns_exists(&ns_name(prefix, p.id)),
            address: partition_addr(p.id),
            links,
            deactivated: st.deactivated.contains(&p.id),
            daemon_pid: daemon,
            state,
            seen_by,
        });
    }
    Ok(Status {
        schema: SCHEMA,
        prefix: prefix.into(),
        mtu: l.mtu,
        mem: l.mem,
        share_cpus: l.share_cpus,
        hb: st.hb,
        partitions: parts,
    })
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
}

/// Run partition `id`'s heartbeat daemon until stopped (SIGTERM/SIGINT), until its
/// namespace is deleted, or until the configuration is removed by `init`. Console lines
/// (Table 2 wording) go to `console`.
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
        return Err(Error::Usage(format!(
            "the daemon of partition {id} must run inside namespace {ns}: `ip netns exec {ns} wirespeed partition daemon {id} --prefix {prefix}` (create starts it for you)"
        )));
    }
    let _ = std::fs::create_dir_all(work_dir(prefix));
    std::fs::write(pid_file(prefix, id), std::process::id().to_string())
        .map_err(|e| Error::Runtime(format!("cannot write the daemon pid file: {e}")))?;
    let mut watches: BTreeMap<u32, PeerWatch> = BTreeMap::new();
    let mut counter: u64 = 0;
    let mut last_deact = false;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let tick = Instant::now();
        let Some(st) = load(prefix).ok().flatten() else {
            console(&format!("NOTICE: partition {id}: configuration removed; daemon exits"));
            return Ok(());
        };
        if !ns_exists(&ns) || ns_inode(&Path::new("/run/netns").join(&ns)) != my_ns {
            console(&format!("WARNING: partition {id}: namespace {ns} deleted; daemon exits"));
            return Ok(());
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
            let _ = heartbeat::publish(&hb_file(prefix, id), Beat { version: o.version, counter });
        }
        let peers: BTreeSet<u32> = st.layout.partitions.iter().map(|p| p.id).filter(|&p| p != id).collect();
        watches.retain(|k, _| peers.contains(k));
        for &p in &peers {
            let w = watches.entry(p).or_insert_with(|| PeerWatch::new(p));
            // A deactivated partition sees nobody, as with `mkpart -d`.
            let beat = if deact { None } else { heartbeat::read(&hb_file(prefix, p)) };
            if let Some(line) = w.observe(beat, o.misses, o.version) {
                console(&line);
            }
        }
        let view = View { id, time_ms: now_ms(), peers: watches.iter().map(|(k, w)| (*k, w.state)).collect() };
        if let Ok(s) = serde_json::to_string(&view) {
            let vf = view_file(prefix, id);
            let tmp = vf.with_extension("tmp");
            let _ = std::fs::write(&tmp, s).and_then(|_| std::fs::rename(&tmp, &vf));
        }
        while tick.elapsed() < o.check && !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep((o.check - tick.elapsed().min(o.check)).min(Duration::from_millis(50)));
        }
    }
    console(&format!("NOTICE: partition {id}: heartbeat daemon stopped"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_subnets_are_distinct_and_inside_the_benchmark_range() {
        let mut seen = BTreeSet::new();
        for b in 2..=64u32 {
            for a in 1..b {
                let k = Link::between(b, a);
                assert_eq!((k.a, k.b), (a, b));
                let base = u32::from(k.a_addr) - 1;
                assert_eq!(base % 4, 0);
                assert!(seen.insert(base));
                assert_eq!(k.a_addr.octets()[0..2], [198, 18]);
                assert_eq!(k.addr_of(b), k.b_addr);
            }
        }
        assert_eq!(partition_addr(64), Ipv4Addr::new(198, 19, 0, 64));
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(check_prefix("wsp").is_ok());
        assert!(check_prefix("wt123-a").is_ok());
        assert!(check_prefix("wsp1").is_err());
        assert!(check_prefix("").is_err());
        assert!(check_prefix("1abc").is_err());
        assert!(check_prefix("a/b").is_err());
        assert!(check_prefix("abcdefghijklmnopq").is_err());
    }

    #[test]
    fn only_what_was_recorded_as_made_is_ours() {
        let dir = std::env::temp_dir().join(format!("wirespeed-held-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(held(None, &dir), Held::Gone);
        std::fs::create_dir(&dir).unwrap();
        // Someone else's: exists, never recorded.
        assert_eq!(held(None, &dir), Held::Foreign);
        // Recorded just before it was made: ours.
        assert_eq!(held(Some(&None), &dir), Held::Ours);
        let id = Ident::of(&dir);
        assert!(id.is_some());
        assert_eq!(held(Some(&id), &dir), Held::Ours);
        // Removed and made again by someone else: not ours any more.
        std::fs::remove_dir(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        assert_eq!(held(Some(&id), &dir), Held::Foreign);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn an_owner_is_its_pid_and_start_time() {
        let me = Owner::me("test");
        assert!(me.alive());
        assert!(!Owner { start: me.start + 1, ..me.clone() }.alive(), "a reused pid is another process");
    }

    #[test]
    fn full_mesh_has_one_link_per_pair() {
        let l = Layout {
            prefix: "x".into(),
            partitions: (1..=4).map(|i| PartSpec { id: i, cpus: BTreeSet::from([0]) }).collect(),
            mtu: 1500,
            mem: None,
            share_cpus: true,
        };
        assert_eq!(links(&l).len(), 6);
    }
}
