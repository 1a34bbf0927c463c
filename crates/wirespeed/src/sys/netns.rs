//! Network namespaces as one thread sees them (the lab's doctor and tests use it).
//!
//! `/proc/sys/net` and the ethtool ioctls answer for the network namespace of the *thread* that
//! asks, so a test can point `doctor --apply` at a throwaway namespace by running it on a thread
//! that joined one, and `--apply` can tell a user that a host-wide key is read-only because the
//! process is not in the host's namespace.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

/// Move the calling thread (only it: the rest of the process stays where it is) into the
/// network namespace `ns`, an open `/run/netns/NAME` or `/proc/PID/ns/net`.
///
/// Needs CAP_SYS_ADMIN. Sockets the thread opens afterwards, and the `/proc/sys/net` files it
/// opens, belong to that namespace; files already open keep theirs.
pub fn enter_thread(ns: &File) -> io::Result<()> {
    // SAFETY: setns takes a descriptor and a flag and touches no memory of ours; `ns` is a
    // borrowed open file, so the descriptor is valid for the call. With CLONE_NEWNET it changes
    // only the calling thread's namespace, which no other thread relies on.
    super::cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(|_| ())
}

/// The calling thread's network namespace as the kernel names it (`net:[4026531840]`), or
/// `None` when `/proc` cannot say.
pub fn current_id() -> Option<String> {
    let p = std::fs::read_link("/proc/thread-self/ns/net").or_else(|_| std::fs::read_link("/proc/self/ns/net")).ok()?;
    Some(p.to_string_lossy().into_owned())
}

/// Whether the calling thread is in the host's network namespace (the kernel's first, `init_net`),
/// comparing the device and inode of namespace files. The host's is read from kthreadd (pid 2:
/// kernel threads are always in it, and it is pid 2 only in the host's process namespace), else
/// from process 1 (outside a container, in the host's; some sandboxes refuse to show it even to
/// root). `None` when neither can be looked at.
pub fn is_init() -> Option<bool> {
    let me = std::fs::metadata("/proc/thread-self/ns/net").or_else(|_| std::fs::metadata("/proc/self/ns/net")).ok()?;
    let kthreadd = std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd");
    let init = kthreadd
        .then(|| std::fs::metadata("/proc/2/ns/net").ok())
        .flatten()
        .or_else(|| std::fs::metadata("/proc/1/ns/net").ok())?;
    Some(me.dev() == init.dev() && me.ino() == init.ino())
}
