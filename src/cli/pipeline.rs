//! `baton pipeline submit | get | list | watch | cancel | retry`: graphs of jobs, each a
//! task that waits for the jobs it needs. A pipeline is written as a file (see
//! `pipeline_file`), shown as a header over a table of its jobs (`pipeline_table`), and
//! followed to its end by reading it each second (`pipeline_watch`).

use super::connect::{ClientArgs, ListOutput, Output, print_json};
use super::{exit, pipeline_file, pipeline_table, pipeline_watch, resolve, table};
use anyhow::Context;
use baton_client::{Client, Pipeline, SubmitPipeline};
use clap::{Args, Subcommand};
use std::io::Write;
use std::process::ExitCode;
use uuid::Uuid;

/// What `pipeline submit --help` shows of a file.
const FILE_EXAMPLE: &str = "\
A pipeline file (YAML, or JSON) names the pipeline and maps each job's name to its fields:
`needs`, the jobs it waits for; `when`, on which of their ends it runs (on_success, the
default, on_failure or always); and a task's fields (`script` or `command`, `labels`,
`env`, `timeout_s`, `max_attempts`, ...). Jobs are submitted in the file's order.

    name: release
    jobs:
      build:
        script: make
      test-linux:
        needs: [build]
        labels: [linux]
        command: [make, test]
      deploy:
        needs: [test-linux]
        env: {TARGET: prod}
        script: ./deploy.sh";

#[derive(Debug, Subcommand)]
pub enum PipelineCommand {
    /// Submit a pipeline from a YAML file: `baton pipeline submit release.yaml`.
    #[command(after_help = FILE_EXAMPLE)]
    Submit(SubmitArgs),
    /// Show a pipeline: its status and times, then a row per job.
    ///
    /// Each row: its layer (0 for a job that needs nothing), name, status, needs, exit
    /// code, run time, task (its latest, as `baton task` takes it) and error.
    Get {
        /// The pipeline's id, or its short id (the last 12 characters tables show).
        id: String,
        #[command(flatten)]
        output: ListOutput,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List pipelines, newest first, each with its jobs counted by status.
    List {
        /// How many pipelines to show, at most (1 to 200).
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Continue after this pipeline id (from a previous page).
        #[arg(long)]
        cursor: Option<Uuid>,
        #[command(flatten)]
        output: ListOutput,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Follow a pipeline until it ends, a line per job status change.
    ///
    /// Exits 0 if it succeeded; else as its first failed job would end `task submit
    /// --wait` (124 for a timeout, its own exit code), or 1.
    Watch {
        /// The pipeline's id or short id.
        id: String,
        /// text: a line per change; json: the whole pipeline on a line at each change.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Cancel every job of a pipeline that has not ended.
    ///
    /// Waiting and queued jobs end at once, running ones through their runners.
    Cancel {
        /// The pipeline's id or short id.
        id: String,
        #[command(flatten)]
        output: ListOutput,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Re-run an ended job of a pipeline, and the jobs it had skipped.
    ///
    /// The job runs as a new task; the jobs it had skipped wait for it again.
    Retry {
        /// The pipeline's id or short id.
        id: String,
        /// The job's name, as the pipeline's file gives it.
        job: String,
        #[command(flatten)]
        output: ListOutput,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The pipeline file, YAML or JSON; `-` reads standard input.
    file: String,
    /// Follow it until it ends, a line per job status change; exit as `pipeline watch`
    /// does: 0 if it succeeded.
    #[arg(long, short)]
    watch: bool,
    /// Submitting twice with the same key gives one pipeline.
    #[arg(long)]
    idempotency_key: Option<String>,
    #[command(flatten)]
    output: ListOutput,
    #[command(flatten)]
    client: ClientArgs,
}

pub async fn run(cmd: PipelineCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PipelineCommand::Submit(args) => return submit(args).await,
        PipelineCommand::Get { id, output, client } => {
            let client = client.client()?;
            let id = resolve::pipeline(&client, &id).await?;
            show(&client.pipeline_get(id).await?, &output)?;
        }
        PipelineCommand::List {
            limit,
            cursor,
            output,
            client,
        } => {
            let page = client.client()?.pipeline_list(cursor, Some(limit)).await?;
            output.print(&page, pipeline_table::list_table)?;
            if let (Some(next), Output::Text) = (page.next_cursor, output.output) {
                eprintln!("more: --cursor {next}");
            }
        }
        PipelineCommand::Watch { id, output, client } => {
            let client = client.client()?;
            let id = resolve::pipeline(&client, &id).await?;
            return watch(&client, id, output).await;
        }
        PipelineCommand::Cancel { id, output, client } => {
            let client = client.client()?;
            let id = resolve::pipeline(&client, &id).await?;
            let done = client.pipeline_cancel(id).await?;
            match output.output {
                Output::Json => print_json(&done)?,
                Output::Text => {
                    let mut told = format!("pipeline {id}: {} jobs cancelled", done.cancelled);
                    if done.cancelling > 0 {
                        told.push_str(&format!(
                            ", {} cancelling (their runners stop them)",
                            done.cancelling
                        ));
                    }
                    eprintln!("{told}");
                    show(&done.pipeline, &output)?;
                }
            }
        }
        PipelineCommand::Retry {
            id,
            job,
            output,
            client,
        } => {
            let client = client.client()?;
            let id = resolve::pipeline(&client, &id).await?;
            let (pipeline, created) = client.pipeline_retry_job(id, &job).await?;
            if let Some(now) = pipeline.jobs.iter().find(|j| j.name == job) {
                let verb = if created {
                    "re-run as"
                } else {
                    "already re-run as"
                };
                eprintln!("job {job} of pipeline {id} {verb} task {}", now.task_id);
            }
            show(&pipeline, &output)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    // The file is read and checked before anything else: a bad one sends nothing.
    let request = SubmitPipeline {
        idempotency_key: args.idempotency_key,
        ..pipeline_file::read(&args.file)?
    };
    let client = args.client.client()?;
    let (pipeline, created) = client
        .pipeline_submit(&request)
        .await
        .with_context(|| format!("submitting {}", args.file))?;
    let told = format!(
        "{} pipeline {} ({}, {} jobs)",
        if created { "submitted" } else { "existing" },
        pipeline.id,
        pipeline.name,
        pipeline.jobs.len()
    );
    if !args.watch {
        if args.output.output == Output::Text {
            eprintln!("{told}");
        }
        show(&pipeline, &args.output)?;
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("{told}");
    watch(&client, pipeline.id, args.output.output).await
}

/// Follows the pipeline to its end; the command's exit code is the end's.
async fn watch(client: &Client, id: Uuid, output: Output) -> anyhow::Result<ExitCode> {
    let ended = pipeline_watch::watch(client, id, output == Output::Json).await?;
    eprintln!("{}", pipeline_watch::summary(&ended));
    Ok(exit::of_pipeline(&ended))
}

/// The pipeline as its JSON, or as a header over its jobs' table.
fn show(pipeline: &Pipeline, output: &ListOutput) -> anyhow::Result<()> {
    match output.output {
        Output::Json => print_json(pipeline),
        Output::Text => {
            let mut out = std::io::stdout().lock();
            pipeline_table::write(
                &mut out,
                pipeline,
                output.full_ids,
                table::colour_wanted(),
                chrono::Utc::now(),
            )?;
            Ok(out.flush()?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The help's example is a pipeline the file reader takes.
    #[test]
    fn the_helps_example_is_a_pipeline() {
        let (_, example) = FILE_EXAMPLE.split_once("\n\n").unwrap();
        let yaml: String = example
            .lines()
            .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
            .collect();
        let pipeline = pipeline_file::parse(&yaml, "help").unwrap();
        let names: Vec<&str> = pipeline.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["build", "test-linux", "deploy"]);
    }
}
