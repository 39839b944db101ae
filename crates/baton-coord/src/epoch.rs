//! The generation marker. It is written last by a full rebuild from Postgres; when it is
//! missing, Redis lost its data (a restart without persistence, FLUSHALL, a failover that
//! dropped the last writes) and must be rebuilt before anyone trusts what it holds.

use crate::{Coord, CoordError, Lock};
use redis::Script;
use std::sync::LazyLock;
use uuid::Uuid;

static SET_HOLDING: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/epoch_set_holding.lua")));

/// One generation of Redis state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    /// The generation's id: a new one each time Redis's data is (re)built.
    pub id: Uuid,
    /// When it was (re)built: staleness clocks start no earlier, since presence kept in
    /// Redis was lost with the data.
    pub since_ms: i64,
}

impl Coord {
    /// The current generation, if Redis holds one.
    pub async fn epoch_get(&self) -> Result<Option<Epoch>, CoordError> {
        let mut conn = self.conn().await?;
        let value: Option<String> = redis::cmd("GET")
            .arg(self.keys.epoch())
            .query_async(&mut conn)
            .await?;
        Ok(value.and_then(|v| {
            let (id, since) = v.split_once('|')?;
            Some(Epoch {
                id: Uuid::parse_str(id).ok()?,
                since_ms: since.parse().ok()?,
            })
        }))
    }

    /// Writes `epoch` if `lock` (the rebuild's) is still held: `false` when Redis lost it
    /// — its data went again during the rebuild — and the marker stays missing.
    pub async fn epoch_set_holding(&self, lock: &Lock, epoch: Epoch) -> Result<bool, CoordError> {
        let mut conn = self.conn().await?;
        let set: i32 = SET_HOLDING
            .key(&lock.key)
            .key(self.keys.epoch())
            .arg(&lock.owner)
            .arg(format!("{}|{}", epoch.id, epoch.since_ms))
            .invoke_async(&mut conn)
            .await?;
        Ok(set == 1)
    }
}
