//! Where Redis is, and connections to it. A plain URL; a Sentinel deployment: then
//! every new connection asks the sentinels for the current master, and a connection that
//! finds itself talking to a demoted master (READONLY) or a dead one is thrown away
//! rather than returned to the pool — so after a failover the node follows the new
//! master with no restart; or a Redis Cluster: every key Baton writes shares one hash tag
//! (the key prefix's), so every command, script and pipeline goes to the master of that
//! one slot, and the cluster client follows the slot to a promoted replica.

use crate::CoordError;
use crate::access::RedisAccess;
use deadpool::managed;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::SentinelClient;
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};
use std::time::{Duration, Instant};

/// Histogram of Redis round trips, by `op`: the command's name (`hget`, `evalsha` for a
/// script), or `pipeline` / `multi`. Every command goes through [`Conn`], so this is
/// the one place they are timed.
pub const COMMAND_DURATION: &str = "baton_redis_command_duration_seconds";

/// The `op` label of a command: its name, lower-cased. Only this crate's own commands
/// pass here, so the set is small and fixed.
fn op_of(cmd: &Cmd) -> String {
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(name)) if name.len() <= 24 && name.is_ascii() => {
            String::from_utf8_lossy(name).to_ascii_lowercase()
        }
        _ => "other".to_string(),
    }
}

fn timed(op: impl Into<metrics::SharedString>, started: Instant) {
    metrics::histogram!(COMMAND_DURATION, "op" => op.into())
        .record(started.elapsed().as_secs_f64());
}

/// Where Redis is. Credentials may be in the URLs (`user:password@`), `rediss://` asks
/// for TLS; what a URL cannot say is in [`RedisAccess`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server at a `redis://` or `rediss://` URL.
    Url(String),
    /// A master found through Redis Sentinel.
    Sentinel {
        /// `redis://host:port` of each sentinel.
        sentinels: Vec<String>,
        /// The monitored master's name.
        master: String,
    },
    /// A Redis Cluster.
    Cluster {
        /// `redis://host:port` of some of the cluster's nodes: the rest are found from them.
        nodes: Vec<String>,
    },
}

/// A target and the access to it: all a new connection needs.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) target: RedisTarget,
    pub(crate) access: RedisAccess,
}

impl Endpoint {
    /// A client for the current master — for a Cluster, for any node that answers: a
    /// message published on one node reaches subscribers on every node.
    pub(crate) async fn master_client(&self) -> RedisResult<redis::Client> {
        let access = &self.access;
        match &self.target {
            RedisTarget::Url(url) => access.server_client(url, access.uses_tls(&self.target)),
            RedisTarget::Cluster { nodes } => {
                let tls = access.tls_for(nodes.iter());
                let mut last = None;
                for node in nodes {
                    let client = access.server_client(node, tls)?;
                    match client.get_multiplexed_async_connection().await {
                        Ok(_) => return Ok(client),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    RedisError::from((ErrorKind::InvalidClientConfig, "no cluster node given"))
                }))
            }
            RedisTarget::Sentinel { sentinels, master } => {
                access
                    .sentinel_client(sentinels, master)?
                    .async_get_client()
                    .await
            }
        }
    }
}

/// deadpool-redis's managers check a connection with a round trip (`PING`, and
/// `UNWATCH`) every time it leaves the pool: two commands per checkout, most of Redis's
/// work per task. Baton's connections are multiplexed and never left mid-transaction
/// (`MULTI` goes out whole, nothing `WATCH`es), and one that fails is taken out of the
/// pool by [`Conn`] at once, so a checkout needs no check: these managers make
/// connections (with the node's timeouts) and recycle them as they are.
pub(crate) struct MasterManager {
    master: Master,
    config: AsyncConnectionConfig,
}

/// Where a new connection goes: the one server, or the master the sentinels name now —
/// asked at each new connection, so one made after a failover goes to the new master.
/// The sentinel client caches its sentinel connections, hence the lock.
enum Master {
    Server(redis::Client),
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

impl managed::Manager for MasterManager {
    type Type = MultiplexedConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<MultiplexedConnection, RedisError> {
        let client = match &self.master {
            Master::Server(client) => client.clone(),
            Master::Sentinel(sentinel) => sentinel.lock().await.async_get_client().await?,
        };
        client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await
    }

    async fn recycle(
        &self,
        _: &mut MultiplexedConnection,
        _: &managed::Metrics,
    ) -> managed::RecycleResult<RedisError> {
        Ok(())
    }
}

/// Cluster connections, made with the node's timeouts and recycled, like the others,
/// without a round trip. One cluster connection keeps a connection to each node it
/// needs and refreshes the slot map itself.
pub(crate) struct ClusterManager(ClusterClient);

impl managed::Manager for ClusterManager {
    type Type = ClusterConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<ClusterConnection, RedisError> {
        self.0.get_async_connection().await
    }

    async fn recycle(
        &self,
        _: &mut ClusterConnection,
        _: &managed::Metrics,
    ) -> managed::RecycleResult<RedisError> {
        Ok(())
    }
}

pub(crate) enum Pool {
    /// One server, or the master the sentinels name.
    Master(managed::Pool<MasterManager>),
    Cluster {
        pool: managed::Pool<ClusterManager>,
        /// The key prefix's hash tag, whose slot holds every key.
        tag: String,
        /// That slot, asked of the cluster once.
        slot: tokio::sync::OnceCell<u16>,
    },
}

enum Pooled {
    Master(managed::Object<MasterManager>),
    Cluster(managed::Object<ClusterManager>, Route),
}

/// A pooled connection that notices when it has gone bad.
pub(crate) struct Conn {
    pooled: Option<Pooled>,
    broken: bool,
}

/// The server cannot serve now but another (or the same, later) will: a replica after a
/// failover, a master that lost its replicas, a server still loading its data.
pub(crate) fn server_not_ready(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::ReadOnly
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::MasterDown
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
        )
    )
}

/// The connection cannot serve again: the server is gone, or no longer the master.
fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || server_not_ready(e)
}

/// Pool sizes and timeouts, the same for a plain and a Sentinel pool.
pub(crate) struct PoolSettings {
    pub(crate) size: usize,
    pub(crate) wait: Duration,
    pub(crate) create: Duration,
}

impl PoolSettings {
    fn apply<M: managed::Manager>(
        &self,
        builder: managed::PoolBuilder<M>,
    ) -> Result<managed::Pool<M>, managed::BuildError> {
        builder
            .max_size(self.size)
            .wait_timeout(Some(self.wait))
            .create_timeout(Some(self.create))
            .recycle_timeout(Some(self.wait))
            .runtime(deadpool::Runtime::Tokio1)
            .build()
    }
}

impl Pool {
    pub(crate) fn plain(
        client: redis::Client,
        config: AsyncConnectionConfig,
        settings: &PoolSettings,
    ) -> Result<Pool, CoordError> {
        Self::master(Master::Server(client), config, settings)
    }

    pub(crate) fn sentinel(
        client: SentinelClient,
        config: AsyncConnectionConfig,
        settings: &PoolSettings,
    ) -> Result<Pool, CoordError> {
        let master = Master::Sentinel(tokio::sync::Mutex::new(client));
        Self::master(master, config, settings)
    }

    fn master(
        master: Master,
        config: AsyncConnectionConfig,
        settings: &PoolSettings,
    ) -> Result<Pool, CoordError> {
        settings
            .apply(managed::Pool::builder(MasterManager { master, config }))
            .map(Pool::Master)
            .map_err(|e| CoordError::Internal(e.to_string()))
    }

    pub(crate) fn cluster(
        client: ClusterClient,
        prefix: &str,
        settings: &PoolSettings,
    ) -> Result<Pool, CoordError> {
        let pool = settings
            .apply(managed::Pool::builder(ClusterManager(client)))
            .map_err(|e| CoordError::Internal(e.to_string()))?;
        Ok(Pool::Cluster {
            pool,
            tag: hash_tag(prefix).to_string(),
            slot: tokio::sync::OnceCell::new(),
        })
    }

    pub(crate) async fn get(&self) -> Result<Conn, CoordError> {
        let pooled = match self {
            Pool::Master(pool) => Pooled::Master(pool.get().await.map_err(pool_error)?),
            Pool::Cluster { pool, tag, slot } => {
                let mut conn = pool.get().await.map_err(pool_error)?;
                let slot = slot
                    .get_or_try_init(|| async {
                        let slot: u16 = redis::cmd("CLUSTER")
                            .arg("KEYSLOT")
                            .arg(tag)
                            .query_async(&mut *conn)
                            .await?;
                        Ok::<u16, RedisError>(slot)
                    })
                    .await?;
                Pooled::Cluster(conn, Route::new(*slot, SlotAddr::Master))
            }
        };
        Ok(Conn {
            pooled: Some(pooled),
            broken: false,
        })
    }
}

fn pool_error(e: managed::PoolError<RedisError>) -> CoordError {
    match e {
        managed::PoolError::Backend(e) => e.into(),
        other => crate::error::unavailable(other.to_string()),
    }
}

/// The part of a key prefix Redis Cluster hashes: what is between its first `{` and the
/// next `}`, when that is not empty; otherwise the whole prefix.
fn hash_tag(prefix: &str) -> &str {
    hash_tag_of(prefix).unwrap_or(prefix)
}

/// The Redis Cluster hash tag in a key prefix (`{baton}` in `{baton}:`), if it has one:
/// the part of every key that Cluster hashes to pick its slot. A prefix without one
/// spreads Baton's keys over many slots, and every multi-key script fails with CROSSSLOT.
pub fn hash_tag_of(prefix: &str) -> Option<&str> {
    let open = prefix.find('{')?;
    let len = prefix[open + 1..].find('}')?;
    (len > 0).then(|| &prefix[open..open + len + 2])
}

impl Conn {
    fn inner(&mut self) -> &mut MultiplexedConnection {
        match self.pooled.as_mut().expect("connection present until drop") {
            Pooled::Master(c) => c,
            Pooled::Cluster(..) => unreachable!("a cluster connection is routed by slot"),
        }
    }

    fn note<T>(&mut self, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &result
            && breaks_connection(e)
        {
            self.broken = true;
        }
        result
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let started = Instant::now();
            let result = match self.pooled.as_mut().expect("connection present until drop") {
                // Every key shares the prefix's slot: keyless commands (SCAN, PUBLISH,
                // TIME) go there too.
                Pooled::Cluster(conn, route) => {
                    let routing =
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(*route));
                    conn.route_command(cmd.clone(), routing).await
                }
                _ => self.inner().req_packed_command(cmd).await,
            };
            timed(op_of(cmd), started);
            self.note(result)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let started = Instant::now();
            let result = match self.pooled.as_mut().expect("connection present until drop") {
                Pooled::Cluster(conn, route) => {
                    let routing = SingleNodeRoutingInfo::SpecificNode(*route);
                    conn.route_pipeline(pipeline.clone(), offset, count, routing)
                        .await
                }
                _ => {
                    self.inner()
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
            };
            let op = if pipeline.is_transaction() {
                "multi"
            } else {
                "pipeline"
            };
            timed(op, started);
            self.note(result)
        })
    }

    fn get_db(&self) -> i64 {
        match self.pooled.as_ref().expect("connection present until drop") {
            Pooled::Master(c) => c.get_db(),
            Pooled::Cluster(c, _) => c.get_db(),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.broken {
            // Taken out of the pool for good: the next one is made afresh, through the
            // sentinels when there are some.
            match self.pooled.take() {
                Some(Pooled::Master(c)) => drop(managed::Object::take(c)),
                Some(Pooled::Cluster(c, _)) => drop(managed::Object::take(c)),
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hash_tag_is_what_cluster_hashes() {
        assert_eq!(super::hash_tag("{baton}:"), "{baton}");
        assert_eq!(super::hash_tag("app:{bt-1}:"), "{bt-1}");
        assert_eq!(super::hash_tag("plain:"), "plain:");
        assert_eq!(super::hash_tag("{}:x"), "{}:x");
        assert_eq!(super::hash_tag_of("baton:"), None);
        assert_eq!(super::hash_tag_of("{}:x"), None);
        assert_eq!(super::hash_tag_of("{baton}:"), Some("{baton}"));
    }

    #[test]
    fn a_command_is_labelled_by_its_name() {
        assert_eq!(super::op_of(redis::cmd("HGET").arg("k").arg("f")), "hget");
        assert_eq!(super::op_of(&redis::Cmd::new()), "other");
    }
}
