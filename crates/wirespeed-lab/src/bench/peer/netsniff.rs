//! `netsniff-ng` as a compared recorder: like tcpdump, a packet capture from the receiving
//! side's interface into a pcap file, counted the same way (`verify --format counter,size=N`
//! on the file, against the sender's count). Its own "failed filter (out of space)" and
//! "unread on exit" are kept beside it.

use super::super::point::{PointConfig, Runner};
use super::tool::{self, Capture, Entry, Measured, Setup, Tool};
use std::collections::BTreeMap;
use std::path::Path;
use wirespeed::Result;

/// The one line shown when netsniff-ng cannot be run.
pub const MISSING: &str = "netsniff-ng is not installed: apt-get install netsniff-ng";

/// The registry entry.
pub const ENTRY: Entry = Entry { name: "netsniff-ng", records: true, receives: false, check, make };

fn check() -> Result<String> {
    tool::program_version("netsniff-ng", &["-v"], MISSING)
}

/// netsniff-ng's command: silent (-s), leaving the system's socket-memory sysctls (-A) and IRQ
/// affinity (-Q) alone, a 64 MiB ring as tcpdump's -B, bound to the receiver's CPU when pinned.
fn argv(iface: &str, file: &Path, port: u16, cpu: Option<usize>) -> (&'static str, Vec<String>) {
    let mut a: Vec<String> = vec!["--in".into(), iface.into(), "--out".into(), file.display().to_string()];
    a.extend(["-s", "-A", "-Q", "-S", "64MiB"].map(String::from));
    if let Some(c) = cpu {
        a.extend(["-b".into(), c.to_string()]);
    }
    a.extend(["-f".into(), format!("udp port {port}")]);
    ("netsniff-ng", a)
}

fn counters(text: &str) -> BTreeMap<String, serde_json::Value> {
    let mut m = BTreeMap::new();
    for (key, what) in [
        ("incoming", "packets incoming"),
        ("unread_on_exit", "unread on exit"),
        ("passed_filter", "packets passed filter"),
        ("failed_out_of_space", "packets failed filter (out of space)"),
    ] {
        if let Some(n) = tool::number_before(text, what) {
            m.insert(key.to_string(), n.into());
        }
    }
    m
}

fn make(setup: &Setup, version: String) -> Result<Box<dyn Tool>> {
    Ok(Box::new(Netsniff(Capture::new(setup, "netsniff-ng", version, argv, None, counters)?)))
}

struct Netsniff(Capture);

impl Tool for Netsniff {
    fn name(&self) -> &'static str {
        "netsniff-ng"
    }
    fn version(&self) -> String {
        self.0.version.clone()
    }
    fn counts(&self) -> String {
        "netsniff-ng: counter datagrams in its pcap file (verify --format counter,size=N); its own counters are kept as printed, but loss is read from the file: on loopback, where it sees every datagram twice, netsniff-ng 0.6.8 printed 'failed filter (out of space)' equal to 'passed filter' in a clean run whose file held every datagram (0 across a partition link); writes through the page cache".into()
    }
    fn notes(&self) -> Vec<String> {
        self.0.notes()
    }
    fn run(&self, runner: &Runner, cfg: &PointConfig, seq: u32) -> Result<Option<Measured>> {
        self.0.run(self, runner, cfg, seq)
    }
}
