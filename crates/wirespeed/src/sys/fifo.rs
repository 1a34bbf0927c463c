//! Named pipes, for the lab: `bench ttcp`'s pipe reference for Table 3 is a FIFO that its two `ttcp`
//! children open by path, exactly as they open a raw device, so the pipe and the devices are
//! measured by the same code.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::cvt;

/// Make a FIFO at `path` with permission bits `mode` (less the umask); fails with
/// `AlreadyExists` when something is there already (it is never replaced).
pub fn make_fifo(path: &Path, mode: u32) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `c` is a NUL-terminated string alive for the call; mkfifo reads it only.
    cvt(unsafe { libc::mkfifo(c.as_ptr(), mode as libc::mode_t) }).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    #[test]
    fn a_fifo_is_made_once() {
        let p = std::env::temp_dir().join(format!("ws-fifo-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        make_fifo(&p, 0o600).unwrap();
        assert!(std::fs::metadata(&p).unwrap().file_type().is_fifo());
        assert_eq!(make_fifo(&p, 0o600).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        std::fs::remove_file(&p).unwrap();
    }
}
