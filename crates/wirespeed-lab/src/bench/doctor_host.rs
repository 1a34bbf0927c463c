//! What `bench doctor` changes on the host for its runs, each undone when its guard is dropped
//! (a panic or an early return included): a sysctl set for a run, the undo script of an applied
//! doctor plan, a temporary directory, and a slow disk made with the device mapper.

use std::path::{Path, PathBuf};
use std::process::Command;
use wirespeed::units;
use wirespeed::{Error, Result};

/// Writes a sysctl's original value back when dropped (also on error and Ctrl-C, which end the
/// run by returning): the host's value is never left changed.
pub(super) struct SysctlGuard {
    path: &'static str,
    original: String,
    done: bool,
}

impl SysctlGuard {
    pub(super) fn set(path: &'static str, value: u64) -> Result<SysctlGuard> {
        let original = read_trim(path)?;
        let g = SysctlGuard { path, original, done: false };
        write_value(path, &value.to_string())?;
        Ok(g)
    }

    pub(super) fn restore(mut self) -> Result<()> {
        self.done = true;
        write_value(self.path, &self.original)
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        if !self.done {
            let _ = write_value(self.path, &self.original);
        }
    }
}

pub(super) fn read_trim(path: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| Error::io(format!("cannot read {path}: {e}")))
}

pub(super) fn read_u64(path: &str) -> Result<u64> {
    let s = read_trim(path)?;
    s.parse().map_err(|_| Error::failed(format!("{path} holds '{s}', not a number")))
}

pub(super) fn write_value(path: &str, v: &str) -> Result<()> {
    std::fs::write(path, v).map_err(|e| Error::io(format!("cannot write {v} to {path}: {e}")))
}

/// Runs the doctor's undo script when dropped unless it already ran: `--apply`'s changes never
/// outlive the bench.
pub(super) struct UndoGuard {
    pub(super) script: Option<PathBuf>,
}

impl UndoGuard {
    pub(super) fn run(&mut self) -> Result<()> {
        match self.script.take() {
            Some(s) => run_undo(&s),
            None => Ok(()),
        }
    }
}

impl Drop for UndoGuard {
    fn drop(&mut self) {
        let _ = self.run();
    }
}

pub(super) fn run_undo(script: &Path) -> Result<()> {
    let out = Command::new("sh")
        .arg(script)
        .output()
        .map_err(|e| Error::failed(format!("cannot run the undo script {}: {e}", script.display())))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::failed(format!(
            "the undo script {} failed: {}",
            script.display(),
            err.lines().last().unwrap_or("no word")
        )));
    }
    Ok(())
}

/// A private directory removed with everything in it when dropped.
pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new(tag: &str) -> Result<TempDir> {
        let p = std::env::temp_dir().join(format!("wirespeed-bench-doctor-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).map_err(|e| Error::io(format!("cannot create {}: {e}", p.display())))?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A slow disk: a loop device on a sparse file, formatted ext4, mounted, its writes throttled
/// with the blkio controller (cgroup v1, `blkio.throttle.write_bps_device` of the root group,
/// which limits that one device for every process). All of it undone when dropped.
pub(super) struct SlowDisk {
    dir: TempDir,
    loopdev: Option<String>,
    majmin: Option<String>,
    mounted: bool,
}

pub(super) const THROTTLE: &str = "/sys/fs/cgroup/blkio/blkio.throttle.write_bps_device";

impl SlowDisk {
    pub(super) fn make(bps: u64) -> Result<SlowDisk> {
        if !Path::new(THROTTLE).exists() {
            return Err(Error::io(format!("{THROTTLE} is not there (no cgroup v1 blkio): no slow disk")));
        }
        let mut d = SlowDisk { dir: TempDir::new("disk")?, loopdev: None, majmin: None, mounted: false };
        let img = d.dir.0.join("disk.img");
        let f = std::fs::File::create(&img).map_err(|e| Error::io(format!("cannot create {}: {e}", img.display())))?;
        f.set_len(2 << 30).map_err(|e| Error::failed(format!("cannot size {}: {e}", img.display())))?;
        let dev = tool("losetup", &["-f", "--show", &img.display().to_string()])?;
        d.loopdev = Some(dev.clone());
        tool("mkfs.ext4", &["-q", "-F", &dev])?;
        let mnt = d.mount_point();
        std::fs::create_dir_all(&mnt).map_err(|e| Error::io(format!("cannot create {}: {e}", mnt.display())))?;
        tool("mount", &[&dev, &mnt.display().to_string()])?;
        d.mounted = true;
        let mm = tool("lsblk", &["-dno", "MAJ:MIN", &dev])?.replace(' ', "");
        write_value(THROTTLE, &format!("{mm} {bps}"))?;
        d.majmin = Some(mm);
        Ok(d)
    }

    pub(super) fn mount_point(&self) -> PathBuf {
        self.dir.0.join("mnt")
    }

    pub(super) fn describe(&self, bps: u64) -> String {
        format!(
            "{} (a loop device on a sparse file, ext4) mounted at {}, writes throttled to {}/s by cgroup v1 blkio.throttle.write_bps_device",
            self.loopdev.as_deref().unwrap_or("?"),
            self.mount_point().display(),
            units::bytes(bps)
        )
    }
}

impl Drop for SlowDisk {
    fn drop(&mut self) {
        if let Some(mm) = &self.majmin {
            let _ = write_value(THROTTLE, &format!("{mm} 0"));
        }
        if self.mounted {
            let _ = tool("umount", &[&self.mount_point().display().to_string()]);
        }
        if let Some(dev) = &self.loopdev {
            let _ = tool("losetup", &["-d", dev]);
        }
    }
}

pub(super) fn tool(program: &str, args: &[&str]) -> Result<String> {
    let out =
        Command::new(program).args(args).output().map_err(|e| Error::failed(format!("cannot run {program}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::failed(format!(
            "{program} {} failed: {}",
            args.join(" "),
            err.lines().last().unwrap_or("no word").trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
