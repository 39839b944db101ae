//! The hot path, apart from HTTP: submit, lease, start, report and finish. The batched
//! runner exchange, the single-item runner endpoints and the node's services all go
//! through here, so each step is written once.
//!
//! Every step keeps design.md §4's order between the two stores:
//!
//! - **submit**: the Postgres insert commits (in a group commit with other submits),
//!   then the Redis add and wake-up; a 201 is never a lie;
//! - **lease**: one Redis script pops and claims (and records the lease for replay).
//!   Postgres is not written: the task stays `queued` there until its runner's start,
//!   and a task never started is safe to hand out again (`docs/throughput.md` has the
//!   argument);
//! - **start**: the runner's lease is checked against the claim, then Postgres records
//!   `queued -> running` under that lease, a compare-and-set: exactly one start can win;
//! - **finish**: Postgres records the end (with its outbox rows) under the lease, then
//!   Redis drops the claim and queues a retry, one script for a whole batch;
//!
//! and every write goes through the node's group commit (`baton_store::GroupCommit`): a
//! runner is told an item is done only once its row is committed.

pub(crate) mod cancel;
mod dispatcher;
mod error;
pub(crate) mod exchange;
pub mod finish;
pub(crate) mod lease;
pub(crate) mod queue_caps;
pub(crate) mod releases;
pub(crate) mod submit;
pub(crate) mod verdicts;

pub(crate) use dispatcher::Dispatcher;
pub(crate) use error::{DispatchError, logged};
