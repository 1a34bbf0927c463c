//! Clocks and timed waits: the monotonic clock every rate and latency is measured on, wall
//! time for file names and reports, CPU-time clocks, absolute sleeps and timer slack.

use std::io;
use std::mem::zeroed;

use super::cvt;

fn clock_ns(clock: libc::clockid_t) -> u64 {
    // SAFETY: `ts` is a valid writable timespec for the kernel (or vDSO) to fill.
    unsafe {
        let mut ts: libc::timespec = zeroed();
        libc::clock_gettime(clock, &mut ts);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

/// Monotonic time in nanoseconds (vDSO: no system call).
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Wall-clock time in nanoseconds since the Unix epoch.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CPU time consumed by the calling thread, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time (user + system) consumed by the whole process, in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Sleep until an absolute CLOCK_MONOTONIC instant; used by the pacer for the coarse part of
/// a wait (it spins for the last few microseconds).
pub fn sleep_until_monotonic_ns(deadline: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec; a null remainder pointer is allowed with TIMER_ABSTIME.
    // EINTR simply returns early; the caller re-checks the clock.
    unsafe {
        libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut());
    }
}

/// Set the calling thread's timer slack: Linux may otherwise defer a timed wake-up by 50 us
/// to batch timers, which would smear a latency probe schedule.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument; the unused ones are zero.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    cvt(r).map(|_| ())
}
