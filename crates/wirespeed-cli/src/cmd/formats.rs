//! `wirespeed formats`: the payload formats, their spec keys and the instrument presets.

use wirespeed::wire::spec;
use wirespeed::Error;

pub fn cmd_formats() -> Result<u8, Error> {
    println!("Formats (--format NAME or a spec NAME,KEY=VALUE,...):");
    for (name, line) in spec::formats_help() {
        println!("  {name:<9} {line}");
    }
    println!("\nPresets (send --preset NAME; --format NAME on recv, record and verify):");
    for p in spec::presets() {
        println!("  {:<8} {:>6} B at {:<9} {}", p.name, p.size, p.rate, p.description);
        println!("  {:<8} spec: {}", "", p.spec);
    }
    println!("\nGeneric instrument header: --seq-offset BYTES --seq-width 1..8 --seq-endian be|le (with --size).");
    Ok(0)
}
