//! The command line.

mod admin;
mod completions;
mod connect;
mod queue;
mod runner;
mod schedule;
mod serve;
mod task;
mod task_actions;
mod task_table;
mod task_watch;

use crate::telemetry::LogFormat;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

pub use connect::hint;

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
    /// List, pause, resume and delete runners.
    #[command(subcommand)]
    Runners(admin::RunnersCommand),
    /// List queues, pause and resume them, set the defaults their tasks take.
    #[command(subcommand)]
    Queue(queue::QueueCommand),
    /// Create, list and revoke API tokens.
    #[command(subcommand)]
    Token(admin::TokenCommand),
    /// Create tokens runners register with.
    #[command(subcommand)]
    RegistrationToken(admin::RegistrationTokenCommand),
    /// Start a local cluster: Redis, Postgres, three nodes behind nginx, two runners.
    Dev(crate::dev::DevArgs),
    /// The failover drill: a cluster under load, nodes, runners and Redis killed at
    /// random, the invariants checked at the end.
    #[cfg(feature = "drill")]
    Chaos(baton_drill::ChaosArgs),
    /// Print a shell completion script: `baton completions bash > /etc/bash_completion.d/baton`.
    Completions(completions::CompletionsArgs),
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
        Command::Runners(cmd) => admin::runners(cmd).await,
        Command::Queue(cmd) => queue::run(cmd).await,
        Command::Token(cmd) => admin::tokens(cmd).await,
        Command::RegistrationToken(cmd) => admin::registration_tokens(cmd).await,
        Command::Dev(args) => crate::dev::run(args).await,
        #[cfg(feature = "drill")]
        Command::Chaos(args) => baton_drill::run(args).await,
        Command::Completions(args) => completions::print(args),
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
    use super::Cli;
    use clap::CommandFactory;

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
}
