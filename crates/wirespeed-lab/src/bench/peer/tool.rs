//! The tools `wirespeed bench compare` runs side by side, behind one trait, so that adding a
//! tool to compare against is one new file under `bench/peer/` and one line in [`TOOLS`].
//!
//! A tool is either a *receiver* (it reads the datagrams: `wirespeed recv`, iperf3's server,
//! the bare recvmmsg loop) or a *recorder* (it stores them in a directory: `wirespeed record`,
//! `tcpdump -w`, `netsniff-ng`). Every tool runs at the same points, in the same placement
//! ([`Runner`]), and answers in the same terms where it can ([`Measured`]); what its own count
//! means is said by [`Tool::counts`], so a table never puts two different things in one column
//! without saying so.

use super::super::point::{last_line, rate_arg, Point, PointConfig, Runner};
use super::PeerPoint;
use crate::testbed::place::Side;
use crate::testbed::proc::{Proc, Stream};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wirespeed::{Error, Result};

/// What a tool needs from the run before its first point.
pub struct Setup<'a> {
    /// Where the points run.
    pub runner: &'a Runner,
    /// The socket buffer asked for (`--rcvbuf`).
    pub rcvbuf: u64,
    /// The recording directory, when the tools record (`--record DIR`).
    pub record: Option<&'a Path>,
    /// Keep each run's recording instead of deleting it after the run (recorders other than
    /// wirespeed's own, whose files the [`Runner`] removes).
    pub keep: bool,
}

/// One tool's result at one point. wirespeed and iperf3 keep their own, richer types (their
/// JSON fields predate the other tools); every other tool answers in [`ToolPoint`]'s terms.
#[derive(Clone, Debug)]
pub enum Measured {
    /// `wirespeed recv` or `wirespeed record`.
    Wirespeed(Point),
    /// iperf3's server and client.
    Iperf3(PeerPoint),
    /// Any other tool.
    Other(ToolPoint),
}

/// One point of a tool other than wirespeed and iperf3, in the terms every compare row uses.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ToolPoint {
    /// The tool's name in `--tools`.
    pub tool: String,
    /// The tool's version.
    pub version: String,
    /// The offered rate as asked.
    pub asked: String,
    /// The offered payload bits/s (`None`: flat out).
    pub asked_bps: Option<f64>,
    /// UDP payload bytes per datagram.
    pub size: usize,
    /// The sender's `--duration`, seconds.
    pub duration_s: f64,
    /// Payload bits/s the sender (`wirespeed send`) achieved.
    pub achieved_bps: f64,
    /// Datagrams/s the sender achieved.
    pub achieved_pps: f64,
    /// The sender's sending time, seconds.
    pub send_elapsed_s: f64,
    /// Payload bits/s received (or stored), over the sender's sending time.
    pub received_bps: f64,
    /// Datagrams the sender sent (its own count).
    pub sent: u64,
    /// Datagrams the tool received, or stored in its recording (see `counted_as`).
    pub received: u64,
    /// `sent - received`.
    pub missing: u64,
    /// What `received` counts, in this tool's terms.
    pub counted_as: String,
    /// The verdict: anything missing, or nothing sent.
    pub lossy: bool,
    /// Sender CPU time per datagram sent, ns (pacing waits included).
    pub send_cpu_ns_per_packet: Option<f64>,
    /// Receiver CPU time per datagram received, ns, whole process (`None` when not measured).
    pub recv_cpu_ns_per_packet: Option<f64>,
    /// Whether the sender used UDP GSO.
    pub gso_used: bool,
    /// The tool's own figures, as it reported them (e.g. tcpdump's "dropped by kernel").
    pub own: BTreeMap<String, serde_json::Value>,
    /// The command lines run, receiver (or recorder) first.
    pub commands: Vec<String>,
}

/// One tool, ready to run points.
pub trait Tool {
    /// The name used in `--tools`, tables, CSV and JSON.
    fn name(&self) -> &'static str;
    /// The tool's version, as reports show it.
    fn version(&self) -> String;
    /// What this tool's "received" counts, for the table's notes.
    fn counts(&self) -> String;
    /// The socket buffer this tool can be given, when it cannot be given the asked one
    /// (iperf3 cannot pass net.core.rmem_max): every tool then gets the smallest, for fairness.
    fn buffer_cap(&self) -> Option<u64> {
        None
    }
    /// Notes on how this tool was run, for the report.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Run one point; `Ok(None)` when the stop flag was raised.
    fn run(&self, runner: &Runner, cfg: &PointConfig, seq: u32) -> Result<Option<Measured>>;
}

/// A tool in the registry: how to find it and how to make it.
#[derive(Debug)]
pub struct Entry {
    /// The name in `--tools`.
    pub name: &'static str,
    /// Whether it stores what it receives (used only with `--record DIR`), or only receives.
    pub records: bool,
    /// Whether it receives without storing (used only without `--record`). wirespeed does both.
    pub receives: bool,
    /// Check the tool is installed, before any placement is made: its version, or the one
    /// line saying how to install it.
    pub check: fn() -> Result<String>,
    /// Make the tool for this run.
    pub make: fn(&Setup, String) -> Result<Box<dyn Tool>>,
}

/// Every tool `bench compare` knows, in the order `--help` lists them. A new tool: one file
/// under `bench/peer/` with its `ENTRY`, and one line here.
pub const TOOLS: &[Entry] =
    &[super::wirespeed::ENTRY, super::iperf3::ENTRY, super::bare::ENTRY, super::tcpdump::ENTRY, super::netsniff::ENTRY];

/// The registry entry called `name`.
pub fn entry(name: &str) -> Option<&'static Entry> {
    TOOLS.iter().find(|e| e.name == name)
}

/// The known tool names, comma-separated (for messages).
pub fn names() -> String {
    TOOLS.iter().map(|e| e.name).collect::<Vec<_>>().join(", ")
}

/// Read a `--tools` list: known names, each once, and of the kind the mode needs (recorders
/// with a recording directory, receivers without). The error is one line for a usage error.
pub fn parse_tools(list: &str, record: bool) -> std::result::Result<Vec<&'static Entry>, String> {
    let mut out: Vec<&'static Entry> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let e = entry(name).ok_or_else(|| format!("unknown tool '{name}': the tools are {}", names()))?;
        if record && !e.records {
            return Err(format!(
                "{name} does not record to disk: with --record give recorders (wirespeed, tcpdump, netsniff-ng)"
            ));
        }
        if !record && !e.receives {
            return Err(format!("{name} is a recorder: give --record DIR to compare recorders"));
        }
        if !out.iter().any(|o| o.name == e.name) {
            out.push(e);
        }
    }
    if out.is_empty() {
        return Err(format!("no tools given: name some of {}", names()));
    }
    Ok(out)
}

/// The version line of a program, or `missing` when it is not installed (the one line the user
/// sees, like iperf3's).
pub(crate) fn program_version(program: &str, args: &[&str], missing: &str) -> Result<String> {
    let out = match wirespeed::sys::die_with_parent(Command::new(program).args(args))
        .stdin(Stdio::null())
        .env("LC_ALL", "C")
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(Error::unsupported(missing)),
        Err(e) => return Err(Error::failed(format!("cannot run {program}: {e}"))),
    };
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok(text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or(program).to_string())
}

/// What `wirespeed send --json` said.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sent {
    pub sent: u64,
    pub elapsed_s: f64,
    pub achieved_bps: f64,
    pub achieved_pps: f64,
    pub cpu_ns_per_packet: f64,
    pub gso_used: bool,
    pub command: String,
}

/// A command line as text, for reports.
pub(crate) fn command_text(c: &crate::testbed::proc::Placed) -> String {
    c.far_text().unwrap_or_else(|| argv_text(c.as_command()))
}

/// A local command as a report shows it: its program and arguments.
pub(crate) fn argv_text(c: &Command) -> String {
    std::iter::once(c.get_program())
        .chain(c.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The sender CPU pinned on loopback (partitions confine their children themselves).
fn send_cpu(runner: &Runner) -> Option<usize> {
    let pl = runner.placement();
    (pl.kind == "loopback").then(|| pl.send_cpus.first().copied()).flatten()
}

/// The receiver CPU pinned on loopback.
pub(crate) fn recv_cpu(runner: &Runner) -> Option<usize> {
    let pl = runner.placement();
    (pl.kind == "loopback").then(|| pl.recv_cpus.first().copied()).flatten()
}

/// Run `wirespeed send` to `addr` on the sending side, as a wirespeed point's sender runs, and
/// read its report. `Ok(None)` when stopped by a signal.
pub(crate) fn send(runner: &Runner, cfg: &PointConfig, addr: SocketAddr, gso: bool) -> Result<Option<Sent>> {
    let mut args: Vec<String> = vec![
        "send".into(),
        addr.to_string(),
        "--rate".into(),
        rate_arg(cfg.rate),
        "--size".into(),
        cfg.size.to_string(),
        "--duration".into(),
        format!("{}s", cfg.duration.as_secs_f64()),
        "--json".into(),
    ];
    if gso {
        args.push("--gso".into());
    }
    if let Some(c) = send_cpu(runner) {
        args.extend(["--cpu".into(), c.to_string()]);
    }
    let cmd = runner.place().command(Side::Send, &args);
    let command = command_text(&cmd);
    // Ctrl-C reaches the sender too (the terminal signals the whole group); a sender still
    // running long after its duration is asked to stop.
    let exit = Proc::spawn(cmd, "the sender")?.finish(cfg.duration + Duration::from_secs(20))?;
    let (st, out, err) = (exit.status, exit.stdout, exit.stderr);
    if runner.stop_flag().load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(None);
    }
    if !st.success() {
        return Err(Error::failed(format!("the sender failed: {}", last_line(&err, &st))));
    }
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| Error::failed(format!("the sender printed no JSON report ({e})")))?;
    if v["schema"] != "wirespeed.send/1" {
        return Err(Error::failed(format!("the sender's report is not wirespeed.send/1: {}", v["schema"])));
    }
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    Ok(Some(Sent {
        sent: v["sent"].as_u64().unwrap_or(0),
        elapsed_s: f("elapsed_s"),
        achieved_bps: f("achieved_bps"),
        achieved_pps: f("achieved_pps"),
        cpu_ns_per_packet: f("cpu_ns_per_packet"),
        gso_used: v["gso_used"].as_bool().unwrap_or(false),
        command,
    }))
}

/// A started bare receiver: the child (its output being read), where it listens, and its
/// command line.
pub(crate) type Started = (Proc, SocketAddr, String);

/// A capture's command line for (interface, file, port, CPU): (program, arguments).
pub(crate) type Argv = fn(&str, &Path, u16, Option<usize>) -> (&'static str, Vec<String>);

/// Start `wirespeed bench bare-recv` on the receiving side (reading, or only holding the port
/// with `hold`) and wait until it says where it listens.
pub(crate) fn start_bare(runner: &Runner, size: usize, rcvbuf: u64, hold: bool) -> Result<Option<Started>> {
    let mut args: Vec<String> = vec![
        "bench".into(),
        "bare-recv".into(),
        format!("{}:0", runner.receiver_ip()),
        "--size".into(),
        size.to_string(),
        "--rcvbuf".into(),
        rcvbuf.to_string(),
    ];
    if hold {
        args.push("--hold".into());
    } else if let Some(c) = recv_cpu(runner) {
        args.extend(["--cpu".into(), c.to_string()]);
    }
    let cmd = runner.place().command(Side::Recv, &args);
    let command = command_text(&cmd);
    let mut proc = Proc::spawn_listener(cmd, "the bare receiver")?;
    let addr = match proc.listening(None) {
        Ok(a) => a.parse().map_err(|_| Error::failed(format!("the bare receiver listens on '{a}'?")))?,
        Err(_) if runner.stop_flag().load(std::sync::atomic::Ordering::Relaxed) => return Ok(None),
        Err(said) => {
            let why = said.lines().last().unwrap_or("it exited without a word").trim().to_string();
            return Err(Error::failed(format!("the bare receiver did not start: {why}")));
        }
    };
    Ok(Some((proc, addr, command)))
}

/// The figures of a point whose sender was `wirespeed send` and whose tool counted `received`.
pub(crate) fn tool_point(tool: &dyn Tool, cfg: &PointConfig, s: &Sent, received: u64, counted_as: String) -> ToolPoint {
    let per_sec = |n: f64| if s.elapsed_s > 0.0 { n / s.elapsed_s } else { 0.0 };
    let missing = s.sent.saturating_sub(received);
    ToolPoint {
        tool: tool.name().into(),
        version: tool.version(),
        asked: super::super::point::asked_text(cfg.rate),
        asked_bps: super::super::point::asked_bps(cfg.rate, cfg.size),
        size: cfg.size,
        duration_s: cfg.duration.as_secs_f64(),
        achieved_bps: s.achieved_bps,
        achieved_pps: s.achieved_pps,
        send_elapsed_s: s.elapsed_s,
        received_bps: per_sec(received as f64 * cfg.size as f64 * 8.0),
        sent: s.sent,
        received,
        missing,
        counted_as,
        lossy: missing > 0 || s.sent == 0,
        send_cpu_ns_per_packet: (s.sent > 0).then_some(s.cpu_ns_per_packet),
        recv_cpu_ns_per_packet: None,
        gso_used: s.gso_used,
        own: BTreeMap::new(),
        commands: Vec::new(),
    }
}

/// A packet-capture recorder (tcpdump, netsniff-ng): how to start it on an interface and read
/// its own counters.
pub(crate) struct Capture {
    /// The tool's name.
    pub name: &'static str,
    /// Its version.
    pub version: String,
    /// The directory its pcap files go to.
    pub dir: PathBuf,
    /// Keep the files.
    pub keep: bool,
    /// Whether the sending link segments GSO batches before the packet taps see them, so the
    /// points' senders may use GSO when asked (else they send one datagram per call).
    pub segments: bool,
    /// The interface on the receiving side the datagrams arrive on.
    pub iface: String,
    /// Its command line: (program, arguments) for interface, file, port.
    pub argv: Argv,
    /// A stderr line that says it is capturing, if it prints one (else a fixed wait).
    pub ready_line: Option<&'static str>,
    /// Its own counters, read from its output at exit.
    pub counters: fn(&str) -> BTreeMap<String, serde_json::Value>,
}

/// How long a capture's file may stay the same size before the capture is stopped: longer
/// than a TPACKET_V3 block's 1 s retire timeout, so the last partly filled block is written.
const SETTLE: Duration = Duration::from_millis(1500);

/// A pcap file's data records (not checked: the count `verify` is compared against).
pub fn pcap_records(path: &Path) -> Result<u64> {
    let b = std::fs::read(path).map_err(|e| Error::io(format!("cannot read {}: {e}", path.display())))?;
    let info = wirespeed::spool::parse_pcap_global(&b)
        .ok_or_else(|| Error::failed(format!("{} is not a pcap file", path.display())))?;
    let mut off = wirespeed::spool::PCAP_GLOBAL_LEN;
    let mut n = 0u64;
    while off + 16 <= b.len() {
        let w = [b[off + 8], b[off + 9], b[off + 10], b[off + 11]];
        let incl = if info.big_endian { u32::from_be_bytes(w) } else { u32::from_le_bytes(w) } as usize;
        if off + 16 + incl > b.len() {
            break;
        }
        off += 16 + incl;
        n += 1;
    }
    Ok(n)
}

impl Capture {
    /// A capture recorder for this run: on the interface the datagrams arrive on (`lo`, or
    /// partition 2's link to partition 1). In partitions, the sending link's UDP segmentation
    /// offload is turned off (ethtool) so that a GSO batch leaves partition 1 as single frames,
    /// as from a NIC; on loopback, or without ethtool, the capture points send without GSO,
    /// since a packet tap would see one frame per batch.
    pub fn new(
        setup: &Setup,
        name: &'static str,
        version: String,
        argv: Argv,
        ready_line: Option<&'static str>,
        counters: fn(&str) -> BTreeMap<String, serde_json::Value>,
    ) -> Result<Capture> {
        let dir = setup
            .record
            .ok_or_else(|| Error::invalid(format!("{name} is a recorder: give --record DIR")))?
            .to_path_buf();
        let partitions = setup.runner.placement().kind == "partitions";
        let iface = if partitions { crate::testbed::link_name(1) } else { "lo".to_string() };
        let segments = partitions
            && setup
                .runner
                .place()
                .tool_command(
                    Side::Send,
                    "ethtool",
                    &["-K".into(), crate::testbed::link_name(2), "tx-udp-segmentation".into(), "off".into()],
                )
                .output()
                .is_ok_and(|o| o.status.success());
        Ok(Capture { name, version, dir, keep: setup.keep, segments, iface, argv, ready_line, counters })
    }

    /// How the capture points were sent, for the report.
    pub fn notes(&self) -> Vec<String> {
        if self.segments {
            vec![format!("{}: UDP segmentation offload is off on the sending link (ethtool), so GSO batches cross as single frames for every tool", self.name)]
        } else {
            vec![format!("{}: its points' sender sends one datagram per call even with --gso (on loopback, or without ethtool in partitions, a GSO batch would reach the packet tap as one frame)", self.name)]
        }
    }

    /// One recording point: a socket holds the port (never read: without it every datagram
    /// would draw an ICMP port-unreachable and the sender would see ECONNREFUSED; the kernel
    /// drops there, after the packet taps), the capture starts on the interface, the sender
    /// sends, and once the file stops growing the capture is stopped (SIGINT) and its file
    /// counted with `verify`'s reading of the counter format.
    pub fn run(&self, tool: &dyn Tool, runner: &Runner, cfg: &PointConfig, seq: u32) -> Result<Option<Measured>> {
        let stop = runner.stop_flag();
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(None);
        }
        let Some((holder, addr, hold_cmd)) = start_bare(runner, cfg.size, 1 << 20, true)? else {
            return Ok(None);
        };
        let file = self.dir.join(format!("{}-{seq}.pcap", self.name));
        // Warm-ups (run 0) are never kept.
        let keep = self.keep && seq > 0;
        let _gone = Remove { path: file.clone(), keep };
        let (program, args) = (self.argv)(&self.iface, &file, addr.port(), recv_cpu(runner));
        let cmd = runner.place().tool_command(Side::Recv, program, &args);
        let command = command_text(&cmd);
        let (cap, lines) = Proc::spawn_watch(cmd, &format!("{} ({command})", self.name), Stream::Stderr)?;
        if let Some(ready) = self.ready_line {
            let mut said = String::new();
            loop {
                let Ok(line) = lines.recv() else {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return Ok(None);
                    }
                    let why = said.lines().last().unwrap_or("it exited without a word").trim().to_string();
                    return Err(Error::failed(format!("{} did not start: {why} ({command})", self.name)));
                };
                if line.contains(ready) {
                    break;
                }
                said.push_str(&line);
                said.push('\n');
            }
            // The packet socket is bound; give its ring and filter time to be set up.
            std::thread::sleep(Duration::from_millis(500));
        } else {
            std::thread::sleep(Duration::from_millis(1500));
        }
        let Some(s) = send(runner, cfg, addr, cfg.gso && self.segments)? else {
            return Ok(None);
        };
        // Stop once the file has not grown for SETTLE, so the capture drains its ring.
        let limit = Instant::now() + Duration::from_secs(30);
        let mut last = (u64::MAX, Instant::now());
        loop {
            let len = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
            if len != last.0 {
                last = (len, Instant::now());
            } else if last.1.elapsed() >= SETTLE || Instant::now() > limit {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Its CPU time (every thread), read while it still runs: the whole process per datagram
        // it stored, as wirespeed's own report gives its threads'.
        let cpu_ns = crate::bench::recv_cpu::process_cpu_ns(cap.pid());
        let _ = wirespeed::sys::send_signal(cap.pid(), libc::SIGINT);
        let exit = cap.finish(Duration::from_secs(5))?;
        let st = exit.status;
        drop(holder);
        let text = format!("{}\n{}", exit.stderr, exit.stdout);
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(None);
        }
        if !file.exists() {
            return Err(Error::failed(format!(
                "{} wrote no file ({}): {}",
                self.name,
                st,
                text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no word")
            )));
        }
        let records = pcap_records(&file)?;
        let stored = stored_datagrams(&file, cfg.size)?;
        let mut p = tool_point(tool, cfg, &s, stored, tool.counts());
        p.recv_cpu_ns_per_packet = cpu_ns.filter(|_| stored > 0).map(|c| c as f64 / stored as f64);
        p.own = (self.counters)(&text);
        p.own.insert("pcap_records".into(), records.into());
        p.own.insert("file_bytes".into(), std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0).into());
        if keep {
            p.own.insert("file".into(), file.display().to_string().into());
        }
        p.commands = vec![command, hold_cmd, s.command.clone()];
        Ok(Some(Measured::Other(p)))
    }
}

/// The datagrams of the counter format in a pcap file, as `wirespeed verify FILE --format
/// counter,size=N` counts them (`total.received`: unique sequence numbers whose payload checks).
pub fn stored_datagrams(file: &Path, size: usize) -> Result<u64> {
    let fmt = wirespeed::wire::spec::parse(&format!("counter,size={size}")).map_err(Error::failed)?;
    let found = wirespeed::spool::verify::collect(&[file.to_path_buf()], Some(&fmt))?;
    let rep = wirespeed::spool::verify::verify(
        &found,
        &wirespeed::spool::verify::VerifyOptions { format: Some(fmt), window: 65536 },
    )?;
    Ok(rep.total.received)
}

/// Removes a point's file when dropped, unless kept.
struct Remove {
    path: PathBuf,
    keep: bool,
}

impl Drop for Remove {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The first number before `what` in `text` (e.g. "123 packets captured").
pub(crate) fn number_before(text: &str, what: &str) -> Option<u64> {
    let at = text.find(what)?;
    text[..at].split(|c: char| !c.is_ascii_digit()).rfind(|w| !w.is_empty())?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_lists_are_checked() {
        let names = |v: Vec<&Entry>| v.iter().map(|e| e.name).collect::<Vec<_>>();
        assert_eq!(names(parse_tools("wirespeed,iperf3", false).unwrap()), ["wirespeed", "iperf3"]);
        assert_eq!(names(parse_tools(" bare , wirespeed,bare", false).unwrap()), ["bare", "wirespeed"]);
        assert_eq!(
            names(parse_tools("wirespeed,tcpdump,netsniff-ng", true).unwrap()),
            ["wirespeed", "tcpdump", "netsniff-ng"]
        );
        assert!(parse_tools("wirespeed,ping", false).unwrap_err().contains("unknown tool 'ping'"));
        assert!(parse_tools("tcpdump", false).unwrap_err().contains("--record"));
        assert!(parse_tools("iperf3", true).unwrap_err().contains("does not record"));
        assert!(parse_tools(",", false).unwrap_err().contains("no tools"));
    }

    #[test]
    fn counters_are_read_from_the_tools_words() {
        let t = "tcpdump: listening on lo\n1200 packets captured\n1300 packets received by filter\n100 packets dropped by kernel\n";
        assert_eq!(number_before(t, "packets captured"), Some(1200));
        assert_eq!(number_before(t, "packets dropped by kernel"), Some(100));
        assert_eq!(number_before(t, "packets passed filter"), None);
        // netsniff-ng 0.6.8's exit lines, on stdout.
        let n = "Running! Hang up with ^C!\n\n\r        1840  packets incoming (3 unread on exit)\n\r         920  packets passed filter\n\r           0  packets failed filter (out of space)\n";
        assert_eq!(number_before(n, "packets incoming"), Some(1840));
        assert_eq!(number_before(n, "unread on exit"), Some(3));
        assert_eq!(number_before(n, "packets passed filter"), Some(920));
        assert_eq!(number_before(n, "packets failed filter (out of space)"), Some(0));
    }

    #[test]
    fn pcap_records_are_counted() {
        let dir = std::env::temp_dir().join(format!("ws-pcap-count-{}", std::process::id()));
        let mut b = wirespeed::spool::pcap_global_header().to_vec();
        for len in [10u32, 0, 30] {
            let mut h = [0u8; 16];
            h[8..12].copy_from_slice(&len.to_le_bytes());
            h[12..16].copy_from_slice(&len.to_le_bytes());
            b.extend_from_slice(&h);
            b.extend(std::iter::repeat_n(0u8, len as usize));
        }
        // A record cut short is not counted.
        b.extend_from_slice(&[0u8; 10]);
        std::fs::write(&dir, &b).unwrap();
        let n = pcap_records(&dir);
        let _ = std::fs::remove_file(&dir);
        assert_eq!(n.unwrap(), 3);
    }
}
