//! What follows a run that ended: a retry or the terminal state. `failed`, `timed_out`
//! and a lost runner retry while attempts remain; a cancel never does, and a result that
//! a runner reports while a cancel is pending stands as reported. A run the server ends
//! itself while a cancel is pending (its runner lost, or the run forgotten) ends
//! `cancelled`: the user asked for it, and no result came to stand instead.

use crate::backoff::Backoff;
use crate::status::TaskStatus;
use std::time::Duration;

/// How a run's end is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterRun {
    /// Wait as `scheduled` and run again after the delay.
    Retry { delay: Duration },
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

/// Task retry backoff: 2 s doubling to 5 min, ±20 %.
pub const TASK_RETRY: Backoff = Backoff {
    initial: Duration::from_secs(2),
    max: Duration::from_secs(300),
    jitter: 0.2,
};

/// `from` is the status the run was in (`running` or `cancelling`), `outcome` how it
/// ended and `by` who said so, `attempt` the attempt that just ran (1-based). `unit` is
/// a random draw in `[0, 1)` for the jitter.
pub fn after_run(
    from: TaskStatus,
    outcome: TaskStatus,
    by: EndedBy,
    attempt: i32,
    max_attempts: i32,
    backoff: &Backoff,
    unit: f64,
) -> AfterRun {
    let retryable = matches!(outcome, TaskStatus::Failed | TaskStatus::TimedOut);
    if from == TaskStatus::Cancelling && by == EndedBy::Server {
        return AfterRun::Terminal(TaskStatus::Cancelled);
    }
    if from == TaskStatus::Running && retryable && attempt < max_attempts {
        AfterRun::Retry {
            delay: backoff.delay(attempt.max(1) as u32, unit),
        }
    } else {
        AfterRun::Terminal(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::*;
    use super::*;

    fn next(from: TaskStatus, outcome: TaskStatus, attempt: i32, max: i32) -> AfterRun {
        after_run(
            from,
            outcome,
            EndedBy::Runner,
            attempt,
            max,
            &TASK_RETRY,
            0.5,
        )
    }

    #[test]
    fn retry_table() {
        let retry = |secs| AfterRun::Retry {
            delay: Duration::from_secs(secs),
        };
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
        assert_eq!(
            after_run(Cancelling, Failed, EndedBy::Server, 1, 3, &TASK_RETRY, 0.5),
            AfterRun::Terminal(Cancelled),
            "a cancel the server ends without a result is a cancel"
        );
        assert_eq!(
            after_run(Running, Failed, EndedBy::Server, 1, 3, &TASK_RETRY, 0.5),
            retry(2),
            "a lost runner retries"
        );
    }
}
