//! How hard the scheduler backs a capture or send thread: seed 004 found a receiver at nice -20
//! took about twice the rate of one at +20, and seed 001 bound the recorder to its own processor
//! set. `--priority N`, `--realtime` and `--lock-memory` on `recv`, `record`, `send` and `bench`.
//!
//! Where each is applied: the nice value to the whole process at start (every thread, the
//! writer and the watcher too, as `nice -n N` would); SCHED_FIFO only to the capture threads
//! (or the sending threads), each taking it itself when it starts, so helper threads never
//! compete with them at realtime priority; memory locking to the whole process.
//!
//! A SCHED_FIFO thread that never blocks would keep its CPU from everything else of normal
//! priority. Two guards: the kernel's realtime throttling must be on
//! (`kernel.sched_rt_runtime_us` is not -1, so normal threads keep a share of every second),
//! and RLIMIT_RTTIME is set to [`RT_TIME_SOFT`] / [`RT_TIME_HARD`]: a realtime thread that runs
//! that long without blocking gets SIGXCPU (the run then stops with its report) and, at the
//! hard limit, SIGKILL. A capture thread blocks in every receive call that finds the socket
//! empty, so only a runaway reaches the limit; `--busy-poll` (a thread that never blocks) is
//! refused with `--realtime`.

use crate::error::{Error, Result};
use crate::sys::sched::{self, Limit, CAP_IPC_LOCK, CAP_SYS_NICE};
use crate::units;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `--realtime` without a value: SCHED_FIFO 10. Above every normal thread, yet below the
/// kernel's own realtime threads (migration and watchdog at 99, threaded interrupts at 50), so
/// the capture thread never starves the interrupt handler that feeds it.
pub const DEFAULT_REALTIME: u8 = 10;

/// RLIMIT_RTTIME's soft limit: a realtime thread that runs this long without blocking gets
/// SIGXCPU, and the run stops with its report. A capture thread blocks within milliseconds at
/// any rate a socket buffer can take.
pub const RT_TIME_SOFT: Duration = Duration::from_secs(2);

/// RLIMIT_RTTIME's hard limit: SIGKILL, for a thread that did not stop at SIGXCPU.
pub const RT_TIME_HARD: Duration = Duration::from_secs(3);

/// Room beyond the process's present size that `--lock-memory` must be allowed to lock without
/// CAP_IPC_LOCK: MCL_FUTURE locks every later allocation too (ledgers, buffers, a ring).
const LOCK_HEADROOM: u64 = 256 << 20;

/// What a run asks of the scheduler and the memory manager.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Priority {
    /// Nice value, -20..19 (`--priority N`); `None`: leave it.
    pub nice: Option<i32>,
    /// SCHED_FIFO priority 1..99 for the capture (or send) thread (`--realtime[=PRIO]`); `None`:
    /// the normal scheduler.
    pub realtime: Option<u8>,
    /// Lock the process's memory (`--lock-memory`): no page fault on the capture path.
    pub lock_memory: bool,
}

/// What was applied, as the recv, record and send reports show it (their `priority` object).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    /// The process's nice value after the settings were applied.
    pub nice: i32,
    /// Scheduling policy of the capture (or send) threads: SCHED_OTHER or SCHED_FIFO.
    pub policy: String,
    /// Their SCHED_FIFO priority, when realtime.
    pub rt_priority: Option<u8>,
    /// RLIMIT_RTTIME soft and hard limits in seconds, when realtime (the runaway guard).
    pub rt_time_limit_s: Option<[f64; 2]>,
    /// Whether all memory is locked (mlockall MCL_CURRENT|MCL_FUTURE).
    pub memory_locked: bool,
}

impl Applied {
    /// One line for the human summaries.
    pub fn line(&self, threads: &str) -> String {
        let mut s = format!("priority: nice {}", self.nice);
        if let (Some(p), Some([soft, hard])) = (self.rt_priority, self.rt_time_limit_s) {
            s.push_str(&format!(", SCHED_FIFO {p} on the {threads} (RLIMIT_RTTIME {soft} s, SIGKILL at {hard} s)"));
        } else {
            s.push_str(&format!(", {} on the {threads}", self.policy));
        }
        if self.memory_locked {
            s.push_str(", memory locked");
        }
        s
    }
}

impl Priority {
    /// Whether anything is asked.
    pub fn is_default(&self) -> bool {
        *self == Priority::default()
    }

    /// The command-line flags that ask for this, for a child `wirespeed recv`/`record`/`send`.
    pub fn args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(n) = self.nice {
            v.push(format!("--priority={n}"));
        }
        if let Some(p) = self.realtime {
            v.push(format!("--realtime={p}"));
        }
        if self.lock_memory {
            v.push("--lock-memory".into());
        }
        v
    }

    /// The settings in words, for bench headers ("nice -20, SCHED_FIFO 10, memory locked");
    /// "default" when nothing is asked.
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        if let Some(n) = self.nice {
            v.push(format!("nice {n}"));
        }
        if let Some(p) = self.realtime {
            v.push(format!("SCHED_FIFO {p}"));
        }
        if self.lock_memory {
            v.push("memory locked".into());
        }
        if v.is_empty() {
            "default priority".into()
        } else {
            v.join(", ")
        }
    }

    /// Refuse, before anything runs, what cannot be applied here: a value out of range or
    /// `--realtime` with `busy_poll` (usage, exit 2); a missing privilege, or realtime
    /// throttling switched off (runtime, exit 1). `lock_bytes` is what the run will allocate
    /// beyond the process's present size (a recorder's ring), for the RLIMIT_MEMLOCK check.
    pub fn check(&self, busy_poll: bool, lock_bytes: u64) -> Result<()> {
        if let Some(n) = self.nice {
            if !(-20..=19).contains(&n) {
                return Err(Error::param("priority", format!("{n} is out of range: give a nice value -20..19")));
            }
            let cur = sched::nice().unwrap_or(0);
            if n < cur && !sched::has_capability(CAP_SYS_NICE) {
                // RLIMIT_NICE lets an unprivileged process go down to 20 - its soft value.
                let floor = match sched::rlimit(Limit::Nice) {
                    Ok((None, _)) => -20,
                    Ok((Some(l), _)) => 20 - l.min(40) as i32,
                    Err(_) => 20,
                };
                if n < floor {
                    return Err(Error::permission(if n < 0 {
                        format!("--priority {n} needs CAP_SYS_NICE (root): run as root, or use a nice value >= 0")
                    } else {
                        format!(
                            "--priority {n} is below this process's nice value {cur}, and lowering it needs CAP_SYS_NICE (root): run as root, or use a nice value >= {cur}"
                        )
                    }));
                }
            }
        }
        if let Some(p) = self.realtime {
            if !(1..=99).contains(&p) {
                return Err(Error::invalid(format!(
                    "--realtime={p} is out of range: give a SCHED_FIFO priority 1..99"
                )));
            }
            if busy_poll {
                return Err(Error::invalid(
                    "--realtime with --busy-poll would make a thread that never blocks hold its CPU at realtime priority: leave one of them out",
                ));
            }
            if sched::rt_runtime_us() == Some(-1) {
                return Err(Error::unsupported(
                    "--realtime refused: realtime throttling is off here (kernel.sched_rt_runtime_us = -1), so a runaway SCHED_FIFO thread could hold its CPU for good; turn it on (sysctl -w kernel.sched_rt_runtime_us=950000) or leave --realtime out",
                ));
            }
            if !sched::has_capability(CAP_SYS_NICE) {
                let allowed = match sched::rlimit(Limit::RtPrio) {
                    Ok((None, _)) => 99,
                    Ok((Some(l), _)) => l.min(99),
                    Err(_) => 0,
                };
                if u64::from(p) > allowed {
                    return Err(Error::permission(format!(
                        "--realtime needs CAP_SYS_NICE (root) or an RLIMIT_RTPRIO of at least {p} (it is {allowed}): run as root, or leave --realtime out"
                    )));
                }
            }
        }
        if self.lock_memory && !sched::has_capability(CAP_IPC_LOCK) {
            let need = sched::virtual_size().unwrap_or(0).saturating_add(LOCK_HEADROOM).saturating_add(lock_bytes);
            if let Ok((Some(limit), _)) = sched::rlimit(Limit::MemLock) {
                if limit < need {
                    return Err(Error::permission(format!(
                        "--lock-memory locks every page of the run (about {}), and RLIMIT_MEMLOCK allows {} without CAP_IPC_LOCK: run as root, raise the limit (ulimit -l unlimited), or leave --lock-memory out",
                        units::bytes(need),
                        units::bytes(limit)
                    )));
                }
            }
        }
        Ok(())
    }

    /// Apply the process-wide part once at start, before the capture (or send) threads exist:
    /// the nice value of every thread, the realtime guard (RLIMIT_RTTIME, SIGXCPU handled as a
    /// stop), memory locking. The threads' SCHED_FIFO is [`Priority::apply_thread`].
    pub fn apply_process(&self) -> Result<Applied> {
        if let Some(n) = self.nice {
            sched::set_process_nice(n).map_err(|e| {
                Error::permission(format!("cannot set nice value {n}: {e} (needs CAP_SYS_NICE below 0)"))
            })?;
        }
        let mut limit = None;
        if self.realtime.is_some() {
            let soft = RT_TIME_SOFT.as_micros() as u64;
            let mut hard = RT_TIME_HARD.as_micros() as u64;
            if let Ok((_, Some(h))) = sched::rlimit(Limit::RtTime) {
                hard = hard.min(h);
            }
            sched::set_rlimit(Limit::RtTime, Some(soft.min(hard)), Some(hard))
                .map_err(|e| Error::failed(format!("cannot set RLIMIT_RTTIME, the guard of --realtime: {e}")))?;
            crate::sys::install_cpu_limit_handler();
            limit = Some([soft.min(hard) as f64 / 1e6, hard as f64 / 1e6]);
        }
        if self.lock_memory {
            sched::lock_all_memory().map_err(|e| {
                Error::permission(format!(
                    "cannot lock memory (--lock-memory): {e}; run as root or raise RLIMIT_MEMLOCK (ulimit -l unlimited)"
                ))
            })?;
        }
        let policy = match self.realtime {
            Some(_) => "SCHED_FIFO".to_string(),
            None => sched::current_policy().map(|(p, _)| p).unwrap_or("SCHED_OTHER").to_string(),
        };
        Ok(Applied {
            nice: sched::nice().unwrap_or(0),
            policy,
            rt_priority: self.realtime,
            rt_time_limit_s: limit,
            memory_locked: self.lock_memory,
        })
    }

    /// Put the calling thread (a capture or send thread, at its start) under SCHED_FIFO when
    /// `--realtime` asks; nothing otherwise. `who` names the thread in the error.
    pub fn apply_thread(&self, who: &str) -> Result<()> {
        if let Some(p) = self.realtime {
            sched::set_fifo_current_thread(i32::from(p))
                .map_err(|e| Error::failed(format!("cannot put {who} under SCHED_FIFO {p}: {e}")))?;
        }
        Ok(())
    }
}

/// Whether the run was ended by the realtime guard (SIGXCPU from RLIMIT_RTTIME), and the one
/// line that says so.
pub fn guard_tripped() -> Option<String> {
    (crate::sys::last_signal() == crate::sys::SIGXCPU).then(|| {
        format!(
            "a realtime thread ran {} s without blocking (RLIMIT_RTTIME, the guard of --realtime): the run was stopped",
            RT_TIME_SOFT.as_secs()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    #[test]
    fn args_round_trip_and_describe() {
        let p = Priority { nice: Some(-5), realtime: Some(10), lock_memory: true };
        assert_eq!(p.args(), ["--priority=-5", "--realtime=10", "--lock-memory"]);
        assert_eq!(p.describe(), "nice -5, SCHED_FIFO 10, memory locked");
        assert_eq!(Priority::default().describe(), "default priority");
        assert!(Priority::default().is_default() && Priority::default().args().is_empty());
    }

    #[test]
    fn refusals_that_need_no_privilege_to_test() {
        let p = Priority { realtime: Some(10), ..Priority::default() };
        assert!(
            matches!(p.check(true, 0), Err(e) if e.kind() == Kind::Invalid && e.to_string().contains("--busy-poll"))
        );
        let p = Priority { nice: Some(30), ..Priority::default() };
        assert!(matches!(p.check(false, 0), Err(e) if e.kind() == Kind::Invalid));
        assert!(Priority::default().check(true, 0).is_ok());
        // Raising the nice value never needs a privilege.
        assert!(Priority { nice: Some(19), ..Priority::default() }.check(false, 0).is_ok());
    }

    #[test]
    fn the_line_says_what_was_applied() {
        let a = Applied {
            nice: -5,
            policy: "SCHED_FIFO".into(),
            rt_priority: Some(10),
            rt_time_limit_s: Some([2.0, 3.0]),
            memory_locked: true,
        };
        assert_eq!(
            a.line("capture thread(s)"),
            "priority: nice -5, SCHED_FIFO 10 on the capture thread(s) (RLIMIT_RTTIME 2 s, SIGKILL at 3 s), memory locked"
        );
    }
}
