//! `bench pacing`: how exactly `wirespeed send` keeps the rate it is asked for (BENCHMARKS.md
//! section 2): achieved over requested, the lowest and highest rate over any 1 s window, the
//! gaps between send calls, stalls given up, and what the receiver lost, for a list of sizes
//! and rates, each run `repeat` times.
//!
//! Every figure is the sender's own report (`wirespeed send --json`), with a receiver
//! (`wirespeed recv --once --json`) on the other side so the datagrams go somewhere real and
//! their loss is counted; both are child processes of this binary in a [`Runner`]'s placement.
//! The requirement the pacer was built to (issue #1) is 0.5 % over any 1 s window.

use super::latency::{client_and_server, run_client, start_server, stop_server, ReadyOn};
use super::point::{asked_text, parse_doc, rate_arg, Placement, Runner};
use super::stats::upper_median;
use crate::testbed::place::Side;
use crate::units::{self, Rate};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.pacing/1";

/// The cases of BENCHMARKS.md section 2: SIZE@RATE, `+gso` for UDP segmentation offload.
pub const DEFAULT_CASES: &str = "8800@1G,8800@5G,8800@20G+gso,1080@100kpps,1080@500kpps+gso,1080@942M";

/// The pacer's requirement: every 1 s window within this fraction of the request.
pub const WINDOW_TARGET: f64 = 0.005;

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
    /// Every run.
    pub runs: Vec<Run>,
}

/// The whole table, as `--json` prints it and pacing.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct PacingDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Where the runs ran.
    pub placement: Placement,
    /// Sending time per run, seconds.
    pub duration_s: f64,
    /// Runs per case.
    pub repeat: u32,
    /// The requirement on every 1 s window, as a fraction of the request.
    pub window_target: f64,
    /// One row per case, in order.
    pub rows: Vec<Row>,
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
        return Err(Error::Runtime(format!("the receiver said '{}', not where it listens", server.ready_line)));
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
        received: r.total.received,
        lost: r.total.lost.max(s.sent.saturating_sub(r.total.received)),
        end_of_stream: r.stopped_by == "end of stream" && r.streams_without_end == 0,
    }))
}

/// The median of whole numbers (nanoseconds), rounded back to one.
fn median_u(v: Vec<u64>) -> u64 {
    upper_median(v.into_iter().map(|x| x as f64).collect()).map_or(0, |m| m.round() as u64)
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
        runs,
    }
}

/// Run every case `repeat` times; `each` sees every row as it is done.
pub fn run(runner: &Runner, cfg: &PacingConfig, each: &mut dyn FnMut(&Row)) -> Result<PacingDoc> {
    let mut rows = Vec::new();
    let mut stopped = false;
    'cases: for case in &cfg.cases {
        let mut runs = Vec::new();
        for _ in 0..cfg.repeat {
            match run_once(runner, cfg, case)? {
                Some(r) => runs.push(r),
                None => {
                    stopped = true;
                    break 'cases;
                }
            }
        }
        let r = row(case, runs);
        each(&r);
        rows.push(r);
    }
    Ok(PacingDoc {
        schema: SCHEMA,
        placement: runner.placement(),
        duration_s: cfg.duration.as_secs_f64(),
        repeat: cfg.repeat,
        window_target: WINDOW_TARGET,
        rows,
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
    let mut s = header(cfg, &doc.placement);
    for r in &doc.rows {
        s.push_str(&line(r));
        s.push('\n');
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s.push_str(&format!("=> {}\n", verdict(doc)));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_parse_as_written_and_bad_ones_say_how() {
        let v: Vec<Case> = DEFAULT_CASES.split(',').map(|c| Case::parse(c).unwrap()).collect();
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
            send_cpu_ns_per_packet: 1.0,
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
            schema: SCHEMA,
            placement: Placement {
                kind: "loopback",
                prefix: None,
                send_cpus: vec![],
                recv_cpus: vec![],
                description: "loopback".into(),
            },
            duration_s: 1.0,
            repeat: 1,
            window_target: WINDOW_TARGET,
            rows: vec![r, bad],
            stopped: false,
        };
        assert!(verdict(&doc).starts_with("the worst 1 s window was 1.00% off the request (1080@100kpps)"));
        assert!(verdict(&doc).ends_with("NOT met"));
    }
}
