//! File-system calls the recorder needs beyond std: O_DIRECT recording files (created new,
//! switched off for the unaligned tail), space reserved ahead of the writes, free space, and a
//! rename that never replaces a file that is not its own.

use std::ffi::CString;
use std::io;
use std::mem::zeroed;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::cvt;

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// Rename `from` to `to`, failing with `AlreadyExists` (EEXIST) when `to` exists, atomically:
/// two recorders finishing files of the same name in one directory must never overwrite each
/// other. Uses renameat2(RENAME_NOREPLACE); where the filesystem lacks it (EINVAL, ENOSYS), a
/// hard link (which also refuses an existing target) and the removal of the old name.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let (f, t) = (c_path(from)?, c_path(to)?);
    // SAFETY: both pointers are NUL-terminated strings owned by `f` and `t`, alive for the
    // call; AT_FDCWD makes relative paths relative to the working directory, as rename(2).
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), libc::RENAME_NOREPLACE) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            std::fs::hard_link(from, to)?;
            std::fs::remove_file(from)
        }
        _ => Err(e),
    }
}

/// Open `path` for a recording: created new (never overwriting), write-only, with O_DIRECT
/// when the filesystem allows it. Returns the file and whether O_DIRECT is on; tmpfs and some
/// other filesystems refuse O_DIRECT with EINVAL, and the caller then says so once.
pub fn create_direct(path: &Path, direct: bool) -> io::Result<(std::fs::File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |flags: libc::c_int| {
        std::fs::OpenOptions::new().write(true).create_new(true).custom_flags(flags).mode(0o644).open(path)
    };
    if direct {
        match open(libc::O_DIRECT) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    open(0).map(|f| (f, false))
}

/// Switch O_DIRECT off on an open file, for the unaligned tail of a recording.
pub fn clear_direct(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own; flags are plain integers.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) })?;
    Ok(())
}

/// Reserve disk space for `len` bytes from `offset` without changing the file size, so that
/// writes into it cannot fail for lack of space and the file stays contiguous. Filesystems
/// without fallocate report EOPNOTSUPP, which callers may ignore.
pub fn preallocate(fd: RawFd, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate takes integers only; failure is reported through the return value.
    let r = unsafe { libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, offset as libc::off_t, len as libc::off_t) };
    cvt(r).map(|_| ())
}

/// The filesystem statistics of the filesystem holding `path`.
fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: statvfs is plain old data for which all-zero is valid.
    let mut s: libc::statvfs = unsafe { zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a valid out-pointer.
    cvt(unsafe { libc::statvfs(c.as_ptr(), &mut s) })?;
    Ok(s)
}

/// Free space on the filesystem holding `path`, bytes available to this user.
pub fn free_space(path: &Path) -> io::Result<u64> {
    let s = statvfs(path)?;
    Ok((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

/// Total size of the filesystem holding `path`, and the bytes available to this user: what
/// `record --keep-free 10%` measures its share against, and how full `wirespeed recordings`
/// shows a disk.
pub fn space(path: &Path) -> io::Result<(u64, u64)> {
    let s = statvfs(path)?;
    let f = s.f_frsize as u64;
    Ok(((s.f_blocks as u64).saturating_mul(f), (s.f_bavail as u64).saturating_mul(f)))
}

/// Mark a recorded file as being read (a shared `flock`), so that a recorder's retention
/// (`record --keep-free`) passes it over instead of deleting it under the reader. Readers
/// share the lock; it goes with the descriptor. A file whose filesystem has no locks is read
/// unlocked (`Ok(false)`).
pub fn lock_shared(f: &std::fs::File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `f` owns; the flags are plain integers.
    match cvt(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH) }) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Take a recorded file for deletion: an exclusive `flock` without waiting. `false` when a
/// reader holds it ([`lock_shared`]).
pub fn try_lock_exclusive(f: &std::fs::File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor `f` owns; the flags are plain integers.
    match cvt(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(false),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP)) => Ok(true),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_noreplace_keeps_the_existing_file() {
        let d = std::env::temp_dir().join(format!("ws-rename-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let (a, b, c) = (d.join("a"), d.join("b"), d.join("c"));
        std::fs::write(&a, b"mine").unwrap();
        std::fs::write(&b, b"theirs").unwrap();
        let e = rename_noreplace(&a, &b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&b).unwrap(), b"theirs");
        rename_noreplace(&a, &c).unwrap();
        assert_eq!(std::fs::read(&c).unwrap(), b"mine");
        assert!(!a.exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
