//! The runner agent (`baton runner`): registers once, long-polls for work, runs each task
//! as a process group with the shell executor, ships its output with byte offsets and
//! reports the result.

#![warn(missing_docs, unreachable_pub)]

mod agent;
mod boots;
mod config;
mod exchanger;
mod executor;
mod health;
mod isolation;
mod leftovers;
mod logship;
mod masking;
pub mod metrics;
mod outputs;
mod owner_only;
mod process_group;
mod registration;
mod results;
mod retry;
pub mod supervisor;
mod tracker;

pub use agent::{Agent, AgentExit, IncompatibleRunner};
pub use config::RunnerConfig;
pub use registration::Registration;
