//! What every handler and service shares.

use crate::auth::{TokenCache, TokenHash};
use crate::config::ServeConfig;
use crate::dispatch::Dispatcher;
use crate::identity::NodeIdentity;
use crate::webhooks::Webhooks;
use baton_coord::{ClusterClock, Coord, WakeBus};
use baton_store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;

/// What the API's handlers share: the hot path's [`Dispatcher`], and what HTTP alone
/// needs (tokens, quotas of streams, the OpenAPI document, the shutdown signals). The
/// handles both use (the stores, the clock, the events) are cheap clones of the
/// dispatcher's.
#[derive(Clone)]
pub(crate) struct AppState {
    /// The hot path: submit, lease, start, report, finish, cancel.
    pub dispatcher: Dispatcher,
    pub config: Arc<ServeConfig>,
    pub identity: Arc<NodeIdentity>,
    pub store: Store,
    pub coord: Coord,
    pub wake: WakeBus,
    pub tokens: Arc<TokenCache>,
    pub bootstrap_api_token: Option<TokenHash>,
    pub bootstrap_registration_token: Option<TokenHash>,
    pub clocks: Arc<StalenessClocks>,
    /// The cluster's time (Redis's, counted on from the last sample): what every time
    /// another node may compare with is read from.
    pub clock: Arc<ClusterClock>,
    /// Completion webhooks' address policy, signing key and the client that sends them
    /// (the node makes no other outbound HTTP request a user can aim).
    pub webhooks: Arc<Webhooks>,
    /// Every queue's task defaults, as this node last read them (at most a second old).
    pub queue_defaults: Arc<crate::queue_defaults::QueueDefaultsCache>,
    /// Whether every live node opens sealed secrets yet (a rolling upgrade).
    pub sealing: Arc<crate::sealing_gate::SealingGate>,
    /// Log follow streams open on this node, per API token.
    pub follows: Arc<crate::quota::Quota<String>>,
    /// Event streams open on this node, per API token.
    pub subscriptions: Arc<crate::quota::Quota<String>>,
    /// Places for task lists that search text, which read more than any other request.
    pub text_searches: Arc<tokio::sync::Semaphore>,
    /// Turns to read the event history for subscribers catching up.
    pub catch_ups: Arc<crate::events::catch_ups::CatchUps>,
    /// The event history: what status changes and cluster news are appended to, and
    /// `GET /v1/events` reads.
    pub events: crate::events::EventLog,
    /// The OpenAPI document, set once the router (which generates it) is built.
    pub openapi: Arc<std::sync::OnceLock<serde_json::Value>>,
    /// Cancelled when the node begins to drain (SIGTERM): readiness fails, parked leases
    /// return empty, new ones are turned away, connections close after their answer.
    pub draining: CancellationToken,
    /// Cancelled when the node stops serving: the listener closes, services stop.
    pub shutdown: CancellationToken,
}

impl AppState {
    pub(crate) fn node_id(&self) -> String {
        self.identity.id()
    }
}

/// When runner staleness may be measured from: never before this node started, nor
/// before the end of its last Redis or Postgres outage (design.md §4.10).
///
/// During an outage, and from the moment this node's work saw Postgres fail until the
/// heartbeat has looked, no staleness is measured at all: runners may have been heard by
/// nobody (their requests failed), so a silence then says nothing about them, and the
/// reconciler must not act on it in the window between Postgres coming back and the
/// heartbeat noticing.
#[derive(Debug)]
pub struct StalenessClocks {
    since_ms: AtomicI64,
    in_outage: AtomicBool,
    /// `baton_store::unavailable_seen()` when the heartbeat last looked.
    postgres_failures_at_beat: AtomicU64,
}

impl StalenessClocks {
    /// The clocks of a node that starts at `now_ms`: no runner's silence is counted from
    /// before then, and Postgres failures seen before then are no news to its first beat.
    pub fn new(now_ms: i64) -> Self {
        StalenessClocks {
            since_ms: AtomicI64::new(now_ms),
            in_outage: AtomicBool::new(false),
            postgres_failures_at_beat: AtomicU64::new(baton_store::unavailable_seen()),
        }
    }

    fn since_ms(&self) -> i64 {
        self.since_ms.load(Ordering::Relaxed)
    }

    /// Where staleness is measured from at `now_ms`: `now_ms` itself (nothing is stale)
    /// while an outage is on or one was seen since the heartbeat last looked.
    pub fn measured_from_ms(&self, now_ms: i64) -> i64 {
        let failed_since_beat = baton_store::unavailable_seen()
            != self.postgres_failures_at_beat.load(Ordering::Relaxed);
        if self.in_outage() || failed_since_beat {
            now_ms
        } else {
            self.since_ms()
        }
    }

    /// For the heartbeat: whether Postgres failed this node's work since it last looked.
    pub fn postgres_failed_since_beat(&self) -> bool {
        let now = baton_store::unavailable_seen();
        self.postgres_failures_at_beat.swap(now, Ordering::Relaxed) != now
    }

    /// A Redis or Postgres check failed: runners may be shouting into the void.
    pub fn outage(&self) {
        self.in_outage.store(true, Ordering::Relaxed);
    }

    /// Both answer again: if that ends an outage, the clocks restart now.
    pub fn healthy(&self, now_ms: i64) {
        if self.in_outage.swap(false, Ordering::Relaxed) {
            self.since_ms.fetch_max(now_ms, Ordering::Relaxed);
        }
    }

    /// Whether an outage is on: the last check failed and none has passed since.
    pub fn in_outage(&self) -> bool {
        self.in_outage.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::StalenessClocks;

    #[test]
    fn nothing_is_stale_from_a_postgres_failure_until_the_heartbeat_has_seen_it_end() {
        let clocks = StalenessClocks::new(1_000);
        assert_eq!(clocks.measured_from_ms(5_000), 1_000);
        // The node's own work found Postgres away; the heartbeat has not looked yet.
        let _ = baton_store::StoreError::from(sqlx::Error::PoolTimedOut);
        assert_eq!(clocks.measured_from_ms(5_000), 5_000);
        assert!(clocks.postgres_failed_since_beat());
        clocks.outage();
        assert_eq!(clocks.measured_from_ms(6_000), 6_000, "during the outage");
        clocks.healthy(7_000);
        assert_eq!(
            clocks.measured_from_ms(9_000),
            7_000,
            "from the outage's end"
        );
    }
}
