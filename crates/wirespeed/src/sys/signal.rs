//! Signals: SIGINT/SIGTERM turned into a stop flag that every loop polls, so a run finishes
//! cleanly (drain, flush, summarise) instead of dying mid-write; and sending signals to the
//! processes wirespeed started.
//!
//! Hand-written rather than through `signal-hook`: the whole job is two atomic stores and one
//! `sigaction` per signal, and that crate always installs its handlers with `SA_RESTART`, so a
//! blocking call without a timeout would resume after Ctrl-C instead of returning EINTR to the
//! loop that checks this flag (the receive, reflect, ping and ttcp loops are written to expect
//! EINTR). It would move the one `unsafe` block into two dependencies, not remove it.

use std::io;
use std::mem::zeroed;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use super::cvt;

static STOP: AtomicBool = AtomicBool::new(false);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(sig: libc::c_int) {
    // Only async-signal-safe work: two atomic stores.
    LAST_SIGNAL.store(sig, Ordering::Relaxed);
    STOP.store(true, Ordering::Release);
}

/// Route SIGINT and SIGTERM to a flag so that runs finish cleanly (drain, flush, summarise)
/// instead of dying mid-write. Returns the flag every loop should poll.
pub fn install_stop_handler() -> &'static AtomicBool {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `sa` is fully initialised (zeroed, then handler and mask set); the handler only
        // performs atomic stores, which are async-signal-safe. No SA_RESTART, so blocking calls
        // return EINTR and loops notice the flag promptly.
        unsafe {
            let mut sa: libc::sigaction = zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    &STOP
}

/// Route SIGXCPU to the stop flag too: the kernel sends it when a realtime thread has run for
/// its RLIMIT_RTTIME without blocking (`--realtime`'s guard), and its default action would dump
/// core instead of ending the run with its report. The hard limit's SIGKILL still ends a thread
/// that does not stop.
pub fn install_cpu_limit_handler() {
    // SAFETY: as in install_stop_handler: a zeroed, then filled sigaction whose handler only
    // performs atomic stores.
    unsafe {
        let mut sa: libc::sigaction = zeroed();
        sa.sa_sigaction = on_stop_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(libc::SIGXCPU, &sa, std::ptr::null_mut());
    }
}

/// SIGXCPU, which [`last_signal`] returns when the realtime guard ended the run.
pub const SIGXCPU: i32 = libc::SIGXCPU;

/// The stop flag without installing handlers (for library users that manage signals).
pub fn stop_flag() -> &'static AtomicBool {
    &STOP
}

/// Which signal (if any) set the stop flag.
pub fn last_signal() -> i32 {
    LAST_SIGNAL.load(Ordering::Relaxed)
}

/// Send `sig` to process `pid` (signal 0 only checks that it exists). Used to stop partition
/// daemons and the processes left in a partition when it is torn down.
pub fn send_signal(pid: u32, sig: i32) -> io::Result<()> {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"));
    };
    if pid <= 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "refusing to signal a process group"));
    }
    // SAFETY: kill takes two integers and touches no memory of ours; pid > 0 names one process.
    cvt(unsafe { libc::kill(pid, sig) }).map(|_| ())
}

/// SIGTERM, for asking a child process to finish cleanly.
pub const SIGTERM: i32 = libc::SIGTERM;
