//! What follows a run that ended: a retry or the terminal state. `failed`, `timed_out`
//! and a lost runner retry while attempts remain — and while the task's own retry policy
//! (`retry_policy.rs`) agrees; a cancel never does, and a result that a runner reports
//! while a cancel is pending stands as reported. A run the server ends itself while a
//! cancel is pending (its runner lost, or the run forgotten) ends `cancelled`: the user
//! asked for it, and no result came to stand instead.
//!
//! The run-end statement applies this rule in SQL, a batch at a time
//! (`baton-store/src/transitions/sql.rs`); `tests/store_transitions.rs` holds the two to
//! each other case by case.

use crate::backoff::Backoff;
use crate::retry_policy::RetryPolicy;
use crate::status::TaskStatus;
use std::time::Duration;

/// How a run's end is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRun {
    /// Wait as `scheduled` and run again after the delay.
    Retry {
        /// How long it waits before it is queued again.
        delay: Duration,
    },
    /// The task is over.
    Terminal(TaskStatus),
}

/// Who ended the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndedBy {
    /// The runner, with the run's result.
    Runner,
    /// The server, without one: the runner was lost or forgot the run.
    Server,
}

/// A run's end, as the retry rule reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnded {
    /// The status the run was in: `running` or `cancelling`.
    pub from: TaskStatus,
    /// What the run ended with, as reported or as the server decided.
    pub outcome: TaskStatus,
    /// Whether the runner or the server ended it.
    pub by: EndedBy,
    /// The run's exit code, if its process exited.
    pub exit_code: Option<i32>,
    /// Stopped at its `timeout_s` (see [`timed_out`]).
    pub timed_out: bool,
}

impl RunEnded {
    /// An end with no exit code that is not a timeout (or is, when `outcome` is
    /// `timed_out`): what the server decides on its own.
    pub fn without_exit_code(from: TaskStatus, outcome: TaskStatus, by: EndedBy) -> RunEnded {
        RunEnded {
            from,
            outcome,
            by,
            exit_code: None,
            timed_out: outcome == TaskStatus::TimedOut,
        }
    }
}

/// Task retry backoff: 2 s doubling to 5 min, ±20 %.
pub const TASK_RETRY: Backoff = Backoff {
    initial: Duration::from_secs(2),
    max: Duration::from_secs(300),
    jitter: 0.2,
};

/// How a runner's report says it stopped a run at its timeout: `failed`, no exit code,
/// and an error that starts so (the runner's executor writes it; runners of every
/// release so far have). The status stays `failed` — `timed_out` is the server's verdict
/// on a run whose runner never reported — but a retry policy's `on_timeout` judges it.
pub const RUNNER_TIMEOUT_ERROR: &str = "timed out after ";

/// The error of the server's own `timed_out`: a run its runner listed as still running
/// past its timeout and grace (`reconcile::overdue`).
pub const SERVER_TIMEOUT_ERROR: &str = "timed out";

/// The error of a run its runner no longer lists (it never started it, or gave it up),
/// or left out of what it held as it unregistered.
pub const FORGOTTEN_ERROR: &str = "the runner no longer runs it";

/// Whether a run ended at its timeout: the server's `timed_out`, or the runner's own
/// timeout as it reports it ([`RUNNER_TIMEOUT_ERROR`]).
pub fn timed_out(outcome: TaskStatus, exit_code: Option<i32>, error: Option<&str>) -> bool {
    outcome == TaskStatus::TimedOut
        || (outcome == TaskStatus::Failed
            && exit_code.is_none()
            && error.is_some_and(|e| e.starts_with(RUNNER_TIMEOUT_ERROR)))
}

/// `attempt` is the attempt that just ran (1-based). `policy`: the task's own, or none
/// for the node's rule, whose waits `backoff` gives. `unit` is a random draw in `[0, 1)`
/// for the jitter.
pub fn after_run(
    run: &RunEnded,
    attempt: i32,
    max_attempts: i32,
    policy: Option<&RetryPolicy>,
    backoff: &Backoff,
    unit: f64,
) -> AfterRun {
    let retryable = matches!(run.outcome, TaskStatus::Failed | TaskStatus::TimedOut);
    if run.from == TaskStatus::Cancelling && run.by == EndedBy::Server {
        return AfterRun::Terminal(TaskStatus::Cancelled);
    }
    let policy_agrees = policy.is_none_or(|p| p.retries(run.exit_code, run.timed_out));
    if run.from == TaskStatus::Running && retryable && attempt < max_attempts && policy_agrees {
        let failures = attempt.max(1) as u32;
        AfterRun::Retry {
            delay: match policy {
                Some(p) => p.delay(failures, unit),
                None => backoff.delay(failures, unit),
            },
        }
    } else {
        AfterRun::Terminal(run.outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::*;
    use super::*;

    fn ended(from: TaskStatus, outcome: TaskStatus, by: EndedBy) -> RunEnded {
        RunEnded::without_exit_code(from, outcome, by)
    }

    fn next(from: TaskStatus, outcome: TaskStatus, attempt: i32, max: i32) -> AfterRun {
        let run = ended(from, outcome, EndedBy::Runner);
        after_run(&run, attempt, max, None, &TASK_RETRY, 0.5)
    }

    fn retry(secs: u64) -> AfterRun {
        AfterRun::Retry {
            delay: Duration::from_secs(secs),
        }
    }

    #[test]
    fn retry_table() {
        assert_eq!(next(Running, Failed, 1, 3), retry(2));
        assert_eq!(next(Running, Failed, 2, 3), retry(4));
        assert_eq!(next(Running, TimedOut, 1, 2), retry(2));
        assert_eq!(next(Running, Failed, 3, 3), AfterRun::Terminal(Failed));
        assert_eq!(next(Running, TimedOut, 1, 1), AfterRun::Terminal(TimedOut));
        assert_eq!(
            next(Running, Succeeded, 1, 3),
            AfterRun::Terminal(Succeeded)
        );
        assert_eq!(
            next(Running, Cancelled, 1, 3),
            AfterRun::Terminal(Cancelled),
            "cancelled never retries"
        );
        assert_eq!(
            next(Cancelling, Failed, 1, 3),
            AfterRun::Terminal(Failed),
            "a result during a cancel stands"
        );
        let by_server = |from| ended(from, Failed, EndedBy::Server);
        assert_eq!(
            after_run(&by_server(Cancelling), 1, 3, None, &TASK_RETRY, 0.5),
            AfterRun::Terminal(Cancelled),
            "a cancel the server ends without a result is a cancel"
        );
        assert_eq!(
            after_run(&by_server(Running), 1, 3, None, &TASK_RETRY, 0.5),
            retry(2),
            "a lost runner retries"
        );
    }

    #[test]
    fn a_policy_narrows_which_failures_retry_and_sets_the_wait() {
        let policy = RetryPolicy {
            backoff_base_s: Some(10.0),
            backoff_factor: Some(3.0),
            backoff_cap_s: Some(60.0),
            jitter: Some(0.0),
            on_exit_codes: Some(vec![3]),
            on_timeout: Some(false),
            ..RetryPolicy::default()
        };
        let exited = |code| RunEnded {
            exit_code: Some(code),
            ..ended(Running, Failed, EndedBy::Runner)
        };
        let decide =
            |run: &RunEnded, attempt| after_run(run, attempt, 5, Some(&policy), &TASK_RETRY, 0.5);
        assert_eq!(decide(&exited(3), 1), retry(10));
        assert_eq!(decide(&exited(3), 2), retry(30));
        assert_eq!(decide(&exited(3), 3), retry(60), "capped");
        assert_eq!(decide(&exited(4), 1), AfterRun::Terminal(Failed));
        let timeout = |outcome, error| RunEnded {
            timed_out: timed_out(outcome, None, error),
            ..ended(Running, outcome, EndedBy::Runner)
        };
        assert_eq!(
            decide(&timeout(Failed, Some("timed out after 5 s")), 1),
            AfterRun::Terminal(Failed),
            "the runner's own timeout, on_timeout false"
        );
        assert_eq!(
            decide(&timeout(TimedOut, None), 1),
            AfterRun::Terminal(TimedOut),
            "the server's timeout, on_timeout false"
        );
        assert_eq!(
            decide(&timeout(Failed, Some("killed by signal 9")), 1),
            retry(10),
            "no exit code and no timeout: retried"
        );
        assert_eq!(
            after_run(&exited(3), 5, 5, Some(&policy), &TASK_RETRY, 0.5),
            AfterRun::Terminal(Failed),
            "max_attempts still bounds the retries"
        );
        let mut cancel = exited(3);
        cancel.outcome = Cancelled;
        assert_eq!(decide(&cancel, 1), AfterRun::Terminal(Cancelled));
    }

    #[test]
    fn only_the_runners_timeout_report_reads_as_a_timeout() {
        assert!(timed_out(TimedOut, None, None));
        assert!(timed_out(Failed, None, Some("timed out after 60 s")));
        assert!(!timed_out(Failed, Some(1), Some("timed out after 60 s")));
        assert!(!timed_out(Failed, None, Some("killed by signal 9")));
        assert!(!timed_out(Cancelled, None, Some("timed out after 60 s")));
    }
}
