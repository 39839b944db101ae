//! Queue settings (docs/flow-control.md): the paused flag that Redis mirrors, the defaults
//! its submitted tasks take, and what `GET /v1/queues` shows of each queue. A queue with
//! no row has no settings: it runs, and its tasks take the node's defaults.

use crate::Store;
use crate::error::StoreError;
use crate::statuses::{in_a_queue, sql_list};
use crate::tasks::TaskRecord;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};

/// One queue as the operator sees it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct QueueRecord {
    /// The queue's name.
    pub name: String,
    /// Whether it is paused: its tasks are neither leased nor expired.
    pub paused: bool,
    /// When it was last paused.
    pub paused_at: Option<DateTime<Utc>>,
    /// When it was last resumed: its tasks' queue timeouts count from no earlier.
    pub resumed_at: Option<DateTime<Utc>>,
    /// Tasks `queued` (leased ones not yet started included: a lease lives in Redis only).
    pub waiting: i64,
    /// Tasks `leased`, `running` or `cancelling` in Postgres.
    pub running: i64,
    /// When its oldest waiting task was queued.
    pub oldest_waiting: Option<DateTime<Utc>>,
    /// The defaults its submitted tasks take (a JSON object the API layer reads), if set.
    pub defaults: Option<sqlx::types::Json<serde_json::Value>>,
}

/// Every queue with settings or unfinished tasks, with its counts.
fn queues() -> String {
    format!(
        "
    WITH counts AS (
        SELECT queue,
               count(*) FILTER (WHERE status = 'queued') AS waiting,
               count(*) FILTER (WHERE status IN ({dispatched})) AS running,
               min(queued_at) FILTER (WHERE status = 'queued') AS oldest_waiting
        FROM tasks
        WHERE status IN ({in_a_queue})
        GROUP BY queue)
    SELECT coalesce(q.name, c.queue) AS name, coalesce(q.paused, false) AS paused,
           q.paused_at, q.resumed_at, coalesce(c.waiting, 0) AS waiting,
           coalesce(c.running, 0) AS running, c.oldest_waiting, q.defaults
    FROM queues q FULL OUTER JOIN counts c ON c.queue = q.name",
        dispatched = sql_list(TaskStatus::DISPATCHED),
        in_a_queue = sql_list(in_a_queue()),
    )
}

impl Store {
    /// Every queue with settings or unfinished tasks, by name; with `name`, that one
    /// (a queue nobody named yet is shown as an empty, running queue).
    pub async fn queues_list(&self, name: Option<&str>) -> Result<Vec<QueueRecord>, StoreError> {
        let sql = format!(
            "SELECT * FROM ({}) v WHERE $1::text IS NULL OR v.name = $1 ORDER BY v.name",
            queues()
        );
        Ok(sqlx::query_as::<_, QueueRecord>(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_all(&self.pool)
            .await?)
    }

    /// Pauses or resumes a queue (creating its settings row), at `now`. A resume records
    /// when, which restarts the queue-timeout clock of the tasks waiting in it.
    pub async fn queue_set_paused(
        &self,
        name: &str,
        paused: bool,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO queues (name, paused, paused_at, resumed_at, updated_at)
             VALUES ($1, $2, CASE WHEN $2 THEN $3 END, CASE WHEN $2 THEN NULL ELSE $3 END, $3)
             ON CONFLICT (name) DO UPDATE
             SET paused = $2, updated_at = $3,
                 paused_at = CASE WHEN $2 AND NOT queues.paused THEN $3
                                  ELSE queues.paused_at END,
                 resumed_at = CASE WHEN NOT $2 AND queues.paused THEN $3
                                   ELSE queues.resumed_at END",
        )
        .bind(name)
        .bind(paused)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Sets (or with `None` clears) a queue's task defaults, creating its settings row.
    pub async fn queue_set_defaults(
        &self,
        name: &str,
        defaults: Option<&serde_json::Value>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO queues (name, defaults, updated_at) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET defaults = $2, updated_at = $3",
        )
        .bind(name)
        .bind(defaults.map(sqlx::types::Json))
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Every queue's task defaults, by queue name: what submits read (through a cache).
    pub async fn queues_defaults(&self) -> Result<Vec<(String, serde_json::Value)>, StoreError> {
        let rows: Vec<(String, sqlx::types::Json<serde_json::Value>)> = sqlx::query_as(
            "SELECT name, defaults FROM queues WHERE defaults IS NOT NULL ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(|(name, d)| (name, d.0)).collect())
    }

    /// The names of the paused queues: what Redis' `paused` set must hold.
    pub async fn queues_paused(&self) -> Result<Vec<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT name FROM queues WHERE paused ORDER BY name")
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// Every unfinished task of a concurrency group (queued, leased, running or
    /// cancelling), for the repair pass's recount; by key, then id.
    pub async fn tasks_grouped_active(&self) -> Result<Vec<TaskRecord>, StoreError> {
        let sql = format!(
            "SELECT * FROM tasks
             WHERE concurrency_key IS NOT NULL
               AND status IN ({})
             ORDER BY concurrency_key, id",
            sql_list(in_a_queue())
        );
        Ok(sqlx::query_as::<_, TaskRecord>(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?)
    }
}
