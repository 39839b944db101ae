//! Runner settings.

use baton_core::backoff::Backoff;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// Most items the agent puts in one exchange (the server's default limit).
pub(crate) const MAX_EXCHANGE_ITEMS: usize = 256;

/// Output at most this large still unshipped when a run ends travels with its completion
/// (base64 in the exchange) instead of in log requests of its own.
pub(crate) const LOG_TAIL_MAX: usize = 64 << 10;

/// How one runner agent runs: its server, its identity, its slots and its timings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunnerConfig {
    /// Base URL of any node or of the load balancer in front of them.
    pub server: String,
    /// Needed only for the first start; afterwards the runner token in `state_dir` is used.
    pub registration_token: Option<String>,
    /// The name operators see it by; the host name unless given.
    pub name: String,
    /// Labels a task may ask for: it gets only tasks whose labels it has.
    pub labels: Vec<String>,
    /// Queues to serve; empty means every queue.
    pub queues: Vec<String>,
    /// Tasks run at once.
    pub capacity: u32,
    /// Holds the runner's identity and the logs of running tasks; only the agent reads it
    /// (made 0700).
    pub state_dir: PathBuf,
    /// Parent of each task's working directory; never inside `state_dir`.
    pub work_dir: PathBuf,
    /// Run every task as this user (a name, `uid` or `uid:gid`). Unset, an agent running
    /// as root runs each task as a fresh uid of a block it claims from `slot_uid_base`.
    pub run_as: Option<String>,
    /// Where the blocks of task uids start.
    pub slot_uid_base: u32,
    /// `RLIMIT_NPROC` of a task that runs as a user of its own.
    pub task_max_processes: u64,
    /// Talk to `server` although the runner registered with another one. Without it the
    /// agent refuses: its token would go to a server that did not issue it.
    pub allow_server_change: bool,
    /// How long each lease request parks on the server when there is no work.
    pub wait_s: u32,
    /// On SIGTERM, how long running tasks may go on before they are killed.
    pub shutdown_grace_s: u64,
    /// Between SIGTERM and SIGKILL when a task is stopped.
    pub kill_grace_s: u64,
    /// How often buffered output is shipped.
    pub log_flush_ms: u64,
    /// How often a runner with work tells the server it is alive.
    pub heartbeat_s: u64,
    /// With no answer from the server for this long, kill running tasks: the server is
    /// about to declare this runner lost and hand them out again. Keep it below the
    /// server's `runner_lost_after_s`.
    pub fence_after_s: u64,
    /// Most bytes of output one log request carries.
    pub log_chunk_bytes: usize,
    /// Run one task, then unregister and exit (an ephemeral runner).
    pub once: bool,
    /// Below this much free space in `work_dir`, lease nothing until it frees up.
    pub min_free_disk_mb: u64,
    /// Serve `GET /healthz` here (off when unset).
    pub healthz_listen: Option<std::net::SocketAddr>,
    /// Announce this version instead of the agent's own (skew rehearsals in tests).
    pub reported_version: Option<String>,
}

impl RunnerConfig {
    /// Where running tasks' output is spooled (made when the agent starts).
    pub fn spool_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }

    /// Where results wait until a node takes them (`results`).
    pub fn results_dir(&self) -> PathBuf {
        self.state_dir.join("results")
    }

    /// The version the agent announces to the server.
    pub fn announced_version(&self) -> String {
        self.reported_version
            .clone()
            .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string())
    }
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            server: "http://127.0.0.1:8080".into(),
            registration_token: None,
            name: default_name(),
            labels: Vec::new(),
            queues: Vec::new(),
            capacity: 1,
            state_dir: PathBuf::from(".baton-runner"),
            work_dir: PathBuf::from(".baton-runner-work"),
            run_as: None,
            slot_uid_base: crate::isolation::DEFAULT_SLOT_UID_BASE,
            task_max_processes: crate::isolation::DEFAULT_TASK_MAX_PROCESSES,
            allow_server_change: false,
            wait_s: 30,
            shutdown_grace_s: 30,
            kill_grace_s: 10,
            log_flush_ms: 200,
            heartbeat_s: 5,
            fence_after_s: 150,
            once: false,
            min_free_disk_mb: 512,
            healthz_listen: None,
            reported_version: None,
            log_chunk_bytes: 256 << 10,
        }
    }
}

fn default_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "runner".into())
}

impl RunnerConfig {
    /// How the runner waits between tries after a failure: 0.5 s doubling, up to 30 s or
    /// a quarter of `fence_after`, whichever is less. A runner cut off then tries at
    /// least four times before it fences itself, and a result it holds through an outage
    /// reaches the server within one short step of the outage's end — inside the
    /// server's `timeout_grace`, so the runner's own verdict lands before a timeout's.
    pub fn backoff(&self) -> Backoff {
        let quarter_fence = Duration::from_secs(self.fence_after_s) / 4;
        Backoff {
            max: Backoff::RUNNER
                .max
                .min(quarter_fence)
                .max(Backoff::RUNNER.initial),
            ..Backoff::RUNNER
        }
    }

    /// How long an exchange waits for its answer beyond its park: the client's usual 30 s,
    /// or a third of `fence_after`, whichever is less (and never under a second). A node that holds a request without
    /// answering (frozen, or its answers held up) is given up on and the exchange resent,
    /// through the load balancer, to a node that answers — before the runner's silence
    /// reaches its fence and it kills its tasks.
    pub fn exchange_timeout(&self) -> Duration {
        (Duration::from_secs(self.fence_after_s) / 3).clamp(
            Self::SHORTEST_EXCHANGE_TIMEOUT,
            baton_client::client::REQUEST_TIMEOUT,
        )
    }

    /// However short the fence, a node gets this long to answer.
    const SHORTEST_EXCHANGE_TIMEOUT: Duration = Duration::from_secs(1);

    /// `shutdown_grace_s` as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_s)
    }

    /// `kill_grace_s` as a duration.
    pub fn kill_grace(&self) -> Duration {
        Duration::from_secs(self.kill_grace_s)
    }

    /// `log_flush_ms` as a duration.
    pub fn log_flush(&self) -> Duration {
        Duration::from_millis(self.log_flush_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::RunnerConfig;
    use std::time::Duration;

    #[test]
    fn the_backoff_stays_a_quarter_of_the_fence_at_most() {
        let backoff = |fence_after_s| {
            RunnerConfig {
                fence_after_s,
                ..RunnerConfig::default()
            }
            .backoff()
            .max
        };
        assert_eq!(backoff(150), Duration::from_secs(30), "the default: 30 s");
        assert_eq!(
            backoff(7),
            Duration::from_millis(1750),
            "a drill's fence of 7 s"
        );
        assert_eq!(
            backoff(1),
            Duration::from_millis(500),
            "never below the first step"
        );
    }

    /// Two tries of an exchange fit in the fence, so a node that holds one without
    /// answering cannot silence the runner to its fence; the default keeps the client's.
    #[test]
    fn an_exchange_is_given_up_within_a_third_of_the_fence() {
        let timeout = |fence_after_s| {
            RunnerConfig {
                fence_after_s,
                ..RunnerConfig::default()
            }
            .exchange_timeout()
        };
        assert_eq!(timeout(150), Duration::from_secs(30), "the default: 30 s");
        assert_eq!(timeout(7), Duration::from_secs(7) / 3, "a drill's fence");
        assert_eq!(timeout(0), Duration::from_secs(1), "never under a second");
    }
}
