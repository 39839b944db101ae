//! API tokens and registration tokens, stored by hash. The bootstrap tokens from the
//! configuration never touch these tables; tokens created through the API live here.

use crate::Store;
use crate::error::StoreError;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A token's labels or queues: `None` allows any.
type Scope = Option<Vec<String>>;

/// An API token as stored (its hash aside).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ApiTokenRecord {
    /// Its id.
    pub id: Uuid,
    /// Its name, for operators.
    pub name: String,
    /// What it may do: its scopes' names.
    pub scopes: Vec<String>,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it stops working.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
    /// The queues it may submit to; `None`: any.
    pub queues: Scope,
    /// The labels its tasks may carry; `None`: any.
    pub labels: Scope,
    /// The highest priority its tasks may carry; `None`: any.
    pub max_priority: Option<i32>,
}

/// What a new API token is.
#[derive(Debug, Clone, Default)]
pub struct NewApiToken {
    /// Its name, for operators.
    pub name: String,
    /// What it may do.
    pub scopes: Vec<String>,
    /// When it stops working.
    pub expires_at: Option<DateTime<Utc>>,
    /// The queues it may submit to; `None`: any.
    pub queues: Scope,
    /// The labels its tasks may carry; `None`: any.
    pub labels: Scope,
    /// The highest priority its tasks may carry; `None`: any.
    pub max_priority: Option<i32>,
}

/// The columns of [`ApiTokenRecord`].
macro_rules! api_token_columns {
    () => {
        "id, name, scopes, created_at, expires_at, revoked_at, queues, labels, max_priority"
    };
}

/// A runner registration token as stored (its hash aside).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RegistrationTokenRecord {
    /// Its id.
    pub id: Uuid,
    /// Its name, for operators.
    pub name: Option<String>,
    /// When it stops working.
    pub expires_at: Option<DateTime<Utc>>,
    /// How many registrations it has left; `None`: no limit.
    pub uses_left: Option<i32>,
    /// `None`: any.
    pub labels: Option<Vec<String>>,
    /// `None`: any, every queue included.
    pub queues: Option<Vec<String>>,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What a new registration token is: its limits, `None` where there is none.
#[derive(Debug, Clone, Default)]
pub struct NewRegistrationToken {
    /// Its name, for operators.
    pub name: Option<String>,
    /// When it stops working.
    pub expires_at: Option<DateTime<Utc>>,
    /// How many registrations it allows.
    pub uses: Option<i32>,
    /// The labels a runner may claim with it; `None`: any.
    pub labels: Option<Vec<String>>,
    /// The queues a runner may serve with it; `None`: any.
    pub queues: Option<Vec<String>>,
    /// The provisioner making it for a runner it starts; the runner is marked with it.
    pub provisioner: Option<String>,
}

/// A runner asking to register: what it claims.
#[derive(Debug, Clone, Copy)]
pub struct Registering<'a> {
    /// The labels the runner claims.
    pub labels: &'a [String],
    /// The queues the runner claims to serve.
    pub queues: &'a [String],
}

/// Whether a registration token let a runner in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// One use was taken.
    Accepted {
        /// The token's id, recorded on the runner.
        token_id: Uuid,
        /// The provisioner that made the token, for a runner started on demand.
        provisioner: Option<String>,
    },
    /// A valid token, but the runner claims more than it allows; no use was taken.
    OutOfScope {
        /// The labels the token allows; `None`: any.
        labels: Option<Vec<String>>,
        /// The queues the token allows; `None`: any.
        queues: Option<Vec<String>>,
    },
    /// Unknown, revoked, expired or used up.
    Refused,
}

/// The columns of [`RegistrationTokenRecord`].
macro_rules! registration_token_columns {
    () => {
        "id, name, expires_at, uses_left, labels, queues, created_at, revoked_at"
    };
}

/// Valid for `$1` (hash) at `$2` (now): unrevoked, unexpired, uses left.
macro_rules! registration_token_valid {
    () => {
        "token_hash = $1 AND revoked_at IS NULL
               AND (expires_at IS NULL OR expires_at > $2)
               AND (uses_left IS NULL OR uses_left > 0)"
    };
}

impl Store {
    /// The API token with this hash, unless revoked or expired at `now`.
    pub async fn api_token_by_hash(
        &self,
        hash: &[u8],
        now: DateTime<Utc>,
    ) -> Result<ApiTokenRecord, StoreError> {
        sqlx::query_as::<_, ApiTokenRecord>(concat!(
            "SELECT ",
            api_token_columns!(),
            " FROM api_tokens
             WHERE token_hash = $1 AND revoked_at IS NULL
               AND (expires_at IS NULL OR expires_at > $2)"
        ))
        .bind(hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }

    /// Stores a new API token by the hash of its secret.
    pub async fn api_token_insert(
        &self,
        token: &NewApiToken,
        hash: &[u8],
        now: DateTime<Utc>,
    ) -> Result<ApiTokenRecord, StoreError> {
        Ok(sqlx::query_as::<_, ApiTokenRecord>(concat!(
            "INSERT INTO api_tokens
                 (id, name, token_hash, scopes, created_at, expires_at, queues, labels,
                  max_priority)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             RETURNING ",
            api_token_columns!()
        ))
        .bind(Uuid::now_v7())
        .bind(&token.name)
        .bind(hash)
        .bind(&token.scopes)
        .bind(now)
        .bind(token.expires_at)
        .bind(&token.queues)
        .bind(&token.labels)
        .bind(token.max_priority)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Every API token, revoked ones included, newest first.
    pub async fn api_tokens(&self) -> Result<Vec<ApiTokenRecord>, StoreError> {
        Ok(sqlx::query_as::<_, ApiTokenRecord>(concat!(
            "SELECT ",
            api_token_columns!(),
            " FROM api_tokens ORDER BY id DESC"
        ))
        .fetch_all(&self.pool)
        .await?)
    }

    /// Revokes a token; `NotFound` if there is no such (unrevoked) token.
    pub async fn api_token_revoke(&self, id: Uuid, now: DateTime<Utc>) -> Result<(), StoreError> {
        self.end_once(
            "UPDATE api_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
            id,
            now,
        )
        .await
    }

    /// Stores a new registration token by the hash of its secret.
    pub async fn registration_token_insert(
        &self,
        hash: &[u8],
        token: &NewRegistrationToken,
        now: DateTime<Utc>,
    ) -> Result<RegistrationTokenRecord, StoreError> {
        Ok(sqlx::query_as::<_, RegistrationTokenRecord>(concat!(
            "INSERT INTO registration_tokens
                 (id, token_hash, name, expires_at, uses_left, labels, queues, created_at,
                  provisioner)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             RETURNING ",
            registration_token_columns!()
        ))
        .bind(Uuid::now_v7())
        .bind(hash)
        .bind(&token.name)
        .bind(token.expires_at)
        .bind(token.uses)
        .bind(&token.labels)
        .bind(&token.queues)
        .bind(now)
        .bind(&token.provisioner)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Every registration token, revoked, expired and used up ones included, newest first;
    /// not the one-use tokens provisioners make for the runners they start (one per
    /// runner, `GET /v1/provisioners` shows those runners).
    pub async fn registration_tokens(&self) -> Result<Vec<RegistrationTokenRecord>, StoreError> {
        Ok(sqlx::query_as::<_, RegistrationTokenRecord>(concat!(
            "SELECT ",
            registration_token_columns!(),
            " FROM registration_tokens WHERE provisioner IS NULL ORDER BY id DESC"
        ))
        .fetch_all(&self.pool)
        .await?)
    }

    /// Revokes a registration token; `NotFound` if there is no such (unrevoked) one.
    /// Runners that registered with it keep their own tokens.
    pub async fn registration_token_revoke(
        &self,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.end_once(
            "UPDATE registration_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
            id,
            now,
        )
        .await
    }

    /// Uses up one registration with this token if it is valid (unrevoked, unexpired,
    /// uses left) and allows what the runner claims, in one statement so two runners
    /// cannot take the last use. A refusal is explained after, from the row as it is
    /// then (a use taken meanwhile may make an out-of-scope answer a plain refusal).
    pub async fn registration_token_consume(
        &self,
        hash: &[u8],
        runner: Registering<'_>,
        now: DateTime<Utc>,
    ) -> Result<Registration, StoreError> {
        let used: Option<(Uuid, Option<String>)> = sqlx::query_as(concat!(
            "UPDATE registration_tokens SET uses_left = uses_left - 1 WHERE ",
            registration_token_valid!(),
            " AND (labels IS NULL OR $3::text[] <@ labels)
              AND (queues IS NULL OR (cardinality($4::text[]) > 0 AND $4::text[] <@ queues))
             RETURNING id, provisioner"
        ))
        .bind(hash)
        .bind(now)
        .bind(runner.labels)
        .bind(runner.queues)
        .fetch_optional(&self.pool)
        .await?;
        if let Some((token_id, provisioner)) = used {
            return Ok(Registration::Accepted {
                token_id,
                provisioner,
            });
        }
        let scope: Option<(Scope, Scope)> = sqlx::query_as(concat!(
            "SELECT labels, queues FROM registration_tokens WHERE ",
            registration_token_valid!()
        ))
        .bind(hash)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match scope {
            Some((labels, queues)) => Registration::OutOfScope { labels, queues },
            None => Registration::Refused,
        })
    }
}
