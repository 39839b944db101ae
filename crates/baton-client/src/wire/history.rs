//! What a task's page reads beside the task: its runs, one by one, and how many tasks a
//! listing's filters match.

use baton_core::{LeaseId, RunnerId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One run of a task, ended or running.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskAttempt {
    /// 1 for the first run.
    pub attempt: i32,
    /// The runner it ran on.
    pub runner_id: Option<RunnerId>,
    /// That runner's name, while the runner is known.
    pub runner_name: Option<String>,
    /// The lease it ran under.
    pub lease_id: Option<LeaseId>,
    /// When it was leased.
    pub leased_at: Option<DateTime<Utc>>,
    /// When its runner started it.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended; absent while it runs.
    pub ended_at: Option<DateTime<Utc>>,
    /// From start to end, in milliseconds; absent while it runs.
    pub duration_ms: Option<i64>,
    /// How it ended — `succeeded`, `failed`, `timed_out`, `cancelled` — or absent while
    /// it runs.
    pub ended_as: Option<String>,
    /// Whether a retry followed it (another attempt was queued after it ended).
    pub retried: bool,
    /// The exit code its runner reported.
    pub exit_code: Option<i32>,
    /// Why it ended, when it did not succeed.
    pub error: Option<String>,
}

/// `GET /v1/tasks/{id}/attempts`: every run of the task, first to last.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskAttempts {
    /// The task's whole id.
    pub task_id: uuid::Uuid,
    /// Its runs, the one running (if any) last.
    pub attempts: Vec<TaskAttempt>,
}

/// `GET /v1/tasks/count`: how many tasks a listing's filters match, counted up to a cap.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskCount {
    /// The tasks matched, at most the cap.
    pub count: i64,
    /// True when `count` is the cap: there are at least that many.
    pub capped: bool,
}
