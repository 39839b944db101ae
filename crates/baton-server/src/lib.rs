//! The Baton node: the HTTP API and the node's services, over Postgres (the source of
//! truth) and Redis (queues, claims, liveness, wake-ups).

pub mod api;
pub mod auth;
pub mod config;
pub mod dispatch;
mod error;
pub mod events;
mod extract;
pub mod identity;
pub mod listener;
pub mod metrics;
pub mod node;
pub mod node_liveness;
pub mod presence;
pub mod queue_defaults;
mod queueing;
pub mod quota;
pub mod schedules;
pub mod sealing_gate;
pub mod secrets;
pub mod services;
pub mod state;
pub mod ui;
pub mod webhooks;

pub use config::ServeConfig;
pub use error::ApiError;
pub use node::{NodeError, RunningNode, start};
