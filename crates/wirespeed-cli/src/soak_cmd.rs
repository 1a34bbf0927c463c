//! `wirespeed bench soak`: not built yet.

use clap::Args;
use wirespeed::Error;

#[derive(Args)]
pub struct SoakArgs {}

pub fn cmd_soak(_a: SoakArgs) -> Result<u8, Error> {
    Err(Error::Runtime("bench soak is not built yet".into()))
}
