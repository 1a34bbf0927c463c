//! `wirespeed verify`: re-read recordings, re-check every record, compare with the sidecars.

use crate::args;
use crate::out::{print_json, EXIT_LOSS, EXIT_MISMATCH};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use wirespeed::spool::verify::{self, VerifyOptions};
use wirespeed::units::{self};
use wirespeed::wire::{spec, Format};
use wirespeed::Error;

#[derive(Args)]
pub struct VerifyArgs {
    /// Recorded files, or directories of them (read in name order, as one recording); with
    /// --scan, the mount points the scan is on (quoted globs such as '/mnt/disk*' work).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Verify this scan (FlexBuff or Mark6) over the mount points given: its chunks are found on
    /// all of them and read in number order; missing chunks are named. Scans recorded by jive5ab
    /// or a Mark6 (no sidecars) are read by the format learned from their frames.
    #[arg(long, value_name = "NAME")]
    scan: Option<String>,
    /// Check the records as this format instead of what the sidecar names (needed for files
    /// without a sidecar, e.g. another recorder's pcap): a spec such as `counter,size=8800`.
    #[arg(long, value_name = "SPEC")]
    format: Option<String>,
    /// Reorder window of the ledger (power of two).
    #[arg(long, default_value = "65536", value_parser = args::window)]
    window: u64,
    /// Exit with code 3 if the recording has any loss, or if no record passed the format's
    /// checks (nothing then shows zero loss).
    #[arg(long)]
    expect_zero_loss: bool,
    /// Gap ranges shown per stream (all are in --json).
    #[arg(long, default_value = "8", value_parser = args::gaps)]
    gaps: usize,
    /// Print one JSON document (schema wirespeed.verify/2).
    #[arg(long)]
    json: bool,
}

pub fn cmd_verify(a: VerifyArgs) -> Result<u8, Error> {
    if !a.window.is_power_of_two() {
        return Err(Error::invalid(format!("--window {} must be a power of two", a.window)));
    }
    let format: Option<Arc<dyn Format>> = match &a.format {
        Some(s) => Some(spec::parse(s).map_err(Error::invalid)?),
        None => None,
    };
    let opts = VerifyOptions { format: format.clone(), window: a.window };
    let report = match &a.scan {
        Some(name) => {
            let mounts = wirespeed::spool::scan::expand_mounts(&a.paths)?;
            let found = wirespeed::spool::scan::find(name, &mounts)?;
            verify::verify_scan(&found, &opts)?
        }
        None => verify::verify(&verify::collect(&a.paths, format.as_ref())?, &opts)?,
    };
    if a.json {
        print_json(&report)?;
    } else {
        print!("{}", report.human(a.gaps));
    }
    if report.problems > 0 {
        return Ok(EXIT_MISMATCH);
    }
    if a.expect_zero_loss && report.total.received == 0 {
        eprintln!("wirespeed: no datagram in the files passed the format's checks, so zero loss is not shown");
        return Ok(EXIT_LOSS);
    }
    if a.expect_zero_loss && report.total.lost > 0 {
        eprintln!(
            "wirespeed: the recording lacks {} packets, zero loss was expected",
            units::thousands(report.total.lost)
        );
        return Ok(EXIT_LOSS);
    }
    Ok(0)
}
