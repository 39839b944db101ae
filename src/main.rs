//! `baton`: one binary for the node (`serve`), the runner agent (`runner`), the local
//! cluster (`dev`), the task CLI (`task`) and migrations (`migrate`).

mod cli;
mod dev;
mod logging;
mod settings;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // sqlx (ring) and reqwest would otherwise each want their own rustls provider; pick
    // ring once, before any TLS client is built.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = cli::Cli::parse();
    logging::init(cli.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(cli::run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("baton: {e:#}");
            ExitCode::FAILURE
        }
    }
}
