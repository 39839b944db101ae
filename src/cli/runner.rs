//! `baton runner`.

use crate::settings;
use crate::telemetry::{self, TelemetryArgs};
use baton_runner::{Agent, AgentExit, IncompatibleRunner, RunnerConfig};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Args, Serialize)]
pub struct RunnerArgs {
    /// TOML settings file (keys as in `RunnerConfig`).
    #[arg(long, env = "BATON_RUNNER_CONFIG")]
    #[serde(skip)]
    config: Option<PathBuf>,
    /// Any node, or the load balancer [default: http://127.0.0.1:8080].
    #[arg(long, env = "BATON_SERVER")]
    server: Option<String>,
    /// Registration token, needed on the first start only. Prefer
    /// --registration-token-file: a file is read once, where an environment variable
    /// stays in the process's environment.
    #[arg(long, env = "BATON_REGISTRATION_TOKEN", hide_env_values = true)]
    registration_token: Option<String>,
    /// A file holding the registration token (a mounted secret), read once at start.
    #[arg(long, env = "BATON_REGISTRATION_TOKEN_FILE")]
    #[serde(skip)]
    registration_token_file: Option<PathBuf>,
    /// Runner name [default: the host name].
    #[arg(long, env = "BATON_RUNNER_NAME")]
    name: Option<String>,
    /// Labels this runner offers, comma-separated (e.g. `linux,gpu`).
    #[arg(long, env = "BATON_RUNNER_LABELS", value_delimiter = ',')]
    labels: Option<Vec<String>>,
    /// Queues to serve, comma-separated [default: all].
    #[arg(long, env = "BATON_RUNNER_QUEUES", value_delimiter = ',')]
    queues: Option<Vec<String>>,
    /// Tasks run at once [default: 1].
    #[arg(long, env = "BATON_RUNNER_CAPACITY")]
    capacity: Option<u32>,
    /// Where the runner keeps its identity and spooled logs [default: .baton-runner].
    #[arg(long, env = "BATON_RUNNER_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Parent of the tasks' working directories, never inside the state dir
    /// [default: .baton-runner-work].
    #[arg(long, env = "BATON_RUNNER_WORK_DIR")]
    work_dir: Option<PathBuf>,
    /// Run every task as this user (a name, `uid` or `uid:gid`) [default: as root, each
    /// task as a fresh uid of its own; otherwise the agent's own user, which isolates
    /// nothing].
    #[arg(long, env = "BATON_RUNNER_RUN_AS")]
    run_as: Option<String>,
    /// Talk to --server although this runner registered with another server (the cluster
    /// moved); without it the agent refuses, so its token never goes elsewhere.
    #[arg(long, env = "BATON_RUNNER_ALLOW_SERVER_CHANGE", num_args = 0..=1, default_missing_value = "true")]
    allow_server_change: Option<bool>,
    /// Where the task uids start: an agent running as root claims a block of 65536 from
    /// here that no other agent on the host holds, and runs each task as a fresh one
    /// [default: 2000000000].
    #[arg(long, env = "BATON_RUNNER_SLOT_UID_BASE")]
    slot_uid_base: Option<u32>,
    /// Most processes a task may have at once, when tasks run as users of their own; a
    /// fork bomb stops there [default: 4096].
    #[arg(long, env = "BATON_RUNNER_TASK_MAX_PROCESSES")]
    task_max_processes: Option<u64>,
    /// Seconds each lease request parks on the server [default: 30].
    #[arg(long, env = "BATON_RUNNER_WAIT_S")]
    wait_s: Option<u32>,
    /// Seconds running tasks may finish after SIGTERM [default: 30].
    #[arg(long, env = "BATON_RUNNER_SHUTDOWN_GRACE_S")]
    shutdown_grace_s: Option<u64>,
    /// Seconds between heartbeats while tasks run [default: 5].
    #[arg(long, env = "BATON_RUNNER_HEARTBEAT_S")]
    heartbeat_s: Option<u64>,
    /// With no answer from the server for this long, kill running tasks; keep it below
    /// the server's runner-lost threshold [default: 150].
    #[arg(long, env = "BATON_RUNNER_FENCE_AFTER_S")]
    fence_after_s: Option<u64>,
    /// Run one task, then unregister and exit (an ephemeral runner).
    #[arg(long, env = "BATON_RUNNER_ONCE", num_args = 0..=1, default_missing_value = "true")]
    once: Option<bool>,
    /// Lease nothing while the work dir's file system has less free space [default: 512].
    #[arg(long, env = "BATON_RUNNER_MIN_FREE_DISK_MB")]
    min_free_disk_mb: Option<u64>,
    /// Serve the agent's own GET /healthz on this address.
    #[arg(long, env = "BATON_RUNNER_HEALTHZ_LISTEN")]
    healthz_listen: Option<std::net::SocketAddr>,
    /// Test-only: the version the agent announces instead of its own, to rehearse skew.
    #[arg(long, env = "BATON_RUNNER_REPORTED_VERSION", hide = true)]
    reported_version: Option<String>,
    /// Last: the heading it sets stays with its own flags.
    #[command(flatten)]
    #[serde(skip)]
    telemetry: TelemetryArgs,
}

pub async fn run(mut args: RunnerArgs) -> anyhow::Result<ExitCode> {
    // `--labels ""` means no labels, not one empty label.
    for list in [&mut args.labels, &mut args.queues].into_iter().flatten() {
        list.retain(|item| !item.trim().is_empty());
    }
    let mut config: RunnerConfig = settings::load(args.config.as_deref(), &args)?;
    if let Some(file) = &args.registration_token_file {
        let token = std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
        config.registration_token = Some(token.trim().to_string());
    }
    let telemetry = telemetry::init(
        args.telemetry.log_format,
        &args.telemetry.traces,
        telemetry::Service {
            name: "baton-runner",
            instance: &config.name,
        },
    )?;
    let agent = Agent::new(config)?;
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        super::shutdown_signal().await;
        tracing::info!("shutdown requested: no new tasks");
        stop.cancel();
    });
    let orphaned = CancellationToken::new();
    let gone = orphaned.clone();
    let mut parent_died = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(
        baton_runner::supervisor::ORPHANED as i32,
    ))?;
    tokio::spawn(async move {
        parent_died.recv().await;
        gone.cancel();
    });
    if !baton_runner::supervisor::watch_supervisor() {
        anyhow::bail!("the runner's supervisor is gone before the agent started");
    }
    let exit = agent.run(shutdown, orphaned).await;
    telemetry.flush().await;
    // Refused for its version, at registration or later: the same exit either way.
    const INCOMPATIBLE: u8 = 4;
    let exit = match exit {
        Err(e) if e.downcast_ref::<IncompatibleRunner>().is_some() => {
            eprintln!("baton runner: {e}");
            return Ok(ExitCode::from(INCOMPATIBLE));
        }
        other => other?,
    };
    Ok(match exit {
        AgentExit::Shutdown | AgentExit::Once => ExitCode::SUCCESS,
        AgentExit::Unregistered => ExitCode::from(3),
        AgentExit::Incompatible => {
            eprintln!(
                "baton runner: the server cannot serve this runner version; upgrade the runner"
            );
            ExitCode::from(INCOMPATIBLE)
        }
    })
}
