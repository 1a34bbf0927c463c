//! `wirespeed recordings`: the recording runs in directories, from their sidecars (and, with
//! --verify, checked by verify).

use crate::args;
use crate::out::{print_json, EXIT_MISMATCH};
use clap::Args;
use std::path::PathBuf;
use wirespeed::spool::catalog::{self, Catalog, FileState, RunSummary};
use wirespeed::units;
use wirespeed::Error;

#[derive(Args)]
pub struct RecordingsArgs {
    /// Directories recordings were written to (`record -o DIR`); not searched recursively.
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// Re-read every run's files with verify (every record checked, each file compared with its
    /// sidecar): slow on big recordings; exit code 4 when a run fails.
    #[arg(long)]
    verify: bool,
    /// Reorder window of verify's ledger (power of two).
    #[arg(long, default_value = "65536", value_parser = args::window)]
    window: u64,
    /// Print one JSON document (schema wirespeed.recordings/1).
    #[arg(long)]
    json: bool,
}

pub fn cmd_recordings(a: RecordingsArgs) -> Result<u8, Error> {
    if !a.window.is_power_of_two() {
        return Err(Error::invalid(format!("--window {} must be a power of two", a.window)));
    }
    let mut cat = catalog::scan(&a.dirs)?;
    let ok = if a.verify { catalog::verify_runs(&mut cat, a.window) } else { true };
    if a.json {
        print_json(&cat)?;
    } else {
        print!("{}", human(&cat));
    }
    Ok(if ok { 0 } else { EXIT_MISMATCH })
}

/// Seconds as `12.3 s`, `4m05s`, `2h03m`.
fn duration(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{}h{:02}m", (s / 3600.0) as u64, ((s % 3600.0) / 60.0) as u64)
    }
}

/// What the run's state column says: its state, how many files are in each other state, and
/// the verdict of --verify.
fn state_of(r: &RunSummary) -> String {
    let mut s = r.state.clone();
    let odd: Vec<String> = r
        .states
        .iter()
        .filter(|(k, _)| k.as_str() != "complete" && k.as_str() != r.state)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    if !odd.is_empty() {
        s = format!("{s} ({})", odd.join(", "));
    }
    match r.verified {
        Some(true) => s.push_str(", verified"),
        Some(false) => s.push_str(", VERIFY FAILED"),
        None => {}
    }
    s
}

fn human(cat: &Catalog) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    if cat.runs.is_empty() {
        for d in &cat.directories {
            let _ = writeln!(o, "no recordings in {}", d.path);
        }
    } else {
        let _ = writeln!(
            o,
            "{:<24} {:>9} {:>5} {:>10} {:>12} {:>7} {:>10} {:>6}  STATE",
            "START (UTC)", "DURATION", "FILES", "SIZE", "RATE", "STREAMS", "LOST", "HOLES"
        );
    }
    for r in &cat.runs {
        let start = r.started_utc.as_deref().or(r.first_utc.as_deref()).unwrap_or("?");
        let _ = writeln!(
            o,
            "{:<24} {:>9} {:>5} {:>10} {:>12} {:>7} {:>10} {:>6}  {}",
            start,
            duration(r.duration_s),
            r.file_count,
            units::bytes(r.bytes),
            r.rate_bps.map_or("-".to_string(), units::bits),
            r.streams.len(),
            units::thousands(r.lost),
            r.holes_total,
            state_of(r)
        );
        let id = match (&r.id, r.pid) {
            (Some(id), Some(pid)) => format!("run {id} (pid {pid})"),
            (Some(id), None) => format!("run {id}"),
            _ => "no run id".to_string(),
        };
        let _ = writeln!(
            o,
            "  {id}, {} in {}, {} {}, {} records, {}/{} files indexed",
            r.prefixes.join(" "),
            r.directories.join(" "),
            r.format.as_deref().unwrap_or("format unknown"),
            r.file_format.map_or("", |f| if f == wirespeed::spool::FileFormat::Pcap { "pcap" } else { "raw" }),
            units::thousands(r.records),
            r.indexed,
            r.file_count
        );
        for s in &r.streams {
            let from = s.source.as_deref().map_or(String::new(), |a| format!(" from {a}"));
            let seq = match (s.first_seq, s.last_seq) {
                (Some(a), Some(b)) => format!(", seq {a}..{b}"),
                _ => String::new(),
            };
            let between = if s.lost_between_files > 0 {
                format!(" ({} between files)", s.lost_between_files)
            } else {
                String::new()
            };
            let invalid =
                if s.invalid > 0 { format!(", {} invalid", units::thousands(s.invalid)) } else { String::new() };
            let _ = writeln!(
                o,
                "    stream {}{from}: {} received, {} lost{between}{invalid}, {} gap(s){seq}",
                s.stream,
                units::thousands(s.received),
                units::thousands(s.lost),
                s.gaps
            );
        }
        // The largest few holes, in recording order.
        let mut big: Vec<usize> = (0..r.holes.len()).collect();
        big.sort_by_key(|&i| std::cmp::Reverse(r.holes[i].count));
        big.truncate(4);
        big.sort_unstable();
        for h in big.iter().map(|&i| &r.holes[i]) {
            let range = if h.first == h.last { h.first.to_string() } else { format!("{}..{}", h.first, h.last) };
            let place = match &h.next_file {
                Some(n) => format!("between {} and {n}", h.file),
                None => format!("in {}", h.file),
            };
            let _ = writeln!(o, "    hole: stream {} lacks {range} ({}) {place}", h.stream, h.count);
        }
        if r.holes_total > 4 {
            let _ = writeln!(
                o,
                "    ... {} hole(s) in all, the largest shown (--json lists the first {})",
                r.holes_total,
                catalog::MAX_HOLES
            );
        }
        for f in r.files.iter().filter(|f| f.state != FileState::Complete || !f.notes.is_empty()) {
            let ended = match (&f.ended_by, f.state) {
                (Some(e), FileState::CutShort) => format!(" ({e})"),
                _ => String::new(),
            };
            let notes = if f.notes.is_empty() { String::new() } else { format!(": {}", f.notes.join("; ")) };
            let _ = writeln!(o, "    file {}: {}{ended}{notes}", f.name, f.state.name());
        }
        if let Some(p) = &r.verify_problem {
            let _ = writeln!(o, "    verify: {p}");
        }
        for n in &r.notes {
            let _ = writeln!(o, "    note: {n}");
        }
    }
    for d in &cat.directories {
        let space = match (d.free_bytes, d.total_bytes) {
            (Some(f), Some(t)) if t > 0 => {
                format!("{} free of {} ({:.0}%)", units::bytes(f), units::bytes(t), f as f64 * 100.0 / t as f64)
            }
            (Some(f), _) => format!("{} free", units::bytes(f)),
            _ => "free space unknown".to_string(),
        };
        let stray = if d.stray > 0 { format!("; {} other entr(ies) not recordings", d.stray) } else { String::new() };
        let _ = writeln!(o, "disk of {}: {space}{stray}", d.path);
    }
    o
}
