//! Child processes that do not outlive the process that started them.

use std::process::Command;

/// Make the child `cmd` will start die (SIGKILL) when this process dies, even by `kill -9`.
///
/// A run that starts its own sender, receiver or reflector must not leave them behind when
/// it is killed: they would keep sending, hold their partition's namespace and cgroups, and
/// keep ports busy. The death signal survives the `exec` of `wirespeed partition exec` and of
/// `ip netns exec`, which exec in place, so the program at the end of the chain inherits it.
///
/// The kernel sends it when the *thread* that spawned the child ends, so spawn from a thread
/// that lives as long as the child (the main thread, or the one that waits for it). If this
/// process is already gone by the time the child runs (the race between `fork` and `prctl`),
/// the child exits at once instead of running as an orphan.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions and touches no memory.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // calls are allowed: prctl, getppid and raise are, and it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect: then we were re-parented and
            // no death signal will ever come, so end now.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        })
    }
}

/// Start the child `cmd` will run inside the network namespace `ns` (an open `/run/netns/NAME`),
/// and nothing else of it: unlike `ip netns exec`, the child keeps this process's mount
/// namespace, so what it mounts (a partition daemon's raw devices) is seen by the host.
pub fn in_netns(cmd: &mut Command, ns: std::fs::File) -> &mut Command {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec: setns is async-signal-safe,
    // and the file it names is moved into the closure, so its descriptor is open there.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Run `f` on a new thread that has joined the network namespace `ns` (an open
/// `/run/netns/NAME`), and return what it returns; this process's threads stay where they are.
///
/// Interface lookups by name (the ethtool ioctls in [`super::ethtool`]) happen in the namespace
/// of the thread that opens the socket, so this is how to ask about an interface inside a
/// partition without starting a process there. A panic in `f` is passed on to the caller.
pub fn with_netns<T: Send>(ns: &std::fs::File, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    use std::os::fd::AsRawFd;
    std::thread::scope(|s| {
        let thread = s.spawn(|| {
            // SAFETY: setns takes no pointers; the descriptor is borrowed from `ns`, open for the
            // whole scope. Only this thread moves, and it ends with `f`.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(f())
        });
        thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// When process `pid` started, in clock ticks after boot (field 22 of `/proc/PID/stat`), or
/// `None` if there is no such process. A pid and its start time name one process for good:
/// a pid reused by another process has another start time.
pub fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or ')': split after the last.
    let rest = s.rsplit_once(')')?.1;
    let mut f = rest.split_whitespace();
    // rest starts at field 3 (state); start time is field 22.
    let state = f.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    f.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    #[test]
    fn a_child_dies_when_the_thread_that_started_it_ends() {
        // The death signal follows the spawning thread; a thread stands in for a killed parent.
        let mut child = std::thread::spawn(|| {
            let mut c = Command::new("sleep");
            c.arg("60");
            die_with_parent(&mut c).spawn().expect("spawn sleep")
        })
        .join()
        .expect("spawning thread");
        let t = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                break st;
            }
            if t.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("the child outlived the thread that started it");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(st.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn start_time_names_a_live_process_only() {
        assert!(start_time(std::process::id()).is_some());
        let mut c = Command::new("true").spawn().expect("spawn true");
        let pid = c.id();
        c.wait().expect("wait");
        assert_eq!(start_time(pid), None);
    }
}
