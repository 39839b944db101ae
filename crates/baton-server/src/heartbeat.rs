//! The node's liveness: refresh `node:<id>` every third of `node_ttl`, so one missed
//! refresh never lets it expire — and notice when it did.
//!
//! A refresh that finds the key gone, or comes more than `node_ttl` after the last good
//! one (the process was paused, or Redis was unreachable), means others may have declared
//! this node dead and adopted its claims: it takes a new id and starts over. Each beat
//! also checks Postgres, so the staleness clocks restart after either outage.

use crate::state::AppState;
use chrono::Utc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReport {
    pub refreshed: bool,
    /// The node took a new id this time.
    pub rotated: bool,
}

pub struct Heartbeat {
    state: AppState,
}

impl Heartbeat {
    pub fn new(state: AppState) -> Self {
        Heartbeat { state }
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
        let postgres = self.state.store.ping().await;
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
