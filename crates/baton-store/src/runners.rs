//! The runner table. Runners are looked up by token hash on every runner request, but
//! the server caches the answer: an idle runner costs no Postgres query per poll.

use crate::Store;
use crate::error::StoreError;
use crate::statuses::sql_list;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A runner to register.
#[derive(Debug, Clone)]
pub struct NewRunner {
    /// Its id.
    pub id: RunnerId,
    /// Its name, for operators.
    pub name: String,
    /// The labels it offers.
    pub labels: Vec<String>,
    /// The queues it serves (empty: every queue).
    pub queues: Vec<String>,
    /// How many tasks it runs at once.
    pub capacity: i32,
    /// The SHA-256 of its token.
    pub token_hash: Vec<u8>,
    /// Its agent's release.
    pub version: String,
    /// The registration token it registered with, when one created through the API.
    pub registration_token_id: Option<Uuid>,
    /// The provisioner that started it (an ephemeral runner on demand).
    pub provisioner: Option<String>,
}

/// A runner as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunnerRecord {
    /// Its id.
    pub id: RunnerId,
    /// Its name, for operators.
    pub name: String,
    /// The labels it offers.
    pub labels: Vec<String>,
    /// The queues it serves (empty: every queue).
    pub queues: Vec<String>,
    /// How many tasks it runs at once.
    pub capacity: i32,
    /// Its agent's release.
    pub version: String,
    /// The agent process it last ran as (a UUIDv7 per start).
    pub boot_id: Option<Uuid>,
    /// Whether it is paused: it leases nothing.
    pub paused: bool,
    /// When it registered.
    pub created_at: DateTime<Utc>,
    /// When it was last heard, as copied from presence.
    pub last_seen: Option<DateTime<Utc>>,
    /// When an operator deleted it.
    pub deleted_at: Option<DateTime<Utc>>,
    /// The provisioner that started it, on demand; `None`: started by hand.
    pub provisioner: Option<String>,
}

/// The columns of [`RunnerRecord`] (the token hash is never read back).
macro_rules! runner_columns {
    () => {
        "id, name, labels, queues, capacity, version, boot_id, paused, created_at, last_seen, deleted_at, provisioner"
    };
}

impl Store {
    /// Registers `runner` at `now`; `NotFound` when the registration token it used was
    /// revoked after its use was taken.
    pub async fn runner_insert(
        &self,
        runner: &NewRunner,
        now: DateTime<Utc>,
    ) -> Result<RunnerRecord, StoreError> {
        // Not with a token revoked since its use was taken (a provisioner's attempt that
        // began to fail in between): `NotFound`, and the runner is refused.
        sqlx::query_as::<_, RunnerRecord>(concat!(
            "INSERT INTO runners (id, name, labels, queues, capacity, token_hash, version, created_at,
                                  registration_token_id, provisioner)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10
             WHERE NOT EXISTS (SELECT 1 FROM registration_tokens
                               WHERE id = $9 AND revoked_at IS NOT NULL)
             RETURNING ",
            runner_columns!()
        ))
        .bind(runner.id)
        .bind(&runner.name)
        .bind(&runner.labels)
        .bind(&runner.queues)
        .bind(runner.capacity)
        .bind(&runner.token_hash)
        .bind(&runner.version)
        .bind(now)
        .bind(runner.registration_token_id)
        .bind(&runner.provisioner)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }

    /// The live (not deleted) runner holding this token.
    pub async fn runner_by_token_hash(&self, hash: &[u8]) -> Result<RunnerRecord, StoreError> {
        sqlx::query_as::<_, RunnerRecord>(concat!(
            "SELECT ",
            runner_columns!(),
            " FROM runners WHERE token_hash = $1 AND deleted_at IS NULL"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }

    /// Records when runners were last heard from, and under which boot: presence lives
    /// in Redis and is flushed here in batches, one statement for all of them, so it
    /// survives Redis losing its data without costing a write per poll.
    pub async fn runners_touch(
        &self,
        seen: &[(RunnerId, DateTime<Utc>, Uuid)],
    ) -> Result<u64, StoreError> {
        if seen.is_empty() {
            return Ok(0);
        }
        let ids: Vec<RunnerId> = seen.iter().map(|s| s.0).collect();
        let at: Vec<DateTime<Utc>> = seen.iter().map(|s| s.1).collect();
        let boots: Vec<Uuid> = seen.iter().map(|s| s.2).collect();
        let done = sqlx::query(
            "UPDATE runners r SET last_seen = v.seen, boot_id = v.boot
             FROM UNNEST($1::uuid[], $2::timestamptz[], $3::uuid[]) AS v(id, seen, boot)
             WHERE r.id = v.id AND (r.last_seen IS NULL OR r.last_seen < v.seen)",
        )
        .bind(&ids)
        .bind(&at)
        .bind(&boots)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    /// The rows of `ids` that exist, deleted ones included.
    pub async fn runners_by_ids(&self, ids: &[RunnerId]) -> Result<Vec<RunnerRecord>, StoreError> {
        Ok(sqlx::query_as::<_, RunnerRecord>(concat!(
            "SELECT ",
            runner_columns!(),
            " FROM runners WHERE id = ANY($1)"
        ))
        .bind(ids)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Live (not deleted) runners, oldest first, with how many tasks each holds now.
    pub async fn runners_list(&self) -> Result<Vec<(RunnerRecord, i64)>, StoreError> {
        let runners = sqlx::query_as::<_, RunnerRecord>(concat!(
            "SELECT ",
            runner_columns!(),
            " FROM runners WHERE deleted_at IS NULL ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await?;
        let sql = format!(
            "SELECT runner_id, count(*) FROM tasks
             WHERE status IN ({}) AND runner_id IS NOT NULL
             GROUP BY runner_id",
            sql_list(TaskStatus::DISPATCHED)
        );
        let counts: Vec<(RunnerId, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        Ok(runners
            .into_iter()
            .map(|r| {
                let n = counts.iter().find(|(id, _)| *id == r.id).map_or(0, |c| c.1);
                (r, n)
            })
            .collect())
    }

    /// Marks a runner deleted: its token stops working and the reconciler takes its
    /// tasks back; the provisioner that started it, if one did. `NotFound` if it does not
    /// exist or is already deleted.
    pub async fn runner_delete(
        &self,
        id: RunnerId,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, StoreError> {
        let deleted: Option<(Option<String>,)> = sqlx::query_as(
            "UPDATE runners SET deleted_at = $2 WHERE id = $1 AND deleted_at IS NULL
             RETURNING provisioner",
        )
        .bind(id.uuid())
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        deleted
            .map(|(provisioner,)| provisioner)
            .ok_or(StoreError::NotFound)
    }

    /// Pauses or resumes the runner `id`.
    pub async fn runner_set_paused(
        &self,
        id: RunnerId,
        paused: bool,
    ) -> Result<RunnerRecord, StoreError> {
        sqlx::query_as::<_, RunnerRecord>(concat!(
            "UPDATE runners SET paused = $2 WHERE id = $1 AND deleted_at IS NULL RETURNING ",
            runner_columns!()
        ))
        .bind(id)
        .bind(paused)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound)
    }
}
