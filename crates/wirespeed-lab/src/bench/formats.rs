//! `bench formats`: what building and checking one datagram's payload costs, per format, on
//! one core, in nanoseconds per datagram and GB/s of payload (BENCHMARKS.md sections 3 and 6).
//!
//! No network and no child process: each format's `emit` and `check` run in a tight loop over
//! one buffer, timed with the monotonic clock; the median of `reps` timing loops is reported,
//! because one loop can be slowed by anything else that runs on a shared host. The figure that
//! matters is the check's share of the receiver's CPU per datagram (from `bench max` or
//! `bench rates`, `recv_cpu_ns_per_packet`): format handling should be a small part of it.

use super::stats::upper_median;
use serde::Serialize;
use std::hint::black_box;
use std::time::Instant;
use wirespeed::wire::{spec, Format};
use wirespeed::{Error, Result};

/// Schema name of the JSON document.
pub const SCHEMA: &str = "wirespeed.bench.formats/1";

/// The formats measured by default: the counter at the sizes and byte orders of sections 1 and
/// 3, then every instrument format with its fills (section 6). Spec strings, as `--format` and
/// `wirespeed formats` spell them.
pub const DEFAULT_SPECS: &[&str] = &[
    "counter,size=64,order=be",
    "counter,size=64,order=le",
    "counter,size=1080,order=be",
    "counter,size=1080,order=le",
    "counter,size=8192,order=be",
    "counter,size=8192,order=le",
    "counter,size=8800,order=be",
    "counter,size=8800,order=le",
    "seqfield,offset=0,width=8,order=be,size=8192,fill=any",
    "seqfield,offset=0,width=8,order=be,size=8192,fill=zeros",
    "seqfield,offset=0,width=8,order=be,size=8192,fill=counter",
    "vdif,frame=8032,fps=32000,fill=any",
    "vdif,frame=8032,fps=32000,fill=counter",
    "vdif,frame=8032,fps=32000,fill=tvg",
    "vdif,frame=8032,fps=32000,fill=random:1",
    "vtp,frame=8032,fps=32000,fill=counter",
    "mark5b,fps=25600,fill=tvg",
    "mark5b,fps=25600,fill=counter",
    "mark5b,fps=25600,fill=any",
    "mark5b,fps=25600,halves=1,psn=1,fill=tvg",
    "mark5b,fps=25600,halves=1,psn=0,fill=tvg",
    "spead,heap=65536,payload=8192,fill=counter",
    "spead,heap=65536,payload=8192,fill=any",
    "spead,heap=4096,payload=1024,fill=counter",
];

/// Payload bytes one timing loop handles by default (the loop's datagram count is this over
/// the datagram size, at least [`MIN_DATAGRAMS`]): about 0.1 s per loop for most formats.
pub const DEFAULT_BYTES: u64 = 100_000_000;

/// Fewest datagrams in one timing loop, so the clock's own cost stays negligible.
pub const MIN_DATAGRAMS: u64 = 1_000;

/// What to measure.
#[derive(Clone, Debug)]
pub struct FormatsConfig {
    /// Format specs, in order (see [`DEFAULT_SPECS`]).
    pub specs: Vec<String>,
    /// Timing loops per figure; the median is reported.
    pub reps: u32,
    /// Payload bytes per timing loop.
    pub bytes: u64,
    /// The receiver's CPU per datagram at some sizes (ns, bytes), e.g. from `bench max`'s
    /// `recv_cpu_ns_per_packet`: each check is also given as a share of the figure of the
    /// nearest size. Empty: no share column.
    pub recv_cpu: Vec<(f64, usize)>,
}

/// The receiver CPU figure (ns) of the size nearest `bytes`.
pub fn nearest_recv_cpu(recv_cpu: &[(f64, usize)], bytes: usize) -> Option<f64> {
    recv_cpu.iter().min_by_key(|(_, size)| size.abs_diff(bytes)).map(|(ns, _)| *ns)
}

/// One format's cost.
#[derive(Clone, Debug, Serialize)]
pub struct FormatCost {
    /// The spec as given.
    pub spec: String,
    /// The format's own name for itself (what `recv` and `verify` print).
    pub name: String,
    /// UDP payload bytes per datagram.
    pub bytes: usize,
    /// Datagrams per timing loop.
    pub datagrams: u64,
    /// Median ns to build one datagram's payload (`emit`).
    pub build_ns: f64,
    /// Median ns to check one datagram (`check`: header, sequence number, payload as the fill
    /// allows).
    pub check_ns: f64,
    /// Payload built per second at that cost, GB/s (10^9 bytes).
    pub build_gbps: f64,
    /// Payload checked per second, GB/s.
    pub check_gbps: f64,
    /// The check over the receiver's CPU per datagram of the nearest size given (`None` when
    /// none was given).
    pub check_share: Option<f64>,
    /// The receiver CPU figure that share divides by, ns.
    pub recv_cpu_ns: Option<f64>,
    /// Every loop's figure, ns per datagram, in the order run (build).
    pub build_runs_ns: Vec<f64>,
    /// Every loop's figure (check).
    pub check_runs_ns: Vec<f64>,
}

/// The whole table, as `--json` prints it and formats.json holds it.
#[derive(Clone, Debug, Serialize)]
pub struct FormatsDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Timing loops per figure.
    pub reps: u32,
    /// Payload bytes per timing loop.
    pub bytes_per_loop: u64,
    /// Whether the counter's AVX2 kernels were chosen at run time (they make the counter check
    /// 4x faster than the x86-64 baseline).
    pub avx2: bool,
    /// One row per format, in the order asked.
    pub rows: Vec<FormatCost>,
}

/// Parse every spec before any timing, so a bad one is refused at once; formats without a
/// fixed datagram length cannot be timed and are refused too.
pub fn parse_specs(specs: &[String]) -> Result<Vec<std::sync::Arc<dyn Format>>> {
    specs
        .iter()
        .map(|s| {
            let f = spec::parse(s).map_err(|e| Error::invalid(format!("--format {s}: {e}")))?;
            if f.fixed_len().is_none() || f.packet_len() == 0 {
                return Err(Error::invalid(format!(
                    "--format {s}: this format has no fixed datagram size to time: give its size (e.g. counter,size=8800)"
                )));
            }
            Ok(f)
        })
        .collect()
}

/// Time `emit` and `check` of one format: `reps` loops of `n` datagrams each.
pub fn measure(f: &dyn Format, reps: u32, n: u64) -> (Vec<f64>, Vec<f64>) {
    let mut buf = vec![0u8; f.packet_len()];
    let (mut build, mut check) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        for s in 0..n {
            f.emit(0, s, black_box(&mut buf));
        }
        build.push(t.elapsed().as_nanos() as f64 / n as f64);
        f.emit(0, 7, &mut buf);
        let t = Instant::now();
        for _ in 0..n {
            // A datagram the format itself built is valid: an error here is a bug in the format.
            let _ = black_box(f.check(black_box(&buf)));
        }
        check.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    (build, check)
}

/// Measure every format in turn; `row` sees each as it is done.
pub fn run(cfg: &FormatsConfig, row: &mut dyn FnMut(&FormatCost)) -> Result<FormatsDoc> {
    let formats = parse_specs(&cfg.specs)?;
    let mut rows = Vec::new();
    for (s, f) in cfg.specs.iter().zip(&formats) {
        let len = f.packet_len();
        let mut probe = vec![0u8; len];
        f.emit(0, 7, &mut probe);
        if let Err(e) = f.check(&probe) {
            return Err(Error::failed(format!("{s}: a datagram this format built fails its own check: {e}")));
        }
        let n = (cfg.bytes / len as u64).max(MIN_DATAGRAMS);
        let (b, c) = measure(f.as_ref(), cfg.reps, n);
        let (build_ns, check_ns) = (upper_median(b.clone()).unwrap_or(0.0), upper_median(c.clone()).unwrap_or(0.0));
        let recv = nearest_recv_cpu(&cfg.recv_cpu, len).filter(|ns| *ns > 0.0);
        let gbps = |ns: f64| if ns > 0.0 { len as f64 / ns } else { 0.0 };
        let r = FormatCost {
            spec: s.clone(),
            name: f.name(),
            bytes: len,
            datagrams: n,
            build_ns,
            check_ns,
            build_gbps: gbps(build_ns),
            check_gbps: gbps(check_ns),
            check_share: recv.map(|ns| check_ns / ns),
            recv_cpu_ns: recv,
            build_runs_ns: b,
            check_runs_ns: c,
        };
        row(&r);
        rows.push(r);
    }
    Ok(FormatsDoc { schema: SCHEMA, reps: cfg.reps, bytes_per_loop: cfg.bytes, avx2: avx2(), rows })
}

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2() -> bool {
    false
}

/// The heading of the table.
pub fn header(cfg: &FormatsConfig) -> String {
    let per_loop = format!("{} payload bytes", wirespeed::units::thousands(cfg.bytes));
    let share = if cfg.recv_cpu.is_empty() { String::new() } else { format!(" {:>13}", "check/recv") };
    format!(
        "wirespeed bench formats: payload build and check cost on one core, median of {} timing loop(s) of {per_loop} each\n\
         ns/dgram = nanoseconds per datagram; GB/s = 10^9 payload bytes per second at that cost{}\n\
         {:>6} {:>14} {:>14} {:>10} {:>10}{share}  format\n",
        cfg.reps,
        if cfg.recv_cpu.is_empty() {
            ""
        } else {
            "; check/recv = the check over the receiver's CPU per datagram (--recv-cpu, nearest size)"
        },
        "bytes",
        "build ns/dgram",
        "check ns/dgram",
        "build GB/s",
        "check GB/s"
    )
}

/// One table line.
pub fn line(r: &FormatCost) -> String {
    let share = r.check_share.map(|s| format!(" {:>12.1}%", s * 100.0)).unwrap_or_default();
    format!(
        "{:>6} {:>14.1} {:>14.1} {:>10.2} {:>10.2}{share}  {}",
        r.bytes, r.build_ns, r.check_ns, r.build_gbps, r.check_gbps, r.spec
    )
}

/// The whole table as text.
pub fn text(doc: &FormatsDoc, cfg: &FormatsConfig) -> String {
    let mut s = header(cfg);
    for r in &doc.rows {
        s.push_str(&line(r));
        s.push('\n');
    }
    s.push_str(&format!(
        "counter check kernels: {}\n",
        if doc.avx2 { "AVX2 (chosen at run time)" } else { "baseline (no AVX2 on this CPU)" }
    ));
    s
}

/// The table as CSV.
pub fn csv(doc: &FormatsDoc) -> String {
    let mut s = String::from("spec,name,bytes,datagrams,build_ns,check_ns,build_gbps,check_gbps,check_share\n");
    for r in &doc.rows {
        s.push_str(&format!(
            "\"{}\",\"{}\",{},{},{:.2},{:.2},{:.3},{:.3},{}\n",
            r.spec,
            r.name,
            r.bytes,
            r.datagrams,
            r.build_ns,
            r.check_ns,
            r.build_gbps,
            r.check_gbps,
            r.check_share.map(|v| format!("{v:.4}")).unwrap_or_default()
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_spec_parses_and_checks_its_own_datagrams() {
        let specs: Vec<String> = DEFAULT_SPECS.iter().map(|s| s.to_string()).collect();
        let cfg = FormatsConfig { specs, reps: 1, bytes: 0, recv_cpu: vec![(1352.0, 1080), (1526.0, 8800)] };
        let mut seen = 0;
        let doc = run(&cfg, &mut |_| seen += 1).expect("runs");
        assert_eq!(seen, DEFAULT_SPECS.len());
        assert_eq!(doc.rows.len(), DEFAULT_SPECS.len());
        for r in &doc.rows {
            assert_eq!(r.datagrams, MIN_DATAGRAMS, "{}", r.spec);
            assert_eq!((r.build_runs_ns.len(), r.check_runs_ns.len()), (1, 1));
            assert!(r.build_ns > 0.0 && r.check_ns > 0.0, "{r:?}");
        }
        assert_eq!(doc.rows[2].bytes, 1080);
        // The share divides by the figure of the nearest size: 1352 ns for 1080 B and 1088 B,
        // 1526 ns for 8 KiB and more.
        assert_eq!(doc.rows[2].recv_cpu_ns, Some(1352.0));
        assert_eq!(doc.rows[0].recv_cpu_ns, Some(1352.0));
        assert_eq!(doc.rows[4].recv_cpu_ns, Some(1526.0));
        assert_eq!(doc.rows[2].check_share, Some(doc.rows[2].check_ns / 1352.0));
        assert_eq!(doc.rows.iter().find(|r| r.spec.starts_with("mark5b,fps=25600,fill=tvg")).unwrap().bytes, 10016);
        let c = csv(&doc);
        assert_eq!(c.lines().count(), DEFAULT_SPECS.len() + 1);
    }

    #[test]
    fn specs_without_a_size_or_unknown_are_refused() {
        let Err(e) = parse_specs(&["counter".to_string()]) else { panic!("refused") };
        let e = e.to_string();
        assert!(e.contains("no fixed datagram size"), "{e}");
        let Err(e) = parse_specs(&["nosuch".to_string()]) else { panic!("refused") };
        let e = e.to_string();
        assert!(e.starts_with("--format nosuch:"), "{e}");
    }
}
