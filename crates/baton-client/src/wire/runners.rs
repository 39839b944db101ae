//! The runner agent's side of the API: registration, leases, heartbeats, a task's start,
//! log and completion; and runners as operators see them.

use super::schemas::{LabelName, QueueName};
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use uuid::Uuid;

/// `POST /v1/runner/register`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRunner {
    /// A `brg_` token from `POST /v1/registration-tokens` (registering spends one of its
    /// uses, and the runner may claim only the labels and queues it allows), or the nodes'
    /// own `--registration-token`.
    pub registration_token: String,
    /// For operators: shown in listings and logs, not unique; the server knows the runner
    /// by its id.
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub name: String,
    /// What this runner offers: it is handed a task only when every label of the task is
    /// among these.
    #[serde(default)]
    #[schema(max_items = 32, value_type = Vec<LabelName>)]
    pub labels: Vec<String>,
    /// Queues this runner serves; empty means every queue.
    #[serde(default)]
    #[schema(value_type = Vec<QueueName>)]
    pub queues: Vec<String>,
    /// How many tasks it runs at once (default 1).
    #[serde(default = "default_capacity")]
    #[schema(minimum = 1, maximum = 1024)]
    pub capacity: i32,
    /// The agent's version, for operators to read; what the server serves is decided by the
    /// version header on each call ([`RUNNER_VERSION_HEADER`]), not by this.
    #[serde(default)]
    #[schema(max_length = 64, pattern = r"^[^\u0000]*$")]
    pub version: String,
}

fn default_capacity() -> i32 {
    1
}

/// Answer to a registration: the runner's identity, which its agent keeps in its state
/// directory and calls with from then on.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RunnerRegistered {
    /// Names the runner in listings, claims and `DELETE /v1/runners/{id}`.
    pub runner_id: RunnerId,
    /// Shown once; the server keeps only its hash.
    pub token: String,
}

/// A task the runner currently runs, as it reports it.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RunningLease {
    /// A task it runs, as the lease named it ([`LeasedTask::id`]).
    pub task_id: Uuid,
    /// The lease it runs the task under: the server tells a current run from a stale one by
    /// it.
    pub lease_id: LeaseId,
    /// The run is over on the runner (its process exited, or the runner's own timeout or
    /// a cancel is stopping it) and its result is on its way. The server ends a listed run
    /// `timed_out` only while it is not: a result held up on its way is never overwritten.
    /// Left out (agents of earlier releases), `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reporting: bool,
}

/// `POST /v1/runner/lease`: also a heartbeat.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// Identifies this request across retries, so a lost answer can be replayed.
    pub request_id: Uuid,
    /// How many tasks the runner can take now (its free slots).
    #[schema(minimum = 1, maximum = 64)]
    pub max: u32,
    /// How long to park when there is no work, 0..=50 seconds.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 50)]
    pub wait_s: u32,
    /// Random per agent start: a new one proves the runner restarted.
    pub boot_id: Uuid,
    /// Every task the runner runs now: the request is also its heartbeat, answered with
    /// `cancel` and `gone`.
    #[serde(default)]
    pub running: Vec<RunningLease>,
    /// The runner takes a task's `secret_env` with its start's answer, so a task leased
    /// unstarted comes without it. Left out (agents of earlier releases), secrets come
    /// with the lease, as they used to.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secrets_at_start: bool,
}

/// Answer to a lease request: new work, and what the request's heartbeat asks the runner
/// to stop.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
pub struct LeaseResponse {
    /// At most `max` tasks, each to acknowledge with a start before it runs; empty when the
    /// wait ran out with no work.
    pub tasks: Vec<LeasedTask>,
    /// Tasks the runner must stop (a cancel was requested).
    #[serde(default)]
    pub cancel: Vec<Uuid>,
    /// Leases that are no longer the runner's: stop them without reporting.
    #[serde(default)]
    pub gone: Vec<Uuid>,
}

/// `POST /v1/runner/heartbeat`: the runner's running leases.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// The agent process's boot id, as in lease requests.
    pub boot_id: Uuid,
    /// Every task the runner runs now, each under its lease: the answer says which of them
    /// to stop.
    #[serde(default)]
    pub running: Vec<RunningLease>,
}

/// `POST /v1/runner/unregister`: the runner's last word, what it still holds as it leaves.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerLeaving {
    /// The agent process's boot id, as in its exchanges.
    pub boot_id: Uuid,
    /// The runs it still holds as it leaves: a run it ran whose result it could not hand
    /// over (kept, or its last try perhaps still on its way) is listed `reporting`, and
    /// is left to the server, which ends it as a deleted runner's once the runner has been
    /// silent past `runner_lost_after_s`. Every other run the server counts as this boot's,
    /// however recently started, it never ran or gave up (an answer that came back after
    /// its fence), and will not start now: those end as forgotten as it leaves, not as a
    /// deleted runner's.
    #[serde(default)]
    pub running: Vec<RunningLease>,
}

/// Answer to a heartbeat: which of the listed runs to stop, and whether to report them.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HeartbeatResponse {
    /// Tasks the runner must stop and report `cancelled`.
    pub cancel: Vec<Uuid>,
    /// Leases that are no longer the runner's (requeued, finished, taken over): stop
    /// them and report nothing.
    pub gone: Vec<Uuid>,
}

/// What a runner needs to execute a task.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LeasedTask {
    /// The task: its start, log chunks and completion go to `/v1/runner/tasks/{id}/...`.
    pub id: Uuid,
    /// This hand-out's fencing token: the run's every start, log chunk and report carries
    /// it, and one under a lease no longer current is refused.
    pub lease_id: LeaseId,
    /// The queue it came from; the agent gives it to the process as `BATON_QUEUE`.
    pub queue: String,
    /// The labels it asked for, all of them among the runner's own.
    pub labels: Vec<String>,
    /// The program and its arguments, run without a shell; exactly one of `command` and
    /// `script` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A script for `sh -c`; exactly one of `command` and `script` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Variables for the process, shown to anyone who reads the task. The agent sets only
    /// these and its own (`BATON_TASK_ID`, `BATON_ATTEMPT`, `BATON_QUEUE`, `HOME`, ...),
    /// never its whole environment.
    pub env: BTreeMap<String, String>,
    /// Secret variables: set in the process, never logged or shown. Only a task handed
    /// out `started` carries them; any other gets them with its start's answer.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, String>,
    /// The submitter's JSON, as given: the agent keeps it out of the process; a runner of
    /// another make may hand it on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// Seconds the run may take from its start: the agent kills it then and reports it
    /// failed, and the server ends it `timed_out` if no report comes within a grace after.
    pub timeout_s: i64,
    /// Which run of the task this is, from 1: for a task still to start, the attempt its
    /// start will record.
    pub attempt: i32,
    /// The submit's W3C trace context: the runner's spans for this task join the task's
    /// trace under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Its start is already recorded (the exchange asked `start_leased`): run it now and
    /// send no start item.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub started: bool,
}

/// `POST /v1/runner/tasks/{id}/start`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartTask {
    /// The lease being acknowledged: a start under a lease no longer current is refused
    /// (409), and the task must not run.
    pub lease_id: LeaseId,
}

/// Answer to a start: the run is recorded, and may begin.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Started {
    /// The task's status as the start left it: `running`, or `cancelling` when a cancel
    /// came first (stop the run and report `cancelled`).
    pub status: TaskStatus,
    /// The attempt this run is, as the server counts it: the agent gives it to the process
    /// as `BATON_ATTEMPT`.
    pub attempt: i32,
    /// The task's secret variables, handed over only now that its start is recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, String>,
}

/// Answer to a log chunk.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LogAck {
    /// The server's log size after this chunk: the offset of the next chunk.
    pub acked: i64,
    /// The task should be stopped (a cancel was requested).
    pub cancel: bool,
}

/// Outcomes a runner may report.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The process exited 0.
    Succeeded,
    /// It exited otherwise, was killed, timed out or could not start: it may retry while
    /// attempts remain.
    Failed,
    /// It was stopped because a cancel was asked for; a cancelled task never retries.
    Cancelled,
}

impl Outcome {
    /// The terminal status the report writes, but for a `failed` run with attempts left,
    /// which is retried (back to `scheduled`) instead.
    pub fn status(self) -> TaskStatus {
        match self {
            Outcome::Succeeded => TaskStatus::Succeeded,
            Outcome::Failed => TaskStatus::Failed,
            Outcome::Cancelled => TaskStatus::Cancelled,
        }
    }
}

/// `POST /v1/runner/tasks/{id}/complete`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteTask {
    /// The lease the run was under: a report under a lease no longer current is refused
    /// (409) and changes nothing.
    pub lease_id: LeaseId,
    /// How the run ended; the task's terminal status follows from it (or a retry, for
    /// `failed`).
    pub outcome: Outcome,
    /// The process's exit status; `None` when it has none (killed by a signal, timed out,
    /// or never spawned). A command that cannot be started reports 127 or 126, as a shell
    /// would.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Why it failed, in words (at most 64 KiB): shown on the task, and read by retry
    /// policies (a timeout is told by it).
    #[serde(default)]
    pub error: Option<String>,
    /// What the run returned, as JSON, shown on the task; at most the nodes' payload limit.
    #[serde(default)]
    pub outputs: Option<Value>,
    /// Bytes of output the runner produced; a stored log shorter than this is marked
    /// incomplete.
    #[serde(default)]
    pub log_size: Option<i64>,
}

impl CompleteTask {
    /// A clean run that said nothing: exit 0, no output, no error, no outputs. What a
    /// stand-in for a process reports (tests, benchmarks, a runner driving only the
    /// protocol); a real run's report carries what the run produced.
    pub fn succeeded(lease_id: LeaseId) -> CompleteTask {
        CompleteTask {
            lease_id,
            outcome: Outcome::Succeeded,
            exit_code: Some(0),
            error: None,
            outputs: None,
            log_size: Some(0),
        }
    }
}

/// Sent by the runner agent on every runner API request: its version, so a server can
/// refuse (426) a runner too old for it with a reason, instead of failing obscurely.
pub const RUNNER_VERSION_HEADER: &str = "x-baton-runner-version";

/// A runner as operators see it.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunnerView {
    /// Names it in `DELETE /v1/runners/{id}` and its pause and resume paths, and in each
    /// task it ran.
    pub id: RunnerId,
    /// As it registered: for operators, not unique.
    pub name: String,
    /// What it offers: it takes a task only when every label of the task is among these.
    pub labels: Vec<String>,
    /// The queues it serves; empty means every queue.
    pub queues: Vec<String>,
    /// How many tasks it runs at once.
    pub capacity: i32,
    /// The agent's version as it registered.
    pub version: String,
    /// A paused runner leases nothing until it is resumed.
    pub paused: bool,
    /// Heard from within the offline threshold.
    pub online: bool,
    /// When a node last heard from it; `None` before its first lease, heartbeat or
    /// exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<DateTime<Utc>>,
    /// Tasks leased to it or running on it now, as Postgres records them (a lease only
    /// Redis holds yet, before its start, is not counted).
    pub running: i64,
    /// When it registered; an agent that registers again (its state directory lost) is
    /// a new runner.
    pub created_at: DateTime<Utc>,
    /// Started on demand by a provisioner, for one task: it leaves when that is done
    /// (docs/dynamic-runners.md).
    #[serde(default)]
    pub ephemeral: bool,
    /// The provisioner that started it, when `ephemeral`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioner: Option<String>,
}

/// `GET /v1/runners`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RunnerList {
    /// Every registered runner not deleted, oldest first.
    pub runners: Vec<RunnerView>,
}
