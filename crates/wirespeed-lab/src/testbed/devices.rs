//! Where the raw devices of the partitions are seen, and what they leave behind.
//!
//! Each partition's daemon mounts its devices on the host at [`xplink::mount_dir`] (the host
//! sees every partition's at once, so the local id is in the path). A command run by
//! `partition exec N` gets a mount namespace of its own in which the same directory is also at
//! the seed's path, `/hw/xplink`: a tmpfs on `/hw` that only that namespace sees, with the
//! devices bound inside. The host keeps one empty directory `/hw` as the mount point, made by
//! `create` (and recorded as made, so `init` removes it, unless another configuration still
//! uses it). A daemon killed without unmounting leaves a dead FUSE mount; `create` and `init`
//! detach it (only a FUSE mount at our own path is ever detached).

use super::state::{run_dir, Ident, State};
use super::xplink;
use super::Undone;
use std::path::{Path, PathBuf};
use wirespeed::{sys, Error, Result};

/// The host directory `partition exec` mounts its private device view on.
pub(super) fn hw_root() -> PathBuf {
    PathBuf::from(xplink::EXEC_PATH).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/hw"))
}

/// The record that wirespeed made `/hw` (its identity), shared by every configuration: the
/// directory is one mount point for all of them, removed by the `init` that leaves none.
fn hw_marker() -> PathBuf {
    run_dir().join("hw.made")
}

/// Make `/hw` if it is missing, and record that wirespeed made it.
pub(super) fn ensure_hw() -> Result<()> {
    let hw = hw_root();
    if hw.is_dir() {
        return Ok(());
    }
    match std::fs::create_dir(&hw) {
        Ok(()) => {}
        // Another configuration's create or exec made it a moment ago: it records it.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && hw.is_dir() => return Ok(()),
        Err(e) => {
            return Err(Error::failed(format!(
                "cannot make {} (where `partition exec` shows the raw devices): {e}",
                hw.display()
            )))
        }
    }
    let id = Ident::of(&hw);
    let _ = std::fs::create_dir_all(run_dir());
    std::fs::write(hw_marker(), serde_json::to_string(&id).unwrap_or_default())
        .map_err(|e| Error::failed(format!("cannot record that {} was made: {e}", hw.display())))
}

/// Whether a FUSE filesystem (a daemon's devices, live or dead) is mounted at `dir`.
pub(super) fn fuse_at(dir: &Path) -> bool {
    sys::mount::mounted_type(dir).is_some_and(|t| t == "fuse" || t.starts_with("fuse."))
}

/// Detach a dead daemon's device mount of partition `id`, if one is left.
pub(super) fn detach_stale(prefix: &str, id: u32) -> Option<String> {
    let dir = xplink::mount_dir(prefix, id);
    match xplink::detach_stale(&dir) {
        Ok(true) => Some(format!("partition {id}: devices of a daemon that is gone detached from {}", dir.display())),
        Ok(false) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// In this process (about to exec a partition's command): a mount namespace of its own with
/// partition `id`'s devices at `/hw/xplink`. Without devices (no daemon) nothing is done.
pub(super) fn exec_view(prefix: &str, id: u32) -> Result<()> {
    let dir = xplink::mount_dir(prefix, id);
    let hw = hw_root();
    if !fuse_at(&dir) {
        return Ok(());
    }
    // The last `init` of another configuration may have removed it since this one's create.
    ensure_hw()?;
    let fail = |what: &str, e: std::io::Error| {
        Error::failed(format!("cannot show partition {id}'s raw devices at {}: {what}: {e}", xplink::EXEC_PATH))
    };
    sys::mount::private_mount_ns().map_err(|e| fail("own mount namespace", e))?;
    sys::mount::mount_tmpfs(&hw, "64k").map_err(|e| fail("tmpfs", e))?;
    let target = PathBuf::from(xplink::EXEC_PATH);
    std::fs::create_dir_all(&target).map_err(|e| fail("mkdir", e))?;
    sys::mount::bind_mount(&dir, &target).map_err(|e| fail("bind", e))?;
    Ok(())
}

/// For `init`: detach dead device mounts, remove the devices' and XPC's directories and files
/// under the run directory, and `/hw` if this configuration made it and no other still exists.
pub(super) fn remove(st: &State, u: &mut Undone) {
    let prefix = st.layout.prefix.clone();
    let wd = run_dir().join(&prefix);
    for p in &st.layout.partitions {
        if let Some(l) = detach_stale(&prefix, p.id) {
            u.removed.push(l);
        }
        let dir = xplink::mount_dir(&prefix, p.id);
        if dir.is_dir() && !fuse_at(&dir) && std::fs::remove_dir(&dir).is_ok() {
            let _ = std::fs::remove_dir(wd.join(p.id.to_string()));
        }
    }
    let xpc = crate::xpc::dir(&prefix);
    if let Ok(rd) = std::fs::read_dir(&xpc) {
        let mut n = 0;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let ours = ["part-", "ch-", ".part-", ".ch-"].iter().any(|p| name.starts_with(p));
            if ours && std::fs::remove_file(e.path()).is_ok() {
                n += 1;
            }
        }
        if std::fs::remove_dir(&xpc).is_ok() || n > 0 {
            u.removed.push(format!("XPC pages and channels removed ({n} files)"));
        }
    }
    // The shared mount point goes with the last configuration, if wirespeed made it.
    let hw = hw_root();
    let ours = std::fs::read_to_string(hw_marker())
        .ok()
        .and_then(|s| serde_json::from_str::<Option<Ident>>(&s).ok().flatten())
        .is_some_and(|id| Ident::of(&hw) == Some(id));
    if ours && other_configs(&prefix).is_empty() {
        if std::fs::remove_dir(&hw).is_ok() {
            u.removed.push(format!("directory {} removed", hw.display()));
        } else {
            u.kept.push(format!("directory {} left: it is not empty", hw.display()));
        }
        let _ = std::fs::remove_file(hw_marker());
    }
}

/// Prefixes of the other configurations on this host.
fn other_configs(prefix: &str) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(run_dir()) else { return Vec::new() };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).map(str::to_string))
        .filter(|p| p != prefix && !p.contains('.'))
        .collect()
}
