//! The presence flusher: runners' last-seen times and boot ids live in Redis (an idle
//! poll costs no Postgres write) and are copied to Postgres every few seconds, in one
//! statement for all runners, by whichever node holds the lock. After Redis loses its
//! data, the reconciler still knows when each runner was last heard from.

use super::ServiceError;
use super::service::Service;
use crate::identity::NodeIdentity;
use baton_coord::Coord;
use baton_store::Store;
use chrono::DateTime;
use chrono::{TimeZone, Utc};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Copies the runners' presence from Redis to Postgres, one node at a time.
pub struct PresenceFlusher {
    interval: Duration,
    identity: Arc<NodeIdentity>,
    coord: Coord,
    store: Store,
}

impl PresenceFlusher {
    /// A flusher taking its turn every `interval`, as the node `identity`.
    pub fn new(
        interval: Duration,
        identity: Arc<NodeIdentity>,
        coord: Coord,
        store: Store,
    ) -> Self {
        PresenceFlusher {
            interval,
            identity,
            coord,
            store,
        }
    }

    /// Copies presence to Postgres if no other node is doing it now. Returns how many
    /// runner rows moved.
    pub async fn run_once(&self) -> Result<u64, ServiceError> {
        let owner = format!("{}:{}", self.identity.id(), Uuid::new_v4());
        let Some(lock) = self
            .coord
            // Lapses a little before this node's next tick: the node that took it keeps
            // the turn while it lives.
            .lock_acquire("presence", &owner, self.interval.mul_f64(0.9))
            .await?
        else {
            return Ok(0);
        };
        let seen: Vec<_> = self
            .coord
            .presence_all()
            .await?
            .into_iter()
            .filter_map(|(runner, at, boot)| {
                Some((runner, Utc.timestamp_millis_opt(at).single()?, boot))
            })
            .collect();
        let moved = self.store.runners_touch(&seen).await?;
        // The lock lapses by itself at the next interval; releasing it early would let a
        // second node flush again right away.
        drop(lock);
        Ok(moved)
    }
}

impl Service for PresenceFlusher {
    const NAME: &'static str = "presence flusher";
    type Report = u64;

    async fn pass(&self, now: DateTime<Utc>) -> Result<u64, ServiceError> {
        let _ = now;
        self.run_once().await
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}
