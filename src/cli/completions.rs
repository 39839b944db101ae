//! `baton completions bash|zsh|fish|elvish|powershell`: the shell's completion script,
//! generated from the command line's own definition (clap_complete), so it never lags.

use super::Cli;
use clap::CommandFactory;
use clap_complete::Shell;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

pub fn print(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "baton", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
