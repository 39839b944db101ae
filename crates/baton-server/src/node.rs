//! A node: one `baton serve` process. Starting it applies migrations (unless told not
//! to), starts its services (node liveness, wake subscriber) and serves the API
//! until shutdown.

use crate::api;
use crate::auth::{TokenCache, hash_token};
use crate::config::ServeConfig;
use crate::dispatch::Dispatcher;
use crate::identity::NodeIdentity;
use crate::node_liveness::LivenessKeeper;
use crate::state::{AppState, StalenessClocks};
use crate::webhooks::{WebhookSettings, Webhooks};
use baton_coord::{ClusterClock, Coord, CoordOptions, NodeInfo, WakeBus};
use baton_store::{FinishPolicy, GroupCommit, GroupCommitSettings, Store, StoreOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Why a node did not start, or did not stop cleanly. Each ends the process: a node
/// that cannot serve exits rather than run half-started.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The settings contradict themselves or are malformed (a bad node id, both Sentinel
    /// and Cluster addresses, an unreadable Redis CA file, a Cluster key prefix without a
    /// hash tag, a bad secrets key).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Postgres failed the start: a bad URL, a migration refused, or Postgres away for
    /// longer than a starting node waits.
    #[error(transparent)]
    Store(#[from] baton_store::StoreError),
    /// Redis could not be set up (a bad URL or TLS setting).
    #[error(transparent)]
    Coord(#[from] baton_coord::CoordError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why the bind failed (in use, not permitted).
        source: std::io::Error,
    },
    /// The HTTP server stopped on its own.
    #[error("server failed: {0}")]
    Serve(std::io::Error),
    /// A drain ran out of grace: the node left the cluster anyway, and what it had
    /// claimed is adopted as after a crash.
    #[error("requests still in flight after the {0:?} drain grace; exiting anyway")]
    DrainTimeout(Duration),
}

/// A started node: serving, its services running, until [`RunningNode::run_until`]'s
/// signal or [`RunningNode::drain`].
pub struct RunningNode {
    /// Where it listens: the bound address, so a `:0` port in the settings reads here as
    /// the one the kernel chose.
    pub addr: SocketAddr,
    /// The id it joined the cluster under. A node whose liveness lapses rejoins under a
    /// new one; this stays the first.
    pub node_id: String,
    shutdown: CancellationToken,
    served: JoinHandle<Result<(), NodeError>>,
    coord: Coord,
    identity: Arc<NodeIdentity>,
    draining: CancellationToken,
    drain_grace: Duration,
    drain_notice: Duration,
    /// What its services are built from, for [`RunningNode::services`].
    state: AppState,
}

impl RunningNode {
    /// Its background services, built again from its state: a second set beside the one
    /// it runs, for a test to drive a pass of any of them, as this node, at the time it
    /// chooses. Each holds what the running one holds but its own pacing (the outbox its
    /// own delivery slots); deliveries a pass starts stop when the node does.
    pub fn services(&self) -> crate::services::NodeServices {
        crate::services::NodeServices::of(&self.state)
    }

    /// The SIGTERM path. First the notice: readiness fails, parked leases are answered
    /// with no work and new ones turned away (runners ask another node), and every answer
    /// closes its connection, so load balancers stop sending here. Then the listener
    /// closes, requests in flight finish, the services stop, and the node leaves the
    /// cluster so its claims are adopted at once — all within the drain grace. Past it,
    /// the node leaves anyway; what it had claimed is adopted once it is gone, as after a
    /// crash.
    pub async fn drain(mut self) -> Result<(), NodeError> {
        let deadline = tokio::time::Instant::now() + self.drain_grace;
        self.draining.cancel();
        let notice = self.drain_notice.min(self.drain_grace / 2);
        tokio::select! {
            _ = tokio::time::sleep(notice) => {}
            // It stopped on its own meanwhile (a failed server): nothing left to drain.
            ended = &mut self.served => {
                return ended.map_err(|e| NodeError::Serve(std::io::Error::other(e)))?;
            }
        }
        self.shutdown.cancel();
        match tokio::time::timeout_at(deadline, &mut self.served).await {
            Ok(joined) => joined.map_err(|e| NodeError::Serve(std::io::Error::other(e)))?,
            Err(_) => {
                self.served.abort();
                let id = self.identity.id();
                if let Err(e) = self.coord.node_leave(&id).await {
                    tracing::warn!(error = %e, node.id = %id, "could not remove liveness key; it will expire");
                }
                Err(NodeError::DrainTimeout(self.drain_grace))
            }
        }
    }

    /// Serves until `signal` resolves, then drains; or returns at once if the node stops
    /// by itself (its server failed).
    pub async fn run_until(mut self, signal: impl Future<Output = ()>) -> Result<(), NodeError> {
        tokio::select! {
            _ = signal => {}
            ended = &mut self.served => {
                return ended.map_err(|e| NodeError::Serve(std::io::Error::other(e)))?;
            }
        }
        tracing::info!(node.id = %self.node_id, "shutdown requested: draining");
        self.drain().await
    }
}

/// How long a starting node waits for Postgres (away, or failing over to a standby) to
/// take its migrations before it gives up.
const START_PATIENCE: Duration = Duration::from_secs(120);

/// Runs `step` until it succeeds, while Postgres is only unavailable, for up to
/// [`START_PATIENCE`]: a node started in the middle of a failover comes up after it
/// rather than exiting.
async fn while_postgres_away<F, Fut>(what: &str, mut step: F) -> Result<(), NodeError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), baton_store::StoreError>>,
{
    let deadline = tokio::time::Instant::now() + START_PATIENCE;
    let mut failures = 0;
    loop {
        match step().await {
            Ok(()) => return Ok(()),
            Err(baton_store::StoreError::Unavailable(why))
                if tokio::time::Instant::now() < deadline =>
            {
                failures += 1;
                tracing::warn!(%why, "{what}: postgres unavailable; trying again");
                let delay = baton_core::backoff::Backoff::RUNNER.delay(failures, rand::random());
                tokio::time::sleep(delay.min(Duration::from_secs(5))).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Node ids appear inside claim values (`node|lease|at`) and key names.
fn check_node_id(id: &str) -> Result<(), NodeError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(NodeError::Config(format!(
            "node id {id:?} must be 1-64 characters of [A-Za-z0-9._-]"
        )))
    }
}

/// A fresh node id: random per start, so a restarted node never mistakes a dead
/// predecessor's claims for its own.
pub fn random_node_id() -> String {
    format!("n-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// Starts a node: creates the database and applies migrations (unless `no_migrate`),
/// waiting out a Postgres failover; binds `config.listen` only then, so nothing connects
/// to a node not ready to answer; beats its liveness once before it serves, so its first
/// claims are never taken for a dead node's; then starts the services and serves the API.
pub async fn start(config: ServeConfig) -> Result<RunningNode, NodeError> {
    let stores = prepare(&config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| NodeError::Listen {
            addr: config.listen,
            source,
        })?;
    serve(config, stores, listener).await
}

/// As [`start`], on a listener bound already (`config.listen` is not used): what lets a
/// test run a node in its own process, on a port the kernel chose, and stop it with
/// [`RunningNode::run_until`]'s signal.
pub async fn start_on(
    config: ServeConfig,
    listener: tokio::net::TcpListener,
) -> Result<RunningNode, NodeError> {
    let stores = prepare(&config).await?;
    serve(config, stores, listener).await
}

/// The stores a node serves from, once its settings are checked and its migrations are in.
struct Stores {
    node_id: String,
    store: Store,
    coord: Coord,
}

async fn prepare(config: &ServeConfig) -> Result<Stores, NodeError> {
    let node_id = config.node_id.clone().unwrap_or_else(random_node_id);
    check_node_id(&node_id)?;
    if !config.redis_sentinels.is_empty() && !config.redis_cluster.is_empty() {
        return Err(NodeError::Config(
            "give Redis Sentinel or Redis Cluster addresses, not both".into(),
        ));
    }
    let redis_access = config.redis_access().map_err(NodeError::Config)?;
    config.redis_prefix_check().map_err(NodeError::Config)?;
    config.provisioners_check().map_err(NodeError::Config)?;
    if !config.no_migrate {
        while_postgres_away("creating the database", || {
            Store::database_create_if_missing(&config.database_url)
        })
        .await?;
    }
    let store = Store::connect_lazy(
        &config.database_url,
        &StoreOptions {
            max_connections: config.db_max_connections,
            acquire_timeout: config.store_timeout(),
            require_sync_standby: config.require_sync_standby,
            ..StoreOptions::default()
        },
    )?;
    if !config.no_migrate {
        while_postgres_away("applying migrations", || store.migrate()).await?;
    }
    let coord = Coord::new(
        config.redis_target(),
        &config.redis_prefix,
        &CoordOptions {
            pool_size: config.redis_pool_size,
            command_timeout: config.store_timeout(),
            connect_timeout: config.store_timeout(),
            access: redis_access,
        },
    )?;
    Ok(Stores {
        node_id,
        store,
        coord,
    })
}

async fn serve(
    config: ServeConfig,
    Stores {
        node_id,
        store,
        coord,
    }: Stores,
    listener: tokio::net::TcpListener,
) -> Result<RunningNode, NodeError> {
    let addr = listener.local_addr().map_err(NodeError::Serve)?;

    let shutdown = CancellationToken::new();
    let draining = CancellationToken::new();
    let wake = WakeBus::spawn(&coord, shutdown.clone());
    let clock = Arc::new(ClusterClock::default());
    if let Err(e) = clock.sync(&coord).await {
        tracing::warn!(error = %e, "cannot read the cluster's clock from redis yet; this node's own stands in");
    }
    // Queues filled by nodes of a release before the queue index (a rolling upgrade) are
    // indexed now rather than at the next repair pass; the repair pass keeps at it while
    // such nodes still serve.
    match coord.queue_index_repair().await {
        Ok(0) => {}
        Ok(mended) => tracing::info!(entries = mended, "queue index brought up to date"),
        Err(e) => {
            tracing::warn!(error = %e, "queue index not checked at start; the repair pass will")
        }
    }
    let now_ms = clock.now_ms();
    let identity = NodeIdentity::new(
        NodeInfo {
            id: node_id.clone(),
            addr: addr.to_string(),
            started_at_ms: now_ms,
            opens_sealed_secrets: true,
        },
        config.node_ttl_ms,
    );
    let secrets = crate::secrets::keyring_of(&config).map_err(NodeError::Config)?;
    if let Some(ring) = &secrets {
        tracing::info!(
            key.id = ring.sealing_key_id(),
            "secret_env is sealed at rest"
        );
    }
    let webhooks =
        Webhooks::new(&WebhookSettings::of(&config), store.clone()).map_err(NodeError::Config)?;
    // The group commit's own connections, one per writer, whose statements are planned
    // once.
    let committing = Store::connect_lazy(
        &config.database_url,
        &StoreOptions {
            max_connections: config.group_commit_writers.max(1) as u32,
            acquire_timeout: config.store_timeout(),
            generic_plans: true,
            require_sync_standby: config.require_sync_standby,
            ..StoreOptions::default()
        },
    )?;
    // Both pools' first connections are opened now, beside the start, not by the first
    // requests (a parked runner's first wake-up among them); a Postgres away now only
    // leaves them to be opened later, as before. The main pool's two: what a submit and
    // a lease's reads use at once; its others open as requests need them.
    for (pool, connections) in [
        (committing.clone(), config.group_commit_writers.max(1)),
        (store.clone(), 2),
    ] {
        tokio::spawn(async move {
            if let Err(e) = pool.warm(connections).await {
                tracing::debug!(error = %e, "postgres connections not opened ahead of use");
            }
        });
    }
    let events = crate::events::EventLog::new(
        coord.clone(),
        clock.clone(),
        node_id.clone(),
        Duration::from_secs(config.timings.event_retention_s),
    );
    let commit = GroupCommit::spawn(
        committing,
        GroupCommitSettings {
            writers: config.group_commit_writers,
            max_items: config.group_commit_max_items.max(1),
            linger: Duration::from_micros(config.group_commit_linger_us),
            log_cap: config.limits.max_log_bytes,
            policy: FinishPolicy {
                backoff: config.timings.retry_backoff(),
                jitter_unit: 0.5,
            },
            now: {
                let clock = clock.clone();
                Arc::new(move || clock.now())
            },
            fault: config.fault.clone(),
            observer: Some({
                let (events, store, coord) = (events.clone(), store.clone(), coord.clone());
                Arc::new(move |transitions| {
                    let (events, store, coord) = (events.clone(), store.clone(), coord.clone());
                    Box::pin(async move {
                        let ended = crate::dispatch::releases::ended_with_dependents(&transitions);
                        events.committed(transitions).await;
                        if !ended.is_empty() {
                            // Beside the answers, not before them: the jobs released
                            // wait on a read, the runners reporting need not.
                            tokio::spawn(async move {
                                crate::dispatch::releases::follow(&store, &coord, &events, &ended)
                                    .await;
                            });
                        }
                    })
                })
            }),
        },
    );
    let config = Arc::new(config);
    let identity = Arc::new(identity);
    let dispatcher = Dispatcher {
        config: config.clone(),
        identity: identity.clone(),
        store: store.clone(),
        commit,
        coord: coord.clone(),
        clock: clock.clone(),
        presence: Arc::default(),
        known_empty: Arc::default(),
        known_queues: Arc::default(),
        wake: wake.clone(),
        secrets: secrets.map(Arc::new),
        events: events.clone(),
        parks: Arc::default(),
        draining: draining.clone(),
    };
    let state = AppState {
        dispatcher,
        identity: identity.clone(),
        clocks: Arc::new(StalenessClocks::new(now_ms)),
        clock: clock.clone(),
        webhooks: Arc::new(webhooks),
        sealing: Arc::default(),
        queue_defaults: Arc::default(),
        follows: Arc::default(),
        subscriptions: Arc::default(),
        text_searches: Arc::new(tokio::sync::Semaphore::new(
            config.limits.max_text_searches.max(1),
        )),
        catch_ups: Arc::new(crate::events::catch_ups::CatchUps::new(
            config.limits.max_catch_ups,
            config.limits.max_catch_ups_per_token,
        )),
        events: events.clone(),
        openapi: Arc::default(),
        store: store.clone(),
        coord: coord.clone(),
        wake: wake.clone(),
        tokens: Arc::new(TokenCache::default()),
        bootstrap_api_token: config.api_token.as_deref().map(hash_token),
        bootstrap_registration_token: config.registration_token.as_deref().map(hash_token),
        draining: draining.clone(),
        shutdown: shutdown.clone(),
        config,
    };
    let liveness = LivenessKeeper::of(&state);
    liveness.run_once(state.clock.now()).await;
    state
        .events
        .node(crate::events::NodeChange::Joined, &node_id, None)
        .await;
    let mut services = crate::services::spawn_all(&state);
    services.push(tokio::spawn(liveness.run(state.shutdown.clone())));

    let app = api::router(state.clone());
    let limits = crate::listener::ServeLimits {
        max_connections: state.config.http_max_connections,
        header_read_timeout: Duration::from_millis(state.config.http_header_read_timeout_ms),
    };
    let stop = shutdown.clone();
    let identity = state.identity.clone();
    let drain_grace = state.config.drain_grace();
    let drain_notice = Duration::from_millis(state.config.drain_notice_ms);
    let (leave_coord, leave_identity) = (coord.clone(), identity.clone());
    let events = state.events.clone();
    let served = tokio::spawn(async move {
        tracing::info!(node.id = %identity.id(), %addr, "node serving");
        let result = crate::listener::serve(listener, app, limits, stop)
            .await
            .map_err(NodeError::Serve);
        for service in services {
            let _ = service.await;
        }
        let id = identity.id();
        events
            .node(crate::events::NodeChange::Left, &id, None)
            .await;
        if let Err(e) = coord.node_leave(&id).await {
            tracing::warn!(error = %e, node.id = %id, "could not remove liveness key; it will expire");
        }
        tracing::info!(node.id = %id, "node stopped");
        result
    });
    Ok(RunningNode {
        addr,
        node_id,
        shutdown,
        served,
        coord: leave_coord,
        identity: leave_identity,
        draining,
        drain_grace,
        drain_notice,
        state,
    })
}
