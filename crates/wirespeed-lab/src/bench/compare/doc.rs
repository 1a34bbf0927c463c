//! `bench compare`'s document: its configuration, each run's figures, the medians per cell
//! and the whole report as `--json` prints it and compare.json holds it.

use crate::bench::peer::dd::DiskCeiling;
use crate::bench::peer::tool::ToolPoint;
use crate::bench::peer::PeerPoint;
use crate::bench::point::Point;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::units::{self, Rate};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.compare/1";

/// Most points a rate list may expand to (a range with a tiny step is a typo, not a plan).
pub const MAX_RATES: usize = 200;

/// The default tools, in the names the tables and the JSON use (their JSON fields are named).
pub const TOOLS: [&str; 2] = ["wirespeed", "iperf3"];

/// The default recorders, with a recording directory.
pub const RECORDERS: [&str; 3] = ["wirespeed", "tcpdump", "netsniff-ng"];

/// What to compare.
#[derive(Clone, Debug)]
pub struct CompareConfig {
    /// Offered rates, in order.
    pub rates: Vec<Rate>,
    /// Payload bytes per datagram, in order.
    pub sizes: Vec<usize>,
    /// Sending time per point (whole seconds when iperf3 is a tool: its -t takes no fraction).
    pub duration: Duration,
    /// UDP GSO on wirespeed's sender (iperf3 3.12 has none).
    pub gso: bool,
    /// Receive buffer asked for.
    pub rcvbuf: u64,
    /// Passes over the whole grid.
    pub repeat: u32,
    /// Record into this directory (the tools are recorders; dd measures the disk's ceiling).
    pub record: Option<PathBuf>,
    /// The CPU wirespeed record's writer thread is pinned to (`--writer-cpu`), if any.
    pub writer_cpu: Option<usize>,
    /// With `record`: the most dd writes for the disk's ceiling, each time (`--dd-size`).
    pub dd_bytes: u64,
}

/// Read a rate list (see [`units::parse_rate_list`]), at most [`MAX_RATES`] of them.
pub fn parse_rates(s: &str) -> std::result::Result<Vec<Rate>, String> {
    units::parse_rate_list(s, MAX_RATES)
}

/// One run of one tool at one point, in the order run.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// 1-based position in the order run (warm-up not counted).
    pub seq: u32,
    /// Pass over the grid, 1-based.
    pub pass: u32,
    /// The tool's name ("wirespeed", "iperf3", "bare", ...).
    pub tool: &'static str,
    /// Index of the rate in the configured list.
    pub rate_index: usize,
    /// wirespeed's point, when `tool` is wirespeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wirespeed: Option<Point>,
    /// iperf3's point, when `tool` is iperf3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iperf3: Option<PeerPoint>,
    /// Any other tool's point, under the tool's name (as `wirespeed` and `iperf3` are).
    #[serde(flatten)]
    pub others: BTreeMap<String, ToolPoint>,
}

/// The figures both tools report, in the same terms, so one table and one plot can hold both.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Figures {
    /// The asked rate as text.
    pub asked: String,
    /// The asked payload bits/s (`None`: flat out).
    pub asked_bps: Option<f64>,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Payload bits/s the sender managed.
    pub achieved_bps: f64,
    /// Payload bits/s received, over the sender's sending time.
    pub received_bps: f64,
    /// Datagrams sent (the sender's count).
    pub sent: u64,
    /// Datagrams received (the receiver's count).
    pub received: u64,
    /// `(sent - received) / sent`, percent: tail loss included, for both tools alike.
    pub loss_percent: f64,
    /// Whether the tool's own verdict is "lost something".
    pub lossy: bool,
    /// Sender CPU time per datagram sent, ns.
    pub send_cpu_ns_per_packet: Option<f64>,
    /// Receiver CPU time per datagram received, ns (wirespeed: capture thread; iperf3: server
    /// process).
    pub recv_cpu_ns_per_packet: Option<f64>,
    /// CPU per datagram of every receiving thread, ns: wirespeed's capture threads and writer
    /// (from its report; `None` when it does not report them all), the other tools' whole
    /// process.
    pub recv_all_cpu_ns_per_packet: Option<f64>,
}

pub(crate) fn loss_percent(sent: u64, received: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        sent.saturating_sub(received) as f64 * 100.0 / sent as f64
    }
}

/// The common figures of a peer's point: iperf3's [`PeerPoint`] and the other tools'
/// [`ToolPoint`] name these fields alike (their JSON differs elsewhere, so they stay two types).
macro_rules! peer_figures {
    ($p:expr) => {{
        let p = $p;
        Figures {
            asked: p.asked.clone(),
            asked_bps: p.asked_bps,
            size: p.size,
            achieved_bps: p.achieved_bps,
            received_bps: p.received_bps,
            sent: p.sent,
            received: p.received,
            loss_percent: loss_percent(p.sent, p.received),
            lossy: p.lossy,
            send_cpu_ns_per_packet: p.send_cpu_ns_per_packet,
            recv_cpu_ns_per_packet: p.recv_cpu_ns_per_packet,
            recv_all_cpu_ns_per_packet: p.recv_cpu_ns_per_packet,
        }
    }};
}

impl Run {
    /// The common figures of whichever tool ran.
    pub fn figures(&self) -> Figures {
        match (&self.wirespeed, &self.iperf3) {
            (Some(p), _) => Figures {
                asked: p.asked.clone(),
                asked_bps: p.asked_bps,
                size: p.size,
                achieved_bps: p.achieved_bps,
                received_bps: p.received_bps,
                sent: p.sent,
                received: p.received,
                loss_percent: loss_percent(p.sent, p.received),
                lossy: p.lossy,
                send_cpu_ns_per_packet: Some(p.send_cpu_ns_per_packet),
                recv_cpu_ns_per_packet: Some(p.recv_cpu_ns_per_packet),
                recv_all_cpu_ns_per_packet: p.recv_all_cpu_ns_per_packet,
            },
            (None, Some(p)) => peer_figures!(p),
            (None, None) if !self.others.is_empty() => peer_figures!(self.others.values().next().expect("one point")),
            (None, None) => Figures {
                asked: String::new(),
                asked_bps: None,
                size: 0,
                achieved_bps: 0.0,
                received_bps: 0.0,
                sent: 0,
                received: 0,
                loss_percent: 0.0,
                lossy: true,
                send_cpu_ns_per_packet: None,
                recv_cpu_ns_per_packet: None,
                recv_all_cpu_ns_per_packet: None,
            },
        }
    }
}

/// One tool's medians at one point over the passes.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ToolMedian {
    /// Runs the medians are over.
    pub runs: usize,
    /// Runs the tool itself judged lossy.
    pub lossy_runs: usize,
    /// Median achieved payload bits/s.
    pub achieved_bps: f64,
    /// Median received payload bits/s.
    pub received_bps: f64,
    /// Median loss, percent of sent.
    pub loss_percent: f64,
    /// Median sender CPU ns per datagram.
    pub send_cpu_ns_per_packet: Option<f64>,
    /// Median receiver CPU ns per datagram.
    pub recv_cpu_ns_per_packet: Option<f64>,
    /// Median CPU ns per datagram of every receiving thread (see [`Figures`]).
    pub recv_all_cpu_ns_per_packet: Option<f64>,
}

/// Both tools' medians at one (rate, size) point.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Cell {
    /// The asked rate as text.
    pub asked: String,
    /// The asked payload bits/s (`None`: flat out).
    pub asked_bps: Option<f64>,
    /// Payload bytes per datagram.
    pub size: usize,
    /// wirespeed's medians (`None` when it did not run here, e.g. stopped).
    pub wirespeed: Option<ToolMedian>,
    /// iperf3's medians.
    pub iperf3: Option<ToolMedian>,
    /// wirespeed's median received rate over iperf3's (above 1: wirespeed got more through).
    pub received_ratio: Option<f64>,
    /// Any other tool's medians, under the tool's name.
    #[serde(flatten)]
    pub others: BTreeMap<String, ToolMedian>,
    /// wirespeed's median received rate over each other tool's (not iperf3's: that is
    /// `received_ratio`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub received_ratios: BTreeMap<String, f64>,
}

/// Versions of the tools.
#[derive(Clone, Debug, Serialize)]
pub struct Versions {
    /// This wirespeed.
    pub wirespeed: String,
    /// `iperf3 --version`, when iperf3 ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iperf3: Option<String>,
    /// Every other tool's version, under its name.
    #[serde(flatten)]
    pub others: BTreeMap<String, String>,
}

/// The recording comparison's setting: where the recorders wrote and the disk's ceiling.
#[derive(Clone, Debug, Serialize)]
pub struct RecordSetting {
    /// The recording directory.
    pub dir: PathBuf,
    /// dd's runs, before and after the points.
    pub dd: Vec<DiskCeiling>,
    /// The ceiling: the mean of dd's runs, bytes/s (`None` when dd could not measure).
    pub dd_bytes_per_s: Option<f64>,
}

/// The whole comparison, as `--json` prints it and compare.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct CompareDoc {
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
    /// The tools' versions.
    pub versions: Versions,
    /// Offered rates as asked.
    pub rates: Vec<String>,
    /// Datagram payload sizes.
    pub sizes: Vec<usize>,
    /// Sending time per point, seconds.
    pub duration_s: f64,
    /// Passes over the grid.
    pub repeat: u32,
    /// UDP GSO asked of wirespeed's sender.
    pub gso: bool,
    /// Receive buffer asked for (wirespeed's receiver forces it when root).
    pub rcvbuf: u64,
    /// The socket buffer every tool got: iperf3's `-w` (send and receive buffers, both sides),
    /// capped by net.core.*mem_max, or the asked one when iperf3 is not compared.
    pub iperf3_socket_buffer: u64,
    /// The tools, in the order of the first point.
    pub tools: Vec<String>,
    /// What each tool's "received" counts.
    pub counts: BTreeMap<String, String>,
    /// The recording setting, when the tools recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<RecordSetting>,
    /// Every run of every tool, in the order run.
    pub runs: Vec<Run>,
    /// Per (size, rate): both tools' medians over the passes.
    pub medians: Vec<Cell>,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
    /// How to read the comparison (buffers, CPU measures, sender limits).
    pub notes: Vec<String>,
}
