//! API tokens stored by hash. The bootstrap token from the configuration never touches
//! this table; tokens created through the API live here.

use crate::Store;
use crate::error::StoreError;
use chrono::{DateTime, Utc};
use uuid::Uuid;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ApiTokenRecord {
    pub id: Uuid,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
}

impl Store {
    /// The unrevoked API token with this hash.
    pub async fn api_token_by_hash(&self, hash: &[u8]) -> Result<ApiTokenRecord, StoreError> {
        sqlx::query_as::<_, ApiTokenRecord>(
            "SELECT id, name, scopes, created_at FROM api_tokens
             WHERE token_hash = $1 AND revoked_at IS NULL",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }
}
