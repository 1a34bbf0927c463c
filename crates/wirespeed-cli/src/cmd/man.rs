//! `wirespeed man`: manual pages (roff), one per command, generated from the same clap
//! definitions as `--help`, so the pages say exactly what this build accepts.

use clap::Args;
use std::path::{Path, PathBuf};
use wirespeed::Error;

pub const MAN_HELP: &str = "Manual pages in roff, one per command: wirespeed(1), wirespeed-record(1), \
    wirespeed-bench-max(1)..., with the same text as --help. Without --out, print one page to \
    stdout (the command named, or wirespeed itself). With --out DIR, write every page as \
    DIR/wirespeed[-COMMAND[-SUBCOMMAND]].1 (DIR is created if missing; pages of the same name \
    are replaced) and print each path written. The Debian package installs them all.\n\n\
    Try:  wirespeed man record | man -l -\n      \
    wirespeed man --out /tmp/wsman/man1 && man -M /tmp/wsman wirespeed-bench-max\n      \
    sudo wirespeed man --out /usr/local/share/man/man1 && man wirespeed-record\n\n\
    Exit codes: 0 success, 1 a page could not be written, 2 bad usage (no such command).";

#[derive(Args)]
pub struct ManArgs {
    /// Write every page into this directory instead of printing one.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The command whose page to print, e.g. `record` or `bench max` (default: wirespeed's own).
    #[arg(value_name = "COMMAND", conflicts_with = "out")]
    command: Vec<String>,
}

/// Print one page or write them all, for `cmd` (the whole `wirespeed` command).
pub fn cmd_man(a: ManArgs, cmd: clap::Command) -> Result<u8, Error> {
    // As `help` is not a command of its own in a manual, the pages leave it out; `build`
    // gives every subcommand its full name (wirespeed-bench-max), which names its page.
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    match a.out {
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("cannot create {}: {e}", dir.display())))?;
            let mut written = Vec::new();
            write_pages(&cmd, &dir, &mut written)?;
            for p in &written {
                println!("{}", p.display());
            }
            Ok(0)
        }
        None => {
            let mut page = &cmd;
            for (i, name) in a.command.iter().enumerate() {
                page = page.get_subcommands().find(|s| s.get_name() == name && !s.is_hide_set()).ok_or_else(|| {
                    Error::invalid(format!(
                        "no command `{}` has a manual page: `wirespeed {}--help` lists the commands",
                        a.command[..=i].join(" "),
                        a.command[..i].iter().map(|s| format!("{s} ")).collect::<String>()
                    ))
                })?;
            }
            let mut roff = Vec::new();
            man_page(page)
                .render(&mut roff)
                .map_err(|e| Error::failed(format!("cannot render the manual page: {e}")))?;
            print!("{}", String::from_utf8_lossy(&roff));
            Ok(0)
        }
    }
}

/// Write the page of `cmd` and of every visible subcommand below it into `dir`.
fn write_pages(cmd: &clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> Result<(), Error> {
    let man = man_page(cmd);
    let path = man
        .generate_to(dir)
        .map_err(|e| Error::io(format!("cannot write {}: {e}", dir.join(man.get_filename()).display())))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

/// The page of `cmd`, its header naming wirespeed and this version (a subcommand has no
/// version of its own, so its page would otherwise say none).
fn man_page(cmd: &clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd.clone())
        .source(format!("wirespeed {}", env!("CARGO_PKG_VERSION")))
        .manual("wirespeed manual")
}
