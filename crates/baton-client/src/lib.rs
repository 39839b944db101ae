//! The wire: request and response types of Baton's HTTP API, and a typed client for
//! them. The server, the runner agent, the CLI and the tests all speak through these
//! types, so the two ends cannot drift apart.

#![warn(unreachable_pub)]
#![warn(missing_docs)]

pub mod bulk;
pub mod client;
pub mod error_code;
pub mod events;
pub mod exchange;
pub mod log_marks;
pub mod schedules;
mod tail_marks;
pub mod task_ref;
pub mod trace_context;
pub mod wire;

pub use bulk::{BulkAnswer, BulkItem, BulkRequest};
pub use client::{
    ApiError, Client, ClientError, LogSlice, TaskOrder, TaskQuery, install_tls_provider,
};
pub use error_code::ErrorCode;
pub use events::{EventFilter, EventFrame};
pub use exchange::*;
pub use log_marks::{LogMark, LogMarks, LogStream};
pub use reqwest::StatusCode;
pub use schedules::*;
pub use task_ref::{SHORT_ID_LEN, TaskRef, short_id};
pub use wire::*;
