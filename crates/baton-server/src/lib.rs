//! The Baton node: the HTTP API and the node's services, over Postgres (the source of
//! truth) and Redis (queues, claims, liveness, wake-ups).

#![warn(missing_docs, unreachable_pub)]
// The async fns of the hot path nest deeply enough for rustc's layout queries to pass
// the default depth of 128 in the test build.
#![recursion_limit = "256"]

mod admission;
mod api;
mod auth;
pub mod config;
pub mod dispatch;
mod error;
mod events;
mod extract;
pub mod identity;
mod listener;
mod metrics;
pub mod node;
mod node_liveness;
mod presence;
mod provision;
mod queue_defaults;
mod queueing;
mod quota;
mod reclaim;
mod schedules;
mod sealing_gate;
mod secrets;
pub mod services;
pub mod state;
mod task_reads;
mod ui;
mod views;
mod webhooks;

pub use config::ServeConfig;
pub use node::{NodeError, RunningNode, start, start_on};
