//! Peers measured in the same placement as wirespeed's own points, for `wirespeed bench
//! compare`: iperf3 in UDP mode, its server on the receiving side and its client on the sending
//! side, on the same CPUs (loopback, pinned with taskset) or in the same two partitions.
//!
//! What iperf3 3.12 reports for UDP, and how it is read here (checked by running it):
//! - the client's `end.sum_sent`: `packets` it sent, `bytes` (packets x `-l`), `seconds` and
//!   `bits_per_second` = payload bits over its sending time. `-b` is that payload rate, so the
//!   asked rate means the same as wirespeed's `--rate`.
//! - the server's `end.sum_received`: `bytes` it received (every datagram the socket delivered,
//!   so received datagrams = bytes / `-l`), `lost_packets` (gaps in the sequence numbers it saw,
//!   less the late arrivals that filled them: loss after the last datagram received is not
//!   counted) and `lost_percent` (of the highest sequence number seen); `end.streams[].udp.
//!   out_of_order` counts late arrivals.
//! - `end.cpu_utilization_percent.host_total` on each side: that process's user + system CPU
//!   time over the test's wall time, in percent, whole process.
//! - `start.sndbuf_actual` / `start.rcvbuf_actual`: the socket buffers the kernel granted (as
//!   getsockopt reports them: twice the usable size).
//!
//! sockperf is not a peer here: its throughput mode counts nothing at the receiver that can be
//! reconciled with the sender (the server prints one total only when it is interrupted, and the
//! sender's total includes its warm-up messages), so its "loss" would be a guess.

use super::super::point::{last_line, PointConfig, Runner};
use super::tool::{Entry, Measured, Setup, Tool};
use crate::testbed::place::Side;
use crate::testbed::proc::{Proc, Wait};
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use wirespeed::units::Rate;
use wirespeed::{Error, Result};

/// The one line shown when iperf3 cannot be run.
pub const IPERF3_MISSING: &str = "iperf3 is not installed: apt-get install iperf3";

/// How long the client may keep failing to connect while the server starts.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// Beyond the point's duration: a client or server still running this much later is killed.
const SLACK: Duration = Duration::from_secs(20);

/// Smallest datagram iperf3 sends (its sequence header).
pub const IPERF3_MIN_SIZE: usize = 16;

/// One iperf3 point, in the same terms as wirespeed's [`super::super::point::Point`] where the two
/// tools measure the same thing, and in iperf3's own terms where they differ (its loss count).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PeerPoint {
    /// "iperf3".
    pub tool: String,
    /// iperf3's own version string (e.g. "iperf 3.12").
    pub version: String,
    /// The offered rate as asked.
    pub asked: String,
    /// The offered payload rate, bits/s (`-b`); `None` when flat out (`-b 0`).
    pub asked_bps: Option<f64>,
    /// UDP payload bytes per datagram (`-l`).
    pub size: usize,
    /// The client's `-t`, seconds.
    pub duration_s: f64,
    /// Payload bits/s the client sent (`end.sum_sent.bits_per_second`).
    pub achieved_bps: f64,
    /// Datagrams/s the client sent (`sum_sent.packets / sum_sent.seconds`).
    pub achieved_pps: f64,
    /// The client's sending time, seconds (`sum_sent.seconds`).
    pub send_elapsed_s: f64,
    /// Payload bits/s of the datagrams received over the client's sending time: the same
    /// definition as wirespeed's `received_bps`, so the two columns compare.
    pub received_bps: f64,
    /// Datagrams/s received over the client's sending time.
    pub received_pps: f64,
    /// iperf3's own received rate (`end.sum_received.bits_per_second`, over the server's time).
    pub iperf3_received_bps: f64,
    /// Datagrams the client sent (`sum_sent.packets`).
    pub sent: u64,
    /// Datagrams the server received (`sum_received.bytes / size`).
    pub received: u64,
    /// iperf3's lost count (`sum_received.lost_packets`): sequence gaps, tail loss not counted.
    pub lost: u64,
    /// iperf3's `lost_percent`.
    pub lost_percent: f64,
    /// `sent - received`: every datagram that did not arrive, tail included (wirespeed's
    /// `missing`).
    pub missing: u64,
    /// Late arrivals the server counted (`streams[].udp.out_of_order`).
    pub out_of_order: u64,
    /// Client process CPU use over the test, percent of one CPU (`host_total`).
    pub send_cpu_percent: f64,
    /// Server process CPU use over the test, percent of one CPU (its own `host_total`).
    pub recv_cpu_percent: f64,
    /// Client CPU time per datagram sent, ns (whole process; `None` when nothing was sent).
    pub send_cpu_ns_per_packet: Option<f64>,
    /// Server CPU time per datagram received, ns (whole process; `None` when nothing arrived).
    pub recv_cpu_ns_per_packet: Option<f64>,
    /// CPUs the client ran on.
    pub send_cpus: Vec<usize>,
    /// CPUs the server ran on.
    pub recv_cpus: Vec<usize>,
    /// The `-w` given (both sides' send and receive buffers), bytes.
    pub socket_buffer_asked: u64,
    /// The server's receive buffer as the kernel granted it (`start.rcvbuf_actual`, twice the
    /// usable size, as wirespeed's `rcvbuf_granted`).
    pub rcvbuf_granted: Option<u64>,
    /// The verdict: anything missing or counted lost, or nothing sent.
    pub lossy: bool,
}

#[derive(Deserialize, Default)]
struct Doc {
    #[serde(default)]
    start: Start,
    #[serde(default)]
    end: End,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize, Default)]
struct Start {
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    rcvbuf_actual: Option<u64>,
}

#[derive(Deserialize, Default)]
struct End {
    #[serde(default)]
    sum_sent: Option<Sum>,
    #[serde(default)]
    sum_received: Option<Sum>,
    #[serde(default)]
    streams: Vec<StreamEnd>,
    #[serde(default)]
    cpu_utilization_percent: Option<Cpu>,
}

#[derive(Deserialize)]
struct Sum {
    seconds: f64,
    bytes: u64,
    bits_per_second: f64,
    #[serde(default)]
    packets: u64,
    #[serde(default)]
    lost_packets: u64,
    #[serde(default)]
    lost_percent: f64,
}

#[derive(Deserialize)]
struct StreamEnd {
    #[serde(default)]
    udp: Option<UdpEnd>,
}

#[derive(Deserialize)]
struct UdpEnd {
    #[serde(default)]
    out_of_order: u64,
}

#[derive(Deserialize)]
struct Cpu {
    host_total: f64,
}

fn read_doc(text: &str, who: &str) -> Result<Doc> {
    serde_json::from_str(text).map_err(|e| Error::failed(format!("the iperf3 {who} printed no JSON report ({e})")))
}

/// Where one iperf3 point ran and what it was given, for [`PeerPoint::from_iperf3`].
#[derive(Clone, Debug)]
pub struct PeerSetting {
    /// CPUs of the sending side.
    pub send_cpus: Vec<usize>,
    /// CPUs of the receiving side.
    pub recv_cpus: Vec<usize>,
    /// The `-w` given.
    pub socket_buffer: u64,
}

impl PeerPoint {
    /// Read the client's and the server's `-J` documents into one point (pure, so it is tested
    /// against documents captured from the real iperf3).
    pub fn from_iperf3(cfg: &PointConfig, client: &str, server: &str, set: &PeerSetting) -> Result<PeerPoint> {
        let c = read_doc(client, "client")?;
        if let Some(e) = c.error.as_deref() {
            return Err(Error::failed(format!("iperf3 (client) failed: {e}")));
        }
        let s = read_doc(server, "server")?;
        if let Some(e) = s.error.as_deref() {
            return Err(Error::failed(format!("iperf3 (server) failed: {e}")));
        }
        let sent_sum = c.end.sum_sent.as_ref().ok_or_else(|| {
            Error::failed("the iperf3 client's report has no end.sum_sent (is it iperf3 3.x in UDP mode?)")
        })?;
        let recv_sum =
            s.end.sum_received.as_ref().ok_or_else(|| {
                Error::failed("the iperf3 server's report has no end.sum_received (is it iperf3 3.x?)")
            })?;
        let size = cfg.size;
        let received = recv_sum.bytes / size.max(1) as u64;
        let sent = sent_sum.packets;
        let secs = sent_sum.seconds;
        let per_sec = |n: f64| if secs > 0.0 { n / secs } else { 0.0 };
        let cpu_ns = |cpu: &Option<Cpu>, wall: f64, n: u64| match cpu {
            Some(cpu) if n > 0 && wall > 0.0 => Some(cpu.host_total / 100.0 * wall * 1e9 / n as f64),
            _ => None,
        };
        let missing = sent.saturating_sub(received);
        let lost = recv_sum.lost_packets;
        Ok(PeerPoint {
            tool: "iperf3".into(),
            version: c.start.version.clone().or_else(|| s.start.version.clone()).unwrap_or_default(),
            asked: super::super::point::asked_text(cfg.rate),
            asked_bps: super::super::point::asked_bps(cfg.rate, size),
            size,
            duration_s: cfg.duration.as_secs_f64(),
            achieved_bps: sent_sum.bits_per_second,
            achieved_pps: per_sec(sent as f64),
            send_elapsed_s: secs,
            received_bps: per_sec(received as f64 * size as f64 * 8.0),
            received_pps: per_sec(received as f64),
            iperf3_received_bps: recv_sum.bits_per_second,
            sent,
            received,
            lost,
            lost_percent: recv_sum.lost_percent,
            missing,
            out_of_order: s.end.streams.iter().filter_map(|st| st.udp.as_ref()).map(|u| u.out_of_order).sum(),
            send_cpu_percent: c.end.cpu_utilization_percent.as_ref().map_or(0.0, |c| c.host_total),
            recv_cpu_percent: s.end.cpu_utilization_percent.as_ref().map_or(0.0, |c| c.host_total),
            send_cpu_ns_per_packet: cpu_ns(&c.end.cpu_utilization_percent, secs, sent),
            recv_cpu_ns_per_packet: cpu_ns(&s.end.cpu_utilization_percent, recv_sum.seconds, received),
            send_cpus: set.send_cpus.clone(),
            recv_cpus: set.recv_cpus.clone(),
            socket_buffer_asked: set.socket_buffer,
            rcvbuf_granted: s.start.rcvbuf_actual,
            lossy: missing > 0 || lost > 0 || sent == 0,
        })
    }
}

/// iperf3's `-b`: payload bits/s, whole; 0 is "no limit" for UDP.
fn bandwidth_arg(r: Rate, size: usize) -> String {
    match super::super::point::asked_bps(r, size) {
        Some(b) => format!("{}", b.round().max(1.0) as u64),
        None => "0".into(),
    }
}

/// The iperf3 found on this host, and the socket buffer it will be given.
#[derive(Clone, Debug)]
pub struct Iperf3 {
    /// `iperf3 --version`'s first words (e.g. "iperf 3.12").
    pub version: String,
    /// The `-w` every point gets: the asked receive buffer, capped by net.core.rmem_max and
    /// wmem_max on both sides (iperf3 cannot force a buffer past them and fails instead).
    pub socket_buffer: u64,
    /// The cap, when it cut the asked buffer (bytes).
    pub capped_by: Option<u64>,
}

/// iperf3's version, or the one line saying it is not installed.
pub fn iperf3_version() -> Result<String> {
    let out =
        match wirespeed::sys::die_with_parent(Command::new("iperf3").arg("--version")).stdin(Stdio::null()).output() {
            Ok(o) => o,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(Error::unsupported(IPERF3_MISSING)),
            Err(e) => return Err(Error::failed(format!("cannot run iperf3 --version: {e}"))),
        };
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("").trim();
    // "iperf 3.12 (cJSON 1.7.15)"
    let mut w = first.split_whitespace();
    match (w.next(), w.next()) {
        (Some("iperf"), Some(v)) if v.starts_with('3') => Ok(format!("iperf {v}")),
        _ => Err(Error::failed(format!(
            "iperf3 --version printed '{first}', not iperf 3.x: install iperf3 (apt-get install iperf3)"
        ))),
    }
}

/// Read one number from `/proc/sys` on one side of the placement.
fn side_sysctl(runner: &Runner, side: Side, path: &str) -> Option<u64> {
    let out = runner.place().tool_command(side, "cat", &[path]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

impl Iperf3 {
    /// Find iperf3 (the one line [`IPERF3_MISSING`] when it is not there) and work out the
    /// socket buffer it can be given in this placement.
    pub fn prepare(runner: &Runner, rcvbuf: u64) -> Result<Iperf3> {
        let version = iperf3_version()?;
        let mut cap: Option<u64> = None;
        for side in [Side::Send, Side::Recv] {
            for p in ["/proc/sys/net/core/rmem_max", "/proc/sys/net/core/wmem_max"] {
                if let Some(v) = side_sysctl(runner, side, p) {
                    cap = Some(cap.map_or(v, |c: u64| c.min(v)));
                }
            }
        }
        let (socket_buffer, capped_by) = match cap {
            Some(c) if c < rcvbuf => (c, Some(c)),
            _ => (rcvbuf, None),
        };
        Ok(Iperf3 { version, socket_buffer, capped_by })
    }

    /// Run one iperf3 point like [`Runner::run`] runs wirespeed's: the server on side 2, the
    /// client on side 1 once the server listens. `Ok(None)` when the stop flag was raised.
    pub fn run(&self, runner: &Runner, cfg: &PointConfig) -> Result<Option<PeerPoint>> {
        let stop = runner.stop_flag();
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // iperf3's -t is whole seconds.
        let secs = cfg.duration.as_secs_f64().round().max(1.0) as u64;
        let place = runner.place();
        let ip = place.ip(Side::Recv).to_string();
        let port = free_port()?;
        let sargs: Vec<String> =
            vec!["-s".into(), "-1".into(), "-p".into(), port.to_string(), "-B".into(), ip.clone(), "-J".into()];
        let server = Proc::spawn(place.tool_command(Side::Recv, "iperf3", &sargs), "the iperf3 server")?;
        let cargs: Vec<String> = vec![
            "-c".into(),
            ip,
            "-p".into(),
            port.to_string(),
            "-u".into(),
            "-b".into(),
            bandwidth_arg(cfg.rate, cfg.size),
            "-l".into(),
            cfg.size.to_string(),
            "-t".into(),
            secs.to_string(),
            "-w".into(),
            self.socket_buffer.to_string(),
            "-J".into(),
        ];
        let t0 = Instant::now();
        let (client, error) = loop {
            let c = Proc::spawn(place.tool_command(Side::Send, "iperf3", &cargs), "the iperf3 client")?;
            // A stop is passed on (the client is told, then killed); past its time it is killed.
            let how = Wait::new()
                .stop(stop)
                .kill_after(Duration::from_millis(200))
                .limit(Duration::from_secs(secs) + SLACK)
                .kill_at_limit();
            let c = c.wait(how)?;
            // Ctrl-C reaches iperf3 too (the terminal signals the whole group): it then reports
            // an "interrupt" error, which is a stop, not a failure.
            if c.stopped || stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if c.timed_out {
                return Err(Error::failed(format!(
                    "the iperf3 client did not finish {} s after its {secs} s: killed",
                    SLACK.as_secs()
                )));
            }
            // iperf3 3.12 with -J exits 0 even when it failed: its report's "error" says so.
            let error = serde_json::from_str::<Doc>(&c.stdout).ok().and_then(|d| d.error);
            // The server may not listen yet: a refused connection is retried for a while.
            if error.as_deref().is_some_and(|e| e.contains("Connection refused")) && t0.elapsed() < CONNECT_WAIT {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            break (c, error);
        };
        if let Some(e) = error {
            return Err(Error::failed(format!("iperf3 (client) failed: {e}")));
        }
        if !client.status.success() {
            return Err(Error::failed(format!(
                "iperf3 (client) failed: {}",
                last_line(&client.stderr, &client.status)
            )));
        }
        let served = server.finish(Duration::from_secs(5))?;
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if !served.status.success() {
            let why = serde_json::from_str::<Doc>(&served.stdout)
                .ok()
                .and_then(|d| d.error)
                .unwrap_or_else(|| last_line(&served.stderr, &served.status));
            return Err(Error::failed(format!("iperf3 (server) failed: {why}")));
        }
        let pl = runner.placement();
        let set = PeerSetting { send_cpus: pl.send_cpus, recv_cpus: pl.recv_cpus, socket_buffer: self.socket_buffer };
        PeerPoint::from_iperf3(cfg, &client.stdout, &served.stdout, &set).map(Some)
    }
}

/// A port nobody listens on now (the kernel's pick for an ephemeral bind, then released); a
/// partition's fresh network stack has every port free.
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::failed(format!("cannot find a free port for iperf3: {e}")))?;
    let port = l.local_addr().map_err(|e| Error::failed(format!("cannot find a free port for iperf3: {e}")))?.port();
    Ok(port)
}

// ---- iperf3 as a compared tool: the registry's face of Iperf3 ----

/// The registry entry.
pub const ENTRY: Entry = Entry { name: "iperf3", records: false, receives: true, check: iperf3_version, make };

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

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: &str = include_str!("../testdata/iperf3-3.12-udp-client.json");
    const SERVER: &str = include_str!("../testdata/iperf3-3.12-udp-server.json");

    fn cfg() -> PointConfig {
        PointConfig { rate: Rate::Bits(2e9), size: 1080, duration: Duration::from_secs(1), gso: false, rcvbuf: 1 << 17 }
    }

    fn set() -> PeerSetting {
        PeerSetting { send_cpus: vec![0], recv_cpus: vec![1], socket_buffer: 131072 }
    }

    #[test]
    fn a_real_iperf3_312_udp_run_reads_back() {
        // Captured on loopback: -u -b 2G -l 1080 -t 1 -w 128K; the client was sender-bound at
        // 1.29 Gb/s and the server's 128 KiB buffer overflowed 309 times.
        let p = PeerPoint::from_iperf3(&cfg(), CLIENT, SERVER, &set()).expect("reads");
        assert_eq!(p.version, "iperf 3.12");
        assert_eq!(p.sent, 149_477);
        // The server received 161,101,440 bytes of 1080-byte datagrams.
        assert_eq!(p.received, 149_168);
        assert_eq!(p.lost, 309);
        assert_eq!(p.missing, 309, "no tail loss: iperf3's gap count is every datagram missing");
        assert!((p.lost_percent - 0.206720766405534).abs() < 1e-12);
        assert_eq!(p.out_of_order, 0);
        assert!((p.achieved_bps - 1_291_464_490.9616175).abs() < 1e-3);
        // Payload bits: bytes sent = packets x 1080, over the sending time.
        assert!((p.achieved_bps - 149_477.0 * 1080.0 * 8.0 / 1.000013).abs() < 1.0);
        assert!((p.received_bps - 149_168.0 * 1080.0 * 8.0 / 1.000013).abs() < 1.0);
        assert!((p.received_pps - 149_168.0 / 1.000013).abs() < 1e-6);
        assert!(p.lossy);
        assert_eq!(p.asked_bps, Some(2e9));
        assert_eq!(p.rcvbuf_granted, Some(262_144));
        // 99.8 % of a CPU for 1.000013 s over 149,477 datagrams: about 6.7 us each.
        let s = p.send_cpu_ns_per_packet.expect("send cpu");
        assert!((s - 0.9983361281051447 * 1.000013e9 / 149_477.0).abs() < 1e-6, "{s}");
        let r = p.recv_cpu_ns_per_packet.expect("recv cpu");
        assert!((r - 0.6786830266748393 * 1.000061e9 / 149_168.0).abs() < 1e-6, "{r}");
        assert!((p.send_cpu_percent - 99.83361281051447).abs() < 1e-9);
    }

    #[test]
    fn a_failed_or_foreign_report_is_one_line() {
        let c = r#"{"start":{"version":"iperf 3.12"},"intervals":[],"end":{},"error":"socket buffer size not set correctly"}"#;
        let e = PeerPoint::from_iperf3(&cfg(), c, SERVER, &set()).unwrap_err().to_string();
        assert!(e.contains("socket buffer size not set correctly"), "{e}");
        let e = PeerPoint::from_iperf3(&cfg(), "iperf3: error", SERVER, &set()).unwrap_err().to_string();
        assert!(e.contains("no JSON report"), "{e}");
        let e = PeerPoint::from_iperf3(&cfg(), r#"{"end":{}}"#, SERVER, &set()).unwrap_err().to_string();
        assert!(e.contains("end.sum_sent"), "{e}");
        // A server report without the received sum (a TCP run, or a client's document).
        let e = PeerPoint::from_iperf3(&cfg(), CLIENT, r#"{"end":{}}"#, &set()).unwrap_err().to_string();
        assert!(e.contains("end.sum_received"), "{e}");
    }

    #[test]
    fn the_bandwidth_argument_is_payload_bits() {
        assert_eq!(bandwidth_arg(Rate::Bits(1e9), 8800), "1000000000");
        assert_eq!(bandwidth_arg(Rate::Packets(1000.0), 1000), "8000000");
        assert_eq!(bandwidth_arg(Rate::Max, 8800), "0");
    }
}

// The tools `bench compare` runs, one file each, behind one trait (see `tool`).
