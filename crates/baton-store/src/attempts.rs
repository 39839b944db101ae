//! A task's history: each run a retry followed, as the `task_attempt_retried` trigger
//! kept it (migrations/20261207000002_task_attempts.sql) — the last run is the task's own
//! row — and a task found by its short id.

use crate::Store;
use crate::error::StoreError;
use baton_core::{LeaseId, RunnerId};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// One run of a task that a retry followed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AttemptRecord {
    /// 1 for the first run.
    pub attempt: i32,
    /// The runner it ran on.
    pub runner_id: Option<RunnerId>,
    /// That runner's name, while the runner's row is kept.
    pub runner_name: Option<String>,
    /// The lease it ran under.
    pub lease_id: Option<LeaseId>,
    /// When it was leased.
    pub leased_at: Option<DateTime<Utc>>,
    /// When its runner started it.
    pub started_at: Option<DateTime<Utc>>,
    /// When its end was written.
    pub ended_at: DateTime<Utc>,
    /// `failed`, or `timed_out` when the server ended it at its timeout.
    pub outcome: String,
    /// The exit code its runner reported.
    pub exit_code: Option<i32>,
    /// Why it ended, when it did not succeed.
    pub error: Option<String>,
}

/// How many tasks a short id may name before the answer stops listing them.
pub const SHORT_ID_MATCHES: i64 = 5;

impl Store {
    /// The runs of task `id` that a retry followed, first to last.
    pub async fn task_attempts(&self, id: Uuid) -> Result<Vec<AttemptRecord>, StoreError> {
        Ok(sqlx::query_as::<_, AttemptRecord>(
            "SELECT a.attempt, a.runner_id, w.name AS runner_name, a.lease_id, a.leased_at,
                    a.started_at, a.ended_at, a.outcome, a.exit_code, a.error
             FROM task_attempts a LEFT JOIN runners w ON w.id = a.runner_id
             WHERE a.task_id = $1
             ORDER BY a.attempt",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The ids of the tasks whose id ends with `short` (its last 12 hex digits,
    /// lower case), of those `owner` submitted when given: a few at most, oldest first.
    pub async fn tasks_by_short_id(
        &self,
        short: &str,
        owner: Option<&str>,
    ) -> Result<Vec<Uuid>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM tasks
             WHERE right(id::text, 12) COLLATE \"C\" = $1
               AND ($2::text IS NULL OR created_by = $2)
             ORDER BY id LIMIT $3",
        )
        .bind(short)
        .bind(owner)
        .bind(SHORT_ID_MATCHES)
        .fetch_all(&self.pool)
        .await?)
    }
}

#[cfg(test)]
mod tests {
    /// The history's trigger tells a run that timed out by the error the server writes
    /// for a timeout: the two must stay one text.
    #[test]
    fn the_trigger_knows_the_servers_timeout_error() {
        let migration = include_str!("../../../migrations/20261207000002_task_attempts.sql");
        let test = format!(
            "NEW.error = '{}'",
            baton_core::after_run::SERVER_TIMEOUT_ERROR
        );
        assert!(migration.contains(&test), "{test}");
    }
}
