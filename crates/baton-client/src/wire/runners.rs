//! The runner agent's side of the API: registration, leases, heartbeats, a task's start,
//! log and completion; and runners as operators see them.

use super::schemas::{LabelName, QueueName};
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
    pub registration_token: String,
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub name: String,
    #[serde(default)]
    #[schema(max_items = 32, value_type = Vec<LabelName>)]
    pub labels: Vec<String>,
    /// Queues this runner serves; empty means every queue.
    #[serde(default)]
    #[schema(value_type = Vec<QueueName>)]
    pub queues: Vec<String>,
    #[serde(default = "default_capacity")]
    #[schema(minimum = 1, maximum = 1024)]
    pub capacity: i32,
    #[serde(default)]
    #[schema(max_length = 64, pattern = r"^[^\u0000]*$")]
    pub version: String,
}

fn default_capacity() -> i32 {
    1
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RunnerRegistered {
    pub runner_id: Uuid,
    /// Shown once; the server keeps only its hash.
    pub token: String,
}

/// A task the runner currently runs, as it reports it.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RunningLease {
    pub task_id: Uuid,
    pub lease_id: Uuid,
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
    #[serde(default)]
    pub running: Vec<RunningLease>,
    /// The runner takes a task's `secret_env` with its start's answer, so a task leased
    /// unstarted comes without it. Left out (agents of earlier releases), secrets come
    /// with the lease, as they used to.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secrets_at_start: bool,
}

#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
pub struct LeaseResponse {
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
    #[serde(default)]
    pub running: Vec<RunningLease>,
}

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
    pub id: Uuid,
    pub lease_id: Uuid,
    pub queue: String,
    pub labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    pub env: BTreeMap<String, String>,
    /// Secret variables: set in the process, never logged or shown. Only a task handed
    /// out `started` carries them; any other gets them with its start's answer.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    pub timeout_s: i64,
    pub attempt: i32,
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
    pub lease_id: Uuid,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct Started {
    pub status: TaskStatus,
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
    Succeeded,
    Failed,
    Cancelled,
}

impl Outcome {
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
    pub lease_id: Uuid,
    pub outcome: Outcome,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub outputs: Option<Value>,
    /// Bytes of output the runner produced; a stored log shorter than this is marked
    /// incomplete.
    #[serde(default)]
    pub log_size: Option<i64>,
}

/// Sent by the runner agent on every runner API request: its version, so a server can
/// refuse (426) a runner too old for it with a reason, instead of failing obscurely.
pub const RUNNER_VERSION_HEADER: &str = "x-baton-runner-version";

/// A runner as operators see it.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunnerView {
    pub id: Uuid,
    pub name: String,
    pub labels: Vec<String>,
    pub queues: Vec<String>,
    pub capacity: i32,
    pub version: String,
    pub paused: bool,
    /// Heard from within the offline threshold.
    pub online: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<DateTime<Utc>>,
    /// Tasks leased to it or running on it now.
    pub running: i64,
    pub created_at: DateTime<Utc>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RunnerList {
    pub runners: Vec<RunnerView>,
}
