//! The command line.

mod completions;
mod connect;
mod exit;
mod log_lines;
mod pipeline;
mod pipeline_file;
mod pipeline_table;
mod pipeline_watch;
mod queue;
mod relay;
mod resolve;
mod runner;
mod runners;
mod schedule;
mod serve;
mod table;
mod task;
mod task_actions;
mod task_list;
mod task_logs;
mod task_table;
mod task_watch;
mod tokens;
mod when;

use crate::telemetry::LogFormat;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub use exit::report;

#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version,
    about = "High-availability multi-node task scheduler"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node: the HTTP API and the node's services.
    Serve(Box<serve::ServeArgs>),
    /// Apply the database migrations and exit.
    Migrate(serve::MigrateArgs),
    /// Run a runner agent that leases and executes tasks.
    Runner(runner::RunnerArgs),
    /// Submit, inspect and follow tasks.
    #[command(subcommand)]
    Task(task::TaskCommand),
    /// Cron schedules that make tasks: create, list, pause, resume, trigger, delete.
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// Pipelines of jobs that wait for the jobs they need: submit, watch, get, list, cancel, retry.
    #[command(subcommand)]
    Pipeline(pipeline::PipelineCommand),
    /// List, pause, resume and delete runners.
    #[command(subcommand)]
    Runners(runners::RunnersCommand),
    /// List queues, pause and resume them, set the defaults their tasks take.
    #[command(subcommand)]
    Queue(queue::QueueCommand),
    /// Create, list and revoke API tokens.
    #[command(subcommand)]
    Token(tokens::TokenCommand),
    /// Create tokens runners register with.
    #[command(subcommand)]
    RegistrationToken(tokens::RegistrationTokenCommand),
    /// Start a local cluster: Redis, Postgres, three nodes behind nginx, two runners.
    Dev(crate::dev::DevArgs),
    /// The failover drill: a cluster under load, nodes, runners and Redis killed at
    /// random, the invariants checked at the end.
    #[cfg(feature = "drill")]
    Chaos(baton_drill::ChaosArgs),
    /// Print a shell completion script: `baton completions bash > /etc/bash_completion.d/baton`.
    Completions(completions::CompletionsArgs),
    /// A sandboxed runner's way to its server (started by a node's sandbox backend).
    #[command(hide = true)]
    Relay(relay::RelayArgs),
}

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    // The node and the runner export traces (they know their identity once their
    // settings are read); the other commands only log.
    match command {
        Command::Serve(args) => serve::serve(*args).await,
        Command::Runner(args) => runner::run(args).await,
        Command::Migrate(args) => serve::migrate(args).await,
        command => {
            crate::telemetry::init_logs(LogFormat::from_env());
            run_other(command).await
        }
    }
}

async fn run_other(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(_) | Command::Runner(_) | Command::Migrate(_) => {
            unreachable!("dispatched by `run`")
        }
        Command::Task(cmd) => task::run(cmd).await,
        Command::Schedule(cmd) => schedule::run(cmd).await,
        Command::Pipeline(cmd) => pipeline::run(cmd).await,
        Command::Runners(cmd) => runners::run(cmd).await,
        Command::Queue(cmd) => queue::run(cmd).await,
        Command::Token(cmd) => tokens::tokens(cmd).await,
        Command::RegistrationToken(cmd) => tokens::registration_tokens(cmd).await,
        Command::Dev(args) => crate::dev::run(args).await,
        #[cfg(feature = "drill")]
        Command::Chaos(args) => baton_drill::run(args).await,
        Command::Completions(args) => completions::print(args),
        Command::Relay(args) => relay::run(args).await,
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::{Cli, Command};
    use clap::CommandFactory;
    use clap::Parser;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Every option and argument of every command says what it is for, in a line.
    #[test]
    fn every_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "baton", &mut missing);
        assert!(missing.is_empty(), "no help: {missing:#?}");
    }

    /// A flag that may be given several times takes `--x a --x b` and `--x a,b` alike,
    /// in every command. Variables (`K=V`) are the exception: a value may hold a comma.
    #[test]
    fn every_repeatable_flag_also_takes_commas() {
        const KEY_VALUES: [&str; 2] = ["env", "secret_env"];
        fn walk(cmd: &clap::Command, path: &str, one_way: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let (Some(long), id) = (arg.get_long(), arg.get_id().as_str()) else {
                    continue;
                };
                let repeats = matches!(arg.get_action(), clap::ArgAction::Append);
                let commas = arg.get_value_delimiter() == Some(',');
                if (repeats || commas) && !(repeats && commas) && !KEY_VALUES.contains(&id) {
                    one_way.push(format!("{path} --{long}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), one_way);
            }
        }
        let mut one_way = Vec::new();
        walk(&Cli::command(), "baton", &mut one_way);
        assert!(one_way.is_empty(), "one way only: {one_way:#?}");
        let cli = Cli::try_parse_from([
            "baton", "task", "submit", "--label", "a,b", "--label", "c", "--", "true",
        ])
        .unwrap();
        let Command::Task(super::task::TaskCommand::Submit(args)) = cli.command else {
            panic!("a submit");
        };
        assert!(
            format!("{args:?}").contains(r#"labels: ["a", "b", "c"]"#),
            "{args:?}"
        );
    }
}
