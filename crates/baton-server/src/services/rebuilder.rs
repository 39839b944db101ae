//! After Redis loses its data — a restart without persistence, FLUSHALL, a Sentinel
//! failover that dropped the last writes — the generation marker is gone. The first node
//! to notice takes the rebuild lock and rebuilds queues, claims and the delayed set from
//! Postgres, then writes a new marker, last. Until the marker is back, others wait for
//! it rather than rebuild twice. The marker carries the rebuild time: runner presence was
//! lost with the data, so staleness clocks restart from it.

use super::ServiceError;
use super::repairer::{Mode, RepairReport, Repairer};
use crate::state::AppState;
use baton_coord::Epoch;
use chrono::{DateTime, Utc};
use std::time::Duration;
use uuid::Uuid;

/// How long a rebuild may hold its lock before another node may try.
const REBUILD_LOCK: Duration = Duration::from_secs(300);

pub struct Rebuilder {
    state: AppState,
    repairer: Repairer,
}

impl Rebuilder {
    pub fn new(state: AppState) -> Self {
        Rebuilder {
            repairer: Repairer::new(state.clone()),
            state,
        }
    }

    pub async fn run(self) {
        let interval = self.state.config.node_ttl() / 3;
        let shutdown = self.state.shutdown.clone();
        super::every(interval, shutdown, || async {
            match self.run_once(Utc::now()).await {
                Ok(Some(report)) => tracing::warn!(?report, "rebuilt redis from postgres"),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "redis rebuild check failed"),
            }
        })
        .await;
    }

    /// Rebuilds if the marker is missing and no one else is at it. `Some` when this node
    /// rebuilt.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<Option<RepairReport>, ServiceError> {
        let state = &self.state;
        if state.coord.epoch_get().await?.is_some() {
            return Ok(None);
        }
        let owner = format!("{}:{}", state.node_id(), Uuid::new_v4());
        let Some(lock) = state
            .coord
            .lock_acquire("rebuild", &owner, REBUILD_LOCK)
            .await?
        else {
            return Ok(None);
        };
        // Someone may have finished between our look and our lock.
        if state.coord.epoch_get().await?.is_some() {
            let _ = state.coord.lock_release(&lock).await;
            return Ok(None);
        }
        tracing::warn!(node.id = %state.node_id(), "redis generation marker missing: rebuilding from postgres");
        let rebuilt = self.repairer.run_once(now, Mode::Rebuild).await;
        if rebuilt.is_ok() {
            state
                .coord
                .epoch_set(Epoch {
                    id: Uuid::new_v4(),
                    since_ms: now.timestamp_millis(),
                })
                .await?;
            crate::metrics::redis_rebuilt();
        }
        let _ = state.coord.lock_release(&lock).await;
        rebuilt.map(Some)
    }
}
