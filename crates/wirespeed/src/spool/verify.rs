//! `wirespeed verify`: re-read recordings, independently of the ledger kept while capturing,
//! and compare with each file's sidecar.
//!
//! Every record is checked again by the format (sync words, CRC, counter pattern...), each file
//! gets its own ledger, and the files of a directory are also read as one recording in name
//! order, so loss between two files shows too.
//!
//! The verdict keeps three facts apart, because each has its own cause and remedy:
//! 1. **content**: does what the file holds match what its sidecar says it holds (a file
//!    damaged or changed after recording does not);
//! 2. **completeness**: is the file whole, and if not why (a full disk stopped the recorder, the
//!    recorder was killed and left a `.part`, the file ends inside a record);
//! 3. **the stream**: did the data lose packets, or carry invalid ones, before it was written.
//!
//! Nothing is claimed that was not checked: records that could not be read (cut short by a
//! capture's snap length, not UDP) are problems, a file without a sidecar is said to have none,
//! and only regular files are read, each up to the length it had when opened.

use super::{
    looks_recorded, reasons, scan, sidecar_name, sidecar_part_name, FileFormat, FileLedger, FileStream, ReadLayout,
    RecordWalker, Sidecar, PART_SUFFIX, PCAP_GLOBAL_LEN, SIDECAR_SCHEMAS_READ,
};
use crate::error::{Error, Kind, Result};
use crate::ledger::LedgerCounts;
use crate::rx::InvalidReasons;
use crate::units;
use crate::wire::{spec, Format};
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Schema of `verify --json`. Version 2: each file's verdict is split into `content`,
/// `complete`/`incomplete` and the stream's ledger; unreadable records, skipped files and
/// sidecars without their data file are reported.
pub const VERIFY_SCHEMA: &str = "wirespeed.verify/2";

/// What `verify` found in one file.
#[derive(Clone, Debug, Serialize)]
pub struct FileVerdict {
    /// The data file.
    pub path: String,
    /// Its sidecar, when there is one.
    pub sidecar: Option<String>,
    /// raw or pcap.
    pub file_format: FileFormat,
    /// Format spec the records were checked against.
    pub format: String,
    /// File length read, bytes.
    pub bytes: u64,
    /// Whole records read.
    pub records: u64,
    /// Bytes at the end that do not make a whole record.
    pub trailing_bytes: u64,
    /// Per-stream ledgers of this file.
    pub streams: Vec<FileStream>,
    /// Totals over its streams.
    pub total: LedgerCounts,
    /// Invalid records by reason.
    pub invalid_by_reason: InvalidReasons,
    /// pcap records whose payload could not be checked: `cut_short` plus `not_udp`.
    pub unreadable: u64,
    /// pcap records captured shorter than the packet (a snap length such as `tcpdump -s 100`).
    pub cut_short: u64,
    /// pcap records that are not a whole IPv4/UDP or IPv6/UDP datagram.
    pub not_udp: u64,
    /// wirespeed end-of-stream messages (in captures made by other tools): not data records.
    pub control: u64,
    /// Fact 1, the content against the sidecar: `matches`, `differs`, `no sidecar` (nothing to
    /// compare with), `not finished` (a `.part` whose recorder never wrote the file's ledger),
    /// `unreadable sidecar` or `not read` (the file could not be read as a recording).
    pub content: String,
    /// How the content differs from the sidecar, one line each.
    pub differences: Vec<String>,
    /// Fact 2: nothing shows the file incomplete: the recorder finished it (when it has a
    /// sidecar; not a `.part`), it is readable to its end and ends on a whole record. For a
    /// file without a sidecar only the last of these can be known.
    pub complete: bool,
    /// Why not, when it is not.
    pub incomplete: Option<String>,
    /// Records received that never reached the disk, as the sidecar counts them.
    pub unwritten: u64,
    /// What the sidecar adds about the stream (ring-full drops, datagrams left out).
    pub notes: Vec<String>,
    /// Everything wrong, one line each; empty when the file is sound and matches its sidecar.
    pub problems: Vec<String>,
}

impl FileVerdict {
    /// A verdict on a file before anything of it was read: nothing counted, no content judged,
    /// not known to be complete.
    fn unread(path: String, sidecar: Option<String>, file_format: FileFormat, format: String) -> FileVerdict {
        FileVerdict {
            path,
            sidecar,
            file_format,
            format,
            bytes: 0,
            records: 0,
            trailing_bytes: 0,
            streams: Vec::new(),
            total: LedgerCounts::default(),
            invalid_by_reason: InvalidReasons::default(),
            unreadable: 0,
            cut_short: 0,
            not_udp: 0,
            control: 0,
            content: String::new(),
            differences: Vec::new(),
            complete: false,
            incomplete: None,
            unwritten: 0,
            notes: Vec::new(),
            problems: Vec::new(),
        }
    }
}

/// A file of a directory that was not read, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    /// The file.
    pub path: String,
    /// Why it was not read.
    pub reason: String,
}

/// One recording run among the files: the files one `record` wrote (told apart by the run
/// identity in their sidecars), read as one recording.
#[derive(Clone, Debug, Serialize)]
pub struct RunVerdict {
    /// The run's id from its sidecars; `None` for files whose sidecars carry none (written by
    /// a wirespeed before run ids, or files without a sidecar), which are read as one recording.
    pub id: Option<String>,
    /// The recorder's process id, when the sidecars say.
    pub pid: Option<u32>,
    /// When the run started, UTC, when the sidecars say.
    pub started_utc: Option<String>,
    /// Its data files, in recording order.
    pub files: Vec<String>,
    /// Its per-stream ledgers across its file boundaries.
    pub streams: Vec<FileStream>,
    /// Its totals.
    pub total: LedgerCounts,
    /// Lost per million expected, this run.
    pub drops_per_million: f64,
    /// Whole data records read and checked, this run.
    pub records: u64,
}

/// The verdict on all files given.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// Schema name and version.
    pub schema: &'static str,
    /// One verdict per file, in recording order.
    pub files: Vec<FileVerdict>,
    /// Files of the directories given that are not recordings, not read.
    pub skipped: Vec<Skipped>,
    /// Each recording run on its own (one, unless several recorders wrote into the same
    /// directory), in the order their first files come.
    pub runs: Vec<RunVerdict>,
    /// With one run, its files read as one recording: per-stream ledgers across file
    /// boundaries. Empty with several runs (each has its own in `runs`).
    pub streams: Vec<FileStream>,
    /// Totals across all files (with several runs: the sum of theirs).
    pub total: LedgerCounts,
    /// Lost per million expected, all files.
    pub drops_per_million: f64,
    /// Whole data records read and checked, all files (not unreadable or end-of-stream ones).
    pub records: u64,
    /// Files whose content matches their sidecar.
    pub matching: usize,
    /// Files with no sidecar to compare with.
    pub without_sidecar: usize,
    /// Files that are not complete.
    pub incomplete: usize,
    /// Records received that never reached the disk, all sidecars.
    pub unwritten: u64,
    /// Remarks on the recording as a whole.
    pub notes: Vec<String>,
    /// Problems found, all files.
    pub problems: usize,
}

/// What the user told `verify`.
#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    /// Check records with this format instead of the sidecar's (or for files without one).
    pub format: Option<Arc<dyn Format>>,
    /// Ledger reorder window.
    pub window: u64,
}

/// What to read: the recordings found, in recording order, and what was passed over.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    /// Data files, in name order per directory.
    pub files: Vec<PathBuf>,
    /// Sidecars in a directory whose data file is gone.
    pub orphans: Vec<PathBuf>,
    /// Files of a directory that are not recordings.
    pub skipped: Vec<Skipped>,
}

/// pcap magic numbers, both byte orders, and pcapng's section header block type.
fn magic_kind(head: &[u8]) -> Option<&'static str> {
    if super::pcap::magic_of(head).is_some() {
        Some("pcap")
    } else if head.get(..4)? == super::pcap::PCAPNG_MAGIC.to_le_bytes() {
        Some("pcapng")
    } else {
        None
    }
}

fn head_of(path: &Path) -> Vec<u8> {
    let mut head = Vec::with_capacity(PCAP_GLOBAL_LEN);
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(PCAP_GLOBAL_LEN as u64).read_to_end(&mut head);
    }
    head
}

fn name_of(p: &Path) -> &str {
    p.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

fn has_pcap_name(p: &Path) -> bool {
    let n = name_of(p);
    let n = n.strip_suffix(PART_SUFFIX).unwrap_or(n);
    n.ends_with(".pcap")
}

/// What a regular-file check says about a path that is not one.
fn not_regular(md: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    if t.is_dir() {
        "a directory (verify does not descend into subdirectories)"
    } else if t.is_fifo() {
        "a fifo, not a regular file"
    } else if t.is_char_device() || t.is_block_device() {
        "a device, not a regular file"
    } else if t.is_socket() {
        "a socket, not a regular file"
    } else {
        "not a regular file"
    }
}

/// Whether `data` is `wirespeed extract`'s output: its `.json` is an extract's ledger.
fn is_extract(data: &Path) -> bool {
    use std::io::Read;
    let Some(side) = sidecar_path(data) else { return false };
    // The ledger names its schema first: its first bytes say, without reading the rest.
    let mut head = [0u8; 256];
    let Ok(n) = std::fs::File::open(&side).and_then(|f| f.take(256).read(&mut head)) else { return false };
    let head = String::from_utf8_lossy(&head[..n]);
    head.trim_start().starts_with('{') && head.contains(&format!("\"schema\": \"{}\"", super::extract::EXTRACT_SCHEMA))
}

/// The files named by `paths`: a file is read as given (it must be a regular file); a
/// directory expands to its recordings in name order, and anything else in it is named in
/// `skipped`. A file without a sidecar counts as a recording when it is named the way `record`
/// names files, or (with no sidecar in the directory) when `format` is given and it is a pcap or
/// has the format's extension.
pub fn collect(paths: &[PathBuf], format: Option<&Arc<dyn Format>>) -> Result<Collected> {
    let mut out = Collected::default();
    for p in paths {
        let md = std::fs::metadata(p).map_err(|e| {
            Error::usage_io(format!("cannot read {}: {e} (give recorded files or their directory)", p.display()), &e)
        })?;
        if md.is_file() {
            out.files.push(p.clone());
            continue;
        }
        if !md.is_dir() {
            return Err(Error::invalid(format!(
                "{} is {}: verify reads recorded files or their directory",
                p.display(),
                not_regular(&md)
            )));
        }
        let before = out.files.len() + out.orphans.len();
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|e| Error::os(format!("cannot list {}: {e}", p.display()), &e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|e| !name_of(e).starts_with('.'))
            .collect();
        entries.sort();
        let has_sidecar = |f: &Path| sidecar_path(f).is_some_and(|s| s.exists());
        let mut candidates = Vec::new();
        let mut sidecars = Vec::new();
        let mut skipped = Vec::new();
        for e in entries {
            let skip = |why: String| Skipped { path: e.display().to_string(), reason: why };
            match std::fs::metadata(&e) {
                Err(err) => skipped.push(skip(format!("cannot read it: {err}"))),
                Ok(m) if !m.is_file() => skipped.push(skip(not_regular(&m).to_string())),
                Ok(_) if name_of(&e).ends_with(".json") => sidecars.push(e),
                Ok(_) => candidates.push(e),
            }
        }
        // The sidecars that are wirespeed's, and what they say about the files of this directory.
        let mut sibling_pcap = false;
        let mut any_sidecar = false;
        for s in sidecars {
            let data = s.with_file_name(name_of(&s).trim_end_matches(".json"));
            match read_sidecar(&s) {
                Ok(side) => {
                    any_sidecar = true;
                    sibling_pcap |= side.file_format == FileFormat::Pcap;
                    if !data.exists() {
                        out.orphans.push(s);
                    }
                }
                Err(_) if data.exists() => {} // named with its data file: reported there
                Err(_) => skipped.push(Skipped {
                    path: s.display().to_string(),
                    reason: "a JSON file that is not a wirespeed sidecar".into(),
                }),
            }
        }
        any_sidecar |= candidates.iter().any(|c| has_sidecar(c));
        let ext = format.map(|f| super::recordable(&**f).file_extension());
        for c in candidates {
            if is_extract(&c) {
                // `wirespeed extract`'s output with its ledger: a copy of records, not a
                // recording of its own (read with it, a directory would hold them twice).
                skipped.push(Skipped {
                    path: c.display().to_string(),
                    reason: "an extract (its ledger beside it says wirespeed.extract/1), not a recording: give it by name to read it".into(),
                });
                continue;
            }
            let pcap = magic_kind(&head_of(&c)).is_some() || has_pcap_name(&c);
            let by_format = !any_sidecar
                && format.is_some()
                && (pcap || ext.is_some_and(|x| name_of(&c).ends_with(&format!(".{x}"))));
            if has_sidecar(&c) || looks_recorded(name_of(&c)) || by_format || (pcap && sibling_pcap) {
                out.files.push(c);
            } else {
                let why = if any_sidecar {
                    "not a recording: no sidecar, and not named like a recorded file (give it by name to read it anyway)"
                } else if format.is_none() {
                    "no sidecar: give --format to read files recorded by other tools"
                } else {
                    "not a recording: no sidecar, not a pcap, and not named .EXT of --format (give it by name to read it anyway)"
                };
                skipped.push(Skipped { path: c.display().to_string(), reason: why.into() });
            }
        }
        if out.files.len() + out.orphans.len() == before {
            let names: Vec<String> = skipped.iter().map(|s| format!("{} ({})", s.path, s.reason)).collect();
            return Err(Error::not_found(if names.is_empty() {
                format!("{} holds no recordings", p.display())
            } else {
                format!("{} holds no recordings: {}", p.display(), names.join("; "))
            }));
        }
        out.skipped.extend(skipped);
    }
    Ok(out)
}

/// Where the sidecar of `path` is: `NAME.json`, or `.NAME.json.part` for a `NAME.part` file;
/// a scan's chunk keeps its sidecar hidden, `.NAME.json` (so that no reader of the layout
/// takes it for a chunk).
fn sidecar_path(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    Some(match name.strip_suffix(PART_SUFFIX) {
        Some(base) => path.with_file_name(sidecar_part_name(base)),
        None => {
            let plain = path.with_file_name(sidecar_name(name));
            let hidden = path.with_file_name(format!(".{}", sidecar_name(name)));
            if !plain.exists() && hidden.exists() {
                hidden
            } else {
                plain
            }
        }
    })
}

fn read_sidecar(sp: &Path) -> std::result::Result<Sidecar, String> {
    let b = std::fs::read(sp).map_err(|e| format!("cannot read {}: {e}", sp.display()))?;
    let s: Sidecar =
        serde_json::from_slice(&b).map_err(|e| format!("{} is not a wirespeed sidecar: {e}", sp.display()))?;
    if !SIDECAR_SCHEMAS_READ.contains(&s.schema.as_str()) {
        return Err(format!(
            "{} has schema {}, which this wirespeed does not read ({})",
            sp.display(),
            s.schema,
            SIDECAR_SCHEMAS_READ.join(", ")
        ));
    }
    Ok(s)
}

/// A sidecar file read on its own (a Mark6 file's, which no data file names).
pub(crate) fn sidecar_of_file(path: &Path) -> std::result::Result<Sidecar, String> {
    read_sidecar(path)
}

pub(crate) fn sidecar_of(path: &Path) -> Option<(PathBuf, std::result::Result<Sidecar, String>)> {
    let sp = sidecar_path(path)?;
    if !sp.exists() {
        return None;
    }
    let r = read_sidecar(&sp);
    Some((sp, r))
}

/// The layout to read `path` with: the user's `--format`, its sidecar, or a sibling's sidecar.
/// A file is pcap when it starts with a pcap magic number, is named `.pcap`, or its sidecar
/// says so: a damaged pcap is then reported as one, not read as raw payloads.
pub(crate) fn layout_for(
    path: &Path,
    side: Option<&Sidecar>,
    opts: &VerifyOptions,
    sibling: Option<&Sidecar>,
) -> Result<ReadLayout> {
    let from_side = |s: &Sidecar| -> Result<ReadLayout> {
        let reader = spec::parse(&s.reader_format).map_err(|e| {
            Error::unsupported(format!(
                "the sidecar of {} names a format this wirespeed cannot read: {e}",
                path.display()
            ))
        })?;
        Ok(ReadLayout { file_format: s.file_format, record_len: s.record_len.unwrap_or(0), reader })
    };
    if let Some(f) = &opts.format {
        let pcap = match side {
            Some(s) => s.file_format == FileFormat::Pcap,
            None => magic_kind(&head_of(path)).is_some() || has_pcap_name(path),
        };
        let ff = if pcap { FileFormat::Pcap } else { FileFormat::Raw };
        return ReadLayout::for_stream(f, ff).map_err(Error::invalid);
    }
    if let Some(s) = side {
        return from_side(s);
    }
    if let Some(s) = sibling {
        let mut l = from_side(s)?;
        if magic_kind(&head_of(path)).is_some() || has_pcap_name(path) {
            l.file_format = FileFormat::Pcap;
        }
        return Ok(l);
    }
    Err(Error::invalid(format!(
        "cannot tell what {} holds: it has no sidecar; give --format (e.g. --format counter,size=8800)",
        path.display()
    )))
}

/// Fact 1: how the file's content differs from its sidecar (empty: it matches).
/// How the file differs from its sidecar: the file itself (name, bytes, records), and, when it
/// was read as the sidecar's own format (`ledger`), every count of its ledger.
fn differences(v: &FileVerdict, s: &Sidecar, name: &str, ledger: bool) -> Vec<String> {
    let mut p = Vec::new();
    if s.file != name {
        p.push(format!("the sidecar describes a file named {}, not {name}", s.file));
    }
    if s.bytes != v.bytes {
        p.push(format!("file has {} bytes, the sidecar says {}", v.bytes, s.bytes));
    }
    if s.records != v.records {
        p.push(format!("file has {} records, the sidecar says {}", v.records, s.records));
    }
    if v.unreadable != s.unreadable {
        p.push(format!("unreadable records: {} in the file, {} in the sidecar", v.unreadable, s.unreadable));
    }
    if !ledger {
        return p;
    }
    let (a, b) = (&v.total, &s.total);
    let named = [
        ("received", a.received, b.received),
        ("lost", a.lost, b.lost),
        ("late", a.late, b.late),
        ("duplicate", a.duplicate, b.duplicate),
        ("invalid", a.invalid, b.invalid),
        ("stale", a.stale, b.stale),
        ("resync", a.resync, b.resync),
    ];
    for (what, x, y) in named {
        if x != y {
            p.push(format!("{what}: {x} in the file, {y} in the sidecar"));
        }
    }
    if named.iter().all(|(_, x, y)| x == y) && a != b {
        p.push(format!("ledger counts differ: {a:?} in the file, {b:?} in the sidecar"));
    }
    let by_reason = |r: &InvalidReasons| (r.length, r.header, r.payload);
    if by_reason(&v.invalid_by_reason) != by_reason(&s.invalid_by_reason) {
        p.push(format!(
            "invalid records by reason: {:?} in the file, {:?} in the sidecar",
            v.invalid_by_reason, s.invalid_by_reason
        ));
    }
    if v.streams.len() != s.streams.len() {
        p.push(format!("{} streams in the file, {} in the sidecar", v.streams.len(), s.streams.len()));
    } else {
        for (x, y) in v.streams.iter().zip(&s.streams) {
            if x.source != y.source || x.stream != y.stream {
                p.push(format!(
                    "stream {:?}#{} in the file where the sidecar has {:?}#{}",
                    x.source, x.stream, y.source, y.stream
                ));
            } else if x.first_seq != y.first_seq || x.last_seq != y.last_seq || x.gaps != y.gaps {
                p.push(format!(
                    "stream {}: sequence {:?}..{:?} with {} gap ranges in the file, {:?}..{:?} with {} in the sidecar",
                    x.stream,
                    x.first_seq,
                    x.last_seq,
                    x.gaps.len(),
                    y.first_seq,
                    y.last_seq,
                    y.gaps.len()
                ));
            } else if x.counts != y.counts {
                p.push(format!(
                    "stream {}: counts {:?} in the file, {:?} in the sidecar",
                    x.stream, x.counts, y.counts
                ));
            }
        }
    }
    p
}

/// Why the recorder says a file is incomplete, in plain words.
fn incomplete_by_recorder(s: &Sidecar) -> String {
    let why = match s.ended_by.as_str() {
        "disk full" => "cut short by a full disk: the recorder stopped writing".to_string(),
        "write error" => "cut short by a write error: the recorder stopped writing".to_string(),
        other => format!("marked incomplete by the recorder ({other})"),
    };
    if s.unwritten > 0 {
        format!("{why}; {} records received never reached the disk", units::thousands(s.unwritten))
    } else {
        why
    }
}

/// A run while its files are read: its key (the run id, `None` for files without one), its
/// identity, its recording-wide ledger (with the layout it was made for), whether every file
/// fed it, and its files as indexes into the verdicts.
struct RunAcc {
    key: Option<String>,
    ident: Option<super::RunIdentity>,
    whole: Option<(String, FileLedger)>,
    ok: bool,
    files: Vec<usize>,
}

/// Verify the files `collect` found.
pub fn verify(found: &Collected, opts: &VerifyOptions) -> Result<VerifyReport> {
    let files = &found.files;
    let sides: Vec<Option<(PathBuf, std::result::Result<Sidecar, String>)>> =
        files.iter().map(|f| sidecar_of(f)).collect();
    let sibling = sides.iter().flatten().find_map(|(_, r)| r.as_ref().ok()).cloned();
    let window = if opts.window == 0 { 65536 } else { opts.window };
    let mut verdicts = Vec::new();
    let mut notes = Vec::new();
    // The runs, each with its recording-wide ledger while every file of it is read the same way.
    let mut runs: Vec<RunAcc> = Vec::new();
    // A file whose sidecar is missing or unreadable (the last file of a recording that
    // crashed has none) belongs to the one run the other files name, when they name one.
    let ids: std::collections::BTreeSet<&str> =
        sides.iter().flatten().filter_map(|(_, r)| r.as_ref().ok()?.run.as_ref().map(|r| r.id.as_str())).collect();
    let lone: Option<String> = if ids.len() == 1 { ids.first().map(|s| s.to_string()) } else { None };
    let mut buf = vec![0u8; 8 << 20];
    for (path, side) in files.iter().zip(sides) {
        let (ident, key) = match &side {
            Some((_, Ok(s))) => (s.run.clone(), s.run.as_ref().map(|r| r.id.clone())),
            _ => (None, lone.clone()),
        };
        let g = match runs.iter().position(|r| r.key == key) {
            Some(g) => g,
            None => {
                runs.push(RunAcc { key, ident: None, whole: None, ok: true, files: Vec::new() });
                runs.len() - 1
            }
        };
        if runs[g].ident.is_none() {
            runs[g].ident = ident;
        }
        runs[g].files.push(verdicts.len());
        let run = &mut runs[g];
        let mut problems = Vec::new();
        let (side_path, side, side_err) = match side {
            Some((p, Ok(s))) => (Some(p), Some(s), None),
            Some((p, Err(e))) => (Some(p), None, Some(e)),
            None => (None, None, None),
        };
        let layout = layout_for(path, side.as_ref(), opts, sibling.as_ref()).map_err(|e| match (&side_err, e) {
            (Some(why), e) if e.kind() == Kind::Invalid => Error::invalid(format!(
                "cannot tell what {} holds: its sidecar cannot be used ({why}); give --format (e.g. --format counter,size=8800)",
                path.display()
            )),
            (_, e) => e,
        })?;
        let part = name_of(path).ends_with(PART_SUFFIX);
        // --format reads it as another format than its sidecar names.
        let mut read_otherwise = false;
        let mut v = FileVerdict::unread(
            path.display().to_string(),
            side_path.map(|p| p.display().to_string()),
            layout.file_format,
            layout.reader.spec(),
        );
        v.complete = true;
        v.unwritten = side.as_ref().map_or(0, |s| s.unwritten);
        let mut f = std::fs::File::open(path).map_err(|e| Error::io(format!("cannot open {}: {e}", path.display())))?;
        // Held while it is read: a recorder's retention passes it over meanwhile.
        let _ = crate::sys::file::lock_shared(&f);
        let md = f.metadata().map_err(|e| Error::io(format!("cannot read {}: {e}", path.display())))?;
        if !md.is_file() {
            return Err(Error::invalid(format!(
                "{} is {}: verify reads recorded files",
                path.display(),
                not_regular(&md)
            )));
        }
        // Read what the file held when opened, no more: a file still being written ends.
        let len_at_open = md.len();
        let head = head_of(path);
        if magic_kind(&head) == Some("pcapng") {
            problems.push(
                "a pcapng file, not classic pcap: convert it first (editcap -F pcap IN OUT), then verify the copy"
                    .to_string(),
            );
            v.bytes = len_at_open;
            v.content = "not read".into();
            v.complete = false;
            v.incomplete = Some("not read".into());
            v.problems = problems;
            run.ok = false;
            verdicts.push(v);
            continue;
        }
        let mut walker = RecordWalker::new(layout.clone());
        let mut ledger = FileLedger::new(layout.reader.clone(), window);
        let key = format!("{:?} {}", layout.file_format, layout.reader.spec());
        match &run.whole {
            Some((k, _)) if *k != key => run.ok = false,
            Some(_) => {}
            None => run.whole = Some((key, FileLedger::new(layout.reader.clone(), window))),
        }
        let mut ww = RecordWalker::new(layout.clone());
        let mut bytes = 0u64;
        while bytes < len_at_open {
            let want = (len_at_open - bytes).min(buf.len() as u64) as usize;
            let n = f.read(&mut buf[..want]).map_err(|e| Error::io(format!("cannot read {}: {e}", path.display())))?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
            walker.feed(&buf[..n], &mut ledger);
            if run.ok {
                if let Some((_, wl)) = run.whole.as_mut() {
                    ww.feed(&buf[..n], wl);
                }
            }
        }
        if bytes < len_at_open {
            problems.push(format!("the file shrank while it was read: {bytes} of {len_at_open} bytes read"));
        }
        if std::fs::metadata(path).is_ok_and(|m| m.len() > len_at_open) {
            problems.push(format!(
                "the file grew while it was read (still being written?): its first {len_at_open} bytes were read"
            ));
        }
        let (streams, total) = ledger.finish();
        v.bytes = bytes;
        v.records = ledger.records;
        v.trailing_bytes = bytes - walker.complete_bytes.min(bytes);
        v.streams = streams;
        v.total = total;
        v.invalid_by_reason = reasons(&ledger.invalid_kinds);
        v.unreadable = ledger.unreadable;
        v.cut_short = ledger.cut_short;
        v.not_udp = ledger.not_udp;
        v.control = ledger.control;

        // Can the file be read as what it should be?
        let missing = walker.header_missing();
        if missing > 0 {
            problems.push(if bytes == 0 {
                "a damaged pcap: the file is empty, without even the 24-byte pcap header".to_string()
            } else {
                format!("a damaged pcap: the file ends inside the 24-byte pcap header ({bytes} bytes): no records")
            });
        } else if walker.bad_global_header() {
            problems
                .push("a damaged pcap: the file does not start with a pcap header (wrong magic number)".to_string());
        } else if walker.corrupt {
            problems.push(format!(
                "a damaged pcap: a record header after record {} claims an impossible length; the {} bytes after it could not be read",
                ledger.records,
                bytes - walker.complete_bytes.min(bytes)
            ));
        }
        if v.cut_short > 0 {
            problems.push(format!(
                "{} records were captured cut short (a snap length shorter than the datagram, e.g. tcpdump -s): their payload is not in the file and was not checked",
                units::thousands(v.cut_short)
            ));
        }
        let linktype = walker.pcap_info().map(|p| p.linktype);
        if let Some(lt) = linktype.filter(|lt| !super::LINKTYPES_READ.contains(lt)) {
            problems.push(format!(
                "pcap link type {lt} is not one verify takes apart (Ethernet 1, raw IP 101, raw IPv4 228, raw IPv6 229, Linux cooked 113 or 276): its {} records were not checked",
                units::thousands(v.records)
            ));
        } else if v.not_udp > 0 {
            problems.push(format!(
                "{} records are not whole IPv4/UDP or IPv6/UDP datagrams (another protocol, an IP fragment, IPv6 extension headers or a malformed header): not checked",
                units::thousands(v.not_udp)
            ));
        }

        // Fact 1: the content against the sidecar.
        let base_name = name_of(path).strip_suffix(PART_SUFFIX).unwrap_or(name_of(path)).to_string();
        match (&side, &side_err) {
            (_, Some(e)) => {
                v.content = "unreadable sidecar".into();
                problems.push(format!("its sidecar cannot be used: {e}"));
            }
            (Some(s), None) if part || (!s.complete && s.closed_utc.is_empty()) => {
                // The provisional sidecar of a file being written: it says how to read the file,
                // not what it holds.
                v.content = "not finished".into();
                if s.file != base_name {
                    problems.push(format!("its sidecar describes a file named {}, not {base_name}", s.file));
                }
            }
            (Some(s), None) if layout.reader.spec() != s.reader_format => {
                // --format reads the file otherwise than its recorder did (the layout changed
                // mid-run, or a second look): its ledger is that format's, not comparable; the
                // file itself (name, bytes, records) still is.
                v.differences = differences(&v, s, &base_name, false);
                v.content = if v.differences.is_empty() { "read as another format" } else { "differs" }.into();
                problems.extend(v.differences.iter().map(|d| format!("content differs from the sidecar: {d}")));
                v.notes.push(format!(
                    "read as --format {}, not as its sidecar's {}: the ledger is that format's, so it is not compared with the sidecar's",
                    layout.reader.spec(),
                    s.reader_format
                ));
                read_otherwise = true;
            }
            (Some(s), None) => {
                v.differences = differences(&v, s, &base_name, true);
                v.content = if v.differences.is_empty() { "matches" } else { "differs" }.into();
                problems.extend(v.differences.iter().map(|d| format!("content differs from the sidecar: {d}")));
                if s.ring_full > 0 {
                    v.notes.push(format!(
                        "the recorder dropped {} datagrams at a full RAM ring while writing this file (they are among the lost)",
                        units::thousands(s.ring_full)
                    ));
                }
                if s.not_written_wrong_length > 0 {
                    v.notes.push(format!(
                        "{} datagrams were received while this file was filled but left out of it: duplicates, and datagrams the format refused (the recorder writes those only with --keep-invalid; its report says why they were refused)",
                        units::thousands(s.not_written_wrong_length)
                    ));
                }
            }
            (None, None) => {
                v.content = "no sidecar".into();
                if looks_recorded(name_of(path)) && sibling.is_some() {
                    problems.push(
                        "its sidecar is missing: it is named like a recorded file, but nothing says what it should hold"
                            .to_string(),
                    );
                }
            }
        }

        // Fact 2: is the file whole, and if not, why.
        let mut why_not = Vec::new();
        if part {
            why_not.push(
                "never finished: the recorder was killed (or is still writing); it is readable up to its last whole record"
                    .to_string(),
            );
        } else if let Some(s) = side.as_ref().filter(|s| !s.complete) {
            why_not.push(incomplete_by_recorder(s));
        } else if let Some(s) = side.as_ref().filter(|s| s.unwritten > 0) {
            // The file is whole, but writing stopped right after it.
            problems.push(format!(
                "{} records received after this file never reached the disk ({})",
                units::thousands(s.unwritten),
                s.ended_by
            ));
        }
        if v.trailing_bytes > 0 && missing == 0 && !walker.corrupt && !walker.bad_global_header() {
            why_not
                .push(format!("cut short inside a record: {} trailing bytes are not a whole record", v.trailing_bytes));
        }
        if missing > 0 || walker.corrupt || walker.bad_global_header() {
            why_not.push("damaged: not readable to its end".to_string());
        }
        if !why_not.is_empty() {
            v.complete = false;
            let why = why_not.join("; ");
            problems.push(format!("incomplete: {why}"));
            v.incomplete = Some(why);
        }

        // Fact 3 is the ledger. Invalid records are a fact about the stream when the sidecar
        // counted the same; without a sidecar nothing tells damage from what was sent.
        if side.is_none() && v.total.invalid > 0 {
            problems.push(format!(
                "{} records fail the format's checks (no sidecar says whether they arrived that way)",
                units::thousands(v.total.invalid)
            ));
        } else if read_otherwise && v.total.invalid > 0 {
            problems.push(format!(
                "{} records fail the checks of --format {} (its sidecar's format is another: a recording whose layout changed mid-run holds both)",
                units::thousands(v.total.invalid),
                layout.reader.spec()
            ));
        }
        v.problems = problems;
        verdicts.push(v);
    }
    for o in &found.orphans {
        let data = o.with_file_name(name_of(o).trim_end_matches(".json"));
        let side = read_sidecar(o).ok();
        let records = side.as_ref().map_or(0, |s| s.records);
        let mut v = FileVerdict::unread(
            data.display().to_string(),
            Some(o.display().to_string()),
            side.as_ref().map_or(FileFormat::Raw, |s| s.file_format),
            side.as_ref().map_or(String::new(), |s| s.reader_format.clone()),
        );
        v.content = "differs".into();
        v.differences = vec![format!("the data file is missing; its sidecar says it held {records} records")];
        v.incomplete = Some("missing".into());
        v.unwritten = side.as_ref().map_or(0, |s| s.unwritten);
        v.problems = vec![format!(
            "the data file is missing: its sidecar {} says it held {} records",
            o.display(),
            units::thousands(records)
        )];
        verdicts.push(v);
    }
    let several = runs.len() > 1;
    let mut run_verdicts = Vec::new();
    for r in runs {
        let (streams, total) = match r.whole {
            Some((_, mut l)) if r.ok && r.files.len() > 1 => l.finish(),
            _ => {
                if r.files.len() > 1 {
                    notes.push(match &r.key {
                        Some(id) if several => format!("the files of run {id} are not all of one format: no ledger across them; its totals add up each file's"),
                        _ => "the files are not all of one format: no recording-wide ledger; the totals add up each file's".into(),
                    });
                    let mut t = LedgerCounts::default();
                    for &i in &r.files {
                        t.merge(&verdicts[i].total);
                    }
                    (Vec::new(), t)
                } else {
                    r.files.first().map(|&i| (verdicts[i].streams.clone(), verdicts[i].total)).unwrap_or_default()
                }
            }
        };
        let old_sidecars = r.files.iter().filter(|&&i| verdicts[i].sidecar.is_some()).count();
        if r.key.is_none() && (several || old_sidecars > 0) {
            notes.push(format!(
                "{} file(s) have no run id in a sidecar (recorded by a wirespeed before runs were told apart, or without a sidecar): they are read together as one recording, as before",
                r.files.len()
            ));
        }
        run_verdicts.push(RunVerdict {
            id: r.key,
            pid: r.ident.as_ref().map(|i| i.pid),
            started_utc: r.ident.as_ref().map(|i| i.started_utc.clone()),
            files: r.files.iter().map(|&i| verdicts[i].path.clone()).collect(),
            drops_per_million: total.drops_per_million(),
            records: r.files.iter().map(|&i| &verdicts[i]).map(|v| v.records - v.unreadable - v.control).sum(),
            streams,
            total,
        });
    }
    let (streams, total) = match run_verdicts.as_slice() {
        [one] => (one.streams.clone(), one.total),
        many => {
            let mut t = LedgerCounts::default();
            for r in many {
                t.merge(&r.total);
            }
            if many.len() > 1 {
                notes.push(format!(
                    "these files hold {} recording runs (told apart by the run id in their sidecars): each is reported on its own; the totals add them up",
                    many.len()
                ));
            }
            (Vec::new(), t)
        }
    };
    let problems = verdicts.iter().map(|v| v.problems.len()).sum();
    Ok(VerifyReport {
        runs: run_verdicts,
        schema: VERIFY_SCHEMA,
        records: verdicts.iter().map(|v| v.records - v.unreadable - v.control).sum(),
        matching: verdicts.iter().filter(|v| v.content == "matches").count(),
        without_sidecar: verdicts.iter().filter(|v| v.content == "no sidecar").count(),
        incomplete: verdicts.iter().filter(|v| !v.complete).count(),
        unwritten: verdicts.iter().map(|v| v.unwritten).sum(),
        skipped: found.skipped.clone(),
        files: verdicts,
        streams,
        drops_per_million: total.drops_per_million(),
        total,
        notes,
        problems,
    })
}

/// Verify a scan scattered over mount points ([`scan::find`]): its pieces in number order as one
/// recording, each FlexBuff chunk against its own sidecar (a Mark6 scan's blocks against the
/// block lists of its files' sidecars), and the set itself: missing chunks, chunks there twice,
/// and a last chunk that is not the scan's end. A scan without sidecars (recorded by jive5ab or
/// a Mark6) is read by the format learned from its own frames, unless `--format` is given, and
/// the report says so.
pub fn verify_scan(found: &scan::FoundScan, opts: &VerifyOptions) -> Result<VerifyReport> {
    let mut opts = opts.clone();
    let mut learned_note = None;
    if found.sidecars.is_empty() && opts.format.is_none() {
        let (f, note) = learn_scan_format(found)?;
        opts.format = Some(f);
        learned_note = Some(note);
    }
    let mut report = match found.layout {
        scan::ScanLayout::FlexBuff => {
            let files = found.pieces.iter().map(|p| p.path.clone()).collect();
            verify(&Collected { files, orphans: Vec::new(), skipped: Vec::new() }, &opts)?
        }
        scan::ScanLayout::Mark6 => verify_mark6(found, &opts)?,
    };
    report.notes.insert(
        0,
        format!(
            "scan {} ({}): {} piece(s) over {} mount point(s), {}",
            found.scan,
            found.layout.name(),
            found.pieces.len(),
            found.mounts.len(),
            units::bytes(found.bytes())
        ),
    );
    if let Some(n) = learned_note {
        report.notes.push(n);
    }
    let mut problems: Vec<String> = found.problems.clone();
    for &(a, b) in &found.holes {
        problems.push(if a == b {
            format!("{} {a} is missing from the scan", piece_word(found.layout))
        } else {
            format!("{}s {a}..{b} are missing from the scan ({} of them)", piece_word(found.layout), b - a + 1)
        });
    }
    if found.layout == scan::ScanLayout::FlexBuff && !found.sidecars.is_empty() {
        let without: Vec<u64> = found
            .pieces
            .iter()
            .filter(|p| sidecar_path(&p.path).map_or(true, |sp| !sp.exists()))
            .map(|p| p.number)
            .collect();
        if !without.is_empty() {
            problems
                .push(format!("chunk(s) {without:?} have no sidecar while the others do (written by something else?)"));
        }
        if let Some(last) = found.pieces.last() {
            if let Some((_, Ok(side))) = sidecar_of(&last.path) {
                // A scan that ends exactly on a chunk's end has its last chunk cut by size, so
                // this is said, not counted as a problem.
                if side.ended_by == "size" || side.ended_by == "time" {
                    report.notes.push(format!(
                        "the last chunk found ({}) ended by {}, not by the end of the recording: if chunks after it exist, they are on a disk not given",
                        last.number, side.ended_by
                    ));
                }
            }
        }
    }
    if !problems.is_empty() {
        report.problems += problems.len();
        for p in problems {
            report.notes.push(format!("problem: {p}"));
        }
    }
    Ok(report)
}

fn piece_word(layout: scan::ScanLayout) -> &'static str {
    match layout {
        scan::ScanLayout::FlexBuff => "chunk",
        scan::ScanLayout::Mark6 => "block",
    }
}

/// The format of a scan without sidecars, learned from its frames: VDIF (its frame length from
/// the first header) or Mark5B (its sync word), fed to the same learner `probe` uses.
pub fn learn_scan_format(found: &scan::FoundScan) -> Result<(Arc<dyn Format>, String)> {
    use crate::wire::learn::Learner;
    let mut r = scan::ScanReader::new(found);
    let mut head = [0u8; 32];
    r.read_exact(&mut head).map_err(|e| {
        Error::invalid(format!("scan {} has no frame to learn its format from ({e}): give --format", found.scan))
    })?;
    let frame = if crate::wire::mark5b::starts_with_sync(&head) {
        crate::wire::mark5b::FRAME_LEN
    } else {
        match crate::wire::vdif::Header::new_checked(&head[..]) {
            Ok(h) if h.version() <= 1 && h.frame_len() >= 32 => h.frame_len(),
            _ => {
                return Err(Error::invalid(format!(
                    "scan {} has no sidecar and does not start with a VDIF or Mark5B frame: give --format",
                    found.scan
                )))
            }
        }
    };
    let mut learner = Learner::new();
    learner.rate_seconds = 1;
    let src: std::net::SocketAddr = ([0, 0, 0, 0], 0).into();
    let mut buf = vec![0u8; frame];
    buf[..32].copy_from_slice(&head);
    let mut frames = 0u64;
    let mut ok = r.read_exact(&mut buf[32..]).is_ok();
    while ok {
        learner.feed(src, &buf);
        frames += 1;
        if frames % 4096 == 0 && learner.learned().first().is_some_and(|l| l.spec.is_some()) {
            break;
        }
        ok = r.read_exact(&mut buf).is_ok();
    }
    let l = learner.learned().into_iter().next();
    match l.as_ref().and_then(|l| l.spec.clone()) {
        Some(spec) => {
            let f = spec::parse(&spec).map_err(Error::invalid)?;
            Ok((f, format!("no sidecar: the ledger is the frames' own, read as --format {spec} (learned from its first {frames} frames)")))
        }
        None => Err(Error::invalid(format!(
            "scan {} has no sidecar and its format could not be learned from its frames ({}): give --format",
            found.scan,
            l.map(|l| l.missing.join("; ")).unwrap_or_else(|| "no frame".into())
        ))),
    }
}

/// A Mark6 scan read as one recording: blocks in number order over all its files, each block's
/// records against the block lists of the files' sidecars.
fn verify_mark6(found: &scan::FoundScan, opts: &VerifyOptions) -> Result<VerifyReport> {
    let sides: Vec<(PathBuf, Sidecar)> =
        found.sidecars.iter().filter_map(|p| read_sidecar(p).ok().map(|s| (p.clone(), s))).collect();
    let layout = match (&opts.format, sides.first()) {
        (Some(f), _) => ReadLayout::for_stream(f, FileFormat::Raw).map_err(Error::invalid)?,
        (None, Some((_, s))) => layout_for(&sides[0].0, Some(s), opts, None)?,
        (None, None) => {
            return Err(Error::invalid(format!("cannot tell what scan {} holds: give --format", found.scan)))
        }
    };
    let window = if opts.window == 0 { 65536 } else { opts.window };
    let mut walker = RecordWalker::new(layout.clone());
    let mut ledger = FileLedger::new(layout.reader.clone(), window);
    let mut buf = vec![0u8; 8 << 20];
    let mut per_block = Vec::with_capacity(found.pieces.len());
    let mut bytes = 0u64;
    for p in &found.pieces {
        let before = ledger.records;
        let mut f =
            std::fs::File::open(&p.path).map_err(|e| Error::io(format!("cannot open {}: {e}", p.path.display())))?;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(p.offset))
            .map_err(|e| Error::io(format!("cannot read {}: {e}", p.path.display())))?;
        let mut left = p.len;
        let cap = buf.len() as u64;
        while left > 0 {
            let n = f
                .read(&mut buf[..left.min(cap) as usize])
                .map_err(|e| Error::io(format!("cannot read {}: {e}", p.path.display())))?;
            if n == 0 {
                break;
            }
            walker.feed(&buf[..n], &mut ledger);
            left -= n as u64;
            bytes += n as u64;
        }
        per_block.push((p.number, ledger.records - before, p.len - left));
    }
    let (streams, total) = ledger.finish();
    let name = format!("{} (mark6 over {} file(s))", found.scan, found.mounts.len());
    let mut v = FileVerdict::unread(name, None, FileFormat::Raw, layout.reader.spec());
    v.bytes = bytes;
    v.records = ledger.records;
    v.trailing_bytes = bytes - walker.complete_bytes.min(bytes);
    v.streams = streams.clone();
    v.total = total;
    v.invalid_by_reason = reasons(&ledger.invalid_kinds);
    v.complete = v.trailing_bytes == 0;
    if sides.is_empty() {
        v.content = "no sidecar".into();
    } else {
        v.sidecar = Some(sides.iter().map(|(p, _)| p.display().to_string()).collect::<Vec<_>>().join(", "));
        let listed: std::collections::BTreeMap<u64, (u64, u64)> = sides
            .iter()
            .filter_map(|(_, s)| s.scan.as_ref())
            .flat_map(|p| p.blocks.iter().map(|b| (b.number, (b.records, b.bytes))))
            .collect();
        for &(n, records, b) in &per_block {
            match listed.get(&n) {
                Some(&(r, lb)) if r == records && lb == b => {}
                Some(&(r, lb)) => v
                    .differences
                    .push(format!("block {n} holds {records} records in {b} bytes, its sidecar says {r} in {lb}")),
                None => v.differences.push(format!("block {n} is in no sidecar's block list")),
            }
        }
        let found_numbers: std::collections::BTreeSet<u64> = per_block.iter().map(|b| b.0).collect();
        for n in listed.keys().filter(|n| !found_numbers.contains(n)) {
            v.differences.push(format!("block {n} of the sidecars is not in the files"));
        }
        v.content = if v.differences.is_empty() { "matches" } else { "differs" }.into();
        let ring_full: u64 = sides.iter().map(|(_, s)| s.ring_full).sum();
        if ring_full > 0 {
            v.notes.push(format!(
                "the recorder dropped {} datagrams at a full RAM ring (they are among the lost)",
                units::thousands(ring_full)
            ));
        }
    }
    v.problems.extend(v.differences.iter().map(|d| format!("content differs from the sidecar: {d}")));
    if v.trailing_bytes > 0 {
        v.incomplete = Some(format!("{} trailing bytes are not a whole record", v.trailing_bytes));
        v.problems.push(format!("incomplete: {}", v.incomplete.as_deref().unwrap_or("")));
    }
    let run = sides.iter().find_map(|(_, s)| s.run.clone());
    let records = v.records - v.unreadable - v.control;
    let problems = v.problems.len();
    Ok(VerifyReport {
        schema: VERIFY_SCHEMA,
        runs: vec![RunVerdict {
            id: run.as_ref().map(|r| r.id.clone()),
            pid: run.as_ref().map(|r| r.pid),
            started_utc: run.as_ref().map(|r| r.started_utc.clone()),
            files: vec![v.path.clone()],
            streams: streams.clone(),
            total,
            drops_per_million: total.drops_per_million(),
            records,
        }],
        records,
        matching: usize::from(v.content == "matches"),
        without_sidecar: usize::from(v.content == "no sidecar"),
        incomplete: usize::from(!v.complete),
        unwritten: 0,
        skipped: Vec::new(),
        files: vec![v],
        streams,
        drops_per_million: total.drops_per_million(),
        total,
        notes: Vec::new(),
        problems,
    })
}

/// A stream's name in a ledger table: its source, with the stream number when not 0.
fn stream_name(s: &FileStream) -> String {
    match &s.source {
        Some(src) if s.stream == 0 => src.clone(),
        Some(src) => format!("{src}#{}", s.stream),
        None => format!("stream {}", s.stream),
    }
}

impl VerifyReport {
    /// The human summary: one line per file (its content against the sidecar, whether it is
    /// complete), then the recording's ledger in `recv`'s layout, then what was checked.
    pub fn human(&self, show_gaps: usize) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        for v in &self.files {
            let content = match v.content.as_str() {
                "matches" => "content matches its sidecar".to_string(),
                "differs" => "content DIFFERS from its sidecar".to_string(),
                "no sidecar" => "no sidecar (nothing to compare the content with)".to_string(),
                "not finished" => "no final sidecar (the recorder never finished the file)".to_string(),
                other => other.to_string(),
            };
            let _ = writeln!(
                o,
                "{}  {} records, {}; {}; {}",
                v.path,
                units::thousands(v.records),
                units::bytes(v.bytes),
                content,
                match (v.complete, v.content.as_str()) {
                    (false, _) => "file INCOMPLETE",
                    (true, "no sidecar" | "unreadable sidecar") => "ends on a whole record",
                    (true, _) => "file complete",
                }
            );
            for p in &v.problems {
                let _ = writeln!(o, "  !! {p}");
            }
            for n in &v.notes {
                let _ = writeln!(o, "  note: {n}");
            }
        }
        for s in &self.skipped {
            let _ = writeln!(o, "{}  skipped: {}", s.path, s.reason);
        }
        let rows: Vec<(String, &LedgerCounts, &[crate::ledger::GapRange])> =
            self.streams.iter().map(|s| (stream_name(s), &s.counts, s.gaps.as_slice())).collect();
        if self.runs.len() > 1 {
            for r in &self.runs {
                let _ = writeln!(
                    o,
                    "run {}: {} file(s)",
                    match (&r.id, r.pid, &r.started_utc) {
                        (Some(id), Some(pid), Some(t)) => format!("{id} (pid {pid}, started {t})"),
                        (Some(id), _, _) => id.clone(),
                        _ => "without a run id".to_string(),
                    },
                    r.files.len()
                );
                let rows: Vec<(String, &LedgerCounts, &[crate::ledger::GapRange])> =
                    r.streams.iter().map(|s| (stream_name(s), &s.counts, s.gaps.as_slice())).collect();
                crate::rx::ledger_table(&mut o, &rows, &r.total, show_gaps);
            }
        } else {
            crate::rx::ledger_table(&mut o, &rows, &self.total, show_gaps);
        }
        for n in &self.notes {
            let _ = writeln!(o, "  note: {n}");
        }
        let n = self.files.len();
        let mut checked = format!("{} records in {n} file(s) re-checked", units::thousands(self.records));
        if self.runs.len() > 1 {
            checked = format!("{checked}, {} recording runs each on its own", self.runs.len());
        }
        let mut parts = Vec::new();
        if self.matching > 0 {
            parts.push(format!("{} matching their sidecar", self.matching));
        }
        if self.without_sidecar > 0 {
            parts.push(format!("{} without a sidecar to compare with", self.without_sidecar));
        }
        if !self.skipped.is_empty() {
            parts.push(format!("{} other file(s) skipped", self.skipped.len()));
        }
        if !parts.is_empty() {
            checked = format!("{checked}; {}", parts.join(", "));
        }
        let _ = writeln!(
            o,
            "  => {}",
            if self.problems == 0 {
                checked
            } else {
                format!("{} problem(s) found (listed above with !!); {checked}", self.problems)
            }
        );
        o
    }
}
