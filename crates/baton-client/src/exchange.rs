//! The batched runner exchange, `POST /v1/runner/exchange`: in one round trip a runner
//! acknowledges the leases it is starting, reports the runs that ended (with the tail of
//! their output when it is small), sends its heartbeat when one is due, and asks for
//! more work. Each item is answered on its own — one stale item never fails the others —
//! and the whole exchange is replayable: resent with the same `request_id` (and
//! `retry: true`) to any node, it is answered as the first one was.

use crate::wire::{CompleteTask, LeasedTask, Outcome, RunningLease};
use base64::Engine;
use baton_core::LeaseId;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use uuid::Uuid;

/// One round trip of the runner exchange: what the runner has to report, its heartbeat when
/// due, and how much more work it can take.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Exchange {
    /// Identifies this exchange across resends.
    pub request_id: Uuid,
    /// A resend of an exchange that got no answer: the tasks its first attempt leased
    /// are handed back instead of new ones. (Starts and completions are idempotent by
    /// themselves.)
    #[serde(default)]
    pub retry: bool,
    /// Random per agent start: a new one proves the runner restarted.
    pub boot_id: Uuid,
    /// Leases the runner acknowledges: it may run each task once its start is `done`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub starts: Vec<StartItem>,
    /// Runs that ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub completions: Vec<CompletionItem>,
    /// Every lease the runner holds: a heartbeat, answered with `cancel` and `gone`.
    /// Sent once per heartbeat period, not with every exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<Vec<RunningLease>>,
    /// With `running`: the `answered_at` of the newest answer the runner had when it made
    /// that list, the server's own clock. A run the list leaves out counts as forgotten
    /// only if it started well before this: a list that spent long on its way (resent,
    /// held up by a slow link) says nothing of runs it could not know yet. Without it the
    /// list is taken to be as of its arrival.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_as_of: Option<DateTime<Utc>>,
    /// How many more tasks the runner can take (0: none).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 64)]
    pub max: u32,
    /// With no items and nothing to hand out, how long to park waiting for work (an
    /// exchange that carries items is answered without parking).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 50)]
    pub wait_s: u32,
    /// Start what this exchange leases: each task comes back with its start recorded
    /// under its lease (`started`), to run at once, with no start item to send. Without
    /// it, a leased task waits for its start item.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub start_leased: bool,
    /// The runner takes a task's `secret_env` with its start's answer (as
    /// [`crate::LeaseRequest::secrets_at_start`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secrets_at_start: bool,
}

/// A lease the runner acknowledges: the task's start, recorded under that lease before the
/// task may run.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StartItem {
    /// The task whose lease is acknowledged.
    pub task_id: Uuid,
    /// The lease it came with: a start under a lease no longer current is answered `stale`,
    /// and the task must not run.
    pub lease_id: LeaseId,
    /// The W3C trace context of the runner's span for this item: the node's span for it
    /// joins the task's trace there (one request carries many tasks' items).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A run that ended: the report of `POST /v1/runner/tasks/{id}/complete`
/// ([`crate::CompleteTask`]) with its task, the tail of its output and its trace context.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CompletionItem {
    /// The task whose run ended.
    pub task_id: Uuid,
    /// The lease the run was under: a report under a lease no longer current is answered
    /// `stale` and changes nothing.
    pub lease_id: LeaseId,
    /// How the run ended, as [`crate::CompleteTask::outcome`].
    pub outcome: Outcome,
    /// The process's exit status, as [`crate::CompleteTask::exit_code`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it failed, as [`crate::CompleteTask::error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the run returned, as [`crate::CompleteTask::outputs`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<Value>,
    /// Bytes of output the run produced; a stored log shorter than this is marked
    /// incomplete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_size: Option<i64>,
    /// The output not yet shipped, when it is small: stored with the completion, so a
    /// short task costs no log request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<LogTail>,
    /// As for a start: the trace context of the runner's span for this report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl CompletionItem {
    /// [`CompleteTask::succeeded`] as an exchange item for `task_id`: with no output there
    /// is no log tail, and a stand-in has no span to carry.
    pub fn succeeded(task_id: Uuid, lease_id: LeaseId) -> CompletionItem {
        let report = CompleteTask::succeeded(lease_id);
        CompletionItem {
            task_id,
            lease_id: report.lease_id,
            outcome: report.outcome,
            exit_code: report.exit_code,
            error: report.error,
            outputs: report.outputs,
            log_size: report.log_size,
            log_tail: None,
            traceparent: None,
        }
    }
}

/// Output bytes from `offset`, base64-encoded (output need not be UTF-8).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LogTail {
    /// Where `data` starts in the attempt's output: bytes the server already holds are not
    /// stored twice.
    #[schema(minimum = 0)]
    pub offset: i64,
    /// Standard base64, with padding.
    pub data: String,
    /// When its bytes came and on which stream, as a log chunk's `x-baton-log-marks`
    /// header spells them (`offset@milliseconds:o|e`, space-separated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marks: Option<String>,
}

impl LogTail {
    /// `bytes`, which start at `offset` in the attempt's output, encoded for the wire.
    pub fn new(offset: i64, bytes: &[u8]) -> LogTail {
        LogTail {
            offset,
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            marks: None,
        }
    }

    /// The bytes, or `None` when `data` is not base64.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.data)
            .ok()
    }
}

/// Answer to an exchange: one answer per item, in order, then new work and what the
/// heartbeat asks the runner to stop.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExchangeAnswer {
    /// One answer per start, in order.
    #[serde(default)]
    pub starts: Vec<ItemAnswer>,
    /// One answer per completion, in order.
    #[serde(default)]
    pub completions: Vec<ItemAnswer>,
    /// New tasks (at most `max`), each to be started before it runs.
    #[serde(default)]
    pub tasks: Vec<LeasedTask>,
    /// Of the heartbeat's leases: tasks to stop and report `cancelled`.
    #[serde(default)]
    pub cancel: Vec<Uuid>,
    /// Of the heartbeat's leases: those no longer the runner's, to stop unreported.
    #[serde(default)]
    pub gone: Vec<Uuid>,
    /// The server's clock as it answered, for the next heartbeat's `running_as_of`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<DateTime<Utc>>,
    /// Whether this node recorded the exchange as the runner's proof of life where every
    /// node reads it. A node cut off from Redis answers what it can from Postgres but
    /// cannot vouch for the runner to the node that adopts its claims; the runner counts
    /// only a vouching answer as contact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_recorded: Option<bool>,
    /// With `tasks`: how many milliseconds after the request arrived the look that leased
    /// them began (a parked request waits for work first). A task that arrives started
    /// was started no earlier than the request's send plus this, which is where the
    /// runner counts its timeout from: never later than the server's clock began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leased_after_ms: Option<u64>,
}

/// How one start or completion went: each item is answered on its own, so one stale item
/// never fails the others.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ItemAnswer {
    /// The item's task (answers also come in the items' order).
    pub task_id: Uuid,
    /// Whether it was recorded, or what the runner does instead.
    pub result: ItemResult,
    /// The task's status after the item (when `done` or `stale`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    /// For a start that is `done`: the attempt this run is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
    /// For an item not `done`: why, in words for logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For a start that is `done`: the task's secret variables, handed over only now
    /// that its start is recorded (a lease that is never started never carries them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, String>,
}

/// How one item went.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ItemResult {
    /// Recorded (committed) — or it already was, by an earlier attempt of it.
    Done,
    /// The lease is no longer current: stop the task, report nothing more.
    Stale,
    /// No such task of this runner's: stop it, report nothing more.
    Gone,
    /// The server could not record it now (its stores are unavailable): send it again.
    Retry,
}

impl ItemResult {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemResult::Done => "done",
            ItemResult::Stale => "stale",
            ItemResult::Gone => "gone",
            ItemResult::Retry => "retry",
        }
    }
}
