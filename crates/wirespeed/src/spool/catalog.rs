//! `wirespeed recordings`: what directories of recordings hold, read from the sidecars alone
//! (and, when asked, checked by [`verify`](super::verify)).
//!
//! It is the operator's first look at a recording disk: which runs are there, when they
//! started and for how long, how much they hold, what they lost and where, which files are
//! still being written or were cut short, and how much room is left. It reads only the
//! directory listings and the sidecars, so it answers at once whatever the size of the data;
//! `verify` re-reads the data when the answer must be proven.
//!
//! Nothing here trusts the files: a sidecar that does not parse, a file that cannot be read, a
//! number that would overflow become a note on the file (saturating sums), never a failure of
//! the whole listing. Only a directory that cannot be listed is an error.

use super::verify::{self, Collected, VerifyOptions};
use super::{looks_recorded, FileFormat, Sidecar, PART_SUFFIX};
use crate::calendar::utc_iso;
use crate::error::{Error, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Schema of `recordings --json`.
pub const CATALOG_SCHEMA: &str = "wirespeed.recordings/1";

/// Holes listed per run: enough to see where loss is, while a run with a million holes stays
/// a readable document (`holes_total` says how many there are; `verify --json` lists them all).
pub const MAX_HOLES: usize = 32;

/// Stray names listed per directory (all are counted).
pub const MAX_STRAY_NAMES: usize = 8;

/// The state of one data file, as its name and sidecar show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum FileState {
    /// Finished: renamed from `.part`, and its sidecar says it holds every record written for it.
    #[serde(rename = "complete")]
    Complete,
    /// A `.part` file: its recorder is still writing it, or was killed while writing it.
    #[serde(rename = "recording")]
    Recording,
    /// Finished, but its sidecar says it is not whole (`complete: false`): a full disk or a
    /// write error stopped it; `ended_by` says which.
    #[serde(rename = "cut short")]
    CutShort,
    /// Named like a recorded file, but no sidecar says what it holds.
    #[serde(rename = "no sidecar")]
    NoSidecar,
    /// Its sidecar cannot be read or is not a wirespeed sidecar.
    #[serde(rename = "bad sidecar")]
    BadSidecar,
    /// A sidecar whose data file is gone.
    #[serde(rename = "data missing")]
    DataMissing,
}

impl FileState {
    /// The word the listing uses.
    pub fn name(self) -> &'static str {
        match self {
            FileState::Complete => "complete",
            FileState::Recording => "recording",
            FileState::CutShort => "cut short",
            FileState::NoSidecar => "no sidecar",
            FileState::BadSidecar => "bad sidecar",
            FileState::DataMissing => "data missing",
        }
    }
}

/// One file of a run.
#[derive(Clone, Debug, Serialize)]
pub struct FileEntry {
    /// The data file's name (in the run's directory `directory`).
    pub name: String,
    /// The directory it is in.
    pub directory: String,
    /// What state it is in.
    pub state: FileState,
    /// Why the recorder ended it (`size`, `time`, `end of run`, `disk full`, `write error`),
    /// from its sidecar.
    pub ended_by: Option<String>,
    /// Its length on disk now, bytes (0 when the data file is missing).
    pub bytes: u64,
    /// Records in it, as its sidecar counts them (null without a sidecar, and for a file being
    /// written: its provisional sidecar counts nothing yet).
    pub records: Option<u64>,
    /// Its sidecar holds a time index.
    pub indexed: bool,
    /// First arrival (the index's) or, without an index, when it was opened: ns since the epoch.
    pub first_ns: Option<u64>,
    /// Last arrival (the index's) or, without an index, when it was closed (a file being
    /// written: when it was last modified): ns since the epoch.
    pub last_ns: Option<u64>,
    /// Everything odd about it, one line each.
    pub notes: Vec<String>,
    /// Where it is, for `--verify`.
    #[serde(skip)]
    pub path: PathBuf,
}

/// One stream of a run, over its files: the per-file ledgers of the sidecars added up.
#[derive(Clone, Debug, Serialize)]
pub struct StreamSummary {
    /// Source address and port (pcap files; raw files keep no source).
    pub source: Option<String>,
    /// Format stream id (e.g. VDIF thread).
    pub stream: u32,
    /// Files that hold it.
    pub files: usize,
    /// Records received (the sum over files).
    pub received: u64,
    /// Lost: `lost_in_files` plus `lost_between_files`.
    pub lost: u64,
    /// The sum of the per-file `lost` of the sidecars: holes inside a file.
    pub lost_in_files: u64,
    /// Numbers between one file's highest and the next file's lowest (of the files holding the
    /// stream, in recording order): holes at file boundaries, which no one file's ledger sees.
    /// A sender restart between files (the next file starting lower) counts none.
    pub lost_between_files: u64,
    /// Invalid records (the sum over files).
    pub invalid: u64,
    /// Lowest sequence number over the files.
    pub first_seq: Option<u64>,
    /// Highest sequence number over the files.
    pub last_seq: Option<u64>,
    /// Gap ranges: those of the files (including ranges a sidecar counted but did not list)
    /// plus the holes between files.
    pub gaps: u64,
}

/// One range of lost sequence numbers.
#[derive(Clone, Debug, Serialize)]
pub struct Hole {
    /// The stream's source (pcap).
    pub source: Option<String>,
    /// The stream.
    pub stream: u32,
    /// First lost number.
    pub first: u64,
    /// Last lost number.
    pub last: u64,
    /// Numbers in the range.
    pub count: u64,
    /// The file it is in; for a hole between files, the file before it.
    pub file: String,
    /// For a hole between files, the file after it; null for a hole inside `file`.
    pub next_file: Option<String>,
}

/// One recording run: the files one `record` wrote (one run id in their sidecars).
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// The run's id; null for files whose sidecars carry none (written before runs were
    /// identified) or that have no usable sidecar and match no identified run: such files are
    /// grouped per directory and prefix.
    pub id: Option<String>,
    /// The recorder's process id.
    pub pid: Option<u32>,
    /// When the run started, UTC, as its sidecars say.
    pub started_utc: Option<String>,
    /// The directories its files are in.
    pub directories: Vec<String>,
    /// The file-name prefixes of its files.
    pub prefixes: Vec<String>,
    /// The stream's format spec (of its first file with a sidecar).
    pub format: Option<String>,
    /// raw or pcap.
    pub file_format: Option<FileFormat>,
    /// Data files (missing ones included).
    pub file_count: usize,
    /// Files whose sidecar holds a time index.
    pub indexed: usize,
    /// First arrival over its files (see [`FileEntry::first_ns`]), UTC.
    pub first_utc: Option<String>,
    /// Last arrival over its files, UTC.
    pub last_utc: Option<String>,
    /// `first_utc` in ns since the epoch.
    pub first_ns: Option<u64>,
    /// `last_utc` in ns since the epoch.
    pub last_ns: Option<u64>,
    /// From the first to the last arrival, seconds.
    pub duration_s: f64,
    /// Bytes of its files on disk.
    pub bytes: u64,
    /// Records in its files, as their sidecars count them (missing files not included).
    pub records: u64,
    /// bytes over duration, bits per second (null when the duration is 0).
    pub rate_bps: Option<f64>,
    /// Its streams over its files.
    pub streams: Vec<StreamSummary>,
    /// Lost over its streams (inside files and between them).
    pub lost: u64,
    /// Gap ranges over its streams.
    pub holes_total: u64,
    /// The first holes (at most [`MAX_HOLES`]), in recording order.
    pub holes: Vec<Hole>,
    /// `complete` (every file is), `recording` (a file is being written) or `incomplete`.
    pub state: String,
    /// Files per state.
    pub states: BTreeMap<String, usize>,
    /// `--verify`: whether `verify` found its files sound and matching their sidecars; null
    /// when not checked.
    pub verified: Option<bool>,
    /// `--verify`: the first problem `verify` found.
    pub verify_problem: Option<String>,
    /// Remarks on the run as a whole.
    pub notes: Vec<String>,
    /// Its files, in recording order.
    pub files: Vec<FileEntry>,
}

/// One directory scanned.
#[derive(Clone, Debug, Serialize)]
pub struct DirectorySummary {
    /// The directory as given.
    pub path: String,
    /// Bytes free on its filesystem for this user (null if it cannot be read).
    pub free_bytes: Option<u64>,
    /// Size of its filesystem, bytes.
    pub total_bytes: Option<u64>,
    /// Data files found (each in a run).
    pub files: usize,
    /// Entries that are not recordings (other files, subdirectories, leftovers), not read.
    pub stray: usize,
    /// The first few of them.
    pub stray_names: Vec<String>,
}

/// What the directories hold.
#[derive(Clone, Debug, Serialize)]
pub struct Catalog {
    /// Schema name and version.
    pub schema: &'static str,
    /// The directories, as given.
    pub directories: Vec<DirectorySummary>,
    /// The runs, in order of their start.
    pub runs: Vec<RunSummary>,
    /// `--verify`: every run checked was sound; null when not checked.
    pub verified: Option<bool>,
}

/// How a file is grouped: by its run id, or (no run id) by directory and prefix.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Run(String),
    Loose(String, String),
}

/// A file as found, before grouping.
struct Found {
    entry: FileEntry,
    prefix: String,
    side: Option<Sidecar>,
    /// Its sidecar says nothing trustworthy (none, or unreadable): it may join the identified
    /// run of its directory and prefix.
    adoptable: bool,
}

/// The prefix of a recorded file name `PREFIX-YYYYMMDDTHHMMSSZ-NNNN.EXT[.part]`; the whole stem
/// for another name.
fn prefix_of(name: &str) -> String {
    let base = name.strip_suffix(PART_SUFFIX).unwrap_or(name);
    if looks_recorded(base) {
        let stem = base.rsplit_once('.').map_or(base, |(s, _)| s);
        if let Some(p) = stem.rsplitn(3, '-').nth(2) {
            return p.to_string();
        }
    }
    base.rsplit_once('.').map_or(base, |(s, _)| s).to_string()
}

/// Nanoseconds since the epoch of a sidecar's UTC time (`YYYY-MM-DDTHH:MM:SS[.fff...]Z`, read
/// as every ISO 8601 time of wirespeed is: [`crate::calendar::parse_utc`]); None for anything
/// else.
pub fn parse_utc(s: &str) -> Option<u64> {
    crate::calendar::parse_utc(s).ok()
}

fn mtime_ns(md: &std::fs::Metadata) -> Option<u64> {
    let t = md.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
    u64::try_from(t.as_nanos()).ok()
}

/// A data file's entry from its sidecar (or the reason it has none).
fn data_file(
    dir: &Path,
    name: &str,
    md: Option<&std::fs::Metadata>,
    side: Option<std::result::Result<Sidecar, String>>,
) -> Found {
    let part = name.ends_with(PART_SUFFIX);
    let base = name.strip_suffix(PART_SUFFIX).unwrap_or(name);
    let mut notes = Vec::new();
    let bytes = md.map_or(0, |m| m.len());
    let (state, sidecar, adoptable) = match side {
        None if md.is_none() => (FileState::DataMissing, None, false),
        None if part => {
            notes.push("no provisional sidecar (.NAME.json.part) beside it".to_string());
            (FileState::Recording, None, true)
        }
        None => (FileState::NoSidecar, None, true),
        Some(Err(why)) => {
            notes.push(why);
            (if part { FileState::Recording } else { FileState::BadSidecar }, None, true)
        }
        Some(Ok(s)) if md.is_none() => {
            notes.push("its sidecar is here, its data file is gone".to_string());
            (FileState::DataMissing, Some(s), false)
        }
        Some(Ok(s)) if part => (FileState::Recording, Some(s), false),
        Some(Ok(s)) if !s.complete => (FileState::CutShort, Some(s), false),
        Some(Ok(s)) => (FileState::Complete, Some(s), false),
    };
    let mut entry = FileEntry {
        name: name.to_string(),
        directory: dir.display().to_string(),
        state,
        ended_by: None,
        bytes,
        records: None,
        indexed: false,
        first_ns: None,
        last_ns: None,
        notes,
        path: dir.join(name),
    };
    if let Some(s) = &sidecar {
        // A provisional sidecar counts nothing yet.
        entry.records = (state != FileState::Recording).then_some(s.records);
        entry.indexed = s.index.is_some();
        let arrival = s.index.as_ref().and_then(|i| i.arrival_ns);
        entry.first_ns = arrival.map(|a| a[0]).or_else(|| parse_utc(&s.opened_utc));
        entry.last_ns = arrival.map(|a| a[1]).or_else(|| parse_utc(&s.closed_utc));
        if state != FileState::Recording {
            entry.ended_by = Some(s.ended_by.clone());
            if s.file != base {
                entry.notes.push(format!("its sidecar describes a file named {:?}", s.file));
            }
            if md.is_some() && s.bytes != bytes {
                entry.notes.push(format!("{bytes} bytes on disk, its sidecar says {}", s.bytes));
            }
        }
        if state == FileState::CutShort && s.unwritten > 0 {
            entry.notes.push(format!("{} records received after it never reached the disk", s.unwritten));
        }
    }
    if entry.last_ns.is_none() && state == FileState::Recording {
        entry.last_ns = md.and_then(mtime_ns);
    }
    if state == FileState::Recording {
        if let Some(pid) = sidecar.as_ref().and_then(|s| s.run.as_ref()).map(|r| r.pid) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                entry.notes.push(format!(
                    "its recorder (pid {pid}) is not running on this host: killed while writing, or recording elsewhere"
                ));
            }
        }
    }
    Found { entry, prefix: prefix_of(name), side: sidecar, adoptable }
}

/// List one directory: its data files, and its summary.
fn scan_dir(dir: &Path) -> Result<(DirectorySummary, Vec<Found>)> {
    let md = std::fs::metadata(dir).map_err(|e| {
        Error::usage_io(format!("cannot read {}: {e} (give directories recordings were written to)", dir.display()), &e)
    })?;
    if !md.is_dir() {
        return Err(Error::invalid(format!(
            "{} is not a directory: give the directory recordings were written to",
            dir.display()
        )));
    }
    let rd = std::fs::read_dir(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::PermissionDenied => Error::permission(format!("cannot list {}: {e}", dir.display())),
        _ => Error::os(format!("cannot list {}: {e}", dir.display()), &e),
    })?;
    let space = crate::sys::file::space(dir).ok();
    let mut summary = DirectorySummary {
        path: dir.display().to_string(),
        free_bytes: space.map(|s| s.1),
        total_bytes: space.map(|s| s.0),
        files: 0,
        stray: 0,
        stray_names: Vec::new(),
    };
    let mut names: Vec<(String, Option<std::fs::Metadata>)> = Vec::new();
    let stray = |s: &mut DirectorySummary, name: String| {
        s.stray += 1;
        if s.stray_names.len() < MAX_STRAY_NAMES {
            s.stray_names.push(name);
        }
    };
    for e in rd {
        let Ok(e) = e else {
            stray(&mut summary, "(an entry that cannot be read)".into());
            continue;
        };
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            stray(&mut summary, e.file_name().to_string_lossy().into_owned());
            continue;
        };
        match std::fs::metadata(e.path()) {
            Ok(m) if m.is_file() => names.push((name, Some(m))),
            _ => stray(&mut summary, name),
        }
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let present: std::collections::HashSet<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    let mut found = Vec::new();
    let mut strays = Vec::new();
    for (name, md) in &names {
        let data_of_sidecar = name.strip_suffix(".json").filter(|b| !b.starts_with('.'));
        if let Some(hidden) = name.strip_prefix('.') {
            // A provisional sidecar (.NAME.json.part) or a scan chunk's hidden sidecar is read
            // with its data file; anything else hidden is not ours.
            let of = hidden.strip_suffix(".json.part").map(super::part_name);
            let of_chunk = hidden.strip_suffix(".json");
            let known =
                of.as_deref().is_some_and(|d| present.contains(d)) || of_chunk.is_some_and(|d| present.contains(d));
            if !known {
                strays.push(name.clone());
            }
            continue;
        }
        if let Some(base) = data_of_sidecar {
            if present.contains(base) {
                continue; // read with its data file
            }
            // A sidecar alone: its data file is gone, or it is some other JSON file.
            match verify::sidecar_of_file(&dir.join(name)) {
                Ok(s) => found.push(data_file(dir, base, None, Some(Ok(s)))),
                Err(_) => strays.push(name.clone()),
            }
            continue;
        }
        let side = verify::sidecar_of(&dir.join(name)).map(|(_, r)| r);
        if side.is_none() && !looks_recorded(name) {
            strays.push(name.clone());
            continue;
        }
        found.push(data_file(dir, name, md.as_ref(), side));
    }
    for s in strays {
        stray(&mut summary, s);
    }
    summary.files = found.len();
    Ok((summary, found))
}

/// Per-stream accumulator of a run.
struct StreamAcc {
    sum: StreamSummary,
    prev: Option<(u64, String)>,
}

/// Scan `dirs` (not recursively) and describe the recording runs they hold. Errors only when a
/// directory is missing or cannot be listed; everything about the files is in the catalog.
pub fn scan(dirs: &[PathBuf]) -> Result<Catalog> {
    let mut directories = Vec::new();
    let mut all = Vec::new();
    for d in dirs {
        let (summary, found) = scan_dir(d)?;
        directories.push(summary);
        all.extend(found);
    }
    // Group: by run id; files without a trustworthy sidecar join the one identified run of
    // their directory and prefix, if there is exactly one; the rest by directory and prefix.
    let mut owners: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for f in &all {
        if let Some(r) = f.side.as_ref().and_then(|s| s.run.as_ref()) {
            let v = owners.entry((f.entry.directory.clone(), f.prefix.clone())).or_default();
            if !v.contains(&r.id) {
                v.push(r.id.clone());
            }
        }
    }
    let mut groups: BTreeMap<Key, Vec<Found>> = BTreeMap::new();
    for f in all {
        let loose = (f.entry.directory.clone(), f.prefix.clone());
        let key = match f.side.as_ref().and_then(|s| s.run.as_ref()) {
            Some(r) => Key::Run(r.id.clone()),
            None => match owners.get(&loose) {
                Some(ids) if f.adoptable && ids.len() == 1 => Key::Run(ids[0].clone()),
                _ => Key::Loose(loose.0, loose.1),
            },
        };
        groups.entry(key).or_default().push(f);
    }
    let mut runs: Vec<RunSummary> = groups.into_iter().map(|(k, files)| summarize(k, files)).collect();
    runs.sort_by_key(|r| {
        (r.started_utc.as_deref().and_then(parse_utc).or(r.first_ns).unwrap_or(u64::MAX), r.id.clone())
    });
    Ok(Catalog { schema: CATALOG_SCHEMA, directories, runs, verified: None })
}

fn summarize(key: Key, mut files: Vec<Found>) -> RunSummary {
    // Recording order: names are PREFIX-TIME-INDEX, so name order is the order of writing
    // (a file whose sidecar is lost keeps its place).
    files.sort_by(|a, b| (&a.entry.name, &a.entry.directory).cmp(&(&b.entry.name, &b.entry.directory)));
    let ident = files.iter().find_map(|f| f.side.as_ref().and_then(|s| s.run.clone()));
    let first_side = files.iter().find_map(|f| f.side.as_ref());
    let mut run = RunSummary {
        id: ident.as_ref().map(|r| r.id.clone()),
        pid: ident.as_ref().map(|r| r.pid),
        started_utc: ident.as_ref().map(|r| r.started_utc.clone()),
        directories: Vec::new(),
        prefixes: Vec::new(),
        format: first_side.map(|s| s.format.clone()),
        file_format: first_side.map(|s| s.file_format),
        file_count: files.len(),
        indexed: 0,
        first_utc: None,
        last_utc: None,
        first_ns: None,
        last_ns: None,
        duration_s: 0.0,
        bytes: 0,
        records: 0,
        rate_bps: None,
        streams: Vec::new(),
        lost: 0,
        holes_total: 0,
        holes: Vec::new(),
        state: String::new(),
        states: BTreeMap::new(),
        verified: None,
        verify_problem: None,
        notes: Vec::new(),
        files: Vec::new(),
    };
    if matches!(key, Key::Loose(..)) && files.iter().any(|f| f.side.is_some()) {
        run.notes.push(
            "sidecars without a run id (recorded before runs were identified): grouped by directory and prefix".into(),
        );
    }
    let mut streams: Vec<StreamAcc> = Vec::new();
    let mut formats = Vec::new();
    let mut across_unknown = false;
    for f in &files {
        let e = &f.entry;
        if !run.directories.contains(&e.directory) {
            run.directories.push(e.directory.clone());
        }
        if !run.prefixes.contains(&f.prefix) {
            run.prefixes.push(f.prefix.clone());
        }
        run.indexed += usize::from(e.indexed);
        run.bytes = run.bytes.saturating_add(e.bytes);
        if e.state != FileState::DataMissing {
            run.records = run.records.saturating_add(e.records.unwrap_or(0));
        }
        run.first_ns = match (run.first_ns, e.first_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        run.last_ns = match (run.last_ns, e.last_ns) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        *run.states.entry(e.state.name().to_string()).or_default() += 1;
        let ledger = f.side.as_ref().filter(|_| !matches!(e.state, FileState::Recording | FileState::DataMissing));
        let Some(s) = ledger else {
            // What this file holds is unknown (no ledger yet, or none readable), so the numbers
            // between its neighbours may be in it: no loss is counted across it.
            // Every stream forgets its last number (no short-circuit).
            let cut = streams.iter_mut().fold(false, |cut, a| a.prev.take().is_some() | cut);
            if cut && !across_unknown {
                across_unknown = true;
                run.notes.push(format!(
                    "loss between files is not counted across {} ({}: no ledger of it to read)",
                    e.name,
                    e.state.name()
                ));
            }
            if let Some(s) = &f.side {
                if !formats.contains(&s.format) {
                    formats.push(s.format.clone());
                }
            }
            continue;
        };
        if !formats.contains(&s.format) {
            formats.push(s.format.clone());
        }
        for fs in &s.streams {
            let i = match streams.iter().position(|a| a.sum.source == fs.source && a.sum.stream == fs.stream) {
                Some(i) => i,
                None => {
                    streams.push(StreamAcc {
                        sum: StreamSummary {
                            source: fs.source.clone(),
                            stream: fs.stream,
                            files: 0,
                            received: 0,
                            lost: 0,
                            lost_in_files: 0,
                            lost_between_files: 0,
                            invalid: 0,
                            first_seq: None,
                            last_seq: None,
                            gaps: 0,
                        },
                        prev: None,
                    });
                    streams.len() - 1
                }
            };
            let acc = &mut streams[i];
            let sum = &mut acc.sum;
            sum.files += 1;
            sum.received = sum.received.saturating_add(fs.counts.received);
            sum.lost_in_files = sum.lost_in_files.saturating_add(fs.counts.lost);
            sum.invalid = sum.invalid.saturating_add(fs.counts.invalid);
            sum.gaps = sum.gaps.saturating_add(fs.gaps.len() as u64).saturating_add(fs.counts.ranges_dropped);
            sum.first_seq = match (sum.first_seq, fs.first_seq) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            sum.last_seq = match (sum.last_seq, fs.last_seq) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            // The hole between the previous file holding this stream and this one.
            if let (Some((prev_last, prev_file)), Some(first)) = (&acc.prev, fs.first_seq) {
                if let Some(from) = prev_last.checked_add(1).filter(|f| *f < first) {
                    let count = first - from;
                    sum.lost_between_files = sum.lost_between_files.saturating_add(count);
                    sum.gaps = sum.gaps.saturating_add(1);
                    if run.holes.len() < MAX_HOLES {
                        run.holes.push(Hole {
                            source: fs.source.clone(),
                            stream: fs.stream,
                            first: from,
                            last: first - 1,
                            count,
                            file: prev_file.clone(),
                            next_file: Some(e.name.clone()),
                        });
                    }
                }
            }
            for g in &fs.gaps {
                if run.holes.len() >= MAX_HOLES {
                    break;
                }
                run.holes.push(Hole {
                    source: fs.source.clone(),
                    stream: fs.stream,
                    first: g.first,
                    last: g.last,
                    count: g.count,
                    file: e.name.clone(),
                    next_file: None,
                });
            }
            if let Some(last) = fs.last_seq {
                acc.prev = Some((last, e.name.clone()));
            }
        }
    }
    if formats.len() > 1 {
        run.notes.push(format!("its files are of {} formats: {}", formats.len(), formats.join(", ")));
    }
    for a in streams {
        let mut s = a.sum;
        s.lost = s.lost_in_files.saturating_add(s.lost_between_files);
        run.lost = run.lost.saturating_add(s.lost);
        run.holes_total = run.holes_total.saturating_add(s.gaps);
        run.streams.push(s);
    }
    run.streams.sort_by(|a, b| (&a.source, a.stream).cmp(&(&b.source, b.stream)));
    run.first_utc = run.first_ns.map(utc_iso);
    run.last_utc = run.last_ns.map(utc_iso);
    if let (Some(a), Some(b)) = (run.first_ns, run.last_ns) {
        run.duration_s = b.saturating_sub(a) as f64 / 1e9;
    }
    if run.duration_s > 0.0 {
        run.rate_bps = Some(run.bytes as f64 * 8.0 / run.duration_s);
    }
    let states: Vec<FileState> = files.iter().map(|f| f.entry.state).collect();
    run.state = if states.contains(&FileState::Recording) {
        "recording"
    } else if states.iter().all(|s| *s == FileState::Complete) {
        "complete"
    } else {
        "incomplete"
    }
    .into();
    run.files = files.into_iter().map(|f| f.entry).collect();
    run
}

/// Check every run's files with `verify` (their data re-read, every record checked, compared
/// with the sidecars): each run gets `verified` and its first problem. Files still being
/// written are left out (they cannot match a sidecar not yet written), and so are missing
/// ones. Returns whether every run checked was sound.
pub fn verify_runs(cat: &mut Catalog, window: u64) -> bool {
    let opts = VerifyOptions { format: None, window };
    let mut all_ok = true;
    for run in &mut cat.runs {
        let files: Vec<PathBuf> = run
            .files
            .iter()
            .filter(|f| !matches!(f.state, FileState::Recording | FileState::DataMissing))
            .map(|f| f.path.clone())
            .collect();
        let left = run.files.len() - files.len();
        if left > 0 {
            run.notes.push(format!("--verify: {left} file(s) being written or missing were not checked"));
        }
        if files.is_empty() {
            continue;
        }
        let found = Collected { files, ..Default::default() };
        let (ok, problem) = match verify::verify(&found, &opts) {
            Ok(rep) => {
                let first = rep.files.iter().find_map(|v| {
                    let name =
                        Path::new(&v.path).file_name().map_or(v.path.clone(), |n| n.to_string_lossy().into_owned());
                    v.problems.first().map(|p| format!("{name}: {p}"))
                });
                (
                    rep.problems == 0,
                    if rep.problems == 0 { None } else { first.or(Some("verify found problems".into())) },
                )
            }
            Err(e) => (false, Some(e.to_string())),
        };
        all_ok &= ok;
        run.verified = Some(ok);
        run.verify_problem = problem;
    }
    cat.verified = Some(all_ok);
    all_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{GapRange, LedgerCounts};
    use crate::spool::{file_name, sidecar_name, FileStream, ReadLayout, RunIdentity};
    use crate::wire::{ByteOrder, Counter, Format};
    use std::sync::Arc;

    const T0: u64 = 1_795_350_896_000_000_000;

    /// A finished file of `run` in `dir` with one stream holding `first..=last` less `gaps`,
    /// and its sidecar.
    fn recorded(dir: &Path, run: &RunIdentity, index: u32, first: u64, last: u64, gaps: &[(u64, u64)]) -> String {
        let fmt: Arc<dyn Format> = Arc::new(Counter::new(64, ByteOrder::Be).unwrap());
        let layout = ReadLayout::for_stream(&fmt, FileFormat::Raw).unwrap();
        let name = file_name("t", T0, index, "raw");
        let mut s =
            Sidecar::blank(&name, &layout, &fmt.spec(), run, T0 + u64::from(index) * 1_000_000_000, "size", true);
        let lost: u64 = gaps.iter().map(|(a, b)| b - a + 1).sum();
        let received = last.saturating_sub(first).saturating_add(1).saturating_sub(lost);
        let counts = LedgerCounts { received, lost, ..Default::default() };
        s.streams = vec![FileStream {
            source: None,
            stream: 0,
            counts,
            first_seq: Some(first),
            last_seq: Some(last),
            gaps: gaps.iter().map(|&(a, b)| GapRange { first: a, last: b, count: b - a + 1 }).collect(),
            segments: Vec::new(),
            heaps: None,
        }];
        s.total = counts;
        s.records = received;
        s.bytes = received.saturating_mul(64);
        s.closed_utc = utc_iso(T0 + u64::from(index) * 1_000_000_000 + 500_000_000);
        std::fs::write(dir.join(&name), vec![0u8; 64 * (received.min(100) as usize)]).unwrap();
        std::fs::write(dir.join(sidecar_name(&name)), serde_json::to_vec(&s).unwrap()).unwrap();
        name
    }

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ws-catalog-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn catalog_counts_loss_inside_and_between_files_and_never_across_an_unknown_file() {
        let d = temp("loss");
        let run = RunIdentity::new();
        recorded(&d, &run, 1, 0, 99, &[]);
        recorded(&d, &run, 2, 105, 200, &[(150, 150)]);
        let third = recorded(&d, &run, 3, 201, 300, &[]);
        let cat = scan(std::slice::from_ref(&d)).unwrap();
        assert_eq!(cat.runs.len(), 1);
        let r = &cat.runs[0];
        assert_eq!(r.id.as_deref(), Some(run.id.as_str()));
        assert_eq!((r.file_count, r.lost, r.holes_total, r.state.as_str()), (3, 6, 2, "complete"));
        let s = &r.streams[0];
        assert_eq!((s.lost_in_files, s.lost_between_files, s.first_seq, s.last_seq), (1, 5, Some(0), Some(300)));
        assert_eq!((r.holes[0].first, r.holes[0].last, r.holes[0].next_file.is_some()), (100, 104, true));
        assert_eq!((r.holes[1].first, r.holes[1].next_file.is_none()), (150, true));
        assert_eq!(r.first_ns, Some(T0 + 1_000_000_000));
        assert_eq!(r.last_ns, Some(T0 + 3_500_000_000));
        // The second file's sidecar broken: its numbers are unknown, not lost.
        std::fs::write(d.join(sidecar_name(&file_name("t", T0, 2, "raw"))), b"{\"schema\": 1").unwrap();
        let cat = scan(std::slice::from_ref(&d)).unwrap();
        let r = &cat.runs[0];
        assert_eq!(r.file_count, 3);
        assert_eq!(r.files[1].state, FileState::BadSidecar);
        assert_eq!(r.lost, 0, "{:?}", r.streams);
        assert!(r.notes.iter().any(|n| n.contains("not counted across")), "{:?}", r.notes);
        // The third file's data gone: its sidecar alone says it was there.
        std::fs::remove_file(d.join(&third)).unwrap();
        let cat = scan(std::slice::from_ref(&d)).unwrap();
        assert_eq!(cat.runs[0].files[2].state, FileState::DataMissing);
        assert_eq!(cat.runs[0].records, 100);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn catalog_never_panics_on_hostile_files() {
        let d = temp("hostile");
        let run = RunIdentity::new();
        // Numbers at the edge of u64: sums saturate, a hole before u64::MAX is counted once.
        recorded(&d, &run, 1, 0, u64::MAX - 10, &[(5, u64::MAX - 20)]);
        recorded(&d, &run, 2, u64::MAX - 1, u64::MAX, &[]);
        recorded(&d, &run, 3, 0, u64::MAX, &[(1, u64::MAX - 1)]);
        // Garbage where sidecars and recordings are expected.
        std::fs::write(d.join("x-20261124T010203Z-0001.raw"), b"data").unwrap();
        std::fs::write(d.join("x-20261124T010203Z-0001.raw.json"), [0xffu8, 0xfe, 0, 1]).unwrap();
        std::fs::write(d.join("y-20261124T010203Z-0001.raw.json"), b"null").unwrap();
        std::fs::write(d.join(".z-20261124T010203Z-0001.raw.json.part"), b"{}").unwrap();
        std::fs::write(d.join("z-20261124T010203Z-0001.raw.part"), b"").unwrap();
        std::fs::create_dir_all(d.join("sub")).unwrap();
        let cat = scan(std::slice::from_ref(&d)).unwrap();
        let t = cat.runs.iter().find(|r| r.prefixes == ["t"]).unwrap();
        assert_eq!(t.file_count, 3);
        assert_eq!(t.lost, u64::MAX, "saturated");
        let states: Vec<FileState> = cat.runs.iter().flat_map(|r| r.files.iter().map(|f| f.state)).collect();
        assert!(states.contains(&FileState::BadSidecar) && states.contains(&FileState::Recording), "{states:?}");
        // The JSON file that is no sidecar and the directory are strays.
        assert_eq!(cat.directories[0].stray, 2, "{:?}", cat.directories[0].stray_names);
        assert!(serde_json::to_string(&cat).is_ok());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn catalog_of_nothing_and_of_no_directory() {
        let d = temp("none");
        let cat = scan(std::slice::from_ref(&d)).unwrap();
        assert!(cat.runs.is_empty() && cat.directories[0].stray == 0);
        let e = scan(&[d.join("missing")]).unwrap_err();
        assert_eq!(e.kind(), crate::error::Kind::NotFound);
        std::fs::write(d.join("f"), b"").unwrap();
        assert_eq!(scan(&[d.join("f")]).unwrap_err().kind(), crate::error::Kind::Invalid);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn utc_times_parse_back() {
        for ns in [0u64, 1_795_350_896_789_000_000, 951_782_400_000_000_000] {
            assert_eq!(parse_utc(&utc_iso(ns)), Some(ns));
        }
        assert_eq!(parse_utc("2026-11-22T12:34:56Z"), Some(1_795_350_896_000_000_000));
        assert_eq!(parse_utc("2026-11-22T12:34:56.000000001Z"), Some(1_795_350_896_000_000_001));
        for bad in [
            "",
            "x",
            "2026-13-22T12:34:56Z",
            "2026-11-22T12:34:56.Z",
            "9999999999999999999999",
            "2026-11-22T12:34:56.1234567890Z",
            "2026-11-22T1é:34:56Z",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn prefixes_of_recorded_names() {
        assert_eq!(prefix_of("scan-1-20261124T010203Z-0001.vdif"), "scan-1");
        assert_eq!(prefix_of("scan-1-20261124T010203Z-0001.vdif.part"), "scan-1");
        assert_eq!(prefix_of("other.pcap"), "other");
    }
}
