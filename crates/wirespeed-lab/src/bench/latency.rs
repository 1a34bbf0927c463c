//! `bench latency`: round-trip percentiles of `wirespeed ping`/`reflect`, open and closed loop,
//! beside sockperf's `ping-pong` and `under-load`, in the same placement (BENCHMARKS.md
//! section 7, issue #6).
//!
//! Every tool runs as its own pair of processes, the server on side 2 and the client on side 1
//! of a [`Runner`] (loopback pinned with taskset, or two partitions over a veth link), one tool
//! after the other, the order reversed on every other repeat so that none always goes first.
//! Like is compared with like: `ws-closed` with `sp-pp` (closed loops: a probe waits for the
//! previous reply, so a stall is one slow sample: coordinated omission) and `ws-open` with
//! `sp-ul` (open loops: probes leave on schedule, so a stall is measured at its full weight).
//!
//! sockperf's figures are its own: the percentiles it prints after `--full-rtt` (round trips,
//! microseconds, over its "valid duration", the run less its 400 ms warm-up), read as printed.
//! sockperf 3.7 prints, on stdout (with colour escapes even into a pipe):
//!
//! ```text
//! sockperf: [Total Run] RunTime=2.002 sec; Warm up time=400 msec; SentMessages=1996; ReceivedMessages=1995
//! sockperf: [Valid Duration] RunTime=1.548 sec; SentMessages=1551; ReceivedMessages=1551
//! sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
//! sockperf: ---> <MAX> observation = 8353.366
//! sockperf: ---> percentile 99.990 = 8353.366
//! sockperf: ---> percentile 50.000 =   55.172
//! sockperf: ---> <MIN> observation =   28.592
//! ```
//!
//! Client CPU per message is the same measure for every tool: the client process's user and
//! system time, as the kernel accounts it to this process when the client is reaped
//! (`cutime`/`cstime` of /proc/self/stat), over the messages it sent.

use super::point::{last_line, Placement, Runner};
use super::stats::upper_median;
use crate::testbed::place::Side;
use crate::testbed::proc::{Placed, Proc, Wait};
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use wirespeed::{sys, Error, Result};

/// Schema name of the JSON document (`/1` was the retired benchmarks/latency.py's).
pub const SCHEMA: &str = "wirespeed.bench.latency/2";

/// The one line shown when sockperf cannot be run.
pub const SOCKPERF_MISSING: &str = "sockperf is not installed: apt-get install sockperf";

/// The tools run by default, in the order of the first repeat.
pub const DEFAULT_TOOLS: &str = "ws-closed,sp-pp,ws-open,sp-ul";

/// Smallest message: wirespeed's probe header (sockperf's own minimum is lower).
pub const MIN_SIZE: usize = crate::latency::probe::MIN_SIZE;

/// How long a server may take to say it is ready.
const START_WAIT: Duration = Duration::from_secs(10);

/// Beyond a run's duration: a client still running this much later is killed.
const SLACK: Duration = Duration::from_secs(30);

/// One way of measuring round trips.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Tool {
    /// `wirespeed ping --closed-loop` against `wirespeed reflect`.
    #[serde(rename = "ws-closed")]
    WsClosed,
    /// `sockperf ping-pong --full-rtt` against `sockperf server`.
    #[serde(rename = "sp-pp")]
    SpPingPong,
    /// `wirespeed ping` (open loop, its default) against `wirespeed reflect`.
    #[serde(rename = "ws-open")]
    WsOpen,
    /// `sockperf under-load --reply-every 1 --full-rtt`: sockperf's own open loop.
    #[serde(rename = "sp-ul")]
    SpUnderLoad,
    /// `wirespeed ping --spin` against `wirespeed reflect --spin`: both poll without sleeping.
    #[serde(rename = "ws-open-spin")]
    WsOpenSpin,
}

impl Tool {
    /// Every tool, by name.
    pub const ALL: [Tool; 5] = [Tool::WsClosed, Tool::SpPingPong, Tool::WsOpen, Tool::SpUnderLoad, Tool::WsOpenSpin];

    /// The tool's short name, as `--tools` takes it and the tables show it.
    pub fn name(self) -> &'static str {
        match self {
            Tool::WsClosed => "ws-closed",
            Tool::SpPingPong => "sp-pp",
            Tool::WsOpen => "ws-open",
            Tool::SpUnderLoad => "sp-ul",
            Tool::WsOpenSpin => "ws-open-spin",
        }
    }

    /// What the tool is, in words, for tables.
    pub fn describe(self) -> &'static str {
        match self {
            Tool::WsClosed => "wirespeed, closed loop",
            Tool::SpPingPong => "sockperf ping-pong",
            Tool::WsOpen => "wirespeed, open loop",
            Tool::SpUnderLoad => "sockperf under-load",
            Tool::WsOpenSpin => "wirespeed, open loop, spinning",
        }
    }

    /// Whether this is sockperf.
    pub fn is_sockperf(self) -> bool {
        matches!(self, Tool::SpPingPong | Tool::SpUnderLoad)
    }

    /// A tool by its name, or the line that lists the names.
    pub fn parse(s: &str) -> std::result::Result<Tool, String> {
        Tool::ALL.into_iter().find(|t| t.name() == s.trim()).ok_or_else(|| {
            format!(
                "unknown tool '{s}': choose from {}",
                Tool::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct LatencyConfig {
    /// Messages per second.
    pub pps: f64,
    /// UDP payload bytes per message.
    pub size: usize,
    /// Length of each run (sockperf takes whole seconds: it is rounded up for sockperf).
    pub duration: Duration,
    /// Runs of each tool per path.
    pub repeat: u32,
    /// Tools, in the order of the first repeat.
    pub tools: Vec<Tool>,
}

impl LatencyConfig {
    /// sockperf's `-t`: whole seconds, at least 1.
    pub fn sockperf_seconds(&self) -> u64 {
        self.duration.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// Round-trip percentiles, microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Rtt {
    /// Fastest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th.
    pub p99: f64,
    /// 99.9th.
    pub p999: f64,
    /// 99.99th.
    pub p9999: f64,
    /// Slowest.
    pub max: f64,
}

impl Rtt {
    fn fields(&self) -> [f64; 7] {
        [self.min, self.p50, self.p90, self.p99, self.p999, self.p9999, self.max]
    }

    fn from_fields(f: [f64; 7]) -> Rtt {
        Rtt { min: f[0], p50: f[1], p90: f[2], p99: f[3], p999: f[4], p9999: f[5], max: f[6] }
    }
}

/// One run of one tool.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// The tool.
    pub tool: Tool,
    /// "loopback" or "partitions".
    pub path: &'static str,
    /// Which repeat, 0-based.
    pub repeat: u32,
    /// The tool's own round-trip percentiles, microseconds.
    pub rtt_us: Rtt,
    /// Messages the client sent (sockperf: its whole run, warm-up included).
    pub sent: u64,
    /// Replies the client received.
    pub replies: u64,
    /// Replies lost (wirespeed: its ledger; sockperf: its "dropped messages").
    pub lost: u64,
    /// Closed loop only: slots not sent while a reply was outstanding (wirespeed counts them;
    /// sockperf does not report them).
    pub skipped: Option<u64>,
    /// Round trips behind the percentiles (sockperf: its valid duration only).
    pub observations: u64,
    /// Client process CPU time per message sent, ns (user + system, the same measure for every
    /// tool); `None` when nothing was sent.
    pub client_cpu_ns_per_msg: Option<f64>,
    /// wirespeed ping's own figure (its thread's CPU per probe), ns.
    pub ping_cpu_ns_per_probe: Option<f64>,
    /// The client's command line.
    pub command: String,
}

/// Medians of one tool's runs on one path.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// "loopback" or "partitions".
    pub path: &'static str,
    /// The tool.
    pub tool: Tool,
    /// Runs behind the medians.
    pub runs: usize,
    /// Median of each percentile over the runs, microseconds.
    pub rtt_us: Rtt,
    /// Median client CPU per message, ns.
    pub client_cpu_ns_per_msg: Option<f64>,
    /// Replies lost, all runs.
    pub lost: u64,
}

/// wirespeed's medians over a peer's, per percentile, on one path.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// "loopback" or "partitions".
    pub path: &'static str,
    /// The wirespeed tool.
    pub wirespeed: Tool,
    /// The tool it is divided by.
    pub peer: Tool,
    /// p50 ratio.
    pub p50: f64,
    /// p90 ratio.
    pub p90: f64,
    /// p99 ratio.
    pub p99: f64,
    /// p99.9 ratio.
    pub p999: f64,
    /// p99.99 ratio.
    pub p9999: f64,
}

/// Everything a `bench latency` run found, as `--json` prints it and latency.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Messages per second.
    pub pps: f64,
    /// UDP payload bytes per message.
    pub size: usize,
    /// Length of each wirespeed run, seconds.
    pub duration_s: f64,
    /// sockperf's `-t`, seconds.
    pub sockperf_duration_s: u64,
    /// Runs of each tool per path.
    pub repeat: u32,
    /// Tools, in the order of the first repeat.
    pub tools: Vec<Tool>,
    /// sockperf's version, when it ran.
    pub sockperf_version: Option<String>,
    /// Where the runs ran, one per path.
    pub placements: Vec<Placement>,
    /// Every run.
    pub runs: Vec<Run>,
    /// Medians per path and tool.
    pub summary: Vec<Summary>,
    /// Ratios of the medians: closed loop / ping-pong, open loop / under-load, open loop /
    /// ping-pong, spinning open loop / under-load (those whose tools both ran).
    pub ratios: Vec<Ratio>,
    /// Whether Ctrl-C ended the run early.
    pub stopped: bool,
}

/// sockperf's version ("3.7-no.git"), or the one line saying it is not installed.
pub fn sockperf_version() -> Result<String> {
    let out = match sys::die_with_parent(Command::new("sockperf").arg("--version")).stdin(Stdio::null()).output() {
        Ok(o) => o,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(Error::unsupported(SOCKPERF_MISSING)),
        Err(e) => return Err(Error::failed(format!("cannot run sockperf --version: {e}"))),
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // "sockperf, version 3.7-no.git"
    text.lines()
        .find_map(|l| l.split("version").nth(1).map(|v| v.trim().trim_start_matches('#').trim().to_string()))
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Error::failed(format!("sockperf --version printed no version: {}", text.trim())))
}

/// What sockperf's client printed, read back.
#[derive(Clone, Debug, PartialEq)]
pub struct SockperfReport {
    /// Its percentiles (microseconds, round trips with `--full-rtt`).
    pub rtt_us: Rtt,
    /// `[Total Run] SentMessages`.
    pub sent: u64,
    /// `[Total Run] ReceivedMessages`.
    pub received: u64,
    /// `[Valid Duration] ReceivedMessages`: the observations behind the percentiles.
    pub observations: u64,
    /// `# dropped messages`.
    pub dropped: u64,
}

/// Remove ANSI escape sequences (sockperf colours some lines even into a pipe).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            if it.peek() == Some(&'[') {
                it.next();
                for d in it.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The number after `key` and `=` on the first line holding `key`.
fn number_after<T: std::str::FromStr>(text: &str, key: &str) -> Option<T> {
    text.lines().find_map(|l| {
        let rest = l.split(key).nth(1)?;
        let rest = rest.trim_start().strip_prefix('=')?.trim_start();
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        rest[..end].parse().ok()
    })
}

/// Read sockperf's client output (pure, so it is tested against captured output).
pub fn parse_sockperf(text: &str) -> Result<SockperfReport> {
    let t = strip_ansi(text);
    let keys = [
        "<MIN> observation",
        "percentile 50.000",
        "percentile 90.000",
        "percentile 99.000",
        "percentile 99.900",
        "percentile 99.990",
        "<MAX> observation",
    ];
    let mut f = [0.0; 7];
    for (v, k) in f.iter_mut().zip(keys) {
        *v = number_after(&t, k).ok_or_else(|| {
            let why = t.lines().rfind(|l| l.contains("ERROR")).or_else(|| t.lines().rfind(|l| !l.trim().is_empty()));
            Error::failed(format!("sockperf printed no '{k}' figure: {}", why.unwrap_or("it printed nothing").trim()))
        })?;
    }
    let line_of = |tag: &str| t.lines().find(|l| l.contains(tag)).unwrap_or("").to_string();
    let total = line_of("[Total Run]");
    let valid = line_of("[Valid Duration]");
    Ok(SockperfReport {
        rtt_us: Rtt::from_fields(f),
        sent: number_after(&total, "SentMessages").unwrap_or(0),
        received: number_after(&total, "ReceivedMessages").unwrap_or(0),
        observations: number_after(&valid, "ReceivedMessages").unwrap_or(0),
        dropped: number_after(&t, "# dropped messages").unwrap_or(0),
    })
}

// ---- children: one function to start a server, one to run a client to its end ----

/// Which of a child's streams says "ready".
pub(crate) use crate::testbed::proc::Stream as ReadyOn;

/// A started server and the line that said it was ready.
pub(crate) struct Server {
    proc: Proc,
    on: ReadyOn,
    pub(crate) ready_line: String,
}

/// Start a server and wait (at most [`START_WAIT`]) for a line holding `ready` on `on`.
pub(crate) fn start_server(cmd: impl Into<Placed>, who: &str, on: ReadyOn, ready: &str) -> Result<Server> {
    let (proc, lines) = Proc::spawn_watch(cmd, who, on)?;
    let t0 = Instant::now();
    let mut last = String::new();
    loop {
        match lines.recv_timeout(START_WAIT.saturating_sub(t0.elapsed())) {
            Ok(l) => {
                let l = strip_ansi(l.trim_end());
                if l.contains(ready) {
                    return Ok(Server { proc, on, ready_line: l });
                }
                if !l.trim().is_empty() && !last.contains("ERROR") {
                    last = l;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let why = if last.is_empty() { "it exited without a word".to_string() } else { last };
                return Err(Error::failed(format!("{who} did not start: {}", why.trim())));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(Error::io(format!("{who} did not say it was ready within {} s", START_WAIT.as_secs())))
            }
        }
    }
}

/// A client run to its end.
pub(crate) struct Ended {
    pub(crate) status: ExitStatus,
    pub(crate) out: String,
    pub(crate) err: String,
    /// The client's user + system CPU time, seconds.
    pub(crate) cpu_s: f64,
}

/// CPU time of this process's reaped children so far, seconds (`cutime + cstime` of
/// /proc/self/stat, in USER_HZ ticks, which Linux fixes at 100 per second).
fn children_cpu_s() -> f64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // After the command name in parentheses: field 3 (state) is index 0; cutime is field 16.
    let f: Vec<&str> = s.rsplit_once(") ").map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (tick(13) + tick(14)) as f64 / 100.0
}

/// Run a client to its end, at most `limit`; `None` when the stop flag was raised (the client
/// is told to stop and is not a measurement). Its CPU time is what the kernel adds to this
/// process's children's when it is reaped, so no other child may be reaped meanwhile.
pub(crate) fn run_client(
    cmd: impl Into<Placed>,
    who: &str,
    limit: Duration,
    stop: &AtomicBool,
) -> Result<Option<Ended>> {
    let cpu0 = children_cpu_s();
    let exit = Proc::spawn(cmd, who)?.wait(Wait::new().stop(stop).limit(limit + SLACK).kill_at_limit())?;
    if exit.timed_out {
        return Err(Error::failed(format!("{who} did not finish {} s after its run: killed", SLACK.as_secs())));
    }
    let cpu_s = children_cpu_s() - cpu0;
    if exit.stopped || stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    Ok(Some(Ended { status: exit.status, out: exit.stdout, err: exit.stderr, cpu_s }))
}

/// Stop a server: `grace` to end by itself, then SIGTERM (it still reports), then killed, which
/// is an error. Returns its exit status and what it printed on the stream that said it was
/// ready and on the other one.
pub(crate) fn stop_server(s: Server, grace: Duration) -> Result<(ExitStatus, String, String)> {
    let exit = s.proc.finish(grace)?;
    Ok(match s.on {
        ReadyOn::Stdout => (exit.status, exit.stdout, exit.stderr),
        ReadyOn::Stderr => (exit.status, exit.stderr, exit.stdout),
    })
}

/// The end of a run of a client (a sender) against a server (a receiver) stopped with
/// [`stop_server`]: the client's result (`None`: stopped by a signal), then the server's, each
/// failure named; gives the client's run and the text the server printed on its other stream
/// (its report).
pub(crate) fn client_and_server(
    ended: Result<Option<Ended>>,
    stopped: Result<(ExitStatus, String, String)>,
    client: &str,
    server: &str,
) -> Result<Option<(Ended, String)>> {
    let Some(e) = ended? else { return Ok(None) };
    if !e.status.success() {
        return Err(Error::failed(format!("{client} failed: {}", last_line(&e.err, &e.status))));
    }
    let (status, said, report) = stopped?;
    if !status.success() {
        return Err(Error::failed(format!("{server} failed: {}", last_line(&said, &status))));
    }
    Ok(Some((e, report)))
}

// ---- the tools ----

#[derive(Deserialize)]
struct PingDoc {
    runs: Vec<PingRunDoc>,
}

#[derive(Deserialize)]
struct PingRunDoc {
    sent: u64,
    replies: PingReplies,
    schedule: PingSchedule,
    rtt: PingRtt,
    cpu_ns_per_probe: f64,
}

#[derive(Deserialize)]
struct PingReplies {
    received: u64,
    lost: u64,
}

#[derive(Deserialize)]
struct PingSchedule {
    skipped: u64,
}

#[derive(Deserialize)]
struct PingRtt {
    count: u64,
    min: u64,
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    p9999: u64,
    max: u64,
}

fn exe() -> Result<String> {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .map_err(|e| Error::failed(format!("cannot find this program's path: {e}")))
}

fn per_msg(cpu_s: f64, sent: u64) -> Option<f64> {
    (sent > 0).then(|| cpu_s * 1e9 / sent as f64)
}

/// One wirespeed run: `reflect` on side 2, `ping` on side 1.
fn run_wirespeed(runner: &Runner, cfg: &LatencyConfig, tool: Tool) -> Result<Option<Run>> {
    let exe = exe()?;
    let spin = tool == Tool::WsOpenSpin;
    let mut rargs = vec!["reflect".to_string(), format!("{}:0", runner.receiver_ip()), "--json".into()];
    if spin {
        rargs.push("--spin".into());
    }
    let server = start_server(
        runner.place().tool_command(Side::Recv, &exe, &rargs),
        "the reflector",
        ReadyOn::Stderr,
        "listening on ",
    )?;
    let target = server.ready_line.split("listening on ").nth(1).and_then(|r| r.split_whitespace().next());
    let Some(target) = target.map(str::to_string) else {
        return Err(Error::io(format!("the reflector said '{}', not where it listens", server.ready_line)));
    };
    let mut cargs = vec![
        "ping".to_string(),
        target,
        "--pps".into(),
        format!("{}", cfg.pps),
        "--size".into(),
        cfg.size.to_string(),
        "--duration".into(),
        format!("{}ns", cfg.duration.as_nanos()),
        "--json".into(),
        "--no-files".into(),
    ];
    if tool == Tool::WsClosed {
        cargs.push("--closed-loop".into());
    }
    if spin {
        cargs.push("--spin".into());
    }
    let command = format!("wirespeed {}", cargs.join(" "));
    let ended = run_client(
        runner.place().tool_command(Side::Send, &exe, &cargs),
        "wirespeed ping",
        cfg.duration,
        runner.stop_flag(),
    );
    let _ = stop_server(server, Duration::ZERO);
    let Some(e) = ended? else { return Ok(None) };
    if !e.status.success() {
        return Err(Error::failed(format!("wirespeed ping failed: {}", last_line(&e.err, &e.status))));
    }
    let doc: PingDoc = super::point::parse_doc(&e.out, "wirespeed.latency/1", "ping")?;
    let r = doc.runs.into_iter().next().ok_or_else(|| Error::failed("wirespeed ping reported no run"))?;
    let us = |ns: u64| ns as f64 / 1e3;
    let t = &r.rtt;
    Ok(Some(Run {
        tool,
        path: runner.placement().kind,
        repeat: 0,
        rtt_us: Rtt::from_fields([t.min, t.p50, t.p90, t.p99, t.p999, t.p9999, t.max].map(us)),
        sent: r.sent,
        replies: r.replies.received,
        lost: r.replies.lost,
        skipped: (tool == Tool::WsClosed).then_some(r.schedule.skipped),
        observations: r.rtt.count,
        // On hosts the client is far away: this process's children are only ssh.
        client_cpu_ns_per_msg: per_msg(e.cpu_s, r.sent).filter(|_| !runner.place().is_hosts()),
        ping_cpu_ns_per_probe: Some(r.cpu_ns_per_probe),
        command,
    }))
}

/// A UDP port nobody here uses now (the kernel's pick, then released; a partition's fresh
/// network stack has every port free). sockperf's server needs one named.
fn free_udp_port() -> Result<u16> {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::failed(format!("cannot find a free port for sockperf: {e}")))
}

/// One sockperf run: `sockperf server` on side 2, the client on side 1.
fn run_sockperf(runner: &Runner, cfg: &LatencyConfig, tool: Tool) -> Result<Option<Run>> {
    let ip = runner.receiver_ip().to_string();
    let port = free_udp_port()?.to_string();
    let sargs: Vec<String> = vec!["server".into(), "-i".into(), ip.clone(), "-p".into(), port.clone()];
    // The server prints this once its socket is bound (and "ERROR: ... Can`t bind" otherwise).
    let server = start_server(
        runner.place().tool_command(Side::Recv, "sockperf", &sargs),
        "the sockperf server",
        ReadyOn::Stdout,
        "to block on",
    )?;
    let secs = cfg.sockperf_seconds();
    let mut cargs: Vec<String> = vec![
        if tool == Tool::SpUnderLoad { "under-load" } else { "ping-pong" }.into(),
        "-i".into(),
        ip,
        "-p".into(),
        port,
        "--mps".into(),
        format!("{}", cfg.pps.round() as u64),
        "-m".into(),
        cfg.size.to_string(),
        "-t".into(),
        secs.to_string(),
        "--full-rtt".into(),
    ];
    if tool == Tool::SpUnderLoad {
        cargs.extend(["--reply-every".into(), "1".into()]);
    }
    let command = format!("sockperf {}", cargs.join(" "));
    let ended = run_client(
        runner.place().tool_command(Side::Send, "sockperf", &cargs),
        "the sockperf client",
        Duration::from_secs(secs),
        runner.stop_flag(),
    );
    let _ = stop_server(server, Duration::ZERO);
    let Some(e) = ended? else { return Ok(None) };
    if !e.status.success() {
        return Err(Error::failed(format!("sockperf failed: {}", last_line(&(e.out.clone() + &e.err), &e.status))));
    }
    let r = parse_sockperf(&(e.out + &e.err))?;
    Ok(Some(Run {
        tool,
        path: runner.placement().kind,
        repeat: 0,
        rtt_us: r.rtt_us,
        sent: r.sent,
        replies: r.received,
        lost: r.dropped,
        skipped: None,
        observations: r.observations,
        // On hosts the client is far away: this process's children are only ssh.
        client_cpu_ns_per_msg: per_msg(e.cpu_s, r.sent).filter(|_| !runner.place().is_hosts()),
        ping_cpu_ns_per_probe: None,
        command,
    }))
}

/// Run every tool `repeat` times in one placement (the order reversed on odd repeats); `run`
/// sees each as it ends. Stops early, returning `true`, when the stop flag is raised.
pub fn run_path(
    runner: &Runner,
    cfg: &LatencyConfig,
    out: &mut Vec<Run>,
    progress: &mut dyn FnMut(&Run),
) -> Result<bool> {
    for rep in 0..cfg.repeat {
        let mut order = cfg.tools.clone();
        if rep % 2 == 1 {
            order.reverse();
        }
        for tool in order {
            let r =
                if tool.is_sockperf() { run_sockperf(runner, cfg, tool)? } else { run_wirespeed(runner, cfg, tool)? };
            let Some(mut r) = r else { return Ok(true) };
            r.repeat = rep;
            progress(&r);
            out.push(r);
        }
    }
    Ok(false)
}

/// Like is compared with like; the third pair shows open loop against the closed-loop
/// measurement most people quote.
const PAIRS: [(Tool, Tool); 4] = [
    (Tool::WsClosed, Tool::SpPingPong),
    (Tool::WsOpen, Tool::SpUnderLoad),
    (Tool::WsOpen, Tool::SpPingPong),
    (Tool::WsOpenSpin, Tool::SpUnderLoad),
];

/// Where a latency run happens, its ends named as they are here: the client that sends
/// probes and the server that answers them (a placement's usual "sender" and "receiver" would
/// misname a round trip).
pub fn placement(runner: &Runner) -> Placement {
    let mut p = runner.placement();
    p.description = runner.place().describe("client", "server");
    p
}

/// The document around finished runs: medians per path and tool, and the ratios.
pub fn finish(
    cfg: &LatencyConfig,
    placements: Vec<Placement>,
    runs: Vec<Run>,
    sockperf_version: Option<String>,
    stopped: bool,
) -> LatencyDoc {
    let mut summary = Vec::new();
    for p in &placements {
        for &tool in &cfg.tools {
            let rs: Vec<&Run> = runs.iter().filter(|r| r.path == p.kind && r.tool == tool).collect();
            if rs.is_empty() {
                continue;
            }
            let mut f = [0.0; 7];
            for (i, v) in f.iter_mut().enumerate() {
                *v = upper_median(rs.iter().map(|r| r.rtt_us.fields()[i]).collect()).unwrap_or(0.0);
            }
            let cpu: Vec<f64> = rs.iter().filter_map(|r| r.client_cpu_ns_per_msg).collect();
            summary.push(Summary {
                path: p.kind,
                tool,
                runs: rs.len(),
                rtt_us: Rtt::from_fields(f),
                client_cpu_ns_per_msg: upper_median(cpu),
                lost: rs.iter().map(|r| r.lost).sum(),
            });
        }
    }
    let mut ratios = Vec::new();
    for p in &placements {
        for (a, b) in PAIRS {
            let find = |t: Tool| summary.iter().find(|s| s.path == p.kind && s.tool == t);
            if let (Some(w), Some(s)) = (find(a), find(b)) {
                let q = |x: f64, y: f64| if y > 0.0 { x / y } else { 0.0 };
                ratios.push(Ratio {
                    path: p.kind,
                    wirespeed: a,
                    peer: b,
                    p50: q(w.rtt_us.p50, s.rtt_us.p50),
                    p90: q(w.rtt_us.p90, s.rtt_us.p90),
                    p99: q(w.rtt_us.p99, s.rtt_us.p99),
                    p999: q(w.rtt_us.p999, s.rtt_us.p999),
                    p9999: q(w.rtt_us.p9999, s.rtt_us.p9999),
                });
            }
        }
    }
    LatencyDoc {
        schema: SCHEMA,
        pps: cfg.pps,
        size: cfg.size,
        duration_s: cfg.duration.as_secs_f64(),
        sockperf_duration_s: cfg.sockperf_seconds(),
        repeat: cfg.repeat,
        tools: cfg.tools.clone(),
        sockperf_version,
        placements,
        runs,
        summary,
        ratios,
        stopped,
    }
}

/// The heading of a run.
pub fn header(cfg: &LatencyConfig, placement: &Placement) -> String {
    format!(
        "wirespeed bench latency: {}-byte messages at {} per second, {} per run ({} s for sockperf, its 400 ms warm-up excluded by itself), {} repeat(s), tools {}; {}",
        cfg.size,
        wirespeed::units::thousands(cfg.pps.round() as u64),
        wirespeed::units::nanos(cfg.duration.as_nanos() as f64),
        cfg.sockperf_seconds(),
        cfg.repeat,
        cfg.tools.iter().map(|t| t.name()).collect::<Vec<_>>().join(","),
        placement.description
    )
}

fn cpu_text(v: Option<f64>) -> String {
    v.map_or("-".into(), |c| format!("{:.1} us", c / 1e3))
}

/// A run on one progress line.
pub fn run_line(r: &Run) -> String {
    format!(
        "{:<10} {:<12} rep {}: p50 {:>8.1}  p99 {:>8.1}  p99.9 {:>8.1}  max {:>8.1} us  lost {}  client CPU/msg {}{}",
        r.path,
        r.tool.name(),
        r.repeat,
        r.rtt_us.p50,
        r.rtt_us.p99,
        r.rtt_us.p999,
        r.rtt_us.max,
        r.lost,
        cpu_text(r.client_cpu_ns_per_msg),
        r.skipped.map(|s| format!("  skipped {s}")).unwrap_or_default()
    )
}

/// The tables: medians per path and tool, then the ratios.
pub fn tables(doc: &LatencyDoc) -> String {
    let mut s = String::from(
        "Round-trip time (us), medians of the runs\n\
         | path | tool | min | p50 | p90 | p99 | p99.9 | p99.99 | max | client CPU/msg | lost |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for m in &doc.summary {
        let f = m.rtt_us.fields().map(|v| format!("{v:.1}"));
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            m.path,
            m.tool.describe(),
            f.join(" | "),
            cpu_text(m.client_cpu_ns_per_msg),
            m.lost
        ));
    }
    if !doc.ratios.is_empty() {
        s.push_str(
            "\nRatios (wirespeed / peer, medians of the same run)\n\
             | path | comparison | p50 | p90 | p99 | p99.9 | p99.99 |\n|---|---|---:|---:|---:|---:|---:|\n",
        );
        for r in &doc.ratios {
            s.push_str(&format!(
                "| {} | {} / {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                r.path,
                r.wirespeed.describe(),
                r.peer.describe(),
                r.p50,
                r.p90,
                r.p99,
                r.p999,
                r.p9999
            ));
        }
    }
    if doc.stopped {
        s.push_str("(stopped early)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const PING_PONG: &str = include_str!("testdata/sockperf-3.7-ping-pong.txt");
    const UNDER_LOAD: &str = include_str!("testdata/sockperf-3.7-under-load.txt");

    #[test]
    fn sockperf_37_output_reads_back_as_printed() {
        // Captured on loopback: ping-pong --mps 1000 -m 64 -t 2 --full-rtt.
        let r = parse_sockperf(PING_PONG).expect("reads");
        assert_eq!(
            r.rtt_us,
            Rtt {
                min: 28.592,
                p50: 55.172,
                p90: 2770.618,
                p99: 4788.656,
                p999: 7985.634,
                p9999: 8353.366,
                max: 8353.366
            }
        );
        assert_eq!((r.sent, r.received, r.observations, r.dropped), (1996, 1995, 1551, 0));
        let r = parse_sockperf(UNDER_LOAD).expect("reads");
        assert_eq!((r.rtt_us.p50, r.rtt_us.p99, r.rtt_us.max), (54.731, 3892.183, 8877.337));
        assert_eq!((r.sent, r.received, r.observations), (2001, 2001, 1550));
    }

    #[test]
    fn a_sockperf_that_failed_is_one_line() {
        let e = parse_sockperf(
            "sockperf: \u{1b}[2;35m== version #3.7-no.git == \u{1b}[0m\nsockperf: ERROR: [fd=3] Can`t bind socket\n (errno=98 Address already in use)\nsockperf: cleanupAfterLoop() exit\n",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(e, "sockperf printed no '<MIN> observation' figure: sockperf: ERROR: [fd=3] Can`t bind socket");
        assert!(parse_sockperf("").unwrap_err().to_string().ends_with("it printed nothing"));
    }

    #[test]
    fn tools_by_name_and_the_pairs_that_compare() {
        assert_eq!(Tool::parse("sp-ul"), Ok(Tool::SpUnderLoad));
        assert!(Tool::parse("iperf").unwrap_err().contains("ws-closed, sp-pp, ws-open, sp-ul, ws-open-spin"));
        let tools: Vec<Tool> = DEFAULT_TOOLS.split(',').map(|t| Tool::parse(t).unwrap()).collect();
        let cfg = LatencyConfig { pps: 10_000.0, size: 64, duration: Duration::from_millis(1500), repeat: 2, tools };
        assert_eq!(cfg.sockperf_seconds(), 2);
        let pl = Placement::test_loopback(&[0], &[1]);
        let run = |tool, repeat, p50: f64| Run {
            tool,
            path: "loopback",
            repeat,
            rtt_us: Rtt { min: 1.0, p50, p90: p50, p99: p50, p999: p50, p9999: p50, max: p50 },
            sent: 10,
            replies: 10,
            lost: 0,
            skipped: None,
            observations: 10,
            client_cpu_ns_per_msg: Some(1000.0),
            ping_cpu_ns_per_probe: None,
            command: String::new(),
        };
        let runs = vec![
            run(Tool::WsClosed, 0, 60.0),
            run(Tool::SpPingPong, 0, 80.0),
            run(Tool::WsOpen, 0, 50.0),
            run(Tool::SpUnderLoad, 0, 100.0),
            run(Tool::WsClosed, 1, 70.0),
            run(Tool::SpPingPong, 1, 100.0),
            run(Tool::WsOpen, 1, 60.0),
            run(Tool::SpUnderLoad, 1, 100.0),
        ];
        let doc = finish(&cfg, vec![pl], runs, Some("3.7".into()), false);
        assert_eq!(doc.summary.len(), 4);
        // Upper median of two: 70 and 100.
        assert_eq!(doc.summary[0].rtt_us.p50, 70.0);
        let pairs: Vec<(&str, &str, f64)> =
            doc.ratios.iter().map(|r| (r.wirespeed.name(), r.peer.name(), r.p50)).collect();
        assert_eq!(pairs, vec![("ws-closed", "sp-pp", 0.7), ("ws-open", "sp-ul", 0.6), ("ws-open", "sp-pp", 0.6)]);
        let t = tables(&doc);
        assert!(t.contains("| loopback | sockperf ping-pong | 1.0 | 100.0 |"), "{t}");
        assert!(t.contains("| loopback | wirespeed, closed loop / sockperf ping-pong | 0.70 |"), "{t}");
    }

    #[test]
    fn children_cpu_reads_this_process() {
        assert!(children_cpu_s() >= 0.0);
    }
}
