//! `wirespeed tap NAME`: read a live recording from another process (another partition of the
//! same host): attach to the rings `record --share NAME` publishes, check every record with
//! the same per-file ledger `verify` uses, and pass the records on as a pcap stream (to a file,
//! to stdout, or to a program's stdin).
//!
//! A tap only ever reads the recorder's memory (mapped PROT_READ) and the recorder never
//! waits for it: a tap that falls behind is lapped, and counts what it lost as its own
//! overrun (records and bytes), exactly; what it delivers is always whole
//! ([`spool::share`](crate::spool::share) has the protocol).

use crate::error::{Error, Result};
use crate::ledger::LedgerCounts;
use crate::spool::share::{Descriptor, Next, Overrun, Start, TapRing};
use crate::spool::{pcap_global_header, FileFormat, FileLedger, FileStream, ReadLayout, RecordWalker};
use crate::wire::Format;
use crate::{sys, units};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Schema of `tap --json`.
pub const TAP_SCHEMA: &str = "wirespeed.tap/1";

/// Where a tap's records go.
#[derive(Clone, Debug)]
pub enum Output {
    /// Nowhere: count and check only.
    None,
    /// A pcap file (created; an existing file is refused).
    File(PathBuf),
    /// A pcap stream on stdout.
    Stdout,
    /// A pcap stream on the stdin of `sh -c CMD`.
    Exec(String),
}

/// What a tap does.
#[derive(Clone)]
pub struct TapConfig {
    /// The share name.
    pub name: String,
    /// Newest data (default) or what the ring still holds.
    pub start: Start,
    /// Where the records go.
    pub output: Output,
    /// The format that checks the records (None: the recorder's).
    pub format: Option<Arc<dyn Format>>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Stop after this many records.
    pub count: Option<u64>,
    /// Totals the tap publishes as it runs, for whoever made them (a metrics exporter,
    /// `--metrics`), if anyone.
    pub live: Option<Arc<TapLive>>,
}

/// The result of a tap.
#[derive(Clone, Debug, Serialize)]
pub struct TapReport {
    /// [`TAP_SCHEMA`].
    pub schema: &'static str,
    /// The share name.
    pub name: String,
    /// The recorder's pid.
    pub recorder_pid: u32,
    /// Rings read (one per capture thread of the recorder).
    pub rings: usize,
    /// The format that checked the records.
    pub format: String,
    /// Where the records went (`none`, a path, `stdout`, `exec: CMD`).
    pub output: String,
    /// Records delivered (whole and intact).
    pub records: u64,
    /// Their bytes (pcap records, headers included).
    pub bytes: u64,
    /// What the tap lost by falling behind (the recorder lost nothing for it).
    pub tap_overrun: Overrun,
    /// Records that were in the rings before the tap's start point (not read).
    pub skipped_at_start: u64,
    /// Why the tap stopped: `recorder ended`, `recorder gone`, `signal`, `duration`, `count`,
    /// `output closed`.
    pub ended_by: String,
    /// Seconds attached.
    pub seconds: f64,
    /// The ledger of the records delivered, per source and stream, as `verify` keeps it. Its
    /// `lost` are the holes in what this tap saw: the stream's own loss plus, when the tap was
    /// lapped, the records it overran (`tap_overrun` says how many of those). Duplicates the
    /// recorder left out of its files never reach a tap; a loss after the last record (known
    /// to the recorder from the sender's end-of-stream message) neither.
    pub streams: Vec<FileStream>,
    /// Totals over the streams.
    pub total: LedgerCounts,
    /// Records the format found invalid, by reason.
    pub invalid_by_reason: crate::rx::InvalidReasons,
    /// The program's exit code (`--exec`), when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_status: Option<i32>,
}

/// The id of a tap's `--interval-json` line ([`TapProgress`] as JSON).
pub const INTERVAL_SCHEMA: &str = "wirespeed.tap.interval/1";

/// A progress sample; as JSON (`--interval-json`), one document of its own per line.
#[derive(Clone, Debug, Serialize)]
pub struct TapProgress {
    /// [`INTERVAL_SCHEMA`].
    pub schema: &'static str,
    /// Seconds since attaching.
    pub t: f64,
    /// Records delivered so far.
    pub records: u64,
    /// Records per second over the last interval.
    pub records_per_s: f64,
    /// Bytes published but not yet read, over all rings.
    pub behind_bytes: u64,
    /// Records lost to overruns so far.
    pub overrun_records: u64,
}

impl TapProgress {
    /// One line for a terminal.
    pub fn line(&self) -> String {
        format!(
            "{:7.1}s  {} records  {:.0} rec/s  behind {}  overrun {}",
            self.t,
            units::thousands(self.records),
            self.records_per_s,
            units::bytes(self.behind_bytes),
            units::thousands(self.overrun_records)
        )
    }
}

enum Sink {
    None,
    Stream(Box<dyn Write>),
    Exec(std::process::Child, Buffered<std::process::ChildStdin>),
}

/// A write buffer whose memory is faulted in when it is made, not by the first records: a
/// `BufWriter`'s fresh megabyte would take a page fault per 4 KiB on the tap's path, just when
/// it said it was attached and must keep up.
struct Buffered<W: Write> {
    w: W,
    buf: Vec<u8>,
}

impl<W: Write> Buffered<W> {
    fn new(w: W, cap: usize) -> Self {
        let mut buf = vec![1u8; cap]; // every byte written: every page is in
        buf.clear();
        Buffered { w, buf }
    }

    fn flush_buf(&mut self) -> std::io::Result<()> {
        let r = self.w.write_all(&self.buf);
        self.buf.clear();
        r
    }
}

impl<W: Write> Write for Buffered<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + b.len() > self.buf.capacity() {
            self.flush_buf()?;
        }
        if b.len() >= self.buf.capacity() {
            self.w.write_all(b)?;
        } else {
            self.buf.extend_from_slice(b);
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.flush_buf()?;
        self.w.flush()
    }
}

impl Sink {
    fn open(o: &Output) -> Result<Sink> {
        let header = pcap_global_header();
        let mut s = match o {
            Output::None => return Ok(Sink::None),
            Output::Stdout => Sink::Stream(Box::new(Buffered::new(std::io::stdout(), 1 << 20))),
            Output::File(p) => {
                let f = std::fs::OpenOptions::new().write(true).create_new(true).open(p).map_err(|e| {
                    Error::usage_io(
                        format!(
                            "cannot create {}: {e} (tap writes a new file; remove it or name another)",
                            p.display()
                        ),
                        &e,
                    )
                })?;
                Sink::Stream(Box::new(Buffered::new(f, 1 << 20)))
            }
            Output::Exec(cmd) => {
                let mut child = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(cmd)
                    .stdin(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| Error::failed(format!("cannot start `{cmd}`: {e}")))?;
                let stdin = child.stdin.take().ok_or_else(|| Error::failed("no stdin for --exec"))?;
                Sink::Exec(child, Buffered::new(stdin, 1 << 16))
            }
        };
        s.write(&header).map_err(|e| Error::io(format!("cannot write the tap's output: {e}")))?;
        Ok(s)
    }

    fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::None => Ok(()),
            Sink::Stream(w) => w.write_all(b),
            Sink::Exec(_, w) => w.write_all(b),
        }
    }

    fn close(self) -> std::io::Result<Option<i32>> {
        match self {
            Sink::None => Ok(None),
            Sink::Stream(mut w) => w.flush().map(|_| None),
            Sink::Exec(mut child, mut w) => {
                let flushed = w.flush();
                drop(w);
                let st = child.wait()?;
                match flushed {
                    Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
                    _ => Ok(st.code()),
                }
            }
        }
    }
}

/// Attach to share `cfg.name` and read until the recorder ends (or a signal, --duration,
/// --count, or the output closes). `progress` gets a sample every `interval`.
pub fn run(
    cfg: &TapConfig,
    stop: &AtomicBool,
    interval: Option<Duration>,
    progress: &dyn Fn(&TapProgress),
    attached: &dyn Fn(&Descriptor),
) -> Result<TapReport> {
    let d = Descriptor::load(&cfg.name)?;
    let fmt = match &cfg.format {
        Some(f) => f.clone(),
        None => crate::wire::spec::parse(&d.format).map_err(|e| {
            Error::unsupported(format!("the recorder's format {:?} does not parse here: {e}", d.format))
        })?,
    };
    let layout = ReadLayout::for_stream(&fmt, FileFormat::Pcap).map_err(Error::invalid)?;
    let mut rings = d.attach(cfg.start).map_err(Error::invalid)?;
    let mut sink = Sink::open(&cfg.output)?;
    attached(&d);
    let mut ledger = FileLedger::new(layout.reader.clone(), d.window);
    let mut walker = RecordWalker::new(layout).continuing_own();
    let t0 = sys::monotonic_ns();
    let every = interval.map(|i| i.as_nanos() as u64);
    let (mut next_tick, mut last_recs, mut last_t) = (every.map_or(u64::MAX, |e| t0 + e), 0u64, t0);
    let mut last_alive_check = t0;
    // The record buffer, faulted in before the first record (see `Buffered`).
    let mut buf = vec![1u8; 70_000];
    buf.clear();
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut ended: Vec<bool> = vec![false; rings.len()];
    let mut write_error = None;
    let live = cfg.live.clone();
    let mut publish_at = t0;
    let ended_by = 'outer: loop {
        let mut idle = true;
        for (i, r) in rings.iter_mut().enumerate() {
            if ended[i] {
                continue;
            }
            for _ in 0..1024 {
                match r.next(&mut buf) {
                    Next::Record => {
                        idle = false;
                        walker.feed(&buf, &mut ledger);
                        records += 1;
                        bytes += buf.len() as u64;
                        if let Err(e) = sink.write(&buf) {
                            write_error = Some(e);
                            break 'outer "output closed";
                        }
                        if cfg.count.is_some_and(|c| records >= c) {
                            break 'outer "count";
                        }
                    }
                    Next::Empty => break,
                    Next::Ended => {
                        ended[i] = true;
                        break;
                    }
                }
            }
        }
        if ended.iter().all(|&e| e) {
            break "recorder ended";
        }
        let now = sys::monotonic_ns();
        if let Some(l) = live.as_ref().filter(|_| now >= publish_at) {
            l.publish(records, bytes, &rings);
            publish_at = now + 50_000_000;
        }
        if stop.load(Ordering::Relaxed) {
            break "signal";
        }
        if cfg.duration.is_some_and(|dur| now - t0 >= dur.as_nanos() as u64) {
            break "duration";
        }
        if now >= next_tick {
            let dt = (now - last_t) as f64 / 1e9;
            progress(&TapProgress {
                schema: INTERVAL_SCHEMA,
                t: (now - t0) as f64 / 1e9,
                records,
                records_per_s: (records - last_recs) as f64 / dt.max(1e-9),
                behind_bytes: rings.iter().map(|r| r.behind()).sum(),
                overrun_records: rings.iter().map(|r| r.overrun.records).sum(),
            });
            (last_recs, last_t) = (records, now);
            next_tick = now + every.unwrap_or(u64::MAX / 2);
        }
        if idle {
            // A recorder killed without finishing never says `done`: notice it is gone.
            if now - last_alive_check > 200_000_000 {
                last_alive_check = now;
                if !d.alive() {
                    // One more pass reads what it published before it died.
                    let more = rings.iter_mut().any(|r| r.behind() > 0);
                    if !more {
                        break "recorder gone";
                    }
                }
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    };
    let exec_status = match sink.close() {
        Ok(s) => s,
        Err(e) => {
            write_error.get_or_insert(e);
            None
        }
    };
    if let Some(e) = &write_error {
        // A reader that went away (a program that exited, `tap -w - | head`) ends the tap; any
        // other failure (a full disk) is an error.
        if matches!(cfg.output, Output::File(_)) || e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(Error::os(format!("writing the tap's output failed: {e}"), e));
        }
    }
    if let Some(l) = &live {
        l.publish(records, bytes, &rings);
    }
    let (streams, total) = ledger.finish();
    let mut overrun = Overrun::default();
    for r in &rings {
        overrun.records += r.overrun.records;
        overrun.bytes += r.overrun.bytes;
        overrun.events += r.overrun.events;
    }
    Ok(TapReport {
        schema: TAP_SCHEMA,
        name: d.name.clone(),
        recorder_pid: d.pid,
        rings: rings.len(),
        format: fmt.spec(),
        output: match &cfg.output {
            Output::None => "none".into(),
            Output::File(p) => p.display().to_string(),
            Output::Stdout => "stdout".into(),
            Output::Exec(c) => format!("exec: {c}"),
        },
        records,
        bytes,
        tap_overrun: overrun,
        skipped_at_start: rings.iter().map(|r| r.skipped_at_start).sum(),
        ended_by: ended_by.into(),
        seconds: (sys::monotonic_ns() - t0) as f64 / 1e9,
        streams,
        total,
        invalid_by_reason: crate::spool::reasons(&ledger.invalid_kinds),
        exec_status,
    })
}

impl TapReport {
    /// The human summary.
    pub fn human(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let t = &self.total;
        let _ = writeln!(
            o,
            "wirespeed tap {}: {} records ({}) in {:.1} s from recorder pid {} ({} ring(s)), ended by {}",
            self.name,
            units::thousands(self.records),
            units::bytes(self.bytes),
            self.seconds,
            self.recorder_pid,
            self.rings,
            self.ended_by
        );
        let _ = writeln!(
            o,
            "  ledger: received {}, lost {}, late {}, duplicate {}, invalid {} ({})",
            units::thousands(t.received),
            units::thousands(t.lost),
            units::thousands(t.late),
            units::thousands(t.duplicate),
            units::thousands(t.invalid),
            self.format
        );
        let _ = writeln!(
            o,
            "  tap overrun: {} records ({}) in {} jump(s){}",
            units::thousands(self.tap_overrun.records),
            units::bytes(self.tap_overrun.bytes),
            self.tap_overrun.events,
            if self.tap_overrun.records > 0 {
                " (this tap fell behind and lost them; the recorder did not)"
            } else {
                ""
            }
        );
        let _ = writeln!(o, "  output: {}", self.output);
        if let Some(c) = self.exec_status {
            let _ = writeln!(o, "  program exit code: {c}");
        }
        o
    }
}

/// A tap's running totals, published every 50 ms and at its end.
#[derive(Debug, Default)]
pub struct TapLive {
    /// Records delivered.
    pub records: AtomicU64,
    /// Their bytes.
    pub bytes: AtomicU64,
    /// Records lost by falling behind the recorder.
    pub overrun_records: AtomicU64,
    /// Ring bytes skipped with them.
    pub overrun_bytes: AtomicU64,
    /// Bytes published by the recorder and not yet read, over all rings.
    pub behind_bytes: AtomicU64,
}

impl TapLive {
    /// Publish the tap's counts so far.
    pub fn publish(&self, records: u64, bytes: u64, rings: &[TapRing]) {
        self.records.store(records, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        self.overrun_records.store(rings.iter().map(|r| r.overrun.records).sum(), Ordering::Relaxed);
        self.overrun_bytes.store(rings.iter().map(|r| r.overrun.bytes).sum(), Ordering::Relaxed);
        self.behind_bytes.store(rings.iter().map(|r| r.behind()).sum(), Ordering::Relaxed);
    }
}
