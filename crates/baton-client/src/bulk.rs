//! Bulk actions on tasks (issue 13): `POST /v1/tasks/cancel` and `POST /v1/tasks/retry`
//! take the tasks a filter selects, a bounded number per call, each by the path of the
//! single action; a dry run answers with what would be taken and changes nothing.

use crate::wire::ErrorDetail;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Which tasks, how many at most, and whether only to look. At least one of the filter
/// fields is required: a bulk action over every task is spelled out (`created_before`
/// now, say), never the default.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// Only tasks of this queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    pub queue: Option<String>,
    /// One status; without it, every status the action applies to (cancel: `scheduled`,
    /// `queued`, `leased`, `running`; retry: the terminal ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<TaskStatus>)]
    pub status: Option<String>,
    /// Created at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_after: Option<DateTime<Utc>>,
    /// Created before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before: Option<DateTime<Utc>>,
    /// Made by this schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<Uuid>,
    /// At most this many tasks this call (default 100); call again while `more`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Only say what would be taken; change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// What a bulk action took.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BulkAnswer {
    /// Whether this was a dry run: then `tasks` is what the action would take, and nothing
    /// changed.
    pub dry_run: bool,
    /// Tasks the action would take under the filter, `limit` aside, counted before it
    /// acted.
    pub matched: i64,
    /// The tasks this call took (in a dry run: would take), oldest first, at most
    /// `limit`.
    pub tasks: Vec<BulkItem>,
    /// How many of `tasks` it acted on (none in a dry run).
    pub acted: i64,
    /// More tasks match than this call took: call again (a task refused stays matched).
    pub more: bool,
    /// Retry only: tasks the filter matches that are left alone because they ran with
    /// `secret_env`, whose values were erased when they ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_secrets: Option<i64>,
}

/// One task a bulk action took.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BulkItem {
    /// The task taken.
    pub id: Uuid,
    /// Its status after the action (in a dry run: now).
    pub status: TaskStatus,
    /// Retry: its re-run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_by: Option<Uuid>,
    /// Why it was not acted on (something else changed it first, or the token may not),
    /// as the single action would have answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}
