//! `bench isolation`: seed 000's first requirement, measured. Three partitions with daemons;
//! partition 1 streams to 2 and to 3 through raw devices; partition 3 is killed mid-transfer
//! (its daemon with SIGKILL, then its namespace). Measured: how long until each surviving
//! daemon reports it (against the heartbeat bound, (misses + 1) x check), how long until the
//! transfers to and from it end with an error, and whether the stream 1 -> 2 went on without
//! loss (every byte checked against a counter pattern) or stall (its throughput and longest
//! gap between reads before and after the kill).

use crate::bench::stats::median;
use crate::testbed::place::{Pair, PairOptions};
use crate::testbed::{self, xplink, HbConfig};
use serde::Serialize;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wirespeed::{sys, Error, Result};

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct IsolationConfig {
    /// Kills (each with fresh partitions).
    pub repeat: u32,
    /// Heartbeat settings of the daemons.
    pub hb: HbConfig,
    /// Streaming before the kill, and after it.
    pub before: Duration,
    /// Streaming after the kill.
    pub after: Duration,
}

/// One kill.
#[derive(Debug, Clone, Serialize)]
pub struct IsolationRun {
    /// Milliseconds from the kill until partition 1's daemon logged "Partition 3 not responding".
    pub reported_by_1_ms: Option<f64>,
    /// The same for partition 2's daemon.
    pub reported_by_2_ms: Option<f64>,
    /// The heartbeat bound, milliseconds: (misses + 1) x check interval. A peer is reported
    /// after `misses` checks that saw no new beat; the last beat may have been seen up to one
    /// check after the kill (it was made just before it), so the report comes between
    /// (misses - 1) and (misses + 1) intervals after the kill.
    pub bound_ms: f64,
    /// Milliseconds until the writer to the dead partition got an error (never a hang).
    pub writer_to_dead_error_ms: Option<f64>,
    /// That error.
    pub writer_to_dead_error: Option<String>,
    /// Milliseconds until the reader of the dead partition's device got an error or the end.
    pub reader_of_dead_end_ms: Option<f64>,
    /// The surviving stream 1 -> 2.
    pub survivor: Survivor,
}

/// The stream between the partitions that stayed.
#[derive(Debug, Clone, Serialize)]
pub struct Survivor {
    /// Bytes the writer had written when it stopped.
    pub bytes_written: u64,
    /// Bytes the reader read (equal: nothing lost).
    pub bytes_read: u64,
    /// Bytes that did not match the counter pattern (0: nothing corrupted or reordered).
    pub pattern_errors: u64,
    /// MB/s (1e6) in the window before the kill.
    pub mb_s_before: f64,
    /// MB/s in the window after it.
    pub mb_s_after: f64,
    /// Longest time between two reads before the kill, milliseconds.
    pub max_gap_ms_before: f64,
    /// Longest time between two reads after it, milliseconds.
    pub max_gap_ms_after: f64,
    /// Error of the reader or writer, if any (none expected).
    pub error: Option<String>,
}

/// Medians over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct IsolationReport {
    /// Schema name.
    pub schema: &'static str,
    /// Heartbeat check interval, ms.
    pub hb_check_ms: u64,
    /// Misses before a peer is declared not responding.
    pub hb_misses: u32,
    /// The runs.
    pub runs: Vec<IsolationRun>,
    /// Median report time over both survivors and all runs, ms.
    pub median_report_ms: Option<f64>,
    /// Whether every run's survivor stream was complete and exact.
    pub survivor_exact: bool,
}

const BLOCK: usize = 64 << 10;

/// The byte at stream offset `o` of the counter pattern: word k (8 bytes, little-endian) is k.
fn pattern_byte(o: u64) -> u8 {
    (o / 8).to_le_bytes()[(o % 8) as usize]
}

fn fill(buf: &mut [u8], at: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(at + i as u64);
    }
}

/// Write the pattern to `path` until `stop`; returns (bytes written, error and when).
fn writer(path: std::path::PathBuf, stop: Arc<AtomicBool>) -> (u64, Option<(u64, String)>) {
    let mut f = match std::fs::OpenOptions::new().write(true).open(&path) {
        Ok(f) => f,
        Err(e) => return (0, Some((sys::monotonic_ns(), format!("open {}: {e}", path.display())))),
    };
    let mut buf = vec![0u8; BLOCK];
    let mut at = 0u64;
    while !stop.load(Ordering::Relaxed) {
        fill(&mut buf, at);
        match f.write(&buf) {
            Ok(n) => {
                // A short write leaves the rest of the block: the next block starts where it ended.
                at += n as u64;
            }
            // A signal that lands while a FUSE request waits ends it with EINTR, as a pipe's
            // would: nothing was taken, so the write is simply made again (as dd does).
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return (at, Some((sys::monotonic_ns(), e.to_string()))),
        }
    }
    (at, None)
}

/// Read `path` to its end, checking the pattern; (bytes, pattern errors, read times and
/// totals, end time, error).
struct ReadLog {
    bytes: u64,
    errors: u64,
    marks: Vec<(u64, u64)>,
    end_ns: u64,
    error: Option<String>,
}

impl ReadLog {
    /// A reader that never ended: nothing counted, `why` as its error.
    fn hung(why: &str) -> ReadLog {
        ReadLog { bytes: 0, errors: 0, marks: Vec::new(), end_ns: u64::MAX, error: Some(why.into()) }
    }
}

fn reader(path: std::path::PathBuf, progress: Arc<AtomicU64>) -> ReadLog {
    let mut log = ReadLog { bytes: 0, errors: 0, marks: Vec::with_capacity(1 << 16), end_ns: 0, error: None };
    let mut f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) => {
            log.error = Some(format!("open {}: {e}", path.display()));
            log.end_ns = sys::monotonic_ns();
            return log;
        }
    };
    let mut buf = vec![0u8; BLOCK];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                for (i, b) in buf[..n].iter().enumerate() {
                    if *b != pattern_byte(log.bytes + i as u64) {
                        log.errors += 1;
                    }
                }
                log.bytes += n as u64;
                progress.store(log.bytes, Ordering::Relaxed);
                log.marks.push((sys::monotonic_ns(), log.bytes));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                log.error = Some(e.to_string());
                break;
            }
        }
    }
    log.end_ns = sys::monotonic_ns();
    log
}

/// Throughput and longest gap of `marks` within [from, to).
fn window(marks: &[(u64, u64)], from: u64, to: u64) -> (f64, f64) {
    let inside: Vec<&(u64, u64)> = marks.iter().filter(|(t, _)| *t >= from && *t < to).collect();
    let (Some(first), Some(last)) = (inside.first(), inside.last()) else { return (0.0, (to - from) as f64 / 1e6) };
    let bytes = last.1 - first.1;
    let mut gap = first.0 - from;
    for w in inside.windows(2) {
        gap = gap.max(w[1].0 - w[0].0);
    }
    gap = gap.max(to.saturating_sub(last.0));
    (bytes as f64 / ((last.0 - first.0).max(1) as f64 / 1e9) / 1e6, gap as f64 / 1e6)
}

/// Wait until `path` can be opened (the daemons have activated each other), or fail.
fn wait_device(path: &std::path::Path, limit: Duration) -> Result<()> {
    let t = Instant::now();
    while !path.exists() {
        if t.elapsed() > limit {
            return Err(Error::failed(format!(
                "the raw device {} did not appear within {limit:?}: are the partition daemons running?",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// One kill, on fresh partitions.
pub fn run_once(c: &IsolationConfig) -> Result<IsolationRun> {
    let pair = Pair::create_with("wsiso", "bench", &PairOptions { partitions: 3, daemons: true, hb: c.hb })?;
    let p = pair.prefix.clone();
    let limit = Duration::from_secs(30);
    for (l, r) in [(1, 2), (2, 1), (1, 3), (3, 1)] {
        wait_device(&xplink::device_path(&p, l, r, 0), limit)?;
    }
    let stop12 = Arc::new(AtomicBool::new(false));
    let stop13 = Arc::new(AtomicBool::new(false));
    let (prog12, prog13) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let r12 = {
        let (path, prog) = (xplink::device_path(&p, 2, 1, 0), prog12.clone());
        std::thread::spawn(move || reader(path, prog))
    };
    let r13 = {
        let (path, prog) = (xplink::device_path(&p, 3, 1, 0), prog13.clone());
        std::thread::spawn(move || reader(path, prog))
    };
    let w12 = {
        let (path, stop) = (xplink::device_path(&p, 1, 2, 0), stop12.clone());
        std::thread::spawn(move || writer(path, stop))
    };
    let w13 = {
        let (path, stop) = (xplink::device_path(&p, 1, 3, 0), stop13.clone());
        std::thread::spawn(move || writer(path, stop))
    };
    // Both streams flow before the kill.
    let t = Instant::now();
    while prog12.load(Ordering::Relaxed) == 0 || prog13.load(Ordering::Relaxed) == 0 {
        if t.elapsed() > limit {
            stop12.store(true, Ordering::Relaxed);
            stop13.store(true, Ordering::Relaxed);
            return Err(Error::failed("no bytes went through the raw devices: the daemons did not connect"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(c.before);
    let st = testbed::load_existing(&p)?;
    let daemon3 = testbed::daemon_pid(&st, 3)
        .ok_or_else(|| Error::failed("partition 3's daemon is not running: nothing to kill"))?;
    let kill_ns = sys::monotonic_ns();
    let _ = sys::send_signal(daemon3, libc::SIGKILL);
    let ns3 = testbed::ns_name(&p, 3);
    let _ = std::process::Command::new("ip").args(["netns", "del", &ns3]).status();
    let needle = "Partition 3 not responding";
    let mut seen: [Option<f64>; 2] = [None, None];
    let deadline = Instant::now() + Duration::from_millis(c.hb.check_ms * u64::from(c.hb.misses) * 4 + 5000);
    while seen.iter().any(Option::is_none) && Instant::now() < deadline {
        for (i, id) in [1u32, 2].iter().enumerate() {
            if seen[i].is_none()
                && std::fs::read_to_string(testbed::log_file(&p, *id)).is_ok_and(|l| l.contains(needle))
            {
                seen[i] = Some((sys::monotonic_ns() - kill_ns) as f64 / 1e6);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let after_end = Instant::now() + c.after;
    while Instant::now() < after_end {
        std::thread::sleep(Duration::from_millis(10));
    }
    let stop_ns = sys::monotonic_ns();
    stop12.store(true, Ordering::Relaxed);
    stop13.store(true, Ordering::Relaxed);
    // A transfer that does not end within the limit is reported, never waited for forever.
    fn settle<T>(h: std::thread::JoinHandle<T>, limit: Duration) -> Option<T> {
        let t = Instant::now();
        while !h.is_finished() {
            if t.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        h.join().ok()
    }
    let limit = Duration::from_secs(10);
    let log12 = settle(r12, limit);
    let (written12, err12) = settle(w12, limit)
        .unwrap_or((0, Some((sys::monotonic_ns(), "the writer 1 -> 2 did not end within 10 s".into()))));
    let (_, err13) = settle(w13, limit).unwrap_or((0, Some((u64::MAX, "the writer to 3 hung".into()))));
    let log13 = settle(r13, limit).unwrap_or_else(|| ReadLog::hung("the reader of 3 hung"));
    let log12 = log12.unwrap_or_else(|| ReadLog::hung("the reader 1 -> 2 did not end within 10 s"));
    let from = kill_ns.saturating_sub(c.before.as_nanos() as u64);
    let (mb_before, gap_before) = window(&log12.marks, from, kill_ns);
    let (mb_after, gap_after) = window(&log12.marks, kill_ns, stop_ns);
    drop(pair);
    Ok(IsolationRun {
        reported_by_1_ms: seen[0],
        reported_by_2_ms: seen[1],
        bound_ms: (c.hb.check_ms * (u64::from(c.hb.misses) + 1)) as f64,
        writer_to_dead_error_ms: err13.as_ref().map(|(t, _)| t.saturating_sub(kill_ns) as f64 / 1e6),
        writer_to_dead_error: err13.map(|(_, e)| e),
        reader_of_dead_end_ms: Some(log13.end_ns.saturating_sub(kill_ns) as f64 / 1e6),
        survivor: Survivor {
            bytes_written: written12,
            bytes_read: log12.bytes,
            pattern_errors: log12.errors,
            mb_s_before: mb_before,
            mb_s_after: mb_after,
            max_gap_ms_before: gap_before,
            max_gap_ms_after: gap_after,
            error: match (log12.error, err12.map(|(_, e)| e)) {
                (Some(r), Some(w)) => Some(format!("reader: {r}; writer: {w}")),
                (Some(r), None) => Some(format!("reader: {r}")),
                (None, Some(w)) => Some(format!("writer: {w}")),
                (None, None) => None,
            },
        },
    })
}

/// `c.repeat` kills, each on fresh partitions; `progress` gets a line per run.
pub fn run(c: &IsolationConfig, progress: &mut dyn FnMut(&str)) -> Result<IsolationReport> {
    let mut runs = Vec::new();
    for i in 0..c.repeat {
        let r = run_once(c)?;
        progress(&format!(
            "run {}/{}: reported after {} / {} ms (bound {} ms), 1->2 {} of {} bytes, {} pattern errors",
            i + 1,
            c.repeat,
            r.reported_by_1_ms.map_or("-".into(), |v| format!("{v:.0}")),
            r.reported_by_2_ms.map_or("-".into(), |v| format!("{v:.0}")),
            r.bound_ms,
            r.survivor.bytes_read,
            r.survivor.bytes_written,
            r.survivor.pattern_errors
        ));
        runs.push(r);
    }
    let reports: Vec<f64> = runs.iter().flat_map(|r| [r.reported_by_1_ms, r.reported_by_2_ms]).flatten().collect();
    let survivor_exact = runs.iter().all(|r| {
        r.survivor.error.is_none()
            && r.survivor.pattern_errors == 0
            && r.survivor.bytes_read == r.survivor.bytes_written
            && r.survivor.bytes_read > 0
    });
    Ok(IsolationReport {
        schema: "wirespeed.isolation/1",
        hb_check_ms: c.hb.check_ms,
        hb_misses: c.hb.misses,
        median_report_ms: median(reports),
        survivor_exact,
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_a_counter_per_word_and_windows_measure_gaps() {
        let mut b = vec![0u8; 24];
        fill(&mut b, 8);
        assert_eq!(&b[..8], &1u64.to_le_bytes());
        assert_eq!(&b[16..], &3u64.to_le_bytes());
        // Reads at 0, 10 and 40 ms of a 50 ms window: the longest gap is 30 ms.
        let ms = 1_000_000;
        let marks = [(0, 100), (10 * ms, 200), (40 * ms, 1_000_000)];
        let (_, gap) = window(&marks, 0, 50 * ms);
        assert!((gap - 30.0).abs() < 1e-9, "{gap}");
        // No read at all in the window: the whole window is the gap.
        assert!((window(&marks, 60 * ms, 70 * ms).1 - 10.0).abs() < 1e-9);
    }
}
