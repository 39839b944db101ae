//! The cluster's webhook signing secret, when the operator set none: one row, generated
//! by the first node that needs it and read by all, so every node signs with the same key
//! and a receiver configures one.

use crate::Store;
use crate::error::StoreError;
use chrono::{DateTime, Utc};

impl Store {
    /// The cluster's secret: `candidate` if no node stored one before, else the stored
    /// one. Two statements, not one: a node whose insert lost a race must read the
    /// winner's row, which a snapshot taken before that row committed would not show.
    pub async fn webhook_secret_get_or_insert(
        &self,
        candidate: &str,
        now: DateTime<Utc>,
    ) -> Result<String, StoreError> {
        sqlx::query(
            "INSERT INTO webhook_secret (id, secret, created_at) VALUES (true, $1, $2)
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(candidate)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(
            sqlx::query_scalar("SELECT secret FROM webhook_secret WHERE id")
                .fetch_one(&self.pool)
                .await?,
        )
    }
}
