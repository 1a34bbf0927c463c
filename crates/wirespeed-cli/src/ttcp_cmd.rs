//! `wirespeed ttcp` and `wirespeed bench ttcp`: the classic ttcp measurement (seed 000's
//! Tables 3-5). Being built; see issue #7.

use clap::Args;
use wirespeed::Error;

#[derive(Args)]
pub struct TtcpArgs {}

pub fn cmd_ttcp(_a: TtcpArgs) -> Result<u8, Error> {
    Err(Error::Runtime("ttcp is not built yet (issue #7)".into()))
}

#[derive(Args)]
pub struct BenchTtcpArgs {}

pub fn cmd_bench_ttcp(_a: BenchTtcpArgs) -> Result<u8, Error> {
    Err(Error::Runtime("bench ttcp is not built yet (issue #7)".into()))
}
