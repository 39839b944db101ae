//! What re-runs and bulk actions read (issue 13): the re-run a task already has, and the
//! tasks a bulk cancel or retry takes. They only read: each task they find is then
//! cancelled or re-run by the same path as one named by id, so the status machine and the
//! order between Redis and Postgres stay those of the single actions.

use crate::Store;
use crate::error::StoreError;
use crate::tasks::{TaskFilter, TaskRecord};
use baton_core::TaskStatus;
use uuid::Uuid;

/// The idempotency key of `task`'s re-run, as stored (scoped to the owner the re-run
/// keeps): one re-run per task, however many nodes or resent requests make it, found
/// through the unique index on keys.
pub fn rerun_key(task: &TaskRecord) -> String {
    baton_core::idempotency::scoped(&task.created_by, &format!("retry-of:{}", task.id))
}

/// Which tasks a bulk action may take at all, whatever the filter says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    /// Unfinished and not already being cancelled.
    Cancel,
    /// Ended, not re-run yet, and run without secrets (whose values were erased when it
    /// ended: a re-run could not have them).
    Retry,
}

impl BulkAction {
    /// The statuses the action takes when the filter names none.
    pub fn statuses(self) -> &'static [TaskStatus] {
        use TaskStatus::*;
        match self {
            BulkAction::Cancel => &[Waiting, Scheduled, Queued, Leased, Running],
            BulkAction::Retry => &[Failed, TimedOut, Cancelled, Expired, Succeeded],
        }
    }

    /// What else a task must be for the action to take it, as SQL over `t`.
    fn condition(self) -> &'static str {
        match self {
            BulkAction::Cancel => "true",
            BulkAction::Retry => {
                "t.secret_env = '{}'::jsonb
                 AND NOT EXISTS (SELECT 1 FROM tasks r WHERE r.idempotency_key =
                                 t.created_by || ':retry-of:' || t.id::text)"
            }
        }
    }
}

/// The SQL condition of a filter over `t`, binding `$1`..`$7`, and its binds in order. Every
/// field of [`TaskFilter`] is taken apart here, so one added later cannot be silently
/// left out of a bulk action (a bulk cancel that ignored a filter field would cancel too
/// much).
/// `statuses`: those taken when the filter names none; `extra`: a further condition.
fn filter_sql(filter: &TaskFilter, statuses: &[TaskStatus], extra: &str) -> (String, FilterBinds) {
    let TaskFilter {
        status,
        queue,
        created_by,
        before,
        schedule_id,
        limit: _,
        created_after,
        created_before,
    } = filter;
    let statuses: Vec<String> = match status {
        Some(s) => vec![s.as_str().to_string()],
        None => statuses.iter().map(|s| s.as_str().to_string()).collect(),
    };
    let sql = format!(
        "t.status = ANY($1) AND ($2::text IS NULL OR t.queue = $2)
         AND ($3::text IS NULL OR t.created_by = $3) AND ($4::uuid IS NULL OR t.id < $4)
         AND ($5::timestamptz IS NULL OR t.created_at >= $5)
         AND ($6::timestamptz IS NULL OR t.created_at < $6)
         AND ($7::uuid IS NULL OR t.schedule_id = $7) AND {extra}"
    );
    let binds = FilterBinds {
        statuses,
        queue: queue.clone(),
        created_by: created_by.clone(),
        before: *before,
        created_after: *created_after,
        created_before: *created_before,
        schedule_id: *schedule_id,
    };
    (sql, binds)
}

struct FilterBinds {
    statuses: Vec<String>,
    queue: Option<String>,
    created_by: Option<String>,
    before: Option<Uuid>,
    created_after: Option<chrono::DateTime<chrono::Utc>>,
    created_before: Option<chrono::DateTime<chrono::Utc>>,
    schedule_id: Option<Uuid>,
}

macro_rules! bind_filter {
    ($query:expr, $b:expr) => {
        $query
            .bind(&$b.statuses)
            .bind(&$b.queue)
            .bind(&$b.created_by)
            .bind($b.before)
            .bind($b.created_after)
            .bind($b.created_before)
            .bind($b.schedule_id)
    };
}

impl Store {
    /// The re-run `task` already has, if any.
    pub async fn task_rerun(&self, task: &TaskRecord) -> Result<Option<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(
            "SELECT * FROM tasks WHERE idempotency_key = $1 AND retry_of = $2",
        )
        .bind(rerun_key(task))
        .bind(task.id)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// How many tasks `action` would take under `filter` now (its `limit` aside).
    pub async fn tasks_bulk_count(
        &self,
        filter: &TaskFilter,
        action: BulkAction,
    ) -> Result<i64, StoreError> {
        let (condition, binds) = filter_sql(filter, action.statuses(), action.condition());
        let sql = format!("SELECT count(*) FROM tasks t WHERE {condition}");
        let query = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql));
        Ok(bind_filter!(query, binds).fetch_one(&self.pool).await?)
    }

    /// Tasks `action` takes under `filter`, oldest first, at most `filter.limit` of them:
    /// the same ones a dry run lists, and the next call (with these acted on) goes on
    /// where this one stopped.
    pub async fn tasks_bulk(
        &self,
        filter: &TaskFilter,
        action: BulkAction,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let (condition, binds) = filter_sql(filter, action.statuses(), action.condition());
        let sql = format!("SELECT * FROM tasks t WHERE {condition} ORDER BY t.id LIMIT $8");
        let query = sqlx::query_as::<_, TaskRecord>(sqlx::AssertSqlSafe(sql));
        Ok(bind_filter!(query, binds)
            .bind(filter.limit)
            .fetch_all(&self.pool)
            .await?)
    }

    /// How many tasks `filter` matches that a bulk retry leaves alone because they ran
    /// with secrets: said in its answer, so none is skipped silently.
    pub async fn tasks_bulk_with_secrets(&self, filter: &TaskFilter) -> Result<i64, StoreError> {
        let (condition, binds) = filter_sql(
            filter,
            BulkAction::Retry.statuses(),
            "t.secret_env <> '{}'::jsonb",
        );
        let sql = format!("SELECT count(*) FROM tasks t WHERE {condition}");
        let query = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql));
        Ok(bind_filter!(query, binds).fetch_one(&self.pool).await?)
    }
}
