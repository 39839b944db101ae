//! The node's liveness: refresh `node:<id>` every third of `node_ttl`, so one missed
//! refresh never lets it expire — and notice when it did.
//!
//! A refresh that finds the key gone, or comes more than `node_ttl` after the last good
//! one (the process was paused, or Redis was unreachable), means others may have declared
//! this node dead and adopted its claims: it takes a new id and starts over.
//!
//! The staleness clocks restart after an outage of either store. Redis is asked every
//! beat anyway; Postgres only when there is cause — this node's own work found it
//! unavailable since the last beat, or an outage is on and the beat looks for its end —
//! so an idle cluster costs Postgres nothing here.

use crate::state::AppState;
use chrono::Utc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReport {
    pub refreshed: bool,
    /// The node took a new id this time.
    pub rotated: bool,
}

pub struct Heartbeat {
    state: AppState,
    /// `baton_store::unavailable_seen()` at the last beat.
    postgres_failures: AtomicU64,
}

impl Heartbeat {
    pub fn new(state: AppState) -> Self {
        Heartbeat {
            state,
            postgres_failures: AtomicU64::new(baton_store::unavailable_seen()),
        }
    }

    /// Whether Postgres failed this node's work since the last beat.
    fn postgres_failed_since(&self) -> bool {
        let now = baton_store::unavailable_seen();
        self.postgres_failures.swap(now, Ordering::Relaxed) != now
    }

    pub fn interval(&self) -> Duration {
        self.state.config.node_ttl() / 3
    }

    pub async fn run_once(&self) -> HeartbeatReport {
        let identity = &self.state.identity;
        let now_ms = Utc::now().timestamp_millis();
        let had_beaten = identity.last_beat_ms() > 0;
        let mut rotated = false;
        if had_beaten && !identity.is_live(now_ms) {
            let old = identity.id();
            let new = identity.rotate(now_ms);
            tracing::warn!(node.old_id = %old, node.id = %new.id, "liveness lapsed: rejoining under a new id");
            rotated = true;
        }
        let info = identity.current();
        let beat = self
            .state
            .coord
            .node_beat(&info, self.state.config.node_ttl())
            .await;
        let postgres_failed = self.postgres_failed_since();
        if postgres_failed {
            self.state.clocks.outage();
        }
        let postgres = if postgres_failed || self.state.clocks.in_outage() {
            self.state.store.ping().await
        } else {
            Ok(())
        };
        let refreshed = match beat {
            Ok(existed) => {
                if had_beaten && !rotated && !existed {
                    // Our key expired (or Redis lost it): we may have been declared dead.
                    let new = identity.rotate(now_ms);
                    tracing::warn!(node.old_id = %info.id, node.id = %new.id, "liveness key was gone: rejoining under a new id");
                    rotated = true;
                    // The refresh just re-created the old key; do not let it look alive.
                    let _ = self.state.coord.node_leave(&info.id).await;
                    let _ = self
                        .state
                        .coord
                        .node_beat(&new, self.state.config.node_ttl())
                        .await;
                }
                identity.beat_succeeded(now_ms);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, node.id = %info.id, "liveness refresh failed");
                false
            }
        };
        if let Err(e) = &postgres {
            tracing::warn!(error = %e, "postgres check failed");
        }
        if refreshed && postgres.is_ok() {
            self.state.clocks.healthy(now_ms);
        } else {
            self.state.clocks.outage();
        }
        HeartbeatReport { refreshed, rotated }
    }

    /// Beats until shutdown.
    pub async fn run(self) {
        let mut ticker = tokio::time::interval(self.interval());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = self.state.shutdown.cancelled() => break,
                _ = ticker.tick() => { self.run_once().await; }
            }
        }
    }
}
