//! Retention: terminal tasks and their logs are deleted after a while, in batches, but
//! never while a side effect is still being delivered (a delivery given up no longer
//! holds its task back).

use crate::Store;
use crate::error::StoreError;
use crate::statuses::sql_list;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};

impl Store {
    /// Deletes up to `limit` tasks that finished before `before` and have nothing left to
    /// deliver (every webhook delivered or given up); their logs go with them. Returns how
    /// many were deleted.
    pub async fn tasks_delete_finished(
        &self,
        before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let sql = format!(
            "DELETE FROM tasks WHERE id IN (
                 SELECT t.id FROM tasks t
                 WHERE t.status IN ({})
                   AND t.finished_at < $1
                   AND NOT EXISTS (SELECT 1 FROM outbox o
                                   WHERE o.task_id = t.id AND o.delivered_at IS NULL
                                     AND o.given_up_at IS NULL)
                   -- A task that a waiting task needs stays: its outputs reach that one
                   -- at its release (docs/pipelines.md).
                   AND (NOT t.has_dependents
                        OR NOT EXISTS (SELECT 1 FROM task_needs n JOIN tasks d ON d.id = n.task_id
                                       WHERE n.needs_id = t.id AND d.status = 'waiting'))
                 LIMIT $2)",
            sql_list(TaskStatus::TERMINAL)
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(before)
            .bind(limit)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Deletes up to `limit` pipelines submitted before `before` whose jobs are all gone
    /// (the tasks' retention took them).
    pub async fn pipelines_delete_emptied(
        &self,
        before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM pipelines WHERE id IN (
                 SELECT p.id FROM pipelines p
                 WHERE p.created_at < $1
                   AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.pipeline_id = p.id)
                 LIMIT $2)",
        )
        .bind(before)
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes up to `limit` outbox rows delivered, or given up, before `before`.
    pub async fn outbox_delete_delivered(
        &self,
        before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM outbox WHERE id IN (
                 SELECT id FROM outbox WHERE delivered_at < $1 OR given_up_at < $1 LIMIT $2)",
        )
        .bind(before)
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes up to `limit` runner assignments that ended before `before`
    /// (docs/dynamic-runners.md): their runners are long gone.
    pub async fn assignments_delete_ended(
        &self,
        before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM runner_assignments WHERE id IN (
                 SELECT id FROM runner_assignments WHERE ended_at < $1 LIMIT $2)",
        )
        .bind(before)
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// Deletes up to `limit` registration tokens a provisioner made that expired before
    /// `before` (each at its attempt's claim timeout): each was for one runner, long
    /// registered or refused.
    pub async fn provisioner_tokens_delete(
        &self,
        before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM registration_tokens WHERE id IN (
                 SELECT id FROM registration_tokens
                 WHERE provisioner IS NOT NULL AND expires_at < $1 LIMIT $2)",
        )
        .bind(before)
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
