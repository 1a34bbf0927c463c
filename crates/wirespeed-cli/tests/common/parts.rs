//! A set of partitions made for one test, removed when dropped (also when the test panics).
#![allow(dead_code)]

use super::{run, stderr_of as stderr, stdout_of as stdout};
use std::time::{Duration, Instant};

/// A set of partitions with a unique prefix, removed with `partition init` when dropped (also
/// when the test panics).
pub struct Parts {
    pub prefix: String,
}

impl Parts {
    pub fn new(tag: &str) -> Parts {
        // Letters only after the pid, so no prefix is another's prefix plus a partition id.
        let prefix = format!("wt{}{tag}", std::process::id());
        let _ = run(&["partition", "init", "--prefix", &prefix]);
        Parts { prefix }
    }

    pub fn run(&self, args: &[&str]) -> std::process::Output {
        let mut full = vec!["partition", "--prefix", &self.prefix];
        full.extend_from_slice(args);
        run(&full)
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        stdout(&o)
    }

    pub fn ns(&self, id: u32) -> String {
        format!("{}{id}", self.prefix)
    }

    pub fn log(&self, id: u32) -> String {
        std::fs::read_to_string(format!("/run/wirespeed/{}/daemon-{id}.log", self.prefix)).unwrap_or_default()
    }

    /// Partition `id`'s heartbeat counter, as its daemon last published it.
    pub fn beat(&self, id: u32) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/run/wirespeed/{}/hb-{id}", self.prefix)).ok()?;
        s.split_whitespace().nth(2)?.parse().ok()
    }

    /// Partition `id`'s daemon's last written view of its peers.
    pub fn view(&self, id: u32) -> Option<serde_json::Value> {
        let s = std::fs::read_to_string(format!("/run/wirespeed/{}/view-{id}.json", self.prefix)).ok()?;
        serde_json::from_str(&s).ok()
    }

    /// Wait until `cond` holds, polling; `limit` only guards against a hang.
    pub fn wait_for(&self, what: &str, limit: Duration, cond: impl Fn() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until partition `id`'s daemon log contains `needle` for the `nth` time (1-based).
    pub fn wait_log(&self, id: u32, needle: &str, nth: usize, limit: Duration) -> Duration {
        let t = Instant::now();
        while self.log(id).matches(needle).count() < nth {
            assert!(t.elapsed() < limit, "no {needle:?} (#{nth}) from daemon {id} in {limit:?}:\n{}", self.log(id));
            std::thread::sleep(Duration::from_millis(20));
        }
        t.elapsed()
    }
}

impl Drop for Parts {
    fn drop(&mut self) {
        let _ = run(&["partition", "init", "--prefix", &self.prefix]);
    }
}
