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

use crate::identity::NodeIdentity;
use crate::state::{AppState, StalenessClocks};
use baton_coord::{ClusterClock, Coord};
use baton_store::Store;
use chrono::DateTime;
use chrono::Utc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LivenessReport {
    pub refreshed: bool,
    /// The node took a new id this time.
    pub rotated: bool,
}

pub(crate) struct LivenessKeeper {
    /// The TTL of the liveness key; refreshed every third of it.
    ttl: Duration,
    identity: Arc<NodeIdentity>,
    coord: Coord,
    store: Store,
    clocks: Arc<StalenessClocks>,
    /// Set from Redis's at every beat.
    clock: Arc<ClusterClock>,
}

impl LivenessKeeper {
    /// The keeper of `state`'s node, holding only the handles a beat uses.
    pub(crate) fn of(state: &AppState) -> Self {
        LivenessKeeper {
            ttl: state.config.node_ttl(),
            identity: state.identity.clone(),
            coord: state.coord.clone(),
            store: state.store.clone(),
            clocks: state.clocks.clone(),
            clock: state.clock.clone(),
        }
    }

    pub(crate) fn interval(&self) -> Duration {
        self.ttl / 3
    }

    /// One beat at `now` (the wall clock: a rotated id's start time, and where the
    /// staleness clocks restart after an outage). Whether the key still lives is counted
    /// on the monotonic clock, from when each refresh was sent.
    pub(crate) async fn run_once(&self, now: DateTime<Utc>) -> LivenessReport {
        let identity = &self.identity;
        let now_ms = now.timestamp_millis();
        let sent = Instant::now();
        let had_beaten = identity.has_beaten();
        let mut rotated = false;
        if had_beaten && !identity.is_live() {
            let old = identity.id();
            let new = identity.rotate(now_ms);
            tracing::warn!(node.old_id = %old, node.id = %new.id, "liveness lapsed: rejoining under a new id");
            rotated = true;
        }
        let info = identity.current();
        let beat = self.coord.node_beat(&info, self.ttl).await;
        if beat.is_ok()
            && let Err(e) = self.clock.sync(&self.coord).await
        {
            tracing::debug!(error = %e, "the cluster's clock not read this beat");
        }
        if self.clocks.postgres_failed_since_beat() {
            self.clocks.outage();
        }
        let postgres = if self.clocks.in_outage() {
            // Within half a beat: a Postgres that hangs must not hold up the next Redis
            // refresh past the node's TTL. Too slow to answer is still out.
            let patience = self.interval() / 2;
            tokio::time::timeout(patience, self.store.ping())
                .await
                .unwrap_or_else(|_| {
                    Err(baton_store::StoreError::Unavailable(format!(
                        "no answer within {patience:?}"
                    )))
                })
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
                    let _ = self.coord.node_leave(&info.id).await;
                    // The new id is live only once a refresh of it lands.
                    let sent = Instant::now();
                    let landed = self.coord.node_beat(&new, self.ttl).await.is_ok();
                    if landed {
                        identity.beat_succeeded(sent);
                    }
                    landed
                } else {
                    identity.beat_succeeded(sent);
                    true
                }
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
            self.clocks.healthy(now_ms);
        } else {
            self.clocks.outage();
        }
        LivenessReport { refreshed, rotated }
    }

    /// Beats until shutdown.
    pub(crate) async fn run(self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticker.tick() => { self.run_once(self.clock.now()).await; }
            }
        }
    }
}
