//! Redis: the queues, the claims, node liveness and wake-ups.
//!
//! Redis is fast but forgetful; Postgres stays the source of truth. Every multi-key step
//! here is one Lua script or one MULTI, so a node killed mid-step leaves no half state,
//! and every step is ordered against Postgres as design.md §4 says.

mod claims;
mod clock;
mod connection;
mod delayed;
mod epoch;
mod error;
mod keys;
mod liveness;
mod locks;
mod queue;
mod replay;
mod wake;

pub use claims::{Claim, RunEnded};
pub use clock::ClusterClock;
pub use connection::{COMMAND_DURATION as REDIS_COMMAND_DURATION, RedisTarget};
pub use epoch::Epoch;
pub use error::{CoordError, ERRORS as REDIS_ERRORS};
pub use keys::Keys;
pub use liveness::NodeInfo;
pub use locks::Lock;
pub use queue::{Enqueue, LeaseAsk, Leased, Popped};
pub use replay::ReplayKey;
pub use wake::{Parked, Wake, WakeBus};

use connection::{Conn, Pool, PoolSettings};
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
    target: RedisTarget,
    keys: Keys,
}

#[derive(Debug, Clone)]
pub struct CoordOptions {
    pub pool_size: usize,
    /// Bounds every command, so one stuck call cannot hang a request.
    pub command_timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for CoordOptions {
    fn default() -> Self {
        CoordOptions {
            pool_size: 16,
            command_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
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
        let pool = match &target {
            RedisTarget::Url(url) => {
                let config = AsyncConnectionConfig::new()
                    .set_response_timeout(Some(options.command_timeout))
                    .set_connection_timeout(Some(options.connect_timeout));
                Pool::plain(url, config, &settings)?
            }
            RedisTarget::Sentinel { sentinels, master } => {
                Pool::sentinel(sentinels, master, &settings)?
            }
            RedisTarget::Cluster { nodes } => Pool::cluster(
                nodes,
                prefix,
                (options.command_timeout, options.connect_timeout),
                &settings,
            )?,
        };
        Ok(Coord {
            pool: Arc::new(pool),
            target,
            keys: Keys::new(prefix),
        })
    }

    /// A Coord on a plain Redis URL.
    pub fn from_url(url: &str, prefix: &str, options: &CoordOptions) -> Result<Self, CoordError> {
        Self::new(RedisTarget::Url(url.to_string()), prefix, options)
    }

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

    pub async fn ping(&self) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(())
    }
}
