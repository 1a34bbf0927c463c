//! `bench capture`: the receiver's capture thread CPU per datagram, for one build or for two
//! builds run alternately (A/B) in the same session (BENCHMARKS.md section 9, issue #13).
//!
//! A change on the capture path is judged by this figure: the receiver's own
//! `cpu_ns_per_packet` (its capture thread's CPU time over the datagrams it took in) while a
//! sender sends `count` datagrams flat out. On a shared host the figure spreads by a quarter
//! from run to run, so two builds are compared only run against run, alternating, and by the
//! median of many runs. The receiver is given no `--size` unless asked, so the checks that
//! formats without a fixed length need (the stream's length lock) are on the measured path.

use super::latency::{client_and_server, run_client, start_server, stop_server, ReadyOn};
use super::point::{parse_doc, Placement, Runner};
use super::stats::upper_median;
use crate::testbed::place::Side;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.capture/1";

/// Longest a run may take beyond what the datagrams need at a modest rate.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// A build of wirespeed to measure: both ends of its runs are this binary.
#[derive(Clone, Debug, Serialize)]
pub struct Build {
    /// "A" (the other build) or "B" (this one), or "this" when alone.
    pub label: String,
    /// The binary.
    pub exe: PathBuf,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct CaptureConfig {
    /// UDP payload bytes per datagram (counter format).
    pub size: usize,
    /// Datagrams per run.
    pub count: u64,
    /// Runs per build.
    pub repeat: u32,
    /// Give the receiver `--size` (fixed length), which leaves the length lock off the path.
    pub fixed_size: bool,
    /// Builds, run in this order in every round.
    pub builds: Vec<Build>,
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// Which build.
    pub build: String,
    /// Round, 0-based (one run of every build per round).
    pub round: u32,
    /// The capture thread's CPU per datagram, ns (the receiver's `cpu_ns_per_packet`).
    pub cpu_ns_per_packet: f64,
    /// Datagrams the sender sent.
    pub sent: u64,
    /// Unique sequence numbers received.
    pub received: u64,
    /// Lost (the ledger).
    pub lost: u64,
}

/// One build over its runs.
#[derive(Clone, Debug, Serialize)]
pub struct BuildSummary {
    /// Which build.
    pub build: String,
    /// Its binary.
    pub exe: String,
    /// Runs behind the figures.
    pub runs: usize,
    /// Median CPU per datagram, ns.
    pub median_ns: f64,
    /// Lowest, ns.
    pub min_ns: f64,
    /// Highest, ns.
    pub max_ns: f64,
}

/// The whole comparison, as `--json` prints it and capture.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct CaptureDoc {
    /// The schema id and where the run's two ends were, first ([`DocHead`](crate::bench::DocHead)).
    #[serde(flatten)]
    pub head: crate::bench::DocHead,
    /// UDP payload bytes per datagram.
    pub size: usize,
    /// Datagrams per run.
    pub count: u64,
    /// Runs per build.
    pub repeat: u32,
    /// Whether the receiver was given `--size`.
    pub fixed_size: bool,
    /// Every run, in the order run.
    pub runs: Vec<Run>,
    /// One per build.
    pub builds: Vec<BuildSummary>,
    /// With two builds: B's median over A's.
    pub ratio_of_medians: Option<f64>,
    /// With two builds: the median of B/A over the rounds (run against run).
    pub median_pairwise_ratio: Option<f64>,
    /// Every run received every datagram sent and lost none.
    pub all_received: bool,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
}

#[derive(Deserialize)]
struct RecvDoc {
    total: Totals,
    cpu_ns_per_packet: f64,
}

#[derive(Deserialize)]
struct Totals {
    received: u64,
    lost: u64,
}

#[derive(Deserialize)]
struct SendDoc {
    sent: u64,
}

/// One run of one build: its receiver on side 2, its sender flat out on side 1.
fn run_once(runner: &Runner, cfg: &CaptureConfig, b: &Build) -> Result<Option<(RecvDoc, u64)>> {
    let pl = runner.placement();
    let loopback = pl.kind == "loopback";
    let exe = b.exe.display().to_string();
    let mut rargs: Vec<String> =
        vec!["recv".into(), format!("{}:0", runner.receiver_ip()), "--once".into(), "--json".into()];
    if cfg.fixed_size {
        rargs.extend(["--size".into(), cfg.size.to_string()]);
    }
    if let (true, Some(c)) = (loopback, pl.recv_cpus.first()) {
        rargs.extend(["--cpu".into(), c.to_string()]);
    }
    rargs.extend(["--duration".into(), format!("{}s", RUN_LIMIT.as_secs() * 2)]);
    let who = format!("the receiver of build {}", b.label);
    let server =
        start_server(runner.place().tool_command(Side::Recv, &exe, &rargs), &who, ReadyOn::Stderr, "listening on ")?;
    let addr = server.ready_line.split("listening on ").nth(1).and_then(|r| r.split_whitespace().next());
    let Some(addr) = addr.map(str::to_string) else {
        return Err(Error::io(format!("{who} said '{}', not where it listens", server.ready_line)));
    };
    let mut sargs: Vec<String> = vec![
        "send".into(),
        addr,
        "--rate".into(),
        "max".into(),
        "--count".into(),
        cfg.count.to_string(),
        "--size".into(),
        cfg.size.to_string(),
        "--json".into(),
    ];
    if let (true, Some(c)) = (loopback, pl.send_cpus.first()) {
        sargs.extend(["--cpu".into(), c.to_string()]);
    }
    let ended =
        run_client(runner.place().tool_command(Side::Send, &exe, &sargs), "the sender", RUN_LIMIT, runner.stop_flag());
    let stopped = stop_server(server, Duration::from_secs(2));
    let Some((e, rout)) = client_and_server(ended, stopped, "the sender", &who)? else { return Ok(None) };
    let s: SendDoc = parse_doc(&e.out, "wirespeed.send/1", "sender")?;
    Ok(Some((parse_doc(&rout, "wirespeed.recv/1", "receiver")?, s.sent)))
}

/// Run `repeat` rounds, each one run of every build in order; `each` sees every run.
pub fn run(runner: &Runner, cfg: &CaptureConfig, each: &mut dyn FnMut(&Run)) -> Result<CaptureDoc> {
    let mut runs = Vec::new();
    let mut stopped = false;
    'rounds: for round in 0..cfg.repeat {
        for b in &cfg.builds {
            let Some((r, sent)) = run_once(runner, cfg, b)? else {
                stopped = true;
                break 'rounds;
            };
            let run = Run {
                build: b.label.clone(),
                round,
                cpu_ns_per_packet: r.cpu_ns_per_packet,
                sent,
                received: r.total.received,
                lost: r.total.lost,
            };
            each(&run);
            runs.push(run);
        }
    }
    Ok(finish(cfg, runner.placement(), runs, stopped))
}

/// The document around finished runs (pure: tested without traffic).
pub fn finish(cfg: &CaptureConfig, placement: Placement, runs: Vec<Run>, stopped: bool) -> CaptureDoc {
    let builds: Vec<BuildSummary> = cfg
        .builds
        .iter()
        .filter_map(|b| {
            let v: Vec<f64> = runs.iter().filter(|r| r.build == b.label).map(|r| r.cpu_ns_per_packet).collect();
            Some(BuildSummary {
                build: b.label.clone(),
                exe: b.exe.display().to_string(),
                runs: v.len(),
                median_ns: upper_median(v.clone())?,
                min_ns: v.iter().copied().fold(f64::INFINITY, f64::min),
                max_ns: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            })
        })
        .collect();
    let (ratio_of_medians, median_pairwise_ratio) = match (cfg.builds.first(), cfg.builds.get(1), builds.len()) {
        (Some(a), Some(b), 2) => {
            let pairs: Vec<f64> = (0..cfg.repeat)
                .filter_map(|k| {
                    let of = |l: &str| runs.iter().find(|r| r.round == k && r.build == l).map(|r| r.cpu_ns_per_packet);
                    Some(of(&b.label)? / of(&a.label)?)
                })
                .collect();
            (Some(builds[1].median_ns / builds[0].median_ns), upper_median(pairs))
        }
        _ => (None, None),
    };
    CaptureDoc {
        head: crate::bench::DocHead { schema: SCHEMA, placement },
        size: cfg.size,
        count: cfg.count,
        repeat: cfg.repeat,
        fixed_size: cfg.fixed_size,
        all_received: runs.iter().all(|r| r.received == r.sent && r.lost == 0),
        runs,
        builds,
        ratio_of_medians,
        median_pairwise_ratio,
        stopped,
    }
}

/// The heading.
pub fn header(cfg: &CaptureConfig, placement: &Placement) -> String {
    format!(
        "wirespeed bench capture: capture-thread CPU per datagram, {} datagrams of {} B flat out per run, receiver {}, {} round(s) of {}; {}",
        wirespeed::units::thousands(cfg.count),
        cfg.size,
        if cfg.fixed_size { "with --size" } else { "without --size (length lock on)" },
        cfg.repeat,
        cfg.builds.iter().map(|b| format!("{} = {}", b.label, b.exe.display())).collect::<Vec<_>>().join(", "),
        placement.description
    )
}

/// One run on one line.
pub fn run_line(r: &Run) -> String {
    format!(
        "round {:>2} build {}: {:>8.1} ns/datagram  sent {}  received {}  lost {}",
        r.round + 1,
        r.build,
        r.cpu_ns_per_packet,
        wirespeed::units::thousands(r.sent),
        wirespeed::units::thousands(r.received),
        wirespeed::units::thousands(r.lost)
    )
}

/// The summary lines.
pub fn summary(doc: &CaptureDoc) -> String {
    let mut s = String::new();
    for b in &doc.builds {
        s.push_str(&format!(
            "build {}: median {:.0} ns/datagram over {} runs (spread {:.0}..{:.0})\n",
            b.build, b.median_ns, b.runs, b.min_ns, b.max_ns
        ));
    }
    if let (Some(r), Some(p)) = (doc.ratio_of_medians, doc.median_pairwise_ratio) {
        s.push_str(&format!("=> B/A: {r:.3} (ratio of the medians), {p:.3} (median of the pairwise ratios)\n"));
    }
    if !doc.all_received {
        s.push_str("note: some run did not receive every datagram sent; its figure covers fewer datagrams\n");
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_builds_give_both_ratios() {
        let b = |l: &str| Build { label: l.into(), exe: PathBuf::from(format!("/x/{l}")) };
        let cfg = CaptureConfig { size: 1024, count: 10, repeat: 3, fixed_size: false, builds: vec![b("A"), b("B")] };
        let r = |build: &str, round, ns| Run {
            build: build.into(),
            round,
            cpu_ns_per_packet: ns,
            sent: 10,
            received: 10,
            lost: 0,
        };
        let runs = vec![
            r("A", 0, 1000.0),
            r("B", 0, 1100.0),
            r("A", 1, 900.0),
            r("B", 1, 900.0),
            r("A", 2, 1200.0),
            r("B", 2, 1000.0),
        ];
        let pl = Placement::test_loopback(&[], &[]);
        let d = finish(&cfg, pl, runs, false);
        assert_eq!((d.builds[0].median_ns, d.builds[1].median_ns), (1000.0, 1000.0));
        assert_eq!((d.builds[0].min_ns, d.builds[0].max_ns), (900.0, 1200.0));
        assert_eq!(d.ratio_of_medians, Some(1.0));
        // Pairwise 1.1, 1.0, 0.833: the median is 1.0.
        assert_eq!(d.median_pairwise_ratio, Some(1.0));
        assert!(d.all_received);
        assert!(summary(&d).contains("=> B/A: 1.000"));
    }
}
