//! The CPU set and memory limit of each partition: a cgroup v1 directory per partition under
//! the `cpuset` (and, with `--mem`, the `memory`) controller, named `wirespeed-PREFIX-N`.
//!
//! A few files written by hand (`cpuset.cpus`, `cpuset.mems`, `memory.limit_in_bytes`,
//! `cgroup.procs`): the whole interface this needs. Where a controller is missing, the CPU set
//! is applied by affinity in `exec` and the limit is not enforced, each said in a warning.

use super::state::{held, make_recorded, Held, Ident, Made, State};
use super::topology::{format_cpu_list, PartSpec};
use super::{Outcome, Undone};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wirespeed::{Error, Result};

/// Whether cgroup directory `dir` is the one `made` records.
pub(super) fn cgroup_held(made: &Made, dir: &Path) -> Held {
    held(made.cgroups.get(dir), dir)
}

/// Records cgroup directory `dir` in [`Made`] (for [`make_recorded`]).
pub(super) fn record_cgroup(dir: &Path) -> impl Fn(&mut Made, Option<Option<Ident>>) + '_ {
    move |m, v| match v {
        Some(v) => {
            m.cgroups.insert(dir.to_path_buf(), v);
        }
        None => {
            m.cgroups.remove(dir);
        }
    }
}

/// Partition `id`'s cpuset and memory cgroup directories.
pub(super) fn cgroup_dirs(prefix: &str, id: u32) -> [PathBuf; 2] {
    let name = format!("wirespeed-{prefix}-{id}");
    [Path::new("/sys/fs/cgroup/cpuset").join(&name), Path::new("/sys/fs/cgroup/memory").join(&name)]
}

/// Make cgroup directory `dir` (recorded as ours) unless our own already exists; a foreign
/// one of that name is refused. Returns whether it was made now.
pub(super) fn own_cgroup(st: &mut State, dir: &Path) -> Result<bool> {
    match cgroup_held(&st.made, dir) {
        Held::Ours => Ok(false),
        Held::Foreign => Err(Error::invalid(format!(
            "cgroup {} exists but was not made by wirespeed: it is left alone; remove it yourself (rmdir) if it is yours to remove, or choose another --prefix",
            dir.display()
        ))),
        Held::Gone => {
            make_recorded(
                st,
                record_cgroup(dir),
                || {
                    std::fs::create_dir(dir)
                        .map_err(|e| Error::io(format!("cannot create cgroup {}: {e}", dir.display())))
                },
                || Ident::of(dir),
            )?;
            Ok(true)
        }
    }
}

/// Make (or keep) partition `p`'s cgroups and write its CPU set and memory limit.
pub(super) fn cgroups_for(st: &mut State, p: &PartSpec, out: &mut Outcome) -> Result<()> {
    let [cpuset, memory] = cgroup_dirs(&st.layout.prefix, p.id);
    if Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists() {
        let new = own_cgroup(st, &cpuset)?;
        let mems = std::fs::read_to_string("/sys/fs/cgroup/cpuset/cpuset.mems").unwrap_or_else(|_| "0".into());
        let r = std::fs::write(cpuset.join("cpuset.mems"), mems.trim())
            .and_then(|_| std::fs::write(cpuset.join("cpuset.cpus"), format_cpu_list(&p.cpus)));
        if let Err(e) = r {
            return Err(Error::failed(format!("cannot set up cpuset cgroup {}: {e}", cpuset.display())));
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
                .map_err(|e| Error::failed(format!("cannot set up memory cgroup {}: {e}", memory.display())))?;
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
pub(super) fn join_cgroups(st: &State, id: u32, pid: u32) -> Result<()> {
    for dir in cgroup_dirs(&st.layout.prefix, id) {
        if cgroup_held(&st.made, &dir) == Held::Ours {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())
                .map_err(|e| Error::failed(format!("cannot move process {pid} into {}: {e}", dir.display())))?;
        }
    }
    Ok(())
}

/// Processes in cgroup `dir`.
pub(super) fn cgroup_pids(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Remove every cgroup directory `st` records as made and still ours, waiting up to 2 s for
/// the kernel to let the last killed process go; one replaced by someone else's is left alone
/// and named in `u.kept`.
pub(super) fn remove(st: &State, u: &mut Undone) -> Result<()> {
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
                            return Err(Error::io(format!(
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
    Ok(())
}
