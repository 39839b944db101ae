//! The generation marker. It is written last by a full rebuild from Postgres; when it is
//! missing, Redis lost its data (a restart without persistence, FLUSHALL, a failover that
//! dropped the last writes) and must be rebuilt before anyone trusts what it holds.

use crate::{Coord, CoordError};
use uuid::Uuid;

/// One generation of Redis state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    pub id: Uuid,
    /// When it was (re)built: staleness clocks start no earlier, since presence kept in
    /// Redis was lost with the data.
    pub since_ms: i64,
}

impl Coord {
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

    pub async fn epoch_set(&self, epoch: Epoch) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        redis::cmd("SET")
            .arg(self.keys.epoch())
            .arg(format!("{}|{}", epoch.id, epoch.since_ms))
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }
}
