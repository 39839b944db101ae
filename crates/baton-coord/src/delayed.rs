//! Scheduled tasks (a `run_at` in the future, or a retry's backoff) wait in a sorted set
//! by due time, so promoting them costs Postgres nothing until one is due. Postgres stays
//! the authority: the repair pass also promotes overdue rows Redis forgot.

use crate::queue::parse_uuid;
use crate::{Coord, CoordError};
use redis::Script;
use std::sync::LazyLock;
use uuid::Uuid;

static POP_DUE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/delayed_pop_due.lua")));

impl Coord {
    /// Adds `(task, run_at_ms)` pairs to the delayed set, for the promoter to queue when due.
    pub async fn delayed_add(&self, tasks: &[(Uuid, i64)]) -> Result<(), CoordError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (id, run_at_ms) in tasks {
            pipe.zadd(self.keys.delayed(), id.to_string(), *run_at_ms)
                .ignore();
        }
        let mut conn = self.conn().await?;
        pipe.query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Removes tasks from the delayed set (cancelled while waiting).
    pub async fn delayed_remove(&self, tasks: &[Uuid]) -> Result<(), CoordError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn().await?;
        redis::cmd("ZREM")
            .arg(self.keys.delayed())
            .arg(tasks.iter().map(Uuid::to_string).collect::<Vec<_>>())
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    /// Takes up to `limit` entries due by `now_ms`, atomically.
    pub async fn delayed_pop_due(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<Uuid>, CoordError> {
        let mut conn = self.conn().await?;
        let ids: Vec<String> = POP_DUE
            .key(self.keys.delayed())
            .arg(now_ms)
            .arg(limit)
            .invoke_async(&mut conn)
            .await?;
        ids.iter().map(|s| parse_uuid(s)).collect()
    }
}
