//! `baton task submit | get | list | cancel | retry | logs | watch`.

use super::connect::{ClientArgs, Output, print_json};
use super::task_actions::{self, Action, BulkArgs};
use super::task_watch;
use super::when::parse_time;
use super::{exit, task_list, task_logs};
use anyhow::Context;
use baton_client::{RetryPolicy, SubmitTask, Task, TaskRef};
use baton_core::pipeline::ReleaseRule;
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

// Parsed once per process and matched at once: the size of the biggest variant costs
// nothing worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Submit a task: `baton task submit [options] -- CMD ARGS...`
    Submit(SubmitArgs),
    /// Show one task as JSON.
    Get {
        /// The task's id, or its short id (the last 12 characters tables show).
        id: TaskRef,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List tasks, newest first, as summaries (long commands and scripts cut, no env,
    /// payload or outputs): `baton task get` shows one whole.
    List(task_list::ListArgs),
    /// Cancel a task: at once if it has not started, through its runner if it runs. Or
    /// the tasks a filter selects: `baton task cancel --queue Q --status queued --dry-run`.
    Cancel {
        /// The task's id or short id; none with a filter.
        id: Option<TaskRef>,
        #[command(flatten)]
        filter: BulkArgs,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Re-run an ended task as a new one, linked to it (`retry_of`). Or the ended tasks a
    /// filter selects: `baton task retry --queue Q --status failed --dry-run`.
    Retry {
        /// The ended task's id or short id; none with a filter.
        id: Option<TaskRef>,
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
        /// Only the events of this task (its id or short id).
        #[arg(long)]
        task: Option<TaskRef>,
        /// Only these kinds: task, runner, node, schedule (repeatable, or comma-separated).
        #[arg(long, value_delimiter = ',', action = clap::ArgAction::Append)]
        kind: Vec<String>,
        /// text: one line per event; json: each event's JSON on a line.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print a task's output: an attempt's, its last lines, each line with its time.
    Logs(task_logs::LogsArgs),
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    task: TaskArgs,
    /// A secret variable, K=V (repeatable; not comma-separated, as a value may hold
    /// commas): set in the task's process, never shown.
    #[arg(long = "secret-env", value_parser = parse_env)]
    secret_env: Vec<(String, String)>,
    /// Submitting twice with the same key gives one task.
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Start no earlier than this time (RFC 3339, e.g. 2026-12-01T08:00:00Z).
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    run_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Wait for this task to end first: its id or short id (repeatable, or
    /// comma-separated). The task waits as `waiting`, then runs or ends `skipped` as
    /// --when says.
    #[arg(long, value_name = "TASK", value_delimiter = ',', action = clap::ArgAction::Append, conflicts_with = "run_at")]
    depends_on: Vec<TaskRef>,
    /// On which ends of --depends-on it runs: on_success (the default), on_failure or
    /// always.
    #[arg(long, value_parser = parse_when, requires = "depends_on")]
    when: Option<ReleaseRule>,
    /// Follow the output and exit with the task's exit code: 124 if it timed out, 1 if
    /// it ended unsuccessfully with no code of its own (cancelled, expired, lost).
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
    /// A label the runner must have (repeatable, or comma-separated).
    #[arg(long = "label", short, value_name = "LABEL", value_delimiter = ',', action = clap::ArgAction::Append)]
    labels: Vec<String>,
    /// An environment variable for the task, K=V (repeatable; not comma-separated, as a
    /// value may hold commas).
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

fn parse_when(s: &str) -> Result<ReleaseRule, String> {
    ReleaseRule::parse(s).ok_or_else(|| format!("{s:?} is not on_success, on_failure or always"))
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
        TaskCommand::List(args) => task_list::run(args).await,
        TaskCommand::Watch {
            queue,
            task,
            kind,
            output,
            client,
        } => {
            let client = client.client()?;
            // The stream filters by whole id: a short one is looked up once.
            let task = match task {
                Some(TaskRef::Id(id)) => Some(id),
                Some(short) => Some(client.task_get(short).await?.id),
                None => None,
            };
            let kind = (!kind.is_empty()).then(|| kind.join(","));
            let filter = baton_client::EventFilter { queue, task, kind };
            task_watch::watch(&client, filter, output == Output::Json).await?;
            Ok(ExitCode::SUCCESS)
        }
        TaskCommand::Logs(args) => task_logs::run(args).await,
    }
}

async fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let client = args.client.client()?;
    // The API takes whole ids: a short one is looked up once.
    let mut depends_on = Vec::with_capacity(args.depends_on.len());
    for task in args.depends_on {
        depends_on.push(match task {
            TaskRef::Id(id) => id,
            short => client.task_get(short).await?.id,
        });
    }
    let request = SubmitTask {
        secret_env: args.secret_env.into_iter().collect(),
        run_at: args.run_at,
        idempotency_key: args.idempotency_key,
        depends_on,
        when: args.when,
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
    let done = task_logs::follow(&client, task.id, task_logs::FollowFrom::Start).await?;
    eprintln!("task {} {}", done.id, describe(&done));
    Ok(exit::of_task(&done))
}

fn describe(task: &Task) -> String {
    match (task.status, task.exit_code, &task.error) {
        (status, Some(code), _) => format!("{status} (exit code {code})"),
        (status, None, Some(error)) => format!("{status}: {error}"),
        (status, None, None) => status.to_string(),
    }
}
