//! `wirespeed ping`'s runs: one open-loop ping per rate against a reflector, each rate's heat
//! map and HdrHistogram log, and the percentile table of them all as one
//! [`SCHEMA`] document. Without a target the run brings its own reflector: a thread on loopback
//! ([`loopback`]), or, with the privilege, a `wirespeed reflect` child in partition 2 with the
//! whole sweep re-run as a child in partition 1 ([`in_partitions`]) on one [`Place`].
//!
//! The command parses its options into a [`SweepConfig`], prints what [`Progress`] hands it,
//! and prints the returned document; everything that starts, waits for or stops a reflector or
//! a pinger is here.

use super::ping::{self, PingConfig, PingReport};
use super::reflect::{ReflectConfig, Reflector};
use super::report::{self, Row};
use crate::plot;
use crate::testbed::place::{Place, Side};
use crate::testbed::proc::{self, Proc, Wait};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wirespeed::{sys, units, Error, Result};

/// The document `ping --json` prints and `latency.json` holds.
pub const SCHEMA: &str = "wirespeed.latency/1";

/// Port the self-contained run's reflector listens on inside its partition.
const PARTITION_PORT: u16 = 7149;

/// One `ping` request: the rates to sweep and how each is probed, and where its files go.
#[derive(Clone, Debug)]
pub struct SweepConfig {
    /// Probes per second, one run per rate, in this order.
    pub pps: Vec<f64>,
    /// UDP payload bytes per probe.
    pub size: usize,
    /// How long to probe at each rate (unless `count`).
    pub duration: Duration,
    /// Probes per rate instead of a duration.
    pub count: Option<u64>,
    /// Histogram interval: one log entry and one progress line per interval.
    pub interval: Duration,
    /// How long to wait for the last replies.
    pub linger: Duration,
    /// Pause between the rates of a sweep.
    pub pause: Duration,
    /// Pin the ping thread to this CPU.
    pub cpu: Option<usize>,
    /// Each probe waits for the previous reply (sockperf's ping-pong).
    pub closed_loop: bool,
    /// Poll without sleeping (ping and, when the run starts it, the reflector).
    pub spin: bool,
    /// Directory for the files (default: `./wirespeed-ping-<UTC time>`).
    pub out: Option<PathBuf>,
    /// Write no files.
    pub no_files: bool,
    /// Name of the path in titles (default: loopback, partition link, or the target).
    pub label: Option<String>,
    /// The caller exits with its loss code if a reply was lost (passed on to a child run).
    pub expect_zero_loss: bool,
    /// The caller prints one JSON document: no progress lines, no human reports.
    pub json: bool,
    /// Probe over PGM (`--transport pgm`): the settings and the reply port.
    pub pgm: Option<(wirespeed::pgm::PgmConfig, u16)>,
}

/// What a sweep hands its caller while it runs (never with `json`).
pub enum Progress<'a> {
    /// A line for standard error.
    Note(&'a str),
    /// One rate's run is done: its report, for standard output.
    Run(&'a PingReport),
}

/// Everything one `ping` invocation produced.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyDoc {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The path's name (the label).
    pub path: String,
    /// One report per rate.
    pub runs: Vec<PingReport>,
    /// The percentile table, one row per rate.
    pub table: Vec<Row>,
    /// The files written.
    pub files: Vec<String>,
}

/// A finished sweep: the document and table to print, and where the files are.
pub struct Swept {
    /// The document, its `files` including `latency.{txt,csv,json}`.
    pub doc: LatencyDoc,
    /// The percentile table with its heading.
    pub text: String,
    /// The output directory, when files were written.
    pub dir: Option<PathBuf>,
    /// Replies lost over all rates.
    pub lost: u64,
}

impl SweepConfig {
    /// The output directory (created), or `None` with `no_files`.
    fn out_dir(&self) -> Result<Option<PathBuf>> {
        if self.no_files {
            return Ok(None);
        }
        let dir = self.out.clone().unwrap_or_else(|| {
            PathBuf::from(format!("wirespeed-ping-{}", wirespeed::spool::utc_compact(sys::realtime_ns())))
        });
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("cannot create the output directory {}: {e}", dir.display())))?;
        Ok(Some(dir))
    }

    fn how_long(&self) -> String {
        match self.count {
            Some(n) => format!("{n} probes"),
            None => units::nanos(self.duration.as_nanos() as f64),
        }
    }

    /// The far end of a self-contained run: `reflect` on `listen`, in JSON, with the sweep's
    /// transport and spin.
    fn reflector_args(&self, listen: &str) -> Vec<String> {
        let mut v = vec!["reflect".to_string(), listen.to_string(), "--json".into()];
        if let Some((p, reply)) = &self.pgm {
            v.extend(p.cli_args());
            if *reply != 0 {
                v.extend(["--reply-port".into(), reply.to_string()]);
            }
        }
        if self.spin {
            v.push("--spin".into());
        }
        v
    }

    /// The same request as arguments for a child `wirespeed ping TARGET`. Durations go in
    /// nanoseconds, so that no value the parent accepted rounds to one the child refuses.
    pub fn child_args(&self, target: &str, out: Option<&Path>, label: &str) -> Vec<String> {
        let mut v = vec![
            "ping".to_string(),
            target.to_string(),
            "--pps".into(),
            self.pps.iter().map(|p| format!("{p}")).collect::<Vec<_>>().join(","),
            "--size".into(),
            self.size.to_string(),
            "--duration".into(),
            format!("{}ns", self.duration.as_nanos()),
            "--interval".into(),
            format!("{}ns", self.interval.as_nanos()),
            "--linger".into(),
            format!("{}ns", self.linger.as_nanos()),
            "--pause".into(),
            format!("{}ns", self.pause.as_nanos()),
            "--label".into(),
            label.to_string(),
        ];
        if let Some(n) = self.count {
            v.extend(["--count".into(), n.to_string()]);
        }
        if let Some((p, reply)) = &self.pgm {
            v.extend(p.cli_args());
            // 0: the default (port + 1) on both ends.
            if *reply != 0 {
                v.extend(["--reply-port".into(), reply.to_string()]);
            }
        }
        for (on, flag) in [
            (self.spin, "--spin"),
            (self.json, "--json"),
            (self.expect_zero_loss, "--expect-zero-loss"),
            (self.closed_loop, "--closed-loop"),
        ] {
            if on {
                v.push(flag.into());
            }
        }
        match out {
            Some(d) => v.extend(["-o".into(), d.display().to_string()]),
            None => v.push("--no-files".into()),
        }
        v
    }
}

/// Run every rate against `target`, write the files (heat maps, logs, `latency.{txt,csv,json}`)
/// and return the table. A stop request ends the sweep after the rate under way.
pub fn sweep(
    cfg: &SweepConfig,
    target: SocketAddr,
    label: &str,
    stop: &AtomicBool,
    on: &mut dyn FnMut(Progress),
) -> Result<Swept> {
    let fresh = !cfg.out.as_ref().is_some_and(|d| d.exists());
    let dir = cfg.out_dir()?;
    let mut runs = Vec::new();
    let mut files = Vec::new();
    for (k, &pps) in cfg.pps.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if k > 0 && !sleep_unless_stopped(cfg.pause, stop) {
            break;
        }
        let mut pc = PingConfig::new(target);
        pc.pps = pps;
        pc.size = cfg.size;
        pc.duration = Some(cfg.duration);
        pc.count = cfg.count;
        pc.interval = cfg.interval;
        pc.linger = cfg.linger;
        pc.cpu = cfg.cpu;
        pc.spin = cfg.spin;
        pc.closed_loop = cfg.closed_loop;
        // Reply port 0: the target's port + 1 (the reflector's default too).
        pc.pgm = cfg.pgm.clone().map(|(p, r)| (p, if r == 0 { target.port().wrapping_add(1).max(1) } else { r }));
        pc.progress = !cfg.json;
        let tag = format!("{}pps", pps.round() as u64);
        pc.hlog = dir.as_ref().map(|d| d.join(format!("rtt-{tag}.hlog")));
        if !cfg.json {
            on(Progress::Note(&format!(
                "wirespeed ping: {} probes/s of {} B to {target} for {}{}",
                units::thousands(pps.round() as u64),
                cfg.size,
                cfg.how_long(),
                if cfg.pps.len() > 1 { format!(" (rate {} of {})", k + 1, cfg.pps.len()) } else { String::new() }
            )));
        }
        let run = match ping::run(&pc, stop) {
            Ok(run) => run,
            Err(e) => {
                // Nothing measured: remove this rate's log, and the directory if this run made
                // it and nothing else is in it (remove_dir refuses a directory that is not empty).
                if let Some(h) = &pc.hlog {
                    let _ = std::fs::remove_file(h);
                }
                if let (Some(d), true, true) = (&dir, fresh, runs.is_empty()) {
                    let _ = std::fs::remove_dir(d);
                }
                return Err(e);
            }
        };
        if let Some(d) = &dir {
            let (png, svg) = plot::heatmap_files(&report::heatmap(&run, label), &d.join(format!("heatmap-{tag}")))?;
            files.extend([png, svg].iter().map(|p| p.display().to_string()));
            if let Some(h) = &pc.hlog {
                files.push(h.display().to_string());
            }
        }
        if !cfg.json {
            on(Progress::Run(&run.report));
        }
        runs.push(run.report);
    }
    let rows: Vec<Row> = runs.iter().map(Row::of).collect();
    let heading = format!(
        "Round-trip time (us) of {}-byte probes over {label}, open loop, {} per rate{}",
        cfg.size,
        cfg.how_long(),
        if stop.load(Ordering::Relaxed) { " (stopped early)" } else { "" }
    );
    let text = report::table_text(&rows, &heading);
    if let Some(d) = &dir {
        let doc = LatencyDoc {
            schema: SCHEMA,
            path: label.to_string(),
            runs: runs.clone(),
            table: rows.clone(),
            files: files.clone(),
        };
        let json = serde_json::to_string_pretty(&doc).map_err(|e| Error::failed(format!("cannot encode JSON: {e}")))?;
        for (name, body) in
            [("latency.txt", text.as_str()), ("latency.csv", &report::table_csv(&rows)), ("latency.json", &json)]
        {
            let p = d.join(name);
            std::fs::write(&p, body).map_err(|e| Error::io(format!("cannot write {}: {e}", p.display())))?;
            files.push(p.display().to_string());
        }
    }
    let lost: u64 = runs.iter().map(|r| r.replies.lost).sum();
    Ok(Swept { doc: LatencyDoc { schema: SCHEMA, path: label.to_string(), runs, table: rows, files }, text, dir, lost })
}

/// Sleep for `d`, waking at least every 50 ms to see whether a stop was asked; false if it was.
fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) -> bool {
    let end = std::time::Instant::now() + d;
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Sets its flag when dropped, on every way out of a scope.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// No target, no privilege (or `--loopback`): a reflector thread on 127.0.0.1, on the last
/// CPU, ping on the first. Returns the sweep's own outcome and the reflector's one-line summary
/// (the reflector failing is the error).
pub fn loopback(cfg: &SweepConfig, stop: &AtomicBool, on: &mut dyn FnMut(Progress)) -> Result<(Result<Swept>, String)> {
    if cfg.pgm.is_some() {
        return Err(Error::invalid(
            "ping --transport pgm without a target runs in two partitions (root): give HOST:PORT of a `wirespeed reflect --transport pgm`, or run as root",
        ));
    }
    let mut rcfg = ReflectConfig::new("127.0.0.1:0".parse().expect("static address"));
    rcfg.spin = cfg.spin;
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut pcfg = cfg.clone();
    if ncpu >= 2 {
        rcfg.cpu = Some(ncpu - 1);
        pcfg.cpu = pcfg.cpu.or(Some(0));
    }
    let reflector = Reflector::bind(&rcfg)?;
    let target = reflector.local_addr().ok_or_else(|| Error::io("cannot read the reflector's port"))?;
    if !cfg.json {
        on(Progress::Note(&format!(
            "wirespeed ping: no target given, so a reflector runs here on loopback ({target}{}); give HOST:PORT to measure a real path",
            rcfg.cpu.map(|c| format!(", CPU {c}; ping on CPU {}", pcfg.cpu.unwrap_or(0))).unwrap_or_default()
        )));
    }
    let done = AtomicBool::new(false);
    let label = cfg.label.clone().unwrap_or_else(|| "loopback".into());
    std::thread::scope(|s| {
        let h = s.spawn(|| reflector.run(&rcfg, &done, None));
        // The reflector stops however the sweep ends, a panic included: the scope waits for
        // it, so a reflector left running would hang the process past every signal.
        let stop_reflector = SetOnDrop(&done);
        let r = sweep(&pcfg, target, &label, stop, on);
        drop(stop_reflector);
        let refl = h.join().map_err(|_| Error::io("the reflector thread failed"))??;
        Ok((r, refl.human().lines().next().unwrap_or_default().to_string()))
    })
}

/// No target, with privilege: reflector in partition 2, the whole sweep re-run as a child
/// `wirespeed ping` in partition 1 (printing its own report), a veth link between. A stop
/// request is passed on to the child, so it ends its run and reports, and the partitions go.
/// Returns the child's exit code.
pub fn in_partitions(cfg: &SweepConfig, stop: &AtomicBool, on: &mut dyn FnMut(Progress)) -> Result<u8> {
    let dir = match cfg.out_dir()? {
        Some(d) => Some(
            std::fs::canonicalize(&d)
                .map_err(|e| Error::failed(format!("cannot resolve the output directory {}: {e}", d.display())))?,
        ),
        None => None,
    };
    let place = Place::partitions("wslat", "ping")?;
    let pair = place.pair().ok_or_else(|| Error::failed("the partitions are gone"))?;
    let (prefix, cpus) = (&pair.prefix, &pair.cpus);
    let target = SocketAddr::new(place.ip(Side::Recv), PARTITION_PORT).to_string();
    let label = cfg.label.clone().unwrap_or_else(|| "a partition link (veth)".into());
    if !cfg.json {
        on(Progress::Note(&format!(
            "wirespeed ping: no target given, so partitions '{prefix}' are made: ping in partition 1 (CPUs {:?}), reflector in partition 2 (CPUs {:?}) at {target}, over a veth link; removed at the end (--loopback skips them)",
            cpus[0], cpus[1]
        )));
    }
    let refl_args = cfg.reflector_args(&target);
    let mut refl = Proc::spawn_listener(place.command(Side::Recv, &refl_args), "the reflector")?;
    if let Err(said) = refl.listening(None) {
        return Err(Error::failed(format!("the reflector did not start: {}", proc::first_line(&said).unwrap_or(""))));
    }
    // A Ctrl-C in the terminal reaches the children too; a signal sent to this process alone
    // (kill, timeout) is passed on.
    let pinged = Proc::spawn_inherit(
        place.command(Side::Send, &cfg.child_args(&target, dir.as_deref(), &label)),
        "ping in partition 1",
    )
    .and_then(|p| p.wait(Wait::new().stop(stop)));
    refl.terminate();
    let reflected = refl.wait(Wait::new())?;
    let pinged = pinged?;
    if !cfg.json {
        match serde_json::from_str::<serde_json::Value>(&reflected.stdout) {
            Ok(v) => on(Progress::Note(&format!(
                "reflector in partition 2: reflected {} datagrams, {:.0} ns CPU each",
                v["reflected"],
                v["cpu_ns_per_datagram"].as_f64().unwrap_or(0.0)
            ))),
            Err(_) => {
                on(Progress::Note(&format!("reflector in partition 2 reported nothing: {}", reflected.stderr.trim())))
            }
        }
    }
    if stop.load(Ordering::Relaxed) {
        on(Progress::Note(&format!("wirespeed ping: stopped; partitions '{prefix}' removed")));
    }
    Ok(pinged.status.code().map(|c| c as u8).unwrap_or(1))
}

/// No target, with `--tx` and `--rx`: the reflector on the receiving host, the whole sweep
/// re-run as `wirespeed ping` on the sending host, both over ssh. The far ping writes its files
/// on its host and they are brought back into the output directory here; its report is printed
/// here with that directory's name. A stop request ends both through their leashes, and the
/// far ping still reports. Returns the far ping's exit code.
pub fn on_hosts(
    hosts: crate::testbed::hosts::Hosts,
    cfg: &SweepConfig,
    stop: &AtomicBool,
    on: &mut dyn FnMut(Progress),
) -> Result<u8> {
    let dir = cfg.out_dir()?;
    let place = Place::hosts(hosts)?;
    let listen = SocketAddr::new(place.ip(Side::Recv), 0).to_string();
    let names: [String; 2] = place.host_ends().map(|h| [h.ends[0].name(), h.ends[1].name()]).unwrap_or_default();
    let label = cfg.label.clone().unwrap_or_else(|| format!("{} to {}", names[0], names[1]));
    let refl_args = cfg.reflector_args(&listen);
    let rwho = place.who(Side::Recv, "the reflector");
    let mut refl = Proc::spawn_listener(place.command(Side::Recv, &refl_args), &rwho)?;
    let target = refl
        .listening(None)
        .map_err(|said| Error::failed(format!("{rwho} did not start: {}", proc::last_line(&said).unwrap_or(""))))?;
    if !cfg.json {
        on(Progress::Note(&format!("wirespeed ping: {}, reflector at {target}", place.describe("ping", "reflector"))));
    }
    let files = dir.as_deref().map(|d| place.far_dir(Side::Send, d)).transpose()?;
    let far = files.as_ref().map(|f| f.path());
    let pinged = Proc::spawn(
        place.command(Side::Send, &cfg.child_args(&target, far.as_deref(), &label)),
        &place.who(Side::Send, "ping"),
    )
    .and_then(|p| p.wait(Wait::new().stop(stop)));
    refl.terminate();
    let reflected = refl.wait(Wait::new())?;
    let pinged = pinged?;
    if let Some(f) = files {
        f.fetch()?;
    }
    // The far ping names its own directory: here its files are in `dir`.
    let here = |t: &str| match (&far, &dir) {
        (Some(f), Some(d)) => t.replace(&f.display().to_string(), &d.display().to_string()),
        _ => t.to_string(),
    };
    // As its own output would have been: a closed stdout is not this run's failure.
    use std::io::Write;
    let _ = std::io::stdout().write_all(here(&pinged.stdout).as_bytes());
    let _ = std::io::stderr().write_all(here(&pinged.stderr).as_bytes());
    if !cfg.json {
        match serde_json::from_str::<serde_json::Value>(&reflected.stdout) {
            Ok(v) => on(Progress::Note(&format!(
                "reflector on {}: reflected {} datagrams, {:.0} ns CPU each",
                names[1],
                v["reflected"],
                v["cpu_ns_per_datagram"].as_f64().unwrap_or(0.0)
            ))),
            Err(_) => on(Progress::Note(&format!("{rwho} reported nothing: {}", reflected.stderr.trim()))),
        }
    }
    Ok(pinged.status.code().map(|c| c as u8).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SweepConfig {
        SweepConfig {
            pps: vec![10000.0, 20000.0],
            size: 64,
            duration: Duration::from_millis(1500),
            count: None,
            interval: Duration::from_secs(2),
            linger: Duration::from_secs(1),
            pause: Duration::ZERO,
            cpu: None,
            closed_loop: false,
            spin: true,
            out: None,
            no_files: true,
            label: None,
            expect_zero_loss: true,
            json: false,
            pgm: None,
        }
    }

    #[test]
    fn a_child_run_is_asked_for_the_same_thing() {
        let v = cfg().child_args("198.19.0.2:7149", None, "a link");
        assert_eq!(
            v.join(" "),
            "ping 198.19.0.2:7149 --pps 10000,20000 --size 64 --duration 1500000000ns --interval 2000000000ns \
             --linger 1000000000ns --pause 0ns --label a link --spin --expect-zero-loss --no-files"
        );
        let v = cfg().child_args("t", Some(Path::new("/tmp/x")), "l");
        assert_eq!(v[v.len() - 2..], ["-o", "/tmp/x"]);
    }
}
