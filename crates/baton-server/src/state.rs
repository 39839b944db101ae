//! What every handler shares.

use crate::auth::{TokenCache, TokenHash};
use crate::config::ServeConfig;
use baton_coord::{Coord, NodeInfo, WakeBus};
use baton_store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<ServeConfig>,
    pub node: Arc<NodeInfo>,
    pub store: Store,
    pub coord: Coord,
    pub wake: WakeBus,
    pub tokens: Arc<TokenCache>,
    pub bootstrap_api_token: Option<TokenHash>,
    pub bootstrap_registration_token: Option<TokenHash>,
    /// When this node last refreshed its liveness key (ms since the epoch, 0 = never).
    pub last_beat_ms: Arc<AtomicI64>,
    /// Cancelled when the node begins shutting down: parked requests return at once.
    pub shutdown: CancellationToken,
}

impl AppState {
    /// Whether the node's liveness key is known to be current.
    pub fn is_registered(&self, now_ms: i64) -> bool {
        let last = self.last_beat_ms.load(Ordering::Relaxed);
        last > 0 && now_ms - last < self.config.node_ttl_ms as i64
    }
}
