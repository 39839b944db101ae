//! The repair pass's reads of the queued backlog (design.md §4.6): every queued row,
//! every 30 s, on whichever node takes the lock. Read whole, a backlog of thousands of
//! rows — payloads, environments, scripts — costs Postgres more than the drain it runs
//! beside; the pass needs only what a queue entry is made of, and a status per id.

use crate::Store;
use crate::error::StoreError;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use uuid::Uuid;

/// A queued task as its queue entry is made of it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct QueuedRow {
    /// Its id.
    pub id: Uuid,
    /// Its queue.
    pub queue: String,
    /// The labels a runner must have to take it.
    pub labels: Vec<String>,
    /// Higher pops first.
    pub priority: i32,
    /// Who submitted it.
    pub created_by: String,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When it was last queued.
    pub queued_at: Option<DateTime<Utc>>,
    /// When its row last changed: a recent change may be between its Postgres write
    /// and its Redis add.
    pub updated_at: DateTime<Utc>,
    /// Its concurrency group.
    pub concurrency_key: Option<String>,
    /// Its group's limit.
    pub concurrency_limit: Option<i32>,
}

impl From<&crate::TaskRecord> for QueuedRow {
    fn from(t: &crate::TaskRecord) -> Self {
        QueuedRow {
            id: t.id,
            queue: t.queue.clone(),
            labels: t.labels.clone(),
            priority: t.priority,
            created_by: t.created_by.clone(),
            created_at: t.created_at,
            queued_at: t.queued_at,
            updated_at: t.updated_at,
            concurrency_key: t.concurrency_key.clone(),
            concurrency_limit: t.concurrency_limit,
        }
    }
}

impl Store {
    /// Up to `limit` queued rows after `after`, in id order, as their queue entries need
    /// them.
    pub async fn tasks_queued_page(
        &self,
        after: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<QueuedRow>, StoreError> {
        // `status = 'queued'` with the partial index's own predicate, so it serves.
        Ok(sqlx::query_as::<_, QueuedRow>(sqlx::AssertSqlSafe(format!(
            "SELECT id, queue, labels, priority, created_by, created_at, queued_at, updated_at,
                    concurrency_key, concurrency_limit
             FROM tasks
             WHERE {} AND status = 'queued' AND ($1::uuid IS NULL OR id > $1)
             ORDER BY id LIMIT $2",
            *crate::UNFINISHED
        )))
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The status of each of `ids` that exists.
    pub async fn tasks_statuses(
        &self,
        ids: &[Uuid],
    ) -> Result<HashMap<Uuid, TaskStatus>, StoreError> {
        let rows: Vec<(Uuid, String)> =
            sqlx::query_as("SELECT id, status FROM tasks WHERE id = ANY($1)")
                .bind(ids)
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter()
            .map(|(id, status)| {
                let status = TaskStatus::try_from(status)
                    .map_err(|e| StoreError::Internal(format!("stored status: {e}")))?;
                Ok((id, status))
            })
            .collect()
    }
}
