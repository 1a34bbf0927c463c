//! `wirespeed bench isolation`: a partition killed mid-transfer, and what the others see.

use crate::args::{self, OutputArgs};
use crate::out::{out_dir, say_line, BenchEnd};
use clap::Args;
use std::time::Duration;
use wirespeed::{units, Error};
use wirespeed_lab::bench::isolation::{self, IsolationConfig};
use wirespeed_lab::testbed;

pub const ISOLATION_HELP: &str = "Seed 000's first requirement, measured: a failure in one \
    partition must not affect the others. Makes three partitions with their daemons (XPC and \
    raw devices), streams from partition 1 to 2 and from 1 to 3 through raw devices (64 KiB \
    writes of a counter pattern), then kills partition 3 mid-transfer: its daemon with SIGKILL, \
    then its namespace. Reports how long each surviving daemon took to say `Partition 3 not \
    responding` (against the heartbeat bound, (--hb-misses + 1) x --hb-check: the last beat \
    may be seen up to one check after the kill), how long the writer \
    to 3 and the reader of 3 took to get their error (never a hang), and whether the stream \
    1 -> 2 went on exactly (every byte checked against the pattern, bytes read = bytes \
    written) and without a stall (its MB/s and longest gap between reads, before and after the \
    kill). Each run uses fresh partitions, removed after. With -o DIR the table and the \
    document are kept as isolation.txt and isolation.json. Needs root.\n\n\
    Try:  sudo wirespeed bench isolation                      (3 kills, heartbeat 100 ms x 3)\n      \
    sudo wirespeed bench isolation --repeat 5 --hb-check 1s --json\n\n\
    Exit codes: 0 done and the survivor exact, 1 runtime failure or a survivor stream not \
    exact, 2 bad usage.";

#[derive(Args)]
pub struct IsolationArgs {
    /// Kills, each on fresh partitions.
    #[arg(long, default_value = "3", value_parser = args::repeat)]
    repeat: u32,
    /// The daemons' heartbeat interval.
    #[arg(long, default_value = "100ms", value_parser = units::parse_duration)]
    hb_check: Duration,
    /// Checks without a beat before a peer is reported.
    #[arg(long, default_value = "3", value_parser = args::hb_misses)]
    hb_misses: u32,
    /// Streaming before the kill, and again after it.
    #[arg(long, default_value = "1s", value_parser = units::parse_duration)]
    window: Duration,
    #[command(flatten)]
    output: OutputArgs,
}

pub fn cmd_isolation(a: IsolationArgs) -> Result<u8, Error> {
    let ms = a.hb_check.as_millis() as u64;
    if !(10..=60_000).contains(&ms) {
        return Err(Error::invalid("--hb-check must be between 10ms and 60s"));
    }
    testbed::require_net_admin("bench isolation")?;
    let json = a.output.json;
    let c = IsolationConfig {
        repeat: a.repeat,
        hb: testbed::HbConfig { check_ms: ms, misses: a.hb_misses },
        before: a.window,
        after: a.window,
    };
    let dir = out_dir(&a.output.out)?;
    let rep = isolation::run(&c, &mut |l| say_line(json, l))?;
    let table = table(&rep, ms, a.hb_misses);
    BenchEnd { name: "isolation", doc: &rep, text: table.clone(), extra: Vec::new(), also: Vec::new(), shown: table }
        .finish(json, dir.as_deref())?;
    Ok(if rep.survivor_exact { 0 } else { 1 })
}

/// The kills' table, as stdout shows it and isolation.txt keeps it.
fn table(rep: &isolation::IsolationReport, ms: u64, misses: u32) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "partition 3 killed mid-transfer; heartbeat every {} ms, {} misses: bound ({} + 1) x {} = {} ms",
        ms,
        misses,
        misses,
        ms,
        ms * (u64::from(misses) + 1)
    );
    let _ = writeln!(
        t,
        "{:>3} {:>9} {:>9} {:>10} {:>10} {:>12} {:>9} {:>9} {:>8} {:>8}",
        "run",
        "seen by 1",
        "seen by 2",
        "writer->3",
        "reader<-3",
        "1->2 bytes",
        "MB/s pre",
        "MB/s post",
        "gap pre",
        "gap post"
    );
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} ms"));
    for (i, r) in rep.runs.iter().enumerate() {
        let s = &r.survivor;
        let _ = writeln!(
            t,
            "{:>3} {:>9} {:>9} {:>10} {:>10} {:>12} {:>9.0} {:>9.0} {:>5.0} ms {:>5.0} ms",
            i + 1,
            f(r.reported_by_1_ms),
            f(r.reported_by_2_ms),
            f(r.writer_to_dead_error_ms),
            f(r.reader_of_dead_end_ms),
            if s.bytes_read == s.bytes_written && s.pattern_errors == 0 {
                format!("{} ok", units::bytes(s.bytes_read))
            } else {
                format!("{}/{} BAD", s.bytes_read, s.bytes_written)
            },
            s.mb_s_before,
            s.mb_s_after,
            s.max_gap_ms_before,
            s.max_gap_ms_after
        );
    }
    let _ = writeln!(
        t,
        "median time to report: {}; survivor stream exact in every run: {}",
        rep.median_report_ms.map_or("-".into(), |v| format!("{v:.0} ms")),
        if rep.survivor_exact { "yes" } else { "NO" }
    );
    t
}
