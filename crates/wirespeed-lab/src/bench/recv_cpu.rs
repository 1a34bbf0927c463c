//! The CPU a receiver or recorder spent, read from its own JSON report (`wirespeed.recv/1` or
//! `wirespeed.record/1`) for the benchmarks that compare builds, backends and thread counts.
//!
//! Builds differ in what they report: one capture thread (`capture_cpu_ns`) or several
//! (`threads`, each with its own CPU time and count), a writer that reports its CPU or not.
//! Every figure is read defensively: one a build does not report is `None` (shown as n/a),
//! never zero and never a panic, so a benchmark runs against an older build and says what it
//! could not measure.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One capture thread's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ThreadFigures {
    /// The thread's index.
    pub index: usize,
    /// The CPU it ran on, when reported.
    pub cpu: Option<usize>,
    /// Datagrams it took in.
    pub datagrams: Option<u64>,
    /// Its CPU time, ns.
    pub cpu_ns: Option<u64>,
    /// Its CPU time per datagram it took in, ns.
    pub cpu_ns_per_packet: Option<f64>,
}

/// What a report says of the receiving side's CPU.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ReceiverCpu {
    /// Datagrams taken in (all threads).
    pub datagrams: Option<u64>,
    /// CPU time of every capture thread, ns.
    pub capture_ns: Option<u64>,
    /// CPU time of the writer thread(s), ns (a recorder that reports it).
    pub writer_ns: Option<u64>,
    /// The writer's CPU per GB written, ns, as reported.
    pub writer_ns_per_gb: Option<f64>,
    /// Capture + writer CPU per datagram, ns: every thread that handles a datagram. For a
    /// receiver, the capture threads; for a recorder, `None` unless the writer's CPU is known.
    pub all_ns_per_packet: Option<f64>,
    /// Per capture thread, when the report has more than one (`threads`).
    pub threads: Vec<ThreadFigures>,
}

fn num_u64(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_f64().filter(|f| f.is_finite() && *f >= 0.0).map(|f| f.round() as u64))
}

/// A CPU time in ns from any of the spellings a report may use: `K_ns`, `K_s` (seconds).
fn cpu_ns(v: &Value, keys: &[&str]) -> Option<u64> {
    for k in keys {
        if let Some(n) = num_u64(&v[format!("{k}_ns")]) {
            return Some(n);
        }
        if let Some(s) = v[format!("{k}_s")].as_f64().filter(|s| s.is_finite() && *s >= 0.0) {
            return Some((s * 1e9).round() as u64);
        }
    }
    None
}

fn thread(i: usize, t: &Value) -> ThreadFigures {
    let datagrams = num_u64(&t["datagrams"]).or_else(|| num_u64(&t["received"]));
    let cpu_ns = cpu_ns(t, &["capture_cpu", "cpu"]);
    let per = t["cpu_ns_per_packet"].as_f64().or_else(|| match (cpu_ns, datagrams) {
        (Some(c), Some(d)) if d > 0 => Some(c as f64 / d as f64),
        _ => None,
    });
    ThreadFigures {
        index: t["index"].as_u64().map_or(i, |x| x as usize),
        cpu: t["capture_cpu"].as_u64().or_else(|| t["cpu"].as_u64()).map(|c| c as usize),
        datagrams,
        cpu_ns,
        cpu_ns_per_packet: per,
    }
}

/// Read a receiver's (`wirespeed.recv/1`) or recorder's (`wirespeed.record/1`) report.
pub fn read(report: &Value) -> ReceiverCpu {
    let recording = report["schema"].as_str().is_some_and(|s| s.starts_with("wirespeed.record/"));
    let cap = if recording { &report["capture"] } else { report };
    let threads: Vec<ThreadFigures> = cap["threads"]
        .as_array()
        .map(|a| a.iter().enumerate().map(|(i, t)| thread(i, t)).collect())
        .unwrap_or_default();
    let datagrams = num_u64(&cap["datagrams"]);
    let from_threads: Option<u64> =
        if threads.is_empty() { None } else { threads.iter().map(|t| t.cpu_ns).sum::<Option<u64>>() };
    let capture_ns = from_threads.or_else(|| cpu_ns(cap, &["capture_cpu"]));
    let w = &report["writer"];
    let writer_ns_per_gb = w["cpu_ns_per_gb"].as_f64().or_else(|| w["cpu_per_gb_ns"].as_f64());
    let writer_ns = cpu_ns(w, &["cpu", "writer_cpu"])
        .or_else(|| {
            // Several writers, one per capture thread.
            let ws = report["writers"].as_array()?;
            ws.iter().map(|x| cpu_ns(x, &["cpu", "writer_cpu"])).sum::<Option<u64>>()
        })
        .or_else(|| Some((writer_ns_per_gb? * num_u64(&w["bytes"])? as f64 / 1e9).round() as u64));
    let all = match (recording, capture_ns, writer_ns, datagrams) {
        (_, Some(c), _, Some(d)) if !recording && d > 0 => Some(c as f64 / d as f64),
        (true, Some(c), Some(w), Some(d)) if d > 0 => Some((c + w) as f64 / d as f64),
        _ => None,
    };
    ReceiverCpu { datagrams, capture_ns, writer_ns, writer_ns_per_gb, all_ns_per_packet: all, threads }
}

/// How evenly the threads shared the datagrams: the busiest thread's count over the mean
/// (1.0 = perfectly even; 2.0 with two threads = one did everything). `None` with fewer than
/// two threads or counts missing.
pub fn balance(threads: &[ThreadFigures]) -> Option<f64> {
    if threads.len() < 2 {
        return None;
    }
    let counts: Option<Vec<u64>> = threads.iter().map(|t| t.datagrams).collect();
    let counts = counts?;
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let mean = total as f64 / counts.len() as f64;
    Some(*counts.iter().max()? as f64 / mean)
}

/// A process's CPU time (user + system, every thread, live or ended) from `/proc/PID/stat`,
/// ns; `None` when the process is gone. For the recorders that report no CPU of their own
/// (tcpdump, netsniff-ng): read just before they are stopped.
pub fn process_cpu_ns(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_cpu_ns(&s, clock_ticks())
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, in ns at `ticks` per second.
pub fn stat_cpu_ns(stat: &str, ticks: u64) -> Option<u64> {
    // The command name (field 2) may hold spaces or ')': count from after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3: utime is field 14, stime field 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) * 1_000_000_000 / ticks.max(1))
}

/// Clock ticks per second of `/proc` CPU times (`getconf CLK_TCK`; 100, the Linux USER_HZ,
/// when getconf is missing).
fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .filter(|t| *t > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn todays_receiver_has_one_capture_thread_and_no_threads_list() {
        let r = read(&v(r#"{"schema":"wirespeed.recv/1","datagrams":1000,"capture_cpu_ns":2000000,"capture_cpu":1}"#));
        assert_eq!((r.datagrams, r.capture_ns, r.writer_ns), (Some(1000), Some(2_000_000), None));
        assert_eq!(r.all_ns_per_packet, Some(2000.0));
        assert!(r.threads.is_empty());
        assert_eq!(balance(&r.threads), None);
    }

    #[test]
    fn todays_recorder_reports_no_writer_cpu_so_all_threads_is_na() {
        let r = read(&v(r#"{"schema":"wirespeed.record/1","capture":{"datagrams":1000,"capture_cpu_ns":1000000},
                "writer":{"bytes":8800000,"write_stalls":0}}"#));
        assert_eq!(r.capture_ns, Some(1_000_000));
        assert_eq!((r.writer_ns, r.all_ns_per_packet), (None, None));
    }

    #[test]
    fn a_recorder_with_writer_cpu_and_two_threads() {
        let r = read(&v(r#"{"schema":"wirespeed.record/1",
                "capture":{"datagrams":1000,"capture_cpu_ns":9,
                  "threads":[{"index":0,"capture_cpu":2,"datagrams":600,"capture_cpu_ns":600000},
                             {"index":1,"capture_cpu":3,"received":400,"cpu_s":0.0004}]},
                "writer":{"bytes":8800000,"cpu_ns":200000}}"#));
        assert_eq!(r.capture_ns, Some(1_000_000), "the threads' sum, not the top-level figure");
        assert_eq!(r.writer_ns, Some(200_000));
        assert_eq!(r.all_ns_per_packet, Some(1200.0));
        assert_eq!(r.threads.len(), 2);
        assert_eq!(
            (r.threads[1].cpu, r.threads[1].datagrams, r.threads[1].cpu_ns),
            (Some(3), Some(400), Some(400_000))
        );
        assert_eq!(r.threads[0].cpu_ns_per_packet, Some(1000.0));
        assert_eq!(balance(&r.threads), Some(1.2));
        // The writer's CPU given only per GB written.
        let r = read(&v(r#"{"schema":"wirespeed.record/1","capture":{"datagrams":1000,"capture_cpu_ns":1000000},
                "writer":{"bytes":2000000000,"cpu_ns_per_gb":500000}}"#));
        assert_eq!((r.writer_ns, r.writer_ns_per_gb), (Some(1_000_000), Some(500_000.0)));
        assert_eq!(r.all_ns_per_packet, Some(2000.0));
    }

    #[test]
    fn a_thread_without_a_count_makes_balance_unknown_not_zero() {
        let r = read(&v(r#"{"schema":"wirespeed.recv/1","datagrams":10,
                "threads":[{"datagrams":10,"cpu_ns":5},{"cpu_ns":5}]}"#));
        assert_eq!(balance(&r.threads), None);
        assert_eq!(r.capture_ns, Some(10));
        assert_eq!(read(&Value::Null), ReceiverCpu::default());
        assert_eq!(read(&v(r#"{"schema":"wirespeed.recv/1","datagrams":"many"}"#)).datagrams, None);
    }

    #[test]
    fn proc_stat_cpu_times() {
        let line = "4242 (tcp dump) S 1 4242 4242 0 -1 4194560 500 0 0 0 150 50 0 0 20 0 1 0 12345 0 0";
        assert_eq!(stat_cpu_ns(line, 100), Some(2_000_000_000));
        assert_eq!(stat_cpu_ns("garbage", 100), None);
        assert!(process_cpu_ns(std::process::id()).is_some());
    }
}
