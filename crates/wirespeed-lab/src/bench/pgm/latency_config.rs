//! The latency part's configuration, apart from its run so that the whole bench's
//! configuration can hold it without depending on the run.

use std::path::PathBuf;
use std::time::Duration;

/// What the latency part runs.
#[derive(Clone, Debug)]
pub struct LatencyConfig {
    /// Probe rates, per second.
    pub pps: Vec<u64>,
    /// Probe size, bytes.
    pub size: usize,
    /// Length of each rate's run.
    pub duration: Duration,
    /// Where heat maps go (`None`: the table only).
    pub dir: Option<PathBuf>,
    /// The OpenPGM test peer, when its pair is to run.
    pub openpgm: Option<PathBuf>,
}
