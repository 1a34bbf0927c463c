//! `bench writer`: the recorder's disk path alone. A RAM ring is filled up front and drained
//! by the writer with nothing competing, per write engine (io_uring, pwrite threads) and depth,
//! the configurations alternating run by run so drift hits all of them; medians of GB/s, write
//! latency and the writer's CPU per GB. This is what `record`'s default engine was chosen by.

use crate::bench::stats::median;
use serde::Serialize;
use std::path::Path;
use wirespeed::Result;

/// The id of `bench writer --json`.
pub const SCHEMA: &str = "wirespeed.bench.writer/1";

/// The whole measurement, as `bench writer --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct WriterDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The directory written to.
    pub dir: String,
    /// Bytes per run (the RAM ring drained).
    pub bytes: u64,
    /// Runs per configuration.
    pub repeat: u32,
    /// One row per engine and depth, in the order asked, with medians over its runs.
    pub rows: Vec<EngineRow>,
}

/// One engine and depth, over its runs.
#[derive(Debug, Clone, Serialize)]
pub struct EngineRow {
    /// "io_uring" or "threads".
    pub engine: String,
    /// Writes in flight.
    pub depth: usize,
    /// Runs made.
    pub runs: usize,
    /// Bytes written per run.
    pub bytes: u64,
    /// Median GB/s (1e9 bytes per second).
    pub gb_s: f64,
    /// Median of the runs' median write latency, ms.
    pub write_p50_ms: f64,
    /// Median of the runs' 99th percentile write latency, ms.
    pub write_p99_ms: f64,
    /// Median writer CPU seconds per GB.
    pub cpu_s_per_gb: f64,
    /// Whether O_DIRECT was used.
    pub direct_io: bool,
}

/// Drain `bytes` to `dir` `repeat` times per configuration, rotating, and sum up.
pub fn run(
    dir: &Path,
    bytes: usize,
    configs: &[(String, usize)],
    repeat: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<WriterDoc> {
    let mut all: Vec<Vec<(wirespeed::spool::writer::WriterReport, f64)>> = vec![Vec::new(); configs.len()];
    for r in 0..repeat {
        for (i, (engine, depth)) in configs.iter().enumerate() {
            let (rep, dt) = wirespeed::spool::writer::drain_once(dir, bytes, engine, *depth)?;
            progress(&format!(
                "run {}/{repeat} {engine} depth {depth}: {:.2} GB/s",
                r + 1,
                rep.bytes as f64 / dt.max(1e-9) / 1e9
            ));
            all[i].push((rep, dt));
        }
    }
    let rows = configs
        .iter()
        .zip(all)
        .map(|((engine, depth), runs)| {
            let m = |f: &dyn Fn(&(wirespeed::spool::writer::WriterReport, f64)) -> f64| {
                median(runs.iter().map(f).collect::<Vec<f64>>()).unwrap_or(0.0)
            };
            EngineRow {
                engine: engine.clone(),
                depth: *depth,
                runs: runs.len(),
                bytes: runs.first().map_or(0, |r| r.0.bytes),
                gb_s: m(&|r| r.0.bytes as f64 / r.1.max(1e-9) / 1e9),
                write_p50_ms: m(&|r| r.0.write_p50_ms),
                write_p99_ms: m(&|r| r.0.write_p99_ms),
                cpu_s_per_gb: m(&|r| r.0.cpu_s_per_gb),
                direct_io: runs.iter().all(|r| r.0.direct_io),
            }
        })
        .collect();
    Ok(WriterDoc { schema: SCHEMA, dir: dir.display().to_string(), bytes: bytes as u64, repeat, rows })
}
