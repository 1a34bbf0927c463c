//! Extraction: the records of a recording that fall in a window of time (arrival, or the
//! format's own), of one stream, or of a range of sequence numbers, read through the files'
//! time indexes ([`super::index`]) so that 30 seconds of a 50 GB recording cost 30 seconds of
//! reading, and accounted like everything else: a ledger of what was taken and of the holes
//! the recording had in the window.
//!
//! A file whose sidecar has no index (an older recording, `record --no-index`, a file still
//! being written, another tool's pcap) is read whole, and the report says so per file. The
//! records come out in file order, files in recording order; `wirespeed extract` writes them
//! as raw or pcap, Python's `Recording.between` maps them.
//!
//! Every file read is held with a shared lock ([`crate::sys::file::lock_shared`]) while it is
//! read, so that a recorder's retention never deletes it under the reader.

use super::index::TimeIndex;
use super::open::OpenFile;
use super::{parse_pcap_global, parse_pcap_packet, pcap, FileFormat, FileLedger, FileStream, PcapInfo};
use crate::error::{Error, Result};
use crate::ledger::LedgerCounts;
use crate::wire::{DataClock, Format};
use serde::Serialize;
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Schema of an extract's ledger (`FILE.json` beside `-w FILE`, and `--json`).
pub const EXTRACT_SCHEMA: &str = "wirespeed.extract/1";

/// Longest pcap record accepted (as `verify` does).
const MAX_CAPLEN: usize = 262_144;
/// Bytes read at a time.
const READ: usize = 8 << 20;
/// Longest raw record read (a sidecar claiming more is not believed).
const MAX_RECORD: usize = 64 << 20;

/// Which clock a window is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Clock {
    /// When the recorder received each record (pcap: its time stamp; raw files: read between
    /// the capture's time marks around it).
    Arrival,
    /// The records' own time (VDIF/Mark5B frame time in UTC, the SPEAD timestamp item).
    Data,
}

/// A window of time, `[from, to)`, on one clock (ns since the epoch, or SPEAD timestamp units).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Window {
    /// The clock.
    pub clock: Clock,
    /// First instant in the window.
    pub from: u64,
    /// First instant after it.
    pub to: u64,
}

/// What to extract.
#[derive(Clone, Debug, Default)]
pub struct Query {
    /// The time window, if any.
    pub window: Option<Window>,
    /// Only this format stream (VDIF thread, Mark5B/SPEAD stream id).
    pub stream: Option<u32>,
    /// Only these sequence numbers, inclusive.
    pub seq: Option<(u64, u64)>,
    /// Read whole files even where an index could narrow the reading (the full scan a
    /// benchmark compares against).
    pub no_index: bool,
}

impl Query {
    /// Whether the query asks anything of a record's contents (stream, number, own time).
    fn checks_records(&self) -> bool {
        self.stream.is_some() || self.seq.is_some() || self.window.is_some_and(|w| w.clock == Clock::Data)
    }
}

/// One record that matched, as it lies in its file.
#[derive(Clone, Copy, Debug)]
pub struct Pick<'a> {
    /// Which of the recording's files (index into the list given).
    pub file: usize,
    /// Where the record starts in the file.
    pub offset: u64,
    /// The whole record: a raw file's record, or a pcap record with its header.
    pub record: &'a [u8],
    /// The UDP payload (raw files: the record).
    pub payload: &'a [u8],
    /// Its source (pcap).
    pub src: Option<SocketAddr>,
    /// Its arrival time (pcap exact; raw files from the marks, when indexed), ns.
    pub arrival_ns: Option<u64>,
}

/// How one file was read.
#[derive(Clone, Debug, Serialize)]
pub struct FileRead {
    /// The data file.
    pub path: String,
    /// `index` (read only the range its index gives), `skipped` (its index shows nothing in
    /// the window: not opened), `scanned` (no index, or --no-index: read whole).
    pub how: String,
    /// Bytes read from it.
    pub bytes_read: u64,
    /// Records read (checked against the query).
    pub records_read: u64,
    /// Records taken.
    pub records: u64,
}

/// What an extract found: the ledger written beside its output.
#[derive(Clone, Debug, Serialize)]
pub struct ExtractReport {
    /// Always [`EXTRACT_SCHEMA`].
    pub schema: &'static str,
    /// The time window asked for, UTC (ISO 8601) for UTC clocks.
    pub window: Option<WindowShown>,
    /// The stream asked for.
    pub stream: Option<u32>,
    /// The sequence numbers asked for (inclusive).
    pub seq: Option<[u64; 2]>,
    /// Where the records went: a file, `-` (stdout), or nothing (counted only).
    pub output: Option<String>,
    /// raw or pcap.
    pub file_format: FileFormat,
    /// The stream's format (what reads the records).
    pub format: String,
    /// Records taken.
    pub records: u64,
    /// Bytes of the records taken, as they lie in the recording (the output's own size is
    /// the file's).
    pub bytes: u64,
    /// Earliest and latest arrival of the records taken, ns (when known).
    pub arrival_ns: Option<[u64; 2]>,
    /// Earliest and latest own time of the records taken (when the format has one).
    pub data_time: Option<[u64; 2]>,
    /// The ledger of the records taken, per stream: their gaps are holes the recording has
    /// inside the window.
    pub streams: Vec<FileStream>,
    /// Totals over the streams.
    pub total: LedgerCounts,
    /// Frames missing at the window's edges (UTC formats, data clock: the numbers the window
    /// should hold before the first and after the last record taken, per stream).
    pub missing_at_edges: Vec<EdgeGap>,
    /// Every file of the recording and how it was read.
    pub files: Vec<FileRead>,
    /// Things the reader should know (files without an index, a window in a hole).
    pub notes: Vec<String>,
    /// The reader of the output went away before the end (e.g. `| head`): what is here is
    /// what was taken until then.
    pub stopped_early: bool,
}

/// Numbers a window should hold that lie before the first or after the last record taken.
#[derive(Clone, Debug, Serialize)]
pub struct EdgeGap {
    /// The stream.
    pub stream: u32,
    /// First number missing.
    pub first: u64,
    /// Last number missing.
    pub last: u64,
    /// How many.
    pub count: u64,
}

/// A window as the report shows it.
#[derive(Clone, Debug, Serialize)]
pub struct WindowShown {
    /// arrival or data.
    pub clock: Clock,
    /// First instant, as given on its clock (ns or timestamp units); `None`: from the start.
    pub from: Option<u64>,
    /// First instant after it; `None`: to the end.
    pub to: Option<u64>,
    /// The same in UTC, for UTC clocks.
    pub from_utc: Option<String>,
    /// The same in UTC, for UTC clocks.
    pub to_utc: Option<String>,
}

impl ExtractReport {
    /// Whether the recording holds every record the window should (no gap inside, none at
    /// the edges where that can be known), and at least one.
    pub fn whole(&self) -> bool {
        self.records > 0 && self.total.lost == 0 && self.missing_at_edges.is_empty()
    }

    /// The summary line a person reads.
    pub fn line(&self) -> String {
        let mut s = format!(
            "{} record(s), {} from {} file(s) ({} read through their index, {} scanned whole, {} not opened)",
            crate::units::thousands(self.records),
            crate::units::bytes(self.bytes),
            self.files.iter().filter(|f| f.records > 0).count(),
            self.files.iter().filter(|f| f.how == "index").count(),
            self.files.iter().filter(|f| f.how == "scanned").count(),
            self.files.iter().filter(|f| f.how == "skipped").count(),
        );
        if self.total.lost > 0 {
            s += &format!(
                "; the recording lacks {} record(s) inside the window",
                crate::units::thousands(self.total.lost)
            );
        }
        let edge: u64 = self.missing_at_edges.iter().map(|g| g.count).sum();
        if edge > 0 {
            s += &format!(
                "; {} record(s) of the window lie before or after what was recorded",
                crate::units::thousands(edge)
            );
        }
        s
    }
}

/// A time as given for a window's edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeArg {
    /// An instant in UTC, ns since the epoch.
    Utc(u64),
    /// A SPEAD timestamp (`ts:N`), in the instrument's units.
    Timestamp(u64),
    /// `+DURATION` (for the window's end): that long after its start.
    After(u64),
}

/// Read a window edge: a UTC time in ISO 8601 (`2026-11-29T14:03:10Z`, fractions and offsets
/// allowed), `now`, a time before now (`-5m`, `-90s`, `-1h`: units of `s`, `m`, `h`, `d`), a
/// duration after the window's start (`+30s`, for its end), or a SPEAD timestamp (`ts:N`).
pub fn parse_time(s: &str, now_ns: u64) -> std::result::Result<TimeArg, String> {
    let t = s.trim();
    let teach = "write a UTC time (2026-11-29T14:03:10Z), now, a time before now (-5m), a duration after --from (+30s), or a SPEAD timestamp (ts:123456)";
    if t == "now" {
        return Ok(TimeArg::Utc(now_ns));
    }
    if let Some(n) = t.strip_prefix("ts:") {
        return crate::units::parse_count(n).map(TimeArg::Timestamp).map_err(|e| format!("{s:?}: {e} ({teach})"));
    }
    let duration = |d: &str| -> std::result::Result<u64, String> {
        let d = crate::units::parse_duration(d).map_err(|e| format!("{s:?}: {e} ({teach})"))?;
        u64::try_from(d.as_nanos()).map_err(|_| format!("{s:?} is too long"))
    };
    if let Some(d) = t.strip_prefix('-') {
        let ns = duration(d)?;
        return now_ns.checked_sub(ns).map(TimeArg::Utc).ok_or_else(|| format!("{s:?} reaches before 1970"));
    }
    if let Some(d) = t.strip_prefix('+') {
        return duration(d).map(TimeArg::After);
    }
    if t.len() >= 10 && t.as_bytes()[4] == b'-' {
        return crate::calendar::parse_utc(t).map(TimeArg::Utc);
    }
    Err(format!("{s:?} is not a time: {teach}"))
}

/// The window `[from, to)` that `from` and `to` (each optional) give on `clock` for a
/// recording of `fmt`: open ends reach the recording's ends. Refused with one line when the
/// forms do not fit the clock (a SPEAD timestamp on a UTC clock, `+D` as a start).
pub fn window_of(
    from: Option<TimeArg>,
    to: Option<TimeArg>,
    clock: Clock,
    fmt: &dyn Format,
) -> std::result::Result<Window, String> {
    let spead = clock == Clock::Data && fmt.data_clock() == Some(DataClock::SpeadTimestamp);
    let edge = |t: Option<TimeArg>, name: &str, open: u64| -> std::result::Result<u64, String> {
        match t {
            None => Ok(open),
            Some(TimeArg::Utc(_)) if spead => Err(format!(
                "--{name}: {}'s own time is its SPEAD timestamp, not UTC: give ts:N, or --clock arrival for UTC",
                fmt.name()
            )),
            Some(TimeArg::Utc(ns)) => Ok(ns),
            Some(TimeArg::Timestamp(v)) if spead => Ok(v),
            Some(TimeArg::Timestamp(_)) => Err(format!(
                "--{name}: ts:N is a SPEAD timestamp, and this window is in UTC ({}): give an ISO time",
                if clock == Clock::Arrival { "arrival times" } else { "the frames' own times" }
            )),
            Some(TimeArg::After(_)) => Err(format!("--{name}: +DURATION is for --to (that long after --from)")),
        }
    };
    let start = edge(from, "from", 0)?;
    let end = match to {
        Some(TimeArg::After(d)) if from.is_some() => start.saturating_add(d),
        Some(TimeArg::After(_)) => return Err("--to +DURATION counts from --from: give --from too".into()),
        t => edge(t, "to", u64::MAX)?,
    };
    if end <= start {
        return Err("the window is empty: --to must come after --from".into());
    }
    Ok(Window { clock, from: start, to: end })
}

/// The window that edges `from` and `to` give on the clock named `choice` (`auto`,
/// `arrival`, `data`) for a recording of `fmt` (`None`: no edge given): `auto` means the
/// records' own time where a `ts:N` edge is given or the format's time is UTC, arrival
/// otherwise. What `extract` and Python's `between` both ask, refused with one line when the
/// edges cannot be on that clock.
pub fn window_for(
    choice: &str,
    from: Option<TimeArg>,
    to: Option<TimeArg>,
    fmt: &dyn Format,
) -> std::result::Result<Option<Window>, String> {
    let ts_given = matches!(from, Some(TimeArg::Timestamp(_))) || matches!(to, Some(TimeArg::Timestamp(_)));
    let clock = match choice {
        "arrival" => Clock::Arrival,
        "data" => Clock::Data,
        "auto" if ts_given => Clock::Data,
        "auto" => auto_clock(fmt),
        other => return Err(format!("clock {other:?}: use auto, arrival or data")),
    };
    if from.is_none() && to.is_none() {
        return Ok(None);
    }
    if ts_given && fmt.data_clock() != Some(DataClock::SpeadTimestamp) {
        return Err(format!(
            "ts:N is a SPEAD timestamp, and this recording is {}: give a UTC time (2026-11-29T14:03:10Z, -5m)",
            fmt.name()
        ));
    }
    if clock == Clock::Data && fmt.data_clock().is_none() {
        return Err(format!(
            "--clock data: {} carries no time of its own: use --clock arrival (when it was received) or --seq",
            fmt.name()
        ));
    }
    window_of(from, to, clock, fmt).map(Some)
}

/// The clock `auto` means for a format: its own time when it is UTC (VDIF, Mark5B), else the
/// arrival.
pub fn auto_clock(fmt: &dyn Format) -> Clock {
    match fmt.data_clock() {
        Some(DataClock::Utc) => Clock::Data,
        _ => Clock::Arrival,
    }
}

/// Reads one file's byte range record by record, through one reused buffer.
struct RangeReader<'f> {
    file: &'f File,
    pos: u64,
    end: u64,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
    read: u64,
}

impl<'f> RangeReader<'f> {
    fn new(file: &'f File, start: u64, end: u64, buf: Vec<u8>) -> Self {
        RangeReader { file, pos: start, end, buf, lo: 0, hi: 0, read: 0 }
    }

    /// At least `n` bytes buffered (fewer at the range's end).
    fn fill(&mut self, n: usize) -> std::io::Result<usize> {
        if self.hi - self.lo >= n {
            return Ok(self.hi - self.lo);
        }
        self.buf.copy_within(self.lo..self.hi, 0);
        self.hi -= self.lo;
        self.lo = 0;
        while self.hi < n && self.pos < self.end {
            let want = ((self.end - self.pos) as usize).min(self.buf.len() - self.hi);
            let got = self.file.read_at(&mut self.buf[self.hi..self.hi + want], self.pos)?;
            if got == 0 {
                self.end = self.pos; // the file is shorter than it was
                break;
            }
            self.hi += got;
            self.pos += got as u64;
            self.read += got as u64;
        }
        Ok(self.hi - self.lo)
    }

    /// Offset in the file of the next unread byte.
    fn offset(&self) -> u64 {
        self.pos - (self.hi - self.lo) as u64
    }
}

/// The byte range of `f` to read for `q`: from its index (`None`: nothing in it), or whole.
fn range_of(f: &OpenFile, ix: Option<&TimeIndex>, q: &Query, header: u64) -> Option<(u64, u64)> {
    let len = f.bytes;
    let Some(ix) = ix else { return Some((header.min(len), len)) };
    let mut r = (header.min(len), len);
    if let Some(w) = q.window {
        let data = w.clock == Clock::Data;
        if data && ix.data_clock.is_none() {
            return Some(r);
        }
        let (a, b) = ix.range(w.from, w.to.saturating_sub(1), data, len)?;
        r = (r.0.max(a), r.1.min(b));
    }
    if let Some((a, b)) = q.seq {
        let (s, e) = ix.seq_range(q.stream, a, b, len)?;
        r = (r.0.max(s), r.1.min(e));
    } else if let Some(st) = q.stream {
        // Only entries that hold the stream at all.
        let (s, e) = ix.seq_range(Some(st), 0, u64::MAX, len)?;
        r = (r.0.max(s), r.1.min(e));
    }
    (r.0 < r.1).then_some(r)
}

/// Read `files` (a recording, in order) for `q`, handing each matching record to `take` in
/// file order. `fmt` reads the records' stream, number and own time. `take` may end the
/// extract early by failing with [`std::io::ErrorKind::BrokenPipe`] (the reader of the output
/// went away): the report then covers what was taken, and says so. Returns the report (its
/// `output` left empty for the caller).
pub fn extract(
    files: &[OpenFile],
    q: &Query,
    fmt: &Arc<dyn Format>,
    mut take: impl FnMut(&Pick<'_>) -> std::io::Result<()>,
) -> Result<ExtractReport> {
    let Some(first) = files.first() else { return Err(Error::not_found("no recorded files to extract from")) };
    let ff = first.layout.file_format;
    if let Some(f) = files.iter().find(|f| f.layout.file_format != ff) {
        return Err(Error::invalid(format!(
            "{} is a {} file among {} files: extract one recording at a time",
            f.path.display(),
            name_of(f.layout.file_format),
            name_of(ff)
        )));
    }
    if let Some(w) = q.window {
        if w.to <= w.from {
            return Err(Error::invalid("the window is empty: --to must come after --from"));
        }
        if w.clock == Clock::Data && fmt.data_clock().is_none() {
            return Err(Error::invalid(format!(
                "{} carries no time of its own: ask for arrival times (--clock arrival) or give --seq",
                fmt.name()
            )));
        }
    }
    let mut ledger = FileLedger::new(fmt.clone(), 1 << 16);
    let mut report = ExtractReport {
        schema: EXTRACT_SCHEMA,
        window: q.window.map(|w| shown(w, fmt.data_clock())),
        stream: q.stream,
        seq: q.seq.map(|(a, b)| [a, b]),
        output: None,
        file_format: ff,
        format: fmt.spec(),
        records: 0,
        bytes: 0,
        arrival_ns: None,
        data_time: None,
        streams: Vec::new(),
        total: LedgerCounts::default(),
        missing_at_edges: Vec::new(),
        files: Vec::new(),
        notes: Vec::new(),
        stopped_early: false,
    };
    let mut buf = vec![0u8; READ];
    let checks = q.checks_records();
    let has_clock = fmt.data_clock().is_some();
    let arrival_window = q.window.is_some_and(|w| w.clock == Clock::Arrival);
    let header = if ff == FileFormat::Pcap { super::PCAP_GLOBAL_LEN as u64 } else { 0 };
    let mut pcap_first: Option<PcapInfo> = None;
    let (mut unindexed, mut untimed, mut bad_index, mut gone) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (fi, f) in files.iter().enumerate() {
        let path = f.path.display().to_string();
        let skip = |report: &mut ExtractReport, path: String| {
            report.files.push(FileRead { path, how: "skipped".into(), bytes_read: 0, records_read: 0, records: 0 });
        };
        // The index narrows the reading unless told not to, or unless it cannot be trusted;
        // its marks (raw files' arrival times) and dates serve either way.
        let mut full_ix = f.sidecar.as_ref().and_then(|s| s.index.as_ref());
        if let Some(why) = full_ix.and_then(|i| i.problem(f.bytes, header, f.layout.record_len)) {
            bad_index.push(format!("{path} ({why})"));
            full_ix = None;
        }
        let ix = if q.no_index { None } else { full_ix };
        if full_ix.is_none() && !q.no_index {
            unindexed.push(path.clone());
        }
        if arrival_window && ff == FileFormat::Raw && full_ix.map_or(true, |i| i.marks.is_empty()) {
            untimed.push(path.clone());
            skip(&mut report, path);
            continue;
        }
        // Decided from the sidecar alone: a file whose index shows nothing in the window is
        // never opened.
        let Some((start, end)) = range_of(f, ix, q, header) else {
            skip(&mut report, path);
            continue;
        };
        let file = match File::open(&f.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Deleted since the recording was listed (a recorder's retention): not an error
                // of the extract.
                gone.push(path.clone());
                skip(&mut report, path);
                continue;
            }
            Err(e) => return Err(Error::os(format!("cannot open {path}: {e}"), &e)),
        };
        crate::sys::file::lock_shared(&file)
            .map_err(|e| Error::os(format!("cannot lock {path} for reading: {e}"), &e))?;
        let mut pcap_info = None;
        if ff == FileFormat::Pcap {
            let mut h = [0u8; super::PCAP_GLOBAL_LEN];
            if file.read_exact_at(&mut h, f.offset).is_err() {
                // A file still being written, with nothing on disk yet.
                gone.push(format!("{path} (empty)"));
                skip(&mut report, path);
                continue;
            }
            let info = parse_pcap_global(&h).ok_or_else(|| {
                Error::bad_data(format!("{path} does not start with a pcap header: it is not a pcap recording"))
            })?;
            match pcap_first {
                None => pcap_first = Some(info),
                Some(p) if p != info => {
                    return Err(Error::invalid(format!(
                        "{path}'s pcap header (link type {}, {}) differs from the first file's (link type {}, {}): extract them separately",
                        info.linktype,
                        if info.nanos { "ns" } else { "us" },
                        p.linktype,
                        if p.nanos { "ns" } else { "us" }
                    )))
                }
                Some(_) => {}
            }
            pcap_info = Some(info);
        }
        let how = if ix.is_some() { "index" } else { "scanned" };
        let mut rr = RangeReader::new(&file, f.offset + start, f.offset + end, std::mem::take(&mut buf));
        let (mut read_n, mut taken) = (0u64, 0u64);
        // The date a Mark5B time is read near: the file's own.
        let near = full_ix
            .and_then(|i| i.arrival_ns)
            .map(|a| a[0])
            .or_else(|| f.sidecar.as_ref().and_then(|s| crate::calendar::parse_utc(&s.opened_utc).ok()))
            .or_else(|| mtime_ns(&file))
            .unwrap_or_else(crate::sys::realtime_ns);
        // A record without a time of its own (a SPEAD heap's later packets, a Mark5B second
        // half) takes the time of the record before it in the same file; index entries start
        // only at records with one, so a range read from an entry reads as the whole file does.
        let mut last_data: Option<u64> = None;
        loop {
            let rec_len = match (ff, pcap_info) {
                (FileFormat::Raw, _) => f.layout.record_len,
                (FileFormat::Pcap, Some(p)) => {
                    if rr.fill(pcap::PCAP_RECORD_LEN).map_err(|e| io_err(&path, e))? < pcap::PCAP_RECORD_LEN {
                        break;
                    }
                    let Ok(h) = pcap::RecordHeader::new_checked(&rr.buf[rr.lo..rr.hi], p.order()) else { break };
                    let cap = h.caplen() as usize;
                    if cap > MAX_CAPLEN {
                        report.notes.push(format!(
                            "{path}: a record at byte {} claims {cap} bytes: the rest of the file cannot be framed and was not read",
                            rr.offset() - f.offset
                        ));
                        break;
                    }
                    pcap::PCAP_RECORD_LEN + cap
                }
                _ => break,
            };
            if rec_len == 0 || rec_len > MAX_RECORD {
                report.notes.push(format!("{path}: records of {rec_len} bytes cannot be read"));
                break;
            }
            if rec_len > rr.buf.len() {
                rr.buf.resize(rec_len, 0);
            }
            if rr.fill(rec_len).map_err(|e| io_err(&path, e))? < rec_len {
                break;
            }
            let offset = rr.offset() - f.offset;
            let rec = &rr.buf[rr.lo..rr.lo + rec_len];
            rr.lo += rec_len;
            read_n += 1;
            let (src, payload, arrival) = match pcap_info {
                Some(p) => {
                    let Ok(h) = pcap::RecordHeader::new_checked(rec, p.order()) else { break };
                    let (src, pl) = parse_pcap_packet(&p, &rec[pcap::PCAP_RECORD_LEN..], h.origlen());
                    (src, pl, Some(h.unix_ns(p.nanos)))
                }
                None => (None, Some(rec), full_ix.and_then(|i| i.arrival_at(offset))),
            };
            if let Some(w) = q.window.filter(|w| w.clock == Clock::Arrival) {
                match arrival {
                    Some(t) if t >= w.from && t < w.to => {}
                    _ => continue,
                }
            }
            // Each record is checked once: for its stream and number, its own time (only a
            // valid record's is believed) and the ledger.
            let checked = payload.map(|pl| fmt.check(pl));
            let own = match (payload, &checked) {
                (Some(pl), Some(Ok(_))) if has_clock => fmt.data_time(pl, near),
                _ => None,
            };
            if own.is_some() {
                last_data = own;
            }
            let data_t = own.or(last_data);
            if checks {
                if payload.is_none() {
                    continue;
                }
                let info = checked.as_ref().and_then(|c| c.as_ref().ok());
                if q.stream.is_some_and(|s| !info.is_some_and(|i| i.stream == s)) {
                    continue;
                }
                if let Some((a, b)) = q.seq {
                    if !info.is_some_and(|i| i.seq >= a && i.seq <= b) {
                        continue;
                    }
                }
                if let Some(w) = q.window.filter(|w| w.clock == Clock::Data) {
                    match data_t {
                        Some(t) if t >= w.from && t < w.to => {}
                        _ => continue,
                    }
                }
            }
            let pick =
                Pick { file: fi, offset, record: rec, payload: payload.unwrap_or(&[]), src, arrival_ns: arrival };
            match take(&pick) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    report.stopped_early = true;
                    report.notes.push(format!(
                        "the output was closed after {} record(s): the extract stopped there",
                        report.records
                    ));
                    break;
                }
                Err(e) => return Err(Error::os(format!("cannot write the extracted records: {e}"), &e)),
            }
            taken += 1;
            report.records += 1;
            report.bytes += rec.len() as u64;
            match (payload, checked) {
                (Some(pl), Some(c)) => ledger.add_checked(src, pl, c),
                _ => ledger.add_unreadable(true),
            }
            if let Some(t) = arrival {
                widen(&mut report.arrival_ns, t);
            }
            if let Some(t) = data_t {
                widen(&mut report.data_time, t);
            }
        }
        report.files.push(FileRead {
            path,
            how: how.into(),
            bytes_read: rr.read,
            records_read: read_n,
            records: taken,
        });
        buf = rr.buf;
        if report.stopped_early {
            break;
        }
    }
    let (streams, total) = ledger.finish();
    report.streams = streams;
    report.total = total;
    let list = |v: &[String]| {
        if v.len() <= 3 {
            v.join(", ")
        } else {
            format!("{}, ... and {} more", v[..2].join(", "), v.len() - 2)
        }
    };
    if !bad_index.is_empty() {
        report.notes.push(format!(
            "{} file(s) have an index that cannot be trusted and were read whole: {}",
            bad_index.len(),
            list(&bad_index)
        ));
    }
    if !unindexed.is_empty() && unindexed.len() > bad_index.len() {
        report.notes.push(format!(
            "{} file(s) have no time index and were read whole (a file being written, or recorded with --no-index or before indexes): {}",
            unindexed.len() - bad_index.len(),
            list(&unindexed)
        ));
    }
    if !untimed.is_empty() {
        report.notes.push(format!(
            "{} raw file(s) have no time marks (no index), so their records' arrival times are unknown and none was taken: ask by the format's own time (--clock data) or by --seq: {}",
            untimed.len(),
            list(&untimed)
        ));
    }
    if !gone.is_empty() {
        report.notes.push(format!("{} file(s) were gone or empty when read: {}", gone.len(), list(&gone)));
    }
    // The streams the recording holds (its sidecars say): one with nothing in the window
    // misses all of it.
    let mut known: Vec<u32> =
        files.iter().filter_map(|f| f.sidecar.as_ref()).flat_map(|s| s.streams.iter().map(|t| t.stream)).collect();
    known.sort_unstable();
    known.dedup();
    if let Some(s) = q.stream {
        known = vec![s];
    }
    if !report.stopped_early {
        edges(&mut report, q, fmt, &known, !untimed.is_empty());
    }
    Ok(report)
}

/// A file's modification time, ns since the epoch.
fn mtime_ns(f: &File) -> Option<u64> {
    let m = f.metadata().ok()?.modified().ok()?;
    m.duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_nanos() as u64)
}

/// The frames a UTC window should hold before the first and after the last record taken, per
/// stream (VDIF and Mark5B number their frames by time, so the window says which numbers it
/// holds): only on the window's closed sides. And a window with nothing in it named as a hole.
fn edges(report: &mut ExtractReport, q: &Query, fmt: &Arc<dyn Format>, known: &[u32], untimed: bool) {
    let Some(w) = q.window else { return };
    if w.clock == Clock::Data && fmt.data_clock() == Some(DataClock::Utc) {
        let from = (w.from > 0).then(|| fmt.seq_at(w.from)).flatten();
        let to = (w.to < u64::MAX).then(|| fmt.seq_at(w.to)).flatten();
        let (lo, hi) = (q.seq.map(|s| s.0), q.seq.map(|s| s.1.saturating_add(1)));
        let a = from.map(|a| lo.map_or(a, |l| a.max(l)));
        let b = to.map(|b| hi.map_or(b, |h| b.min(h)));
        for s in &report.streams {
            if let (Some(f), Some(a)) = (s.first_seq, a) {
                if f > a {
                    report.missing_at_edges.push(EdgeGap { stream: s.stream, first: a, last: f - 1, count: f - a });
                }
            }
            if let (Some(l), Some(b)) = (s.last_seq, b) {
                if l.saturating_add(1) < b {
                    report.missing_at_edges.push(EdgeGap {
                        stream: s.stream,
                        first: l + 1,
                        last: b - 1,
                        count: b - l - 1,
                    });
                }
            }
        }
        if let (Some(a), Some(b)) = (a, b) {
            for &stream in known {
                if b > a && !report.streams.iter().any(|s| s.stream == stream) {
                    report.missing_at_edges.push(EdgeGap { stream, first: a, last: b - 1, count: b - a });
                }
            }
        }
        report.missing_at_edges.sort_by_key(|g| (g.stream, g.first));
    }
    if report.records == 0 && !untimed {
        report
            .notes
            .push("nothing was recorded in the window: it lies in a hole of the recording, or outside it".to_string());
    }
}

fn widen(r: &mut Option<[u64; 2]>, t: u64) {
    *r = Some(match *r {
        None => [t, t],
        Some([a, b]) => [a.min(t), b.max(t)],
    });
}

fn shown(w: Window, clock: Option<DataClock>) -> WindowShown {
    let utc = w.clock == Clock::Arrival || clock == Some(DataClock::Utc);
    WindowShown {
        clock: w.clock,
        from: (w.from > 0).then_some(w.from),
        to: (w.to < u64::MAX).then_some(w.to),
        from_utc: (utc && w.from > 0).then(|| super::utc_iso(w.from)),
        to_utc: (utc && w.to < u64::MAX).then(|| super::utc_iso(w.to)),
    }
}

fn name_of(f: FileFormat) -> &'static str {
    match f {
        FileFormat::Raw => "raw",
        FileFormat::Pcap => "pcap",
    }
}

fn io_err(path: &str, e: std::io::Error) -> Error {
    Error::os(format!("cannot read {path}: {e}"), &e)
}
