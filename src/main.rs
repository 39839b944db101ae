//! `baton`: one binary for the node (`serve`), the runner agent (`runner`), the local
//! cluster (`dev`), the task CLI (`task`) and migrations (`migrate`).

mod chaos;
mod cli;
mod dev;
mod localcluster;
mod settings;
mod telemetry;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The runner's watchdog is plumbing, not a command: no runtime, no logging.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == baton_runner::watchdog::SUBCOMMAND)
    {
        std::process::exit(baton_runner::watchdog::run());
    }
    // Pick ring as the TLS provider before any client (sqlx, reqwest) is built.
    baton_client::install_tls_provider();
    let cli = cli::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(cli::run(cli.command, cli.log_format, cli.traces)) {
        Ok(code) => code,
        // `baton task list | head`: the reader has what it wanted.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
