//! The disk's ceiling for the record comparison: its sequential write rate as `dd` measures it
//! (`dd if=/dev/zero of=DIR/dd.bin bs=8M count=N oflag=direct`, bytes over dd's own seconds),
//! the reference a recorder's stored rate is set against. Not a tool run at the points: one
//! figure before the points and one after.

use serde::Serialize;
use std::path::Path;
use std::process::{Command, Stdio};
use wirespeed::{Error, Result};

/// Largest file written by default (1 GiB): enough to pass the page cache's write-back start on
/// O_DIRECT's path, small enough for a scratch disk (`bench compare --dd-size` sets another).
pub const MAX_BYTES: u64 = 1 << 30;

/// dd's block size.
const BLOCK: u64 = 8 << 20;

/// One dd run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DiskCeiling {
    /// "before" or "after" the points.
    pub when: &'static str,
    /// The command run.
    pub command: String,
    /// Bytes dd wrote.
    pub bytes: u64,
    /// dd's own seconds.
    pub seconds: f64,
    /// bytes / seconds.
    pub bytes_per_s: f64,
    /// Whether O_DIRECT was used (a filesystem without it gets `conv=fdatasync` instead).
    pub direct: bool,
}

/// Read dd's summary line ("N bytes (...) copied, S s, R GB/s").
pub fn parse_dd(text: &str) -> Option<(u64, f64)> {
    let line = text.lines().find(|l| l.contains(" bytes") && l.contains("copied"))?;
    let bytes = line.split_whitespace().next()?.parse().ok()?;
    let after = line.split("copied,").nth(1)?;
    let secs = after.split_whitespace().next()?.parse().ok()?;
    Some((bytes, secs))
}

/// Measure the write rate of the filesystem holding `dir` once, writing at most `max_bytes` (and
/// at most a quarter of its free space); the file is removed after.
pub fn disk_ceiling(dir: &Path, when: &'static str, max_bytes: u64) -> Result<DiskCeiling> {
    let free = wirespeed::sys::free_space(dir).unwrap_or(max_bytes * 4);
    let count = ((free / 4).min(max_bytes) / BLOCK).max(1);
    let file = dir.join("dd.bin");
    let mut last = String::new();
    for direct in [true, false] {
        let mut args = vec![
            "if=/dev/zero".to_string(),
            format!("of={}", file.display()),
            "bs=8M".into(),
            format!("count={count}"),
        ];
        args.push(if direct { "oflag=direct".into() } else { "conv=fdatasync".into() });
        let mut cmd = Command::new("dd");
        cmd.args(&args).env("LC_ALL", "C").stdin(Stdio::null());
        let out = wirespeed::sys::die_with_parent(&mut cmd)
            .output()
            .map_err(|e| Error::failed(format!("cannot run dd: {e}")))?;
        let _ = std::fs::remove_file(&file);
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            if let Some((bytes, seconds)) = parse_dd(&text) {
                return Ok(DiskCeiling {
                    when,
                    command: format!("dd {}", args.join(" ")),
                    bytes,
                    seconds,
                    bytes_per_s: if seconds > 0.0 { bytes as f64 / seconds } else { 0.0 },
                    direct,
                });
            }
        }
        last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no word").to_string();
    }
    Err(Error::failed(format!("dd could not measure {}: {last}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dd_summary_lines_are_read() {
        let t =
            "1024+0 records in\n1024+0 records out\n8589934592 bytes (8.6 GB, 8.0 GiB) copied, 3.81679 s, 2.3 GB/s\n";
        assert_eq!(parse_dd(t), Some((8_589_934_592, 3.81679)));
        assert_eq!(parse_dd("dd: failed to open 'x': Invalid argument"), None);
    }
}
