//! `baton`: one binary for the node (`serve`), the runner agent (`runner`), the local
//! cluster (`dev`), the task CLI (`task`) and migrations (`migrate`).

mod cli;
mod dev;
mod settings;
mod telemetry;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `baton runner` is a small supervisor with the agent as its child (see
    // baton_runner::supervisor): the supervisor needs no runtime and no logging.
    if std::env::args_os().nth(1).is_some_and(|a| a == "runner")
        && !baton_runner::supervisor::is_agent()
    {
        std::process::exit(baton_runner::supervisor::supervise());
    }
    // Pick ring as the TLS provider before any client (sqlx, reqwest) is built.
    baton_client::install_tls_provider();
    let cli = cli::Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(cli::run(cli.command)) {
        Ok(code) => code,
        // `baton task list | head`: the reader has what it wanted.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            for line in cli::report(&e) {
                eprintln!("baton: {line}");
            }
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}
