//! The dispatch protocol as a model, small enough to check every interleaving of its
//! steps within a bound (docs/design.md §4 and §5 are the protocol; this is its skeleton).
//!
//! Why a model beside the tests: the holes issue 25 lists were each a particular order of
//! steps across processes — an answer held while the other lane is answered, a resend
//! landing on a node whose memory was written after the wake-up, a runner silent across a
//! deadline — that no randomized drill reliably reaches. A checker that walks *every*
//! order of the steps below, within a bound, finds such an order if one exists. Each fix
//! is a switch ([`Fixes`]): with it off, the checker must find its hole as a
//! counterexample (`tests/holes.rs` keeps each); with all on, none within the bound.
//!
//! What is modelled, by the code names of the steps (one task, two nodes, two runners):
//! - **Postgres** is one linearizable row: `queued`, `running` under a lease and a runner
//!   since a time, or ended. Every write is a compare-and-set on it (`start`, `finish`,
//!   the reconciler's `EndRun`), as in `transitions/sql.rs`.
//! - **Redis** holds the queue entry, the claim, the replay records (§4.7) and each
//!   node's `KnownEmpty` memory (`dispatch/lease.rs`).
//! - **The network** holds requests, which a load balancer may deliver to each node once
//!   (an unmarked resend, `proxy_next_upstream`), and answers, which may be delayed
//!   arbitrarily or lost. Reports (completions) may be delayed too.
//! - **A runner** keeps a poll lane and a report lane (`exchanger.rs`): it polls, takes
//!   the tasks an answer hands it (started, `start_leased`), heartbeats with a list as of
//!   a server time (`running_as_of`), runs a task for [`RUN`] and kills it at its own
//!   timeout, and reports.
//! - **The node's verdicts**: forgotten runs (`verdicts::end_forgotten_runs`) and the
//!   timeout (`verdicts::end_overdue_runs`), both on a heartbeat's list — the agent's
//!   idle poll carries one when a beat is due, so a heartbeat may come from either lane —
//!   and retries (a run ended with attempts left is queued again).
//! - **Time** is one cluster clock in whole steps, up to [`Bound::max_time`]; a frozen
//!   or cut-off runner is one whose steps are simply not taken.
//!
//! Not modelled here (the tests and the drill hold them): events, schedules, logs. Node
//! death and adoption, Redis failover and empty restarts, concurrency groups, cancel and
//! pause (hole 3) are the second model's, [`groups`], with one queue and runners folded
//! in (`tests/groups.rs`). A one-task runner that leaves (hole 11) is the third's,
//! [`leaving`] (`tests/leaving.rs`).
//!
//! Keeping it honest: a change to one of the steps named above changes its step here in
//! the same commit (ARCHITECTURE.md says how a reader keeps them in step).

pub mod groups;
pub mod leaving;
mod protocol;
mod state;

pub use protocol::{Action, Bound, Dispatch, Fixes, HELD, PROMISES, TimeoutVerdict};
pub use state::{End, Row, State};

/// How long a task runs on its runner, in clock steps.
pub const RUN: u8 = 1;
/// The task's `timeout_s`, in clock steps.
pub const TIMEOUT: u8 = 2;
/// `timeout_grace_s`, in clock steps.
pub const GRACE: u8 = 1;
/// `forgotten_run_after_s`, in clock steps: a run left out of a list counts as forgotten
/// when it started more than this before the list's time. Zero: far below the timeout,
/// as 15 s is below an hour.
pub const FORGOTTEN_AFTER: u8 = 0;
