//! The state file of a configuration and the ownership records in it.
//!
//! `/run/wirespeed/PREFIX.json` holds what `create` was asked for ([`Layout`]), the heartbeat
//! settings, which partitions are deactivated, what wirespeed made on the host ([`Made`], each
//! namespace and cgroup with its [`Ident`]) and, for partitions made for one run, the run that
//! owns them ([`Owner`]). Everything that removes something asks this record first: what it
//! does not name as made, and made by the identity still there, is someone else's and stays.
//! [`reap_stale`] removes the sets whose owner is gone.

use super::topology::{format_cpu_list, PartSpec, MAX_PARTITIONS};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use wirespeed::{sys, Error, Result};

/// Schema name of the state file and of `status --json`.
pub const SCHEMA: &str = "wirespeed.partition/1";

pub use crate::run_dir;

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
    pub(super) fn of(p: &Path) -> Option<Ident> {
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
pub(super) enum Held {
    /// It exists and is the one recorded as made.
    Ours,
    /// Nothing of that name exists.
    Gone,
    /// Something of that name exists that wirespeed did not make (or not this one).
    Foreign,
}

/// Whether the object at `path` is the one `recorded` (the entry in [`Made`], if any) names.
pub(super) fn held(recorded: Option<&Option<Ident>>, path: &Path) -> Held {
    let Some(now) = Ident::of(path) else { return Held::Gone };
    match recorded {
        // Recorded just before it was made, and the run stopped before its identity was.
        Some(None) => Held::Ours,
        Some(Some(id)) if *id == now => Held::Ours,
        _ => Held::Foreign,
    }
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
        Err(Error::invalid(format!(
            "--prefix '{p}' is not usable: 1-16 characters of a-z, 0-9 and -, starting with a letter and not ending with a digit"
        )))
    }
}

/// The state file of `prefix`.
pub(super) fn state_path(prefix: &str) -> PathBuf {
    run_dir().join(format!("{prefix}.json"))
}

/// The directory of `prefix`'s daemon files (pid, log, heartbeat, view).
pub(super) fn work_dir(prefix: &str) -> PathBuf {
    run_dir().join(prefix)
}

/// Load the state of `prefix`, if any.
pub fn load(prefix: &str) -> Result<Option<State>> {
    let p = state_path(prefix);
    match std::fs::read_to_string(&p) {
        Ok(s) => {
            let bad = |why: String| {
                Error::failed(format!(
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
        Err(e) => Err(Error::io(format!("cannot read {}: {e}", p.display()))),
    }
}

/// Load the state of `prefix`, or say how to create it.
pub fn load_existing(prefix: &str) -> Result<State> {
    load(prefix)?.ok_or_else(|| {
        Error::invalid(format!(
            "no partitions with prefix '{prefix}': create them first, e.g. `wirespeed partition create --prefix {prefix} -p 1 -c 0 -p 2 -c 1`"
        ))
    })
}

/// Write the state atomically (temporary file, then rename), making the work directory.
pub(super) fn save(st: &State) -> Result<()> {
    let dir = run_dir();
    std::fs::create_dir_all(work_dir(&st.layout.prefix))
        .map_err(|e| Error::io(format!("cannot create {}: {e}", dir.display())))?;
    let p = state_path(&st.layout.prefix);
    let tmp = p.with_extension("json.tmp");
    let s = serde_json::to_string_pretty(st).map_err(|e| Error::failed(format!("cannot encode state: {e}")))?;
    std::fs::write(&tmp, s + "\n")
        .and_then(|_| std::fs::rename(&tmp, &p))
        .map_err(|e| Error::io(format!("cannot write {}: {e}", p.display())))
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
pub(super) fn make_recorded(
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
        match super::init(&prefix) {
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

/// Whether process `pid` runs (a zombie counts as gone).
pub(super) fn alive(pid: u32) -> bool {
    // A zombie still answers signal 0; start_time counts it as gone.
    sys::proc::start_time(pid).is_some()
}

/// Partition `id` of `st`, or a usage error listing the ones there are.
pub(super) fn find(st: &State, id: u32) -> Result<&PartSpec> {
    st.layout.partitions.iter().find(|p| p.id == id).ok_or_else(|| {
        let ids: Vec<String> = st.layout.partitions.iter().map(|p| p.id.to_string()).collect();
        Error::invalid(format!(
            "there is no partition {id} (partitions: {}): see `wirespeed partition list`",
            ids.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
