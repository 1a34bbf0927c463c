//! `wirespeed verify`: re-read recordings, independently of the ledger kept while capturing,
//! and compare with each file's sidecar.
//!
//! Every record is checked again by the format (sync words, CRC, counter pattern...), each file
//! gets its own ledger, and the files of a directory are also read as one recording in name
//! order, so loss between two files shows too. A file still named `*.part` is what a killed
//! recorder leaves: it is read up to its last whole record and reported as incomplete.

use super::{
    parse_pcap_global, reasons, FileFormat, FileLedger, FileStream, ReadLayout, RecordWalker, Sidecar, PART_SUFFIX,
    SIDECAR_SCHEMA,
};
use crate::error::{Error, Result};
use crate::ledger::LedgerCounts;
use crate::rx::InvalidReasons;
use crate::units;
use crate::wire::{spec, Format};
use serde::Serialize;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Schema of `verify --json`.
pub const VERIFY_SCHEMA: &str = "wirespeed.verify/1";

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
    /// File length, bytes.
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
    /// pcap records that are not whole UDP datagrams.
    pub unreadable: u64,
    /// The file was finished by the recorder (renamed, sidecar written, marked complete).
    pub complete: bool,
    /// Everything wrong, one line each; empty when the file is sound and matches its sidecar.
    pub problems: Vec<String>,
}

/// The verdict on all files given.
#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    /// Schema name and version.
    pub schema: &'static str,
    /// One verdict per file, in recording order.
    pub files: Vec<FileVerdict>,
    /// The files read as one recording: per-stream ledgers across file boundaries.
    pub streams: Vec<FileStream>,
    /// Totals across all files.
    pub total: LedgerCounts,
    /// Lost per million expected, all files.
    pub drops_per_million: f64,
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

fn is_data_file(p: &Path) -> bool {
    let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    !n.starts_with('.') && !n.ends_with(".json") && p.is_file()
}

/// The files named by `paths` (directories expand to their recordings), in name order.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let md = std::fs::metadata(p).map_err(|e| {
            Error::Usage(format!("cannot read {}: {e} (give recorded files or their directory)", p.display()))
        })?;
        if md.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| Error::Runtime(format!("cannot list {}: {e}", p.display())))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_data_file(p))
                .collect();
            v.sort();
            if v.is_empty() {
                return Err(Error::Usage(format!("{} holds no recordings", p.display())));
            }
            out.extend(v);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn sidecar_of(path: &Path) -> Option<(PathBuf, Result<Sidecar>)> {
    let name = path.file_name()?.to_str()?;
    // A file still being written (or left by a killed recorder) has a provisional sidecar.
    let sp = match name.strip_suffix(PART_SUFFIX) {
        Some(base) => path.with_file_name(format!(".{base}.json{PART_SUFFIX}")),
        None => path.with_file_name(format!("{name}.json")),
    };
    if !sp.exists() {
        return None;
    }
    let r = std::fs::read(&sp)
        .map_err(|e| Error::Runtime(format!("cannot read {}: {e}", sp.display())))
        .and_then(|b| {
            serde_json::from_slice::<Sidecar>(&b)
                .map_err(|e| Error::Runtime(format!("{} is not a wirespeed sidecar: {e}", sp.display())))
        })
        .and_then(|s| {
            if s.schema == SIDECAR_SCHEMA {
                Ok(s)
            } else {
                Err(Error::Runtime(format!("{} has schema {}, not {SIDECAR_SCHEMA}", sp.display(), s.schema)))
            }
        });
    Some((sp, r))
}

/// The layout to read `path` with: from its sidecar, the user's `--format`, a sibling's
/// sidecar, or (pcap) the file's own header.
fn layout_for(
    path: &Path,
    side: Option<&Sidecar>,
    opts: &VerifyOptions,
    sibling: Option<&Sidecar>,
) -> Result<ReadLayout> {
    let mut head = [0u8; 24];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| Error::Runtime(format!("cannot read {}: {e}", path.display())))?;
    let looks_pcap = parse_pcap_global(&head[..n]).is_some();
    let from_side = |s: &Sidecar| -> Result<ReadLayout> {
        let reader = spec::parse(&s.reader_format).map_err(|e| {
            Error::Runtime(format!("the sidecar of {} names a format this wirespeed cannot read: {e}", path.display()))
        })?;
        Ok(ReadLayout { file_format: s.file_format, record_len: s.record_len.unwrap_or(0), reader })
    };
    if let Some(f) = &opts.format {
        let ff = if looks_pcap { FileFormat::Pcap } else { FileFormat::Raw };
        return ReadLayout::for_stream(f, ff).map_err(Error::Usage);
    }
    if let Some(s) = side {
        return from_side(s);
    }
    if let Some(s) = sibling {
        return from_side(s);
    }
    Err(Error::Usage(format!(
        "cannot tell what {} holds: it has no sidecar; give --format (e.g. --format counter,size=8800)",
        path.display()
    )))
}

fn compare(v: &mut FileVerdict, s: &Sidecar) {
    let p = &mut v.problems;
    if s.bytes != v.bytes {
        p.push(format!("file has {} bytes, the sidecar says {}", v.bytes, s.bytes));
    }
    if s.records != v.records {
        p.push(format!("file has {} records, the sidecar says {}", v.records, s.records));
    }
    let (a, b) = (&v.total, &s.total);
    for (what, x, y) in [
        ("received", a.received, b.received),
        ("lost", a.lost, b.lost),
        ("late", a.late, b.late),
        ("duplicate", a.duplicate, b.duplicate),
        ("invalid", a.invalid, b.invalid),
    ] {
        if x != y {
            p.push(format!("{what}: {x} in the file, {y} in the sidecar"));
        }
    }
    if v.streams.len() != s.streams.len() {
        p.push(format!("{} streams in the file, {} in the sidecar", v.streams.len(), s.streams.len()));
    } else {
        for (x, y) in v.streams.iter().zip(&s.streams) {
            if x.first_seq != y.first_seq || x.last_seq != y.last_seq || x.gaps != y.gaps {
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
            }
        }
    }
    if !s.complete {
        p.push(format!("the recorder marked this file incomplete ({})", s.ended_by));
    }
}

/// Verify `files` (in recording order).
pub fn verify(files: &[PathBuf], opts: &VerifyOptions) -> Result<VerifyReport> {
    let sides: Vec<Option<(PathBuf, Result<Sidecar>)>> = files.iter().map(|f| sidecar_of(f)).collect();
    let sibling = sides.iter().flatten().find_map(|(_, r)| r.as_ref().ok()).cloned();
    let window = if opts.window == 0 { 65536 } else { opts.window };
    let mut verdicts = Vec::new();
    let mut whole: Option<(RecordWalker, FileLedger)> = None;
    let mut buf = vec![0u8; 8 << 20];
    for (path, side) in files.iter().zip(sides) {
        let (side_path, side) = match side {
            Some((p, Ok(s))) => (Some(p), Some(s)),
            Some((_, Err(e))) => return Err(e),
            None => (None, None),
        };
        let layout = layout_for(path, side.as_ref(), opts, sibling.as_ref())?;
        let mut walker = RecordWalker::new(layout.clone());
        let mut ledger = FileLedger::new(layout.reader.clone(), window);
        let (ww, wl) = whole
            .get_or_insert_with(|| (RecordWalker::new(layout.clone()), FileLedger::new(layout.reader.clone(), window)));
        // Each file is read as its own stream of records by the recording-wide walker too.
        *ww = RecordWalker::new(layout.clone());
        let mut f =
            std::fs::File::open(path).map_err(|e| Error::Runtime(format!("cannot open {}: {e}", path.display())))?;
        let mut bytes = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(|e| Error::Runtime(format!("cannot read {}: {e}", path.display())))?;
            if n == 0 {
                break;
            }
            bytes += n as u64;
            walker.feed(&buf[..n], &mut ledger);
            if files.len() > 1 {
                ww.feed(&buf[..n], wl);
            }
        }
        let (streams, total) = ledger.finish();
        let name = path.display().to_string();
        let complete = side.as_ref().is_some_and(|s| s.complete) && !path.to_string_lossy().ends_with(PART_SUFFIX);
        let mut v = FileVerdict {
            path: name,
            sidecar: side_path.map(|p| p.display().to_string()),
            file_format: layout.file_format,
            format: layout.reader.spec(),
            bytes,
            records: ledger.records,
            trailing_bytes: bytes - walker.complete_bytes.min(bytes),
            streams,
            total,
            invalid_by_reason: reasons(&ledger.invalid_kinds),
            unreadable: ledger.unreadable,
            complete,
            problems: Vec::new(),
        };
        if walker.bad_global_header() || walker.corrupt {
            v.problems.push("the pcap headers are corrupt: the file could not be read to its end".into());
        }
        if v.trailing_bytes > 0 {
            v.problems.push(format!(
                "the file ends inside a record: {} trailing bytes are not a whole record",
                v.trailing_bytes
            ));
        }
        let part = path.to_string_lossy().ends_with(PART_SUFFIX);
        match &side {
            Some(s) if !part => compare(&mut v, s),
            _ if part => v.problems.push(
                "incomplete: the recorder never finished this file (killed?); it is readable up to its last whole record, the ledger above says what it holds".into(),
            ),
            _ => {}
        }
        if v.total.invalid > 0 {
            v.problems.push(format!("{} records fail the format's checks", v.total.invalid));
        }
        verdicts.push(v);
    }
    let (streams, total) = match (&mut whole, files.len()) {
        (Some((_, l)), n) if n > 1 => l.finish(),
        _ => verdicts.first().map(|v| (v.streams.clone(), v.total)).unwrap_or_default(),
    };
    let problems = verdicts.iter().map(|v| v.problems.len()).sum();
    Ok(VerifyReport {
        schema: VERIFY_SCHEMA,
        files: verdicts,
        streams,
        drops_per_million: total.drops_per_million(),
        total,
        problems,
    })
}

impl VerifyReport {
    /// The human summary: one line per file, then the recording's ledger in `recv`'s layout.
    pub fn human(&self, show_gaps: usize) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        for v in &self.files {
            let _ = writeln!(
                o,
                "{}  {} records, {}, {}{}",
                v.path,
                units::thousands(v.records),
                units::bytes(v.bytes),
                if v.sidecar.is_some() { "sidecar " } else { "no sidecar" },
                if v.sidecar.is_none() {
                    String::new()
                } else if v.problems.is_empty() {
                    "matches".into()
                } else {
                    "DIFFERS".into()
                }
            );
            for p in &v.problems {
                let _ = writeln!(o, "  !! {p}");
            }
        }
        let rows: Vec<(String, &LedgerCounts, &[crate::ledger::GapRange])> = self
            .streams
            .iter()
            .map(|s| {
                let name = match &s.source {
                    Some(src) if s.stream == 0 => src.clone(),
                    Some(src) => format!("{src}#{}", s.stream),
                    None => format!("stream {}", s.stream),
                };
                (name, &s.counts, s.gaps.as_slice())
            })
            .collect();
        crate::rx::ledger_table(&mut o, &rows, &self.total, show_gaps);
        let _ = writeln!(
            o,
            "  => {}",
            if self.problems == 0 {
                format!(
                    "{} file(s) verified: every record re-checked, every file matches its sidecar",
                    self.files.len()
                )
            } else {
                format!("{} problem(s) found (listed above with !!)", self.problems)
            }
        );
        o
    }
}
