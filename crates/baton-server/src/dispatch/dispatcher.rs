//! What the hot path works with, built once per node: the stores and the group commit,
//! the cluster's clock, the node's identity, what the node remembers to spare Redis
//! (queues known empty, queues known to exist), the secrets keyring, the event history,
//! the wake-up fan-out and the parked requests. Handlers and the schedule service hold
//! it; nothing in it knows HTTP.

use super::finish::ServerFinalizer;
use super::lease::KnownEmpty;
use super::queue_caps::KnownQueues;
use crate::config::ServeConfig;
use crate::events::EventLog;
use crate::identity::NodeIdentity;
use crate::presence::PresenceBuffer;
use crate::quota::Quota;
use crate::secrets::SecretsKeyring;
use baton_coord::{ClusterClock, Coord, WakeBus};
use baton_core::RunnerId;
use baton_store::{GroupCommit, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Clone)]
pub(crate) struct Dispatcher {
    /// The node's settings: the limits, the timings, the test-only fault.
    pub config: Arc<ServeConfig>,
    pub identity: Arc<NodeIdentity>,
    pub store: Store,
    /// Every hot-path write goes through here: one transaction for what concurrent
    /// requests want written.
    pub commit: GroupCommit,
    pub coord: Coord,
    /// The cluster's time (Redis's, counted on from the last sample): what every time
    /// another node may compare with is read from.
    pub clock: Arc<ClusterClock>,
    /// Runners heard by this node, written to Redis once per interval.
    pub presence: Arc<PresenceBuffer>,
    /// Label sets the lease script last found nothing for (idle polls skip Redis).
    pub known_empty: Arc<KnownEmpty>,
    /// Queue keys seen with work lately: a submit to them skips the queue caps' check.
    pub known_queues: Arc<KnownQueues>,
    pub wake: WakeBus,
    /// What opens `secret_env` for the runner that starts the task; `None`: the cluster
    /// has no key, and takes no secrets.
    pub secrets: Option<Arc<SecretsKeyring>>,
    /// The event history: what status changes are appended to.
    pub events: EventLog,
    /// Lease requests parked on this node, per runner.
    pub parks: Arc<Quota<RunnerId>>,
    /// Cancelled when the node begins to drain: parked leases return empty, new ones
    /// are turned away.
    pub draining: CancellationToken,
}

impl Dispatcher {
    pub(crate) fn node_id(&self) -> String {
        self.identity.id()
    }

    /// What claims dispatched runs whose claims Redis lost, for this node.
    pub(crate) fn claimer(&self) -> crate::reclaim::Claimer<'_> {
        crate::reclaim::Claimer {
            store: &self.store,
            coord: &self.coord,
            node: self.node_id(),
        }
    }

    /// What ends runs under the server's own verdict, with this node's handles.
    pub(crate) fn finalizer(&self) -> ServerFinalizer {
        ServerFinalizer::new(
            self.commit.clone(),
            self.coord.clone(),
            self.identity.clone(),
            Duration::from_millis(self.config.timings.finalize_lock_ms),
        )
    }
}
