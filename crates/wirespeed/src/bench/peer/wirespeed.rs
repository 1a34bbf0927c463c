//! wirespeed itself as a compared tool: `wirespeed recv` (or `wirespeed record` when the run
//! records) and `wirespeed send`, run by the [`Runner`] as every bench point is.

use super::super::point::{PointConfig, Runner};
use super::tool::{Entry, Measured, Setup, Tool};
use crate::Result;

/// The registry entry.
pub const ENTRY: Entry = Entry { name: "wirespeed", records: true, receives: true, check, make };

fn check() -> Result<String> {
    Ok(env!("CARGO_PKG_VERSION").to_string())
}

fn make(setup: &Setup, version: String) -> Result<Box<dyn Tool>> {
    Ok(Box::new(Wirespeed { version, record: setup.record.is_some() }))
}

struct Wirespeed {
    version: String,
    record: bool,
}

impl Tool for Wirespeed {
    fn name(&self) -> &'static str {
        "wirespeed"
    }
    fn version(&self) -> String {
        self.version.clone()
    }
    fn counts(&self) -> String {
        if self.record {
            "wirespeed record: unique sequence numbers its ledger accepted for the disk (ring-full drops count as missing)".into()
        } else {
            "wirespeed recv: unique sequence numbers its ledger accepted (tail included through the end-of-stream message)"
                .into()
        }
    }
    fn run(&self, runner: &Runner, cfg: &PointConfig, _seq: u32) -> Result<Option<Measured>> {
        Ok(runner.run(cfg)?.map(Measured::Wirespeed))
    }
}
