//! `baton runners list | pause | resume | delete`: the operator's view of the runners
//! (docs/authorization.md says which token may do what).

use super::connect::{ClientArgs, ListOutput, print_json};
use super::resolve;
use super::table::Table;
use super::when;
use baton_client::RunnerList;
use clap::{Args, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum RunnersCommand {
    /// List registered runners: online, offline or paused, tasks running, labels, last
    /// heard from.
    List {
        #[command(flatten)]
        output: ListOutput,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Stop a runner leasing new tasks; what it runs carries on.
    Pause(RunnerIdArgs),
    /// Let a paused runner lease again.
    Resume(RunnerIdArgs),
    /// Delete a runner: its token stops working and its running tasks are ended as lost
    /// (and retried if they may) once it is surely gone.
    Delete(RunnerIdArgs),
}

// What each command on one runner takes, so its id is asked and described the same way
// in each. (No doc comment: it would stand for the commands' own in their help.)
#[derive(Debug, Args)]
pub struct RunnerIdArgs {
    /// The runner's id, or its short id (the last 12 characters the list shows).
    runner: String,
    #[command(flatten)]
    client: ClientArgs,
}

pub async fn run(cmd: RunnersCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        RunnersCommand::List { output, client } => {
            let list = client.client()?.runners().await?;
            output.print(&list, table)?;
        }
        RunnersCommand::Pause(RunnerIdArgs { runner, client }) => {
            let client = client.client()?;
            let id = resolve::runner(&client, &runner).await?;
            print_json(&client.runner_pause(id, true).await?)?;
        }
        RunnersCommand::Resume(RunnerIdArgs { runner, client }) => {
            let client = client.client()?;
            let id = resolve::runner(&client, &runner).await?;
            print_json(&client.runner_pause(id, false).await?)?;
        }
        RunnersCommand::Delete(RunnerIdArgs { runner, client }) => {
            let client = client.client()?;
            let id = resolve::runner(&client, &runner).await?;
            client.runner_delete(id).await?;
            eprintln!("runner {id} deleted");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn table(list: &RunnerList, output: &ListOutput) -> Table {
    let mut table = Table::new(&[
        "ID",
        "NAME",
        "STATE",
        "RUNNING",
        "LABELS",
        "QUEUES",
        "VERSION",
        "LAST SEEN",
    ]);
    let or_dash = |items: &[String], none: &str| match items.is_empty() {
        true => none.to_string(),
        false => items.join(","),
    };
    for r in &list.runners {
        // The console's words: a paused runner is paused, whether or not it is heard from.
        let state = match (r.paused, r.online) {
            (true, _) => "paused",
            (false, true) => "online",
            (false, false) => "offline",
        };
        table.push(vec![
            output.id(r.id.uuid()),
            r.name.clone(),
            state.to_string(),
            format!("{}/{}", r.running, r.capacity),
            or_dash(&r.labels, "-"),
            or_dash(&r.queues, "any"),
            r.version.clone(),
            when::local_or_dash(r.last_seen),
        ]);
    }
    table
}
