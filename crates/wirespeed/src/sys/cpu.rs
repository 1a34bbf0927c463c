//! Where the process runs and stays: CPU affinity of a thread or the whole process, the CPU
//! a thread is on, and locking pages in RAM so the capture path never waits on a page fault.

use std::io;
use std::mem::{size_of, zeroed};

use super::cvt;

/// Pin the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "CPU number too large"));
    }
    // SAFETY: `set` is a zeroed cpu_set_t, CPU_SET writes inside it (cpu < CPU_SETSIZE checked),
    // and sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        libc::CPU_SET(cpu, &mut set);
        cvt(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)).map(|_| ())
    }
}

/// The CPU the calling thread is running on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and only returns a value.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

/// Restrict the calling process (and so every child it starts afterwards) to `cpus`: the CPU
/// half of entering a test partition. Children inherit the mask across fork and exec.
pub fn set_process_affinity(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty CPU set or CPU number too large"));
    }
    // SAFETY: `set` is a zeroed cpu_set_t; every CPU_SET index was checked against CPU_SETSIZE
    // above, and sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        cvt(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)).map(|_| ())
    }
}

/// Raise RLIMIT_MEMLOCK where allowed and lock current and future pages, so the capture path
/// never waits on a page fault. Returns false when not permitted (callers then say so).
pub fn lock_memory() -> bool {
    // SAFETY: mlockall takes flags only; failure is reported through the return value.
    unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) == 0 }
}
