//! Baton's pure domain: the task status machine, label matching, queue naming and
//! ordering, input validation, backoff, and when schedules fire.
//!
//! Nothing here reads a clock, touches the network or spawns a task: time and randomness
//! are passed in, so every rule is testable with plain tables.

#![warn(missing_docs, unreachable_pub)]

pub mod after_run;
pub mod backoff;
pub mod cron;
pub mod fault;
pub mod flow;
pub mod idempotency;
pub mod ids;
pub mod labels;
pub mod log_marks;
pub mod pipeline;
pub mod provision;
pub mod queue_order;
pub mod reconcile;
pub mod retry_policy;
pub mod schedule;
pub mod status;
pub mod trend_tally;
pub mod validate;
pub mod version;

pub use ids::{LeaseId, RunnerId};
pub use labels::LabelSet;
pub use status::{TaskStatus, Transition};
pub use validate::Invalid;
