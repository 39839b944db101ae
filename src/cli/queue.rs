//! `baton queue list|pause|resume`: the operator's view of queues and their pause switch
//! (docs/flow-control.md).

use super::connect::{ClientArgs, print_json};
use clap::Subcommand;
use std::io::Write;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// List queues with settings or unfinished tasks: depth, running, paused, oldest
    /// waiting.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Stop a queue handing out tasks; it still takes submits, and its tasks do not
    /// expire while it is paused.
    Pause {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Let a paused queue hand out tasks again.
    Resume {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

pub async fn run(cmd: QueueCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        QueueCommand::List { client } => {
            let list = client.client()?.queues().await?;
            let mut out = std::io::stdout().lock();
            for q in &list.queues {
                let oldest = q
                    .oldest_waiting
                    .map(|at| at.to_rfc3339())
                    .unwrap_or_else(|| "-".into());
                writeln!(
                    out,
                    "{:<24}  {:<7}  depth={}  running={}  oldest_waiting={}",
                    q.name,
                    if q.paused { "paused" } else { "running" },
                    q.depth,
                    q.running,
                    oldest
                )?;
            }
        }
        QueueCommand::Pause { name, client } => {
            print_json(&client.client()?.queue_pause(&name, true).await?)?;
        }
        QueueCommand::Resume { name, client } => {
            print_json(&client.client()?.queue_pause(&name, false).await?)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
