//! `wirespeed ping`: round-trip latency at fixed packet rates (seed 003): percentile tables,
//! HdrHistogram logs and heat maps.

use crate::args;
use crate::out::print_json;
use clap::Args;
use std::io::{BufRead, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wirespeed::error::resolve;
use wirespeed::latency::ping::{self, PingConfig, PingReport};
use wirespeed::latency::reflect::{ReflectConfig, Reflector};
use wirespeed::latency::report::{self, Row};
use wirespeed::testbed::{self, pair::Pair};
use wirespeed::units::{self, Rate};
use wirespeed::{plot, sys, Error};

/// Port the self-contained run's reflector listens on inside its partition.
const PARTITION_PORT: u16 = 7149;

#[derive(Args, Clone)]
pub struct PingArgs {
    /// The reflector, HOST:PORT (`wirespeed reflect PORT` there, or any UDP echo service).
    /// Without it, ping starts its own reflector: across two partitions joined by a veth link
    /// when it has CAP_NET_ADMIN (created and removed again), otherwise on loopback.
    target: Option<String>,
    /// Probes per second; a comma list runs one after the other, as seed 003 did with
    /// 10000,20000,30000,40000, and writes a heat map per rate and one percentile table.
    #[arg(long, default_value = "10000", value_delimiter = ',', value_parser = parse_pps)]
    pps: Vec<f64>,
    /// UDP payload bytes per probe (24..65507, e.g. 64, 1K or 1e3; the probe header is 24 bytes).
    #[arg(long, default_value = "64", value_parser = args::probe_size)]
    size: usize,
    /// How long to probe at each rate (5, 30s, 2m).
    #[arg(long, default_value = "10s", value_parser = args::run_duration)]
    duration: Duration,
    /// Probes per rate instead of a duration.
    #[arg(long, value_parser = args::run_count)]
    count: Option<u64>,
    /// Histogram interval: one log entry and one progress line per interval (seed 003 used 2 s;
    /// 10ms..1h).
    #[arg(long, default_value = "2s", value_parser = args::bounded_interval)]
    interval: Duration,
    /// How long to wait for the last replies (0..60s); later ones count as lost. Ctrl-C or
    /// SIGTERM cuts the wait short.
    #[arg(long, default_value = "1s", value_parser = args::linger)]
    linger: Duration,
    /// Pause between the rates of a sweep (0..1h), so one rate's queues do not spill into the
    /// next.
    #[arg(long, default_value = "1s", value_parser = args::pause)]
    pause: Duration,
    /// Pin the ping thread to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Closed loop, the way sockperf ping-pong measures: each probe waits for the previous reply.
    /// Probes that could not leave on time are skipped and counted; the open loop (the default)
    /// shows what happens to them, so use this only to compare with closed-loop tools.
    #[arg(long)]
    closed_loop: bool,
    /// Poll without sleeping (ping and, when ping starts it, the reflector): lower and steadier
    /// latency, but each uses a whole core.
    #[arg(long)]
    spin: bool,
    /// Directory for the heat maps (PNG and SVG), HdrHistogram logs and tables.
    /// Default: ./wirespeed-ping-<UTC time>.
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
    /// Write no files; print the table only.
    #[arg(long, conflicts_with = "out")]
    no_files: bool,
    /// Without TARGET: stay on loopback even when partitions could be made.
    #[arg(long)]
    loopback: bool,
    /// Name of the path in titles (default: loopback, partition link, or the target).
    #[arg(long)]
    label: Option<String>,
    /// Exit with code 3 if any reply was lost.
    #[arg(long)]
    expect_zero_loss: bool,
    /// Print one JSON document (schema wirespeed.latency/1) instead of the tables.
    #[arg(long)]
    json: bool,
}

fn parse_pps(s: &str) -> Result<f64, String> {
    let r = Rate::parse(s).ok();
    let v = match r {
        Some(Rate::Packets(p)) => p,
        _ => s
            .replace('_', "")
            .parse::<f64>()
            .map_err(|_| format!("'{s}' is not a probe rate: give probes per second, e.g. 10000 or 10kpps"))?,
    };
    if !(v.is_finite() && v > 0.0 && v <= ping::MAX_PPS) {
        return Err(format!("{s} probes/s is out of range: use 1..{}", ping::MAX_PPS));
    }
    Ok(v)
}

/// Everything one `ping` invocation produced.
#[derive(serde::Serialize)]
struct LatencyDoc {
    schema: &'static str,
    path: String,
    runs: Vec<PingReport>,
    table: Vec<Row>,
    files: Vec<String>,
}

pub fn cmd_ping(a: PingArgs) -> Result<u8, Error> {
    // --size, --count, --duration, --interval, --linger and --pause were bounded by their parsers.
    match &a.target {
        Some(t) => {
            let target = resolve(t)?;
            let label = a.label.clone().unwrap_or_else(|| target.to_string());
            ping_sweep(&a, target, &label)
        }
        None if !a.loopback && testbed::require_net_admin("ping").is_ok() => ping_in_partitions(&a),
        None => ping_loopback(&a),
    }
}

fn out_dir(a: &PingArgs) -> Result<Option<PathBuf>, Error> {
    if a.no_files {
        return Ok(None);
    }
    let dir = a.out.clone().unwrap_or_else(|| {
        PathBuf::from(format!("wirespeed-ping-{}", wirespeed::spool::utc_compact(sys::realtime_ns())))
    });
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::Runtime(format!("cannot create the output directory {}: {e}", dir.display())))?;
    Ok(Some(dir))
}

/// Run every rate against `target`, write the files, print the table.
fn ping_sweep(a: &PingArgs, target: SocketAddr, label: &str) -> Result<u8, Error> {
    let fresh = !a.out.as_ref().is_some_and(|d| d.exists());
    let dir = out_dir(a)?;
    let stop = sys::install_stop_handler();
    let mut runs = Vec::new();
    let mut files = Vec::new();
    for (k, &pps) in a.pps.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if k > 0 && !sleep_unless_stopped(a.pause, stop) {
            break;
        }
        let mut cfg = PingConfig::new(target);
        cfg.pps = pps;
        cfg.size = a.size;
        cfg.duration = Some(a.duration);
        cfg.count = a.count;
        cfg.interval = a.interval;
        cfg.linger = a.linger;
        cfg.cpu = a.cpu;
        cfg.spin = a.spin;
        cfg.closed_loop = a.closed_loop;
        cfg.progress = !a.json;
        let tag = format!("{}pps", pps.round() as u64);
        cfg.hlog = dir.as_ref().map(|d| d.join(format!("rtt-{tag}.hlog")));
        if !a.json {
            eprintln!(
                "wirespeed ping: {} probes/s of {} B to {target} for {}{}",
                units::thousands(pps.round() as u64),
                a.size,
                match a.count {
                    Some(n) => format!("{n} probes"),
                    None => units::nanos(a.duration.as_nanos() as f64),
                },
                if a.pps.len() > 1 { format!(" (rate {} of {})", k + 1, a.pps.len()) } else { String::new() }
            );
        }
        let run = match ping::run(&cfg, stop) {
            Ok(run) => run,
            Err(e) => {
                // Nothing measured: remove this rate's log, and the directory if this run made
                // it and nothing else is in it (remove_dir refuses a directory that is not empty).
                if let Some(h) = &cfg.hlog {
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
            if let Some(h) = &cfg.hlog {
                files.push(h.display().to_string());
            }
        }
        if !a.json {
            print!("{}", run.report.human());
            println!();
        }
        runs.push(run.report);
    }
    let rows: Vec<Row> = runs.iter().map(Row::of).collect();
    let heading = format!(
        "Round-trip time (us) of {}-byte probes over {label}, open loop, {} per rate{}",
        a.size,
        match a.count {
            Some(n) => format!("{n} probes"),
            None => units::nanos(a.duration.as_nanos() as f64),
        },
        if stop.load(Ordering::Relaxed) { " (stopped early)" } else { "" }
    );
    let text = report::table_text(&rows, &heading);
    if let Some(d) = &dir {
        let doc = LatencyDoc {
            schema: "wirespeed.latency/1",
            path: label.to_string(),
            runs: runs.clone(),
            table: rows.clone(),
            files: files.clone(),
        };
        let json =
            serde_json::to_string_pretty(&doc).map_err(|e| Error::Runtime(format!("cannot encode JSON: {e}")))?;
        for (name, body) in
            [("latency.txt", text.as_str()), ("latency.csv", &report::table_csv(&rows)), ("latency.json", &json)]
        {
            let p = d.join(name);
            std::fs::write(&p, body).map_err(|e| Error::Runtime(format!("cannot write {}: {e}", p.display())))?;
            files.push(p.display().to_string());
        }
    }
    let lost: u64 = runs.iter().map(|r| r.replies.lost).sum();
    if a.json {
        print_json(&LatencyDoc { schema: "wirespeed.latency/1", path: label.to_string(), runs, table: rows, files })?;
    } else {
        print!("{text}");
        if let Some(d) = &dir {
            println!("heat maps, HdrHistogram logs (ns) and latency.{{txt,csv,json}} in {}", d.display());
        }
    }
    if a.expect_zero_loss && lost > 0 {
        return Ok(crate::out::EXIT_LOSS);
    }
    Ok(0)
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

/// No target, no privilege (or --loopback): a reflector thread on 127.0.0.1, on the other core.
fn ping_loopback(a: &PingArgs) -> Result<u8, Error> {
    let mut cfg = ReflectConfig::new("127.0.0.1:0".parse().expect("static address"));
    cfg.spin = a.spin;
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut args = a.clone();
    if ncpu >= 2 {
        cfg.cpu = Some(ncpu - 1);
        args.cpu = args.cpu.or(Some(0));
    }
    let reflector = Reflector::bind(&cfg)?;
    let target = reflector.local_addr().ok_or_else(|| Error::Runtime("cannot read the reflector's port".into()))?;
    if !a.json {
        eprintln!(
            "wirespeed ping: no target given, so a reflector runs here on loopback ({target}{}); give HOST:PORT to measure a real path",
            cfg.cpu.map(|c| format!(", CPU {c}; ping on CPU {}", args.cpu.unwrap_or(0))).unwrap_or_default()
        );
    }
    let done = AtomicBool::new(false);
    let label = a.label.clone().unwrap_or_else(|| "loopback".into());
    std::thread::scope(|s| {
        let h = s.spawn(|| reflector.run(&cfg, &done, None));
        // The reflector stops however the sweep ends, a panic included: the scope waits for
        // it, so a reflector left running would hang the process past every signal.
        let stop_reflector = SetOnDrop(&done);
        let r = ping_sweep(&args, target, &label);
        drop(stop_reflector);
        let refl = h.join().map_err(|_| Error::Runtime("the reflector thread failed".into()))??;
        if !a.json {
            eprintln!("reflector: {}", refl.human().lines().next().unwrap_or_default());
        }
        r
    })
}

impl PingArgs {
    /// The same request as arguments for a child `wirespeed ping TARGET`. Durations go in
    /// nanoseconds, so that no value the parent accepted rounds to one the child refuses.
    fn child_args(&self, target: &str, out: Option<&Path>, label: &str) -> Vec<String> {
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

/// No target, with privilege: reflector in partition 2, ping in partition 1, a veth link between.
fn ping_in_partitions(a: &PingArgs) -> Result<u8, Error> {
    let dir = match out_dir(a)? {
        Some(d) => Some(
            std::fs::canonicalize(&d)
                .map_err(|e| Error::Runtime(format!("cannot resolve the output directory {}: {e}", d.display())))?,
        ),
        None => None,
    };
    let stop = sys::install_stop_handler();
    let pair = Pair::create("wslat", "ping")?;
    let (prefix, cpus) = (&pair.prefix, &pair.cpus);
    let target = format!("{}:{PARTITION_PORT}", testbed::partition_addr(2));
    let label = a.label.clone().unwrap_or_else(|| "a partition link (veth)".into());
    if !a.json {
        eprintln!(
            "wirespeed ping: no target given, so partitions '{prefix}' are made: ping in partition 1 (CPUs {:?}), reflector in partition 2 (CPUs {:?}) at {target}, over a veth link; removed at the end (--loopback skips them)",
            cpus[0], cpus[1]
        );
    }
    let mut refl_args = vec!["reflect".to_string(), target.clone(), "--json".into()];
    if a.spin {
        refl_args.push("--spin".into());
    }
    let mut refl = pair
        .command(2, &refl_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Runtime(format!("cannot start the reflector: {e}")))?;
    let err = refl.stderr.take().ok_or_else(|| Error::Runtime("the reflector has no stderr".into()))?;
    let mut lines = std::io::BufReader::new(err);
    let mut first = String::new();
    let _ = lines.read_line(&mut first);
    if !first.contains("listening on") {
        let _ = refl.kill();
        let _ = refl.wait();
        return Err(Error::Runtime(format!("the reflector did not start: {}", first.trim())));
    }
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = lines.read_to_string(&mut rest);
        rest
    });
    // A Ctrl-C in the terminal reaches the children too; a signal sent to this process alone
    // (kill, timeout) is passed on, so ping ends its run, reports, and the partitions go.
    let status = pair
        .command(1, &a.child_args(&target, dir.as_deref(), &label))
        .spawn()
        .map_err(|e| Error::Runtime(format!("cannot start ping in partition 1: {e}")))
        .and_then(|mut child| {
            let mut forwarded = false;
            loop {
                if let Some(st) = child.try_wait().map_err(|e| Error::Runtime(format!("ping failed: {e}")))? {
                    return Ok(st);
                }
                if stop.load(Ordering::Relaxed) && !forwarded {
                    let _ = sys::send_signal(child.id(), sys::SIGTERM);
                    forwarded = true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
    let _ = sys::send_signal(refl.id(), sys::SIGTERM);
    let out = refl.wait_with_output().map_err(|e| Error::Runtime(format!("the reflector failed: {e}")))?;
    let rest = drain.join().unwrap_or_default();
    let status = status?;
    if !a.json {
        match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
            Ok(v) => eprintln!(
                "reflector in partition 2: reflected {} datagrams, {:.0} ns CPU each",
                v["reflected"],
                v["cpu_ns_per_datagram"].as_f64().unwrap_or(0.0)
            ),
            Err(_) => eprintln!("reflector in partition 2 reported nothing: {}", rest.trim()),
        }
    }
    if stop.load(Ordering::Relaxed) {
        eprintln!("wirespeed ping: stopped; partitions '{prefix}' removed");
    }
    Ok(status.code().map(|c| c as u8).unwrap_or(1))
}
