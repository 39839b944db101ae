//! JSON shapes of the v1 API (design.md §6).

use baton_core::TaskStatus;
pub use baton_core::retry_policy::RetryPolicy;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use uuid::Uuid;

/// `POST /v1/tasks`. Unknown fields are refused, so a misspelt option is an error rather
/// than silently ignored.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubmitTask {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 32, value_type = Vec<LabelName>)]
    pub labels: Vec<String>,
    /// The program and its arguments, run without a shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Argv>)]
    pub command: Option<Vec<String>>,
    /// A script run with `sh -c`. Exactly one of `command` and `script`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub script: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = EnvMap)]
    pub env: BTreeMap<String, String>,
    /// Environment the task's process gets but no read of the task ever shows (only the
    /// names are listed); for credentials.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = EnvMap)]
    pub secret_env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(default)]
    #[schema(minimum = -1000, maximum = 1000)]
    pub priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 604800)]
    pub timeout_s: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 2592000)]
    pub queue_timeout_s: Option<i64>,
    /// Runs in all, retries included (default 1: no retry). `failed`, `timed_out` and a
    /// lost runner retry with backoff while attempts remain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 100)]
    pub max_attempts: Option<i32>,
    /// Delayed start: the task waits as `scheduled` until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f]+$"
    )]
    pub idempotency_key: Option<String>,
    /// Completion webhook: POSTed the task's final state once it is terminal, at least
    /// once, with an `Idempotency-Key` header and a Standard Webhooks signature. Internal
    /// addresses (loopback, private, link-local, ...) are refused unless the nodes allow
    /// them; a password in it is shown as `***`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 2048, pattern = r"^https?://[^\u0000-\u0020]+$")]
    pub notify_url: Option<String>,
    /// Which failed runs retry (`max_attempts` permitting) and how long each waits:
    /// fields left out take the node's defaults. Without it: every failure, the node's
    /// backoff.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "object_only"
    )]
    pub retry: Option<RetryPolicy>,
    /// Concurrency group: at most `concurrency_limit` tasks of this key hold a lease at
    /// once across the cluster; the rest wait queued in order (docs/flow-control.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f]+$"
    )]
    pub concurrency_key: Option<String>,
    /// The group's limit; default 1 when a key is given. Needs `concurrency_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000)]
    pub concurrency_limit: Option<i64>,
}

/// An optional object field, taken as a JSON object only: serde would also build a struct
/// from an array of its fields in order (`[5, 2]` as a policy), which the API's document
/// does not allow and nobody means.
fn object_only<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::{Error, Unexpected};
    match Option::<Value>::deserialize(deserializer)? {
        None => Ok(None),
        Some(object @ Value::Object(_)) => {
            T::deserialize(object).map(Some).map_err(D::Error::custom)
        }
        Some(Value::Array(_)) => Err(D::Error::invalid_type(Unexpected::Seq, &"a JSON object")),
        Some(_) => Err(D::Error::invalid_type(
            Unexpected::Other("a JSON scalar"),
            &"a JSON object",
        )),
    }
}

/// `POST /v1/tasks/batch`: all or nothing.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitBatch {
    /// One to 1000 tasks. The upper bound is a size limit, not a schema rule:
    /// more than 1000 is answered 413 like any other oversized request.
    #[schema(min_items = 1)]
    pub tasks: Vec<SubmitTask>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct TaskList {
    pub tasks: Vec<Task>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A task as users see it.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Task {
    pub id: Uuid,
    pub queue: String,
    pub labels: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    pub env: BTreeMap<String, String>,
    /// The names of its secret variables; never their values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    pub priority: i32,
    pub timeout_s: i64,
    pub queue_timeout_s: i64,
    pub max_attempts: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_url: Option<String>,
    pub status: TaskStatus,
    pub attempt: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leased_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Value>,
    pub log_size: i64,
    pub log_truncated: bool,
    pub log_incomplete: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_limit: Option<i32>,
    /// How its completion webhook fared, once there is one to deliver (the task ended
    /// with a `notify_url`). Shown by `GET /v1/tasks/{id}` only; lists leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_state: Option<NotifyState>,
    /// The schedule that made it, and the tick it was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_for: Option<DateTime<Utc>>,
    /// Re-runs and retry policies (issue 13). Its retry policy as it applies (resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// The task this one re-runs (`POST /v1/tasks/{id}/retry`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<Uuid>,
    /// This task's re-run, once it has one. Shown by `GET /v1/tasks/{id}` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_by: Option<Uuid>,
    /// The node holding its claim — the one that reconciles it — while a runner holds
    /// it. Shown by `GET /v1/tasks/{id}` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

/// A task's completion webhook: where its delivery stands.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NotifyState {
    pub state: NotifyDelivery,
    /// Attempts so far (one being made counts).
    pub attempts: i32,
    /// Why the last attempt failed (an address the node refuses to reach, the receiver's
    /// status, a timeout), and, once given up, what ran out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// `pending`: still being tried; `delivered`: a receiver answered 2xx; `failed`: given
/// up after `webhook_max_attempts` attempts or `webhook_max_age_s`.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NotifyDelivery {
    Pending,
    Delivered,
    Failed,
}

/// `GET /v1/webhooks/secret`: the key completion webhooks are signed with.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct WebhookSecret {
    /// `whsec_` and the base64 of the key, as Standard Webhooks libraries take it.
    pub secret: String,
}

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

/// `GET /v1/nodes`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct NodeList {
    pub nodes: Vec<NodeView>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeView {
    pub id: String,
    pub addr: String,
    pub started_at: DateTime<Utc>,
    /// Dispatched tasks this node owns (reconciles).
    pub claims: u64,
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

/// The body of every error answer (design.md invariant 7).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    /// For a refused log chunk (416): the size the server holds, where to resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    /// For a state conflict (409): the task's current status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    /// For a runner request refused over an outage (503): true when the node still
    /// recorded the request as the runner's proof of life where every node reads it. Only
    /// then may the runner count the answer as contact; a node that lost Redis cannot
    /// vouch for the runner to the node that will adopt its claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_recorded: Option<bool>,
}

impl ErrorDetail {
    /// Whether this is an error of that code.
    pub fn is(&self, code: crate::ErrorCode) -> bool {
        self.code == code.as_str()
    }
}

/// Sent by the runner agent on every runner API request: its version, so a server can
/// refuse (426) a runner too old for it with a reason, instead of failing obscurely.
pub const RUNNER_VERSION_HEADER: &str = "x-baton-runner-version";

/// Headers on `GET /v1/tasks/{id}/logs` answers.
pub mod log_headers {
    /// Offset of the first byte after this answer: the `offset` to ask for next.
    pub const NEXT_OFFSET: &str = "x-baton-next-offset";
    /// The task's status when the bytes were read; once terminal, no more bytes come.
    pub const TASK_STATUS: &str = "x-baton-task-status";
    /// The attempt whose output this is (each attempt has its own log).
    pub const ATTEMPT: &str = "x-baton-attempt";
}

/// What an API token may do. `admin` is everything; `submit` submits tasks and reads and
/// cancels the tasks it submitted; `read` reads everything and changes nothing.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Admin,
    Submit,
    Read,
}

/// `GET /v1/me`: the calling API token and what it may do, so a client (the console)
/// offers only what would be allowed.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Caller {
    /// `bootstrap` for the token given to the nodes; a created token's id otherwise.
    pub token_id: String,
    pub scopes: Vec<Scope>,
    /// The only queues it may submit to; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// The only labels its tasks may carry; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// `POST /v1/tokens`.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^\s\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    )]
    pub name: String,
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
    /// Seconds until it stops working (default: never; at most ten years).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub expires_in_s: Option<i64>,
    /// The only queues it may submit to (default: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// The only labels its tasks may carry, each one of these (default: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// An API token as listed: never the secret.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenView {
    pub id: Uuid,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub created_at: DateTime<Utc>,
    /// When it stops working; `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
    /// The only queues it may submit to; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    /// The only labels its tasks may carry; `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
}

/// A new API token: the secret is shown this once, and only its hash is kept.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct TokenCreated {
    #[serde(flatten)]
    pub view: TokenView,
    pub token: String,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct TokenList {
    pub tokens: Vec<TokenView>,
}

/// `POST /v1/registration-tokens`. Left out, a token lets one runner register within a
/// day, with any labels and queues.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRegistrationToken {
    /// What it is for, shown in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Seconds until it expires (default: 86,400, a day; at most ten years).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub expires_in_s: Option<i64>,
    /// How many runners may register with it (default: 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub uses: Option<i32>,
    /// The labels a runner registering with it may claim, each one of these (default:
    /// any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// The queues a runner registering with it may serve: it must name some, each one of
    /// these (default: any, every queue included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
}

/// A registration token as operators see it, never its secret.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RegistrationTokenView {
    pub id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `None`: never expires (tokens of earlier releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// `None`: any number (tokens of earlier releases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses_left: Option<i32>,
    /// `None`: any labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    /// `None`: any queues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A new registration token: the secret is shown this once, and only its hash is kept.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RegistrationTokenCreated {
    #[serde(flatten)]
    pub view: RegistrationTokenView,
    pub token: String,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct RegistrationTokenList {
    pub registration_tokens: Vec<RegistrationTokenView>,
}

/// `PUT /v1/queues/{name}/defaults`: what a task submitted to the queue takes for each
/// field it leaves out (docs/flow-control.md, "Queue defaults"). The body replaces the
/// queue's defaults whole; `{}` clears them.
#[derive(utoipa::ToSchema, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueDefaults {
    /// A retry policy whose fields fill those a task's own `retry` leaves out (its exit
    /// code lists go together: a task naming either list keeps its own).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "object_only"
    )]
    pub retry: Option<RetryPolicy>,
    /// Runs in all for a task that gives no `max_attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 100)]
    pub max_attempts: Option<i32>,
    /// The concurrency group of a task that names none; with only a limit, the group is
    /// the queue's own, `queue:<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 128,
        pattern = r"^[^\u0000-\u001f\u007f]+$"
    )]
    pub concurrency_key: Option<String>,
    /// That group's limit (default 1 with a key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 10000)]
    pub concurrency_limit: Option<i64>,
}

impl QueueDefaults {
    pub fn is_empty(&self) -> bool {
        *self == QueueDefaults::default()
    }
}

/// A queue as operators see it (`GET /v1/queues`, docs/flow-control.md).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueView {
    pub name: String,
    /// A paused queue hands out nothing, takes submits, and its tasks do not expire.
    pub paused: bool,
    /// Tasks waiting in it (`queued`; a lease not yet started counts here).
    pub depth: i64,
    /// Tasks leased, running or cancelling.
    pub running: i64,
    /// When its oldest waiting task was queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_waiting: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<DateTime<Utc>>,
    /// The last resume: waiting tasks expire no sooner than `queue_timeout_s` after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<DateTime<Utc>>,
    /// What tasks submitted to it take for the fields they leave out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<QueueDefaults>,
}

#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct QueueList {
    pub queues: Vec<QueueView>,
}

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

/// A string matching a pattern, for the OpenAPI document only: what the server checks
/// of labels and queue names, so generated clients and fuzzers know it too.
fn pattern_schema(pattern: &str) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .into()
}

/// A task's argv: at least one element, the first naming a program.
pub struct Argv;

impl utoipa::PartialSchema for Argv {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
        let string = || ObjectBuilder::new().schema_type(Type::String);
        ArrayBuilder::new()
            .items(string())
            .prefix_items([string().min_length(Some(1))])
            .min_items(Some(1))
            .into()
    }
}

impl utoipa::ToSchema for Argv {}

/// Environment variables: POSIX-portable names, string values.
pub struct EnvMap;

impl utoipa::PartialSchema for EnvMap {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property_names(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")),
            ))
            .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
            .max_properties(Some(128))
            .into()
    }
}

impl utoipa::ToSchema for EnvMap {}

/// A runner label: 1-64 characters of `[a-zA-Z0-9._:=/-]`.
pub struct LabelName;

impl utoipa::PartialSchema for LabelName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        pattern_schema(r"^[a-zA-Z0-9][a-zA-Z0-9._:=/-]{0,63}$")
    }
}

impl utoipa::ToSchema for LabelName {}

/// A queue name: `[a-z0-9][a-z0-9._-]{0,63}`.
pub struct QueueName;

impl utoipa::PartialSchema for QueueName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        pattern_schema(r"^[a-z0-9][a-z0-9._-]{0,63}$")
    }
}

impl utoipa::ToSchema for QueueName {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_an_object_never_an_array_of_its_fields() {
        let task = |retry: Value| {
            serde_json::from_value::<SubmitTask>(serde_json::json!({ "retry": retry }))
        };
        assert!(task(serde_json::json!([null, null])).is_err());
        assert!(task(serde_json::json!([5.0, 2.0])).is_err());
        assert!(task(serde_json::json!("x")).is_err());
        assert!(
            task(serde_json::json!({"bogus": 1})).is_err(),
            "unknown fields still refused"
        );
        let given = task(serde_json::json!({"backoff_base_s": 5.0})).unwrap();
        assert_eq!(given.retry.unwrap().backoff_base_s, Some(5.0));
        assert_eq!(task(Value::Null).unwrap().retry, None);
        let defaults = serde_json::json!({ "retry": [null] });
        assert!(serde_json::from_value::<QueueDefaults>(defaults).is_err());
    }
}
