//! `wirespeed bench`: benchmark reports like the seeds' (issue #7). Being built.

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
    Max(MaxArgs),
    /// Seed 002's table: per offered rate, packets captured and lost (ledger and kernel).
    Rates(RatesArgs),
    /// Seed 000's ttcp tables: TCP and UDP by socket buffer size, and read/write sizes.
    Ttcp(crate::ttcp_cmd::BenchTtcpArgs),
}

#[derive(Args)]
pub struct MaxArgs {}

#[derive(Args)]
pub struct RatesArgs {}

pub fn cmd_bench(a: BenchArgs) -> Result<u8, Error> {
    match a.cmd {
        BenchCmd::Max(_) => Err(Error::Runtime("bench max is not built yet (issue #7)".into())),
        BenchCmd::Rates(_) => Err(Error::Runtime("bench rates is not built yet (issue #7)".into())),
        BenchCmd::Ttcp(t) => crate::ttcp_cmd::cmd_bench_ttcp(t),
    }
}
