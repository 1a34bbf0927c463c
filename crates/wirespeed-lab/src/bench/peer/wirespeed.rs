//! wirespeed itself as a compared tool: `wirespeed recv` (or `wirespeed record` when the run
//! records) and `wirespeed send`, run by the [`Runner`] as every bench point is.
//!
//! Besides the plain tool, a [`Variant`] is wirespeed run differently: another build as the
//! receiver (`--other-build PATH`, the tool `wirespeed-old`), or with receiver options passed
//! through (`--backend packet`, `--threads 2 --cpus 1-2`, `--writer-cpu 1`) and sender options
//! (`--streams 8`). Each is a tool of its own in the tables, so one command measures a change
//! against what it replaces, in the same run.

use super::super::point::{PointConfig, Runner, Stream};
use super::tool::{self, Entry, Measured, Setup, Tool};
use std::path::PathBuf;
use wirespeed::{Error, Result};

/// The registry entry.
pub const ENTRY: Entry = Entry { name: "wirespeed", records: true, receives: true, check, make };

fn check() -> Result<String> {
    Ok(env!("CARGO_PKG_VERSION").to_string())
}

fn make(setup: &Setup, version: String) -> Result<Box<dyn Tool>> {
    Ok(Box::new(Variant {
        name: "wirespeed",
        version,
        record: setup.record.is_some(),
        exe: None,
        recv_args: Vec::new(),
        send_args: Vec::new(),
    }))
}

/// wirespeed run one particular way: which binary receives, and what its two ends are told.
#[derive(Clone, Debug)]
pub struct Variant {
    /// The name in tables and JSON ("wirespeed", "wirespeed-old", "wirespeed-packet", ...).
    pub name: &'static str,
    /// The receiver's version, as reports show it.
    pub version: String,
    /// Whether the receiver records (`wirespeed record`).
    pub record: bool,
    /// Another wirespeed binary as the receiver (`None`: this one).
    pub exe: Option<PathBuf>,
    /// Added to the receiver's command line.
    pub recv_args: Vec<String>,
    /// Added to the sender's command line.
    pub send_args: Vec<String>,
}

impl Variant {
    /// A variant named `name` (kept for the run's life: tool names are static).
    pub fn new(name: String, setup: &Setup) -> Variant {
        Variant {
            name: Box::leak(name.into_boxed_str()),
            version: env!("CARGO_PKG_VERSION").to_string(),
            record: setup.record.is_some(),
            exe: None,
            recv_args: Vec::new(),
            send_args: Vec::new(),
        }
    }

    /// The receiver is the wirespeed binary at `exe` (checked: it must answer `--version`).
    pub fn other_build(mut self, exe: PathBuf) -> Result<Variant> {
        let exe = std::fs::canonicalize(&exe).map_err(|e| {
            Error::invalid(format!("--other-build {}: {e}: give the path of another wirespeed binary", exe.display()))
        })?;
        let shown = exe.display().to_string();
        self.version = tool::program_version(&shown, &["--version"], &format!("cannot run {shown}"))?;
        self.exe = Some(exe);
        Ok(self)
    }
}

impl Tool for Variant {
    fn name(&self) -> &'static str {
        self.name
    }
    fn version(&self) -> String {
        match &self.exe {
            Some(p) => format!("{} ({})", self.version, p.display()),
            None => self.version.clone(),
        }
    }
    fn counts(&self) -> String {
        let what = if self.record {
            "wirespeed record: unique sequence numbers its ledger accepted for the disk (ring-full drops count as missing)"
        } else {
            "wirespeed recv: unique sequence numbers its ledger accepted (tail included through the end-of-stream message)"
        };
        if self.name == "wirespeed" {
            return what.into();
        }
        let mut how = Vec::new();
        if let Some(p) = &self.exe {
            how.push(format!("receiver {}", p.display()));
        }
        if !self.recv_args.is_empty() {
            how.push(format!("receiver given {}", self.recv_args.join(" ")));
        }
        if !self.send_args.is_empty() {
            how.push(format!("sender given {}", self.send_args.join(" ")));
        }
        format!("{}: {what}; {}", self.name, how.join(", "))
    }
    fn run(&self, runner: &Runner, cfg: &PointConfig, _seq: u32) -> Result<Option<Measured>> {
        if self.exe.is_none() && self.recv_args.is_empty() && self.send_args.is_empty() {
            return Ok(runner.run(cfg)?.map(Measured::Wirespeed));
        }
        let stream = Stream {
            recv_args: self.recv_args.clone(),
            send_args: self.send_args.clone(),
            recv_lines: None,
            exe: self.exe.clone(),
        };
        Ok(runner.run_with(cfg, stream)?.map(|s| Measured::Wirespeed(s.point)))
    }
}
