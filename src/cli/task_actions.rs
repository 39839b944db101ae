//! `baton task cancel` and `baton task retry`: one task by id, or the tasks a filter
//! selects (`--queue`, `--status`, `--created-after`, `--created-before`), a bounded number
//! per call, with `--dry-run` to see what would be taken first.

use super::connect::{ClientArgs, print_json};
use super::resolve;
use super::when::parse_time;
use anyhow::bail;
use baton_client::{BulkAnswer, BulkRequest, Client, TaskRef};
use clap::Args;
use std::io::Write;
use std::process::ExitCode;

/// Which tasks, when no id is given.
#[derive(Debug, Args)]
pub struct BulkArgs {
    /// Only tasks of this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only tasks in this status.
    #[arg(long)]
    status: Option<String>,
    /// Only tasks this schedule made: its id, short id or name.
    #[arg(long)]
    schedule: Option<String>,
    /// Only tasks created at or after this time (RFC 3339).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    created_after: Option<chrono::DateTime<chrono::Utc>>,
    /// Only tasks created before this time (RFC 3339).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    created_before: Option<chrono::DateTime<chrono::Utc>>,
    /// At most this many tasks per call (the server's default: 100).
    #[arg(long)]
    limit: Option<i64>,
    /// Only show what would be taken; change nothing.
    #[arg(long)]
    dry_run: bool,
}

impl BulkArgs {
    fn any(&self) -> bool {
        self.queue.is_some()
            || self.status.is_some()
            || self.schedule.is_some()
            || self.created_after.is_some()
            || self.created_before.is_some()
    }

    async fn request(&self, client: &Client) -> anyhow::Result<BulkRequest> {
        let schedule_id = match &self.schedule {
            Some(given) => Some(resolve::schedule(client, given).await?),
            None => None,
        };
        Ok(BulkRequest {
            queue: self.queue.clone(),
            status: self.status.clone(),
            created_after: self.created_after,
            schedule_id,
            created_before: self.created_before,
            limit: self.limit,
            dry_run: self.dry_run,
        })
    }
}

/// Which of the two actions.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    Cancel,
    Retry,
}

/// One task by id, or the filter's; exactly one of the two.
pub async fn run(
    action: Action,
    id: Option<TaskRef>,
    filter: BulkArgs,
    client: ClientArgs,
) -> anyhow::Result<ExitCode> {
    let client = client.client()?;
    match (id, filter.any()) {
        (Some(_), true) => {
            bail!("give a task id or a filter (--queue, --status, ...), not both")
        }
        (None, false) => bail!(
            "give a task id, or a filter: --queue, --status, --schedule, --created-after or --created-before"
        ),
        (Some(id), false) if filter.dry_run || filter.limit.is_some() => {
            bail!("--dry-run and --limit go with a filter, not with task {id}")
        }
        (Some(id), false) => match action {
            Action::Cancel => {
                let task = client.task_cancel(id).await?;
                writeln!(std::io::stdout(), "task {} {}", task.id, task.status)?;
            }
            Action::Retry => {
                let (task, created) = client.task_retry(id.clone()).await?;
                let verb = if created {
                    "re-run as"
                } else {
                    "already re-run as"
                };
                eprintln!("task {id} {verb} {}", task.id);
                print_json(&task)?;
            }
        },
        (None, true) => {
            let request = filter.request(&client).await?;
            let answer = match action {
                Action::Cancel => client.tasks_cancel(&request).await?,
                Action::Retry => client.tasks_retry(&request).await?,
            };
            print_json(&answer)?;
            eprintln!("{}", summary(action, &answer));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn summary(action: Action, a: &BulkAnswer) -> String {
    let verb = match action {
        Action::Cancel => "cancel",
        Action::Retry => "re-run",
    };
    let refused = a.tasks.iter().filter(|t| t.error.is_some()).count();
    let mut line = if a.dry_run {
        format!(
            "dry run: {} match; this call would {verb} {}",
            a.matched,
            a.tasks.len()
        )
    } else {
        format!(
            "{} match; {verb}: {} done, {refused} refused",
            a.matched, a.acted
        )
    };
    if let Some(n) = a.with_secrets.filter(|n| *n > 0) {
        line.push_str(&format!("; {n} left alone (they ran with secrets)"));
    }
    if a.more {
        line.push_str("; more remain: run it again");
    }
    line
}
