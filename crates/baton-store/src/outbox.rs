//! The outbox: side effects of terminal transitions waiting to be delivered. Any node
//! may deliver; a row is taken for a while (its next attempt pushed forward) so two nodes
//! do not send it at once, and a node that dies mid-delivery leaves it to come due again.
//! A row ends delivered or given up (too many attempts, or too old); either way it stays
//! until retention, so the task can show how its webhook fared.

use crate::Store;
use crate::error::StoreError;
use baton_core::TaskStatus;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

/// One side effect to deliver (a completion webhook), as a delivery takes it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxRecord {
    /// The row's id.
    pub id: i64,
    /// The task it is about.
    pub task_id: Uuid,
    /// What it is: `webhook`.
    pub kind: String,
    /// Where it goes: the webhook's URL.
    pub target: String,
    /// Written by earlier releases; built from the task's final row when absent.
    pub body: Option<Json<Value>>,
    /// What the receiver deduplicates on: the task and its final status.
    pub idempotency_key: String,
    /// Counting the attempt this take is for.
    pub attempts: i32,
    /// When the task ended: the age a delivery is given up at is counted from here.
    pub created_at: DateTime<Utc>,
}

/// How a task's webhook fared so far.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct OutboxState {
    /// How many deliveries were tried.
    pub attempts: i32,
    /// When it was delivered.
    pub delivered_at: Option<DateTime<Utc>>,
    /// When delivery was given up.
    pub given_up_at: Option<DateTime<Utc>>,
    /// Why the last delivery failed.
    pub last_error: Option<String>,
}

impl Store {
    /// Takes up to `limit` due rows for `hold`: they are not due again until then.
    pub async fn outbox_take_due(
        &self,
        now: DateTime<Utc>,
        hold: Duration,
        limit: i64,
    ) -> Result<Vec<OutboxRecord>, StoreError> {
        Ok(sqlx::query_as::<_, OutboxRecord>(
            "UPDATE outbox SET next_attempt_at = $2, attempts = attempts + 1
             WHERE id IN (SELECT id FROM outbox
                          WHERE delivered_at IS NULL AND given_up_at IS NULL
                            AND next_attempt_at <= $1
                          ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED)
             RETURNING id, task_id, kind, target, body, idempotency_key, attempts, created_at",
        )
        .bind(now)
        .bind(now + hold)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// When the next row still to deliver comes due (`None`: nothing waits).
    pub async fn outbox_next_due(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT min(next_attempt_at) FROM outbox
             WHERE delivered_at IS NULL AND given_up_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Records that the row `id` was delivered.
    pub async fn outbox_delivered(&self, id: i64, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query("UPDATE outbox SET delivered_at = $2, last_error = NULL WHERE id = $1")
            .bind(id)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Puts the row `id` off until `at`, with the error that failed it.
    pub async fn outbox_retry_at(
        &self,
        id: i64,
        at: DateTime<Utc>,
        error: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE outbox SET next_attempt_at = $2, last_error = $3 WHERE id = $1")
            .bind(id)
            .bind(at)
            .bind(error)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// No more attempts: the row is no longer taken, and no longer keeps its task from
    /// retention. Its `last_error` says why: `error`, the last failure (or, when `None`,
    /// the one stored), then `why`, what ran out.
    pub async fn outbox_give_up(
        &self,
        id: i64,
        now: DateTime<Utc>,
        error: Option<&str>,
        why: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE outbox SET given_up_at = $2,
                 last_error = concat_ws('; ', coalesce($3::text, last_error), $4::text)
             WHERE id = $1 AND delivered_at IS NULL",
        )
        .bind(id)
        .bind(now)
        .bind(error)
        .bind(why)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The webhook of a task that ended as `status`, if one was written. Found by its
    /// idempotency key (task and final status, as the transitions write it), so through
    /// the key's unique index.
    pub async fn outbox_state_of(
        &self,
        task_id: Uuid,
        status: TaskStatus,
    ) -> Result<Option<OutboxState>, StoreError> {
        Ok(sqlx::query_as::<_, OutboxState>(
            "SELECT attempts, delivered_at, given_up_at, last_error FROM outbox
             WHERE idempotency_key = $1::uuid::text || ':' || $2::text",
        )
        .bind(task_id)
        .bind(status.as_str())
        .fetch_optional(&self.pool)
        .await?)
    }
}
