//! `bench pacing`: how exactly `wirespeed send` keeps the rate it is asked for (BENCHMARKS.md
//! section 2), and at what CPU cost against iperf3's paced UDP client: achieved over
//! requested, the lowest and highest rate over any 1 s window, the gaps between send calls,
//! stalls given up, what the receiver lost, and each side's CPU per datagram, for a list of
//! sizes and rates, each run `repeat` times.
//!
//! wirespeed's figures are the sender's own report (`wirespeed send --json`), with a receiver
//! (`wirespeed recv --once --json`) on the other side so the datagrams go somewhere real and
//! their loss is counted; both are child processes of this binary in a [`Runner`]'s placement.
//! iperf3 (`iperf3 -u -b RATE -l SIZE`, server and client) runs at the same rate and size in
//! the same placement through `bench compare`'s driver ([`Iperf3`]), its CPU per datagram
//! from its own JSON (process CPU over the test time, per datagram).
//! The requirement the pacer was built to (issue #1) is 0.5 % over any 1 s window; the lean
//! pacer's (issue #15) is a sender CPU per datagram at most twice iperf3's at moderate rates.

use super::latency::{client_and_server, run_client, start_server, stop_server, ReadyOn};
use super::peer::{Iperf3, PeerPoint, IPERF3_MIN_SIZE};
use super::point::{asked_text, parse_doc, rate_arg, Placement, PointConfig, Runner};
use super::stats::upper_median;
use crate::testbed::place::Side;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use wirespeed::units::{self, Rate};
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.pacing/1";

/// The cases run by default: the two sizes at 1 and 5 Gb/s, where the sender's CPU is
/// compared with iperf3's. SIZE@RATE, `+gso` for UDP segmentation offload.
pub const DEFAULT_CASES: &str = "1080@1G,8800@1G,1080@5G,8800@5G";

/// The six cases of BENCHMARKS.md section 2 (pacing accuracy, GSO included).
pub const ACCURACY_CASES: &str = "8800@1G,8800@5G,8800@20G+gso,1080@100kpps,1080@500kpps+gso,1080@942M";

/// The pacer's requirement: every 1 s window within this fraction of the request.
pub const WINDOW_TARGET: f64 = 0.005;

/// The lean pacer's requirement at moderate rates: sender CPU per datagram at most this many
/// times iperf3's.
pub const SEND_CPU_TARGET: f64 = 2.0;

/// The receiver's own time limit beyond the run: a last resort if this process dies.
const RECV_SLACK: Duration = Duration::from_secs(30);

/// One size and rate to pace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Case {
    /// UDP payload bytes per datagram (counter format: a multiple of 8).
    pub size: usize,
    /// The rate asked for (payload bits/s or datagrams/s; never flat out).
    #[serde(serialize_with = "ser_rate")]
    pub rate: Rate,
    /// UDP GSO on the sender.
    pub gso: bool,
    /// The rate as written (1G, 500kpps), for tables.
    pub written: String,
}

fn ser_rate<S: serde::Serializer>(r: &Rate, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&asked_text(*r))
}

impl Case {
    /// `SIZE@RATE` or `SIZE@RATE+gso`, e.g. `8800@20G+gso` or `1080@100kpps`.
    pub fn parse(s: &str) -> std::result::Result<Case, String> {
        let t = s.trim();
        let (body, gso) = match t.strip_suffix("+gso") {
            Some(b) => (b, true),
            None => (t, false),
        };
        let (size, rate_text) = body.split_once('@').ok_or_else(|| {
            format!("'{s}' is not a case: write SIZE@RATE or SIZE@RATE+gso, e.g. 8800@1G or 1080@500kpps+gso")
        })?;
        let size = units::parse_bytes(size.trim()).map_err(|e| format!("'{s}': size: {e}"))?;
        if !(8..=units::MAX_UDP_PAYLOAD as u64).contains(&size) || size % 8 != 0 {
            return Err(format!("'{s}': size {size} is not a counter datagram: use a multiple of 8 from 8 to 65496"));
        }
        let rate = Rate::parse(rate_text.trim()).map_err(|e| format!("'{s}': {e}"))?;
        if rate == Rate::Max {
            return Err(format!("'{s}': pacing is about a rate: give one (max is not paced)"));
        }
        Ok(Case { size: size as usize, rate, gso, written: rate_text.trim().to_string() })
    }

    /// The case as written, e.g. "8800@20G+gso".
    pub fn label(&self) -> String {
        format!("{}@{}{}", self.size, self.written, if self.gso { "+gso" } else { "" })
    }

    /// Datagrams per second asked for.
    pub fn pps(&self) -> f64 {
        self.rate.packets_per_sec(self.size).unwrap_or(0.0)
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct PacingConfig {
    /// Cases, in order.
    pub cases: Vec<Case>,
    /// Sending time per run.
    pub duration: Duration,
    /// Runs per case.
    pub repeat: u32,
    /// Receive buffer the receiver asks for.
    pub rcvbuf: u64,
    /// Run iperf3 at every case too (left out with a note when it cannot run).
    pub iperf3: bool,
}

/// One run of one case: the sender's figures and the receiver's count.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// Datagrams/s asked for.
    pub asked_pps: f64,
    /// Datagrams sent (the sender's count).
    pub sent: u64,
    /// Datagrams/s achieved.
    pub achieved_pps: f64,
    /// Achieved over requested (1.0 = exact).
    pub rate_ratio: Option<f64>,
    /// Lowest and highest rate over any 1 s window (sliding by 0.1 s), over the request;
    /// `None` for runs shorter than 1 s.
    pub window: Option<(f64, f64)>,
    /// Gap between send calls: median, 99th percentile and largest, ns.
    pub gap_p50_ns: u64,
    /// 99th percentile gap, ns.
    pub gap_p99_ns: u64,
    /// Largest gap, ns.
    pub gap_max_ns: u64,
    /// Stalls given up (a backlog older than the sender's --max-lag).
    pub slips: u64,
    /// Largest backlog behind schedule, ns.
    pub max_behind_ns: u64,
    /// Whether the sender used GSO.
    pub gso_used: bool,
    /// Sender CPU time per datagram, ns (pacing waits included).
    pub send_cpu_ns_per_packet: f64,
    /// Receiver CPU time per datagram, ns (the capture thread's).
    #[serde(default)]
    pub recv_cpu_ns_per_packet: f64,
    /// Unique sequence numbers the receiver got.
    pub received: u64,
    /// Lost: the ledger's count, or sent - received if more (tail loss).
    pub lost: u64,
    /// Whether the receiver got the end-of-stream message.
    pub end_of_stream: bool,
}

/// One case over its runs.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The case.
    pub case: Case,
    /// The case as written (SIZE@RATE[+gso]).
    pub label: String,
    /// Datagrams/s asked for.
    pub asked_pps: f64,
    /// Median achieved/requested over the runs.
    pub rate_ratio: Option<f64>,
    /// Lowest 1 s window of any run, over the request.
    pub window_lo: Option<f64>,
    /// Highest 1 s window of any run.
    pub window_hi: Option<f64>,
    /// Median of the runs' median send-call gaps, ns.
    pub gap_p50_ns: u64,
    /// Median of the runs' 99th-percentile gaps, ns.
    pub gap_p99_ns: u64,
    /// Stalls given up, all runs.
    pub slips: u64,
    /// Lost at the receiver, all runs.
    pub lost: u64,
    /// Every 1 s window of every run within [`WINDOW_TARGET`] of the request (`None` when no run
    /// lasted 1 s).
    pub within_target: Option<bool>,
    /// Median datagrams/s achieved.
    pub achieved_pps: Option<f64>,
    /// The worst 1 s window of any run: its distance from the request, as a fraction of it.
    pub worst_window: Option<f64>,
    /// Median sender CPU per datagram, ns.
    pub send_cpu_ns_per_packet: Option<f64>,
    /// Median receiver CPU per datagram, ns (the capture thread's).
    pub recv_cpu_ns_per_packet: Option<f64>,
    /// iperf3 at the same rate and size, when it ran.
    pub iperf3: Option<PeerRow>,
    /// wirespeed's median sender CPU per datagram over iperf3's.
    pub send_cpu_vs_iperf3: Option<f64>,
    /// wirespeed's median receiver CPU per datagram over iperf3's (server process).
    pub recv_cpu_vs_iperf3: Option<f64>,
    /// Every run.
    pub runs: Vec<Run>,
}

/// iperf3's runs of one case, summarised as wirespeed's are.
#[derive(Clone, Debug, Serialize)]
pub struct PeerRow {
    /// "iperf3".
    pub tool: &'static str,
    /// Median achieved/requested datagram rate.
    pub rate_ratio: Option<f64>,
    /// Median datagrams/s its client sent.
    pub achieved_pps: Option<f64>,
    /// The worst 1 s window of any run, from the client's per-second counts; `None` while
    /// the iperf3 driver does not hand them over.
    pub worst_window: Option<f64>,
    /// Median client CPU per datagram sent, ns (whole process: CPU use x test time / sent).
    pub send_cpu_ns_per_packet: Option<f64>,
    /// Median server CPU per datagram received, ns (whole process).
    pub recv_cpu_ns_per_packet: Option<f64>,
    /// Datagrams sent and never received, all runs (iperf3's tail loss included).
    pub missing: u64,
    /// Every run, as `bench compare` reports iperf3's points.
    pub runs: Vec<PeerPoint>,
}

/// The whole table, as `--json` prints it and pacing.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct PacingDoc {
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
    /// Sending time per run, seconds.
    pub duration_s: f64,
    /// Runs per case.
    pub repeat: u32,
    /// The requirement on every 1 s window, as a fraction of the request.
    pub window_target: f64,
    /// The requirement on the sender's CPU per datagram, as a multiple of iperf3's.
    pub send_cpu_target: f64,
    /// `iperf3 --version`, when iperf3 ran.
    pub iperf3: Option<String>,
    /// iperf3's `-w` (both sides' socket buffers), when it ran.
    pub iperf3_socket_buffer: Option<u64>,
    /// One row per case, in order.
    pub rows: Vec<Row>,
    /// What the reader should know (iperf3 left out, its buffer capped, its duration rounded).
    pub notes: Vec<String>,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
}

#[derive(Deserialize)]
struct SendDoc {
    sent: u64,
    achieved_pps: f64,
    rate_ratio: Option<f64>,
    per_second_range: Option<(f64, f64)>,
    gaps: Gaps,
    slips: u64,
    max_behind_ns: u64,
    gso_used: bool,
    cpu_ns_per_packet: f64,
}

#[derive(Deserialize)]
struct Gaps {
    p50_ns: u64,
    p99_ns: u64,
    max_ns: u64,
}

#[derive(Deserialize)]
struct RecvDoc {
    total: Totals,
    streams_without_end: usize,
    stopped_by: String,
    #[serde(default)]
    cpu_ns_per_packet: f64,
}

#[derive(Deserialize)]
struct Totals {
    received: u64,
    lost: u64,
}

/// One run of a case: a receiver on side 2, the sender on side 1.
fn run_once(runner: &Runner, cfg: &PacingConfig, case: &Case) -> Result<Option<Run>> {
    let pl = runner.placement();
    let loopback = pl.kind == "loopback";
    let mut rargs: Vec<String> = vec![
        "recv".into(),
        format!("{}:0", runner.receiver_ip()),
        "--once".into(),
        "--json".into(),
        "--size".into(),
        case.size.to_string(),
        "--rcvbuf".into(),
        cfg.rcvbuf.to_string(),
        "--duration".into(),
        format!("{}ms", (cfg.duration + RECV_SLACK).as_millis()),
    ];
    if let (true, Some(c)) = (loopback, pl.recv_cpus.first()) {
        rargs.extend(["--cpu".into(), c.to_string()]);
    }
    let server =
        start_server(runner.place().command(Side::Recv, &rargs), "the receiver", ReadyOn::Stderr, "listening on ")?;
    let addr = server.ready_line.split("listening on ").nth(1).and_then(|r| r.split_whitespace().next());
    let Some(addr) = addr.map(str::to_string) else {
        return Err(Error::io(format!("the receiver said '{}', not where it listens", server.ready_line)));
    };
    let mut sargs: Vec<String> = vec![
        "send".into(),
        addr,
        "--rate".into(),
        rate_arg(case.rate),
        "--size".into(),
        case.size.to_string(),
        "--duration".into(),
        format!("{}ns", cfg.duration.as_nanos()),
        "--json".into(),
    ];
    if case.gso {
        sargs.push("--gso".into());
    }
    if let (true, Some(c)) = (loopback, pl.send_cpus.first()) {
        sargs.extend(["--cpu".into(), c.to_string()]);
    }
    let ended = run_client(runner.place().command(Side::Send, &sargs), "the sender", cfg.duration, runner.stop_flag());
    // The receiver ends by itself on the end-of-stream message; if that never came, the
    // grace runs out and it is told to stop (then its report says so).
    let stopped = stop_server(server, Duration::from_secs(2));
    let Some((e, rout)) = client_and_server(ended, stopped, "the sender", "the receiver")? else { return Ok(None) };
    let s: SendDoc = parse_doc(&e.out, "wirespeed.send/1", "sender")?;
    let r: RecvDoc = parse_doc(&rout, "wirespeed.recv/1", "receiver")?;
    Ok(Some(Run {
        asked_pps: case.pps(),
        sent: s.sent,
        achieved_pps: s.achieved_pps,
        rate_ratio: s.rate_ratio,
        window: s.per_second_range,
        gap_p50_ns: s.gaps.p50_ns,
        gap_p99_ns: s.gaps.p99_ns,
        gap_max_ns: s.gaps.max_ns,
        slips: s.slips,
        max_behind_ns: s.max_behind_ns,
        gso_used: s.gso_used,
        send_cpu_ns_per_packet: s.cpu_ns_per_packet,
        recv_cpu_ns_per_packet: r.cpu_ns_per_packet,
        received: r.total.received,
        lost: r.total.lost.max(s.sent.saturating_sub(r.total.received)),
        end_of_stream: r.stopped_by == "end of stream" && r.streams_without_end == 0,
    }))
}

/// The median of whole numbers (nanoseconds), rounded back to one.
fn median_u(v: Vec<u64>) -> u64 {
    upper_median(v.into_iter().map(|x| x as f64).collect()).map_or(0, |m| m.round() as u64)
}

/// How far a (lowest, highest) pair of 1 s windows strays from the request, as a fraction.
pub fn window_error((lo, hi): (f64, f64)) -> f64 {
    (1.0 - lo).max(hi - 1.0)
}

/// The lowest and highest rate over any whole 1 s window of per-interval counts, each interval
/// `interval_s` long (a sliding window of `1 / interval_s` intervals), over `asked_pps`;
/// `None` when the counts span less than 1 s. For a peer's per-second counts.
pub fn window_range(counts: &[u64], interval_s: f64, asked_pps: f64) -> Option<(f64, f64)> {
    let per = (1.0 / interval_s).round() as usize;
    if per == 0 || counts.len() < per || asked_pps <= 0.0 {
        return None;
    }
    let rates: Vec<f64> = counts.windows(per).map(|w| w.iter().sum::<u64>() as f64 / asked_pps).collect();
    Some((rates.iter().copied().fold(f64::MAX, f64::min), rates.iter().copied().fold(0.0, f64::max)))
}

/// iperf3's lowest and highest 1 s window: `None` until its driver ([`Iperf3::run`]) hands
/// over the client's per-second packet counts (its report's `intervals`), which
/// [`window_range`] then reads.
fn peer_window(_p: &PeerPoint) -> Option<(f64, f64)> {
    None
}

/// A case's iperf3 summary from its runs (pure: tested without traffic).
pub fn peer_row(case: &Case, runs: Vec<PeerPoint>) -> PeerRow {
    let asked = case.pps();
    let windows: Vec<f64> = runs.iter().filter_map(peer_window).map(window_error).collect();
    PeerRow {
        tool: "iperf3",
        rate_ratio: upper_median(runs.iter().filter(|_| asked > 0.0).map(|p| p.achieved_pps / asked).collect()),
        achieved_pps: upper_median(runs.iter().map(|p| p.achieved_pps).collect()),
        worst_window: windows.into_iter().reduce(f64::max),
        send_cpu_ns_per_packet: upper_median(runs.iter().filter_map(|p| p.send_cpu_ns_per_packet).collect()),
        recv_cpu_ns_per_packet: upper_median(runs.iter().filter_map(|p| p.recv_cpu_ns_per_packet).collect()),
        missing: runs.iter().map(|p| p.missing).sum(),
        runs,
    }
}

impl Row {
    /// Put iperf3's runs of the same case beside wirespeed's, with the CPU ratios.
    pub fn with_peer(mut self, peer: PeerRow) -> Row {
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        self.send_cpu_vs_iperf3 = ratio(self.send_cpu_ns_per_packet, peer.send_cpu_ns_per_packet);
        self.recv_cpu_vs_iperf3 = ratio(self.recv_cpu_ns_per_packet, peer.recv_cpu_ns_per_packet);
        self.iperf3 = Some(peer);
        self
    }
}

/// A case's row from its runs (pure: tested without traffic).
pub fn row(case: &Case, runs: Vec<Run>) -> Row {
    let windows: Vec<(f64, f64)> = runs.iter().filter_map(|r| r.window).collect();
    let window_lo = windows.iter().map(|w| w.0).reduce(f64::min);
    let window_hi = windows.iter().map(|w| w.1).reduce(f64::max);
    let within_target = match (window_lo, window_hi) {
        (Some(lo), Some(hi)) => Some(lo >= 1.0 - WINDOW_TARGET && hi <= 1.0 + WINDOW_TARGET),
        _ => None,
    };
    let worst_window = match (window_lo, window_hi) {
        (Some(lo), Some(hi)) => Some(window_error((lo, hi))),
        _ => None,
    };
    Row {
        case: case.clone(),
        label: case.label(),
        asked_pps: case.pps(),
        rate_ratio: upper_median(runs.iter().filter_map(|r| r.rate_ratio).collect()),
        window_lo,
        window_hi,
        gap_p50_ns: median_u(runs.iter().map(|r| r.gap_p50_ns).collect()),
        gap_p99_ns: median_u(runs.iter().map(|r| r.gap_p99_ns).collect()),
        slips: runs.iter().map(|r| r.slips).sum(),
        lost: runs.iter().map(|r| r.lost).sum(),
        within_target,
        achieved_pps: upper_median(runs.iter().map(|r| r.achieved_pps).collect()),
        worst_window,
        send_cpu_ns_per_packet: upper_median(runs.iter().map(|r| r.send_cpu_ns_per_packet).collect()),
        recv_cpu_ns_per_packet: upper_median(runs.iter().map(|r| r.recv_cpu_ns_per_packet).collect()),
        iperf3: None,
        send_cpu_vs_iperf3: None,
        recv_cpu_vs_iperf3: None,
        runs,
    }
}

/// iperf3 prepared for the run, or `None` with a note saying why it is left out.
fn prepare_iperf3(runner: &Runner, cfg: &PacingConfig, notes: &mut Vec<String>) -> Option<Iperf3> {
    if !cfg.iperf3 {
        return None;
    }
    let p = match Iperf3::prepare(runner, cfg.rcvbuf) {
        Ok(p) => p,
        Err(e) => {
            notes.push(format!("{e}: iperf3 is left out"));
            return None;
        }
    };
    if let Some(cap) = p.capped_by {
        notes.push(format!(
            "iperf3's socket buffers (-w) are capped at {} by net.core.rmem_max/wmem_max (wirespeed's receiver asks for {})",
            units::bytes(cap),
            units::bytes(cfg.rcvbuf)
        ));
    }
    let secs = cfg.duration.as_secs_f64();
    if (secs - secs.round()).abs() > 1e-9 || secs < 1.0 {
        notes.push(format!("iperf3 runs whole seconds: {} s per run", secs.round().max(1.0)));
    }
    if cfg.cases.iter().any(|c| c.gso) {
        notes.push("iperf3 3.12 has no GSO: its +gso cases send one datagram per system call".into());
    }
    Some(p)
}

/// One iperf3 run of a case: `Ok(None)` when stopped.
fn peer_once(runner: &Runner, cfg: &PacingConfig, iperf3: &Iperf3, case: &Case) -> Result<Option<PeerPoint>> {
    let pc = PointConfig { rate: case.rate, size: case.size, duration: cfg.duration, gso: false, rcvbuf: cfg.rcvbuf };
    iperf3.run(runner, &pc)
}

/// The cases iperf3 cannot send (below its 16-byte header), as one usage line; `None` when
/// every case is fine.
pub fn iperf3_refuses(cases: &[Case]) -> Option<String> {
    let small: Vec<String> = cases.iter().filter(|c| c.size < IPERF3_MIN_SIZE).map(Case::label).collect();
    (!small.is_empty()).then(|| {
        format!(
            "iperf3 sends at least {IPERF3_MIN_SIZE}-byte datagrams, and {} is smaller: use a larger size or --no-iperf3",
            small.join(", ")
        )
    })
}

/// Run every case `repeat` times, each time wirespeed and (unless left out) iperf3, in
/// alternating order so that drift on a busy host hits both; `each` sees every row as it is
/// done.
pub fn run(runner: &Runner, cfg: &PacingConfig, each: &mut dyn FnMut(&Row)) -> Result<PacingDoc> {
    let mut rows = Vec::new();
    let mut stopped = false;
    let mut notes = Vec::new();
    let iperf3 = prepare_iperf3(runner, cfg, &mut notes);
    'cases: for case in &cfg.cases {
        let mut runs = Vec::new();
        let mut peer_runs = Vec::new();
        for k in 0..cfg.repeat {
            let peer_first = k % 2 == 1;
            for wirespeed_turn in [!peer_first, peer_first] {
                let done = if wirespeed_turn {
                    run_once(runner, cfg, case)?.map(|r| runs.push(r))
                } else if let Some(p) = &iperf3 {
                    peer_once(runner, cfg, p, case)?.map(|r| peer_runs.push(r))
                } else {
                    Some(())
                };
                if done.is_none() {
                    stopped = true;
                    break 'cases;
                }
            }
        }
        let mut r = row(case, runs);
        if iperf3.is_some() {
            r = r.with_peer(peer_row(case, peer_runs));
        }
        each(&r);
        rows.push(r);
    }
    if iperf3.is_some() {
        notes.push(
            "CPU per datagram: wirespeed's sender is its sending thread (pacing waits included), its receiver the \
             capture thread; iperf3's are whole processes (CPU use x test time / datagrams); iperf3's per-second \
             windows are not reported by its driver yet"
                .into(),
        );
    }
    Ok(PacingDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement: runner.placement() },
        duration_s: cfg.duration.as_secs_f64(),
        repeat: cfg.repeat,
        window_target: WINDOW_TARGET,
        send_cpu_target: SEND_CPU_TARGET,
        iperf3_socket_buffer: iperf3.as_ref().map(|p| p.socket_buffer),
        iperf3: iperf3.map(|p| p.version),
        rows,
        notes,
        stopped,
    })
}

/// The heading of the table.
pub fn header(cfg: &PacingConfig, placement: &Placement) -> String {
    format!(
        "wirespeed bench pacing: {} run(s) of {} per case (medians; windows over all runs); {}\n\
         | payload | rate | achieved / requested | lowest..highest over any 1 s window | send-call gap p50 / p99 | stalls given up | receiver lost |\n\
         |---:|---|---|---|---|---:|---:|\n",
        cfg.repeat,
        units::nanos(cfg.duration.as_nanos() as f64),
        placement.description
    )
}

fn pct(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{:.*}%", digits, v * 100.0))
}

/// One table line.
pub fn line(r: &Row) -> String {
    format!(
        "| {} | {}{} | {} | {}..{} | {:.1} / {:.1} us | {} | {} |",
        r.case.size,
        r.case.written,
        if r.case.gso { " --gso" } else { "" },
        pct(r.rate_ratio, 3),
        pct(r.window_lo, 2),
        pct(r.window_hi, 2),
        r.gap_p50_ns as f64 / 1e3,
        r.gap_p99_ns as f64 / 1e3,
        r.slips,
        r.lost
    )
}

/// The heading of the per-tool table (CPU per datagram and worst window, wirespeed and iperf3).
pub const TOOLS_HEADER: &str = "| payload | rate | tool | achieved / requested | worst 1 s window | sender CPU / datagram | receiver CPU / datagram | sender CPU vs iperf3 |\n\
     |---:|---|---|---|---:|---:|---:|---:|\n";

fn us(ns: Option<f64>) -> String {
    ns.map_or("-".into(), |v| format!("{:.2} us", v / 1e3))
}

/// The per-tool lines of a row: wirespeed's, then iperf3's when it ran.
pub fn tool_lines(r: &Row) -> Vec<String> {
    let case = format!("| {} | {}{} ", r.case.size, r.case.written, if r.case.gso { " --gso" } else { "" });
    let mut v = vec![format!(
        "{case}| wirespeed | {} | {} | {} | {} | {} |",
        pct(r.rate_ratio, 3),
        pct(r.worst_window, 2),
        us(r.send_cpu_ns_per_packet),
        us(r.recv_cpu_ns_per_packet),
        r.send_cpu_vs_iperf3.map_or("-".into(), |x| format!("{x:.2}x")),
    )];
    if let Some(p) = &r.iperf3 {
        v.push(format!(
            "{case}| iperf3 | {} | {} | {} | {} | 1 |",
            pct(p.rate_ratio, 3),
            pct(p.worst_window, 2),
            us(p.send_cpu_ns_per_packet),
            us(p.recv_cpu_ns_per_packet),
        ));
    }
    v
}

/// The sender's CPU against iperf3's, in words: the worst case against the requirement;
/// `None` when iperf3 did not run.
pub fn cpu_verdict(doc: &PacingDoc) -> Option<String> {
    let worst = doc.rows.iter().filter_map(|r| Some((r, r.send_cpu_vs_iperf3?))).max_by(|a, b| a.1.total_cmp(&b.1))?;
    let (r, x) = worst;
    Some(format!(
        "the sender's CPU per datagram was at most {x:.2}x iperf3's ({}); the requirement is {SEND_CPU_TARGET:.0}x: {}",
        r.label,
        if x <= SEND_CPU_TARGET { "met" } else { "NOT met" }
    ))
}

/// What the table says, in words: the worst window against the requirement.
pub fn verdict(doc: &PacingDoc) -> String {
    let worst = doc
        .rows
        .iter()
        .filter_map(|r| Some((r, (1.0 - r.window_lo?).max(r.window_hi? - 1.0))))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    match worst {
        None => "no run lasted 1 s: no window to judge (give --duration 1s or more)".into(),
        Some((r, w)) => format!(
            "the worst 1 s window was {:.2}% off the request ({}); the requirement is {:.1}%: {}",
            w * 100.0,
            r.label,
            WINDOW_TARGET * 100.0,
            if w <= WINDOW_TARGET { "met" } else { "NOT met" }
        ),
    }
}

/// The whole table as text.
pub fn text(doc: &PacingDoc, cfg: &PacingConfig) -> String {
    let mut s = header(cfg, &doc.head.placement);
    for r in &doc.rows {
        s.push_str(&line(r));
        s.push('\n');
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s.push_str(&format!("=> {}\n", verdict(doc)));
    s.push_str(&tools_text(doc));
    s
}

/// The per-tool table with its verdict and notes (empty when there are no rows).
pub fn tools_text(doc: &PacingDoc) -> String {
    if doc.rows.is_empty() {
        return String::new();
    }
    let mut s = format!("\n{TOOLS_HEADER}");
    for l in doc.rows.iter().flat_map(tool_lines) {
        s.push_str(&l);
        s.push('\n');
    }
    if let Some(v) = cpu_verdict(doc) {
        s.push_str(&format!("=> {v}\n"));
    }
    for n in &doc.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_parse_as_written_and_bad_ones_say_how() {
        let d: Vec<String> = DEFAULT_CASES.split(',').map(|c| Case::parse(c).unwrap().label()).collect();
        assert_eq!(d, ["1080@1G", "8800@1G", "1080@5G", "8800@5G"]);
        let v: Vec<Case> = ACCURACY_CASES.split(',').map(|c| Case::parse(c).unwrap()).collect();
        assert_eq!(v.len(), 6);
        assert_eq!(v[2], Case { size: 8800, rate: Rate::Bits(20e9), gso: true, written: "20G".into() });
        assert_eq!(v[3], Case { size: 1080, rate: Rate::Packets(100e3), gso: false, written: "100kpps".into() });
        assert_eq!(v[2].label(), "8800@20G+gso");
        assert_eq!(v[3].label(), "1080@100kpps");
        assert_eq!(Case::parse(&v[4].label()).unwrap(), v[4]);
        assert!(Case::parse("8800").unwrap_err().contains("SIZE@RATE"));
        assert!(Case::parse("8801@1G").unwrap_err().contains("multiple of 8"));
        assert!(Case::parse("8800@max").unwrap_err().contains("not paced"));
        assert!(Case::parse("8800@fast").is_err());
    }

    fn run_of(ratio: f64, lo: f64, hi: f64, p50: u64, lost: u64) -> Run {
        Run {
            asked_pps: 1000.0,
            sent: 1000,
            achieved_pps: 1000.0 * ratio,
            rate_ratio: Some(ratio),
            window: Some((lo, hi)),
            gap_p50_ns: p50,
            gap_p99_ns: p50 * 2,
            gap_max_ns: p50 * 3,
            slips: 1,
            max_behind_ns: 0,
            gso_used: false,
            send_cpu_ns_per_packet: p50 as f64 / 10.0,
            recv_cpu_ns_per_packet: 2000.0,
            received: 1000 - lost,
            lost,
            end_of_stream: true,
        }
    }

    #[test]
    fn rows_take_medians_and_the_extreme_windows() {
        let c = Case::parse("1080@100kpps").unwrap();
        let r = row(
            &c,
            vec![
                run_of(1.00001, 0.9999, 1.0001, 50_000, 0),
                run_of(1.0, 0.9993, 1.0, 49_000, 2),
                run_of(1.00002, 1.0, 1.0007, 51_000, 0),
            ],
        );
        assert_eq!(r.rate_ratio, Some(1.00001));
        assert_eq!((r.window_lo, r.window_hi), (Some(0.9993), Some(1.0007)));
        assert_eq!((r.gap_p50_ns, r.gap_p99_ns, r.slips, r.lost), (50_000, 100_000, 3, 2));
        assert_eq!(r.within_target, Some(true));
        assert_eq!(line(&r), "| 1080 | 100kpps | 100.001% | 99.93%..100.07% | 50.0 / 100.0 us | 3 | 2 |");
        let bad = row(&c, vec![run_of(1.0, 0.99, 1.0, 1, 0)]);
        assert_eq!(bad.within_target, Some(false));
        let doc = PacingDoc {
            head: crate::bench::DocHead { schema: SCHEMA, placement: Placement::test_loopback(&[], &[]) },
            duration_s: 1.0,
            repeat: 1,
            window_target: WINDOW_TARGET,
            send_cpu_target: SEND_CPU_TARGET,
            iperf3: None,
            iperf3_socket_buffer: None,
            rows: vec![r, bad],
            notes: vec![],
            stopped: false,
        };
        assert!(verdict(&doc).starts_with("the worst 1 s window was 1.00% off the request (1080@100kpps)"));
        assert!(verdict(&doc).ends_with("NOT met"));
        assert_eq!(cpu_verdict(&doc), None, "no iperf3, no CPU verdict");
        assert_eq!(doc.rows[0].worst_window, Some(0.0007000000000000339));
        assert_eq!(doc.rows[0].send_cpu_ns_per_packet, Some(5000.0));
        assert!(tools_text(&doc).contains("| 1080 | 100kpps | wirespeed | 100.001% | 0.07% | 5.00 us | 2.00 us | - |"));
    }

    fn peer(sent: u64, received: u64, send_ns: f64, recv_ns: f64) -> PeerPoint {
        PeerPoint {
            tool: "iperf3".into(),
            version: "iperf 3.12".into(),
            asked: "100.0 kpps".into(),
            asked_bps: Some(864e6),
            size: 1080,
            duration_s: 1.0,
            achieved_bps: sent as f64 * 8640.0,
            achieved_pps: sent as f64,
            send_elapsed_s: 1.0,
            received_bps: received as f64 * 8640.0,
            received_pps: received as f64,
            iperf3_received_bps: received as f64 * 8640.0,
            sent,
            received,
            lost: 0,
            lost_percent: 0.0,
            missing: sent - received,
            out_of_order: 0,
            send_cpu_percent: 50.0,
            recv_cpu_percent: 30.0,
            send_cpu_ns_per_packet: Some(send_ns),
            recv_cpu_ns_per_packet: Some(recv_ns),
            send_cpus: vec![0],
            recv_cpus: vec![1],
            socket_buffer_asked: 1 << 22,
            rcvbuf_granted: Some(1 << 23),
            lossy: sent != received,
        }
    }

    #[test]
    fn iperf3_sits_beside_wirespeed_with_the_cpu_ratios() {
        let c = Case::parse("1080@100kpps").unwrap();
        let p = peer_row(
            &c,
            vec![
                peer(99_000, 99_000, 4000.0, 3000.0),
                peer(100_000, 99_990, 2000.0, 3500.0),
                peer(100_000, 100_000, 3000.0, 1000.0),
            ],
        );
        assert_eq!(p.rate_ratio, Some(1.0));
        assert_eq!((p.send_cpu_ns_per_packet, p.recv_cpu_ns_per_packet), (Some(3000.0), Some(3000.0)));
        assert_eq!((p.missing, p.worst_window, p.runs.len()), (10, None, 3));
        let r = row(&c, vec![run_of(1.0, 0.999, 1.001, 45_000, 0)]).with_peer(p);
        assert_eq!(r.send_cpu_vs_iperf3, Some(1.5));
        assert_eq!(r.recv_cpu_vs_iperf3, Some(2000.0 / 3000.0));
        let lines = tool_lines(&r);
        assert_eq!(lines[1], "| 1080 | 100kpps | iperf3 | 100.000% | - | 3.00 us | 3.00 us | 1 |");
        assert!(lines[0].ends_with("| 4.50 us | 2.00 us | 1.50x |"), "{}", lines[0]);
        let doc = PacingDoc {
            head: crate::bench::DocHead { schema: SCHEMA, placement: Placement::test_loopback(&[], &[]) },
            duration_s: 1.0,
            repeat: 1,
            window_target: WINDOW_TARGET,
            send_cpu_target: SEND_CPU_TARGET,
            iperf3: Some("iperf 3.12".into()),
            iperf3_socket_buffer: Some(1 << 22),
            rows: vec![r],
            notes: vec!["a note".into()],
            stopped: false,
        };
        assert_eq!(
            cpu_verdict(&doc).unwrap(),
            "the sender's CPU per datagram was at most 1.50x iperf3's (1080@100kpps); the requirement is 2x: met"
        );
        assert!(tools_text(&doc).ends_with("note: a note\n"));
    }

    #[test]
    fn windows_over_per_interval_counts() {
        // Per-second counts: every whole-second window.
        assert_eq!(window_range(&[1000, 990, 1010], 1.0, 1000.0), Some((0.99, 1.01)));
        // Tenths, sliding by one.
        let tenths = [100u64; 12];
        assert_eq!(window_range(&tenths, 0.1, 1000.0), Some((1.0, 1.0)));
        assert_eq!(window_range(&[100; 9], 0.1, 1000.0), None, "shorter than 1 s");
        assert_eq!(window_error((0.998, 1.001)), 0.0020000000000000018);
        let bad = Case::parse("8@1000pps").unwrap();
        assert!(iperf3_refuses(&[Case::parse("16@1G").unwrap()]).is_none());
        assert!(iperf3_refuses(&[bad]).unwrap().contains("8@1000pps is smaller"));
    }
}
