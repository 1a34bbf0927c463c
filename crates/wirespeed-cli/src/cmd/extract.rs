//! `wirespeed extract`: the records of a window of a long recording, found through the files'
//! time indexes, written as raw or pcap with a ledger of what was taken.

use crate::args::parse_range;
use crate::out::{print_json, EXIT_LOSS};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use wirespeed::spool::extract::{self, ExtractReport, Pick, Query};
use wirespeed::spool::{self, FileFormat};
use wirespeed::wire::spec;
use wirespeed::{sys, Error};

#[derive(Args)]
pub struct ExtractArgs {
    /// Recorded files, or the directory of a recording (read in name order, as `verify` does).
    #[arg(required = true, value_name = "DIR|FILES")]
    paths: Vec<PathBuf>,
    /// Start of the window: a UTC time (2026-11-29T14:03:10Z, fractions and +HH:MM offsets
    /// allowed), `now`, a time before now (-5m, -90s, -2h), or a SPEAD timestamp (ts:N).
    /// Without it the window starts with the recording.
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    from: Option<String>,
    /// End of the window (the first instant after it): as --from, or +DURATION after --from
    /// (+30s). Without it the window runs to the recording's end.
    #[arg(long, value_name = "T", allow_hyphen_values = true)]
    to: Option<String>,
    /// Which time the window is in: `data`, the records' own (VDIF and Mark5B frame times,
    /// SPEAD timestamps); `arrival`, when the recorder received them (pcap time stamps; raw
    /// files read between the capture's time marks, one per MiB); `auto` (the default): data for
    /// VDIF and Mark5B, arrival otherwise.
    #[arg(long, default_value = "auto", value_parser = ["auto", "arrival", "data"])]
    clock: String,
    /// Only this stream (VDIF thread id; the format's stream id).
    #[arg(long, value_name = "S")]
    stream: Option<u32>,
    /// Only these sequence numbers, A..B inclusive (VDIF and Mark5B number frames by time).
    #[arg(long, value_name = "A..B", value_parser = parse_range)]
    seq: Option<(u64, u64)>,
    /// Where to write the records: a new file (its ledger goes beside it as FILE.json), or -
    /// for standard output. Without it the records are counted, not written. An existing file
    /// is never replaced.
    #[arg(short = 'w', long = "write", value_name = "FILE|-")]
    write: Option<PathBuf>,
    /// raw (payloads back to back: VDIF and Mark5B files VLBI software reads) or pcap
    /// (tshark, Wireshark). Default: the recording's own. A raw recording has no addresses or
    /// arrival stamps to make pcap of.
    #[arg(long, value_parser = FileFormat::parse)]
    file_format: Option<FileFormat>,
    /// Read the records as this format instead of what the sidecars name (files without one).
    #[arg(long, value_name = "SPEC")]
    format: Option<String>,
    /// Read whole files instead of the ranges the indexes give (to compare; the output is the
    /// same).
    #[arg(long)]
    no_index: bool,
    /// Exit 3 unless the recording holds every record of the window (no holes inside it or at
    /// its edges, where the format's numbering says).
    #[arg(long)]
    expect_whole: bool,
    /// Print the ledger (schema wirespeed.extract/1) as JSON on stdout (not with -w -).
    #[arg(long)]
    json: bool,
}

/// Where the records go.
enum Out {
    Count,
    Stdout(std::io::BufWriter<std::io::StdoutLock<'static>>),
    File { w: std::io::BufWriter<std::fs::File>, part: PathBuf, target: PathBuf },
}

impl Out {
    fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Out::Count => Ok(()),
            Out::Stdout(w) => w.write_all(b),
            Out::File { w, .. } => w.write_all(b),
        }
    }
}

pub fn cmd_extract(a: ExtractArgs) -> Result<u8, Error> {
    let now = sys::realtime_ns();
    let time = |s: &Option<String>, name: &'static str| {
        s.as_deref().map(|s| extract::parse_time(s, now).map_err(|e| Error::param(name, e))).transpose()
    };
    let (from, to) = (time(&a.from, "from")?, time(&a.to, "to")?);
    // The forms that fit no clock, refused before anything is read.
    if matches!(from, Some(extract::TimeArg::After(_))) {
        return Err(Error::invalid("--from: +DURATION is for --to (that long after --from)"));
    }
    if matches!(to, Some(extract::TimeArg::After(_))) && from.is_none() {
        return Err(Error::invalid("--to +DURATION counts from --from: give --from too"));
    }
    if from.is_none() && to.is_none() && a.seq.is_none() && a.stream.is_none() {
        return Err(Error::invalid(
            "give the part to extract: a window (--from/--to), --seq A..B or --stream S (gather or verify read a whole recording)",
        ));
    }
    let to_stdout = a.write.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if to_stdout && a.json {
        return Err(Error::invalid(
            "-w - sends the records to stdout: the ledger cannot go there too; give -w FILE (its ledger is FILE.json) or leave out --json",
        ));
    }
    let format = a.format.as_deref().map(|s| spec::parse(s).map_err(|e| Error::param("format", e))).transpose()?;
    let rec = spool::open::open(&a.paths, format)?;
    let first = &rec.files[0];
    let fmt = first.layout.reader.clone();
    let src_ff = first.layout.file_format;
    let out_ff = a.file_format.unwrap_or(src_ff);
    if src_ff == FileFormat::Raw && out_ff == FileFormat::Pcap {
        return Err(Error::invalid(
            "a raw recording keeps no addresses or arrival stamps to make pcap records of: extract it as raw (the default)",
        ));
    }
    if src_ff == FileFormat::Pcap && out_ff == FileFormat::Raw && fmt.fixed_len().is_none() {
        return Err(Error::invalid(format!(
            "{}'s datagrams differ in length, and a raw file keeps no boundaries between them: extract as pcap (the default)",
            fmt.name()
        )));
    }
    let window = extract::window_for(&a.clock, from, to, &*fmt).map_err(Error::invalid)?;
    let q = Query { window, stream: a.stream, seq: a.seq, no_index: a.no_index };
    let mut out = match &a.write {
        None => Out::Count,
        Some(_) if to_stdout => Out::Stdout(std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock())),
        Some(target) => {
            let ledger = spool::sidecar_name(&target.display().to_string());
            for p in [target.clone(), PathBuf::from(&ledger)] {
                if std::fs::symlink_metadata(&p).is_ok() {
                    return Err(Error::invalid(format!("{} exists: an existing file is never replaced", p.display())));
                }
            }
            let part = crate::out::hidden_part(target);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&part)
                .map_err(|e| Error::usage_io(format!("cannot create {}: {e}", part.display()), &e))?;
            Out::File { w: std::io::BufWriter::with_capacity(8 << 20, f), part, target: target.clone() }
        }
    };
    if out_ff == FileFormat::Pcap {
        // The recording's own header (its link type, byte order and time unit: records are
        // copied as they are), from the first file that has one.
        out.write(&pcap_header_of(&rec.files)).map_err(|e| Error::io(format!("cannot write: {e}")))?;
    }
    let strip = spool::recordable(&*fmt).raw_strip();
    let mut written = 0u64;
    let result = extract::extract(&rec.files, &q, &fmt, |p: &Pick<'_>| {
        let bytes = match (src_ff, out_ff) {
            (FileFormat::Pcap, FileFormat::Pcap) | (FileFormat::Raw, FileFormat::Raw) => p.record,
            // pcap to raw: the payloads as a raw recording holds them (less a transport prefix).
            _ => p.payload.get(strip..).unwrap_or(&[]),
        };
        written += bytes.len() as u64;
        out.write(bytes)
    });
    let finish = |out: Out| -> Result<Option<PathBuf>, Error> {
        match out {
            Out::Count => Ok(None),
            // A reader that went away (`| head`) ends the extract, not as a failure.
            Out::Stdout(mut w) => match w.flush() {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    Err(Error::io(format!("cannot write to stdout: {e}")))
                }
                _ => Ok(None),
            },
            Out::File { w, part, target } => {
                let f =
                    w.into_inner().map_err(|e| Error::io(format!("cannot write {}: {}", part.display(), e.error())))?;
                f.sync_data().map_err(|e| Error::io(format!("cannot write {}: {e}", part.display())))?;
                sys::file::rename_noreplace(&part, &target)
                    .map_err(|e| Error::io(format!("cannot name the extract {}: {e}", target.display())))?;
                Ok(Some(target))
            }
        }
    };
    let part = match &out {
        Out::File { part, .. } => Some(part.clone()),
        _ => None,
    };
    let done = result.and_then(|r| finish(out).map(|t| (r, t)));
    let (mut report, target) = match done {
        Ok(x) => x,
        Err(e) => {
            // Only what this command created: its hidden part file.
            if let Some(p) = part {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    report.output = a.write.as_ref().map(|p| p.display().to_string());
    report.file_format = out_ff;
    if let Some(t) = &target {
        let ledger = PathBuf::from(spool::sidecar_name(&t.display().to_string()));
        write_ledger(&ledger, &report)?;
    }
    for n in &report.notes {
        eprintln!("wirespeed extract: {n}");
    }
    if a.json {
        print_json(&report)?;
    }
    eprintln!(
        "wirespeed extract: {}{}",
        report.line(),
        match &target {
            Some(t) => format!(" -> {} ({} bytes; ledger {}.json)", t.display(), written, t.display()),
            None if to_stdout => format!(" -> stdout ({written} bytes)"),
            None => " (counted only: give -w FILE or -w - to write them)".to_string(),
        }
    );
    Ok(verdict(&report, a.expect_whole))
}

/// The pcap global header of the first file of `files` that has one (ours when none has).
fn pcap_header_of(files: &[spool::open::OpenFile]) -> [u8; spool::PCAP_GLOBAL_LEN] {
    use std::os::unix::fs::FileExt;
    for f in files {
        let mut h = [0u8; spool::PCAP_GLOBAL_LEN];
        let read = std::fs::File::open(&f.path).and_then(|file| file.read_exact_at(&mut h, f.offset));
        if read.is_ok() && spool::parse_pcap_global(&h).is_some() {
            return h;
        }
    }
    spool::pcap_global_header()
}

fn write_ledger(path: &Path, report: &ExtractReport) -> Result<(), Error> {
    let json =
        serde_json::to_vec_pretty(report).map_err(|e| Error::failed(format!("cannot encode the ledger: {e}")))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::usage_io(format!("cannot create {}: {e}", path.display()), &e))?;
    f.write_all(&json).map_err(|e| Error::io(format!("cannot write {}: {e}", path.display())))
}

/// 3 when nothing was recorded in the window, or (with --expect-whole) when it has holes.
fn verdict(r: &ExtractReport, expect_whole: bool) -> u8 {
    if r.records == 0 || (expect_whole && !r.whole()) {
        EXIT_LOSS
    } else {
        0
    }
}
