//! `bench xpc`: XPC messages between two processes against a Unix datagram socket pair, in the
//! same run: one-way message rate with the CPU each side spends per message, round-trip latency
//! (ping-pong, p50/p99), and, for large transfers, rendezvous (the BTE pull) against out-of-line
//! copies.
//!
//! The measuring process is partition 1 and starts this binary again as partition 2 (`bench
//! xpc-peer`, hidden), which follows the same fixed schedule: per repetition, each transport
//! in turn (the order alternates between repetitions, so drift hits both), one-way then
//! ping-pong then bulk. The peer reports its own CPU time of each one-way phase in the
//! acknowledgement it sends at the end of it. Figures are medians over repetitions.

use crate::testbed::proc::{Proc, Wait};
use crate::xpc::{ChanState, Channel, ChannelOptions, Node, NodeOptions};
use serde::Serialize;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use wirespeed::sys;
use wirespeed::{Error, Result};

/// Longest any single step may take before the run is declared stuck.
const STEP_LIMIT: Duration = Duration::from_secs(60);

/// Size of a bulk transfer (rendezvous vs out of line).
pub const BULK: usize = 1 << 20;

/// Out-of-line area of the bench's channel: four bulk transfers in flight.
const BENCH_DATA: u32 = 4 << 20;

/// What to measure.
#[derive(Debug, Clone, Serialize)]
pub struct XpcConfig {
    /// One-way messages per transport and repetition.
    pub messages: u64,
    /// Message size, bytes.
    pub size: usize,
    /// Round trips per transport and repetition.
    pub pings: u64,
    /// 1 MiB transfers per mode and repetition (0: no bulk phase).
    pub bulk: u64,
    /// Repetitions.
    pub repeat: u32,
    /// XPC's spin before sleeping, ns ([`crate::xpc::ChannelOptions::spin_ns`]).
    pub spin_ns: u64,
}

/// One transport in one repetition.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Repetition, from 0.
    pub rep: u32,
    /// "xpc" or "unix_dgram".
    pub transport: String,
    /// 0 if it ran first in its repetition, 1 if second.
    pub order: u32,
    /// Messages that arrived (checked: equals the messages sent).
    pub received: u64,
    /// One-way messages per second.
    pub msgs_per_s: f64,
    /// Sender CPU per message, ns.
    pub send_cpu_ns: f64,
    /// Receiver CPU per message, ns.
    pub recv_cpu_ns: f64,
    /// Round trips completed.
    pub round_trips: u64,
    /// Round-trip latency, median, µs.
    pub rtt_p50_us: f64,
    /// Round-trip latency, 99th percentile, µs.
    pub rtt_p99_us: f64,
}

/// Bulk transfers of one repetition.
#[derive(Debug, Clone, Serialize)]
pub struct BulkRun {
    /// Repetition, from 0.
    pub rep: u32,
    /// "rendezvous" or "out_of_line".
    pub mode: String,
    /// 1 MiB transfers completed.
    pub transfers: u64,
    /// MB/s (10^6 bytes per second).
    pub mb_per_s: f64,
    /// Bytes the receiver pulled straight into its buffer.
    pub bytes_pulled: u64,
    /// Bytes the receiver got through a copy.
    pub bytes_copied: u64,
}

/// Medians over repetitions of one transport.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// "xpc" or "unix_dgram".
    pub transport: String,
    /// Messages per second.
    pub msgs_per_s: f64,
    /// Sender CPU per message, ns.
    pub send_cpu_ns: f64,
    /// Receiver CPU per message, ns.
    pub recv_cpu_ns: f64,
    /// Round-trip p50, µs.
    pub rtt_p50_us: f64,
    /// Round-trip p99, µs.
    pub rtt_p99_us: f64,
}

/// The id of `bench xpc --json` and its `xpc.json`.
pub const SCHEMA: &str = "wirespeed.bench.xpc/1";

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct XpcReport {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// What was asked.
    pub config: XpcConfig,
    /// Every transport of every repetition.
    pub runs: Vec<Run>,
    /// Medians per transport.
    pub summary: Vec<Summary>,
    /// Every bulk run.
    pub bulk_runs: Vec<BulkRun>,
    /// Median MB/s per bulk mode ("rendezvous", "out_of_line").
    pub bulk_mb_per_s: Vec<(String, f64)>,
}

const TRANSPORTS: [&str; 2] = ["xpc", "unix_dgram"];

fn order_of(rep: u32) -> [usize; 2] {
    if rep % 2 == 0 {
        [0, 1]
    } else {
        [1, 0]
    }
}

fn rt(what: &str, e: impl std::fmt::Display) -> Error {
    Error::failed(format!("bench xpc: {what}: {e}"))
}

/// The two endpoints of one side.
struct Ends {
    chan: Channel,
    sock: UnixDatagram,
    node: Node,
    /// The socket's receive buffer (a datagram lands here, then goes to the caller's, as an
    /// XPC message goes from its slot to the caller's buffer).
    ubuf: Vec<u8>,
}

fn open_ends(dir: &Path, local: u32, remote: u32, spin_ns: u64) -> Result<Ends> {
    let node = Node::open(dir, local, NodeOptions { version: (1, 0), xpc: true })?;
    let o = ChannelOptions { data_bytes: BENCH_DATA, spin_ns, ..Default::default() };
    let mut chan = Channel::open_with(&node, remote, 0, o)?;
    let end = Instant::now() + STEP_LIMIT;
    loop {
        let seen = node.snapshot();
        match chan.poll_connect()? {
            ChanState::Connected => break,
            ChanState::Connecting if Instant::now() < end => {
                node.wait_since(seen, Duration::from_millis(50));
            }
            s => return Err(rt("the XPC channel did not connect", format!("{s:?}"))),
        }
    }
    let me = dir.join(format!("sock-{local}"));
    let _ = std::fs::remove_file(&me);
    let sock = UnixDatagram::bind(&me).map_err(|e| rt("cannot bind a Unix datagram socket", e))?;
    sock.set_read_timeout(Some(STEP_LIMIT)).map_err(|e| rt("socket timeout", e))?;
    sock.set_write_timeout(Some(STEP_LIMIT)).map_err(|e| rt("socket timeout", e))?;
    Ok(Ends { chan, sock, node, ubuf: vec![0u8; 64 << 10] })
}

/// Connect the socket to the peer's once it exists (both bind before they connect).
fn connect_sock(dir: &Path, ends: &Ends, remote: u32) -> Result<()> {
    let peer = dir.join(format!("sock-{remote}"));
    let end = Instant::now() + STEP_LIMIT;
    loop {
        match ends.sock.connect(&peer) {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= end => return Err(rt("cannot reach the peer's socket", e)),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn send_one(e: &mut Ends, t: usize, m: &[u8]) -> Result<()> {
    if t == 0 {
        e.chan.send(m, STEP_LIMIT)
    } else {
        e.sock.send(m).map(|_| ()).map_err(|x| rt("socket send", x))
    }
}

fn recv_one(e: &mut Ends, t: usize, buf: &mut Vec<u8>) -> Result<usize> {
    if t == 0 {
        e.chan.recv(buf, STEP_LIMIT)?.ok_or_else(|| rt("no XPC message", format!("within {STEP_LIMIT:?}")))
    } else {
        let n = e.sock.recv(&mut e.ubuf).map_err(|x| rt("socket receive", x))?;
        buf.clear();
        buf.extend_from_slice(&e.ubuf[..n]);
        Ok(n)
    }
}

/// An owned buffer with a 128-byte aligned window of `len` bytes.
struct Aligned {
    v: Vec<u8>,
    at: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let v = vec![0u8; len + 128];
        let at = (128 - v.as_ptr() as usize % 128) % 128;
        Aligned { v, at, len }
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.v[self.at..self.at + self.len]
    }
}

/// Partition 2's side (`bench xpc-peer`): follow the schedule until it is done.
pub fn peer(dir: &Path, c: &XpcConfig) -> Result<()> {
    let mut e = open_ends(dir, 2, 1, c.spin_ns)?;
    connect_sock(dir, &e, 1)?;
    let mut buf = Vec::with_capacity(64 << 10);
    let mut big = Aligned::new(BULK);
    for rep in 0..c.repeat {
        for t in order_of(rep) {
            let cpu0 = sys::thread_cpu_ns();
            let mut got = 0u64;
            for _ in 0..c.messages {
                if recv_one(&mut e, t, &mut buf)? == c.size {
                    got += 1;
                }
            }
            let cpu = sys::thread_cpu_ns() - cpu0;
            let mut ack = [0u8; 16];
            ack[..8].copy_from_slice(&cpu.to_le_bytes());
            ack[8..].copy_from_slice(&got.to_le_bytes());
            send_one(&mut e, t, &ack)?;
            for _ in 0..c.pings {
                let n = recv_one(&mut e, t, &mut buf)?;
                let echo = buf[..n].to_vec();
                send_one(&mut e, t, &echo)?;
            }
        }
        for _mode in 0..2 {
            if c.bulk == 0 {
                continue;
            }
            let before = e.chan.stats();
            for _ in 0..c.bulk {
                e.chan.recv_into(big.get(), STEP_LIMIT)?.ok_or_else(|| rt("no bulk transfer", "timeout"))?;
            }
            let st = e.chan.stats();
            let mut ack = [0u8; 16];
            ack[..8].copy_from_slice(&(st.bytes_pulled - before.bytes_pulled).to_le_bytes());
            ack[8..].copy_from_slice(&(st.bytes_copied - before.bytes_copied).to_le_bytes());
            e.chan.send(&ack, STEP_LIMIT)?;
        }
    }
    // Wait for the measuring side to close: leaving earlier would close the channel under it.
    let _ = e.chan.recv(&mut buf, STEP_LIMIT);
    drop(e.node);
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

/// A scratch directory for the pages and halves: tmpfs when there is one.
fn scratch() -> Result<PathBuf> {
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let d = base.join(format!("wirespeed-bench-xpc-{}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| rt(&format!("cannot create {}", d.display()), e))?;
    Ok(d)
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run the benchmark with `exe` (this binary) as the peer; `say` gets a line per run.
pub fn run(exe: &Path, c: &XpcConfig, say: &mut dyn FnMut(&str)) -> Result<XpcReport> {
    let dir = scratch()?;
    let _clean = Cleanup(dir.clone());
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "xpc-peer", "--dir"]).arg(&dir).args([
        "--messages",
        &c.messages.to_string(),
        "--size",
        &c.size.to_string(),
        "--pings",
        &c.pings.to_string(),
        "--bulk",
        &c.bulk.to_string(),
        "--repeat",
        &c.repeat.to_string(),
        "--spin-ns",
        &c.spin_ns.to_string(),
    ]);
    let child = Proc::spawn(cmd, "the XPC peer")?;
    let res = measure(&dir, c, say);
    let exit = child.wait(Wait::new().limit(STEP_LIMIT).kill_at_limit())?;
    let report = res?;
    if !exit.status.success() {
        return Err(rt("the peer failed", exit.stderr.trim()));
    }
    Ok(report)
}

fn measure(dir: &Path, c: &XpcConfig, say: &mut dyn FnMut(&str)) -> Result<XpcReport> {
    let mut e = open_ends(dir, 1, 2, c.spin_ns)?;
    connect_sock(dir, &e, 2)?;
    let msg: Vec<u8> = (0..c.size).map(|i| i as u8).collect();
    let mut buf = Vec::with_capacity(64 << 10);
    let mut runs = Vec::new();
    let mut bulk_runs = Vec::new();
    let mut rtts = Vec::with_capacity(c.pings as usize);
    let mut big = Aligned::new(BULK);
    for (k, b) in big.get().iter_mut().enumerate() {
        *b = k as u8;
    }
    for rep in 0..c.repeat {
        for (order, t) in order_of(rep).into_iter().enumerate() {
            let (t0, cpu0) = (Instant::now(), sys::thread_cpu_ns());
            for _ in 0..c.messages {
                send_one(&mut e, t, &msg)?;
            }
            let send_cpu = sys::thread_cpu_ns() - cpu0;
            let n = recv_one(&mut e, t, &mut buf)?;
            let wall = t0.elapsed().as_secs_f64();
            if n != 16 {
                return Err(rt("the peer's acknowledgement", format!("{n} bytes, not 16")));
            }
            let peer_cpu = u64::from_le_bytes(buf[..8].try_into().expect("8"));
            let received = u64::from_le_bytes(buf[8..16].try_into().expect("8"));
            rtts.clear();
            for _ in 0..c.pings {
                let t1 = Instant::now();
                send_one(&mut e, t, &msg)?;
                let n = recv_one(&mut e, t, &mut buf)?;
                rtts.push(t1.elapsed().as_nanos() as u64);
                if n != c.size {
                    return Err(rt("ping-pong", format!("an echo of {n} bytes, not {}", c.size)));
                }
            }
            rtts.sort_unstable();
            let per = |x: u64| if c.messages == 0 { 0.0 } else { x as f64 / c.messages as f64 };
            let r = Run {
                rep,
                transport: TRANSPORTS[t].into(),
                order: order as u32,
                received,
                msgs_per_s: if wall > 0.0 { c.messages as f64 / wall } else { 0.0 },
                send_cpu_ns: per(send_cpu),
                recv_cpu_ns: per(peer_cpu),
                round_trips: rtts.len() as u64,
                rtt_p50_us: percentile(&rtts, 50.0),
                rtt_p99_us: percentile(&rtts, 99.0),
            };
            say(&run_line(&r));
            runs.push(r);
        }
        if c.bulk > 0 {
            for mode in ["rendezvous", "out_of_line"] {
                let t0 = Instant::now();
                for _ in 0..c.bulk {
                    if mode == "rendezvous" {
                        e.chan.send_rendezvous(big.get(), STEP_LIMIT)?;
                    } else {
                        e.chan.send(big.get(), STEP_LIMIT)?;
                    }
                }
                let n = e.chan.recv(&mut buf, STEP_LIMIT)?.ok_or_else(|| rt("no bulk acknowledgement", "timeout"))?;
                let wall = t0.elapsed().as_secs_f64();
                if n != 16 {
                    return Err(rt("the peer's bulk acknowledgement", format!("{n} bytes, not 16")));
                }
                let pulled = u64::from_le_bytes(buf[..8].try_into().expect("8"));
                let copied = u64::from_le_bytes(buf[8..16].try_into().expect("8"));
                let b = BulkRun {
                    rep,
                    mode: mode.into(),
                    transfers: c.bulk,
                    mb_per_s: (c.bulk as f64 * BULK as f64) / wall / 1e6,
                    bytes_pulled: pulled,
                    bytes_copied: copied,
                };
                say(&format!(
                    "rep {} bulk {:<11} {:>8.0} MB/s  pulled {} copied {}",
                    rep, b.mode, b.mb_per_s, b.bytes_pulled, b.bytes_copied
                ));
                bulk_runs.push(b);
            }
        }
    }
    e.chan.close();
    let summary = TRANSPORTS
        .iter()
        .map(|&t| {
            let of = |f: fn(&Run) -> f64| median(runs.iter().filter(|r| r.transport == t).map(f).collect());
            Summary {
                transport: t.into(),
                msgs_per_s: of(|r| r.msgs_per_s),
                send_cpu_ns: of(|r| r.send_cpu_ns),
                recv_cpu_ns: of(|r| r.recv_cpu_ns),
                rtt_p50_us: of(|r| r.rtt_p50_us),
                rtt_p99_us: of(|r| r.rtt_p99_us),
            }
        })
        .collect();
    let bulk_mb_per_s = if c.bulk > 0 {
        ["rendezvous", "out_of_line"]
            .iter()
            .map(|&m| (m.to_string(), median(bulk_runs.iter().filter(|b| b.mode == m).map(|b| b.mb_per_s).collect())))
            .collect()
    } else {
        Vec::new()
    };
    Ok(XpcReport { schema: SCHEMA, config: c.clone(), runs, summary, bulk_runs, bulk_mb_per_s })
}

/// One progress line per transport and repetition.
pub fn run_line(r: &Run) -> String {
    format!(
        "rep {} {:<10} {:>10.0} msg/s  cpu send {:>6.0} ns recv {:>6.0} ns  rtt p50 {:>7.1} us p99 {:>7.1} us",
        r.rep, r.transport, r.msgs_per_s, r.send_cpu_ns, r.recv_cpu_ns, r.rtt_p50_us, r.rtt_p99_us
    )
}

/// The table of medians.
pub fn table(rep: &XpcReport) -> String {
    let c = &rep.config;
    let mut s = format!(
        "{} B messages, {} one-way and {} round trips per transport, medians of {} repetition(s), XPC spins {} ns before sleeping\n\n",
        c.size, c.messages, c.pings, c.repeat, c.spin_ns
    );
    s.push_str("transport      msgs/s   CPU/msg send   CPU/msg recv   RTT p50 (us)   RTT p99 (us)\n");
    for m in &rep.summary {
        s.push_str(&format!(
            "{:<10} {:>10.0} {:>11.0} ns {:>11.0} ns {:>14.1} {:>14.1}\n",
            m.transport, m.msgs_per_s, m.send_cpu_ns, m.recv_cpu_ns, m.rtt_p50_us, m.rtt_p99_us
        ));
    }
    if !rep.bulk_mb_per_s.is_empty() {
        s.push_str(&format!("\n1 MiB transfers over XPC ({} per mode), MB/s\n", c.bulk));
        for (m, v) in &rep.bulk_mb_per_s {
            s.push_str(&format!("{m:<12} {v:>8.0}\n"));
        }
    }
    s
}
