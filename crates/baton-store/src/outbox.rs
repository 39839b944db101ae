//! The outbox: side effects of terminal transitions waiting to be delivered. Any node
//! may deliver; a row is taken for a while (its next attempt pushed forward) so two nodes
//! do not send it at once, and a node that dies mid-delivery leaves it to come due again.

use crate::Store;
use crate::error::StoreError;
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxRecord {
    pub id: i64,
    pub task_id: Uuid,
    pub kind: String,
    pub target: String,
    /// Written by earlier releases; built from the task's final row when absent.
    pub body: Option<Json<Value>>,
    pub idempotency_key: String,
    pub attempts: i32,
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
                          WHERE delivered_at IS NULL AND next_attempt_at <= $1
                          ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED)
             RETURNING id, task_id, kind, target, body, idempotency_key, attempts",
        )
        .bind(now)
        .bind(now + hold)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// When the next undelivered row comes due (`None`: nothing waits).
    pub async fn outbox_next_due(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(
            sqlx::query_scalar(
                "SELECT min(next_attempt_at) FROM outbox WHERE delivered_at IS NULL",
            )
            .fetch_one(&self.pool)
            .await?,
        )
    }

    pub async fn outbox_delivered(&self, id: i64, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query("UPDATE outbox SET delivered_at = $2, last_error = NULL WHERE id = $1")
            .bind(id)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

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
}
