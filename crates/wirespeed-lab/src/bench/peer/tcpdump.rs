//! `tcpdump -w` as a compared recorder: it captures the datagrams from the receiving side's
//! interface into a pcap file in the recording directory. What it stored is what
//! `wirespeed verify FILE --format counter,size=N` counts in that file (unique sequence
//! numbers whose payload checks), against the sender's count; its own "dropped by kernel"
//! (its capture ring's overflow) is kept beside it.

use super::super::point::{PointConfig, Runner};
use super::tool::{self, Capture, Entry, Measured, Setup, Tool};
use std::collections::BTreeMap;
use std::path::Path;
use wirespeed::Result;

/// The one line shown when tcpdump cannot be run.
pub const MISSING: &str = "tcpdump is not installed: apt-get install tcpdump";

/// The registry entry.
pub const ENTRY: Entry = Entry { name: "tcpdump", records: true, receives: false, check, make };

fn check() -> Result<String> {
    tool::program_version("tcpdump", &["--version"], MISSING)
}

/// tcpdump's command: a 64 MiB capture ring (-B, KiB), no name lookups, staying root so it can
/// write into the directory it was given (-Z root), only this point's port.
fn argv(iface: &str, file: &Path, port: u16, _cpu: Option<usize>) -> (&'static str, Vec<String>) {
    let mut a: Vec<String> = vec!["-i".into(), iface.into(), "-w".into(), file.display().to_string()];
    a.extend(["-B", "65536", "-n", "-Z", "root", "udp", "port"].map(String::from));
    a.push(port.to_string());
    ("tcpdump", a)
}

fn counters(text: &str) -> BTreeMap<String, serde_json::Value> {
    let mut m = BTreeMap::new();
    for (key, what) in [
        ("captured", "packets captured"),
        ("received_by_filter", "packets received by filter"),
        ("dropped_by_kernel", "packets dropped by kernel"),
    ] {
        if let Some(n) = tool::number_before(text, what) {
            m.insert(key.to_string(), n.into());
        }
    }
    m
}

fn make(setup: &Setup, version: String) -> Result<Box<dyn Tool>> {
    Ok(Box::new(Tcpdump(Capture::new(setup, "tcpdump", version, argv, Some("listening on"), counters)?)))
}

struct Tcpdump(Capture);

impl Tool for Tcpdump {
    fn name(&self) -> &'static str {
        "tcpdump"
    }
    fn version(&self) -> String {
        self.0.version.clone()
    }
    fn counts(&self) -> String {
        "tcpdump -w: counter datagrams in its pcap file (verify --format counter,size=N); its own 'dropped by kernel' is its ring overflow; writes through the page cache".into()
    }
    fn notes(&self) -> Vec<String> {
        self.0.notes()
    }
    fn run(&self, runner: &Runner, cfg: &PointConfig, seq: u32) -> Result<Option<Measured>> {
        self.0.run(self, runner, cfg, seq)
    }
}
