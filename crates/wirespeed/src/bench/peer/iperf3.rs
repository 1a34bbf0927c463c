//! iperf3 as a compared tool: the registry's face of [`super::Iperf3`], which runs it.

use super::super::point::{PointConfig, Runner};
use super::tool::{Entry, Measured, Setup, Tool};
use super::Iperf3;
use crate::Result;

/// The registry entry.
pub const ENTRY: Entry = Entry { name: "iperf3", records: false, receives: true, check: super::iperf3_version, make };

fn make(setup: &Setup, _version: String) -> Result<Box<dyn Tool>> {
    Ok(Box::new(Iperf3Tool(Iperf3::prepare(setup.runner, setup.rcvbuf)?)))
}

/// The prepared iperf3, as a [`Tool`].
pub struct Iperf3Tool(pub Iperf3);

impl Tool for Iperf3Tool {
    fn name(&self) -> &'static str {
        "iperf3"
    }
    fn version(&self) -> String {
        self.0.version.clone()
    }
    fn counts(&self) -> String {
        "iperf3: datagrams its server received (bytes / -l); its own lost_packets counts only gaps, not the tail".into()
    }
    fn buffer_cap(&self) -> Option<u64> {
        Some(self.0.socket_buffer)
    }
    fn run(&self, runner: &Runner, cfg: &PointConfig, _seq: u32) -> Result<Option<Measured>> {
        Ok(self.0.run(runner, cfg)?.map(Measured::Iperf3))
    }
}
