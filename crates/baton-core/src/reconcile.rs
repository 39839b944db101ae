//! What to do with one claimed task: the reconciler's decision, apart from all I/O
//! (design.md §5).
//!
//! Two thresholds with distinct meaning: a runner *offline* longer than
//! `runner_offline_after` gets its not-yet-started tasks taken back (safe: they never
//! ran), but offline does not mean its running jobs stopped; only a runner *lost* for
//! `runner_lost_after` has its running tasks ended. A new `boot_id` proves a restart lost
//! the runner's jobs, so that needs no clock at all.
//!
//! Staleness clocks never start before `clocks_since`: after an outage of our own (Redis
//! or Postgres unreachable, Redis data lost) a runner is not declared offline or lost
//! because the server could not hear it.
//!
//! A run past its timeout is not the reconciler's to end: hearing the runner says nothing
//! of the run — its result may be held up on its way, or its start may never have reached
//! the runner. Only the runner's own list can say it still runs the task past its
//! deadline ([`overdue`], judged on its heartbeat); a run it no longer lists is ended as
//! forgotten there too; a silent runner is left to the lost-runner rule.

use crate::status::TaskStatus;
use chrono::{DateTime, Duration, Utc};
use std::fmt;
use uuid::Uuid;

/// The reconciler's thresholds (the module doc says why there are two for a silent runner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// How long a runner may be unheard before the tasks it has not started are taken back.
    pub runner_offline_after: Duration,
    /// How long a runner may be unheard before its running tasks are ended.
    pub runner_lost_after: Duration,
    /// How long a leased task may wait for its runner's `start`.
    pub ack_timeout: Duration,
    /// Added to a task's own `timeout_s` before a heartbeat listing its run as still
    /// running makes the server end it ([`overdue`]): the runner enforces the timeout
    /// itself, and its timer may fire late on a busy machine.
    pub timeout_grace: Duration,
    /// How long a claim may exist on a task Postgres still calls `queued` before the
    /// dispatch is presumed dead (the node died between the Redis pop and the Postgres
    /// write).
    pub dispatch_grace: Duration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            runner_offline_after: Duration::seconds(90),
            runner_lost_after: Duration::seconds(180),
            ack_timeout: Duration::seconds(30),
            timeout_grace: Duration::seconds(40),
            dispatch_grace: Duration::seconds(10),
        }
    }
}

/// The task as the reconciler needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskFacts {
    /// Where the task is, in Postgres (a lease held in Redis only is `leased` here).
    pub status: TaskStatus,
    /// When its lease was made.
    pub leased_at: Option<DateTime<Utc>>,
    /// When its runner started it.
    pub started_at: Option<DateTime<Utc>>,
    /// Its own timeout, in seconds.
    pub timeout_s: i64,
    /// The attempt that is running (1-based).
    pub attempt: i32,
    /// How many attempts it may have.
    pub max_attempts: i32,
    /// The runner process (boot) the task was leased to.
    pub boot_id: Option<Uuid>,
}

/// The runner holding the task, as last heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerFacts {
    /// No such runner: it will never report.
    Gone,
    /// Deleted by an operator. Its agent learns it (401) on its next request and kills
    /// its tasks — but an agent cut off from every node never hears it, and kills its
    /// tasks only when it has heard nothing for its `fence_after`. So its started tasks
    /// are ended after the same silence as a lost runner's (`runner_lost_after`, which
    /// exceeds `fence_after`), not before; a task it never started goes back at once.
    Deleted {
        /// When it was last heard, if ever.
        last_seen: Option<DateTime<Utc>>,
    },
    /// Known to Postgres and not deleted.
    Known {
        /// When it was last heard, if ever.
        last_seen: Option<DateTime<Utc>>,
        /// The boot it last said it runs as.
        boot_id: Option<Uuid>,
    },
}

/// Everything one decision reads; the clock is passed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs {
    /// The task.
    pub task: TaskFacts,
    /// Its runner, as last heard.
    pub runner: RunnerFacts,
    /// When this node's claim on it was made.
    pub claimed_at: DateTime<Utc>,
    /// The time of this decision.
    pub now: DateTime<Utc>,
    /// Staleness is measured from no earlier than this.
    pub clocks_since: DateTime<Utc>,
}

/// Why a task is taken back or its run ended, as told to its user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Claimed, but Postgres still calls it `queued` past the dispatch grace.
    NeverDispatched,
    /// Its runner has been unheard past `runner_offline_after`.
    RunnerOffline,
    /// Its runner did not start it within the ack timeout.
    AckTimeout,
    /// Its runner has been unheard past `runner_lost_after`.
    RunnerLost,
    /// Its runner came back under a new boot, which lost its runs.
    RunnerRestarted,
    /// Its runner was deleted (or is gone).
    RunnerDeleted,
}

impl Reason {
    /// The reason in words, as stored in the task's `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NeverDispatched => "claimed but never dispatched",
            Reason::RunnerOffline => "runner offline",
            Reason::AckTimeout => "not started within the ack timeout",
            Reason::RunnerLost => "runner lost",
            Reason::RunnerRestarted => "runner restarted",
            Reason::RunnerDeleted => "runner deleted",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the reconciler does with one claimed task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing yet: look again next pass.
    Keep,
    /// Back to the queue. Only for tasks that never started: safe to hand out again.
    Requeue(Reason),
    /// The run is over without a report: `scheduled` again when `retry`, otherwise
    /// `failed`.
    EndRun {
        /// Why the run ended.
        reason: Reason,
        /// Whether attempts remain: the task waits `scheduled` for another.
        retry: bool,
    },
    /// A cancel was pending and the runner will not report: `cancelled`.
    Cancel(Reason),
    /// The task no longer needs a claim (terminal, or waiting as `scheduled`).
    DropClaim,
}

fn end_run(task: &TaskFacts, reason: Reason) -> Decision {
    Decision::EndRun {
        reason,
        retry: task.attempt < task.max_attempts,
    }
}

/// Whether a run its runner lists as still running — not reporting — as of `as_of` (the
/// server time its list is as of) has outlived its timeout and grace: the runner has let
/// its own timeout pass, and the server ends the run `timed_out`. A runner that enforces
/// its timeouts never lists a run so: its timer fires before the server's start plus the
/// timeout, and from then on it lists the run as reporting.
pub fn overdue(
    started_at: DateTime<Utc>,
    timeout_s: i64,
    t: &Thresholds,
    as_of: DateTime<Utc>,
) -> bool {
    as_of > started_at + Duration::seconds(timeout_s) + t.timeout_grace
}

/// Whether `seen` is a boot of the runner after `ran` (the boot the task was leased to).
/// Boot ids are UUIDv7, ordered by the time the agent started, so a presence written late
/// by a node that still held the older boot is not taken for a restart. Boots of agents
/// from before v7 ids have no order: any other boot counts, as it always did.
pub fn is_later_boot(seen: Uuid, ran: Uuid) -> bool {
    let v7 = |id: Uuid| id.get_version_num() == 7;
    if v7(seen) && v7(ran) {
        seen > ran
    } else {
        seen != ran
    }
}

/// The reconciler's decision for one claimed task.
pub fn decide(i: &Inputs, t: &Thresholds) -> Decision {
    let task = &i.task;
    let since = |at: Option<DateTime<Utc>>| {
        let from = at.map_or(i.clocks_since, |at| at.max(i.clocks_since));
        i.now - from
    };
    // The runner was surely heard when it leased and when it started this task: both are
    // its own requests. A presence read before them (the pass began earlier, or the
    // node that took them writes presence lazily) must not make a runner that just
    // started the task look long silent.
    let heard =
        |last_seen: Option<DateTime<Utc>>| last_seen.max(task.leased_at).max(task.started_at);
    // What the runner's state says about a task it holds, most certain first.
    let runner_verdict = || match i.runner {
        RunnerFacts::Gone => Some(Reason::RunnerDeleted),
        // Not started: safe to take back at once. Started: once the agent has surely
        // killed the process, whether it heard of its deletion or was cut off.
        RunnerFacts::Deleted { .. } if task.status == TaskStatus::Leased => {
            Some(Reason::RunnerDeleted)
        }
        RunnerFacts::Deleted { last_seen } if since(heard(last_seen)) > t.runner_lost_after => {
            Some(Reason::RunnerDeleted)
        }
        RunnerFacts::Deleted { .. } => None,
        RunnerFacts::Known {
            boot_id: Some(seen),
            ..
        } if task.boot_id.is_some_and(|ran| is_later_boot(seen, ran)) => {
            Some(Reason::RunnerRestarted)
        }
        RunnerFacts::Known { last_seen, .. } if since(heard(last_seen)) > t.runner_lost_after => {
            Some(Reason::RunnerLost)
        }
        RunnerFacts::Known { .. } => None,
    };
    match task.status {
        TaskStatus::Queued if i.now - i.claimed_at > t.dispatch_grace => {
            Decision::Requeue(Reason::NeverDispatched)
        }
        TaskStatus::Queued => Decision::Keep,
        TaskStatus::Leased => match (runner_verdict(), i.runner) {
            (Some(reason), _) => Decision::Requeue(reason),
            (None, RunnerFacts::Known { last_seen, .. })
                if since(heard(last_seen)) > t.runner_offline_after =>
            {
                Decision::Requeue(Reason::RunnerOffline)
            }
            _ if since(task.leased_at) > t.ack_timeout => Decision::Requeue(Reason::AckTimeout),
            _ => Decision::Keep,
        },
        TaskStatus::Running => match runner_verdict() {
            Some(reason) => end_run(task, reason),
            None => Decision::Keep,
        },
        TaskStatus::Cancelling => match runner_verdict() {
            Some(reason) => Decision::Cancel(reason),
            None => Decision::Keep,
        },
        TaskStatus::Waiting
        | TaskStatus::Scheduled
        | TaskStatus::Succeeded
        | TaskStatus::Failed
        | TaskStatus::Cancelled
        | TaskStatus::TimedOut
        | TaskStatus::Expired
        | TaskStatus::Skipped => Decision::DropClaim,
    }
}

#[cfg(test)]
mod tests;
