//! Node settings. Defaults suit a local run; the CLI layers a TOML file, `BATON_*`
//! variables and flags over them.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// Where the HTTP API listens.
    pub listen: SocketAddr,
    pub database_url: String,
    pub redis_url: String,
    /// Prefix of every Redis key; keep a `{hash tag}` so all keys share one Cluster slot.
    pub redis_prefix: String,
    /// This node's id; random per start when unset, so a restarted node never mistakes
    /// a dead predecessor's claims for its own.
    pub node_id: Option<String>,
    /// Bootstrap API token with every scope. Tokens created through the API are stored
    /// hashed in Postgres.
    pub api_token: Option<String>,
    /// Bootstrap registration token for runners.
    pub registration_token: Option<String>,
    /// Skip applying migrations at start (when a migration job runs them).
    pub no_migrate: bool,
    /// How long a node's liveness key lives without a refresh; refreshed every third.
    pub node_ttl_ms: u64,
    pub limits: Limits,
    /// How long a runner's token stays cached in the node before Postgres is asked again.
    pub token_cache_ttl_ms: u64,
    pub db_max_connections: u32,
    pub redis_pool_size: usize,
    /// Bound on each Redis command and each wait for a Postgres connection.
    pub store_timeout_ms: u64,
}

/// Input limits: each one breached is answered with a JSON 413 or 422.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Any JSON request body.
    pub max_body_bytes: usize,
    /// A task's `payload`, serialised.
    pub max_payload_bytes: usize,
    pub max_batch: usize,
    pub max_env_vars: usize,
    /// One log chunk from a runner.
    pub max_log_chunk_bytes: usize,
    /// Stored log per task; beyond it the log is marked truncated.
    pub max_log_bytes: i64,
    pub default_timeout_s: i64,
    pub max_timeout_s: i64,
    pub default_queue_timeout_s: i64,
    pub max_queue_timeout_s: i64,
    /// Longest lease long-poll; runners are declared offline only well after it.
    pub max_wait_s: u32,
    /// Most tasks one lease request may take.
    pub max_lease: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 8 << 20,
            max_payload_bytes: 256 << 10,
            max_batch: 1000,
            max_env_vars: 128,
            max_log_chunk_bytes: 1 << 20,
            max_log_bytes: 16 << 20,
            default_timeout_s: 3600,
            max_timeout_s: 7 * 24 * 3600,
            default_queue_timeout_s: 86_400,
            max_queue_timeout_s: 30 * 86_400,
            max_wait_s: 50,
            max_lease: 64,
        }
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: "127.0.0.1:8080".parse().expect("valid default address"),
            database_url: "postgres://postgres@127.0.0.1:5432/baton".into(),
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_prefix: baton_coord::DEFAULT_PREFIX.into(),
            node_id: None,
            api_token: None,
            registration_token: None,
            no_migrate: false,
            node_ttl_ms: 10_000,
            limits: Limits::default(),
            token_cache_ttl_ms: 60_000,
            db_max_connections: 16,
            redis_pool_size: 16,
            store_timeout_ms: 2_000,
        }
    }
}

impl ServeConfig {
    pub fn node_ttl(&self) -> Duration {
        Duration::from_millis(self.node_ttl_ms)
    }

    pub fn store_timeout(&self) -> Duration {
        Duration::from_millis(self.store_timeout_ms)
    }
}
