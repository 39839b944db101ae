//! Counts for the operator's gauges (`baton_tasks{status}`).

use crate::Store;
use crate::error::StoreError;
use baton_core::TaskStatus;
use std::time::Duration;

impl Store {
    /// How many unfinished tasks are in each status (statuses with none are left out).
    /// Finished ones are not counted: they pile up for the whole retention, and counting
    /// them on every scrape would walk most of the table; `baton_tasks_completed_total`
    /// counts them as they end. The count reads the `(status, id)` index for the few
    /// active statuses, bounded inside Postgres by `limit`: a slow count is cancelled
    /// there, not left running after the caller gave up.
    pub async fn tasks_count_by_status(
        &self,
        limit: Duration,
    ) -> Result<Vec<(TaskStatus, i64)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('statement_timeout', $1, true)")
            .bind(format!("{}ms", limit.as_millis().max(1)))
            .execute(&mut *tx)
            .await?;
        let rows: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT status, count(*) FROM tasks WHERE {} GROUP BY status",
            *crate::UNFINISHED
        )))
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows
            .into_iter()
            .filter_map(|(status, n)| Some((status.parse().ok()?, n)))
            .collect())
    }
}

impl Store {
    /// The distinct (queue, label set) pairs of `owner`'s queued tasks, at most `most`
    /// of them: what the per-owner caps count. Read through the index of unfinished
    /// tasks, bounded by `limit` inside Postgres.
    pub async fn owner_queued_keys(
        &self,
        owner: &str,
        most: i64,
        limit: Duration,
    ) -> Result<Vec<(String, Vec<String>)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('statement_timeout', $1, true)")
            .bind(format!("{}ms", limit.as_millis().max(1)))
            .execute(&mut *tx)
            .await?;
        let keys: Vec<(String, Vec<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT DISTINCT queue, labels FROM tasks
             WHERE {} AND status = 'queued' AND created_by = $1
             LIMIT $2",
            *crate::UNFINISHED
        )))
        .bind(owner)
        .bind(most)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(keys)
    }
}
