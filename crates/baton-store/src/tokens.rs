//! API tokens and registration tokens, stored by hash. The bootstrap tokens from the
//! configuration never touch these tables; tokens created through the API live here.

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
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RegistrationTokenRecord {
    pub id: Uuid,
    pub expires_at: Option<DateTime<Utc>>,
    pub uses_left: Option<i32>,
}

impl Store {
    /// The unrevoked API token with this hash.
    pub async fn api_token_by_hash(&self, hash: &[u8]) -> Result<ApiTokenRecord, StoreError> {
        sqlx::query_as::<_, ApiTokenRecord>(
            "SELECT id, name, scopes, created_at, revoked_at FROM api_tokens
             WHERE token_hash = $1 AND revoked_at IS NULL",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }

    pub async fn api_token_insert(
        &self,
        name: &str,
        scopes: &[String],
        hash: &[u8],
        now: DateTime<Utc>,
    ) -> Result<ApiTokenRecord, StoreError> {
        Ok(sqlx::query_as::<_, ApiTokenRecord>(
            "INSERT INTO api_tokens (id, name, token_hash, scopes, created_at)
             VALUES ($1, $2, $3, $4, $5)
             RETURNING id, name, scopes, created_at, revoked_at",
        )
        .bind(Uuid::now_v7())
        .bind(name)
        .bind(hash)
        .bind(scopes)
        .bind(now)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Every API token, revoked ones included, newest first.
    pub async fn api_tokens(&self) -> Result<Vec<ApiTokenRecord>, StoreError> {
        Ok(sqlx::query_as::<_, ApiTokenRecord>(
            "SELECT id, name, scopes, created_at, revoked_at FROM api_tokens ORDER BY id DESC",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Revokes a token; `NotFound` if there is no such (unrevoked) token.
    pub async fn api_token_revoke(&self, id: Uuid, now: DateTime<Utc>) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE api_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
        )
        .bind(id)
        .bind(now)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn registration_token_insert(
        &self,
        hash: &[u8],
        expires_at: Option<DateTime<Utc>>,
        uses: Option<i32>,
        now: DateTime<Utc>,
    ) -> Result<RegistrationTokenRecord, StoreError> {
        Ok(sqlx::query_as::<_, RegistrationTokenRecord>(
            "INSERT INTO registration_tokens (id, token_hash, expires_at, uses_left, created_at)
             VALUES ($1, $2, $3, $4, $5)
             RETURNING id, expires_at, uses_left",
        )
        .bind(Uuid::now_v7())
        .bind(hash)
        .bind(expires_at)
        .bind(uses)
        .bind(now)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Uses up one registration with this token if it is valid (unrevoked, unexpired,
    /// uses left), in one statement so two runners cannot take the last use.
    pub async fn registration_token_consume(
        &self,
        hash: &[u8],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let used = sqlx::query(
            "UPDATE registration_tokens
             SET uses_left = uses_left - 1
             WHERE token_hash = $1 AND revoked_at IS NULL
               AND (expires_at IS NULL OR expires_at > $2)
               AND (uses_left IS NULL OR uses_left > 0)",
        )
        .bind(hash)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(used.rows_affected() == 1)
    }
}
