//! `wirespeed completions SHELL`: the shell completion script, generated from the same clap
//! definitions the command parses with, so it never falls behind an option.

use clap::{Args, ValueEnum};
use wirespeed::Error;

pub const COMPLETIONS_HELP: &str = "Print the completion script for a shell to stdout. It is generated \
    from wirespeed's own option definitions, so it completes every command, bench command and \
    option of this build. The Debian package installs all three; otherwise install yours:\n\n\
    bash (with the bash-completion package), for you:\n      \
    mkdir -p ~/.local/share/bash-completion/completions\n      \
    wirespeed completions bash > ~/.local/share/bash-completion/completions/wirespeed\n    \
    or for everyone:\n      \
    wirespeed completions bash > /tmp/wirespeed.bash\n      \
    sudo install -Dm644 /tmp/wirespeed.bash /usr/local/share/bash-completion/completions/wirespeed\n    \
    then open a new shell (or, in this one only: source <(wirespeed completions bash)).\n\n\
    zsh, for you:\n      \
    mkdir -p ~/.zfunc && wirespeed completions zsh > ~/.zfunc/_wirespeed\n    \
    and in ~/.zshrc, before compinit: fpath=(~/.zfunc $fpath)\n    \
    or for everyone:\n      \
    wirespeed completions zsh > /tmp/_wirespeed\n      \
    sudo install -Dm644 /tmp/_wirespeed /usr/local/share/zsh/site-functions/_wirespeed\n    \
    then: rm -f ~/.zcompdump; exec zsh\n\n\
    fish, for you:\n      \
    mkdir -p ~/.config/fish/completions\n      \
    wirespeed completions fish > ~/.config/fish/completions/wirespeed.fish\n    \
    or for everyone:\n      \
    wirespeed completions fish > /tmp/wirespeed.fish\n      \
    sudo install -Dm644 /tmp/wirespeed.fish /etc/fish/completions/wirespeed.fish\n    \
    fish reads it at the next command line.\n\n\
    Exit codes: 0 success, 2 bad usage (a shell not listed).";

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// The shells wirespeed writes completions for (those the Debian package installs).
#[derive(Clone, Copy, ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Print the script for `a.shell`, completing `cmd` (the whole `wirespeed` command).
pub fn cmd_completions(a: CompletionsArgs, cmd: clap::Command) -> Result<u8, Error> {
    let shell = match a.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut cmd = visible(&cmd);
    let name = cmd.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    let script = String::from_utf8(script)
        .map_err(|_| Error::failed("the completion script is not UTF-8 (a bug: please report it)"))?;
    print!("{script}");
    Ok(0)
}

/// `cmd` without what its help hides (internal helper commands such as `bench bare-recv`, test
/// options such as `bench soak --skip-every`): clap_complete would offer them all, while `--help`
/// and the manual pages leave them out. Rebuilt, since clap cannot remove a subcommand.
fn visible(cmd: &clap::Command) -> clap::Command {
    let mut c = clap::Command::new(cmd.get_name().to_string())
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .groups(cmd.get_groups().cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).map(visible));
    if let Some(about) = cmd.get_about() {
        c = c.about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        c = c.version(version.to_string());
    }
    c
}
