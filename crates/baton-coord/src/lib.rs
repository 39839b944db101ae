//! Redis: the queues, the claims, node liveness and wake-ups.
//!
//! Redis is fast but forgetful; Postgres stays the source of truth. Every multi-key step
//! here is one Lua script or one MULTI, so a node killed mid-step leaves no half state,
//! and every step is ordered against Postgres as design.md §4 says.

#![warn(missing_docs, unreachable_pub)]

mod access;
mod claims;
mod clock;
mod connection;
mod delayed;
mod epoch;
mod error;
mod events;
mod flow;
mod keys;
mod liveness;
mod locks;
mod queue;
mod replay;
mod trends;
mod wake;

pub use access::RedisAccess;
pub use claims::{Claim, ClaimAdopt, ClaimedIfAbsent, DispatchedRow, RunEnded};
pub use clock::ClusterClock;
pub use connection::{COMMAND_DURATION as REDIS_COMMAND_DURATION, RedisTarget, hash_tag_of};
pub use epoch::Epoch;
pub use error::{CoordError, ERRORS as REDIS_ERRORS};
pub use events::{EntryId, HistoryBounds, HistoryEntry};
pub use flow::{GroupRepair, PausedMarks};
pub use keys::Keys;
pub use liveness::NodeInfo;
pub use locks::Lock;
pub use queue::{Enqueue, LeaseAsk, Leased, Popped, QueueRoom};
pub use replay::ReplayKey;
pub use trends::{QueueMinute, TREND_KEEP_S};
pub use wake::{Parked, Wake, WakeBus};

use connection::{Conn, Endpoint, Pool, PoolSettings};
use redis::AsyncConnectionConfig;
use std::sync::Arc;
use std::time::Duration;

/// The default key prefix. The braces are a Redis Cluster hash tag: every key of one
/// Baton cluster lives in one slot, so multi-key scripts work there too.
pub const DEFAULT_PREFIX: &str = "{baton}:";

/// Handle on the coordination store. Cheap to clone.
#[derive(Clone)]
pub struct Coord {
    pool: Arc<Pool>,
    endpoint: Endpoint,
    keys: Keys,
}

/// How the connection pool to Redis is sized and timed.
#[derive(Debug, Clone)]
pub struct CoordOptions {
    /// The most connections held to Redis.
    pub pool_size: usize,
    /// Bounds every command, so one stuck call cannot hang a request.
    pub command_timeout: Duration,
    /// How long connecting to Redis may take.
    pub connect_timeout: Duration,
    /// Users, passwords and TLS beyond what the target's URLs say.
    pub access: RedisAccess,
}

impl Default for CoordOptions {
    fn default() -> Self {
        CoordOptions {
            pool_size: 16,
            command_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            access: RedisAccess::default(),
        }
    }
}

impl Coord {
    /// Builds the pool without connecting: a node starts (not ready) while Redis is down.
    pub fn new(
        target: RedisTarget,
        prefix: &str,
        options: &CoordOptions,
    ) -> Result<Self, CoordError> {
        let settings = PoolSettings {
            size: options.pool_size,
            wait: options.command_timeout,
            create: options.connect_timeout,
        };
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(options.command_timeout))
            .set_connection_timeout(Some(options.connect_timeout));
        let access = &options.access;
        let pool = match &target {
            RedisTarget::Url(url) => {
                let client = access.server_client(url, access.uses_tls(&target))?;
                Pool::plain(client, config, &settings)?
            }
            RedisTarget::Sentinel { sentinels, master } => Pool::sentinel(
                access.sentinel_client(sentinels, master)?,
                config,
                &settings,
            )?,
            RedisTarget::Cluster { nodes } => {
                let timeouts = (options.command_timeout, options.connect_timeout);
                let client = access.cluster_client(nodes, timeouts)?;
                Pool::cluster(client, prefix, &settings)?
            }
        };
        Ok(Coord {
            pool: Arc::new(pool),
            endpoint: Endpoint {
                target,
                access: access.clone(),
            },
            keys: Keys::new(prefix),
        })
    }

    /// A Coord on a plain Redis URL.
    pub fn from_url(url: &str, prefix: &str, options: &CoordOptions) -> Result<Self, CoordError> {
        Self::new(RedisTarget::Url(url.to_string()), prefix, options)
    }

    /// The key layout this coordinator uses.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    async fn conn(&self) -> Result<Conn, CoordError> {
        self.pool.get().await
    }

    /// Every key matching a glob pattern (SCAN, so Redis is never blocked).
    pub(crate) async fn scan(&self, pattern: &str) -> Result<Vec<String>, CoordError> {
        let mut conn = self.conn().await?;
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut conn)
                .await?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    /// Checks that Redis answers (readiness).
    pub async fn ping(&self) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(())
    }
}
