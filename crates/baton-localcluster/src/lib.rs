//! A Baton cluster on this machine — private Redis and Postgres, `baton serve` nodes, nginx
//! in front, `baton runner` agents, fault proxies on their links — each a supervised child
//! process. `baton dev` assembles them for a newcomer, `baton chaos` to break them; with
//! the `testing` feature, the tests and the benches run on the same parts.

#![warn(missing_docs, unreachable_pub)]

pub mod cluster;
pub mod fault_proxy;
pub mod nginx;
pub mod nginx_conf;
pub mod nodes;
pub mod pg_failover;
pub mod ports;
pub mod postgres;
pub mod processes;
pub mod readiness;
pub mod redis;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod replication;
pub mod runners;
pub mod skewed_clock;
pub mod strays;
#[cfg(feature = "testing")]
pub mod testing;
pub mod timings;
pub mod workdir;
