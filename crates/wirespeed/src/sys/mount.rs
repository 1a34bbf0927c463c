//! Mount namespaces and mounts, for the lab: how `partition exec` shows a partition its raw devices at the
//! seed's own path (`/hw/xplink`) without that path existing for anyone else, and how a dead
//! daemon's device mount is taken away.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL"))
}

/// Give this process a mount namespace of its own, in which the host's later mounts still
/// appear (slave propagation) but its own never leave. Must run before any thread starts.
pub fn private_mount_ns() -> io::Result<()> {
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let root = cpath(Path::new("/"))?;
    // SAFETY: valid NUL-terminated path; null source, type and data are allowed for a
    // propagation change.
    let r = unsafe {
        libc::mount(std::ptr::null(), root.as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_SLAVE, std::ptr::null())
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Mount a small tmpfs at `dir` (in this process's mount namespace).
pub fn mount_tmpfs(dir: &Path, size: &str) -> io::Result<()> {
    let (src, target, fstype) = (CString::new("wirespeed")?, cpath(dir)?, CString::new("tmpfs")?);
    let data = CString::new(format!("size={size},mode=0755"))?;
    // SAFETY: every pointer is a valid NUL-terminated string that outlives the call.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Bind `src` onto `dst` (both existing directories).
pub fn bind_mount(src: &Path, dst: &Path) -> io::Result<()> {
    let (s, d) = (cpath(src)?, cpath(dst)?);
    // SAFETY: valid NUL-terminated paths; null type and data are allowed for a bind mount.
    let r = unsafe { libc::mount(s.as_ptr(), d.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Detach the mount at `dir` now, even if busy (its users get errors, never a hang).
pub fn detach(dir: &Path) -> io::Result<()> {
    let d = cpath(dir)?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::umount2(d.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The filesystem type mounted exactly at `dir` in this process's mount namespace, if any
/// (from `/proc/self/mountinfo`; octal escapes in paths decoded).
pub fn mounted_type(dir: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = dir.as_os_str().as_bytes();
    let mut found = None;
    for line in info.lines() {
        let (left, right) = line.split_once(" - ")?;
        let mp = left.split(' ').nth(4)?;
        if unescape(mp) == want {
            // The last mount on a path is the one visible.
            found = right.split(' ').next().map(str::to_string);
        }
    }
    found
}

fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = u32::from(b[i + 1] - b'0') * 64 + u32::from(b[i + 2] - b'0') * 8 + u32::from(b[i + 3] - b'0');
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape(r"/run/a\040b"), b"/run/a b".to_vec());
        assert_eq!(unescape("/plain"), b"/plain".to_vec());
        assert_eq!(unescape(r"/x\\"), br"/x\\".to_vec());
    }

    #[test]
    fn the_root_is_mounted() {
        assert!(mounted_type(Path::new("/")).is_some());
        assert!(mounted_type(Path::new("/surely/not/a/mount/point")).is_none());
    }
}
