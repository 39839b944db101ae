//! After Redis loses its data — a restart without persistence, FLUSHALL, a Sentinel
//! failover that dropped the last writes — the generation marker is gone. The first node
//! to notice takes the rebuild lock and rebuilds queues, claims and the delayed set from
//! Postgres, then writes a new marker, last. Until the marker is back, others wait for
//! it rather than rebuild twice. The marker carries the rebuild time: runner presence was
//! lost with the data, so staleness clocks restart from it.

use super::ServiceError;
use super::repairer::{Mode, RepairReport, Repairer};
use super::service::Service;
use crate::identity::NodeIdentity;
use baton_coord::{Coord, Epoch};
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// How long a rebuild may hold its lock before another node may try.
const REBUILD_LOCK: Duration = Duration::from_secs(300);

/// Watches for Redis having lost its data and rebuilds it from Postgres, on one node.
pub struct Rebuilder {
    /// How often the marker is looked at.
    interval: Duration,
    identity: Arc<NodeIdentity>,
    coord: Coord,
    /// Its walk, without grace, is the rebuild.
    repairer: Repairer,
}

impl Rebuilder {
    /// A rebuilder looking at the marker every `interval`, rebuilding with `repairer`'s
    /// walk.
    pub fn new(
        interval: Duration,
        identity: Arc<NodeIdentity>,
        coord: Coord,
        repairer: Repairer,
    ) -> Self {
        Rebuilder {
            interval,
            identity,
            coord,
            repairer,
        }
    }

    /// Rebuilds if the marker is missing and no one else is at it. `Some` when this node
    /// rebuilt.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<Option<RepairReport>, ServiceError> {
        if self.coord.epoch_get().await?.is_some() {
            return Ok(None);
        }
        let owner = format!("{}:{}", self.identity.id(), Uuid::new_v4());
        let Some(lock) = self
            .coord
            .lock_acquire("rebuild", &owner, REBUILD_LOCK)
            .await?
        else {
            return Ok(None);
        };
        // Someone may have finished between our look and our lock.
        if self.coord.epoch_get().await?.is_some() {
            let _ = self.coord.lock_release(&lock).await;
            return Ok(None);
        }
        tracing::warn!(node.id = %self.identity.id(), "redis generation marker missing: rebuilding from postgres");
        let rebuilt = self.repairer.run_once(now, Mode::Rebuild).await;
        if rebuilt.is_ok() {
            let epoch = Epoch {
                id: Uuid::new_v4(),
                since_ms: now.timestamp_millis(),
            };
            if !self.coord.epoch_set_holding(&lock, epoch).await? {
                // Redis lost its data again mid-rebuild (the lock went with it): what
                // was rebuilt is gone, and the next pass starts over.
                tracing::warn!("redis lost its data during the rebuild; rebuilding again");
                return Ok(None);
            }
            crate::metrics::redis_rebuilt();
        }
        let _ = self.coord.lock_release(&lock).await;
        rebuilt.map(Some)
    }
}

impl Service for Rebuilder {
    const NAME: &'static str = "rebuilder";
    type Report = Option<RepairReport>;

    async fn pass(&self, now: DateTime<Utc>) -> Result<Option<RepairReport>, ServiceError> {
        self.run_once(now).await
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn tell(&self, report: &Option<RepairReport>) {
        if let Some(report) = report {
            tracing::warn!(?report, "rebuilt redis from postgres");
        }
    }
}
