//! `wirespeed station`: a persistent recorder driven over VSI-S, as a VLBI station's Field
//! System drives jive5ab.
//!
//! The RAM ring is made ready (every page faulted in and locked) once, at start; each scan is
//! then recorded into it on `record=on:SCAN` and scattered over the mount points of
//! `set_disks=` in the FlexBuff or Mark6 layout ([`crate::spool::scatter`]). `record=on` is
//! answered once the data socket is open with the ring behind it (every datagram from then on is
//! read: first to learn the stream's layout, kept, then by the capture thread), so a stream
//! from that moment loses nothing, not even its first datagram. A bad command gets its return
//! code and nothing else; a stray or short datagram is counted invalid and never ends a scan
//! (both end a jive5ab recording).
//!
//! Threads: the caller's thread records (one scan at a time, taking requests from the control
//! side); one thread accepts control connections and one serves each connection. The control
//! side takes locks (settings, the error queue); the capture and writer threads never do: the
//! scan's counters reach `evlbi?` and `record?` through the recorder's progress samples.

pub mod vsis;

use crate::addr::Cidr;
use crate::error::{Error, Result};
use crate::record::{self, RecordConfig, RingPair, ScanTarget};
use crate::rx::{Listener, RecvConfig};
use crate::spool::scan::{self, ScanLayout};
use crate::spool::scatter::Say;
use crate::spool::FileFormat;
use crate::sys;
use crate::units;
use serde::Serialize;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
pub use vsis::{Engine, Live, Settings};

/// Schema of `station --json` (written when the station stops).
pub const STATION_SCHEMA: &str = "wirespeed.station/1";
/// The VSI-S port jive5ab listens on, and so the Field System's default.
pub const DEFAULT_CONTROL_PORT: u16 = 2620;
/// Most control connections served at once.
pub const MAX_CLIENTS: usize = 16;
/// Most bytes a control client may send without ending a command.
const MAX_PENDING: usize = 64 << 10;
/// Longest `record=on` waits for the recorder to be free (the scan before still draining).
const START_WAIT: Duration = Duration::from_secs(60);

/// How the station runs.
#[derive(Clone)]
pub struct StationConfig {
    /// Where VSI-S is served.
    pub control: SocketAddr,
    /// Client networks allowed; empty: loopback clients only.
    pub allow: Vec<Cidr>,
    /// RAM ring, bytes.
    pub buffer: usize,
    /// Bytes per disk write.
    pub block: usize,
    /// O_DIRECT where the disks allow it.
    pub direct: bool,
    /// Where the settings start (`--disks`, `--mode`, `--port`...), before any VSI-S command.
    pub settings: Settings,
    /// Accept `set_disks=` directories on the root file system (jive5ab refuses them).
    pub allow_root_fs: bool,
    /// Pin the capture thread to this CPU.
    pub cpu: Option<usize>,
    /// Pin the writer threads to this CPU.
    pub writer_cpu: Option<usize>,
    /// Told what happens (scans starting and ending, disks dropped, clients), one line each.
    pub say: Say,
    /// Given to each scan's capture (a metrics exporter's board), if any.
    pub show: Option<Arc<dyn crate::rx::ShowCapture>>,
    /// Given each scan's rings and writers (a metrics exporter's board), if any.
    pub show_rings: Option<Arc<dyn record::ShowRings>>,
}

/// One scan as the station recorded it.
#[derive(Clone, Debug, Serialize)]
pub struct ScanSummary {
    /// Its number since start-up, from 1.
    pub number: u64,
    /// Its name.
    pub name: String,
    /// flexbuff or mark6.
    pub layout: ScanLayout,
    /// The mount points it was written to.
    pub disks: Vec<String>,
    /// Datagrams received (the capture's ledger).
    pub received: u64,
    /// Lost, from the frames' own sequence numbers.
    pub lost: u64,
    /// Invalid datagrams (stray, short), counted and not written.
    pub invalid: u64,
    /// Records and bytes on disk.
    pub records: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Chunks or blocks written.
    pub pieces: u64,
    /// Disks dropped and other remarks.
    pub notes: Vec<String>,
    /// What stopped writing, if something did.
    pub error: Option<String>,
    /// Seconds from the `record=on` request to the data socket open and drained.
    pub start_s: f64,
}

/// What the station did, when it stops.
#[derive(Clone, Debug, Serialize)]
pub struct StationReport {
    /// Schema name and version.
    pub schema: &'static str,
    /// Where VSI-S was served.
    pub control: String,
    /// The ring, bytes.
    pub ring_bytes: u64,
    /// Seconds making the ring ready, once, at start.
    pub ring_ready_s: f64,
    /// The scans, in order.
    pub scans: Vec<ScanSummary>,
}

/// A request to the recording thread: a scan to start, answered through `reply`, unless the
/// client gave up waiting first (`cancel`): then nothing starts.
enum Request {
    Start {
        scan: String,
        settings: Box<Settings>,
        reply: mpsc::Sender<std::result::Result<String, (u8, String)>>,
        cancel: Arc<AtomicBool>,
    },
}

/// The recorder's state, as the control side sees it: one scan at a time, from `record=on`
/// (starting) to the scan being written (recording) to its last chunks reaching the disks
/// after `record=off` (draining).
const IDLE: u8 = 0;
const STARTING: u8 = 1;
const RECORDING: u8 = 2;
const DRAINING: u8 = 3;

/// What the control side and the recording thread share.
struct Core {
    settings: Mutex<Settings>,
    requests: Mutex<mpsc::Sender<Request>>,
    /// The scan being recorded: number and name (None: idle).
    current: Mutex<Option<(u64, String)>>,
    scan_stop: Mutex<Option<Arc<AtomicBool>>>,
    /// IDLE, STARTING, RECORDING or DRAINING.
    state: std::sync::atomic::AtomicU8,
    /// `record=off` (or a signal) came while the scan was still starting: it stops at once.
    off_asked: AtomicBool,
    /// The counters of the scan being recorded (or the last one), from its progress samples.
    total: AtomicU64,
    lost: AtomicU64,
    late: AtomicU64,
    invalid: AtomicU64,
    bytes: AtomicU64,
    errors: Mutex<VecDeque<(String, String)>>,
    scans: Mutex<Vec<String>>,
    allow_root_fs: bool,
    started_ns: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Core {
    fn push_error(&self, msg: String) {
        let mut q = lock(&self.errors);
        if q.len() >= 64 {
            q.pop_front();
        }
        q.push_back((msg, vex_time(sys::realtime_ns())));
    }
}

impl Engine for Core {
    fn record_on(&self, scan: &str, settings: &Settings) -> std::result::Result<String, (u8, String)> {
        // One scan at a time: claim the recorder, waiting for the scan before to finish draining
        // (a Field System sends record=off; record=on:next back to back).
        let deadline = sys::monotonic_ns() + START_WAIT.as_nanos() as u64;
        loop {
            match self.state.compare_exchange(IDLE, STARTING, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(DRAINING) if sys::monotonic_ns() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Err(DRAINING) => {
                    return Err((
                        vsis::RC_CONFLICT,
                        "the scan before is still being written to the disks: try again".into(),
                    ))
                }
                Err(_) => return Err((vsis::RC_CONFLICT, "Already doing vbsrecord".into())),
            }
        }
        self.off_asked.store(false, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let req = Request::Start {
            scan: scan.to_string(),
            settings: Box::new(settings.clone()),
            reply: tx,
            cancel: cancel.clone(),
        };
        if lock(&self.requests).send(req).is_err() {
            self.state.store(IDLE, Ordering::Release);
            return Err((vsis::RC_ERROR, "the recorder has stopped".into()));
        }
        match rx.recv_timeout(START_WAIT) {
            Ok(r) => r,
            Err(_) => {
                // Given up: the recorder sees the flag and starts nothing (or stops at once).
                cancel.store(true, Ordering::Relaxed);
                self.off_asked.store(true, Ordering::Relaxed);
                Err((vsis::RC_CONFLICT, "the recorder did not start the scan in time: try again".into()))
            }
        }
    }

    fn record_off(&self) -> bool {
        match self.state.load(Ordering::Acquire) {
            STARTING => {
                // Not yet recording: the scan stops as soon as it has started.
                self.off_asked.store(true, Ordering::Relaxed);
                if let Some(stop) = lock(&self.scan_stop).as_ref() {
                    stop.store(true, Ordering::Relaxed);
                }
                true
            }
            RECORDING => {
                if let Some(stop) = lock(&self.scan_stop).as_ref() {
                    stop.store(true, Ordering::Relaxed);
                }
                // record? says off from now on, as jive5ab's does; the scan's last chunks are
                // still being written (reply code 1: initiated).
                *lock(&self.current) = None;
                let _ = self.state.compare_exchange(RECORDING, DRAINING, Ordering::AcqRel, Ordering::Acquire);
                true
            }
            _ => false,
        }
    }

    fn live(&self) -> Live {
        Live {
            busy: matches!(self.state.load(Ordering::Acquire), STARTING | RECORDING),
            recording: lock(&self.current).clone(),
            bytes: self.bytes.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            error_pending: !lock(&self.errors).is_empty(),
        }
    }

    fn pop_error(&self) -> Option<(String, String)> {
        lock(&self.errors).pop_front()
    }

    fn scans(&self) -> Vec<String> {
        lock(&self.scans).clone()
    }

    fn scan_check(&self, name: &str, disks: &[PathBuf]) -> std::result::Result<Vec<String>, String> {
        // The scan just stopped is read once its last chunks are on the disks.
        let deadline = sys::monotonic_ns() + START_WAIT.as_nanos() as u64;
        while self.state.load(Ordering::Acquire) == DRAINING && sys::monotonic_ns() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let found = scan::find(name, disks).map_err(|e| e.to_string())?;
        scan_check_fields(&found).map_err(|e| e.to_string())
    }

    fn scan_bytes(&self, name: &str, disks: &[PathBuf]) -> Option<u64> {
        scan::find(name, disks).ok().map(|f| f.bytes())
    }

    fn version(&self) -> Vec<String> {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string();
        let (y, mo, d, h, mi, s) = crate::calendar::civil(self.started_ns / 1_000_000_000);
        const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
        vec![
            " wirespeed".into(),
            env!("CARGO_PKG_VERSION").into(),
            format!("{}bit", usize::BITS),
            "Release".into(),
            host,
            format!("{d:02}-{}-{y}", MONTHS[(mo as usize).clamp(1, 12) - 1]),
            format!("{h:02}h{mi:02}m{s:02}s"),
            "nossapi".into(),
            String::new(),
        ]
    }

    fn match_disks(&self, patterns: &[String]) -> Vec<PathBuf> {
        match_disks(patterns, self.allow_root_fs)
    }
}

/// The mount points `set_disks=` names: absolute paths and globs (`/mnt/disk*`), and jive5ab's
/// groups `flexbuff` (`/mnt/disk<N>`) and `mk6` (`/mnt/disks/<1-4>/<0-7>/data`). Only
/// directories that take files, and (unless `allow_root_fs`) not on the root file system: a
/// station never fills its system disk by a typing slip.
pub fn match_disks(patterns: &[String], allow_root_fs: bool) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let root_dev = std::fs::metadata("/").map(|m| m.dev()).ok();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in patterns.iter().filter(|p| !p.is_empty()) {
        let expanded: Vec<PathBuf> = match p.as_str() {
            "flexbuff" | "flexbuf" => scan::expand_mounts(&[PathBuf::from("/mnt/disk[0-9]*")]).unwrap_or_default(),
            "mk6" => scan::expand_mounts(&[PathBuf::from("/mnt/disks/[1-4]/[0-7]/data")]).unwrap_or_default(),
            "1" | "2" | "3" | "4" => {
                scan::expand_mounts(&[PathBuf::from(format!("/mnt/disks/{p}/[0-7]/data"))]).unwrap_or_default()
            }
            "null" => Vec::new(),
            _ if !p.starts_with('/') => Vec::new(),
            _ => scan::expand_mounts(&[PathBuf::from(p.trim_end_matches('/'))]).unwrap_or_default(),
        };
        for d in expanded {
            let Ok(md) = std::fs::metadata(&d) else { continue };
            if !md.is_dir() || (!allow_root_fs && Some(md.dev()) == root_dev) || out.contains(&d) {
                continue;
            }
            out.push(d);
        }
    }
    out
}

/// A time as VEX writes it, as jive5ab's replies do: `2026y332d21h51m48.9984s`.
pub fn vex_time(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (y, _, _, h, mi, s) = crate::calendar::civil(secs);
    let doy = secs / 86_400 - crate::calendar::days_from_civil(y, 1, 1) as u64 + 1;
    let frac = (unix_ns % 1_000_000_000) as f64 / 1e9;
    format!("{y}y{doy:03}d{h:02}h{mi:02}m{:07.4}s", s as f64 + frac)
}

/// `scan_check?`'s fields for a scan found on its disks, from its first and last frames:
/// `? : name : type : tracks : start : duration : Mbps per track : missing bytes : frame size`.
/// The missing bytes are the frames the scan's time span should hold and does not.
pub fn scan_check_fields(found: &scan::FoundScan) -> Result<Vec<String>> {
    let mut r = scan::ScanReader::new(found);
    let mut head = [0u8; 32];
    r.read_exact(&mut head).map_err(|e| Error::invalid(format!("scan {} holds no frame: {e}", found.scan)))?;
    let total = found.bytes();
    let unknown = |kind: &str, frame: usize| -> Vec<String> {
        vec![
            "?".into(),
            found.scan.clone(),
            kind.into(),
            "?".into(),
            "?".into(),
            "?".into(),
            "?".into(),
            "?".into(),
            frame.to_string(),
        ]
    };
    let h = match crate::wire::vdif::Header::new_checked(&head[..]) {
        Ok(h) if h.version() <= 1 && h.frame_len() >= 32 && !crate::wire::mark5b::starts_with_sync(&head) => h,
        _ if crate::wire::mark5b::starts_with_sync(&head) => {
            return Ok(unknown("mark5b", crate::wire::mark5b::FRAME_LEN))
        }
        _ => return Ok(unknown("?", 0)),
    };
    let frame = h.frame_len();
    let frames = total / frame as u64;
    // The frame rate: the sidecar's format says it; otherwise it is learned from the frames.
    let fps = found
        .sidecars
        .first()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice::<crate::spool::Sidecar>(&b).ok())
        .and_then(|s| crate::wire::learn::spec_key(&s.format, "fps").and_then(|v| v.parse::<u64>().ok()))
        .or_else(|| {
            crate::spool::verify::learn_scan_format(found)
                .ok()
                .and_then(|(f, _)| crate::wire::learn::spec_key(&f.spec(), "fps").and_then(|v| v.parse::<u64>().ok()))
        });
    let time_of = |h: &crate::wire::vdif::Header<&[u8]>, fps: u64| -> f64 {
        let base = crate::calendar::UNIX_2000 + crate::wire::vdif::epoch_start(h.epoch());
        (base + u64::from(h.seconds())) as f64 + h.frame() as f64 / fps as f64
    };
    let chans = 1u64 << h.log2_chans();
    let ntrack = chans * u64::from(h.bits_per_sample()) * if h.complex() { 2 } else { 1 };
    let Some(fps) = fps.filter(|&f| f > 0) else {
        let mut f = unknown("VDIF", frame);
        f[3] = ntrack.to_string();
        return Ok(f);
    };
    // The last frame: the scan's last whole frame (a last piece shorter than a frame, damaged
    // or cut short, leaves the span unknown).
    let mut last = vec![0u8; 32];
    let lp = found.pieces.last().expect("a scan with a frame has a piece");
    if lp.len < frame as u64 {
        let mut f = unknown("VDIF", frame);
        f[3] = ntrack.to_string();
        return Ok(f);
    }
    {
        use std::io::{Seek, SeekFrom};
        let mut f = std::fs::File::open(&lp.path).map_err(|e| Error::io(format!("{}: {e}", lp.path.display())))?;
        let at = lp.offset + lp.len - (lp.len % frame as u64) - frame as u64;
        f.seek(SeekFrom::Start(at))
            .and_then(|_| f.read_exact(&mut last))
            .map_err(|e| Error::io(format!("{}: {e}", lp.path.display())))?;
    }
    let t0 = time_of(&h, fps);
    let hl = crate::wire::vdif::Header::new_checked(&last[..])
        .map_err(|_| Error::invalid("the scan's last frame has no VDIF header"))?;
    let t1 = time_of(&hl, fps);
    let span = (((t1 - t0) * fps as f64).round().clamp(0.0, 1e15) as u64).saturating_add(1);
    let missing = span.saturating_sub(frames).saturating_mul(frame as u64);
    let rate = fps.saturating_mul(frame as u64 - 32).saturating_mul(8) / ntrack.max(1) / 1_000_000;
    let start_ns = (t0 * 1e9) as u64;
    Ok(vec![
        "?".into(),
        found.scan.clone(),
        "VDIF".into(),
        ntrack.to_string(),
        vex_time(start_ns),
        // From the first frame's time to the last's, as jive5ab gives it.
        format!("{}s", fmt6(span.saturating_sub(1) as f64 / fps as f64)),
        format!("{rate}Mbps"),
        missing.to_string(),
        frame.to_string(),
    ])
}

/// A number with six significant digits, as C++ streams print doubles.
fn fmt6(x: f64) -> String {
    let digits = if x == 0.0 { 0 } else { (x.abs().log10().floor() as i32 + 1).max(0) };
    let decimals = (6 - digits).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Whether `ip` is in one of the `allow` networks (or, with none given, a loopback address).
pub fn allowed(ip: IpAddr, allow: &[Cidr]) -> bool {
    if allow.is_empty() {
        return ip.to_canonical().is_loopback();
    }
    allow.iter().any(|c| c.contains(ip))
}

/// Run the station until `stop`: make the ring ready, serve VSI-S, record scans on command.
pub fn run(cfg: StationConfig, stop: &'static AtomicBool) -> Result<StationReport> {
    if !cfg.control.ip().is_loopback() && cfg.allow.is_empty() {
        return Err(Error::invalid(format!(
            "--control {} is reachable from other hosts: give --allow with the Field System's address (e.g. --allow 192.0.2.10/32)",
            cfg.control
        )));
    }
    let listener = TcpListener::bind(cfg.control).map_err(|e| {
        Error::usage_io(
            format!("cannot serve VSI-S on {}: {e} (is jive5ab or another station running?)", cfg.control),
            &e,
        )
    })?;
    let control = listener.local_addr().unwrap_or(cfg.control);
    // The ring, once: every page faulted in and locked before anything is served.
    let t = sys::monotonic_ns();
    let how = sys::Prefault { progress: None, stop: Some(stop) };
    let ring = sys::byte_ring_with(cfg.buffer, true, &how).map_err(|e| {
        Error::failed(format!(
            "cannot make a {} ring ready: {e}; use a smaller --buffer",
            units::bytes(cfg.buffer as u64)
        ))
    })?;
    let ring_ready_s = (sys::monotonic_ns() - t) as f64 / 1e9;
    (cfg.say)(&format!(
        "wirespeed station: {} ring ready in {ring_ready_s:.2} s ({}); VSI-S on {control}{}",
        units::bytes(ring.0.capacity()),
        if ring.0.locked() { "locked" } else { "not locked: raise `ulimit -l`" },
        if cfg.allow.is_empty() {
            " (loopback clients)".to_string()
        } else {
            format!(" (clients from {} network(s))", cfg.allow.len())
        }
    ));
    let (tx, rx) = mpsc::channel();
    let core = Arc::new(Core {
        settings: Mutex::new(cfg.settings.clone()),
        requests: Mutex::new(tx),
        current: Mutex::new(None),
        scan_stop: Mutex::new(None),
        state: std::sync::atomic::AtomicU8::new(IDLE),
        off_asked: AtomicBool::new(false),
        total: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        late: AtomicU64::new(0),
        invalid: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        errors: Mutex::new(VecDeque::new()),
        scans: Mutex::new(Vec::new()),
        allow_root_fs: cfg.allow_root_fs,
        started_ns: sys::realtime_ns(),
    });
    let server = {
        let core = core.clone();
        let allow = cfg.allow.clone();
        let say = cfg.say.clone();
        std::thread::Builder::new()
            .name("ws-vsis".into())
            .spawn(move || serve(listener, core, allow, say, stop))
            .map_err(|e| Error::failed(format!("cannot start the control thread: {e}")))?
    };
    // A signal ends the scan being recorded as record=off does, then the station: checked
    // until the recording thread is done, so a scan still starting when it came stops too.
    let finished = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (core, finished) = (core.clone(), finished.clone());
        std::thread::Builder::new()
            .name("ws-station-stop".into())
            .spawn(move || {
                while !finished.load(Ordering::Relaxed) {
                    if stop.load(Ordering::Relaxed) {
                        core.off_asked.store(true, Ordering::Relaxed);
                        if let Some(s) = lock(&core.scan_stop).as_ref() {
                            s.store(true, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
            .map_err(|e| Error::failed(format!("cannot start a thread: {e}")))?
    };
    let mut rings = Some(vec![ring]);
    let mut scans = Vec::new();
    let ring_bytes = cfg.buffer as u64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(req) = rx.recv_timeout(Duration::from_millis(100)) else { continue };
        let Request::Start { scan, settings, reply, cancel } = req;
        let number = scans.len() as u64 + 1;
        let summary = if cancel.load(Ordering::Relaxed) {
            None // the client gave up before the recorder was free: nothing starts
        } else {
            record_scan(&cfg, &core, &mut rings, number, &scan, &settings, reply, &cancel)
        };
        *lock(&core.current) = None;
        *lock(&core.scan_stop) = None;
        core.state.store(IDLE, Ordering::Release);
        if let Some(s) = summary {
            scans.push(s);
        }
    }
    // No more scans: a client still waiting on record=on is told so at once.
    drop(rx);
    finished.store(true, Ordering::Relaxed);
    let _ = server.join();
    let _ = watcher.join();
    Ok(StationReport { schema: STATION_SCHEMA, control: control.to_string(), ring_bytes, ring_ready_s, scans })
}

/// Record one scan; answer the `record=on` through `reply` as soon as the socket is drained.
#[allow(clippy::too_many_arguments)]
fn record_scan(
    cfg: &StationConfig,
    core: &Core,
    rings: &mut Option<Vec<RingPair>>,
    number: u64,
    asked: &str,
    s: &Settings,
    reply: mpsc::Sender<std::result::Result<String, (u8, String)>>,
    cancel: &AtomicBool,
) -> Option<ScanSummary> {
    let t_req = sys::monotonic_ns();
    let refuse = |rc: u8, msg: String| {
        let _ = reply.send(Err((rc, msg)));
        None
    };
    let Some(mode) = s.mode.as_ref() else { return refuse(vsis::RC_CONFLICT, "no mode set".into()) };
    // A disk that takes no files (read-only, gone, full) is left out of this scan with a line
    // and an error for `error?`; the scan goes to the others.
    let mut s = s.clone();
    s.disks.retain(|d| match record::check_dir(d) {
        Ok(()) => true,
        Err(e) => {
            let line = format!("scan {asked}: leaving out disk {}: {e}", d.display());
            (cfg.say)(&format!("wirespeed station: {line}"));
            core.push_error(line);
            false
        }
    });
    if s.disks.is_empty() {
        return refuse(vsis::RC_ERROR, "no disk of set_disks= takes files (see error?)".into());
    }
    let s = &s;
    // A name already on the disks gets a letter, as jive5ab gives it: scan, scana, scanb...
    let name = match free_name(asked, &s.disks) {
        Some(n) => n,
        None => return refuse(vsis::RC_CONFLICT, format!("scan {asked} and {asked}a..{asked}z exist already")),
    };
    let family = match (mode.family.as_str(), s.protocol) {
        ("vdif", vsis::Protocol::Udps | vsis::Protocol::Udpsnor) => "vtp".to_string(),
        (f, _) => f.to_string(),
    };
    let learnable = crate::rx::learn::LEARNABLE.contains(&family.as_str());
    let fmt = match crate::wire::spec::parse(&family) {
        Ok(f) => f,
        Err(e) => return refuse(vsis::RC_PARAMETER, format!("mode {}: {e}", mode.text)),
    };
    let listen = SocketAddr::new(s.ip.unwrap_or(IpAddr::from([0u8; 16])), s.port);
    let mut rcfg = RecvConfig::new(listen);
    // net_protocol='s socket buffer is a floor: the recorder's own default is larger, and a
    // scan whose layout is learned from its first datagrams needs the room meanwhile.
    rcfg.rcvbuf = usize::try_from(s.socbuf).unwrap_or(usize::MAX).max(crate::rx::RECORD_DEFAULT_RCVBUF);
    rcfg.cpu = cfg.cpu;
    rcfg.show = cfg.show.clone();
    let scan_stop = Arc::new(AtomicBool::new(false));
    let mut rcfg_rec = RecordConfig {
        dir: s.disks.first().cloned().unwrap_or_default(),
        prefix: "wirespeed".into(),
        file_format: FileFormat::Raw,
        null_sink: false,
        buffer: cfg.buffer,
        chunk: cfg.block,
        rotation: Default::default(),
        direct: cfg.direct,
        flush_after: Duration::from_secs(1),
        writer_cpu: cfg.writer_cpu,
        keep_invalid: false,
        interval_json: true,
        share: None,
        learn: learnable.then(|| family.clone()),
        show_rings: cfg.show_rings.clone(),
        learn_fps: mode.fps,
        scan: Some(ScanTarget {
            mounts: s.disks.clone(),
            name: name.clone(),
            layout: s.layout,
            chunk: s.workbuf,
            say: Some(cfg.say.clone()),
        }),
        index: false,
        retention: None,
    };
    let layout = match crate::spool::ReadLayout::for_stream(&fmt, FileFormat::Raw) {
        Ok(l) => l,
        Err(e) => return refuse(vsis::RC_PARAMETER, e),
    };
    if let Err(e) = record::prepare_scan(&mut rcfg_rec, &rcfg, &layout) {
        return refuse(vsis::RC_ERROR, e.to_string());
    }
    let Some(mut pairs) = rings.take() else {
        return refuse(vsis::RC_ERROR, "the ring is gone (a capture failed)".into());
    };
    for (p, c) in pairs.iter_mut() {
        // Each scan starts at an aligned position of a drained ring: what a scan whose disks
        // all failed left in it was counted as unwritten, and goes.
        let to = c.produced();
        c.release(to);
        let aligned = p.align_to(sys::RING_ALIGN as u64);
        p.publish();
        let to = c.produced();
        c.release(to);
        if !aligned {
            *rings = Some(pairs);
            return refuse(vsis::RC_ERROR, "the ring could not be made ready for the scan".into());
        }
    }
    *lock(&core.scan_stop) = Some(scan_stop.clone());
    // record=off (or a signal) while the scan was starting: it stops as soon as it runs.
    if core.off_asked.load(Ordering::Relaxed) || cancel.load(Ordering::Relaxed) {
        scan_stop.store(true, Ordering::Relaxed);
    }
    for a in [&core.total, &core.lost, &core.late, &core.invalid, &core.bytes] {
        a.store(0, Ordering::Relaxed);
    }
    let start_s = std::sync::Mutex::new(0.0f64);
    let replied = AtomicBool::new(false);
    let bind = || -> Result<Listener> {
        if cancel.load(Ordering::Relaxed) {
            return Err(Error::failed("the client gave up waiting for record=on"));
        }
        let l = Listener::bind_for(&rcfg, fmt.as_ref())?;
        *lock(&core.current) = Some((number, name.clone()));
        lock(&core.scans).push(name.clone());
        let _ = core.state.compare_exchange(STARTING, RECORDING, Ordering::AcqRel, Ordering::Acquire);
        if core.off_asked.load(Ordering::Relaxed) {
            scan_stop.store(true, Ordering::Relaxed);
            *lock(&core.current) = None;
            let _ = core.state.compare_exchange(RECORDING, DRAINING, Ordering::AcqRel, Ordering::Acquire);
        }
        *lock(&start_s) = (sys::monotonic_ns() - t_req) as f64 / 1e9;
        replied.store(true, Ordering::Relaxed);
        let _ = reply.send(Ok(name.clone()));
        (cfg.say)(&format!(
            "wirespeed station: scan {number} {name} recording: {} on {}, {} over {} disk(s)",
            mode.text,
            crate::addr::shown(l.local_addr().unwrap_or(listen)),
            s.layout.name(),
            s.disks.len()
        ));
        Ok(l)
    };
    let progress = |line: &str| {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { return };
        let get = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
        core.total.store(get("datagrams"), Ordering::Relaxed);
        core.lost.store(get("lost"), Ordering::Relaxed);
        core.late.store(get("late"), Ordering::Relaxed);
        core.invalid.store(get("invalid"), Ordering::Relaxed);
        core.bytes.store(get("written_bytes") + get("ring_fill_bytes"), Ordering::Relaxed);
    };
    let (result, back) = record::run_with_rings(
        &rcfg,
        &rcfg_rec,
        &bind,
        fmt.clone(),
        &scan_stop,
        Some(Duration::from_millis(200)),
        &progress,
        Vec::new(),
        pairs,
        0.0,
    );
    *lock(&core.current) = None;
    *lock(&core.scan_stop) = None;
    *rings = if back.is_empty() {
        // A capture thread failed and took the ring: make another for the next scan.
        sys::byte_ring_with(cfg.buffer, true, &sys::Prefault::default()).ok().map(|r| vec![r])
    } else {
        Some(back)
    };
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            (cfg.say)(&format!("wirespeed station: scan {name} failed: {e}"));
            if !replied.load(Ordering::Relaxed) {
                let _ = reply.send(Err((vsis::RC_ERROR, e.to_string())));
                return None;
            }
            // Started, then failed: it is a scan of the report, with what stopped it.
            core.push_error(format!("scan {name}: {e}"));
            return Some(ScanSummary {
                number,
                name: name.clone(),
                layout: s.layout,
                disks: s.disks.iter().map(|d| d.display().to_string()).collect(),
                received: 0,
                lost: 0,
                invalid: 0,
                records: 0,
                bytes: 0,
                pieces: scan::find(&name, &s.disks).map_or(0, |f| f.pieces.len() as u64),
                notes: Vec::new(),
                error: Some(e.to_string()),
                start_s: *lock(&start_s),
            });
        }
    };
    let c = &report.capture;
    core.total.store(c.total.received + c.total.invalid, Ordering::Relaxed);
    core.lost.store(c.total.lost, Ordering::Relaxed);
    core.late.store(c.total.late, Ordering::Relaxed);
    core.invalid.store(c.total.invalid, Ordering::Relaxed);
    let w = report.writer.clone().unwrap_or_default();
    core.bytes.store(w.bytes, Ordering::Relaxed);
    let dropped: Vec<String> = w
        .notes
        .iter()
        .filter(|n| n.contains("dropping disk") || n.contains(" is full") || n.contains("a partial copy"))
        .cloned()
        .collect();
    for d in &dropped {
        core.push_error(format!("scan {name}: {d}"));
    }
    if let Some(e) = &w.error {
        core.push_error(format!("scan {name}: {e}"));
    }
    let summary = ScanSummary {
        number,
        name: name.clone(),
        layout: s.layout,
        disks: s.disks.iter().map(|d| d.display().to_string()).collect(),
        received: c.total.received,
        lost: c.total.lost,
        invalid: c.total.invalid,
        records: w.records,
        bytes: w.bytes,
        pieces: scan::find(&name, &s.disks).map_or(0, |f| f.pieces.len() as u64),
        notes: w.notes.clone(),
        error: w.error.clone(),
        start_s: *lock(&start_s),
    };
    (cfg.say)(&format!(
        "wirespeed station: scan {number} {name} done: {} datagrams, lost {}, invalid {}, {} on disk",
        units::thousands(summary.received),
        units::thousands(summary.lost),
        units::thousands(summary.invalid),
        units::bytes(summary.bytes)
    ));
    Some(summary)
}

/// `asked`, or the first of `askeda`..`askedz` that no disk holds.
fn free_name(asked: &str, disks: &[PathBuf]) -> Option<String> {
    let taken = |n: &str| disks.iter().any(|d| std::fs::symlink_metadata(d.join(n)).is_ok());
    std::iter::once(asked.to_string())
        .chain((b'a'..=b'z').map(|c| format!("{asked}{}", c as char)))
        .find(|n| !taken(n) && scan::validate_scan_name(n).is_ok())
}

/// Accept control connections until `stop`; each is served on its own thread.
fn serve(listener: TcpListener, core: Arc<Core>, allow: Vec<Cidr>, say: Say, stop: &'static AtomicBool) {
    let _ = listener.set_nonblocking(true);
    let clients = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((conn, peer)) => {
                if !allowed(peer.ip(), &allow) {
                    say(&format!("wirespeed station: refused a control connection from {peer} (not in --allow)"));
                    continue;
                }
                if clients.load(Ordering::Relaxed) >= MAX_CLIENTS {
                    say(&format!("wirespeed station: refused {peer}: {MAX_CLIENTS} clients are connected already"));
                    continue;
                }
                clients.fetch_add(1, Ordering::Relaxed);
                let (core, clients) = (core.clone(), clients.clone());
                let h = std::thread::Builder::new().name("ws-vsis-client".into()).spawn(move || {
                    // The count goes down however the client's thread ends.
                    struct Leaving(Arc<AtomicUsize>);
                    impl Drop for Leaving {
                        fn drop(&mut self) {
                            self.0.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                    let _leaving = Leaving(clients);
                    client(conn, &core, stop);
                });
                if let Ok(h) = h {
                    handles.push(h);
                }
                handles.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    for h in handles {
        let _ = h.join();
    }
}

/// Where a unit of input ends in `buf`: after its last newline, or at its end when that is a
/// `;` (a client that writes `cmd;` without a newline), or at 4096 bytes (jive5ab reads that
/// much at a time); `None` while a command is still arriving.
pub fn unit_end(buf: &[u8]) -> Option<usize> {
    if let Some(nl) = buf.iter().rposition(|&b| b == b'\n') {
        return Some(nl + 1);
    }
    if buf.len() >= 4096 {
        return Some(buf.len());
    }
    let trimmed = buf.iter().rposition(|b| !b.is_ascii_whitespace())?;
    if buf[trimmed] == b';' || buf.len() >= 4096 {
        return Some(buf.len());
    }
    None
}

/// Serve one control connection: a unit at a time, one command after the other.
fn client(mut conn: TcpStream, core: &Core, stop: &AtomicBool) {
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    // A client that never reads its replies is dropped rather than holding its thread.
    let _ = conn.set_write_timeout(Some(Duration::from_secs(10)));
    let _ = conn.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        let n = match conn.read(&mut chunk) {
            Ok(0) => return, // gone; a command half sent is never carried out
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                // jive5ab answers what one read brought, terminated or not. Queries left
                // unterminated are answered so too once the client pauses; a command is carried
                // out only when it is terminated, so half a command from a client that goes
                // away never runs.
                if !buf.is_empty() && only_queries(&buf) {
                    let unit = String::from_utf8_lossy(&std::mem::take(&mut buf)).into_owned();
                    if let Some(out) = answer(&unit, core) {
                        if conn.write_all(out.as_bytes()).is_err() {
                            return;
                        }
                    }
                }
                continue;
            }
            Err(_) => return,
        };
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_PENDING {
            return; // no terminator in 64 KiB: not a VSI-S client
        }
        while let Some(end) = unit_end(&buf) {
            let unit: Vec<u8> = buf.drain(..end).collect();
            let unit = String::from_utf8_lossy(&unit).into_owned();
            if let Some(out) = answer(&unit, core) {
                if conn.write_all(out.as_bytes()).is_err() {
                    return;
                }
            }
        }
    }
}

/// Whether every piece of `buf` is a query (`keyword?...`): harmless to answer unterminated.
fn only_queries(buf: &[u8]) -> bool {
    let text = String::from_utf8_lossy(buf);
    let pieces = vsis::split(&text);
    !pieces.is_empty() && pieces.iter().all(|p| matches!(p, Ok(c) if c.query))
}

/// The replies to one unit. The settings are locked while a command runs, except while
/// `record=on` waits for the recorder (it reads a copy), so queries from other clients are
/// answered meanwhile.
fn answer(unit: &str, core: &Core) -> Option<String> {
    let pieces = vsis::split(unit);
    if pieces.is_empty() {
        return None;
    }
    let mut out = String::new();
    for p in pieces {
        match p {
            Ok(c) => {
                let starts = !c.query && c.keyword == "record" && c.args.first().is_some_and(|a| a == "on");
                let stops = !c.query && c.keyword == "record" && c.args.first().is_some_and(|a| a == "off");
                if c.query || stops {
                    // Queries read a copy: one that reads the disks never holds up another
                    // client's command (record=off above all).
                    let mut copy = lock(&core.settings).clone();
                    out.push_str(&vsis::execute(&c, &mut copy, core));
                } else if starts {
                    let mut copy = lock(&core.settings).clone();
                    let r = vsis::execute(&c, &mut copy, core);
                    if r.starts_with("!record=  0") {
                        // As jive5ab: scan_check? now reads the scan being recorded (once done).
                        lock(&core.settings).scan_set = None;
                    }
                    out.push_str(&r);
                } else {
                    let mut s = lock(&core.settings);
                    out.push_str(&vsis::execute(&c, &mut s, core));
                }
            }
            Err(vsis::NotACommand(r)) => out.push_str(&r),
        }
    }
    out.push_str(vsis::terminator(unit));
    Some(out)
}

/// Resolve `--disks` for the station's start: given directories as they are (the operator
/// named them), globs expanded.
pub fn start_disks(args: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let d = scan::expand_mounts(args)?;
    for p in &d {
        if !Path::new(p).is_dir() {
            return Err(Error::invalid(format!("--disks {}: not a directory", p.display())));
        }
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_ends_at_a_newline_or_a_final_semicolon_and_never_inside_a_command() {
        assert_eq!(unit_end(b"record=on:abc"), None, "half a command waits");
        assert_eq!(unit_end(b"record=on:abc;"), Some(14));
        assert_eq!(unit_end(b"status?; \t"), Some(10));
        assert_eq!(unit_end(b"a?;\nb?"), Some(4), "up to the last newline; the rest waits");
        assert_eq!(unit_end(b""), None);
        assert_eq!(unit_end(&[b'x'; 4096]), Some(4096), "jive5ab's read size at most");
    }

    #[test]
    fn control_clients_are_loopback_only_unless_allowed() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let far: IpAddr = "192.0.2.10".parse().unwrap();
        assert!(allowed(lo, &[]) && !allowed(far, &[]));
        assert!(allowed("::ffff:127.0.0.1".parse().unwrap(), &[]));
        let net: Vec<Cidr> = vec!["192.0.2.0/24".parse().unwrap()];
        assert!(allowed(far, &net) && !allowed(lo, &net));
    }

    #[test]
    fn times_are_written_as_jive5ab_writes_them() {
        // 2026-11-28 21:51:48.9984 UTC is day 332.
        let ns = (crate::calendar::days_from_civil(2026, 11, 28) as u64 * 86_400 + 21 * 3600 + 51 * 60 + 48)
            * 1_000_000_000
            + 998_400_000;
        assert_eq!(vex_time(ns), "2026y332d21h51m48.9984s");
        assert_eq!(fmt6(0.624969), "0.624969");
        assert_eq!(fmt6(1.25), "1.25");
        assert_eq!(fmt6(12.0), "12");
    }
}
