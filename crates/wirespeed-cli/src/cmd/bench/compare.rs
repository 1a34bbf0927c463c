//! `wirespeed bench compare`: wirespeed and iperf3 over the same (rate, size) points, in the
//! same placement, side by side in one table and one plot.
//!
//! Options are read as text and checked here, so a bad value is one line and exit code 2.

use crate::args::{self, usage, List, OutputArgs, PlaceArgs};
use crate::out::{out_dir, print_json, write_files};
use clap::Args;
use std::time::Duration;
use wirespeed::bench::compare::{self, CompareConfig};
use wirespeed::bench::peer::{self, Iperf3};
use wirespeed::bench::point::Runner;
use wirespeed::units::Rate;
use wirespeed::{plot, sys, Error};

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
    Needs iperf3 (apt-get install iperf3). Exit codes: 0 done (loss is a result, not a \
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
    /// Sending time of each point, whole seconds (iperf3's -t takes no fraction).
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

/// iperf3's -t takes whole seconds, so a point's length must be one.
fn check_duration(d: Duration) -> Result<Duration, Error> {
    if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
        return Err(usage(format!(
            "--duration {} is not whole seconds: give 1s or more, like 5 (iperf3's -t takes whole seconds)",
            args::duration_text(d)
        )));
    }
    Ok(d)
}

pub fn cmd_compare(a: CompareArgs) -> Result<u8, Error> {
    let cfg = CompareConfig {
        rates: a.rates.0,
        sizes: check_sizes(a.sizes.0)?,
        duration: check_duration(a.duration)?,
        gso: a.place.gso,
        rcvbuf: a.rcvbuf,
        repeat: a.repeat,
    };
    // iperf3 first: without it there is nothing to compare, and no partition is made.
    peer::iperf3_version()?;
    let dir = out_dir(&a.output.out)?;
    // Ctrl-C reaches the children too; this process lives on to report and remove partitions.
    let stop = sys::install_stop_handler();
    let runner = Runner::auto(a.place.loopback, stop)?;
    let iperf3 = Iperf3::prepare(&runner, cfg.rcvbuf)?;
    let json = a.output.json;
    let head = compare::header(&cfg, &runner.placement(), &iperf3);
    if json {
        eprint!("{head}");
    } else {
        print!("{head}");
    }
    let doc = compare::run(&runner, &iperf3, &cfg, &mut |r, total| {
        let l = compare::run_line(r, total);
        if json {
            eprintln!("{l}");
        } else {
            println!("{l}");
        }
    })?;
    drop(runner);
    let table = compare::table(&doc);
    let mut plotted = false;
    if let Some(d) = &dir {
        let body =
            serde_json::to_string_pretty(&doc).map_err(|e| Error::Runtime(format!("cannot encode JSON: {e}")))?;
        write_files(
            d,
            &[
                ("compare.txt", &compare::text(&doc, &head)),
                ("compare.csv", &compare::csv(&doc)),
                ("compare.json", &body),
            ],
        )?;
        let chart = compare::chart(&doc);
        if !chart.series.is_empty() {
            plot::line_chart_files(&chart, &d.join("compare"))?;
            plotted = true;
        }
    }
    if json {
        print_json(&doc)?;
    } else {
        println!();
        print!("{table}");
        if let Some(d) = &dir {
            let files = if plotted {
                "compare.txt, .csv, .json, .png and .svg"
            } else {
                "compare.txt, .csv and .json (no plot: no offered rate to draw against)"
            };
            println!("{files} in {}", d.display());
        }
    }
    if doc.stopped {
        return Err(Error::Runtime(format!(
            "stopped by a signal after {} of {} runs; the results above are partial",
            doc.runs.len(),
            cfg.rates.len() * cfg.sizes.len() * cfg.repeat as usize * 2
        )));
    }
    Ok(0)
}
