//! The node's liveness: refresh `node:<id>` every third of `node_ttl`, so one missed
//! refresh never lets the key expire.

use crate::state::AppState;
use chrono::Utc;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatReport {
    pub refreshed: bool,
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
        let now_ms = Utc::now().timestamp_millis();
        match self
            .state
            .coord
            .node_beat(&self.state.node, self.state.config.node_ttl())
            .await
        {
            Ok(()) => {
                self.state.last_beat_ms.store(now_ms, Ordering::Relaxed);
                HeartbeatReport { refreshed: true }
            }
            Err(e) => {
                tracing::warn!(error = %e, node.id = %self.state.node.id, "liveness refresh failed");
                HeartbeatReport { refreshed: false }
            }
        }
    }

    /// Beats until shutdown, then removes the liveness key so the others need not wait
    /// for it to expire.
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
