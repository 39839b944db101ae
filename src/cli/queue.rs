//! `baton queue list|pause|resume|defaults`: the operator's view of queues, their pause
//! switch and the defaults their tasks take (docs/flow-control.md).

use super::connect::{ClientArgs, Output, print_json};
use super::table::{Table, colour_wanted};
use super::task::parse_retry;
use super::when;
use anyhow::bail;
use baton_client::QueueDefaults;
use clap::Subcommand;
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// List queues with settings or unfinished tasks: active or paused, depth, running,
    /// oldest waiting, defaults.
    List {
        /// text: a table under a header, times in local time; json: the API's answer as
        /// it is (RFC 3339 times).
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Stop a queue handing out tasks; it still takes submits, and its tasks do not
    /// expire while it is paused.
    Pause {
        /// The queue's name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Let a paused queue hand out tasks again.
    Resume {
        /// The queue's name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Set what tasks submitted to the queue take for the fields they leave out (replacing
    /// its defaults whole); tasks already submitted keep theirs.
    Defaults {
        /// The queue's name.
        name: String,
        /// Runs in all, retries included.
        #[arg(long)]
        max_attempts: Option<i32>,
        /// A retry policy, as JSON: e.g. '{"on_exit_codes": [3], "backoff_base_s": 5}'.
        #[arg(long)]
        retry: Option<String>,
        /// A concurrency group for tasks that name none.
        #[arg(long)]
        concurrency_key: Option<String>,
        /// Its limit; alone, it limits the queue's own group (`queue:<name>`).
        #[arg(long)]
        concurrency_limit: Option<i64>,
        /// Remove the queue's defaults.
        #[arg(long, conflicts_with_all = ["max_attempts", "retry", "concurrency_key", "concurrency_limit"])]
        clear: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
}

pub async fn run(cmd: QueueCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        QueueCommand::List { output, client } => {
            let list = client.client()?.queues().await?;
            if output == Output::Json {
                print_json(&list)?;
                return Ok(ExitCode::SUCCESS);
            }
            let mut table = Table::new(&[
                "NAME",
                "STATE",
                "DEPTH",
                "RUNNING",
                "OLDEST WAITING",
                "DEFAULTS",
            ]);
            for q in &list.queues {
                let defaults = match &q.defaults {
                    Some(d) => serde_json::to_string(d)?,
                    None => "-".to_string(),
                };
                table.push(vec![
                    q.name.clone(),
                    // The console's words: a queue handing out work is active.
                    if q.paused { "paused" } else { "active" }.to_string(),
                    q.depth.to_string(),
                    q.running.to_string(),
                    when::local_or_dash(q.oldest_waiting),
                    defaults,
                ]);
            }
            table.write(&mut std::io::stdout().lock(), colour_wanted())?;
        }
        QueueCommand::Pause { name, client } => {
            print_json(&client.client()?.queue_pause(&name, true).await?)?;
        }
        QueueCommand::Resume { name, client } => {
            print_json(&client.client()?.queue_pause(&name, false).await?)?;
        }
        QueueCommand::Defaults {
            name,
            max_attempts,
            retry,
            concurrency_key,
            concurrency_limit,
            clear,
            client,
        } => {
            let defaults = QueueDefaults {
                retry: retry.as_deref().map(parse_retry).transpose()?,
                max_attempts,
                concurrency_key,
                concurrency_limit,
            };
            if defaults.is_empty() && !clear {
                bail!(
                    "give a default to set (--max-attempts, --retry, --concurrency-key, --concurrency-limit) or --clear"
                );
            }
            let set = client
                .client()?
                .queue_set_defaults(&name, &defaults)
                .await?;
            print_json(&set)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
