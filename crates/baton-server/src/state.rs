//! What every handler and service shares.

use crate::auth::{TokenCache, TokenHash};
use crate::config::ServeConfig;
use crate::dispatch::lease::KnownEmpty;
use crate::identity::NodeIdentity;
use crate::presence::PresenceBuffer;
use baton_coord::{Coord, WakeBus};
use baton_store::{GroupCommit, Store};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<ServeConfig>,
    pub identity: Arc<NodeIdentity>,
    pub store: Store,
    /// Every hot-path write goes through here: one transaction for what concurrent
    /// requests want written.
    pub commit: GroupCommit,
    pub coord: Coord,
    /// Runners heard by this node, written to Redis once per interval.
    pub presence: Arc<PresenceBuffer>,
    /// Label sets the lease script last found nothing for (idle polls skip Redis).
    pub known_empty: Arc<KnownEmpty>,
    pub wake: WakeBus,
    pub tokens: Arc<TokenCache>,
    pub bootstrap_api_token: Option<TokenHash>,
    pub bootstrap_registration_token: Option<TokenHash>,
    pub clocks: Arc<StalenessClocks>,
    pub http: reqwest::Client,
    /// The OpenAPI document, set once the router (which generates it) is built.
    pub openapi: Arc<std::sync::OnceLock<serde_json::Value>>,
    /// Cancelled when the node begins to drain (SIGTERM): readiness fails, parked leases
    /// return empty, new ones are turned away, connections close after their answer.
    pub draining: CancellationToken,
    /// Cancelled when the node stops serving: the listener closes, services stop.
    pub shutdown: CancellationToken,
}

impl AppState {
    pub fn node_id(&self) -> String {
        self.identity.id()
    }
}

/// When runner staleness may be measured from: never before this node started, nor
/// before the end of its last Redis or Postgres outage (design.md §4.10).
#[derive(Debug)]
pub struct StalenessClocks {
    since_ms: AtomicI64,
    in_outage: AtomicBool,
}

impl StalenessClocks {
    pub fn new(now_ms: i64) -> Self {
        StalenessClocks {
            since_ms: AtomicI64::new(now_ms),
            in_outage: AtomicBool::new(false),
        }
    }

    pub fn since_ms(&self) -> i64 {
        self.since_ms.load(Ordering::Relaxed)
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

    pub fn in_outage(&self) -> bool {
        self.in_outage.load(Ordering::Relaxed)
    }
}
