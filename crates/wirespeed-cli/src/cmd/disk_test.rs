//! `wirespeed disk-test`: the sustained write rate of a disk with the recorder's own I/O pattern.

use crate::args;
use crate::out::print_json;
use clap::Args;
use std::path::PathBuf;
use wirespeed::record::{self};
use wirespeed::units::{self};
use wirespeed::{sys, Error};

#[derive(Args)]
pub struct DiskTestArgs {
    /// Directory on the disk to test (a temporary file is written there and removed).
    dir: PathBuf,
    /// How much to write (1M..1T).
    #[arg(long, default_value = "2G", value_parser = args::disk_test_size)]
    size: u64,
    /// Bytes per write, as record's --block (a multiple of 4K, 4K..1G).
    #[arg(long, default_value = "8M", value_parser = args::block)]
    block: u64,
    /// Write through the page cache (plus a final fdatasync) instead of O_DIRECT.
    #[arg(long)]
    buffered: bool,
    /// Print one JSON document (schema wirespeed.disk-test/1).
    #[arg(long)]
    json: bool,
}

pub fn cmd_disk_test(a: DiskTestArgs) -> Result<u8, Error> {
    if a.size == 0 {
        return Err(Error::invalid("--size must be more than 0"));
    }
    let stop = sys::install_stop_handler();
    let t = record::disk_test(&a.dir, a.size, usize::try_from(a.block).unwrap_or(0), !a.buffered, stop)?;
    if a.json {
        print_json(&t)?;
    } else {
        println!(
            "wirespeed disk-test {}: {} in {} writes ({}), {} sustained ({}/s), slowest write {:.1} ms",
            t.dir,
            units::bytes(t.bytes),
            units::bytes(t.chunk as u64),
            if t.direct_io { "O_DIRECT" } else { "buffered + fdatasync" },
            units::bits(t.bytes_per_s * 8.0),
            units::bytes(t.bytes_per_s as u64),
            t.max_write_ms
        );
        let d: Vec<String> = t.deciles.iter().map(|r| units::bytes(*r as u64)).collect();
        println!("  per tenth of the run (/s): {}", d.join("  "));
    }
    Ok(0)
}
