//! The task status machine (design.md §2). Postgres is the authority; every transition
//! is a compare-and-set on the expected status, so the table here is what the store's
//! `WHERE status = ...` clauses must agree with.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Where a task is in its life. Each variant names who moves a task out of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// A pipeline's job (or a task with `depends_on`) whose needs have not all ended; the
    /// terminal write of the last of them moves it to `queued`, or to `skipped` when its
    /// rule can no longer be met (docs/pipelines.md).
    Waiting,
    /// Waiting for `run_at` or a retry backoff; the promoter moves it to `queued` when due.
    Scheduled,
    /// In a Redis queue; a runner's lease moves it to `leased`, the repair pass to
    /// `expired` once `queue_timeout_s` passes, a user to `cancelled`.
    Queued,
    /// Handed to a runner that has not acknowledged it yet; the runner's `start` moves it to
    /// `running`, the reconciler back to `queued` when the runner never starts it.
    Leased,
    /// Executing on a runner; the runner's result ends it (or sends it back to
    /// `scheduled` for a retry), or the reconciler when the runner is lost or the task
    /// outlives `timeout_s`.
    Running,
    /// A cancel was requested while running; the runner's report (or the runner being
    /// declared lost) ends it.
    Cancelling,
    /// Terminal: the runner reported success.
    Succeeded,
    /// Terminal: the runner reported failure, or was lost with no attempts left.
    Failed,
    /// Terminal: cancelled by a user before or during its run.
    Cancelled,
    /// Terminal: the server ended a run that outlived `timeout_s` plus grace.
    TimedOut,
    /// Terminal: no runner took it within `queue_timeout_s`.
    Expired,
    /// Terminal: a job whose needs ended so that its rule (`when`) can no longer be met;
    /// it never ran.
    Skipped,
}

impl TaskStatus {
    /// Every status, in the order of the machine.
    pub const ALL: [TaskStatus; 12] = [
        TaskStatus::Waiting,
        TaskStatus::Scheduled,
        TaskStatus::Queued,
        TaskStatus::Leased,
        TaskStatus::Running,
        TaskStatus::Cancelling,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::TimedOut,
        TaskStatus::Expired,
        TaskStatus::Skipped,
    ];

    /// The terminal statuses, in the order of [`TaskStatus::ALL`]: the one list the
    /// store's SQL writes them from.
    pub const TERMINAL: [TaskStatus; 6] = [
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::TimedOut,
        TaskStatus::Expired,
        TaskStatus::Skipped,
    ];

    /// The statuses a task leaves again (all but the terminal ones), in the order of
    /// [`TaskStatus::ALL`].
    pub const UNFINISHED: [TaskStatus; 6] = [
        TaskStatus::Waiting,
        TaskStatus::Scheduled,
        TaskStatus::Queued,
        TaskStatus::Leased,
        TaskStatus::Running,
        TaskStatus::Cancelling,
    ];

    /// The statuses in which a runner holds the task and a node holds a claim on it, in
    /// the order of [`TaskStatus::ALL`].
    pub const DISPATCHED: [TaskStatus; 3] = [
        TaskStatus::Leased,
        TaskStatus::Running,
        TaskStatus::Cancelling,
    ];

    /// Terminal states are never left (invariant 3).
    pub fn is_terminal(self) -> bool {
        Self::TERMINAL.contains(&self)
    }

    /// Whether a runner holds the task and a node holds a claim on it.
    pub fn is_dispatched(self) -> bool {
        Self::DISPATCHED.contains(&self)
    }

    /// The status as stored and as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Waiting => "waiting",
            TaskStatus::Scheduled => "scheduled",
            TaskStatus::Queued => "queued",
            TaskStatus::Leased => "leased",
            TaskStatus::Running => "running",
            TaskStatus::Cancelling => "cancelling",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::TimedOut => "timed_out",
            TaskStatus::Expired => "expired",
            TaskStatus::Skipped => "skipped",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is none of [`TaskStatus::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown task status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for TaskStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_string()))
    }
}

impl TryFrom<String> for TaskStatus {
    type Error = UnknownStatus;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// The named edges of the status machine. The store performs each as one
/// compare-and-set from [`Transition::from`] to [`Transition::to`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The last of a waiting job's needs ended as its rule asks.
    Release,
    /// A waiting job's needs ended so that its rule can no longer be met.
    Skip,
    /// Cancel while waiting for its needs.
    CancelWaiting,
    /// `run_at` or a retry backoff reached.
    Promote,
    /// A runner's lease took it from the queue.
    Lease,
    /// The runner acknowledged the lease and began executing.
    Start,
    /// Cancel before the task ran: nothing to stop.
    CancelScheduled,
    /// Cancel while queued (or leased in Redis only): nothing to stop.
    CancelQueued,
    /// Cancel while leased in Postgres, before its runner started it.
    CancelLeased,
    /// Cancel while running: the runner must stop the process first.
    RequestCancel,
    /// The runner's result while running or cancelling.
    Report(TaskStatus),
    /// The server ended a run past its timeout.
    TimeOut,
    /// A leased task its runner never started (offline, ack timeout): safe to hand out again.
    Requeue,
    /// The runner was lost while running; attempts remain.
    Retry,
    /// The runner was lost while running; no attempts remain.
    FailLost,
    /// The runner was lost while a cancel was pending: the cancel stands.
    CancelLost,
    /// Nobody took it within `queue_timeout_s`.
    Expire,
}

impl Transition {
    /// The statuses this edge may start from.
    pub const fn from(self) -> &'static [TaskStatus] {
        use TaskStatus::*;
        match self {
            Transition::Release | Transition::Skip | Transition::CancelWaiting => &[Waiting],
            Transition::Promote | Transition::CancelScheduled => &[Scheduled],
            Transition::Lease | Transition::CancelQueued | Transition::Expire => &[Queued],
            Transition::Start | Transition::CancelLeased | Transition::Requeue => &[Leased],
            Transition::RequestCancel
            | Transition::TimeOut
            | Transition::Retry
            | Transition::FailLost => &[Running],
            Transition::CancelLost => &[Cancelling],
            Transition::Report(_) => &[Running, Cancelling],
        }
    }

    /// The status this edge ends in. A report's outcome must itself be allowed:
    /// see [`Transition::is_valid`].
    pub const fn to(self) -> TaskStatus {
        use TaskStatus::*;
        match self {
            Transition::Release | Transition::Promote | Transition::Requeue => Queued,
            Transition::Skip => Skipped,
            Transition::Lease => Leased,
            Transition::Start => Running,
            Transition::CancelWaiting
            | Transition::CancelScheduled
            | Transition::CancelQueued
            | Transition::CancelLeased
            | Transition::CancelLost => Cancelled,
            Transition::RequestCancel => Cancelling,
            Transition::Report(outcome) => outcome,
            Transition::TimeOut => TimedOut,
            Transition::Retry => Scheduled,
            Transition::FailLost => Failed,
            Transition::Expire => Expired,
        }
    }

    /// A runner may only report one of the three outcomes it can observe.
    pub fn is_valid(self) -> bool {
        match self {
            Transition::Report(outcome) => matches!(
                outcome,
                TaskStatus::Succeeded | TaskStatus::Failed | TaskStatus::Cancelled
            ),
            _ => true,
        }
    }

    /// Every edge of the machine, for tests and docs.
    pub fn all() -> Vec<Transition> {
        vec![
            Transition::Release,
            Transition::Skip,
            Transition::CancelWaiting,
            Transition::Promote,
            Transition::Lease,
            Transition::Start,
            Transition::CancelScheduled,
            Transition::CancelQueued,
            Transition::CancelLeased,
            Transition::RequestCancel,
            Transition::Report(TaskStatus::Succeeded),
            Transition::Report(TaskStatus::Failed),
            Transition::Report(TaskStatus::Cancelled),
            Transition::TimeOut,
            Transition::Requeue,
            Transition::Retry,
            Transition::FailLost,
            Transition::CancelLost,
            Transition::Expire,
        ]
    }
}

/// Whether the machine has an edge from `from` to `to`.
pub fn can_transition(from: TaskStatus, to: TaskStatus) -> bool {
    Transition::all()
        .into_iter()
        .any(|t| t.to() == to && t.from().contains(&from))
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::*;
    use super::*;

    /// The full edge list of design.md §2, written out independently of `Transition`.
    const ALLOWED: &[(TaskStatus, TaskStatus)] = &[
        (Waiting, Queued),
        (Waiting, Skipped),
        (Waiting, Cancelled),
        (Scheduled, Queued),
        (Queued, Leased),
        (Leased, Running),
        (Scheduled, Cancelled),
        (Queued, Cancelled),
        (Leased, Cancelled),
        (Running, Cancelling),
        (Cancelling, Cancelled),
        (Running, Succeeded),
        (Running, Failed),
        (Running, Cancelled),
        (Cancelling, Succeeded),
        (Cancelling, Failed),
        (Running, TimedOut),
        (Leased, Queued),
        (Running, Scheduled),
        (Queued, Expired),
    ];

    #[test]
    fn every_pair_is_allowed_exactly_when_the_design_lists_it() {
        for from in TaskStatus::ALL {
            for to in TaskStatus::ALL {
                let expected = ALLOWED.contains(&(from, to));
                assert_eq!(
                    can_transition(from, to),
                    expected,
                    "{from} -> {to} should be {}",
                    if expected { "allowed" } else { "refused" }
                );
            }
        }
    }

    #[test]
    fn terminal_states_are_never_left() {
        for from in TaskStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in TaskStatus::ALL {
                assert!(!can_transition(from, to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn the_terminal_statuses_are_exactly_those_no_edge_leaves() {
        for status in TaskStatus::ALL {
            let left = Transition::all().iter().any(|t| t.from().contains(&status));
            assert_eq!(status.is_terminal(), !left, "{status}");
        }
    }

    #[test]
    fn failed_is_reached_only_from_running_or_cancelling() {
        // A retry goes running -> scheduled, so `failed` is always final.
        for from in TaskStatus::ALL {
            assert_eq!(
                can_transition(from, Failed),
                matches!(from, Running | Cancelling),
                "{from}"
            );
        }
    }

    #[test]
    fn cancelled_tasks_never_retry() {
        assert!(!can_transition(Cancelled, Scheduled));
        assert!(!can_transition(Cancelling, Scheduled));
    }

    #[test]
    fn runners_report_only_observable_outcomes() {
        for outcome in TaskStatus::ALL {
            let valid = Transition::Report(outcome).is_valid();
            assert_eq!(valid, matches!(outcome, Succeeded | Failed | Cancelled));
        }
    }

    #[test]
    fn status_names_round_trip() {
        for s in TaskStatus::ALL {
            assert_eq!(s.as_str().parse::<TaskStatus>().unwrap(), s);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
        assert!("done".parse::<TaskStatus>().is_err());
    }

    #[test]
    fn dispatched_statuses_are_the_claimed_ones() {
        let dispatched: Vec<_> = TaskStatus::ALL
            .into_iter()
            .filter(|s| s.is_dispatched())
            .collect();
        assert_eq!(dispatched, vec![Leased, Running, Cancelling]);
    }

    #[test]
    fn every_status_is_unfinished_or_terminal() {
        let unfinished: Vec<_> = TaskStatus::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .collect();
        assert_eq!(unfinished, TaskStatus::UNFINISHED);
    }
}
