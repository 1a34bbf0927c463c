//! File-system calls the recorder needs beyond std: a rename that never replaces a file that
//! is not its own.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

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
