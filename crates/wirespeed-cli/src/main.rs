//! The `wirespeed` command: argument parsing and printing only; the work is in the library.

#![forbid(unsafe_code)]

// Output that cannot be written (`wirespeed ping | head -1`, a closed terminal) must not panic:
// std's print macros do, and a panic mid-run skips the cleanup (a reflector thread left
// running, partitions left behind). These shadow them in every module below: what cannot be
// printed is dropped, and the run goes on to finish, clean up and exit with its own code.
macro_rules! print {
    ($($arg:tt)*) => { $crate::write_out(false, format_args!($($arg)*)) };
}
macro_rules! println {
    () => { $crate::write_out(false, format_args!("\n")) };
    ($($arg:tt)*) => { $crate::write_out(false, format_args!("{}\n", format_args!($($arg)*))) };
}
macro_rules! eprint {
    ($($arg:tt)*) => { $crate::write_out(true, format_args!($($arg)*)) };
}
macro_rules! eprintln {
    () => { $crate::write_out(true, format_args!("\n")) };
    ($($arg:tt)*) => { $crate::write_out(true, format_args!("{}\n", format_args!($($arg)*))) };
}

mod args;
mod cmd;
mod out;

use crate::out::write_out;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use cmd::*;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "wirespeed",
    version,
    about = "Move UDP at wire speed, lose nothing, and prove it.",
    long_about = "Move UDP at wire speed, lose nothing, and prove it.\n\n\
        wirespeed sends paced instrument-like UDP streams and receives them with an exact loss \
        ledger (lost, late, duplicate, invalid, located by sequence range), shown beside the \
        kernel's own drop counters so you can tell which layer lost what.\n\n\
        Rates are decimal SI: 942M and 9.5G are UDP payload bits/s, 500kpps is datagrams/s. \
        Byte sizes are binary: 16M is 16 MiB. Counts are decimal: 1M is 1,000,000. Sizes, \
        counts, rates and durations may carry an exponent (1e9); a value out of an option's range is refused \
        before anything runs.\n\n\
        Try:  wirespeed demo\n      \
        wirespeed recv 7148 --once            (in one terminal)\n      \
        wirespeed send 127.0.0.1:7148 --rate 2G --duration 5   (in another)\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 bad usage (or a value out of range), 3 loss \
        when --expect-zero-loss, 4 (verify) a recording is damaged, incomplete or differs from its \
        sidecar."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Send a paced UDP stream (CASPER 64-bit counter payload) to HOST:PORT.
    Send(send::SendArgs),
    /// Receive UDP streams and account for every packet: the loss ledger beside the kernel's counters.
    Recv(crate::args::RecvArgs),
    /// Record UDP streams to disk through a RAM burst buffer, with the ledger per file.
    #[command(long_about = "Record UDP streams to disk with zero loss, and prove it.\n\n\
        A capture thread receives (as `recv` does, with the same ledger) into a RAM ring; a \
        writer thread moves the ring to disk in large aligned O_DIRECT writes. The capture \
        thread never waits for the disk: a burst faster than the disk fills the ring and is \
        written afterwards; if the ring overflows, the datagrams dropped are counted as \
        ring-full loss. Each file is written as NAME.part, renamed when complete, and gets a \
        JSON sidecar NAME.json with the ledger of exactly the records in it.\n\n\
        Try:  mkdir -p /data/rec && wirespeed record 7148 --size 8800 -o /data/rec --once\n      \
        wirespeed send 127.0.0.1:7148 --size 8800 --rate 4G --duration 10\n      \
        wirespeed verify /data/rec\n\n\
        Exit codes: 0 success, 1 runtime failure (e.g. disk full: the files written are valid), \
        2 bad usage, 3 loss when --expect-zero-loss.")]
    Record(Box<record::RecordArgs>),
    /// Re-read recordings, re-check every record, and compare with the sidecars.
    #[command(long_about = "Re-read recordings independently of the ledger kept while recording: every \
        record is checked again by its format (counter pattern, sync words, CRC...), each file \
        gets its own ledger and is compared with its sidecar, and the files of a directory are \
        read as one recording in name order, so loss between files shows too. A NAME.part file \
        (left by a killed recorder) is read up to its last whole record and reported incomplete.\n\n\
        Exit codes: 0 every file sound and matching its sidecar, 2 bad usage, 3 loss when \
        --expect-zero-loss, 4 a file is damaged, incomplete or differs from its sidecar.")]
    Verify(verify::VerifyArgs),
    /// List the recording runs in directories: when, how long, how big, what was lost, what state.
    #[command(long_about = "The operator's first look at a directory of recordings: one line per \
        recording run (the files one `record` wrote, told apart by the run id in their sidecars), \
        in order of start: when it started, how long it lasted, its files, bytes and rate, its \
        streams, what it lost (inside files and between them) and how many holes, and the state \
        of its files (complete, recording: a .part being written, cut short by a full disk, no \
        sidecar, bad sidecar); then each stream and its largest holes, and the free space of the \
        disk. Only the sidecars are read, so it answers at once; --verify re-reads the data as \
        `wirespeed verify` does. Other files in the directories are counted, not read.\n\n\
        Try:  wirespeed recordings /data/rec\n      \
        wirespeed recordings /data/rec --verify\n      \
        wirespeed recordings /mnt/disk0 /mnt/disk1 --json\n\n\
        Exit codes: 0 success (also when there are no recordings), 2 bad usage (e.g. a missing \
        directory), 4 --verify found a run damaged, incomplete or differing from its sidecars.")]
    Recordings(recordings::RecordingsArgs),
    /// A persistent station recorder driven over VSI-S, as a Field System drives jive5ab.
    #[command(long_about = "A persistent recorder for a VLBI station: the RAM ring is made ready once, \
        then scans are recorded on command, each scattered over the disks in the FlexBuff or \
        Mark6 layout (readable by jive5ab, DiFX's vbs tools and `wirespeed gather`). Control is \
        VSI-S on TCP, as jive5ab speaks it: mode=, net_protocol=, net_port=, mtu=, set_disks=, \
        record=on:SCAN / record=off, record?, evlbi?, scan_set=, scan_check?, status?, error?, \
        version?. evlbi? counts loss from the frames' own sequence even on plain UDP. A bad \
        command gets its return code; a stray or short datagram is counted invalid and never \
        ends a scan.\n\n\
        Try:  wirespeed station --disks '/mnt/disk*' &\n      \
        echo 'mode=vdif_8000-2048-4-2; net_port=7148;' | nc -q1 127.0.0.1 2620\n      \
        echo 'record=on:exp1_wb_no0001;' | nc -q1 127.0.0.1 2620\n      \
        echo 'record=off;' | nc -q1 127.0.0.1 2620\n\n\
        Exit codes: 0 stopped cleanly, 1 a scan stopped early (a disk failure left no disk), \
        2 bad usage.")]
    Station(station::StationArgs),
    /// Write a scan scattered over mount points (FlexBuff or Mark6) out as one stream, in order.
    #[command(long_about = "Gather a scan's chunks (FlexBuff: <mount>/<SCAN>/<SCAN>.NNNNNNNN) or blocks \
        (Mark6: one <mount>/<SCAN> file per disk) from every mount point, in number order, and \
        write the frames out as one stream: a file VLBI software opens directly. Scans recorded \
        by wirespeed, jive5ab or a Mark6 are read alike. Without -w, the pieces are listed.\n\n\
        Try:  wirespeed gather exp1_ef_no0001 --from '/mnt/disk*' -w /tmp/scan.vdif\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 bad usage (e.g. a scan with missing \
        chunks, unless --allow-holes), 4 the listing shows missing or doubled pieces.")]
    Gather(gather::GatherArgs),
    /// Write the records of a window of a recording (a time span, a stream, sequence numbers).
    #[command(long_about = "Take the records of a window out of a recording: a span of time (when they \
        arrived, or the frames' own VDIF/Mark5B time, or SPEAD timestamps), one stream, a range of \
        sequence numbers. The files' time indexes (kept in their sidecars by `record`) say which files \
        and which bytes to read, so a minute of a month-long recording costs a minute of reading; a \
        file without an index is read whole and the summary says so. The records are written in \
        order as raw or pcap, with a ledger (FILE.json: schema wirespeed.extract/1) of what was \
        taken and of the holes the recording has in the window.\n\n\
        Try:  wirespeed extract /data/rec --from 2026-11-29T14:03:10Z --to +30s --stream 3 -w /tmp/win.vdif\n      \
        wirespeed extract /data/rec --from -5m -w - | tshark -r - -c 10\n      \
        wirespeed extract /data/rec --seq 1000..1999 --json\n\n\
        Exit codes: 0 records were extracted, 1 runtime failure, 2 bad usage (a bad time or range), \
        3 nothing was recorded in the window (or, with --expect-whole, it has holes).")]
    Extract(extract::ExtractArgs),
    /// Measure the sustained write rate of a disk with the recorder's own I/O pattern.
    DiskTest(disk_test::DiskTestArgs),
    /// Answer wirespeed probes from allowed clients, each within a rate cap (the far end of `ping`).
    #[command(
        long_about = "The far end of `wirespeed ping`: send each wirespeed probe straight back to its sender.\n\n\
        Only wirespeed probes are answered, and only to clients the rules allow: never the \
        reflector's own port (a forged source would make it answer itself) nor another \
        reflector's replies; source ports below 1024 only with --allow-low-ports; only sources in \
        --allow CIDR when given; each source address at most --max-pps-per-client probes per \
        second (burst --client-burst). What it refuses is counted per reason and shown.\n\n\
        Try:  wirespeed reflect 127.0.0.1:7149\n      \
        wirespeed ping 127.0.0.1:7149 --pps 10000 --duration 10   (in another terminal)\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 bad usage."
    )]
    Reflect(reflect::ReflectArgs),
    /// Round-trip latency at fixed packet rates: percentiles, HdrHistogram logs and heat maps.
    #[command(long_about = "Round-trip latency at fixed packet rates, as seed 003 measured it.\n\n\
        Probes leave on a fixed schedule (open loop: ping never waits for a reply before sending \
        the next), a reflector sends each back at the application layer, and the round trip is \
        taken from one clock. Each rate gives the percentile table (min, p50, p90, p99, p99.9, \
        p99.99, max; one-way = RTT/2), lost, late and duplicate replies from the ledger, an \
        HdrHistogram interval log (ns; readable by the standard HdrHistogram tools) and a heat map \
        (PNG and SVG): time on x, latency on y, colour = packets per cell on a log scale.\n\n\
        Try:  wirespeed ping --pps 10000,20000,30000,40000      (seed 003's four rates, self-contained)\n      \
        wirespeed reflect 127.0.0.1:7149                      (in one terminal)\n      \
        wirespeed ping 127.0.0.1:7149 --pps 10000 --duration 60   (in another)\n\n\
        Against a far host, run reflect there and give ping its address.\n\n\
        Exit codes: 0 success, 1 runtime failure, 2 bad usage, 3 replies lost with --expect-zero-loss.")]
    Ping(ping::PingArgs),
    /// Frames per second on the wire for a link speed and packet size (preamble, IFG, headers).
    Linerate(linerate::LinerateArgs),
    /// ttcp in the classic style: TCP or UDP bulk transfer, MB/s and (UDP) % dropped.
    Ttcp(ttcp::TtcpArgs),
    /// Benchmark reports like the seeds': zero-loss rate search, rate tables, ttcp tables.
    Bench(bench::BenchArgs),
    /// List the payload formats, their spec keys, and the instrument presets.
    Formats,
    /// Listen to a stream and say what it is, from its headers, and the --format that counts it.
    #[command(long_about = probe::PROBE_HELP)]
    Probe(probe::ProbeArgs),
    /// Sender and receiver on loopback for a few seconds, then the ledger: a first look.
    Demo(demo::DemoArgs),
    /// Divide this host into isolated partitions (namespaces + CPU sets + veth mesh), like mkpart.
    #[command(long_about = "Divide this host into isolated test hosts, after the SGI Origin 2000's mkpart.\n\n\
        A partition is a network namespace (PREFIX<N>) with its own CPUs (a cpuset cgroup) and, \
        with --mem, a memory limit. Every pair of partitions gets a direct veth link (a full mesh) \
        with a /30 from 198.18.0.0/16, and each partition a stable address 198.19.0.N on its \
        loopback, routed to every other partition over their direct link only. A heartbeat \
        daemon per partition reports peers that stop responding, in the Origin's console wording.\n\n\
        Try:  wirespeed partition plan                      (valid layouts of this host)\n      \
        sudo wirespeed partition create -p 1 -c 0 -p 2 -c 1\n      \
        wirespeed partition list\n      \
        sudo wirespeed partition exec 2 -- wirespeed recv 7148 --once\n      \
        sudo wirespeed partition exec 1 -- wirespeed send 198.19.0.2:7148 --duration 5\n      \
        sudo wirespeed partition init                       (remove what wirespeed made)\n\n\
        Everything but list, plan and status needs root (CAP_NET_ADMIN).")]
    Partition(partition::PartitionArgs),
    /// Inspect this host for a stream and say what to change, with the figure and the command.
    #[command(long_about = doctor::DOCTOR_HELP)]
    Doctor(doctor::DoctorArgs),
    /// Read a live recording that `record --share NAME` publishes: check, save or pipe its records.
    #[command(long_about = tap::TAP_HELP)]
    Tap(tap::TapArgs),
    /// Print the shell completion script for bash, zsh or fish (and how to install it).
    #[command(long_about = completions::COMPLETIONS_HELP)]
    Completions(completions::CompletionsArgs),
    /// Manual pages generated from these definitions: print one, or write them all (--out DIR).
    #[command(long_about = man::MAN_HELP)]
    Man(man::ManArgs),
    /// The far end of a run on hosts: run the command a controller sends as one JSON line on
    /// standard input, and stop it when standard input ends. Run over ssh by `--tx`/`--rx`.
    #[command(hide = true)]
    Leash,
    /// Say this wirespeed's version and documents as one JSON line (`wirespeed.hello/1`), for a
    /// controller about to run experiments here over ssh.
    #[command(hide = true)]
    Hello,
}

/// A command line clap refused, said in one line (what is wrong, with clap's tip folded in),
/// exit code 2; help and version requests are printed whole as clap has them.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let text = e.render().to_string();
    let first: Vec<&str> = text.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
    let msg = first.join(" ");
    eprintln!("wirespeed: {} (--help explains)", msg.strip_prefix("error: ").unwrap_or(&msg));
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return usage_error(e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    if let Some(m) = matches.subcommand_matches("partition").and_then(|m| m.subcommand_matches("create")) {
        if let Err(e) = partition::check_pairing(m) {
            eprintln!("wirespeed: {}", out::error_line(&e));
            return ExitCode::from(e.exit_code() as u8);
        }
    }
    let r = match cli.cmd {
        Cmd::Send(a) => send::cmd_send(a),
        Cmd::Recv(a) => recv::cmd_recv(a),
        Cmd::Record(a) => record::cmd_record(*a),
        Cmd::Verify(a) => verify::cmd_verify(a),
        Cmd::Recordings(a) => recordings::cmd_recordings(a),
        Cmd::Gather(a) => gather::cmd_gather(a),
        Cmd::Extract(a) => extract::cmd_extract(a),
        Cmd::Station(a) => station::cmd_station(a),
        Cmd::DiskTest(a) => disk_test::cmd_disk_test(a),
        Cmd::Reflect(a) => reflect::cmd_reflect(a),
        Cmd::Ping(a) => ping::cmd_ping(a),
        Cmd::Linerate(a) => linerate::cmd_linerate(a),
        Cmd::Ttcp(a) => ttcp::cmd_ttcp(a),
        Cmd::Bench(a) => bench::cmd_bench(a),
        Cmd::Formats => formats::cmd_formats(),
        Cmd::Probe(a) => probe::cmd_probe(a),
        Cmd::Demo(a) => demo::cmd_demo(a),
        Cmd::Partition(a) => partition::cmd_partition(a),
        Cmd::Tap(a) => tap::cmd_tap(a),
        Cmd::Doctor(a) => doctor::cmd_doctor(a),
        Cmd::Completions(a) => completions::cmd_completions(a, Cli::command()),
        Cmd::Man(a) => man::cmd_man(a, Cli::command()),
        Cmd::Leash => wirespeed_lab::testbed::hosts::leash(std::io::stdin()),
        Cmd::Hello => {
            let h = wirespeed_lab::testbed::hosts::Hello::here(env!("CARGO_PKG_VERSION"));
            println!("{}", serde_json::to_string(&h).unwrap_or_default());
            Ok(0)
        }
    };
    match r {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("wirespeed: {}", out::error_line(&e));
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
