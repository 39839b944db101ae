//! Tasks as users submit and read them, and where a task's completion webhook stands.

use super::schemas::{Argv, EnvMap, LabelName};
use baton_core::RunnerId;
use baton_core::TaskStatus;
use baton_core::retry_policy::RetryPolicy;
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
    /// The queue it waits in (default `default`); a runner serving named queues takes only
    /// theirs. The queue's [`crate::QueueDefaults`] fill in the fields they name that the
    /// task leaves out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub queue: Option<String>,
    /// What its runner must offer: only a runner carrying every one of these takes it.
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
    /// Variables the process gets, shown to anyone who reads the task: credentials go in
    /// `secret_env`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = EnvMap)]
    pub env: BTreeMap<String, String>,
    /// Environment the task's process gets but no read of the task ever shows (only the
    /// names are listed); for credentials.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = EnvMap)]
    pub secret_env: BTreeMap<String, String>,
    /// Any JSON, kept with the task and handed to its runner with the lease; at most the
    /// nodes' `max_payload_bytes` (256 KiB by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// Higher is handed out first (default 0; at most the token's `max_priority`); within
    /// a priority, the owners (tokens) with work waiting in a queue take turns, each one's
    /// longest queued first.
    #[serde(default)]
    #[schema(minimum = -1000, maximum = 1000)]
    pub priority: i32,
    /// Seconds a run may take from its start (default the nodes' `default_timeout_s`, an
    /// hour): then its runner kills it, and a run not reported by then and a grace is ended
    /// `timed_out`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 604800)]
    pub timeout_s: Option<i64>,
    /// Seconds it may wait queued before it ends `expired` (default the nodes'
    /// `default_queue_timeout_s`, a day); a paused queue's tasks do not expire.
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
    /// Makes a submit safe to repeat: a second one with the same key by the same token
    /// creates nothing and answers 200 with the first task, for as long as that task
    /// exists.
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
    /// Tasks it waits for (at most 100, each one the submitter may read): it is accepted
    /// `waiting` and released to its queue once they have ended as `when` asks, or ends
    /// `skipped` when they cannot (docs/pipelines.md). Not with `run_at`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 100)]
    pub depends_on: Vec<Uuid>,
    /// On which ends of what it needs (`depends_on`, or a pipeline job's `needs`) it is
    /// released: `on_success` (the default), `on_failure`, `always`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<baton_core::pipeline::ReleaseRule>,
}

/// An optional object field, taken as a JSON object only: serde would also build a struct
/// from an array of its fields in order (`[5, 2]` as a policy), which the API's document
/// does not allow and nobody means.
pub(super) fn object_only<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
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

/// A page of `GET /v1/tasks`, or the tasks a batch submit made.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct TaskList {
    /// The tasks of this page, newest first (for a batch submit: the tasks made, in the
    /// order given).
    pub tasks: Vec<Task>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A task as users see it.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Task {
    /// A UUIDv7, so ids sort by submit time: the listing's order and cursor rely on it.
    pub id: Uuid,
    /// The queue it was submitted to (`default` when the submit named none).
    pub queue: String,
    /// What its runner must offer: only a runner carrying every one of these takes it.
    pub labels: Vec<String>,
    /// The program and its arguments, run without a shell; exactly one of `command` and
    /// `script` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A script run with `sh -c`; exactly one of `command` and `script` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Its plain variables, shown to every reader (secret ones are listed by name only, in
    /// `secret_env_keys`).
    pub env: BTreeMap<String, String>,
    /// The names of its secret variables; never their values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env_keys: Vec<String>,
    /// The JSON it was submitted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// Higher is handed out first; within a priority, owners with work waiting take turns.
    pub priority: i32,
    /// Seconds a run may take from its start, as resolved at submit (the nodes' default
    /// when none was given).
    pub timeout_s: i64,
    /// Seconds it may wait queued, counted from `queued_at`, before it ends `expired`; not
    /// while its queue is paused.
    pub queue_timeout_s: i64,
    /// Runs in all, retries included, as resolved at submit (its own, its queue's default,
    /// or 1).
    pub max_attempts: i32,
    /// The delayed start it was submitted with (or its schedule's jitter gave it): it waits
    /// as `scheduled` until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at: Option<DateTime<Utc>>,
    /// The key it was submitted with, as its submitter gave it; keys are kept per token, so
    /// another token's equal key is another task's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Where its completion webhook goes, a password in it shown as `***`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_url: Option<String>,
    /// Where it stands in the status machine (docs/status-machine.md); a lease not yet
    /// started shows as `leased`.
    pub status: TaskStatus,
    /// The run going or last run, from 1; 0 before its first start.
    pub attempt: i32,
    /// The runner that holds or last held it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_id: Option<RunnerId>,
    /// When it was submitted, on the cluster's clock (its id, a UUIDv7, holds about the
    /// same moment, on the submitting node's own clock).
    pub created_at: DateTime<Utc>,
    /// When its stored record last changed (a status move, a report).
    pub updated_at: DateTime<Utc>,
    /// When it last entered its queue: its place in line and its queue timeout count from
    /// here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<DateTime<Utc>>,
    /// When its current or last lease was handed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leased_at: Option<DateTime<Utc>>,
    /// When its current or last run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached its terminal status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The last run's exit status, as its runner reported it; `None` when it had none
    /// (killed, timed out, never spawned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why the last run failed, as its runner said, or why the server ended it (timed out,
    /// runner lost, expired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the last run returned, as its runner reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Value>,
    /// Bytes of output received for the current attempt: where the next chunk starts.
    pub log_size: i64,
    /// Output came past the nodes' log cap (`max_log_bytes`, 16 MiB by default) and was
    /// dropped: the stored log is its first part.
    pub log_truncated: bool,
    /// Its runner reported more output than arrived: some of the log is missing.
    pub log_incomplete: bool,
    /// The submit's W3C trace context: every span of this task's life, on any node or
    /// runner, joins that trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Its concurrency group, its own or its queue's default (docs/flow-control.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// How many tasks of its group may hold a lease at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_limit: Option<i32>,
    /// The pipeline it is a job of (docs/pipelines.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_id: Option<Uuid>,
    /// Its job's name in that pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// For a task that waits for others: on which of their ends it is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<baton_core::pipeline::ReleaseRule>,
    /// How its completion webhook fared, once there is one to deliver (the task ended
    /// with a `notify_url`). Shown by `GET /v1/tasks/{id}` only; lists leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_state: Option<NotifyState>,
    /// The schedule that made it, and the tick it was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<Uuid>,
    /// The tick of `schedule_id` it was made for; it may start later, by the schedule's
    /// jitter.
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
    /// True in lists (and a schedule's runs): what may be large is cut to what a row
    /// shows — `command` to its first 16 words and each word, like `script`, to its first
    /// 256 characters, `error` to 1,024; `env`, `payload` and `outputs` left out. `GET /v1/tasks/{id}` shows
    /// the task whole.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub summary: bool,
}

/// A task's completion webhook: where its delivery stands.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NotifyState {
    /// Whether it is still being tried, was delivered, or was given up.
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
    /// Not delivered yet: still being tried, with backoff between attempts.
    Pending,
    /// A receiver answered 2xx: nothing more is sent.
    Delivered,
    /// Given up: the attempts or the age allowed ran out (`last_error` says which).
    Failed,
}

/// `GET /v1/webhooks/secret`: the key completion webhooks are signed with.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct WebhookSecret {
    /// `whsec_` and the base64 of the key, as Standard Webhooks libraries take it.
    pub secret: String,
}
