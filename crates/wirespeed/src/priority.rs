//! How hard the scheduler backs a capture or send thread: seed 004 found a receiver at nice -20
//! took about twice the rate of one at +20, and seed 001 bound the recorder to its own processor
//! set. `--priority N`, `--realtime` and `--lock-memory` on `recv`, `record`, `send` and `bench`.

use serde::{Deserialize, Serialize};

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
}
