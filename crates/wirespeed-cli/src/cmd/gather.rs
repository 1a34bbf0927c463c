//! `wirespeed gather`: a scan scattered over mount points, written out as one stream.

use crate::out::print_json;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use wirespeed::spool::scan::{self, ScanReader};
use wirespeed::{units, Error};

#[derive(Args)]
pub struct GatherArgs {
    /// The scan's name (as given to `record --scan`, jive5ab's `record=on:NAME` or a Mark6).
    scan: String,
    /// The mount points the scan is on (several, or a quoted glob such as '/mnt/disk*').
    #[arg(long, required = true, num_args = 1.., value_name = "MOUNT")]
    from: Vec<PathBuf>,
    /// Where to write the frames: a new file, or - for standard output (e.g. into a
    /// correlator's reader). An existing file is never replaced.
    #[arg(short = 'w', long = "write", value_name = "FILE|-")]
    write: Option<PathBuf>,
    /// Write even when chunks are missing (the holes are named on stderr); by default a scan
    /// with holes is refused, since its frames would be silently shorter.
    #[arg(long)]
    allow_holes: bool,
    /// Only list the scan's pieces (number, file, bytes), as JSON with --json.
    #[arg(long)]
    list: bool,
    /// Print the listing (or what was written) as one JSON document.
    #[arg(long)]
    json: bool,
}

pub fn cmd_gather(a: GatherArgs) -> Result<u8, Error> {
    let mounts = scan::expand_mounts(&a.from)?;
    let found = scan::find(&a.scan, &mounts)?;
    for p in &found.problems {
        eprintln!("wirespeed gather: {}: {p}", found.scan);
    }
    if a.list || a.write.is_none() {
        if a.json {
            print_json(&found)?;
        } else {
            println!(
                "scan {} ({}): {} piece(s), {} over {} mount point(s)",
                found.scan,
                found.layout.name(),
                found.pieces.len(),
                units::bytes(found.bytes()),
                found.mounts.len()
            );
            for p in &found.pieces {
                println!("  {:>8}  {}  +{}  {}", p.number, p.path.display(), p.offset, p.len);
            }
            for (x, y) in &found.holes {
                println!("  missing: {x}..={y}");
            }
            if a.write.is_none() && !a.list {
                println!("  (give -w FILE or -w - to write the scan out)");
            }
        }
        return Ok(if found.holes.is_empty() && found.problems.is_empty() { 0 } else { 4 });
    }
    if (!found.holes.is_empty() || !found.problems.is_empty()) && !a.allow_holes {
        let h: Vec<String> =
            found.holes.iter().map(|(x, y)| if x == y { x.to_string() } else { format!("{x}..{y}") }).collect();
        return Err(Error::invalid(if h.is_empty() {
            format!(
                "scan {} has damaged or doubled pieces (above): give --allow-holes to write what can be read",
                found.scan
            )
        } else {
            format!(
                "scan {} lacks piece(s) {}: its frames would be silently shorter; give --allow-holes to write it anyway",
                found.scan,
                h.join(", ")
            )
        }));
    }
    let target = a.write.clone().unwrap_or_default();
    let to_stdout = target.as_os_str() == "-";
    if !to_stdout && std::fs::symlink_metadata(&target).is_ok() {
        return Err(Error::invalid(format!("{} exists: an existing file is never replaced", target.display())));
    }
    // A file is written under a hidden name and given its own only when whole, so a gather cut
    // short (a full disk, an I/O error) never leaves a file that looks like the scan.
    let part = crate::out::hidden_part(&target);
    let mut out: Box<dyn Write> = if to_stdout {
        Box::new(std::io::stdout().lock())
    } else {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&part)
            .map_err(|e| Error::usage_io(format!("cannot create {}: {e}", part.display()), &e))?;
        Box::new(std::io::BufWriter::with_capacity(8 << 20, f))
    };
    let mut r = ScanReader::new(&found);
    // A reader of stdout that goes away (`| head`) ends the gather, as it ends an extract.
    let gone = |e: &std::io::Error| to_stdout && e.kind() == std::io::ErrorKind::BrokenPipe;
    let copied = match std::io::copy(&mut r, &mut out) {
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(Error::io(format!("gathering scan {}: {e}", found.scan))),
        Ok(n) => match out.flush() {
            Err(e) if gone(&e) => Ok(None),
            Err(e) => Err(Error::io(format!("writing {}: {e}", target.display()))),
            Ok(()) => Ok(Some(n)),
        },
    };
    drop(out);
    if matches!(copied, Ok(None)) {
        eprintln!("wirespeed gather: scan {}: the reader of stdout went away: stopped there", found.scan);
        return Ok(0);
    }
    let copied = copied.map(|n| n.unwrap_or(0));
    let n = match copied {
        Ok(n) => n,
        Err(e) => {
            if !to_stdout {
                let _ = std::fs::remove_file(&part);
            }
            return Err(e);
        }
    };
    if !to_stdout {
        wirespeed::sys::file::rename_noreplace(&part, &target).map_err(|e| {
            let _ = std::fs::remove_file(&part);
            Error::io(format!("cannot name the gathered scan {}: {e}", target.display()))
        })?;
    }
    eprintln!(
        "wirespeed gather: scan {} ({}): {} from {} piece(s) on {} mount point(s) -> {}",
        found.scan,
        found.layout.name(),
        units::bytes(n),
        found.pieces.len(),
        found.mounts.len(),
        target.display()
    );
    Ok(0)
}
