//! The system calls under the raw devices' FUSE filesystem (the lab crate's `testbed::xplink`): opening
//! `/dev/fuse`, mount(2) with that descriptor, and the lazy unmount that never waits for a
//! busy reader. The protocol itself is plain reads and writes on the descriptor, in safe code.

use super::cvt;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Whether this process runs with effective uid 0 (mounting FUSE without a setuid helper needs it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Open `/dev/fuse` read-write, non-blocking (the serving loop polls it, so a stop request is
/// seen within one poll timeout) and close-on-exec.
pub fn open_dev() -> io::Result<File> {
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open("/dev/fuse")
}

fn cstr(s: &[u8]) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Mount a FUSE filesystem served through `dev` at `target` (nosuid, nodev), with `options`
/// appended to the mandatory `fd=`, `rootmode=`, `user_id=` and `group_id=`.
pub fn mount(dev: &File, target: &Path, fstype: &str, options: &str) -> io::Result<()> {
    let data = format!("fd={},rootmode=40000,user_id=0,group_id=0,{options}", dev.as_raw_fd());
    let source = cstr(b"wirespeed")?;
    let target = cstr(target.as_os_str().as_bytes())?;
    let fstype = cstr(fstype.as_bytes())?;
    let data = cstr(data.as_bytes())?;
    // SAFETY: all four pointers are NUL-terminated strings owned by this frame and alive for
    // the call; the kernel copies them.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    cvt(r).map(|_| ())
}
