//! Task output: raw bytes addressed by offset.
//!
//! `tasks.log_size` counts every byte the runner has delivered, in the runner's own
//! offset space; only the first `cap` bytes are stored, and `log_truncated` says more
//! came. Keeping one offset space means a truncated log still acknowledges the runner's
//! chunks, so it never resends them.

use crate::Store;
use crate::error::StoreError;
use crate::transitions::{Apply, LogWrite, Work};
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use baton_core::log_marks::{self, Mark};
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
    /// The bytes.
    pub data: Vec<u8>,
    /// Offset of the byte after `data`.
    pub next_offset: i64,
    /// The task's status when the chunk was read.
    pub status: TaskStatus,
    /// The attempt whose output this is.
    pub attempt: i32,
}

impl Store {
    /// Appends a chunk that starts at `offset`. A chunk already held (a resend) is not
    /// stored twice; one that overlaps the end stores only its new tail; one that starts
    /// past the end is refused with the size held, so the runner rewinds. (A batch of
    /// one: the group committer writes many in one statement.)
    pub async fn task_log_append(
        &self,
        id: Uuid,
        runner_id: RunnerId,
        lease_id: LeaseId,
        offset: i64,
        chunk: &[u8],
        cap: i64,
    ) -> Result<LogAppend, StoreError> {
        let work = Work {
            logs: vec![LogWrite {
                task: id,
                runner_id,
                lease_id,
                offset,
                data: chunk.to_vec(),
                marks: Vec::new(),
            }],
            ..Work::default()
        };
        let how = Apply {
            log_cap: cap,
            ..Apply::at(chrono::Utc::now())
        };
        self.write_now(&work, &how)
            .await?
            .logs
            .pop()
            .expect("one answer")
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

    /// The marks of an attempt's log (the latest attempt when `attempt` is `None`), in
    /// order of offset, at most [`log_marks::MAX_PER_ATTEMPT`]; with the attempt they are
    /// of.
    pub async fn task_log_marks(
        &self,
        id: Uuid,
        attempt: Option<i32>,
    ) -> Result<(i32, Vec<Mark>), StoreError> {
        let task = self.task_get(id).await?;
        let attempt = attempt.unwrap_or(task.attempt);
        let rows: Vec<(i64, i32, String)> = sqlx::query_as(
            r#"SELECT "offset", length(data), marks FROM task_logs
               WHERE task_id = $1 AND attempt = $2 AND marks IS NOT NULL
               ORDER BY "offset""#,
        )
        .bind(id)
        .bind(attempt)
        .fetch_all(&self.pool)
        .await?;
        let mut marks = Vec::new();
        for (offset, len, text) in rows {
            // Stored only after the node read them as valid: one that no longer reads
            // (hand-edited) is skipped rather than failing the whole log's marks.
            let Ok(chunk) = log_marks::decode(&text, offset, usize::try_from(len).unwrap_or(0))
            else {
                continue;
            };
            marks.extend(chunk);
            if marks.len() >= log_marks::MAX_PER_ATTEMPT {
                marks.truncate(log_marks::MAX_PER_ATTEMPT);
                break;
            }
        }
        Ok((attempt, marks))
    }
}
