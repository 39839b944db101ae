//! The command line.

mod admin;
mod connect;
mod queue;
mod runner;
mod schedule;
mod serve;
mod task;
mod task_actions;

use crate::telemetry::{LogFormat, TraceArgs};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version,
    about = "High-availability multi-node task scheduler"
)]
pub struct Cli {
    /// Log output format.
    #[arg(
        long,
        global = true,
        env = "BATON_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub traces: TraceArgs,
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
    /// List queues, pause and resume them.
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
    Chaos(crate::chaos::ChaosArgs),
}

pub async fn run(
    command: Command,
    log_format: LogFormat,
    traces: TraceArgs,
) -> anyhow::Result<ExitCode> {
    // The node and the runner export traces (they know their identity once their
    // settings are read); the other commands only log.
    match command {
        Command::Serve(args) => serve::serve(*args, log_format, traces).await,
        Command::Runner(args) => runner::run(args, log_format, traces).await,
        command => {
            crate::telemetry::init_logs(log_format);
            run_other(command).await
        }
    }
}

async fn run_other(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(_) | Command::Runner(_) => unreachable!("dispatched by `run`"),
        Command::Migrate(args) => serve::migrate(args).await,
        Command::Task(cmd) => task::run(cmd).await,
        Command::Schedule(cmd) => schedule::run(cmd).await,
        Command::Runners(cmd) => admin::runners(cmd).await,
        Command::Queue(cmd) => queue::run(cmd).await,
        Command::Token(cmd) => admin::tokens(cmd).await,
        Command::RegistrationToken(cmd) => admin::registration_tokens(cmd).await,
        Command::Dev(args) => crate::dev::run(args).await,
        Command::Chaos(args) => crate::chaos::run(args).await,
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
