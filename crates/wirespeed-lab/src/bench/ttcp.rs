//! `wirespeed bench ttcp`: seed 000's Tables 3-5, the whole table set, each row one pair of
//! `wirespeed ttcp` processes (the receiver first, then the transmitter once the receiver says
//! where it listens) in one [`Place`]: across two partitions with the privilege, else on
//! loopback on two different cores.
//!
//! Table 3 runs over the transports asked for (`Over`): the raw devices between the two
//! partitions (the transmitter in partition 1 writes `/hw/xplink/raw/02/<nn>`, the receiver in
//! partition 2 reads `/hw/xplink/raw/01/<nn>`), a FIFO and a Unix stream socket between the
//! same two places (the local references, made in a directory of this run's own), and a TCP
//! stream. The raw ones are `wirespeed ttcp --device/--unix` pairs (see [`crate::ttcp::RawConfig`]),
//! timed from the first byte written to the last byte read.
//!
//! The driver is here rather than in the command so that it stands on the same place and child
//! handling ([`crate::testbed::proc`]) as every other run of two ends; the command parses its
//! options and prints what [`run`] returns.

use crate::testbed;
use crate::testbed::place::{Place, Side};
use crate::testbed::proc::{self, Proc, Wait};
use crate::testbed::xplink;
use crate::ttcp::{self, BenchRow, Config, Over, Proto, RawKind, RawReport, RawRow, Report, Role, TABLE3_SIZES};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use wirespeed::units;
use wirespeed::{Error, Result};

/// The document `--json` prints and `ttcp.json` holds.
pub const SCHEMA: &str = "wirespeed.bench.ttcp/1";

/// A child told to stop (or past its limit) is killed this long after its SIGTERM.
const KILL_AFTER: Duration = Duration::from_secs(3);

/// What to run: the socket-buffer tables for `protos` and, with `table3`, Table 3.
#[derive(Clone, Debug)]
pub struct TtcpBenchConfig {
    /// Socket-buffer tables to run, in order: TCP is Table 4, UDP Table 5 (repeats are run once).
    pub protos: Vec<Proto>,
    /// Socket buffer sizes (-b), one row each, in this order; a "default" row is always added.
    pub buffers: Vec<u64>,
    /// Bytes per read/write and UDP datagram size for Tables 4 and 5 (-l).
    pub buflen: u64,
    /// Buffers per run for Tables 4 and 5 (-n).
    pub nbuf: u64,
    /// Also run Table 3 (read/write sizes 32 B to 1 MiB).
    pub table3: bool,
    /// Writes per size in Table 3.
    pub writes: u64,
    /// Run over loopback even with the privilege to make partitions.
    pub loopback: bool,
    /// Table 3's transports, one column each (repeats are run once); empty means the default:
    /// devices (on partitions), pipe, unix and tcp.
    pub over: Vec<Over>,
    /// Streams at once for Table 3's devices, pipe and unix columns (devices 00..K-1): the
    /// figure is then their aggregate.
    pub streams: usize,
}

impl TtcpBenchConfig {
    /// Refuse what cannot run (usage errors), with the same checks each ttcp child would make,
    /// here once rather than in every child.
    pub fn validate(&self) -> Result<()> {
        if self.protos.is_empty() && !self.table3 {
            return Err(Error::invalid("nothing to run: --proto none needs --table3"));
        }
        if let Some(b) = self.buffers.iter().find(|&&b| b == 0) {
            return Err(Error::invalid(format!("--buffers {b}: a socket buffer size must be at least 1 byte")));
        }
        if self.writes == 0 {
            return Err(Error::invalid("--writes must be at least 1"));
        }
        if self.streams == 0 || self.streams > usize::from(xplink::DEVICES) {
            return Err(Error::invalid(format!(
                "--devices {}: give 1 to {} (a remote partition has 16 raw devices)",
                self.streams,
                xplink::DEVICES
            )));
        }
        if self.table3 {
            if self.loopback && self.over.contains(&Over::Devices) {
                return Err(devices_need_partitions());
            }
            if self.streams > 1 && self.over.contains(&Over::Tcp) {
                return Err(Error::invalid(format!(
                    "--devices {} runs that many raw streams at once; the tcp column has one: leave tcp out of --over",
                    self.streams
                )));
            }
        }
        for &p in &self.protos {
            let mut c = Config::new(p);
            c.buflen = usize::try_from(self.buflen).unwrap_or(usize::MAX);
            c.nbuf = self.nbuf;
            c.validate()?;
        }
        Ok(())
    }

    /// Table 3's transports for `place`, in column order, without repeats: as asked, or by
    /// default the devices (on partitions), pipe, unix and tcp (tcp only for one stream).
    pub fn over(&self, place: &Place) -> Vec<Over> {
        if !self.over.is_empty() {
            return Over::ALL.into_iter().filter(|o| self.over.contains(o)).collect();
        }
        Over::ALL
            .into_iter()
            .filter(|o| match o {
                Over::Devices => place.is_partitions(),
                Over::Tcp => self.streams == 1,
                _ => true,
            })
            .collect()
    }

    /// Refuse what `place` cannot run: the devices connect two partitions.
    pub fn check_place(&self, place: &Place) -> Result<()> {
        if self.table3 && self.over.contains(&Over::Devices) && !place.is_partitions() {
            return Err(devices_need_partitions());
        }
        Ok(())
    }

    fn protos(&self) -> Vec<Proto> {
        let mut protos: Vec<Proto> = Vec::new();
        for p in &self.protos {
            if !protos.contains(p) {
                protos.push(*p);
            }
        }
        protos
    }
}

fn devices_need_partitions() -> Error {
    Error::invalid(
        "--over devices needs partitions (the raw devices join two of them): run as root without --loopback, or use --over pipe,unix,tcp on loopback",
    )
}

/// Partitions when this process has CAP_NET_ADMIN and `loopback` is false, else loopback with
/// the two ends on different physical cores. With `devices`, the partitions get their daemons
/// (XPC and the raw devices Table 3 runs over).
pub fn open_place(loopback: bool, devices: bool) -> Result<Place> {
    if !loopback && testbed::require_net_admin("bench ttcp").is_ok() {
        let o = testbed::place::PairOptions { daemons: devices, ..Default::default() };
        return Place::partitions_with("wsttcp", "bench ttcp", &o);
    }
    Place::loopback_on_cores()
}

impl TtcpBenchConfig {
    /// Whether this run may use the raw devices (asked for, or among the default columns).
    pub fn wants_devices(&self) -> bool {
        self.table3 && (self.over.is_empty() || self.over.contains(&Over::Devices))
    }
}

/// Where the tables were measured, in the words of their heading.
pub fn description(place: &Place) -> String {
    match (place.pair(), place.pin(Side::Send), place.pin(Side::Recv)) {
        (Some(pair), ..) => format!(
            "over a veth link from partition 1 (transmitter, CPUs {:?}) to partition 2 (receiver, CPUs {:?}); partitions '{}' are removed at the end (--loopback skips them)",
            pair.cpus[0], pair.cpus[1], pair.prefix
        ),
        (None, Some(t), Some(r)) => format!("over loopback, transmitter on CPU {t}, receiver on CPU {r}"),
        _ => "over loopback (one core: transmitter and receiver share it)".into(),
    }
}

/// What both ends of one pair are given; strings, so that the same builder writes the
/// template shown above each table (`<socket buffer size>`, `<size>`).
struct Spec<'a> {
    proto: Proto,
    buflen: &'a str,
    sockbuf: Option<&'a str>,
    nbuf: &'a str,
}

/// One ttcp command line for `role`, to `addr` (transmitter) or bound to it (receiver).
fn ttcp_argv(role: Role, spec: &Spec, port: &str, addr: &str, cpu: Option<usize>) -> Vec<String> {
    let Spec { proto, buflen, sockbuf, nbuf } = *spec;
    let mut v: Vec<String> = vec!["ttcp".into()];
    if proto == Proto::Udp {
        v.push("-u".into());
    }
    v.push(if role == Role::Transmit { "-t" } else { "-r" }.into());
    v.push("-s".into());
    v.push(format!("-l{buflen}"));
    if let Some(b) = sockbuf {
        v.extend(["-b".into(), b.to_string()]);
    }
    v.extend(["-n".into(), nbuf.to_string(), "-p".into(), port.to_string()]);
    if role == Role::Receive {
        v.extend(["--bind".into(), addr.to_string()]);
    }
    if let Some(c) = cpu {
        v.extend(["--cpu".into(), c.to_string()]);
    }
    v.push("--json".into());
    if role == Role::Transmit {
        v.push(addr.to_string());
    }
    v
}

fn last_line(s: &str) -> &str {
    proc::last_line(s).unwrap_or("(no message)")
}

/// Run one receiver/transmitter pair and return its row; `None` when a stop request cut it
/// short (the children may then have died of the signal: not a failure, not a measurement).
pub fn run_pair(
    place: &Place,
    proto: Proto,
    sockbuf: Option<u64>,
    buflen: u64,
    nbuf: u64,
    stop: &AtomicBool,
) -> Result<Option<BenchRow>> {
    let b = sockbuf.map(|b| b.to_string());
    let (l, n) = (buflen.to_string(), nbuf.to_string());
    let spec = Spec { proto, buflen: &l, sockbuf: b.as_deref(), nbuf: &n };
    let (host, bind) = (place.ip(Side::Recv).to_string(), place.ip(Side::Recv).to_string());
    let rx_args = ttcp_argv(Role::Receive, &spec, "0", &bind, place.pin(Side::Recv));
    let mut rx = Proc::spawn_listener(place.command(Side::Recv, &rx_args), "the ttcp receiver")?;
    let port = match rx.listening(None) {
        Ok(addr) => addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()),
        Err(said) => {
            if stop.load(Ordering::Relaxed) {
                return Ok(None);
            }
            return Err(Error::failed(format!("the ttcp receiver did not start: {}", last_line(&said))));
        }
    };
    let Some(port) = port else {
        return Err(Error::failed("the ttcp receiver did not say its port"));
    };
    let tx_args = ttcp_argv(Role::Transmit, &spec, &port.to_string(), &host, place.pin(Side::Send));
    let tx_out = Proc::spawn(place.command(Side::Send, &tx_args), "the ttcp transmitter")
        .and_then(|tx| tx.wait(Wait::new().stop(stop).kill_after(KILL_AFTER)));
    if !matches!(&tx_out, Ok(e) if e.status.success()) {
        rx.terminate();
    }
    // A TCP receiver ends at end of stream; a UDP one at the end marker, or after its 5 s
    // silence timeout when every copy was lost.
    let rx_out = rx.wait(
        Wait::new().stop(stop).limit(ttcp::DEFAULT_UDP_TIMEOUT + Duration::from_secs(10)).kill_after(KILL_AFTER),
    )?;
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let tx_out = tx_out?;
    if !tx_out.status.success() {
        return Err(Error::failed(format!("the ttcp transmitter failed: {}", last_line(&tx_out.stderr))));
    }
    if !rx_out.status.success() {
        return Err(Error::failed(format!("the ttcp receiver failed: {}", last_line(&rx_out.stderr))));
    }
    let parse = |who: &str, out: &str, err: &str| {
        serde_json::from_str::<Report>(out)
            .map_err(|e| Error::failed(format!("the ttcp {who} printed no report ({e}): {}", last_line(err))))
    };
    Ok(Some(BenchRow {
        proto,
        sockbuf,
        buflen: buflen as usize,
        nbuf,
        transmitter_cmd: tx_args,
        receiver_cmd: rx_args,
        transmit: parse("transmitter", &tx_out.stdout, &tx_out.stderr)?,
        receive: parse("receiver", &rx_out.stdout, &rx_out.stderr)?,
    }))
}

/// A directory of this run's own for the FIFOs and Unix sockets of Table 3's local references,
/// removed with what it holds (only what this run made) when dropped.
struct WorkDir {
    dir: PathBuf,
    fifos: Vec<PathBuf>,
}

impl WorkDir {
    fn path() -> PathBuf {
        std::env::temp_dir().join(format!("wirespeed-ttcp-{}", std::process::id()))
    }

    fn fifo_path(dir: &Path, d: usize) -> PathBuf {
        dir.join(format!("pipe-{}", xplink::device_name(d as u8)))
    }

    fn socket_path(dir: &Path, d: usize) -> PathBuf {
        dir.join(format!("unix-{}", xplink::device_name(d as u8)))
    }

    fn new() -> Result<WorkDir> {
        let dir = WorkDir::path();
        std::fs::create_dir(&dir).map_err(|e| {
            Error::failed(format!(
                "cannot make {} for the pipe and unix references: {e} (a run of the same pid left it? remove it)",
                dir.display()
            ))
        })?;
        Ok(WorkDir { dir, fifos: Vec::new() })
    }

    /// The FIFOs of `k` streams, made the first time they are asked for.
    fn fifos(&mut self, k: usize) -> Result<Vec<PathBuf>> {
        while self.fifos.len() < k {
            let p = WorkDir::fifo_path(&self.dir, self.fifos.len());
            wirespeed::sys::fifo::make_fifo(&p, 0o600)
                .map_err(|e| Error::failed(format!("cannot make the FIFO {}: {e}", p.display())))?;
            self.fifos.push(p);
        }
        Ok(self.fifos[..k].to_vec())
    }

    /// Where the receiver binds the Unix sockets of `k` streams (it removes them itself).
    fn sockets(&self, k: usize) -> Vec<PathBuf> {
        (0..k).map(|d| WorkDir::socket_path(&self.dir, d)).collect()
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        for p in &self.fifos {
            let _ = std::fs::remove_file(p);
        }
        // Fails, and leaves it, if something not made here is inside.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Device `d` to partition `remote` as a command run by `partition exec` in the other
/// partition sees it (`/hw/xplink/raw/<remote>/<nn>`).
pub fn exec_device_path(remote: u32, d: u8) -> PathBuf {
    Path::new(xplink::EXEC_PATH).join("raw").join(xplink::remote_name(remote)).join(xplink::device_name(d))
}

/// How long the devices may take to appear after the partitions are made (their daemons serve
/// them once the pair is activated).
const DEVICES_APPEAR: Duration = Duration::from_secs(10);

/// Wait until devices 00..k-1 exist on both sides of the pair (seen from the host), or say
/// which one is missing.
fn await_devices(place: &Place, k: usize) -> Result<()> {
    let Some(prefix) = place.prefix() else { return Err(devices_need_partitions()) };
    let (a, b) = (Side::Send.partition(), Side::Recv.partition());
    let t = Instant::now();
    loop {
        let missing = (0..k as u8)
            .flat_map(|d| [xplink::device_path(prefix, a, b, d), xplink::device_path(prefix, b, a, d)])
            .find(|p| !p.exists());
        match missing {
            None => return Ok(()),
            Some(p) if t.elapsed() >= DEVICES_APPEAR => {
                return Err(Error::failed(format!(
                    "the raw devices are not there: {} does not exist {} s after partitions '{prefix}' were made (their daemons serve them once the pair is active)",
                    p.display(),
                    DEVICES_APPEAR.as_secs()
                )))
            }
            Some(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// The paths each end of a raw transport opens for `k` streams: (transmitter's, receiver's).
fn raw_paths(over: Over, k: usize, work: &mut Option<WorkDir>) -> Result<(RawKind, Vec<PathBuf>, Vec<PathBuf>)> {
    let (a, b) = (Side::Send.partition(), Side::Recv.partition());
    if matches!(over, Over::Pipe | Over::Unix) && work.is_none() {
        *work = Some(WorkDir::new()?);
    }
    Ok(match (over, work.as_mut()) {
        (Over::Devices, _) => (
            RawKind::Path,
            (0..k as u8).map(|d| exec_device_path(b, d)).collect(),
            (0..k as u8).map(|d| exec_device_path(a, d)).collect(),
        ),
        (Over::Pipe, Some(w)) => {
            let f = w.fifos(k)?;
            (RawKind::Path, f.clone(), f)
        }
        (Over::Unix, Some(w)) => {
            let s = w.sockets(k);
            (RawKind::Unix, s.clone(), s)
        }
        _ => return Err(Error::failed("tcp is not a raw transport")),
    })
}

/// One raw `wirespeed ttcp` command line for `role`.
fn raw_argv(role: Role, kind: RawKind, paths: &[PathBuf], buflen: &str, nbuf: &str, cpu: Option<usize>) -> Vec<String> {
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let mut v: Vec<String> = vec![
        "ttcp".into(),
        if role == Role::Transmit { "-t" } else { "-r" }.into(),
        kind.option().into(),
        shown.join(","),
        "-l".into(),
        buflen.into(),
        "-n".into(),
        nbuf.into(),
    ];
    if let Some(c) = cpu {
        v.extend(["--cpu".into(), c.to_string()]);
    }
    v.push("--json".into());
    v
}

/// A raw receiver that has not finished this long after its transmitter did is stopped.
const RAW_DRAIN: Duration = Duration::from_secs(30);

/// Run one raw receiver/transmitter pair over `paths`; `None` when a stop request cut it short.
#[allow(clippy::too_many_arguments)]
fn run_raw_pair(
    place: &Place,
    over: Over,
    kind: RawKind,
    tx_paths: &[PathBuf],
    rx_paths: &[PathBuf],
    buflen: u64,
    nbuf: u64,
    stop: &AtomicBool,
) -> Result<Option<RawRow>> {
    let (l, n) = (buflen.to_string(), nbuf.to_string());
    let rx_args = raw_argv(Role::Receive, kind, rx_paths, &l, &n, place.pin(Side::Recv));
    let mut rx = Proc::spawn_listener(place.command(Side::Recv, &rx_args), "the ttcp receiver")?;
    if let Err(said) = rx.listening(None) {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        return Err(Error::failed(format!("the {} ttcp receiver did not start: {}", over.name(), last_line(&said))));
    }
    let tx_args = raw_argv(Role::Transmit, kind, tx_paths, &l, &n, place.pin(Side::Send));
    let tx_out = Proc::spawn(place.command(Side::Send, &tx_args), "the ttcp transmitter")
        .and_then(|tx| tx.wait(Wait::new().stop(stop).kill_after(KILL_AFTER)));
    if !matches!(&tx_out, Ok(e) if e.status.success()) {
        // A receiver blocked opening a FIFO no transmitter will open would wait for ever.
        rx.terminate();
    }
    let rx_out = rx.wait(Wait::new().stop(stop).limit(RAW_DRAIN).kill_after(KILL_AFTER))?;
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let tx_out = tx_out?;
    if !tx_out.status.success() && !rx_out.status.success() && tx_out.stderr.contains("the reader went away") {
        // The receiver gave up first (a failed check, a short stream): its reason is the one.
        return Err(Error::failed(format!("the {} ttcp receiver failed: {}", over.name(), last_line(&rx_out.stderr))));
    }
    if !tx_out.status.success() {
        return Err(Error::failed(format!(
            "the {} ttcp transmitter failed: {}",
            over.name(),
            last_line(&tx_out.stderr)
        )));
    }
    if rx_out.timed_out {
        return Err(Error::failed(format!(
            "the {} ttcp receiver had not finished {} s after its transmitter (-l {buflen}): stopped; it said: {}",
            over.name(),
            RAW_DRAIN.as_secs(),
            last_line(&rx_out.stderr)
        )));
    }
    if !rx_out.status.success() {
        return Err(Error::failed(format!("the {} ttcp receiver failed: {}", over.name(), last_line(&rx_out.stderr))));
    }
    let parse = |who: &str, out: &str, err: &str| {
        serde_json::from_str::<RawReport>(out).map_err(|e| {
            Error::failed(format!("the {} ttcp {who} printed no report ({e}): {}", over.name(), last_line(err)))
        })
    };
    let t = parse("transmitter", &tx_out.stdout, &tx_out.stderr)?;
    let r = parse("receiver", &rx_out.stdout, &rx_out.stderr)?;
    Ok(Some(RawRow::new(over, tx_args, rx_args, t, r)))
}

/// The "Receiver Command / Sender Command" rows the seed printed above each table.
fn command_rows(place: &Place, spec: &Spec) -> [String; 2] {
    let show = |v: Vec<String>, side: Side| {
        let inside =
            if place.is_partitions() { format!("   (in partition {})", side.partition()) } else { String::new() };
        format!("wirespeed {}{inside}", v.join(" "))
    };
    let addr = place.ip(Side::Recv).to_string();
    [
        show(ttcp_argv(Role::Receive, spec, "0", &addr, place.pin(Side::Recv)), Side::Recv),
        show(ttcp_argv(Role::Transmit, spec, "<receiver's port>", &addr, place.pin(Side::Send)), Side::Send),
    ]
}

/// What a table set produced.
pub struct TtcpBench {
    /// The tables as text (what the command prints and `ttcp.txt` holds).
    pub text: String,
    /// The tables as CSV (`ttcp.csv`).
    pub csv: String,
    /// The [`SCHEMA`] document (`--json`, `ttcp.json`).
    pub doc: serde_json::Value,
    /// Pairs measured.
    pub done: usize,
    /// Pairs planned; fewer done means a stop request cut the set short.
    pub planned: usize,
}

/// Run the whole table set in `place`: Tables 4/5 (each buffer size, then the default), then
/// Table 3. Each measured pair is reported to `progress` as one line. A stop request ends the
/// set after the pairs measured so far, which are still returned (`done < planned`).
pub fn run(
    cfg: &TtcpBenchConfig,
    place: &Place,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&str),
) -> Result<TtcpBench> {
    let protos = cfg.protos();
    let mut over = cfg.over(place);
    cfg.check_place(place)?;
    #[derive(Clone, Copy)]
    enum Step {
        Sockbuf(Proto, Option<u64>),
        T3(Over, usize),
    }
    let mut plan: Vec<Step> = Vec::new();
    for &p in &protos {
        for &b in &cfg.buffers {
            plan.push(Step::Sockbuf(p, Some(b)));
        }
        plan.push(Step::Sockbuf(p, None));
    }
    if cfg.table3 && over.contains(&Over::Devices) {
        if let Err(e) = await_devices(place, cfg.streams) {
            if cfg.over.contains(&Over::Devices) {
                return Err(e);
            }
            // Only the default asked for them: the other columns still stand.
            progress(&format!("bench ttcp: Table 3 without its devices column: {e}"));
            over.retain(|o| *o != Over::Devices);
        }
    }
    if cfg.table3 {
        // Size by size, every transport at each, so a machine that gets busier part way
        // through weighs on all columns alike.
        for &s in &TABLE3_SIZES {
            for &o in &over {
                plan.push(Step::T3(o, s));
            }
        }
    }
    let (mut rows, mut t3, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    let mut work: Option<WorkDir> = None;
    let mut done = 0;
    for (i, &step) in plan.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let line = match step {
            Step::T3(o, s) if o != Over::Tcp => {
                let (kind, txp, rxp) = raw_paths(o, cfg.streams, &mut work)?;
                let Some(row) = run_raw_pair(place, o, kind, &txp, &rxp, s as u64, cfg.writes, stop)? else { break };
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let each = if row.streams > 1 {
                    let v: Vec<String> = row.stream_mb_per_s.iter().map(|m| format!("{m:.1}")).collect();
                    format!(" ({} streams: {})", row.streams, v.join(", "))
                } else {
                    String::new()
                };
                let line = format!(
                    "table 3, {}, -l {s}: {:.1} MB/s{each}, {} reads ({} short)",
                    o.name(),
                    row.mb_per_s,
                    row.receive.calls,
                    row.receive.short_calls
                );
                raw.push(row);
                line
            }
            _ => {
                let (p, b, l, n, what) = match step {
                    Step::Sockbuf(p, b) => (
                        p,
                        b,
                        cfg.buflen,
                        cfg.nbuf,
                        format!("{} -b {}", p.name(), b.map(|b| b.to_string()).unwrap_or_else(|| "default".into())),
                    ),
                    Step::T3(_, s) => (Proto::Tcp, None, s as u64, cfg.writes, format!("table 3, tcp, -l {s}")),
                };
                let Some(row) = run_pair(place, p, b, l, n, stop)? else { break };
                if stop.load(Ordering::Relaxed) {
                    // Cut short by the signal: not a measurement.
                    break;
                }
                let dropped = row.receive.dropped_pct.map(|d| format!(", {d:.2} % dropped")).unwrap_or_default();
                let line = format!(
                    "{what}: transmit {:.1} MB/s, receive {:.1} MB/s{dropped}",
                    row.transmit.mb_per_s, row.receive.mb_per_s
                );
                if matches!(step, Step::T3(..)) {
                    t3.push(row);
                } else {
                    rows.push(row);
                }
                line
            }
        };
        done += 1;
        progress(&format!("bench ttcp [{}/{}] {line}", i + 1, plan.len()));
    }
    drop(work);
    let description = description(place);
    let (l, n) = (cfg.buflen.to_string(), cfg.nbuf.to_string());
    let mut text = format!("wirespeed bench ttcp {description}\n");
    if !protos.is_empty() {
        text.push_str(&format!(
            "Tables 4 and 5: -l {} -n {}, {} bytes per run\n",
            cfg.buflen,
            cfg.nbuf,
            units::thousands(cfg.buflen.saturating_mul(cfg.nbuf))
        ));
    }
    let mut commands = serde_json::Map::new();
    for &p in &protos {
        let [r, s] =
            command_rows(place, &Spec { proto: p, buflen: &l, sockbuf: Some("<socket buffer size>"), nbuf: &n });
        text.push_str(&format!("\nReceiver Command   {r}\nSender Command     {s}\n\n"));
        text.push_str(&ttcp::sockbuf_table(p, &rows));
        commands.insert(p.name().into(), serde_json::json!({"receiver": r, "sender": s}));
    }
    let mut table3_rows = Vec::new();
    if cfg.table3 {
        let writes = cfg.writes.to_string();
        let mut t3_commands = serde_json::Map::new();
        text.push('\n');
        for &o in &over {
            let [r, s] = if o == Over::Tcp {
                command_rows(place, &Spec { proto: Proto::Tcp, buflen: "<size>", sockbuf: None, nbuf: &writes })
            } else {
                raw_command_rows(place, o, cfg.streams, &writes)
            };
            text.push_str(&format!("{:<8} Receiver Command   {r}\n{:<8} Sender Command     {s}\n", o.name(), ""));
            t3_commands.insert(o.name().into(), serde_json::json!({"receiver": r, "sender": s}));
        }
        text.push('\n');
        text.push_str(&ttcp::table3(&TABLE3_SIZES, &over, &raw, &t3, cfg.streams));
        let raw_names: Vec<&str> = over.iter().filter(|o| **o != Over::Tcp).map(|o| o.name()).collect();
        if !raw_names.is_empty() {
            let streams = if cfg.streams > 1 {
                format!(
                    ", {} streams at once (devices 00..{}) and their aggregate",
                    cfg.streams,
                    crate::testbed::xplink::device_name(cfg.streams as u8 - 1)
                )
            } else {
                String::new()
            };
            text.push_str(&format!(
                "MB/s ({}) = bytes received / the time from the first byte written to the last byte read{streams}; {} writes of each size, buffers {}-byte aligned, every byte checked\n",
                raw_names.join(", "),
                cfg.writes,
                ttcp::ALIGN
            ));
        }
        if over.contains(&Over::Tcp) {
            text.push_str(&format!(
                "MB/s (tcp) = bytes received / the receiver's wall-clock time (accept to end of stream); {} writes of each size, default socket buffers\n",
                cfg.writes
            ));
        }
        if over.contains(&Over::Pipe) {
            text.push_str("pipe: Linux's default 64 KiB pipe capacity, so writes above it go through in pieces (the short reads in the JSON)\n");
        }
        text.push_str(
            "seed = seed 000's own Table 3: one raw device between the two partitions of an Origin 2000 (195 MHz)\n",
        );
        if cfg.streams > 1 {
            text.push_str("Per stream MB/s:\n");
            for r in &raw {
                let v: Vec<String> = r.stream_mb_per_s.iter().map(|m| format!("{m:.1}")).collect();
                text.push_str(&format!("  {:<8}{:>9}  {}\n", r.over.name(), r.buflen, v.join(" ")));
            }
        }
        for &size in &TABLE3_SIZES {
            let mut row = serde_json::Map::new();
            row.insert("buflen".into(), size.into());
            row.insert("seed_mb_s".into(), ttcp::seed_table3(size).into());
            for &o in &over {
                let v = match o {
                    Over::Tcp => t3.iter().find(|r| r.buflen == size).map(|r| r.receive.mb_per_s),
                    _ => raw.iter().find(|r| r.over == o && r.buflen == size).map(|r| r.mb_per_s),
                };
                row.insert(o.name().into(), v.into());
            }
            table3_rows.push(serde_json::Value::Object(row));
        }
        commands.insert("table3".into(), serde_json::Value::Object(t3_commands));
    }
    let by = |p: Proto| rows.iter().filter(|r| r.proto == p).collect::<Vec<_>>();
    let doc = serde_json::json!({
        "schema": SCHEMA,
        "where": place.kind(),
        "description": description,
        "buflen": cfg.buflen,
        "nbuf": cfg.nbuf,
        "writes": cfg.writes,
        "commands": commands,
        "tcp": by(Proto::Tcp),
        "udp": by(Proto::Udp),
        "table3": t3,
        "table3_over": over.iter().map(|o| o.name()).collect::<Vec<_>>(),
        "table3_streams": cfg.streams,
        "table3_raw": raw,
        "table3_rows": table3_rows,
        "stopped": done < plan.len(),
    });
    let mut csv = ttcp::csv(&t3, &rows);
    for r in &raw {
        csv.push_str(&format!(
            "3,{},,{},{},{:.3},{:.3},,{},{},,,{:.1},{:.1},,\n",
            r.over.name(),
            r.buflen,
            r.nbuf,
            r.transmit.mb_per_s,
            r.mb_per_s,
            r.transmit.bytes,
            r.receive.bytes,
            pct(r.transmit.cpu_s, r.transmit.real_s),
            pct(r.receive.cpu_s, r.real_s),
        ));
    }
    Ok(TtcpBench { text, csv, doc, done, planned: plan.len() })
}

fn pct(cpu_s: f64, real_s: f64) -> f64 {
    if real_s > 0.0 {
        100.0 * cpu_s / real_s
    } else {
        0.0
    }
}

/// Table 3's command rows for a raw transport, `<size>` in place of -l.
fn raw_command_rows(place: &Place, over: Over, k: usize, writes: &str) -> [String; 2] {
    let (a, b) = (Side::Send.partition(), Side::Recv.partition());
    let (kind, txp, rxp): (RawKind, Vec<PathBuf>, Vec<PathBuf>) = match over {
        Over::Devices => (
            RawKind::Path,
            (0..k as u8).map(|d| exec_device_path(b, d)).collect(),
            (0..k as u8).map(|d| exec_device_path(a, d)).collect(),
        ),
        Over::Pipe => {
            let f = (0..k).map(|d| WorkDir::fifo_path(&WorkDir::path(), d)).collect::<Vec<_>>();
            (RawKind::Path, f.clone(), f)
        }
        _ => {
            let f = (0..k).map(|d| WorkDir::socket_path(&WorkDir::path(), d)).collect::<Vec<_>>();
            (RawKind::Unix, f.clone(), f)
        }
    };
    let show = |v: Vec<String>, side: Side| {
        let inside =
            if place.is_partitions() { format!("   (in partition {})", side.partition()) } else { String::new() };
        format!("wirespeed {}{inside}", v.join(" "))
    };
    [
        show(raw_argv(Role::Receive, kind, &rxp, "<size>", writes, place.pin(Side::Recv)), Side::Recv),
        show(raw_argv(Role::Transmit, kind, &txp, "<size>", writes, place.pin(Side::Send)), Side::Send),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed::Kind;

    #[test]
    fn the_command_lines_are_the_seeds() {
        let spec = Spec { proto: Proto::Udp, buflen: "49152", sockbuf: Some("1M"), nbuf: "20000" };
        assert_eq!(
            ttcp_argv(Role::Transmit, &spec, "5001", "127.0.0.1", Some(0)).join(" "),
            "ttcp -u -t -s -l49152 -b 1M -n 20000 -p 5001 --cpu 0 --json 127.0.0.1"
        );
        let place = Place::loopback_on(Some(0), Some(1)).expect("place");
        let [r, s] = command_rows(&place, &spec);
        assert_eq!(r, "wirespeed ttcp -u -r -s -l49152 -b 1M -n 20000 -p 0 --bind 127.0.0.1 --cpu 1 --json");
        assert_eq!(s, "wirespeed ttcp -u -t -s -l49152 -b 1M -n 20000 -p <receiver's port> --cpu 0 --json 127.0.0.1");
        assert_eq!(description(&place), "over loopback, transmitter on CPU 0, receiver on CPU 1");
    }

    #[test]
    fn the_devices_are_the_seeds_paths() {
        assert_eq!(exec_device_path(2, 0), Path::new("/hw/xplink/raw/02/00"));
        assert_eq!(exec_device_path(1, 15), Path::new("/hw/xplink/raw/01/0f"));
        let place = Place::loopback_on(None, None).expect("place");
        let [r, s] = raw_command_rows(&place, Over::Devices, 2, "1000");
        assert_eq!(r, "wirespeed ttcp -r --device /hw/xplink/raw/01/00,/hw/xplink/raw/01/01 -l <size> -n 1000 --json");
        assert_eq!(s, "wirespeed ttcp -t --device /hw/xplink/raw/02/00,/hw/xplink/raw/02/01 -l <size> -n 1000 --json");
        let [r, _] = raw_command_rows(&place, Over::Unix, 1, "20");
        assert!(r.starts_with("wirespeed ttcp -r --unix /") && r.ends_with("/unix-00 -l <size> -n 20 --json"), "{r}");
    }

    #[test]
    fn the_default_columns_follow_the_place() {
        let cfg = TtcpBenchConfig {
            protos: vec![],
            buffers: vec![],
            buflen: 49152,
            nbuf: 10,
            table3: true,
            writes: 1000,
            loopback: true,
            over: vec![],
            streams: 1,
        };
        let place = Place::loopback_on(None, None).expect("place");
        assert_eq!(cfg.over(&place), [Over::Pipe, Over::Unix, Over::Tcp]);
        let four = TtcpBenchConfig { streams: 4, ..cfg.clone() };
        assert_eq!(four.over(&place), [Over::Pipe, Over::Unix], "tcp has one stream");
        let asked = TtcpBenchConfig { over: vec![Over::Unix, Over::Pipe, Over::Unix], ..cfg.clone() };
        assert_eq!(asked.over(&place), [Over::Pipe, Over::Unix], "column order, no repeats");
        let dev = TtcpBenchConfig { over: vec![Over::Devices], loopback: false, ..cfg };
        assert!(dev.validate().is_ok());
        assert!(
            matches!(dev.check_place(&place), Err(e) if e.kind() == Kind::Invalid && e.to_string().contains("needs partitions"))
        );
    }

    #[test]
    fn nothing_to_run_is_a_usage_error() {
        let cfg = TtcpBenchConfig {
            protos: vec![],
            buffers: vec![1 << 20],
            buflen: 49152,
            nbuf: 10,
            table3: false,
            writes: 1000,
            loopback: true,
            over: vec![],
            streams: 1,
        };
        assert!(matches!(cfg.validate(), Err(e) if e.kind() == Kind::Invalid));
        let cfg = TtcpBenchConfig { protos: vec![Proto::Tcp, Proto::Tcp], buffers: vec![0], ..cfg };
        assert!(matches!(cfg.validate(), Err(e) if e.kind() == Kind::Invalid));
        assert_eq!(cfg.protos(), [Proto::Tcp]);
    }
}
