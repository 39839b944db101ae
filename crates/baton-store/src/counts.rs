//! Counts for the operator's gauges (`baton_tasks{status}`).

use crate::Store;
use crate::error::StoreError;
use baton_core::TaskStatus;
use std::time::Duration;

impl Store {
    /// How many tasks are in each status (statuses with none are left out). A count walks
    /// the whole table (its status index), so it is bounded inside Postgres by `limit`:
    /// a slow count is cancelled there, not left running after the caller gave up.
    pub async fn tasks_count_by_status(
        &self,
        limit: Duration,
    ) -> Result<Vec<(TaskStatus, i64)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('statement_timeout', $1, true)")
            .bind(format!("{}ms", limit.as_millis().max(1)))
            .execute(&mut *tx)
            .await?;
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT status, count(*) FROM tasks GROUP BY status")
                .fetch_all(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(rows
            .into_iter()
            .filter_map(|(status, n)| Some((status.parse().ok()?, n)))
            .collect())
    }
}
