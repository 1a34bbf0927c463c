//! `wirespeed bench compare`: wirespeed and iperf3 over the same (rate, size) points, in the
//! same placement, side by side in one table and one plot.
//!
//! Options are read as text and checked here, so a bad value is one line and exit code 2.

use crate::args::{self, usage, List, OutputArgs, PlaceArgs};
use crate::out::{finish_bench, out_dir, say, say_line, stopped, BenchEnd};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use wirespeed::units::{self, Rate};
use wirespeed::{sys, Error};
use wirespeed_lab::bench::compare::{self, CompareConfig};
use wirespeed_lab::bench::peer::tool::{self, Setup, Tool};
use wirespeed_lab::bench::peer::{self};
use wirespeed_lab::bench::point::Runner;
use wirespeed_lab::plot;

pub const COMPARE_HELP: &str = "The same sweep with wirespeed and with iperf3, side by side: at every \
    (rate, size) point a wirespeed receiver and sender (wirespeed recv --once, wirespeed send) \
    and an iperf3 server and client (iperf3 -s -1 / iperf3 -c -u -b RATE -l SIZE -t SECS -w \
    BUF -J) run one after the other in the same place: two partitions joined by a veth link \
    when root (made for the run, removed after it), on loopback otherwise, the senders on the \
    same CPU and the receivers on the same CPU. The order alternates from point to point \
    (wirespeed first, then iperf3 first, ...), so drift on a busy host hits both tools. One \
    unrecorded warm-up point of each tool comes first.\n\n\
    The table gives per (rate, size) the median over --repeat passes, per tool:\n  \
    asked Mb/s    the offered UDP payload rate, 10^6 bits/s (iperf3's -b counts payload too)\n  \
    size          UDP payload bytes per datagram (wirespeed --size, iperf3 -l)\n  \
    achieved      payload Mb/s the sender really sent (below asked: the sender was the limit)\n  \
    received      payload Mb/s that arrived, over the sender's sending time\n  \
    loss %        (sent - received) / sent, from each tool's own counts, tail included\n  \
    rx ns/pkt     receiver CPU per datagram (wirespeed: capture thread; iperf3: server process)\n  \
    received ws/iperf3  wirespeed's received rate over iperf3's: above 1, wirespeed got more \
    through\n\n\
    Every run is printed as it ends and kept in the CSV and JSON, with each tool's own loss \
    figure too: wirespeed's ledger (exact, tail included: the sender's end-of-stream message \
    says how many it sent) and iperf3's lost_packets (gaps in the sequence numbers its server \
    saw: loss after the last datagram that arrived is not counted, so it can read lower). \
    iperf3's CPU figure is its process's cpu_utilization_percent x test time / datagrams.\n\n\
    Buffers: both tools get the same socket buffer. iperf3's -w sets both sides' buffers but \
    cannot pass net.core.rmem_max / wmem_max, so when --rcvbuf is above them both tools get the \
    cap, and a note says so (raise the sysctls for larger buffers). \
    --gso is wirespeed's alone (iperf3 3.12 sends one datagram per system call).\n\n\
    sockperf is not compared: its throughput mode has no receiver count that reconciles with \
    the sender's (the server prints one total only when interrupted, and the sender's count \
    includes its warm-up messages), so its loss would be a guess. For latency against sockperf \
    see wirespeed ping.\n\n\
    Files in -o DIR: compare.txt (runs and table), compare.csv (every run), compare.json \
    (schema wirespeed.bench.compare/1: placement, every run of both tools, the medians), \
    compare.png and compare.svg (received vs offered rate, one line per tool and size, the \
    dashed diagonal is received = offered).\n\n\
    Try:  wirespeed bench compare                    (1, 2, 4, 6 Gb/s x 1080 and 8800 B, 5 s points)\n      \
    wirespeed bench compare --rates 1G:9G:1G --sizes 1080,4096,8800 --repeat 3 -o compare/\n      \
    wirespeed bench compare --loopback --rates 1G,3G --sizes 8800 --duration 2 --json\n\n\
    Other tools (--tools, comma-separated, in the order of the first point; the order rotates \
    from point to point): wirespeed, iperf3, and bare, a bare recvmmsg loop with no accounting \
    (the floor no receiver on plain recvmmsg goes below; fed by wirespeed send, its loss is \
    the sender's sent - its received). With --record DIR the tools are recorders instead and \
    write into DIR: wirespeed (wirespeed record), tcpdump (tcpdump -w, a 64 MiB ring) and \
    netsniff-ng (a 64 MiB ring), the default; a recorder's received is what its recording \
    holds (for the two pcap writers: the counter datagrams in the file, as wirespeed verify \
    --format counter,size=N counts them, with each tool's own drop count beside it), and \
    dd (bs=8M oflag=direct into DIR, before and after the points) gives the disk's ceiling, \
    shown as 'of dd'. Each run's recording is deleted after it (--keep keeps the pcap files).\n\n\
    --search searches each tool's highest zero-loss rate per size instead of running the rate \
    grid (bench max's search, on the rate the sender achieved; '>= X' when even the unpaced \
    sender lost nothing).\n\n\
    Try:  wirespeed bench compare --tools wirespeed,bare --gso --rates max --sizes 1080,8800\n      \
    wirespeed bench compare --search --tools wirespeed,bare,iperf3 --gso --repeat 3\n      \
    wirespeed bench compare --record /var/tmp/rec --rates 1G,4G --sizes 8800 --repeat 3\n\n\
    Variants of wirespeed, each a tool of its own in the same run (the tool 'wirespeed' in \
    --tools stands for all of them): --other-build PATH adds 'wirespeed-old', another build \
    as the receiver or recorder (this build sends to both); --backends LIST makes one tool \
    per receive backend ('wirespeed-recvmmsg', 'wirespeed-packet': recv/record --backend B); \
    --threads LIST one per capture-thread count ('wirespeed-t1', 'wirespeed-t2': --threads N, \
    with --cpus LIST passed on when N > 1); --streams N has wirespeed's sender send N streams \
    (so several threads have work); --writer-cpu CPU pins wirespeed record's writer and the \
    notes state where the writer ran either way. The option values are passed through to the \
    child wirespeed, which refuses what it does not know. With variants or --record the table \
    adds 'all ns/pkt': CPU per datagram of every thread that handled it (wirespeed: capture \
    threads and writer from its own report, n/a when a build does not report its writer's \
    CPU; tcpdump, netsniff-ng: their whole process from /proc/PID/stat); with several threads \
    the notes give each thread's ns/pkt and the balance (busiest thread's datagrams over the \
    mean). --search with --record gives each search's share of the dd ceiling and their \
    median. The capture engine's tables (BENCHMARKS section 11):\n      \
    wirespeed bench compare --record /var/tmp/rec --other-build /tmp/main/wirespeed --rates 20kpps,150kpps --sizes 1080,8800 --repeat 3 -o results/rec-cpu\n      \
    wirespeed bench compare --record /var/tmp/rec --search --tools wirespeed --sizes 8800 --repeat 3 --writer-cpu 1 -o results/rec-max\n      \
    wirespeed bench compare --tools wirespeed,bare --backends recvmmsg,packet --rates 400kpps --sizes 1080 --repeat 3 -o results/backends\n      \
    wirespeed bench compare --tools wirespeed --threads 1,2 --cpus 1-2 --streams 8 --rates 400kpps --sizes 1080 --repeat 3 -o results/threads\n\n\
    Needs iperf3 (apt-get install iperf3), tcpdump or netsniff-ng when named. \
    Exit codes: 0 done (loss is a result, not a \
    failure), 1 runtime failure, iperf3 missing, or stopped by a signal (Ctrl-C: the runs \
    measured are still reported, and partitions are removed), 2 bad usage.";

/// The options of `bench compare`; `--help` opens with [`COMPARE_HELP`] (set on the variant in
/// bench_cmd.rs, as for the other bench commands).
#[derive(Args)]
pub struct CompareArgs {
    /// Offered rates: payload bits/s (2G), datagrams/s (500kpps), max, and ranges
    /// FROM:TO:STEP (1G:9G:1G), comma-separated.
    #[arg(long, default_value = "1G,2G,4G,6G", value_parser = |s: &str| args::rate_list(s, compare::MAX_RATES))]
    rates: List<Rate>,
    /// UDP payload bytes per datagram, comma-separated (multiples of 8, at least 16).
    #[arg(long, default_value = "1080,8800", value_name = "BYTES", value_parser = args::counter_sizes)]
    sizes: List<usize>,
    /// Sending time of each point; whole seconds when iperf3 is among the tools (its -t takes no
    /// fraction), any length (500ms) otherwise.
    #[arg(long, default_value = "5s", value_parser = args::point_duration)]
    duration: Duration,
    /// Passes over the whole grid; the table shows each point's median.
    #[arg(long, default_value = "1", value_parser = args::repeat)]
    repeat: u32,
    /// Socket buffer for both tools (16M = 16 MiB): wirespeed's receiver asks for it, iperf3
    /// gets it as -w; both are held to net.core.rmem_max and wmem_max when those are lower.
    #[arg(long, default_value = "32M", value_name = "BYTES", value_parser = args::sockbuf)]
    rcvbuf: u64,
    #[command(flatten)]
    place: PlaceArgs,
    #[command(flatten)]
    output: OutputArgs,
    /// The tools to compare, comma-separated: wirespeed, iperf3, bare; with --record:
    /// wirespeed, tcpdump, netsniff-ng [default: wirespeed,iperf3; with --record:
    /// wirespeed,tcpdump,netsniff-ng].
    #[arg(long, value_name = "LIST")]
    tools: Option<String>,
    /// Compare recorders writing into this directory (created if needed), with dd's write rate
    /// into it as the ceiling.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// With --record: keep tcpdump's and netsniff-ng's pcap files (named TOOL-RUN.pcap).
    #[arg(long, requires = "record")]
    keep: bool,
    /// Instead of the rate grid, search each tool's highest zero-loss rate per size (the
    /// search of bench max: from the sender flat out down to 10M, 2% precision, 4% with
    /// --record; --repeat searches per tool and size, median reported; --rates is not used).
    #[arg(long)]
    search: bool,
    /// Another wirespeed binary, compared as the tool wirespeed-old (its receiver or recorder;
    /// this build sends to it).
    #[arg(long, value_name = "PATH")]
    other_build: Option<PathBuf>,
    /// Receive backends, comma-separated (recvmmsg, packet): one wirespeed tool per backend,
    /// named wirespeed-BACKEND, its receiver given --backend BACKEND.
    #[arg(long, value_name = "LIST", value_parser = backend_list)]
    backends: Option<List<String>>,
    /// Capture-thread counts, comma-separated (1,2): one wirespeed tool per count, named
    /// wirespeed-tN, its receiver given --threads N.
    #[arg(long, value_name = "LIST", value_parser = thread_list)]
    threads: Option<List<u32>>,
    /// CPUs for the capture threads of a --threads N > 1 receiver (passed on as --cpus, e.g. 1-2).
    #[arg(long, value_name = "LIST", requires = "threads", value_parser = cpu_list)]
    cpus: Option<String>,
    /// Streams wirespeed's sender sends (send --streams N), so several capture threads have work.
    #[arg(long, value_name = "N", value_parser = |s: &str| args::count_between(s, 1, 1024, "send takes 1..1024 streams"))]
    streams: Option<u64>,
    /// With --record: pin wirespeed record's writer thread to this CPU (record --writer-cpu).
    #[arg(long, value_name = "CPU", requires = "record")]
    writer_cpu: Option<usize>,
    /// With --record: the most dd writes for the disk's ceiling, before and after the points
    /// (less is quicker on a slow disk; more is closer to a long recording).
    #[arg(long, value_name = "BYTES", default_value = "1G", requires = "record",
          value_parser = |s: &str| args::bytes_between(s, 8 << 20, 1 << 40, "dd writes 8M blocks: give 8M or more"))]
    dd_size: u64,
}

/// A backend name as the receiver's --backend takes it (checked there; here only its shape).
fn backend_list(s: &str) -> Result<List<String>, String> {
    let v: Vec<String> = s.split(',').map(str::trim).filter(|b| !b.is_empty()).map(String::from).collect();
    if v.is_empty() {
        return Err("no backends: give e.g. recvmmsg,packet".into());
    }
    if let Some(b) = v.iter().find(|b| !b.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')) {
        return Err(format!("'{b}' is not a backend name: give e.g. recvmmsg,packet"));
    }
    Ok(List(v))
}

/// Capture-thread counts, 1..64 each.
fn thread_list(s: &str) -> Result<List<u32>, String> {
    let mut v = Vec::new();
    for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        match t.parse::<u32>() {
            Ok(n) if (1..=64).contains(&n) => v.push(n),
            _ => return Err(format!("'{t}' is not a thread count: give whole numbers 1..64, e.g. 1,2")),
        }
    }
    if v.is_empty() {
        return Err("no thread counts: give e.g. 1,2".into());
    }
    Ok(List(v))
}

/// A CPU list as `taskset -c` and `--cpus` read it (2-5, 1,3); passed on as written.
fn cpu_list(s: &str) -> Result<String, String> {
    wirespeed_lab::testbed::topology::parse_cpu_list(s)
        .map_err(|e| format!("'{s}' is not a CPU list ({e}): give e.g. 1-2 or 1,3"))?;
    Ok(s.to_string())
}

/// The wirespeed tools of this run: the plain one, or its variants (builds, backends, thread
/// counts, sender streams, writer CPU) as the options ask. `base` is the registry's tool.
fn variants(a: &CompareArgs, setup: &Setup, base: Box<dyn Tool>) -> Result<Vec<Box<dyn Tool>>, Error> {
    use wirespeed_lab::bench::peer::wirespeed::Variant;
    let mut common_recv: Vec<String> = Vec::new();
    if let Some(w) = a.writer_cpu {
        common_recv.extend(["--writer-cpu".into(), w.to_string()]);
    }
    let send: Vec<String> = a.streams.map(|n| vec!["--streams".into(), n.to_string()]).unwrap_or_default();
    let backends: Vec<Option<&str>> = match &a.backends {
        Some(b) => b.0.iter().map(|s| Some(s.as_str())).collect(),
        None => vec![None],
    };
    let threads: Vec<Option<u32>> = match &a.threads {
        Some(t) => t.0.iter().map(|&n| Some(n)).collect(),
        None => vec![None],
    };
    let plain = a.backends.is_none() && a.threads.is_none() && common_recv.is_empty() && send.is_empty();
    let mut out: Vec<Box<dyn Tool>> = Vec::new();
    if plain {
        out.push(base);
    } else {
        for b in &backends {
            for t in &threads {
                let mut name = "wirespeed".to_string();
                let mut v = Variant::new(String::new(), setup);
                v.recv_args = common_recv.clone();
                v.send_args = send.clone();
                if let Some(b) = b {
                    name.push_str(&format!("-{b}"));
                    v.recv_args.extend(["--backend".into(), b.to_string()]);
                }
                if let Some(t) = t {
                    name.push_str(&format!("-t{t}"));
                    v.recv_args.extend(["--threads".into(), t.to_string()]);
                    if let (true, Some(c)) = (*t > 1, &a.cpus) {
                        v.recv_args.extend(["--cpus".into(), c.clone()]);
                    }
                }
                v.name = Box::leak(name.into_boxed_str());
                out.push(Box::new(v));
            }
        }
    }
    if let Some(p) = &a.other_build {
        let mut v = Variant::new("wirespeed-old".into(), setup).other_build(p.clone())?;
        // The other build gets what every build has (not this build's new options).
        v.recv_args = common_recv;
        v.send_args = send;
        out.push(Box::new(v));
    }
    Ok(out)
}

/// The sizes both tools can send: iperf3's -l has a floor the counter format lacks. Repeats
/// are measured once.
fn check_sizes(sizes: Vec<usize>) -> Result<Vec<usize>, Error> {
    let mut out = Vec::new();
    for n in sizes {
        if n < peer::IPERF3_MIN_SIZE {
            return Err(usage(format!(
                "--sizes {n} does not suit both tools: use multiples of 8 from {} (wirespeed's counter datagrams, iperf3's -l)",
                peer::IPERF3_MIN_SIZE
            )));
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    Ok(out)
}

/// iperf3's -t takes whole seconds, so with iperf3 among the tools a point's length must be
/// one; the other tools take any length.
fn check_duration(d: Duration, with_iperf3: bool) -> Result<Duration, Error> {
    if with_iperf3 && (d < Duration::from_secs(1) || d.subsec_nanos() != 0) {
        return Err(usage(format!(
            "--duration {} is not whole seconds: give 1s or more, like 5 (iperf3's -t takes whole seconds), or leave iperf3 out of --tools",
            args::duration_text(d)
        )));
    }
    Ok(d)
}

pub fn cmd_compare(a: CompareArgs) -> Result<u8, Error> {
    let cfg = CompareConfig {
        rates: a.rates.0.clone(),
        sizes: check_sizes(a.sizes.0.clone())?,
        duration: a.duration,
        gso: a.place.gso,
        rcvbuf: a.rcvbuf,
        repeat: a.repeat,
        record: a.record.clone(),
        writer_cpu: a.writer_cpu,
        dd_bytes: a.dd_size,
    };
    let default = if cfg.record.is_some() { compare::RECORDERS.join(",") } else { compare::TOOLS.join(",") };
    let entries = tool::parse_tools(a.tools.as_deref().unwrap_or(&default), cfg.record.is_some())
        .map_err(|e| usage(format!("--tools: {e}")))?;
    check_duration(cfg.duration, entries.iter().any(|e| e.name == "iperf3"))?;
    let varies = a.other_build.is_some() || a.backends.is_some() || a.threads.is_some();
    if varies && !entries.iter().any(|e| e.name == compare::TOOLS[0]) {
        return Err(usage(
            "--other-build, --backends and --threads make variants of the tool wirespeed: name wirespeed in --tools"
                .into(),
        ));
    }
    if let Some(p) = &a.other_build {
        if !p.is_file() {
            return Err(usage(format!(
                "--other-build {}: no such file: give the path of another wirespeed binary (e.g. one built from main)",
                p.display()
            )));
        }
    }
    // The tools first (iperf3, tcpdump, ...): without them there is nothing to compare, and no
    // partition is made.
    let versions = entries.iter().map(|e| (e.check)()).collect::<Result<Vec<String>, Error>>()?;
    let dir = out_dir(&a.output.out)?;
    // Ctrl-C reaches the children too; this process lives on to report and remove partitions.
    let stop = sys::install_stop_handler();
    let mut runner = a.place.runner(stop)?;
    if let Some(d) = &cfg.record {
        runner.record_to(d.clone())?;
    }
    let setup = Setup { runner: &runner, rcvbuf: cfg.rcvbuf, record: cfg.record.as_deref(), keep: a.keep };
    let mut tools: Vec<Box<dyn Tool>> = Vec::new();
    for (e, v) in entries.iter().zip(versions) {
        let t = (e.make)(&setup, v)?;
        if e.name == compare::TOOLS[0] {
            tools.extend(variants(&a, &setup, t)?);
        } else {
            tools.push(t);
        }
    }
    let json = a.output.json;
    if a.search {
        return search(&runner, &tools, &cfg, dir.as_deref(), json);
    }
    let head = compare::header(&cfg, &runner.placement(), &tools);
    say(json, &head);
    let doc = compare::run(&runner, &tools, &cfg, &mut |r, total| {
        let l = compare::run_line(r, total);
        say_line(json, &l);
    })?;
    drop(runner);
    let table = compare::table(&doc);
    // The chart is named in the closing line only when it was drawn; a chart that fails still
    // leaves the data files written, and its error follows.
    let chart = compare::chart(&doc);
    let plotted = !chart.series.is_empty();
    let drawn = match &dir {
        Some(d) if plotted => plot::line_chart_files(&chart, &d.join("compare")).map(|_| ()),
        _ => Ok(()),
    };
    let also =
        if plotted && drawn.is_ok() { vec!["compare.png".to_string(), "compare.svg".to_string()] } else { Vec::new() };
    let mut shown = format!("\n{table}");
    if !plotted && dir.is_some() && !json {
        shown.push_str("(no plot: no offered rate to draw against)\n");
    }
    let extra = vec![("compare.csv".to_string(), compare::csv(&doc))];
    let end = BenchEnd { name: "compare", doc: &doc, text: compare::text(&doc, &head), extra, also, shown };
    end.finish(json, dir.as_deref())?;
    drawn?;
    if doc.stopped {
        return Err(stopped(&format!(
            "{} of {} runs",
            doc.runs.len(),
            cfg.rates.len() * cfg.sizes.len() * cfg.repeat as usize * tools.len()
        )));
    }
    Ok(0)
}

/// `--search`: every tool's highest zero-loss rate per size.
fn search(
    runner: &Runner,
    tools: &[Box<dyn Tool>],
    cfg: &CompareConfig,
    dir: Option<&std::path::Path>,
    json: bool,
) -> Result<u8, Error> {
    use wirespeed_lab::bench::peer::max::{self as pmax, SearchRun};
    use wirespeed_lab::bench::search::SearchConfig;
    let record = cfg.record.is_some();
    let run = SearchRun {
        sizes: cfg.sizes.clone(),
        duration: cfg.duration,
        gso: cfg.gso,
        rcvbuf: cfg.rcvbuf,
        repeat: cfg.repeat,
        search: SearchConfig {
            lo: 10e6,
            hi: None,
            precision: if record { 0.04 } else { 0.02 },
            max_probes: if record { 8 } else { 12 },
        },
        record: cfg.record.clone(),
        writer_cpu: cfg.writer_cpu,
        dd_bytes: cfg.dd_bytes,
    };
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    let head = format!(
        "wirespeed bench compare --search: {} ({}), {} per probe, {} search(es) per tool and size, {}",
        names.join(", "),
        if record { "recorders" } else { "receivers" },
        units::nanos(cfg.duration.as_nanos() as f64),
        cfg.repeat,
        runner.placement().description
    );
    let say = |l: &str| say_line(json, l);
    say(&head);
    let mut lines = vec![head];
    let doc = pmax::run(runner, tools, &run, &mut |l| {
        say(&l);
        lines.push(l);
    })?;
    let table = pmax::table(&doc);
    finish_bench(json, dir, "compare-search", format!("{}\n", lines.join("\n")), &doc, &table)?;
    if doc.stopped {
        return Err(stopped(&format!("{} search(es)", doc.searches.len())));
    }
    Ok(0)
}
