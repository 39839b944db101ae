//! Task output: raw bytes addressed by offset.
//!
//! `tasks.log_size` counts every byte the runner has delivered, in the runner's own
//! offset space; only the first `cap` bytes are stored, and `log_truncated` says more
//! came. Keeping one offset space means a truncated log still acknowledges the runner's
//! chunks, so it never resends them.

use crate::Store;
use crate::error::StoreError;
use baton_core::TaskStatus;
use uuid::Uuid;

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogAppend {
    /// The log size after the chunk: where the runner's next chunk starts.
    pub acked: i64,
    /// The task's status: `cancelling` tells the runner to stop.
    pub status: TaskStatus,
}

/// Bytes of a task's log, from some offset.
#[derive(Debug, Clone)]
pub struct LogChunk {
    pub data: Vec<u8>,
    /// Offset of the byte after `data`.
    pub next_offset: i64,
    pub status: TaskStatus,
    /// The attempt whose output this is.
    pub attempt: i32,
}

impl Store {
    /// Appends a chunk that starts at `offset`. A chunk already held (a resend) is not
    /// stored twice; one that overlaps the end stores only its new tail; one that starts
    /// past the end is refused with the size held, so the runner rewinds.
    pub async fn task_log_append(
        &self,
        id: Uuid,
        runner_id: Uuid,
        lease_id: Uuid,
        offset: i64,
        chunk: &[u8],
        cap: i64,
    ) -> Result<LogAppend, StoreError> {
        let mut tx = self.pool.begin().await?;
        // status, runner, lease, log size, attempt: what decides whether a chunk is taken.
        type Holder = (String, Option<Uuid>, Option<Uuid>, i64, i32);
        let row: Option<Holder> = sqlx::query_as(
            "SELECT status, runner_id, lease_id, log_size, attempt FROM tasks WHERE id = $1 FOR UPDATE",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((status, owner, current_lease, held, attempt)) = row else {
            return Err(StoreError::NotFound);
        };
        let status: TaskStatus = status
            .parse()
            .map_err(|e| StoreError::Internal(format!("{e}")))?;
        if owner != Some(runner_id) {
            return Err(StoreError::NotFound);
        }
        if current_lease != Some(lease_id) {
            return Err(StoreError::Conflict {
                status,
                reason: "stale lease: the task was leased again",
            });
        }
        if !matches!(status, TaskStatus::Running | TaskStatus::Cancelling) {
            return Err(StoreError::Conflict {
                status,
                reason: "logs are accepted only while the task runs",
            });
        }
        if offset > held {
            return Err(StoreError::LogOffsetPastEnd {
                requested: offset,
                held,
            });
        }
        let already = usize::try_from(held - offset).unwrap_or(usize::MAX);
        let fresh = chunk.get(already..).unwrap_or_default();
        if fresh.is_empty() {
            return Ok(LogAppend {
                acked: held,
                status,
            });
        }
        let room = usize::try_from((cap - held).max(0)).unwrap_or(usize::MAX);
        let stored = &fresh[..fresh.len().min(room)];
        if !stored.is_empty() {
            sqlx::query(
                r#"INSERT INTO task_logs (task_id, attempt, "offset", data) VALUES ($1, $2, $3, $4)"#,
            )
            .bind(id)
            .bind(attempt)
            .bind(held)
                .bind(stored)
                .execute(&mut *tx)
                .await?;
        }
        let acked = held + fresh.len() as i64;
        sqlx::query(
            "UPDATE tasks SET log_size = $2, log_truncated = log_truncated OR $3 WHERE id = $1",
        )
        .bind(id)
        .bind(acked)
        .bind(stored.len() < fresh.len())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(LogAppend { acked, status })
    }

    /// Up to `max` stored bytes of an attempt's output from `offset`; the latest attempt
    /// when `attempt` is `None`.
    pub async fn task_log_read(
        &self,
        id: Uuid,
        attempt: Option<i32>,
        offset: i64,
        max: usize,
    ) -> Result<LogChunk, StoreError> {
        let task = self.task_get(id).await?;
        let attempt = attempt.unwrap_or(task.attempt);
        let rows: Vec<(i64, Vec<u8>)> = sqlx::query_as(
            r#"SELECT "offset", data FROM task_logs
               WHERE task_id = $1 AND attempt = $2 AND "offset" + length(data) > $3
               ORDER BY "offset"
               LIMIT 256"#,
        )
        .bind(id)
        .bind(attempt)
        .bind(offset)
        .fetch_all(&self.pool)
        .await?;
        let mut data = Vec::new();
        let mut next_offset = offset;
        for (start, bytes) in rows {
            if data.len() >= max || start > next_offset {
                break;
            }
            let skip = usize::try_from(next_offset - start).unwrap_or(0);
            let take = &bytes[skip.min(bytes.len())..];
            let take = &take[..take.len().min(max - data.len())];
            data.extend_from_slice(take);
            next_offset += take.len() as i64;
        }
        Ok(LogChunk {
            data,
            next_offset,
            status: task.status,
            attempt,
        })
    }
}
