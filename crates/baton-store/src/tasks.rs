//! The task table: submit, lease, start, complete, read.

use crate::Store;
use crate::error::StoreError;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use sqlx::types::Json;
use std::collections::BTreeMap;
use uuid::Uuid;

/// A validated task about to be inserted.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub id: Uuid,
    pub queue: String,
    pub labels: Vec<String>,
    pub command: Option<Vec<String>>,
    pub script: Option<String>,
    pub env: BTreeMap<String, String>,
    pub secret_env: BTreeMap<String, String>,
    pub payload: Option<Value>,
    pub priority: i32,
    pub timeout_s: i32,
    pub queue_timeout_s: i32,
    pub max_attempts: i32,
    /// Delayed start: the task waits as `scheduled` until then.
    pub run_at: Option<DateTime<Utc>>,
    pub idempotency_key: Option<String>,
    pub notify_url: Option<String>,
    pub created_by: String,
    pub traceparent: Option<String>,
}

/// A row of the task table.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TaskRecord {
    pub id: Uuid,
    pub queue: String,
    pub labels: Vec<String>,
    pub command: Option<Vec<String>>,
    pub script: Option<String>,
    pub env: Json<BTreeMap<String, String>>,
    pub secret_env: Json<BTreeMap<String, String>>,
    pub payload: Option<Json<Value>>,
    pub priority: i32,
    pub timeout_s: i32,
    pub queue_timeout_s: i32,
    pub max_attempts: i32,
    pub run_at: Option<DateTime<Utc>>,
    pub idempotency_key: Option<String>,
    #[sqlx(try_from = "String")]
    pub status: TaskStatus,
    pub attempt: i32,
    pub runner_id: Option<Uuid>,
    pub lease_id: Option<Uuid>,
    pub boot_id: Option<Uuid>,
    pub notify_url: Option<String>,
    pub created_by: String,
    pub traceparent: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub queued_at: Option<DateTime<Utc>>,
    pub leased_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub outputs: Option<Json<Value>>,
    pub log_size: i64,
    pub log_truncated: bool,
    pub log_incomplete: bool,
}

#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub queue: Option<String>,
    /// Only tasks submitted with this token.
    pub created_by: Option<String>,
    /// Only tasks older than this id (ids are UUIDv7, so older means smaller).
    pub before: Option<Uuid>,
    pub limit: i64,
}

impl Store {
    /// Inserts a task, `queued` (or `scheduled` when `run_at` is in the future). With an
    /// idempotency key that already exists, inserts
    /// nothing and returns the existing task with `created = false`.
    pub async fn task_insert(
        &self,
        task: &NewTask,
        now: DateTime<Utc>,
    ) -> Result<(TaskRecord, bool), StoreError> {
        let mut tx = self.pool.begin().await?;
        let out = insert_one(&mut tx, task, now).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Inserts every task or none. Existing idempotency keys return their task.
    pub async fn task_insert_batch(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> Result<Vec<(TaskRecord, bool)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut out = Vec::with_capacity(tasks.len());
        for task in tasks {
            out.push(insert_one(&mut tx, task, now).await?);
        }
        tx.commit().await?;
        Ok(out)
    }

    pub async fn task_get(&self, id: Uuid) -> Result<TaskRecord, StoreError> {
        sqlx::query_as::<_, TaskRecord>("SELECT * FROM tasks WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)
    }

    /// The rows of `ids` that exist, in no particular order.
    pub async fn tasks_by_ids(&self, ids: &[Uuid]) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(
            sqlx::query_as::<_, TaskRecord>("SELECT * FROM tasks WHERE id = ANY($1)")
                .bind(ids)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// The rows of `ids` that exist, by id.
    pub async fn tasks_map(
        &self,
        ids: &[Uuid],
    ) -> Result<std::collections::HashMap<Uuid, TaskRecord>, StoreError> {
        Ok(self
            .tasks_by_ids(ids)
            .await?
            .into_iter()
            .map(|t| (t.id, t))
            .collect())
    }

    /// What a heartbeat needs, in one query: the tasks it lists (`listed`), and the runs
    /// the runner holds under its current boot that started before `before` (listed or
    /// not: the ones it no longer lists are forgotten).
    pub async fn tasks_for_heartbeat(
        &self,
        listed: &[Uuid],
        runner: Uuid,
        boot_id: Uuid,
        before: DateTime<Utc>,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(
            "SELECT * FROM tasks
             WHERE id = ANY($1)
                OR (runner_id = $2 AND boot_id = $3 AND status IN ('running', 'cancelling')
                    AND started_at < $4)",
        )
        .bind(listed)
        .bind(runner)
        .bind(boot_id)
        .bind(before)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Tasks in one of `statuses`, oldest id first after `after`: the repair pass walks
    /// the table with this, a page at a time.
    pub async fn tasks_page(
        &self,
        statuses: &[TaskStatus],
        after: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        Ok(sqlx::query_as::<_, TaskRecord>(
            "SELECT * FROM tasks
             WHERE status = ANY($1) AND ($2::uuid IS NULL OR id > $2)
             ORDER BY id LIMIT $3",
        )
        .bind(&statuses)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Newest first, keyset-paginated on the id.
    pub async fn task_list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(
            "SELECT * FROM tasks
             WHERE ($1::text IS NULL OR status = $1)
               AND ($2::text IS NULL OR queue = $2)
               AND ($3::uuid IS NULL OR id < $3)
               AND ($5::text IS NULL OR created_by = $5)
             ORDER BY id DESC
             LIMIT $4",
        )
        .bind(filter.status.map(TaskStatus::as_str))
        .bind(filter.queue.as_deref())
        .bind(filter.before)
        .bind(filter.limit)
        .bind(filter.created_by.as_deref())
        .fetch_all(&self.pool)
        .await?)
    }

    /// `queued -> leased` under a fresh lease. `None` when the task is no longer queued
    /// (cancelled, or leased by someone else): the caller drops its claim and hands out
    /// nothing for this id.
    pub async fn task_lease(
        &self,
        id: Uuid,
        lease_id: Uuid,
        runner_id: Uuid,
        boot_id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<Option<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(
            "UPDATE tasks
             SET status = 'leased', lease_id = $2, runner_id = $3, boot_id = $4,
                 leased_at = $5, updated_at = $5
             WHERE id = $1 AND status = 'queued'
             RETURNING *",
        )
        .bind(id)
        .bind(lease_id)
        .bind(runner_id)
        .bind(boot_id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// `leased -> running`: the runner acknowledged its lease. The attempt count goes up
    /// and the log starts afresh for this attempt. A repeated start under the same lease
    /// (its first answer was lost) succeeds again without counting an attempt.
    pub async fn task_start(
        &self,
        id: Uuid,
        runner_id: Uuid,
        lease_id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<TaskRecord, StoreError> {
        let started = sqlx::query_as::<_, TaskRecord>(
            "UPDATE tasks
             SET status = 'running', started_at = $4, updated_at = $4, attempt = attempt + 1,
                 log_size = 0, log_truncated = false, log_incomplete = false
             WHERE id = $1 AND runner_id = $2 AND lease_id = $3 AND status = 'leased'
             RETURNING *",
        )
        .bind(id)
        .bind(runner_id)
        .bind(lease_id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        match started {
            Some(task) => Ok(task),
            None => {
                self.runner_report_refused(id, runner_id, lease_id, |t| {
                    t.status == TaskStatus::Running
                })
                .await
            }
        }
    }

    /// Explains why a runner's compare-and-set changed nothing: another runner's task (or
    /// none) is not found — its existence is not leaked; a moved status or another lease of
    /// this runner's is a conflict. `already_done` recognises a retried report whose first
    /// attempt succeeded, which is answered with the task as it stands.
    pub(crate) async fn runner_report_refused(
        &self,
        id: Uuid,
        runner_id: Uuid,
        lease_id: Uuid,
        already_done: impl Fn(&TaskRecord) -> bool,
    ) -> Result<TaskRecord, StoreError> {
        let task = match self.task_get(id).await {
            Ok(task) if task.runner_id == Some(runner_id) => task,
            Ok(_) | Err(StoreError::NotFound) => return Err(StoreError::NotFound),
            Err(e) => return Err(e),
        };
        if task.lease_id != Some(lease_id) {
            return Err(StoreError::Conflict {
                status: task.status,
                reason: "stale lease: the task was leased again",
            });
        }
        if already_done(&task) {
            return Ok(task);
        }
        Err(StoreError::Conflict {
            status: task.status,
            reason: "the task is not in a state that accepts this report",
        })
    }
}

async fn insert_one(
    conn: &mut PgConnection,
    task: &NewTask,
    now: DateTime<Utc>,
) -> Result<(TaskRecord, bool), StoreError> {
    let inserted = sqlx::query_as::<_, TaskRecord>(
        "INSERT INTO tasks (id, queue, labels, command, script, env, payload, priority,
                            timeout_s, queue_timeout_s, max_attempts, idempotency_key,
                            status, created_by, traceparent, created_at, updated_at, queued_at,
                            run_at, notify_url, secret_env)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                 CASE WHEN $16::timestamptz > $15 THEN 'scheduled' ELSE 'queued' END,
                 $13, $14, $15, $15,
                 CASE WHEN $16::timestamptz > $15 THEN NULL ELSE $15 END,
                 $16, $17, $18)
         ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
         RETURNING *",
    )
    .bind(task.id)
    .bind(&task.queue)
    .bind(&task.labels)
    .bind(task.command.as_deref())
    .bind(task.script.as_deref())
    .bind(Json(&task.env))
    .bind(task.payload.as_ref().map(Json))
    .bind(task.priority)
    .bind(task.timeout_s)
    .bind(task.queue_timeout_s)
    .bind(task.max_attempts)
    .bind(task.idempotency_key.as_deref())
    .bind(&task.created_by)
    .bind(task.traceparent.as_deref())
    .bind(now)
    .bind(task.run_at)
    .bind(task.notify_url.as_deref())
    .bind(Json(&task.secret_env))
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(task) = inserted {
        return Ok((task, true));
    }
    // The key exists: its task was committed before ours (ON CONFLICT waited for it).
    let existing =
        sqlx::query_as::<_, TaskRecord>("SELECT * FROM tasks WHERE idempotency_key = $1")
            .bind(task.idempotency_key.as_deref())
            .fetch_optional(conn)
            .await?
            .ok_or_else(|| {
                StoreError::Internal("idempotency conflict without an existing task".into())
            })?;
    Ok((existing, false))
}
