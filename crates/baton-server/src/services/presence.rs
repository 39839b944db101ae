//! The presence flusher: runners' last-seen times and boot ids live in Redis (an idle
//! poll costs no Postgres write) and are copied to Postgres every few seconds, in one
//! statement for all runners, by whichever node holds the lock. After Redis loses its
//! data, the reconciler still knows when each runner was last heard from.

use super::ServiceError;
use crate::state::AppState;
use chrono::{TimeZone, Utc};
use std::time::Duration;
use uuid::Uuid;

pub struct PresenceFlusher {
    state: AppState,
}

impl PresenceFlusher {
    pub fn new(state: AppState) -> Self {
        PresenceFlusher { state }
    }

    fn interval(&self) -> Duration {
        Duration::from_millis(self.state.config.timings.presence_flush_ms)
    }

    pub async fn run(self) {
        let shutdown = self.state.shutdown.clone();
        super::every(self.interval(), shutdown, || async {
            if let Err(e) = self.run_once().await {
                tracing::warn!(error = %e, "presence flush failed");
            }
        })
        .await;
    }

    /// Copies presence to Postgres if no other node is doing it now. Returns how many
    /// runner rows moved.
    pub async fn run_once(&self) -> Result<u64, ServiceError> {
        let state = &self.state;
        let owner = format!("{}:{}", state.node_id(), Uuid::new_v4());
        let Some(lock) = state
            .coord
            // Lapses a little before this node's next tick: the node that took it keeps
            // the turn while it lives.
            .lock_acquire("presence", &owner, self.interval().mul_f64(0.9))
            .await?
        else {
            return Ok(0);
        };
        let seen: Vec<_> = state
            .coord
            .presence_all()
            .await?
            .into_iter()
            .filter_map(|(runner, at, boot)| {
                Some((runner, Utc.timestamp_millis_opt(at).single()?, boot))
            })
            .collect();
        let moved = state.store.runners_touch(&seen).await?;
        // The lock lapses by itself at the next interval; releasing it early would let a
        // second node flush again right away.
        drop(lock);
        Ok(moved)
    }
}
