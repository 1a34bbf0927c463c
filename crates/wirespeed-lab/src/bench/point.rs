//! One measurement point: a receiver and a sender, each a child process of this same binary
//! (`wirespeed recv --once --json` and `wirespeed send --json`), on loopback or in two
//! partitions joined by a veth link, and the two reports read back into one row.
//!
//! Child processes rather than threads, so a point measures exactly what a user running the two
//! commands would see: separate processes, their own CPUs, in partitions their own network
//! stacks. The receiver binds port 0 and the sender starts only once the receiver has said
//! where it listens, so no datagram is sent to a socket that is not there yet.

use super::search::Verdict;
use crate::testbed;
use crate::testbed::place::{Place, Side};
use crate::testbed::proc::{self, Proc, Wait};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use wirespeed::priority::Priority;
use wirespeed::units::{self, Rate};
use wirespeed::{Error, Result};

/// How long the receiver waits for the sender's end-of-stream message after the sender has
/// exited before it is told to stop; a point whose receiver had to be stopped counts as lossy.
const END_GRACE: Duration = Duration::from_secs(2);

/// The receiver's own time limit beyond the point's duration: a last resort if this process dies.
const RECV_SLACK: Duration = Duration::from_secs(30);

/// Longest a warm-up point runs.
const WARM_UP: Duration = Duration::from_secs(1);

/// What to send in one point.
#[derive(Clone, Debug)]
pub struct PointConfig {
    /// Offered rate (payload bits/s, datagrams/s, or flat out).
    pub rate: Rate,
    /// UDP payload bytes per datagram (the counter format: a multiple of 8).
    pub size: usize,
    /// How long the sender sends.
    pub duration: Duration,
    /// UDP segmentation offload on the sender.
    pub gso: bool,
    /// Receive buffer the receiver asks for, bytes.
    pub rcvbuf: u64,
}

/// One point's result: the sender's and the receiver's reports side by side, so a reader sees
/// what was asked, what the sender managed, what arrived, and which layer lost the rest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// The offered rate as asked (e.g. "1.02 Gb/s", "max (unpaced)").
    pub asked: String,
    /// The offered payload rate, bits/s; `None` when flat out.
    pub asked_bps: Option<f64>,
    /// UDP payload bytes per datagram.
    pub size: usize,
    /// The sender's `--duration`, seconds.
    pub duration_s: f64,
    /// Payload bits/s the sender achieved (its sent datagrams over its sending time).
    pub achieved_bps: f64,
    /// Datagrams/s the sender achieved.
    pub achieved_pps: f64,
    /// Payload bits/s of the unique datagrams received, over the sender's sending time.
    pub received_bps: f64,
    /// Datagrams the sender sent (its own count).
    pub sent: u64,
    /// Unique sequence numbers received (the ledger's "received").
    pub received: u64,
    /// Sequence numbers the ledger settled as lost.
    pub lost: u64,
    /// Arrived out of order (counted as received, not lost).
    pub late: u64,
    /// Arrived twice.
    pub duplicate: u64,
    /// Wrong length or payload.
    pub invalid: u64,
    /// Sent but not received: `sent - received`, which also covers tail loss the ledger could not
    /// see when the end-of-stream message did not arrive.
    pub missing: u64,
    /// Whether the receiver got the sender's end-of-stream message (without it, tail loss is
    /// invisible to the ledger and the point counts as lossy).
    pub end_of_stream: bool,
    /// The receiving socket's own drop counter (SO_RXQ_OVFL, else /proc/net/udp).
    pub kernel_socket_drops: Option<u64>,
    /// UDP RcvbufErrors in the receiver's namespace during the point (namespace-wide).
    pub kernel_rcvbuf_errors: u64,
    /// UDP InErrors in the receiver's namespace during the point (namespace-wide).
    pub kernel_in_errors: u64,
    /// softnet backlog drops during the point (host-wide per-CPU counters).
    pub softnet_dropped: u64,
    /// Missing per million sent.
    pub drops_per_million: f64,
    /// The verdict: anything lost, any invalid datagram, or no end-of-stream message.
    pub lossy: bool,
    /// Sender CPU time per datagram sent, ns (pacing waits included).
    pub send_cpu_ns_per_packet: f64,
    /// Receiver capture-thread CPU time per datagram, ns.
    pub recv_cpu_ns_per_packet: f64,
    /// CPUs the sender may run on (pinned on loopback, the partition's set otherwise).
    pub send_cpus: Vec<usize>,
    /// CPU the receiver's capture thread ended on.
    pub recv_cpu: Option<usize>,
    /// Real time of the sender process, start to exit, seconds (seed 002's `time`).
    pub send_wall_s: f64,
    /// The sender's own sending time, seconds.
    pub send_elapsed_s: f64,
    /// Whether the sender used UDP GSO.
    pub gso_used: bool,
    /// Receive buffer the kernel granted, bytes.
    pub rcvbuf_granted: u64,
    /// Why the receiver stopped ("end of stream" normally).
    pub receiver_stopped_by: String,
    /// The receiver's diagnosis lines (which layer lost what).
    pub diagnosis: Vec<String>,
    /// CPU per datagram of every thread that handled it (capture threads, and a recorder's
    /// writer), ns, from the receiver's report; `None` when it does not give them all.
    #[serde(default)]
    pub recv_all_cpu_ns_per_packet: Option<f64>,
    /// Per capture thread, when the receiver ran several (`--threads N`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recv_threads: Vec<super::recv_cpu::ThreadFigures>,
    /// Per receiving host, when a fleet received the point (`--rx` repeated): each host's own
    /// point (its streams, its ledger); the fields above are then their sums, exact because
    /// every stream is counted on exactly one host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostPoint>,
}

/// One receiving host's share of a fleet's point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostPoint {
    /// The host, as `--rx` named it.
    pub host: String,
    /// Where its receiver listened (the destination of its streams).
    pub receiver: String,
    /// Its point: its sender's and its receiver's reports.
    #[serde(flatten)]
    pub point: Point,
}

/// The note to show when the kernel capped the receive buffer below what was asked (the kernel
/// reports twice the usable size): a capped buffer is a common reason for loss at high rates.
pub fn rcvbuf_note<'a>(asked: u64, points: impl IntoIterator<Item = &'a Point>) -> Option<String> {
    let granted = points.into_iter().map(|p| p.rcvbuf_granted).min()?;
    (granted / 2 < asked).then(|| wirespeed::rx::rcvbuf_clamp_note(asked as usize, granted as usize))
}

/// The highest zero-loss result of a set of points, read as the seeds read their tables: the
/// clean point with the highest achieved rate below every lossy one (a clean point above a
/// lossy one shows intermittent loss, not a safe rate), and the lowest achieved rate of a lossy
/// point (infinite when none lost anything).
pub fn highest_clean<'a, I>(points: I) -> (Option<&'a Point>, f64)
where
    I: Iterator<Item = &'a Point> + Clone,
{
    let lowest_lossy = points.clone().filter(|p| p.lossy).map(|p| p.achieved_bps).fold(f64::INFINITY, f64::min);
    let best = points
        .filter(|p| !p.lossy && p.achieved_bps < lowest_lossy)
        .max_by(|a, b| a.achieved_bps.total_cmp(&b.achieved_bps));
    (best, lowest_lossy)
}

impl Verdict for Point {
    fn achieved_bps(&self) -> f64 {
        self.achieved_bps
    }
    fn lossy(&self) -> bool {
        self.lossy
    }
}

/// Where the points run, as reports show it: the record of a [`Place`] (kept under this name
/// for the bench documents that carry it).
pub use crate::testbed::place::Placement;

/// Runs points, one after another, in one [`Place`] (partitions made once and removed when the
/// runner is dropped).
pub struct Runner {
    place: Place,
    stop: &'static AtomicBool,
    /// Record to disk (`wirespeed record -o DIR`) instead of only receiving: each point's files
    /// go to this directory and are removed after the point (unless `keep`).
    record: Option<PathBuf>,
    /// Leave each point's recording in place (`bench soak --record` verifies it after the run).
    keep: bool,
    /// wirespeed's sender builds its frames and sends them through AF_PACKET on its
    /// partition's link (`send --raw`): cheaper per datagram than a UDP socket, so the one
    /// sender core pushes a receiver harder.
    raw: bool,
    /// The receiver's scheduling (`--priority`, `--realtime`, `--lock-memory`), passed to every
    /// point's receiver.
    priority: Priority,
}

impl Runner {
    /// Partitions when this process has CAP_NET_ADMIN and `loopback` is false, else loopback.
    pub fn auto(loopback: bool, stop: &'static AtomicBool) -> Result<Runner> {
        if !loopback && testbed::require_net_admin("bench").is_ok() {
            Runner::partitions(stop)
        } else {
            Runner::loopback(stop)
        }
    }

    /// Both ends on 127.0.0.1: the receiver on the second allowed CPU, the sender on the first,
    /// when there are two (otherwise unpinned, sharing).
    pub fn loopback(stop: &'static AtomicBool) -> Result<Runner> {
        Ok(Runner {
            place: Place::loopback()?,
            stop,
            record: None,
            keep: false,
            raw: false,
            priority: Priority::default(),
        })
    }

    /// Two partitions joined by a veth link (MTU 9000), one core each: the sender in partition
    /// 1, the receiver in partition 2. Needs CAP_NET_ADMIN; removed when the runner is dropped.
    pub fn partitions(stop: &'static AtomicBool) -> Result<Runner> {
        let place = Place::partitions("wsbench", "bench").map_err(|e| {
            Error::failed(format!("cannot make the two partitions ({e}); --loopback runs the benchmark on loopback"))
        })?;
        Ok(Runner { place, stop, record: None, keep: false, raw: false, priority: Priority::default() })
    }

    /// Two hosts reached over ssh (greeted already), the sender on the first.
    pub fn hosts(hosts: crate::testbed::hosts::Hosts, stop: &'static AtomicBool) -> Result<Runner> {
        let place = Place::hosts(hosts)?;
        Ok(Runner { place, stop, record: None, keep: false, raw: false, priority: Priority::default() })
    }

    /// Make every point's receiver `wirespeed record` writing into `dir` (created if needed;
    /// each point's recording is removed after it, so a long sweep does not fill the disk, and
    /// files that were already in `dir` are left alone), so the points measure
    /// the whole path to disk: capture, RAM ring and O_DIRECT writer. Datagrams dropped at a
    /// full ring are not in the ledger (it describes what was kept), so they count as missing.
    pub fn record_to(&mut self, dir: PathBuf) -> Result<()> {
        if self.place.is_hosts() {
            return Err(Error::invalid(
                "recording on a far host is not built yet: run `wirespeed record` there and `wirespeed send` here, or leave out --record",
            ));
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create the recording directory {}: {e}", dir.display())))?;
        wirespeed::record::check_dir(&dir)?;
        self.record = Some(dir);
        Ok(())
    }

    /// Make wirespeed's sender send raw frames (`send --raw LINK`) on its partition's end of the
    /// link. Partitions only: on loopback the kernel drops IPv4 frames handed to `lo` raw.
    pub fn raw_sender(&mut self) -> Result<()> {
        if self.place.is_hosts() {
            return Err(Error::invalid(
                "--raw runs between partitions only: on hosts, leave it out (the sender uses its UDP socket)",
            ));
        }
        if !self.place.is_partitions() {
            return Err(Error::invalid(
                "--raw needs partitions (run as root, without --loopback): the raw sender sends on the partition's link",
            ));
        }
        self.raw = true;
        Ok(())
    }

    /// Run every point over IPv6: ::1 on loopback, 2001:2::1 to 2001:2::2 on partitions.
    pub fn ipv6(&mut self) -> Result<()> {
        self.place.use_ipv6()
    }

    /// Run every point's receiver with `p` (its `--priority`, `--realtime`, `--lock-memory`).
    /// Refused here, before any point, when this process could not grant it (the receiver is
    /// its child, with its privileges): the same one line the receiver would print.
    pub fn receiver_priority(&mut self, p: Priority) -> Result<()> {
        // On hosts the far receiver checks its own privileges, and says so in one line.
        if !self.place.is_hosts() {
            p.check(false, 0)?;
        }
        self.priority = p;
        Ok(())
    }

    /// The receiver's scheduling, as [`Runner::receiver_priority`] set it.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Keep every point's recording in the recording directory instead of removing it after
    /// the point: for a run whose recording is checked afterwards (`bench soak --record` runs
    /// `wirespeed verify` on it).
    pub fn keep_recordings(&mut self) {
        self.keep = true;
    }

    /// The recording directory, when the points record.
    pub fn recording_dir(&self) -> Option<&std::path::Path> {
        self.record.as_deref()
    }

    /// "record" when the points record to disk, "recv" otherwise.
    pub fn receiver(&self) -> &'static str {
        if self.record.is_some() {
            "record"
        } else {
            "recv"
        }
    }

    /// Where the points run.
    pub fn placement(&self) -> Placement {
        let mut p = self.place.placement();
        if !self.priority.is_default() {
            p.description.push_str(&format!("; receiver at {}", self.priority.describe()));
        }
        p
    }

    /// On hosts, pin the far receiver to one CPU of its host (see [`Place::pin_far`]).
    pub fn pin_far_receiver(&mut self) -> Option<usize> {
        self.place.pin_far(Side::Recv)
    }

    /// The place itself, for a peer tool run beside wirespeed's points on the same CPUs.
    pub fn place(&self) -> &Place {
        &self.place
    }

    /// The address the receiving side listens on: [`Place::ip`] of [`Side::Recv`], for a bench
    /// that starts its own receiver there.
    pub(crate) fn receiver_ip(&self) -> std::net::IpAddr {
        self.place.ip(Side::Recv)
    }

    /// The flag raised by Ctrl-C or SIGTERM: a caller running its own children checks it.
    pub(crate) fn stop_flag(&self) -> &'static AtomicBool {
        self.stop
    }

    /// A short unrecorded point (at most 1 s) at the series' first rate, so caches, page tables,
    /// CPU frequency and the link are warm before anything is recorded.
    pub fn warm_up(&self, cfg: &PointConfig) -> Result<()> {
        let mut c = cfg.clone();
        c.duration = c.duration.min(WARM_UP);
        self.run(&c).map(|_| ())
    }

    /// Run one point. `Ok(None)` when the stop flag was raised (Ctrl-C): the interrupted point
    /// is not a measurement and is not returned.
    pub fn run(&self, cfg: &PointConfig) -> Result<Option<Point>> {
        Ok(self.run_inner(cfg, Stream::default(), false)?.map(|s| s.point))
    }

    /// Run one point with extras (another build as the receiver, arguments passed through to
    /// either end) and keep the receiver's whole report. `Ok(None)` when the stop flag was
    /// raised, as for [`Runner::run`].
    pub fn run_with(&self, cfg: &PointConfig, stream: Stream) -> Result<Option<Streamed>> {
        self.run_inner(cfg, stream, false)
    }

    /// Run one point with extra arguments for the two children and the receiver's stderr lines
    /// handed over as they are printed (`bench soak` follows a long run with `recv --interval`).
    /// Unlike [`Runner::run`], a point stopped by the stop flag is still returned when both ends
    /// reported (they do on SIGTERM), marked `stopped`, so a long run stopped late is not lost.
    pub fn run_streamed(&self, cfg: &PointConfig, stream: Stream) -> Result<Option<Streamed>> {
        self.run_inner(cfg, stream, true)
    }

    fn run_inner(&self, cfg: &PointConfig, stream: Stream, partial: bool) -> Result<Option<Streamed>> {
        if self.stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if self.place.receivers() > 1 {
            return self.run_fleet(cfg, &stream);
        }
        let mut r = self.run_one(cfg, stream, partial)?;
        if let (Some(s), Some(host)) = (r.as_mut(), self.place.receiver_host(0)) {
            s.point.diagnosis = far_doctor(std::mem::take(&mut s.point.diagnosis), &host);
        }
        Ok(r)
    }

    fn run_one(&self, cfg: &PointConfig, stream: Stream, partial: bool) -> Result<Option<Streamed>> {
        let listen = SocketAddr::new(self.place.ip(Side::Recv), 0).to_string();
        let send_cpus = self.place.cpus(Side::Send);
        let mut rargs = self.receiver_args(cfg, listen);
        // A receiver given its own CPU list (`--cpus`, several capture threads) is not also pinned.
        let own_cpus = stream.recv_args.iter().any(|a| a == "--cpus");
        if let (Some(c), false) = (self.place.pin(Side::Recv), own_cpus) {
            rargs.extend(["--cpu".into(), c.to_string()]);
        }
        if let Some(d) = &self.record {
            rargs.extend(["-o".into(), d.display().to_string()]);
        }
        rargs.extend(self.priority.args());
        rargs.extend(stream.recv_args.iter().cloned());
        // Whatever happens to the point, its recording does not stay behind to fill the disk
        // (declared before the receiver, so it is emptied after the receiver is gone).
        let _clean = self.record.as_deref().filter(|_| !self.keep).map(EmptyAfter::new);
        let rcmd = match &stream.exe {
            Some(exe) => self.place.tool_command(Side::Recv, &exe.display().to_string(), &rargs),
            None => self.place.command(Side::Recv, &rargs),
        };
        let rwho = self.place.who(Side::Recv, "the receiver");
        let swho = self.place.who(Side::Send, "the sender");
        let mut recv = Proc::spawn_listener(rcmd, &rwho)?;
        let addr: SocketAddr = match recv.listening(stream.recv_lines) {
            Ok(a) => a.parse().map_err(|_| {
                Error::failed(format!("the receiver said it listens on '{a}', which is not an address"))
            })?,
            Err(said) => {
                if self.stop.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                let why = said.lines().last().unwrap_or("it exited without a word").trim().to_string();
                return Err(Error::failed(format!("{rwho} did not start: {why}")));
            }
        };

        let mut sargs = sender_args(cfg, cfg.rate, &addr.to_string());
        if self.raw {
            sargs.extend(["--raw".into(), crate::testbed::link_name(2)]);
        }
        if let Some(c) = self.place.pin(Side::Send) {
            sargs.extend(["--cpu".into(), c.to_string()]);
        }
        sargs.extend(stream.send_args.iter().cloned());
        // Timed from spawn to exit; a stop request (a signal sent to this process alone, not to
        // the terminal's process group) is passed on to both ends.
        let t0 = Instant::now();
        let send = Proc::spawn(self.place.command(Side::Send, &sargs), &swho)?;
        let others = [&recv];
        let how = Wait::new().stop(self.stop).also_stop(&others).limit(cfg.duration + RECV_SLACK).kill_at_limit();
        let sent = send.wait(how)?;
        if sent.timed_out {
            return Err(Error::failed(format!(
                "{swho} did not finish {} s after its {} s: killed",
                RECV_SLACK.as_secs(),
                cfg.duration.as_secs_f64()
            )));
        }
        let wall = sent.at - t0;
        let (send_status, send_out, send_err) = (sent.status, sent.stdout, sent.stderr);

        // The receiver ends on the sender's end-of-stream message; if that never came, it is
        // told to stop, and the point counts as lossy.
        let recvd = recv.finish(END_GRACE)?;
        let (rstatus, rout, rerr) = (recvd.status, recvd.stdout, recvd.stderr);
        let stopped = self.stop.load(Ordering::Relaxed);
        if stopped && !partial {
            return Ok(None);
        }
        if stopped {
            // Both ends report on SIGTERM; if either did not, there is nothing whole to return.
            let docs = (
                parse_doc::<SendDoc>(&send_out, "wirespeed.send/1", "sender"),
                self.recv_doc::<RecvDoc>(&rout),
                parse_doc::<SendExtra>(&send_out, "wirespeed.send/1", "sender"),
                self.recv_doc::<RecvExtra>(&rout),
            );
            return Ok(match docs {
                (Ok(s), Ok(r), Ok(se), Ok(re)) => Some(Streamed {
                    point: Point::from_reports(cfg, &s, &r, wall, send_cpus).with_cpu(&rout),
                    recv_wall_s: re.wall_s,
                    recv_datagrams: re.datagrams,
                    send_per_second: se.per_second,
                    stopped: true,
                    recv_report: serde_json::from_str(&rout).unwrap_or_default(),
                }),
                _ => None,
            });
        }
        if !send_status.success() {
            return Err(Error::failed(format!("{swho} failed: {}", last_line(&send_err, &send_status))));
        }
        if !rstatus.success() {
            return Err(Error::failed(format!("{rwho} failed: {}", last_line(&rerr, &rstatus))));
        }
        let s: SendDoc = parse_doc(&send_out, "wirespeed.send/1", "sender")?;
        let r: RecvDoc = self.recv_doc(&rout)?;
        let (se, re) = if partial {
            (parse_doc::<SendExtra>(&send_out, "wirespeed.send/1", "sender")?, self.recv_doc::<RecvExtra>(&rout)?)
        } else {
            (SendExtra::default(), RecvExtra::default())
        };
        Ok(Some(Streamed {
            point: Point::from_reports(cfg, &s, &r, wall, send_cpus).with_cpu(&rout),
            recv_wall_s: re.wall_s,
            recv_datagrams: re.datagrams,
            send_per_second: se.per_second,
            stopped: false,
            recv_report: serde_json::from_str(&rout).unwrap_or_default(),
        }))
    }

    /// One point received by a fleet: a receiver on every receiving host (each on its own data
    /// address), then one sender per receiver on the sending host, each at its share of the
    /// rate, all at once. Each host's ledger is its own row of the point; the point is their sum.
    /// A stopped point is not a measurement (`Ok(None)`).
    fn run_fleet(&self, cfg: &PointConfig, stream: &Stream) -> Result<Option<Streamed>> {
        let n = self.place.receivers();
        let share = PointConfig {
            rate: match cfg.rate {
                Rate::Bits(b) => Rate::Bits(b / n as f64),
                Rate::Packets(p) => Rate::Packets(p / n as f64),
                Rate::Max => Rate::Max,
            },
            ..cfg.clone()
        };
        let mut recvs = Vec::new();
        for i in 0..n {
            let host = self.place.receiver_host(i).unwrap_or_default();
            let who = format!("the receiver on {host}");
            let mut rargs = self.receiver_args(cfg, SocketAddr::new(self.place.receiver_ip(i), 0).to_string());
            rargs.extend(self.priority.args());
            rargs.extend(stream.recv_args.iter().cloned());
            let mut r = Proc::spawn_listener(self.place.receiver_command(i, &rargs), &who)?;
            let addr = match r.listening(None) {
                Ok(a) => a,
                Err(said) => {
                    if self.stop.load(Ordering::Relaxed) {
                        return Ok(None);
                    }
                    let why = said.lines().last().unwrap_or("it exited without a word").trim().to_string();
                    return Err(Error::failed(format!("{who} did not start: {why}")));
                }
            };
            recvs.push((r, who, host, addr));
        }
        let swho = self.place.who(Side::Send, "the sender");
        let t0 = Instant::now();
        let mut sends = Vec::new();
        for (_, _, _, addr) in &recvs {
            let mut sargs = sender_args(cfg, share.rate, addr);
            sargs.extend(stream.send_args.iter().cloned());
            sends.push(Proc::spawn(self.place.command(Side::Send, &sargs), &swho)?);
        }
        let others: Vec<&Proc> = recvs.iter().map(|(r, ..)| r).collect();
        let mut sent = Vec::new();
        for s in sends {
            let how = Wait::new().stop(self.stop).also_stop(&others).limit(cfg.duration + RECV_SLACK).kill_at_limit();
            sent.push(s.wait(how)?);
        }
        drop(others);
        let mut hosts = Vec::new();
        let mut reports = Vec::new();
        for ((r, who, host, addr), s) in recvs.into_iter().zip(sent) {
            let recvd = r.finish(END_GRACE)?;
            if self.stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            if s.timed_out {
                return Err(Error::failed(format!("{swho} (to {host}) did not finish in time: killed")));
            }
            if !s.status.success() {
                return Err(Error::failed(format!("{swho} (to {host}) failed: {}", last_line(&s.stderr, &s.status))));
            }
            if !recvd.status.success() {
                return Err(Error::failed(format!("{who} failed: {}", last_line(&recvd.stderr, &recvd.status))));
            }
            let sd: SendDoc = parse_doc(&s.stdout, "wirespeed.send/1", "sender")?;
            let rd: RecvDoc = self.recv_doc(&recvd.stdout)?;
            let mut point = Point::from_reports(&share, &sd, &rd, s.at - t0, Vec::new()).with_cpu(&recvd.stdout);
            point.diagnosis = far_doctor(point.diagnosis, &host);
            reports.push(serde_json::from_str::<serde_json::Value>(&recvd.stdout).unwrap_or_default());
            hosts.push(HostPoint { host, receiver: addr, point });
        }
        let point = Point::merged(cfg, hosts);
        Ok(Some(Streamed {
            recv_wall_s: 0.0,
            recv_datagrams: point.received,
            send_per_second: Vec::new(),
            stopped: false,
            recv_report: serde_json::Value::Array(reports),
            point,
        }))
    }

    /// A point's receiver, listening on `listen`: `recv` (or `record`) until the sender's end,
    /// in JSON, with the point's size, buffer and a duration that outlasts the sender's.
    fn receiver_args(&self, cfg: &PointConfig, listen: String) -> Vec<String> {
        vec![
            self.receiver().into(),
            listen,
            "--once".into(),
            "--json".into(),
            "--size".into(),
            cfg.size.to_string(),
            "--rcvbuf".into(),
            cfg.rcvbuf.to_string(),
            "--duration".into(),
            format!("{}ms", (cfg.duration + RECV_SLACK).as_millis()),
        ]
    }

    /// The receiver's report: `recv`'s own, or the capture part of `record`'s (the same report).
    fn recv_doc<T: for<'de> Deserialize<'de>>(&self, text: &str) -> Result<T> {
        if self.record.is_none() {
            return parse_doc(text, "wirespeed.recv/1", "receiver");
        }
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| Error::failed(format!("the recorder printed no JSON report ({e})")))?;
        if v["schema"] != "wirespeed.record/1" {
            return Err(Error::failed(format!("the recorder's report is not wirespeed.record/1: {}", v["schema"])));
        }
        serde_json::from_value(v["capture"].clone())
            .map_err(|e| Error::io(format!("the recorder's report cannot be read: {e}")))
    }
}

/// A point's sender: `send` to `addr` at `rate` for the point's duration, in JSON.
fn sender_args(cfg: &PointConfig, rate: Rate, addr: &str) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "send".into(),
        addr.to_string(),
        "--rate".into(),
        rate_arg(rate),
        "--size".into(),
        cfg.size.to_string(),
        "--duration".into(),
        format!("{}s", cfg.duration.as_secs_f64()),
        "--json".into(),
    ];
    if cfg.gso {
        v.push("--gso".into());
    }
    v
}

/// A far receiver's diagnosis as this end should act on it: the doctor it names is that
/// host's, run over the same channel (`wirespeed doctor --host HOST ...`).
fn far_doctor(lines: Vec<String>, host: &str) -> Vec<String> {
    if host == "local" {
        return lines;
    }
    lines.into_iter().map(|l| l.replace("`wirespeed doctor ", &format!("`wirespeed doctor --host {host} "))).collect()
}

/// The asked rate as tables show it ("1.02 Gb/s", "500.0 kpps", "max"), for every tool's points.
pub(crate) fn asked_text(r: Rate) -> String {
    match r {
        Rate::Max => "max".into(),
        r => r.to_string(),
    }
}

/// The asked payload bits/s of `size`-byte datagrams; `None` when flat out.
pub(crate) fn asked_bps(r: Rate, size: usize) -> Option<f64> {
    match r {
        Rate::Bits(b) => Some(b),
        Rate::Packets(p) => Some(p * size as f64 * 8.0),
        Rate::Max => None,
    }
}

/// The `--rate` argument a child `send` reads back as the same rate (also a sweep's key for a
/// rate: exact and stable).
pub(crate) fn rate_arg(r: Rate) -> String {
    match r {
        Rate::Bits(b) => format!("{b}"),
        Rate::Packets(p) => format!("{p}pps"),
        Rate::Max => "max".into(),
    }
}

/// Why a child failed, for one line: its last word (without the "wirespeed: " every error of
/// this binary starts with), or its exit status when it said nothing.
pub(crate) fn last_line(stderr: &str, st: &ExitStatus) -> String {
    proc::last_line(stderr)
        .map(|l| l.trim_start_matches("wirespeed: ").to_string())
        .unwrap_or_else(|| format!("it exited with {st}"))
}

pub(crate) fn parse_doc<T: for<'de> Deserialize<'de>>(text: &str, schema: &str, who: &str) -> Result<T> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| Error::failed(format!("the {who} printed no JSON report ({e})")))?;
    if v["schema"] != schema {
        return Err(Error::failed(format!("the {who}'s report is not {schema}: {}", v["schema"])));
    }
    serde_json::from_value(v).map_err(|e| Error::io(format!("the {who}'s report cannot be read: {e}")))
}

/// Removes, when dropped, the files that appeared in a recording directory since it was made:
/// the point's recording. Files that were there before (the user's own) are never touched.
struct EmptyAfter {
    dir: PathBuf,
    before: std::collections::BTreeSet<std::ffi::OsString>,
}

impl EmptyAfter {
    fn new(dir: &std::path::Path) -> EmptyAfter {
        let before = std::fs::read_dir(dir).map(|rd| rd.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
        EmptyAfter { dir: dir.to_path_buf(), before }
    }
}

impl Drop for EmptyAfter {
    fn drop(&mut self) {
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten().filter(|e| !self.before.contains(&e.file_name())) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Extras for [`Runner::run_streamed`]: arguments added to the children's command lines and
/// where the receiver's stderr lines go.
#[derive(Default)]
pub struct Stream {
    /// Added to the receiver's command line (e.g. `--interval 60s --interval-json`).
    pub recv_args: Vec<String>,
    /// Added to the sender's command line.
    pub send_args: Vec<String>,
    /// Gets each line the receiver prints on stderr after it said where it listens, as printed.
    pub recv_lines: Option<mpsc::Sender<String>>,
    /// Another wirespeed binary to run as the receiver (an A/B of two builds); the sender is
    /// always this one, so the two builds' receivers get the same traffic.
    pub exe: Option<PathBuf>,
}

/// A streamed point with the figures a [`Point`] does not carry that a follower of the
/// receiver's interval lines needs to close its last interval.
#[derive(Clone, Debug)]
pub struct Streamed {
    /// The point (partial when `stopped`: no end-of-stream message, so it counts as lossy).
    pub point: Point,
    /// The receiver's wall time, seconds: the same clock as its interval lines' `elapsed_s`.
    pub recv_wall_s: f64,
    /// Datagrams the receiver took in (valid and invalid): the same count as its interval lines'.
    pub recv_datagrams: u64,
    /// Sequence numbers the sender sent or skipped in each whole second of its run.
    pub send_per_second: Vec<u64>,
    /// Whether the stop flag ended the point early.
    pub stopped: bool,
    /// The receiver's whole JSON report (`wirespeed.recv/1`, or `wirespeed.record/1` when
    /// recording), for figures a [`Point`] does not carry (the recorder's ring and writer,
    /// per-thread counts); `Null` when it printed none.
    pub recv_report: serde_json::Value,
}

#[derive(Deserialize, Default)]
struct SendExtra {
    #[serde(default)]
    per_second: Vec<u64>,
}

#[derive(Deserialize, Default)]
struct RecvExtra {
    #[serde(default)]
    wall_s: f64,
    #[serde(default)]
    datagrams: u64,
}

#[derive(Deserialize)]
struct SendDoc {
    sent: u64,
    elapsed_s: f64,
    achieved_pps: f64,
    achieved_bps: f64,
    cpu_ns_per_packet: f64,
    gso_used: bool,
}

#[derive(Deserialize)]
struct Totals {
    received: u64,
    lost: u64,
    late: u64,
    duplicate: u64,
    invalid: u64,
}

#[derive(Deserialize)]
struct NsDelta {
    rcvbuf_errors: u64,
    in_errors: u64,
    softnet_dropped: u64,
}

#[derive(Deserialize)]
struct Kernel {
    socket_drops_rxq_ovfl: Option<u64>,
    socket_drops_proc: Option<u64>,
    namespace_delta: NsDelta,
    rcvbuf_granted: u64,
}

#[derive(Deserialize)]
struct RecvDoc {
    total: Totals,
    streams_without_end: usize,
    kernel: Kernel,
    capture_cpu: Option<usize>,
    cpu_ns_per_packet: f64,
    stopped_by: String,
    diagnosis: Vec<String>,
}

impl Point {
    fn from_reports(cfg: &PointConfig, s: &SendDoc, r: &RecvDoc, wall: Duration, send_cpus: Vec<usize>) -> Point {
        let t = &r.total;
        let end_of_stream = r.stopped_by == "end of stream" && r.streams_without_end == 0;
        let missing = s.sent.saturating_sub(t.received);
        let asked_bps = asked_bps(cfg.rate, cfg.size);
        let received_bps =
            if s.elapsed_s > 0.0 { t.received as f64 * cfg.size as f64 * 8.0 / s.elapsed_s } else { 0.0 };
        Point {
            asked: asked_text(cfg.rate),
            asked_bps,
            size: cfg.size,
            duration_s: cfg.duration.as_secs_f64(),
            achieved_bps: s.achieved_bps,
            achieved_pps: s.achieved_pps,
            received_bps,
            sent: s.sent,
            received: t.received,
            lost: t.lost,
            late: t.late,
            duplicate: t.duplicate,
            invalid: t.invalid,
            missing,
            end_of_stream,
            kernel_socket_drops: r.kernel.socket_drops_rxq_ovfl.or(r.kernel.socket_drops_proc),
            kernel_rcvbuf_errors: r.kernel.namespace_delta.rcvbuf_errors,
            kernel_in_errors: r.kernel.namespace_delta.in_errors,
            softnet_dropped: r.kernel.namespace_delta.softnet_dropped,
            drops_per_million: if s.sent > 0 { missing as f64 * 1e6 / s.sent as f64 } else { 0.0 },
            lossy: !end_of_stream || t.lost > 0 || missing > 0 || t.invalid > 0 || s.sent == 0,
            send_cpu_ns_per_packet: s.cpu_ns_per_packet,
            recv_cpu_ns_per_packet: r.cpu_ns_per_packet,
            send_cpus,
            recv_cpu: r.capture_cpu,
            send_wall_s: wall.as_secs_f64(),
            send_elapsed_s: s.elapsed_s,
            gso_used: s.gso_used,
            rcvbuf_granted: r.kernel.rcvbuf_granted,
            receiver_stopped_by: r.stopped_by.clone(),
            diagnosis: r.diagnosis.clone(),
            recv_all_cpu_ns_per_packet: None,
            recv_threads: Vec::new(),
            hosts: Vec::new(),
        }
    }

    /// A fleet's point: the sums of its hosts' points (`cfg` the whole point's, each host's
    /// sender at its share of the rate), every host kept in [`Point::hosts`].
    fn merged(cfg: &PointConfig, hosts: Vec<HostPoint>) -> Point {
        let ps: Vec<&Point> = hosts.iter().map(|h| &h.point).collect();
        let sum = |f: &dyn Fn(&Point) -> u64| ps.iter().map(|p| f(p)).sum::<u64>();
        let fsum = |f: &dyn Fn(&Point) -> f64| ps.iter().map(|p| f(p)).sum::<f64>();
        let weighted = |f: &dyn Fn(&Point) -> f64, w: &dyn Fn(&Point) -> u64| {
            let total = ps.iter().map(|p| w(p)).sum::<u64>().max(1) as f64;
            ps.iter().map(|p| f(p) * w(p) as f64).sum::<f64>() / total
        };
        let (sent, missing) = (sum(&|p| p.sent), sum(&|p| p.missing));
        let stopped: Vec<&str> = ps.iter().map(|p| p.receiver_stopped_by.as_str()).collect();
        Point {
            asked: asked_text(cfg.rate),
            asked_bps: asked_bps(cfg.rate, cfg.size),
            size: cfg.size,
            duration_s: cfg.duration.as_secs_f64(),
            achieved_bps: fsum(&|p| p.achieved_bps),
            achieved_pps: fsum(&|p| p.achieved_pps),
            received_bps: fsum(&|p| p.received_bps),
            sent,
            received: sum(&|p| p.received),
            lost: sum(&|p| p.lost),
            late: sum(&|p| p.late),
            duplicate: sum(&|p| p.duplicate),
            invalid: sum(&|p| p.invalid),
            missing,
            end_of_stream: ps.iter().all(|p| p.end_of_stream),
            kernel_socket_drops: ps.iter().map(|p| p.kernel_socket_drops).sum(),
            kernel_rcvbuf_errors: sum(&|p| p.kernel_rcvbuf_errors),
            kernel_in_errors: sum(&|p| p.kernel_in_errors),
            softnet_dropped: sum(&|p| p.softnet_dropped),
            drops_per_million: if sent > 0 { missing as f64 * 1e6 / sent as f64 } else { 0.0 },
            lossy: ps.iter().any(|p| p.lossy),
            send_cpu_ns_per_packet: weighted(&|p| p.send_cpu_ns_per_packet, &|p| p.sent),
            recv_cpu_ns_per_packet: weighted(&|p| p.recv_cpu_ns_per_packet, &|p| p.received),
            send_cpus: ps.first().map(|p| p.send_cpus.clone()).unwrap_or_default(),
            recv_cpu: None,
            send_wall_s: ps.iter().map(|p| p.send_wall_s).fold(0.0, f64::max),
            send_elapsed_s: ps.iter().map(|p| p.send_elapsed_s).fold(0.0, f64::max),
            gso_used: ps.iter().all(|p| p.gso_used),
            rcvbuf_granted: ps.iter().map(|p| p.rcvbuf_granted).min().unwrap_or(0),
            receiver_stopped_by: if stopped.iter().all(|s| *s == stopped[0]) {
                stopped[0].to_string()
            } else {
                hosts
                    .iter()
                    .map(|h| format!("{}: {}", h.host, h.point.receiver_stopped_by))
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            diagnosis: hosts
                .iter()
                .flat_map(|h| h.point.diagnosis.iter().map(move |d| format!("{}: {d}", h.host)))
                .collect(),
            recv_all_cpu_ns_per_packet: None,
            recv_threads: Vec::new(),
            hosts,
        }
    }

    /// A fleet's point, one line per receiving host under the point's own (none when not a
    /// fleet): each host's own ledger beside the kernel's drops there.
    pub fn host_lines(&self) -> Vec<String> {
        self.hosts
            .iter()
            .map(|h| {
                let p = &h.point;
                format!(
                    "    on {} ({}): achieved {}  sent {}  received {}  lost {}  kernel drops {}  -> {}",
                    h.host,
                    h.receiver,
                    units::bits(p.achieved_bps),
                    units::thousands(p.sent),
                    units::thousands(p.received),
                    units::thousands(p.lost),
                    p.kernel_socket_drops.map_or("-".into(), units::thousands),
                    p.verdict()
                )
            })
            .collect()
    }

    /// The hosts of a fleet's point that lost something, as a line names them ("" when none
    /// or not a fleet).
    pub fn lossy_hosts(&self) -> String {
        let v: Vec<String> = self
            .hosts
            .iter()
            .filter(|h| h.point.lossy)
            .map(|h| format!("{} lost {}", h.host, units::thousands(h.point.missing.max(h.point.lost))))
            .collect();
        if v.is_empty() {
            String::new()
        } else {
            format!(" [{}]", v.join(", "))
        }
    }

    /// The CPU figures of every receiving thread, from the receiver's report (text: its stdout).
    fn with_cpu(mut self, report: &str) -> Point {
        let c = super::recv_cpu::read(&serde_json::from_str(report).unwrap_or_default());
        self.recv_all_cpu_ns_per_packet = c.all_ns_per_packet;
        self.recv_threads = c.threads;
        self
    }

    /// One word for progress lines and tables.
    pub fn verdict(&self) -> &'static str {
        match (self.lossy, self.end_of_stream) {
            (false, _) => "zero loss",
            (true, false) => "LOSS (no end-of-stream message)",
            (true, true) => "LOSS",
        }
    }

    /// [`Point::line`], then a fleet's [`Point::host_lines`] under it.
    pub fn lines(&self) -> String {
        std::iter::once(self.line()).chain(self.host_lines()).collect::<Vec<_>>().join("\n")
    }

    /// The probe on one line: asked, achieved, received, lost, kernel drops, verdict.
    pub fn line(&self) -> String {
        format!(
            "asked {:>13}  achieved {:>12}  received {:>12}  sent {:>11}  lost {:>9}  kernel drops {:>9}  {:>7}  -> {}{}",
            match self.asked_bps {
                Some(b) => units::bits(b),
                None => "max".into(),
            },
            units::bits(self.achieved_bps),
            units::bits(self.received_bps),
            units::thousands(self.sent),
            units::thousands(self.lost),
            self.kernel_socket_drops.map_or("-".into(), units::thousands),
            format!("{:.2} s", self.send_wall_s),
            self.verdict(),
            if self.missing != self.lost {
                format!(" ({} sent but never received)", units::thousands(self.missing))
            } else {
                String::new()
            }
        ) + &self.lossy_hosts()
    }
}

/// A point as a clean 1 s run would report it, with `lost` datagrams missing, `kernel` of
/// them counted at the socket: the fixture the table and summary tests build on.
#[cfg(test)]
pub(crate) fn test_point(size: usize, asked_bps: f64, achieved_bps: f64, lost: u64, kernel: u64) -> Point {
    let sent = (achieved_bps / (size as f64 * 8.0)).round() as u64;
    Point {
        asked: units::bits(asked_bps),
        asked_bps: Some(asked_bps),
        size,
        duration_s: 1.0,
        achieved_bps,
        achieved_pps: sent as f64,
        received_bps: (sent - lost) as f64 * size as f64 * 8.0,
        sent,
        received: sent - lost,
        lost,
        late: 0,
        duplicate: 0,
        invalid: 0,
        missing: lost,
        end_of_stream: true,
        kernel_socket_drops: Some(kernel),
        kernel_rcvbuf_errors: kernel,
        kernel_in_errors: kernel,
        softnet_dropped: 0,
        drops_per_million: lost as f64 * 1e6 / sent as f64,
        lossy: lost > 0,
        send_cpu_ns_per_packet: 1000.0,
        recv_cpu_ns_per_packet: 1000.0,
        send_cpus: vec![0],
        recv_cpu: Some(1),
        send_wall_s: 1.01,
        send_elapsed_s: 1.0,
        gso_used: false,
        rcvbuf_granted: 1 << 25,
        receiver_stopped_by: "end of stream".into(),
        diagnosis: vec![],
        recv_all_cpu_ns_per_packet: None,
        recv_threads: vec![],
        hosts: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(sent: u64, received: u64, lost: u64, stopped_by: &str, without_end: usize) -> (SendDoc, RecvDoc) {
        (
            SendDoc {
                sent,
                elapsed_s: 1.0,
                achieved_pps: sent as f64,
                achieved_bps: sent as f64 * 8800.0 * 8.0,
                cpu_ns_per_packet: 1000.0,
                gso_used: false,
            },
            RecvDoc {
                total: Totals { received, lost, late: 0, duplicate: 0, invalid: 0 },
                streams_without_end: without_end,
                kernel: Kernel {
                    socket_drops_rxq_ovfl: Some(lost),
                    socket_drops_proc: None,
                    namespace_delta: NsDelta { rcvbuf_errors: lost, in_errors: lost, softnet_dropped: 0 },
                    rcvbuf_granted: 1 << 25,
                },
                capture_cpu: Some(1),
                cpu_ns_per_packet: 900.0,
                stopped_by: stopped_by.into(),
                diagnosis: vec![],
            },
        )
    }

    fn point(d: (SendDoc, RecvDoc)) -> Point {
        let cfg =
            PointConfig { rate: Rate::Bits(1e9), size: 8800, duration: Duration::from_secs(1), gso: false, rcvbuf: 0 };
        Point::from_reports(&cfg, &d.0, &d.1, Duration::from_millis(1050), vec![0])
    }

    #[test]
    fn verdicts() {
        let p = point(docs(14205, 14205, 0, "end of stream", 0));
        assert!(!p.lossy && p.end_of_stream && p.missing == 0 && p.drops_per_million == 0.0);
        assert_eq!(p.verdict(), "zero loss");
        let p = point(docs(14205, 14000, 205, "end of stream", 0));
        assert!(p.lossy && p.missing == 205 && p.kernel_socket_drops == Some(205));
        assert!((p.drops_per_million - 205e6 / 14205.0).abs() < 1e-6);
        // No end message: the tail was invisible to the ledger, so lossy even with lost = 0 and
        // every counted packet present.
        let p = point(docs(14205, 14205, 0, "signal 15", 0));
        assert!(p.lossy && !p.end_of_stream);
        assert_eq!(p.verdict(), "LOSS (no end-of-stream message)");
        let p = point(docs(14205, 14205, 0, "end of stream", 1));
        assert!(p.lossy);
        // Tail loss the ledger never saw still shows as missing.
        let p = point(docs(14205, 14100, 0, "signal 15", 0));
        assert!(p.lossy && p.missing == 105);
    }

    #[test]
    fn a_capped_receive_buffer_is_noted() {
        let mut p = point(docs(10, 10, 0, "end of stream", 0));
        // The kernel reports twice the usable size: 64 MiB granted for 32 MiB asked is no cap.
        p.rcvbuf_granted = 64 << 20;
        assert_eq!(rcvbuf_note(32 << 20, [&p]), None);
        p.rcvbuf_granted = 8 << 20;
        let n = rcvbuf_note(32 << 20, [&p]).expect("a note");
        assert!(n.contains("net.core.rmem_max=33554432"), "{n}");
        assert_eq!(rcvbuf_note(32 << 20, []), None);
    }

    #[test]
    fn rates_round_trip_through_the_child_argument() {
        for r in [Rate::Bits(1024e6), Rate::Bits(4472135954.999579), Rate::Packets(500e3), Rate::Max] {
            assert_eq!(Rate::parse(&rate_arg(r)).unwrap(), r);
        }
    }
}
