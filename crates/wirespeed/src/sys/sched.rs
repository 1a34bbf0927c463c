//! The scheduler and the memory manager: nice values, SCHED_FIFO for one thread, the
//! realtime CPU-time limit that guards it, locking all memory, and the privileges they need
//! (capabilities and resource limits), read so a run can refuse before anything starts.
//!
//! Seed 004 ran its receiver at `nice -n -20` and found twice the rate of one at +20; these are
//! the calls behind `--priority`, `--realtime` and `--lock-memory`.

use std::io;
use std::mem::zeroed;
use std::process::Command;

use super::cvt;

/// CAP_SYS_NICE: raise priority (a lower nice value), set a realtime policy.
pub const CAP_SYS_NICE: u32 = 23;
/// CAP_IPC_LOCK: lock memory beyond RLIMIT_MEMLOCK.
pub const CAP_IPC_LOCK: u32 = 14;

/// A resource limit this module reads or sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// RLIMIT_MEMLOCK: bytes an unprivileged process may lock.
    MemLock,
    /// RLIMIT_RTPRIO: highest SCHED_FIFO priority an unprivileged process may take.
    RtPrio,
    /// RLIMIT_NICE: 20 - the lowest nice value an unprivileged process may take.
    Nice,
    /// RLIMIT_RTTIME: microseconds a realtime thread may run without blocking.
    RtTime,
}

impl Limit {
    fn resource(self) -> libc::__rlimit_resource_t {
        match self {
            Limit::MemLock => libc::RLIMIT_MEMLOCK,
            Limit::RtPrio => libc::RLIMIT_RTPRIO,
            Limit::Nice => libc::RLIMIT_NICE,
            Limit::RtTime => libc::RLIMIT_RTTIME,
        }
    }
}

/// A limit's soft and hard values; `None` is unlimited (RLIM_INFINITY).
pub fn rlimit(which: Limit) -> io::Result<(Option<u64>, Option<u64>)> {
    // SAFETY: `r` is a valid, writable rlimit; getrlimit writes exactly one into it.
    let r = unsafe {
        let mut r: libc::rlimit = zeroed();
        cvt(libc::getrlimit(which.resource(), &mut r))?;
        r
    };
    let v = |x: libc::rlim_t| (x != libc::RLIM_INFINITY).then_some(x);
    Ok((v(r.rlim_cur), v(r.rlim_max)))
}

/// Set a limit's soft and hard values (`None`: unlimited). Lowering needs no privilege;
/// raising the hard value does.
pub fn set_rlimit(which: Limit, soft: Option<u64>, hard: Option<u64>) -> io::Result<()> {
    let r =
        libc::rlimit { rlim_cur: soft.unwrap_or(libc::RLIM_INFINITY), rlim_max: hard.unwrap_or(libc::RLIM_INFINITY) };
    // SAFETY: `r` is a valid rlimit that setrlimit only reads.
    cvt(unsafe { libc::setrlimit(which.resource(), &r) }).map(|_| ())
}

/// Whether this process holds capability `cap` in its effective set (CapEff of
/// /proc/self/status). False when that cannot be read.
pub fn has_capability(cap: u32) -> bool {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|mask| cap < 64 && mask & (1u64 << cap) != 0)
}

/// The calling thread's nice value.
pub fn nice() -> io::Result<i32> {
    // getpriority may legitimately return -1, so errno is cleared first and read after.
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life;
    // getpriority takes integers only.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS as _, 0);
        if n == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n)
    }
}

/// Set the nice value of thread `tid` (0: the calling thread). Linux keeps a nice value per
/// thread; see [`set_process_nice`] for all of them.
pub fn set_thread_nice(tid: u32, n: i32) -> io::Result<()> {
    // SAFETY: setpriority takes integers only and touches no memory of ours.
    cvt(unsafe { libc::setpriority(libc::PRIO_PROCESS as _, tid as libc::id_t, n) }).map(|_| ())
}

/// Set the nice value of every thread of this process (those in /proc/self/task now; threads
/// started later inherit it from the thread that starts them).
pub fn set_process_nice(n: i32) -> io::Result<()> {
    let tasks: Vec<u32> = std::fs::read_dir("/proc/self/task")
        .map(|rd| rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    if tasks.is_empty() {
        return set_thread_nice(0, n);
    }
    for tid in tasks {
        match set_thread_nice(tid, n) {
            // A thread that ended meanwhile needs no nice value.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            r => r?,
        }
    }
    Ok(())
}

/// Put the calling thread under SCHED_FIFO at `prio` (1..99), with SCHED_RESET_ON_FORK so a
/// child it might start does not inherit a realtime policy.
pub fn set_fifo_current_thread(prio: i32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: prio };
    // SAFETY: `p` is a valid sched_param that sched_setscheduler only reads; pid 0 is the
    // calling thread.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &p) }).map(|_| ())
}

/// The calling thread's policy ("SCHED_OTHER", "SCHED_FIFO", ...) and realtime priority.
pub fn current_policy() -> io::Result<(&'static str, i32)> {
    // SAFETY: sched_getscheduler takes an integer; `p` is a valid, writable sched_param that
    // sched_getparam fills.
    let (pol, p) = unsafe {
        let pol = cvt(libc::sched_getscheduler(0))?;
        let mut p: libc::sched_param = zeroed();
        cvt(libc::sched_getparam(0, &mut p))?;
        (pol, p.sched_priority)
    };
    let name = match pol & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_OTHER => "SCHED_OTHER",
        libc::SCHED_FIFO => "SCHED_FIFO",
        libc::SCHED_RR => "SCHED_RR",
        libc::SCHED_BATCH => "SCHED_BATCH",
        libc::SCHED_IDLE => "SCHED_IDLE",
        _ => "other",
    };
    Ok((name, p))
}

/// Lock every page of this process in RAM, now and later (mlockall MCL_CURRENT|MCL_FUTURE).
pub fn lock_all_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only.
    cvt(unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) }).map(|_| ())
}

/// The kernel's realtime throttling budget, `/proc/sys/kernel/sched_rt_runtime_us`: -1 means
/// realtime threads may take a CPU whole, forever. `None` when it cannot be read.
pub fn rt_runtime_us() -> Option<i64> {
    std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").ok()?.trim().parse().ok()
}

/// This process's virtual size in bytes (VmSize of /proc/self/status): what MCL_CURRENT locks.
pub fn virtual_size() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = s.lines().find_map(|l| l.strip_prefix("VmSize:"))?.split_whitespace().next()?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Make the child `cmd` will run start at nice `n` (whatever this process's own is).
pub fn nice_in_child(cmd: &mut Command, n: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec: setpriority is a plain
    // system call, async-signal-safe, and nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpriority(libc::PRIO_PROCESS as _, 0, n) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_it_can() {
        assert!(nice().is_ok());
        let (pol, _) = current_policy().expect("policy");
        assert!(!pol.is_empty());
        assert!(rlimit(Limit::MemLock).is_ok() && rlimit(Limit::RtTime).is_ok());
        assert!(virtual_size().is_some_and(|v| v > 0));
    }
}
