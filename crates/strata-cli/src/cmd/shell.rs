//! `strata completions bash|zsh|fish` and `strata man`: shell completions
//! and the manual page, generated from the command-line definition
//! (`clap_complete`, `clap_mangen`), so they never drift from `--help`.

use std::io::Write;

use anyhow::Result;
use clap::{CommandFactory, ValueEnum};

use crate::app::Cli;

/// A shell `strata completions` writes for.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Shell {
    /// `strata completions bash > ~/.local/share/bash-completion/completions/strata`
    Bash,
    /// `strata completions zsh > ~/.zfunc/_strata` (with `~/.zfunc` in `fpath`)
    Zsh,
    /// `strata completions fish > ~/.config/fish/completions/strata.fish`
    Fish,
}

/// Writes `bytes` to standard output (a closed pipe is the caller's
/// success, as for every command).
fn print(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()?;
    Ok(())
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Result<()> {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    // Generated into memory first: clap_complete panics on a failed write.
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "strata", &mut buf);
    print(&buf)
}

/// The manual page, strata(1), in roff.
pub fn man() -> Result<()> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut buf)?;
    print(&buf)
}
