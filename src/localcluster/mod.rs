//! Building blocks of a cluster on this machine — private Redis and Postgres, `baton
//! serve` nodes, nginx in front, `baton runner` agents — each a supervised child process.
//! `baton dev` assembles them for a newcomer; `baton chaos` assembles them to break them.

pub mod cluster;
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
pub mod runners;
pub mod workdir;
