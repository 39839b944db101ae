//! `baton task submit | get | list | cancel | retry | logs | watch`.

use super::connect::{ClientArgs, Output, print_json};
use super::task_actions::{self, Action, BulkArgs};
use super::task_table;
use super::task_watch;
use anyhow::Context;
use baton_client::{Client, RetryPolicy, SubmitTask, Task, TaskQuery};
use baton_core::TaskStatus;
use clap::{Args, Subcommand};
use futures::StreamExt;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use uuid::Uuid;

// Parsed once per process and matched at once: the size of the biggest variant costs
// nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Submit a task: `baton task submit [options] -- CMD ARGS...`
    Submit(SubmitArgs),
    /// Show one task as JSON.
    Get {
        /// The task's id.
        id: Uuid,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List tasks, newest first, as summaries (long commands and scripts cut, no env,
    /// payload or outputs): `baton task get` shows one whole.
    List {
        /// Only tasks in this status (queued, running, succeeded, failed, ...).
        #[arg(long)]
        status: Option<String>,
        /// Only tasks of this queue.
        #[arg(long)]
        queue: Option<String>,
        /// Only the tasks this schedule made.
        #[arg(long)]
        schedule: Option<Uuid>,
        /// How many tasks to show, at most.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Continue after this task id (from a previous page).
        #[arg(long)]
        cursor: Option<String>,
        /// text: aligned columns; json: the page as the API gives it.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Cancel a task: at once if it has not started, through its runner if it runs. Or
    /// the tasks a filter selects: `baton task cancel --queue Q --status queued --dry-run`.
    Cancel {
        /// The task's id; none with a filter.
        id: Option<Uuid>,
        #[command(flatten)]
        filter: BulkArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Re-run an ended task as a new one, linked to it (`retry_of`). Or the ended tasks a
    /// filter selects: `baton task retry --queue Q --status failed --dry-run`.
    Retry {
        /// The ended task's id; none with a filter.
        id: Option<Uuid>,
        #[command(flatten)]
        filter: BulkArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print events as they happen: task status changes, runners and nodes joining and
    /// leaving, schedules firing. Taken up again after the last event if the stream breaks.
    Watch {
        /// Only the events of this queue's tasks.
        #[arg(long, short)]
        queue: Option<String>,
        /// Only the events of this task.
        #[arg(long)]
        task: Option<Uuid>,
        /// Only these kinds, comma-separated: task, runner, node, schedule.
        #[arg(long)]
        kind: Option<String>,
        /// text: one line per event; json: each event's JSON on a line.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print a task's output.
    Logs {
        /// The task's id.
        id: Uuid,
        /// Keep printing new output until the task finishes.
        #[arg(long, short)]
        follow: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    task: TaskArgs,
    /// A secret variable, K=V (repeatable): set in the task's process, never shown.
    #[arg(long = "secret-env", value_parser = parse_env)]
    secret_env: Vec<(String, String)>,
    /// Submitting twice with the same key gives one task.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Start no earlier than this time (RFC 3339, e.g. 2026-12-01T08:00:00Z).
    #[arg(long)]
    run_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Follow the output and exit with the task's exit code.
    #[arg(long, short)]
    wait: bool,
    /// text: the task's id; json: the whole task.
    #[arg(long, short, value_enum, default_value_t)]
    output: Output,
    #[command(flatten)]
    client: ClientArgs,
}

/// What a task runs and where: shared by `task submit` and `schedule create`.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The queue it waits in [default: default].
    #[arg(long, short)]
    queue: Option<String>,
    /// A label the runner must have (repeatable).
    #[arg(long = "label", short)]
    labels: Vec<String>,
    /// An environment variable for the task, K=V (repeatable).
    #[arg(long = "env", short, value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Seconds the task may run.
    #[arg(long)]
    timeout: Option<i64>,
    /// Higher runs first within a queue (-1000..1000).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i32>,
    /// Runs in all, retries included: failures and lost runners retry with backoff.
    #[arg(long)]
    max_attempts: Option<i32>,
    /// POST the task's final state to this URL when it ends.
    #[arg(long)]
    notify_url: Option<String>,
    /// Its retry policy, as JSON: e.g. '{"on_exit_codes": [3], "backoff_base_s": 5}'.
    // Parsed once the arguments are: kept as text, the arguments stay small.
    #[arg(long)]
    retry: Option<String>,
    /// Concurrency group: at most --concurrency-limit tasks of this key run at once.
    #[arg(long)]
    concurrency_key: Option<String>,
    /// How many tasks of --concurrency-key may run at once [default: 1].
    #[arg(long, allow_negative_numbers = true)]
    concurrency_limit: Option<i64>,
    /// Run this script with `sh -c` instead of a command.
    #[arg(long, conflicts_with = "command")]
    script: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true)]
    command: Vec<String>,
}

impl TaskArgs {
    pub fn request(self) -> anyhow::Result<SubmitTask> {
        Ok(SubmitTask {
            queue: self.queue,
            labels: self.labels,
            command: (!self.command.is_empty()).then_some(self.command),
            script: self.script,
            env: self.env.into_iter().collect::<BTreeMap<_, _>>(),
            priority: self.priority.unwrap_or(0),
            timeout_s: self.timeout,
            max_attempts: self.max_attempts,
            notify_url: self.notify_url,
            concurrency_key: self.concurrency_key,
            concurrency_limit: self.concurrency_limit,
            retry: self.retry.as_deref().map(parse_retry).transpose()?,
            ..SubmitTask::default()
        })
    }
}

pub(super) fn parse_retry(s: &str) -> anyhow::Result<RetryPolicy> {
    serde_json::from_str(s).with_context(|| format!("--retry {s:?} is not a retry policy"))
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not K=V"))
}

pub async fn run(cmd: TaskCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        TaskCommand::Submit(args) => submit(args).await,
        TaskCommand::Cancel { id, filter, client } => {
            task_actions::run(Action::Cancel, id, filter, client).await
        }
        TaskCommand::Retry { id, filter, client } => {
            task_actions::run(Action::Retry, id, filter, client).await
        }
        TaskCommand::Get { id, client } => {
            print_json(&client.client()?.task_get(id).await?)?;
            Ok(ExitCode::SUCCESS)
        }
        TaskCommand::List {
            status,
            queue,
            schedule,
            limit,
            cursor,
            output,
            client,
        } => {
            let page = client
                .client()?
                .task_list(&TaskQuery {
                    status,
                    queue,
                    limit: Some(limit),
                    cursor,
                    schedule_id: schedule,
                })
                .await?;
            if output == Output::Json {
                print_json(&page)?;
                return Ok(ExitCode::SUCCESS);
            }
            let colour = task_table::colour_wanted();
            task_table::write(&mut std::io::stdout().lock(), &page.tasks, colour)?;
            if let Some(next) = page.next_cursor {
                eprintln!("more: --cursor {next}");
            }
            Ok(ExitCode::SUCCESS)
        }
        TaskCommand::Watch {
            queue,
            task,
            kind,
            output,
            client,
        } => {
            let filter = baton_client::EventFilter { queue, task, kind };
            task_watch::watch(&client.client()?, filter, output == Output::Json).await?;
            Ok(ExitCode::SUCCESS)
        }
        TaskCommand::Logs { id, follow, client } => {
            let client = client.client()?;
            if follow {
                follow_logs(&client, id).await?;
            } else {
                let mut offset = 0;
                loop {
                    let slice = client.task_logs(id, offset).await?;
                    std::io::stdout().write_all(&slice.bytes)?;
                    if slice.bytes.is_empty() {
                        break;
                    }
                    offset = slice.next_offset;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let client = args.client.client()?;
    let request = SubmitTask {
        secret_env: args.secret_env.into_iter().collect(),
        run_at: args.run_at,
        idempotency_key: args.idempotency_key,
        ..args.task.request()?
    };
    let (task, created) = client.submit(&request).await?;
    if !args.wait {
        match args.output {
            Output::Text => writeln!(std::io::stdout(), "{}", task.id)?,
            Output::Json => print_json(&task)?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "{} task {} on queue {}",
        if created { "submitted" } else { "existing" },
        task.id,
        task.queue
    );
    let done = follow_logs(&client, task.id).await?;
    eprintln!("task {} {}", done.id, describe(&done));
    Ok(exit_code_of(&done))
}

/// Prints output as it arrives until the task is terminal, then returns the final task.
/// The server streams it (following the output on any node); each attempt has its own
/// log, and a retry's output follows a marker line on stderr. Which attempt is the last
/// and when the task has ended, the event stream tells (`task_watch`); a log stream
/// cut short (its node went away) is picked up again from where it stopped.
/// With no output and no news for this long, the task itself is read: a change the event
/// stream could not tell (a node killed between a commit and its event) is not waited
/// for for ever.
const QUIET_CHECK: Duration = Duration::from_secs(30);

async fn follow_logs(client: &Client, id: Uuid) -> anyhow::Result<Task> {
    let (mut news, watcher) = task_watch::watch_task(client, id).await?;
    let mut offset = 0;
    let mut attempt = None;
    let mut quiet_since = Instant::now();
    loop {
        let mut received = false;
        match client.task_logs_follow(id, attempt, offset).await {
            Ok((followed, stream)) => {
                attempt = Some(followed);
                let mut stream = std::pin::pin!(stream);
                while let Some(Ok(bytes)) = stream.next().await {
                    let mut out = std::io::stdout().lock();
                    out.write_all(&bytes)?;
                    out.flush()?;
                    offset += bytes.len() as i64;
                    received = true;
                }
            }
            Err(e) if e.status().is_some() => return Err(e.into()),
            // No node answered: a moment before asking again.
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
        let mut now = *news.borrow();
        if news.has_changed().is_err() || quiet_since.elapsed() >= QUIET_CHECK {
            // The watcher has given up, or nothing was heard for long: ask the task.
            let task = client.task_get(id).await.context("reading the task")?;
            (now.status, now.attempt) = (task.status, task.attempt);
            quiet_since = Instant::now();
        }
        match attempt {
            Some(followed) if now.attempt > followed => {
                if followed > 0 {
                    eprintln!("--- attempt {} ---", now.attempt);
                }
                attempt = Some(now.attempt);
                offset = 0;
                continue;
            }
            _ if now.status.is_terminal() => break,
            _ => {}
        }
        if received {
            quiet_since = Instant::now();
        } else if let Ok(Ok(())) =
            tokio::time::timeout(Duration::from_secs(1), news.changed()).await
        {
            // Nothing came: news was waited for rather than asking again at once (a
            // stream cut by its node is taken up again within the second).
            quiet_since = Instant::now();
        }
    }
    watcher.abort();
    client.task_get(id).await.context("reading the task")
}

fn describe(task: &Task) -> String {
    match (task.status, task.exit_code, &task.error) {
        (status, Some(code), _) => format!("{status} (exit code {code})"),
        (status, None, Some(error)) => format!("{status}: {error}"),
        (status, None, None) => status.to_string(),
    }
}

/// The task's own exit code when it has one; 1 for any other unsuccessful end.
fn exit_code_of(task: &Task) -> ExitCode {
    match (task.status, task.exit_code) {
        (TaskStatus::Succeeded, _) => ExitCode::SUCCESS,
        (_, Some(code)) => ExitCode::from(u8::try_from(code).unwrap_or(1).max(1)),
        _ => ExitCode::FAILURE,
    }
}
