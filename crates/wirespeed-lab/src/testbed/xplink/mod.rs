//! The raw devices of seed 000's `cl` driver (6.2): for every activated remote partition, 16
//! point-to-point byte streams `raw/<remote>/<nn>` (nn = 00..0f) that `cat`, `dd`, shell
//! redirection and select/poll use like any file, served by the partition daemon.
//!
//! [`Devices`] mounts them as a FUSE filesystem over any [`DevLink`] (XPC in the daemon);
//! [`MemLink`] is the in-memory link tests use in its place; [`enter_view`] shows them at
//! the seed's own path [`EXEC_PATH`] to a command run inside a partition.

use std::io;
use std::time::Duration;

/// Number of raw devices per remote partition (seed 000: 00..0f).
pub const DEVICES: u8 = 16;

/// What the raw devices need from the transport that carries their bytes to the remote
/// partitions (XPC in the daemon, an in-memory loop in tests). One value serves every remote
/// and device of one local partition; it is shared by the filesystem's threads.
///
/// Byte-stream semantics: bytes sent on (r, d) arrive in order on the remote's device
/// (this partition's id, d); an end-of-stream marker sent when the last writer of a device
/// closes it reaches the remote reader as one `Ok(Some(0))` after the bytes before it.
pub trait DevLink: Send + Sync + 'static {
    /// Remote partitions whose devices exist (they appear on first activation and stay).
    fn remotes(&self) -> Vec<u32>;
    /// Queue bytes for remote `r`, device `d`: returns how many were taken, 0 when flow control
    /// says the link is full (retry after [`DevLink::wait`]). An error (ENOTCONN, with a clear
    /// message) when the remote is deactivated or gone: never a hang.
    fn send(&self, r: u32, d: u8, data: &[u8]) -> io::Result<usize>;
    /// Queue the end-of-stream marker: `Ok(false)` when full (retry), error as for `send`.
    fn send_eof(&self, r: u32, d: u8) -> io::Result<bool>;
    /// Take arrived bytes for (r, d): `Ok(Some(n > 0))` bytes, `Ok(Some(0))` one end-of-stream
    /// marker, `Ok(None)` nothing yet; an error when the remote is deactivated or gone and
    /// nothing is left to read.
    fn recv(&self, r: u32, d: u8, buf: &mut [u8]) -> io::Result<Option<usize>>;
    /// Block until something may have changed (bytes arrived, space freed, a remote came or
    /// went) or `timeout` passed. Spurious returns are allowed; missed wakeups are not.
    fn wait(&self, timeout: Duration);
}

/// Where partition `local`'s daemon mounts its devices on the host:
/// `/run/wirespeed/PREFIX/N/xplink` (holding `raw/<remote>/<nn>`). The local partition is in the
/// host's path because the host sees every partition's devices at once; inside
/// `partition exec N` the same directory is also at [`EXEC_PATH`].
pub fn mount_dir(prefix: &str, local: u32) -> std::path::PathBuf {
    super::run_dir().join(prefix).join(local.to_string()).join("xplink")
}

/// The seed's own path of the devices, as a command run by `partition exec` sees them.
pub const EXEC_PATH: &str = "/hw/xplink";

/// Name of a remote partition's directory (`02`) and of a device (`0f`), as the seed lists them.
pub fn remote_name(remote: u32) -> String {
    format!("{remote:02}")
}

/// Name of device `d` (00..0f).
pub fn device_name(d: u8) -> String {
    format!("{d:02x}")
}

/// Host path of device `d` to `remote`, seen from partition `local`.
pub fn device_path(prefix: &str, local: u32, remote: u32, d: u8) -> std::path::PathBuf {
    mount_dir(prefix, local).join("raw").join(remote_name(remote)).join(device_name(d))
}

mod abi;
mod fs;
mod memlink;
pub mod xpc;

pub use fs::{detach_stale, Devices, MAX_IO};
pub use memlink::MemLink;

/// Show the mounted devices directory `devices` at `at` to this thread and what it runs next,
/// in a mount namespace of its own (the host's view is unchanged). `partition exec` does the
/// same at [`EXEC_PATH`] over a private tmpfs, so that nothing is made on the host.
pub fn enter_view(devices: &std::path::Path, at: &std::path::Path) -> wirespeed::Result<()> {
    use wirespeed::error::Error;
    if !devices.join("raw").is_dir() {
        return Err(Error::failed(format!(
            "no raw devices are mounted at {}: is the partition's daemon running (`wirespeed partition status`)?",
            devices.display()
        )));
    }
    wirespeed::sys::mount::private_mount_ns()
        .map_err(|e| Error::permission(format!("cannot give the command its own mount namespace (needs root): {e}")))?;
    std::fs::create_dir_all(at).map_err(|e| Error::io(format!("cannot create {}: {e}", at.display())))?;
    wirespeed::sys::mount::bind_mount(devices, at).map_err(|e| {
        Error::failed(format!("cannot show the raw devices {} at {}: {e}", devices.display(), at.display()))
    })
}
