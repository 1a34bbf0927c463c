//! `wirespeed bench compare`: not built yet.

use clap::Args;
use wirespeed::Error;

#[derive(Args)]
pub struct CompareArgs {}

pub fn cmd_compare(_a: CompareArgs) -> Result<u8, Error> {
    Err(Error::Runtime("bench compare is not built yet".into()))
}
