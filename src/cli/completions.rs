//! `baton completions bash|zsh|fish|elvish|powershell`: the shell's completion script,
//! generated from the command line's own definition (clap_complete), so it never lags.

use super::Cli;
use clap::CommandFactory;
use clap_complete::Shell;
use std::io::Write;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Writes the script to stdout. Generated into memory first: clap_complete panics on a
/// failed write, and a reader that closes the pipe early (`| head -1`) is no failure —
/// `main` ends quietly on the broken pipe this returns.
pub fn print(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "baton", &mut script);
    std::io::stdout().write_all(&script)?;
    Ok(ExitCode::SUCCESS)
}
