//! A batch of plain inserts by `COPY tasks FROM STDIN (FORMAT binary)`: a bulk submit's
//! 1,000 tasks cost Postgres half the time the one statement's `INSERT … FROM
//! jsonb_to_recordset … RETURNING *` does (no JSON to read, rows written a page at a
//! time, nothing sent back), and the node no rows to decode (docs/throughput.md,
//! decision 12). `COPY` has no `ON CONFLICT`, so a batch with an idempotency key takes
//! the statement; and it returns nothing, so each row is built here from what was sent
//! — every value as Postgres stores it (times cut to the microsecond, as either way
//! writes them: `tasks::as_stored`; a JSON `null` as no value), the status by the rule of the insert's SQL
//! (`sql::insert`), the other columns at their defaults; a payload is answered as the
//! node parsed it (the same JSON value, which a later read may write with its keys in
//! another order). Only the group commit's writer copies (`Writer`: a copy dropped while
//! it finishes leaves its connection out of step). `tests/store_copy_in.rs` checks the
//! rows against those read back and against the statement's.

use super::{Apply, Done, Work};
use crate::error::StoreError;
use crate::metered::MeteredPool;
use crate::tasks::{NewTask, TaskRecord, as_stored};
use crate::transition::Transition;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgArgumentBuffer;
use sqlx::types::Json;
use sqlx::{Encode, Postgres};

/// Fewer inserts than this take the one statement: `COPY` costs two more round trips
/// (its transaction's `BEGIN` and `COMMIT`), which a few rows do not earn back.
pub(crate) const COPY_AT_LEAST: usize = 32;

/// The columns sent, in order; the others take their defaults.
const COLUMNS: &str = "id, queue, labels, command, script, env, payload, priority, timeout_s,
    queue_timeout_s, max_attempts, status, created_by, traceparent, created_at, updated_at,
    queued_at, run_at, notify_url, secret_env, schedule_id, scheduled_for, retry_of,
    retry_policy, concurrency_key, concurrency_limit, pipeline_id, job, release_when,
    needs_pending, has_dependents";

/// Whether `work` is written by `COPY`: inserts alone, enough of them, none with an
/// idempotency key.
pub(crate) fn eligible(work: &Work) -> bool {
    work.inserts.len() >= COPY_AT_LEAST
        && work.starts.is_empty()
        && work.logs.is_empty()
        && work.finishes.is_empty()
        && work.reads.is_empty()
        && work.inserts.iter().all(|t| t.idempotency_key.is_none())
}

/// Writes `work` (which must be [`eligible`]) in a transaction of its own.
pub(crate) async fn write(
    pool: &MeteredPool,
    work: &Work,
    how: &Apply,
    before_commit: impl FnOnce(),
) -> Result<Done, StoreError> {
    let now = as_stored(how.now);
    // Encoded before the transaction begins: Postgres is not kept waiting in the copy.
    let data = rows(&work.inserts, now)
        .map_err(|e| StoreError::Internal(format!("encoding a row to copy: {e}")))?;
    let mut tx = pool.begin().await?;
    let mut copy = tx
        .copy_in_raw(&format!(
            "COPY tasks ({COLUMNS}) FROM STDIN (FORMAT binary)"
        ))
        .await?;
    copy.send(data).await?;
    copy.finish().await?;
    before_commit();
    tx.commit().await?;
    let created: Vec<TaskRecord> = work.inserts.iter().map(|t| inserted(t, now)).collect();
    Ok(Done {
        transitions: Transition::all(&created),
        inserts: created.into_iter().map(|row| Ok((row, true))).collect(),
        ..Done::default()
    })
}

/// The status a task is inserted in at `now`: `sql::insert`'s rule.
fn status_at_insert(task: &NewTask, now: DateTime<Utc>) -> TaskStatus {
    if task.needs_pending > 0 {
        TaskStatus::Waiting
    } else if task.run_at.is_some_and(|at| as_stored(at) > now) {
        TaskStatus::Scheduled
    } else {
        TaskStatus::Queued
    }
}

/// A payload as a column: a JSON `null` is no value, as the statement reads it.
fn payload(task: &NewTask) -> Option<&serde_json::Value> {
    task.payload.as_ref().filter(|p| !p.is_null())
}

/// The row `task` is once copied at `now`.
fn inserted(task: &NewTask, now: DateTime<Utc>) -> TaskRecord {
    let status = status_at_insert(task, now);
    TaskRecord {
        id: task.id,
        queue: task.queue.clone(),
        labels: task.labels.clone(),
        command: task.command.clone(),
        script: task.script.clone(),
        env: Json(task.env.clone()),
        secret_env: Json(task.secret_env.clone()),
        payload: payload(task).cloned().map(Json),
        priority: task.priority,
        timeout_s: task.timeout_s,
        queue_timeout_s: task.queue_timeout_s,
        max_attempts: task.max_attempts,
        run_at: task.run_at.map(as_stored),
        idempotency_key: None,
        status,
        attempt: 0,
        runner_id: None,
        lease_id: None,
        boot_id: None,
        notify_url: task.notify_url.clone(),
        created_by: task.created_by.clone(),
        traceparent: task.traceparent.clone(),
        created_at: now,
        updated_at: now,
        queued_at: (status == TaskStatus::Queued).then_some(now),
        leased_at: None,
        started_at: None,
        finished_at: None,
        exit_code: None,
        error: None,
        outputs: None,
        log_size: 0,
        log_truncated: false,
        log_incomplete: false,
        schedule_id: task.schedule_id,
        scheduled_for: task.scheduled_for.map(as_stored),
        retry_of: task.retry_of,
        retry_policy: task.retry_policy.clone().map(Json),
        concurrency_key: task.concurrency_key.clone(),
        concurrency_limit: task.concurrency_limit,
        pipeline_id: task.pipeline_id,
        job: task.job.clone(),
        release_when: task.release_when.clone(),
        needs_pending: task.needs_pending,
        needs_unmet: 0,
        has_dependents: task.has_dependents,
        released_by: None,
    }
}

/// `tasks` in `COPY`'s binary format, each value by `sqlx`'s own encoding of its type.
fn rows(tasks: &[NewTask], now: DateTime<Utc>) -> Result<Vec<u8>, sqlx::error::BoxDynError> {
    let mut out = Row::new();
    out.buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    out.buf.extend_from_slice(&0i32.to_be_bytes()); // flags
    out.buf.extend_from_slice(&0i32.to_be_bytes()); // header extension
    for t in tasks {
        let status = status_at_insert(t, now);
        out.buf.extend_from_slice(&31i16.to_be_bytes());
        out.field(&t.id)?;
        out.field(&t.queue)?;
        out.field(&t.labels)?;
        out.field(&t.command)?;
        out.field(&t.script)?;
        out.field(&Json(&t.env))?;
        out.field(&payload(t).map(Json))?;
        out.field(&t.priority)?;
        out.field(&t.timeout_s)?;
        out.field(&t.queue_timeout_s)?;
        out.field(&t.max_attempts)?;
        out.field(&status.as_str())?;
        out.field(&t.created_by)?;
        out.field(&t.traceparent)?;
        out.field(&now)?;
        out.field(&now)?;
        out.field(&(status == TaskStatus::Queued).then_some(now))?;
        out.field(&t.run_at.map(as_stored))?;
        out.field(&t.notify_url)?;
        out.field(&Json(&t.secret_env))?;
        out.field(&t.schedule_id)?;
        out.field(&t.scheduled_for.map(as_stored))?;
        out.field(&t.retry_of)?;
        out.field(&t.retry_policy.as_ref().map(Json))?;
        out.field(&t.concurrency_key)?;
        out.field(&t.concurrency_limit)?;
        out.field(&t.pipeline_id)?;
        out.field(&t.job)?;
        out.field(&t.release_when)?;
        out.field(&t.needs_pending)?;
        out.field(&t.has_dependents)?;
    }
    out.buf.extend_from_slice(&(-1i16).to_be_bytes());
    Ok(std::mem::take(&mut *out.buf))
}

/// The data being built: each field its length, then its bytes (-1 for no value).
struct Row {
    buf: PgArgumentBuffer,
}

impl Row {
    fn new() -> Row {
        Row {
            buf: PgArgumentBuffer::default(),
        }
    }

    fn field<'q, T: Encode<'q, Postgres>>(
        &mut self,
        value: &T,
    ) -> Result<(), sqlx::error::BoxDynError> {
        let at = self.buf.len();
        self.buf.extend_from_slice(&0i32.to_be_bytes());
        let len = match value.encode_by_ref(&mut self.buf)? {
            sqlx::encode::IsNull::Yes => -1,
            sqlx::encode::IsNull::No => i32::try_from(self.buf.len() - at - 4)?,
        };
        self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inserts(n: usize) -> Work {
        Work {
            inserts: (0..n)
                .map(|_| NewTask {
                    id: uuid::Uuid::now_v7(),
                    ..NewTask::default()
                })
                .collect(),
            ..Work::default()
        }
    }

    #[test]
    fn only_many_plain_inserts_alone_are_copied() {
        assert!(eligible(&inserts(COPY_AT_LEAST)));
        assert!(!eligible(&inserts(COPY_AT_LEAST - 1)));
        let mut keyed = inserts(COPY_AT_LEAST);
        keyed.inserts[3].idempotency_key = Some("k".into());
        assert!(!eligible(&keyed), "COPY has no ON CONFLICT");
        let mut with_read = inserts(COPY_AT_LEAST);
        with_read.reads.push(uuid::Uuid::now_v7());
        assert!(!eligible(&with_read));
    }

    #[test]
    fn a_task_is_inserted_in_the_status_the_statement_gives_it() {
        let now = as_stored(Utc::now());
        let mut task = NewTask::default();
        assert_eq!(status_at_insert(&task, now), TaskStatus::Queued);
        task.run_at = Some(now);
        assert_eq!(status_at_insert(&task, now), TaskStatus::Queued, "due now");
        task.run_at = Some(now + chrono::Duration::microseconds(1));
        assert_eq!(status_at_insert(&task, now), TaskStatus::Scheduled);
        task.needs_pending = 1;
        assert_eq!(status_at_insert(&task, now), TaskStatus::Waiting);
    }
}
