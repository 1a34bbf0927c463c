//! `wirespeed bench`: benchmark reports like the seeds' (issue #7). `max` searches for the
//! highest zero-loss rate, `rates` reproduces seed 002's table; one file per
//! bench command below.
//!
//! Each bench command is one file here: its long help, its options and its printing; the
//! measuring is in `wirespeed_lab::bench`.

pub mod bare_recv;
pub mod capture;
pub mod compare;
pub mod doctor;
pub mod formats;
pub mod isolation;
pub mod latency;
pub mod max;
pub mod pacing;
pub mod pgm;
pub mod priority;
pub mod rates;
pub mod ring;
pub mod soak;
pub mod sweep;
pub mod taps;
pub mod ttcp;
pub mod writer;
pub mod xpc;

use clap::{Args, Subcommand};
use wirespeed::Error;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    cmd: BenchCmd,
}

#[derive(Subcommand)]
enum BenchCmd {
    /// The highest zero-loss rate, by binary search (RFC 2544 style).
    #[command(long_about = max::MAX_HELP)]
    Max(max::MaxArgs),
    /// Seed 004's nice -20 vs +20: the zero-loss rate per receiver priority beside a CPU hog.
    #[command(long_about = priority::PRIORITY_HELP)]
    Priority(priority::PriorityArgs),
    /// Seed 002's table: per offered rate, packets captured and lost (ledger and kernel).
    #[command(long_about = rates::RATES_HELP)]
    Rates(rates::RatesArgs),
    /// Seed 000's ttcp tables: TCP and UDP by socket buffer size, and read/write sizes.
    Ttcp(ttcp::BenchTtcpArgs),
    /// Rate x size x receive-buffer sweep with seed 004's figures and an HTML report.
    #[command(long_about = sweep::SWEEP_HELP)]
    Sweep(sweep::SweepArgs),
    /// A long zero-loss run with a record per minute (seed 001's 24- and 30-minute runs).
    #[command(long_about = soak::SOAK_HELP)]
    Soak(soak::SoakArgs),
    /// The same points with wirespeed and with iperf3, side by side in one table and one plot.
    #[command(long_about = compare::COMPARE_HELP)]
    Compare(compare::CompareArgs),
    /// How exactly `send` keeps its rate: achieved/requested, 1 s windows, send-call gaps.
    #[command(long_about = pacing::PACING_HELP)]
    Pacing(pacing::PacingArgs),
    /// Payload build and check cost per format, ns per datagram and GB/s, one core.
    #[command(long_about = formats::FORMATS_HELP)]
    Formats(formats::FormatsArgs),
    /// Round-trip latency of ping/reflect beside sockperf ping-pong and under-load.
    #[command(long_about = latency::LATENCY_HELP)]
    Latency(latency::LatencyArgs),
    /// The capture thread's CPU per datagram, for one build or two run alternately (A/B).
    #[command(long_about = capture::CAPTURE_HELP)]
    Capture(capture::CaptureArgs),
    /// Time from starting wirespeed record until it receives, per ring size (before/after).
    #[command(long_about = ring::RING_HELP)]
    Ring(ring::RingArgs),
    /// The recorder's disk path alone: GB/s, write latency and CPU per engine and depth.
    #[command(long_about = writer::WRITER_HELP)]
    Writer(writer::WriterArgs),
    /// A partition killed mid-transfer: time until its peers report it, and the others' stream.
    #[command(long_about = isolation::ISOLATION_HELP)]
    Isolation(isolation::IsolationArgs),
    /// The recorder's capture CPU per datagram with 0, 1 and 3 live taps attached.
    #[command(long_about = taps::TAPS_HELP)]
    Taps(taps::TapsArgs),
    /// Whether the doctor's fixes work: doctor --apply before/after, and runs each starved of one resource.
    #[command(long_about = doctor::DOCTOR_HELP)]
    Doctor(doctor::DoctorArgs),
    #[command(hide = true)]
    BareRecv(bare_recv::BareRecvArgs),
    /// XPC messages between two processes against a Unix datagram socket: rate, CPU, latency.
    #[command(long_about = xpc::XPC_HELP)]
    Xpc(xpc::XpcArgs),
    #[command(hide = true)]
    XpcPeer(xpc::XpcPeerArgs),
    /// PGM under injected loss (repairs, NAKs, overhead; beside OpenPGM) and its cost against UDP.
    #[command(long_about = pgm::PGM_HELP)]
    Pgm(pgm::PgmArgs),
}

pub fn cmd_bench(a: BenchArgs) -> Result<u8, Error> {
    match a.cmd {
        BenchCmd::Max(m) => max::cmd_max(m),
        BenchCmd::Priority(p) => priority::cmd_priority(p),
        BenchCmd::Rates(r) => rates::cmd_rates(r),
        BenchCmd::Ttcp(t) => ttcp::cmd_bench_ttcp(t),
        BenchCmd::Sweep(s) => sweep::cmd_sweep(s),
        BenchCmd::Soak(s) => soak::cmd_soak(s),
        BenchCmd::Compare(c) => compare::cmd_compare(c),
        BenchCmd::Pacing(p) => pacing::cmd_pacing(p),
        BenchCmd::Formats(f) => formats::cmd_formats(f),
        BenchCmd::Latency(l) => latency::cmd_latency(l),
        BenchCmd::Capture(c) => capture::cmd_capture(c),
        BenchCmd::Ring(r) => ring::cmd_ring(r),
        BenchCmd::Writer(w) => writer::cmd_writer(w),
        BenchCmd::Isolation(i) => isolation::cmd_isolation(i),
        BenchCmd::Taps(t) => taps::cmd_taps(t),
        BenchCmd::Doctor(d) => doctor::cmd_doctor(d),
        BenchCmd::BareRecv(b) => bare_recv::cmd_bare_recv(b),
        BenchCmd::Xpc(x) => xpc::cmd_xpc(x),
        BenchCmd::XpcPeer(x) => xpc::cmd_xpc_peer(x),
        BenchCmd::Pgm(p) => pgm::cmd_pgm(p),
    }
}
