//! Queues as operators see them, and the defaults a queue gives the tasks submitted to it.

use super::tasks::object_only;
use baton_core::retry_policy::RetryPolicy;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

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
    /// Whether it fills in nothing: empty defaults are stored as none, so `{}` clears a
    /// queue's defaults.
    pub fn is_empty(&self) -> bool {
        *self == QueueDefaults::default()
    }
}

/// A queue as operators see it (`GET /v1/queues`, docs/flow-control.md).
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueView {
    /// The queue's name, as tasks name it (`default` when a submit gives none).
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
    /// When it was last paused; kept after a resume, so it says when the last pause began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<DateTime<Utc>>,
    /// The last resume: waiting tasks expire no sooner than `queue_timeout_s` after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<DateTime<Utc>>,
    /// What tasks submitted to it take for the fields they leave out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<QueueDefaults>,
}

/// `GET /v1/queues`.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize)]
pub struct QueueList {
    /// Every queue with settings, tasks queued, leased or running, or tasks submitted or
    /// ended in the last hour, by name; a queue with none of those is not listed.
    pub queues: Vec<QueueView>,
}
