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

use crate::status::TaskStatus;
use chrono::{DateTime, Duration, Utc};
use std::fmt;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub runner_offline_after: Duration,
    pub runner_lost_after: Duration,
    /// How long a leased task may wait for its runner's `start`.
    pub ack_timeout: Duration,
    /// Added to a task's own `timeout_s` before the server ends it: the runner enforces
    /// the timeout itself and should get to report first.
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
            timeout_grace: Duration::seconds(30),
            dispatch_grace: Duration::seconds(10),
        }
    }
}

/// The task as the reconciler needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskFacts {
    pub status: TaskStatus,
    pub leased_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub timeout_s: i64,
    pub attempt: i32,
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
    Deleted { last_seen: Option<DateTime<Utc>> },
    Known {
        last_seen: Option<DateTime<Utc>>,
        boot_id: Option<Uuid>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs {
    pub task: TaskFacts,
    pub runner: RunnerFacts,
    pub claimed_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
    /// Staleness is measured from no earlier than this.
    pub clocks_since: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    NeverDispatched,
    RunnerOffline,
    AckTimeout,
    RunnerLost,
    RunnerRestarted,
    RunnerDeleted,
    TimedOut,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NeverDispatched => "claimed but never dispatched",
            Reason::RunnerOffline => "runner offline",
            Reason::AckTimeout => "not started within the ack timeout",
            Reason::RunnerLost => "runner lost",
            Reason::RunnerRestarted => "runner restarted",
            Reason::RunnerDeleted => "runner deleted",
            Reason::TimedOut => "timed out",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Keep,
    /// Back to the queue. Only for tasks that never started: safe to hand out again.
    Requeue(Reason),
    /// The run is over without a report: `scheduled` again when `retry`, otherwise the
    /// terminal `status` (`failed` or `timed_out`).
    EndRun {
        reason: Reason,
        status: TaskStatus,
        retry: bool,
    },
    /// A cancel was pending and the runner will not report: `cancelled`.
    Cancel(Reason),
    /// The task no longer needs a claim (terminal, or waiting as `scheduled`).
    DropClaim,
}

fn end_run(task: &TaskFacts, reason: Reason) -> Decision {
    let status = if reason == Reason::TimedOut {
        TaskStatus::TimedOut
    } else {
        TaskStatus::Failed
    };
    Decision::EndRun {
        reason,
        status,
        retry: task.attempt < task.max_attempts,
    }
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
    // The grace lets the runner, which enforces the timeout itself, report first; it
    // could not while this node's stores were out, so the grace runs from the outage's
    // end too.
    let past_timeout = task.started_at.is_some_and(|started| {
        i.now - started > Duration::seconds(task.timeout_s) + t.timeout_grace
            && i.now - i.clocks_since > t.timeout_grace
    });

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
            Some(reason @ (Reason::RunnerDeleted | Reason::RunnerRestarted)) => {
                end_run(task, reason)
            }
            _ if past_timeout => end_run(task, Reason::TimedOut),
            Some(reason) => end_run(task, reason),
            None => Decision::Keep,
        },
        TaskStatus::Cancelling => match runner_verdict() {
            Some(reason) => Decision::Cancel(reason),
            None if past_timeout => Decision::Cancel(Reason::TimedOut),
            None => Decision::Keep,
        },
        TaskStatus::Scheduled
        | TaskStatus::Succeeded
        | TaskStatus::Failed
        | TaskStatus::Cancelled
        | TaskStatus::TimedOut
        | TaskStatus::Expired => Decision::DropClaim,
    }
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::*;
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
    }

    const BOOT: Uuid = Uuid::from_u128(1);
    const OTHER_BOOT: Uuid = Uuid::from_u128(2);

    fn task(status: TaskStatus) -> TaskFacts {
        TaskFacts {
            status,
            leased_at: Some(at(0)),
            started_at: matches!(status, Running | Cancelling).then(|| at(1)),
            timeout_s: 600,
            attempt: 1,
            max_attempts: 1,
            boot_id: Some(BOOT),
        }
    }

    /// An agent's boot id, as agents make them (UUIDv7), started at `ms`.
    fn boot_at(ms: u64) -> Uuid {
        Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            ms / 1000,
            (ms % 1000) as u32 * 1_000_000,
        ))
    }

    fn seen(s: i64) -> RunnerFacts {
        RunnerFacts::Known {
            last_seen: Some(at(s)),
            boot_id: Some(BOOT),
        }
    }

    fn inputs(task: TaskFacts, runner: RunnerFacts, now: i64) -> Inputs {
        Inputs {
            task,
            runner,
            claimed_at: at(0),
            now: at(now),
            clocks_since: at(-1000),
        }
    }

    fn fail(reason: Reason) -> Decision {
        Decision::EndRun {
            reason,
            status: if reason == Reason::TimedOut {
                TimedOut
            } else {
                Failed
            },
            retry: false,
        }
    }

    #[test]
    fn decision_table() {
        let t = Thresholds::default();
        let restarted = RunnerFacts::Known {
            last_seen: Some(at(5)),
            boot_id: Some(OTHER_BOOT),
        };
        let cases: Vec<(&str, Inputs, Decision)> = vec![
            (
                "queued claim within the dispatch grace",
                inputs(task(Queued), seen(0), 5),
                Decision::Keep,
            ),
            (
                "queued claim past the dispatch grace",
                inputs(task(Queued), seen(0), 11),
                Decision::Requeue(Reason::NeverDispatched),
            ),
            (
                "leased, runner fresh, within ack",
                inputs(task(Leased), seen(20), 25),
                Decision::Keep,
            ),
            (
                "leased, never started within ack",
                inputs(task(Leased), seen(40), 41),
                Decision::Requeue(Reason::AckTimeout),
            ),
            (
                "leased, runner offline",
                inputs(task(Leased), seen(0), 91),
                Decision::Requeue(Reason::RunnerOffline),
            ),
            (
                "leased, runner lost",
                inputs(task(Leased), seen(0), 181),
                Decision::Requeue(Reason::RunnerLost),
            ),
            (
                "leased, runner restarted",
                inputs(task(Leased), restarted, 6),
                Decision::Requeue(Reason::RunnerRestarted),
            ),
            (
                "running, an older boot seen late (a node's stale presence): no restart",
                inputs(
                    TaskFacts {
                        boot_id: Some(boot_at(2_000)),
                        ..task(Running)
                    },
                    RunnerFacts::Known {
                        last_seen: Some(at(5)),
                        boot_id: Some(boot_at(1_000)),
                    },
                    6,
                ),
                Decision::Keep,
            ),
            (
                "running, a later boot: restarted",
                inputs(
                    TaskFacts {
                        boot_id: Some(boot_at(1_000)),
                        ..task(Running)
                    },
                    RunnerFacts::Known {
                        last_seen: Some(at(5)),
                        boot_id: Some(boot_at(2_000)),
                    },
                    6,
                ),
                fail(Reason::RunnerRestarted),
            ),
            (
                "leased, runner deleted",
                inputs(task(Leased), RunnerFacts::Gone, 1),
                Decision::Requeue(Reason::RunnerDeleted),
            ),
            (
                "running, runner fresh",
                inputs(task(Running), seen(100), 100),
                Decision::Keep,
            ),
            (
                "running, runner offline but not lost",
                inputs(task(Running), seen(0), 150),
                Decision::Keep,
            ),
            (
                "running, runner lost",
                inputs(task(Running), seen(0), 182),
                fail(Reason::RunnerLost),
            ),
            (
                "running, runner restarted",
                inputs(task(Running), restarted, 6),
                fail(Reason::RunnerRestarted),
            ),
            (
                "running, runner unknown",
                inputs(task(Running), RunnerFacts::Gone, 2),
                fail(Reason::RunnerDeleted),
            ),
            (
                "running, runner deleted, not silent long enough to have killed it",
                inputs(
                    task(Running),
                    RunnerFacts::Deleted {
                        last_seen: Some(at(0)),
                    },
                    60,
                ),
                Decision::Keep,
            ),
            (
                "running, runner deleted, silent past the offline threshold: a cut-off \
                 agent may not have fenced yet",
                inputs(
                    task(Running),
                    RunnerFacts::Deleted {
                        last_seen: Some(at(0)),
                    },
                    151,
                ),
                Decision::Keep,
            ),
            (
                "running, runner deleted and silent past the lost threshold",
                inputs(
                    task(Running),
                    RunnerFacts::Deleted {
                        last_seen: Some(at(0)),
                    },
                    182,
                ),
                fail(Reason::RunnerDeleted),
            ),
            (
                "leased, runner deleted: never started, taken back at once",
                inputs(
                    task(Leased),
                    RunnerFacts::Deleted {
                        last_seen: Some(at(0)),
                    },
                    1,
                ),
                Decision::Requeue(Reason::RunnerDeleted),
            ),
            (
                "running, within timeout plus grace",
                inputs(task(Running), seen(630), 631),
                Decision::Keep,
            ),
            (
                "running, past timeout plus grace",
                inputs(task(Running), seen(632), 632),
                fail(Reason::TimedOut),
            ),
            (
                "running, past timeout and silent",
                inputs(task(Running), seen(0), 700),
                fail(Reason::TimedOut),
            ),
            (
                "cancelling, runner fresh",
                inputs(task(Cancelling), seen(10), 10),
                Decision::Keep,
            ),
            (
                "cancelling, runner lost",
                inputs(task(Cancelling), seen(0), 182),
                Decision::Cancel(Reason::RunnerLost),
            ),
            (
                "cancelling, runner deleted",
                inputs(task(Cancelling), RunnerFacts::Gone, 1),
                Decision::Cancel(Reason::RunnerDeleted),
            ),
            (
                "cancelling, runner restarted",
                inputs(task(Cancelling), restarted, 6),
                Decision::Cancel(Reason::RunnerRestarted),
            ),
            (
                "cancelling, past timeout",
                inputs(task(Cancelling), seen(700), 700),
                Decision::Cancel(Reason::TimedOut),
            ),
            (
                "scheduled keeps no claim",
                inputs(task(Scheduled), seen(0), 1),
                Decision::DropClaim,
            ),
            (
                "succeeded keeps no claim",
                inputs(task(Succeeded), seen(0), 1),
                Decision::DropClaim,
            ),
            (
                "failed keeps no claim",
                inputs(task(Failed), seen(0), 1),
                Decision::DropClaim,
            ),
            (
                "cancelled keeps no claim",
                inputs(task(Cancelled), seen(0), 1),
                Decision::DropClaim,
            ),
            (
                "timed out keeps no claim",
                inputs(task(TimedOut), seen(0), 1),
                Decision::DropClaim,
            ),
            (
                "expired keeps no claim",
                inputs(task(Expired), seen(0), 1),
                Decision::DropClaim,
            ),
        ];
        for (name, input, expected) in cases {
            assert_eq!(decide(&input, &t), expected, "{name}");
        }
    }

    #[test]
    fn attempts_left_mean_retry() {
        let t = Thresholds::default();
        let mut running = task(Running);
        running.max_attempts = 3;
        running.attempt = 2;
        let d = decide(&inputs(running, seen(0), 182), &t);
        assert_eq!(
            d,
            Decision::EndRun {
                reason: Reason::RunnerLost,
                status: Failed,
                retry: true
            }
        );
        running.attempt = 3;
        let d = decide(&inputs(running, seen(0), 182), &t);
        assert_eq!(
            d,
            Decision::EndRun {
                reason: Reason::RunnerLost,
                status: Failed,
                retry: false
            }
        );
    }

    #[test]
    fn a_timeout_waits_out_the_grace_after_our_own_outage() {
        let t = Thresholds::default();
        let running = task(Running);
        // Started at 1 with a 600 s timeout and a 30 s grace: due at 631.
        let mut i = inputs(running, seen(700), 700);
        assert_eq!(decide(&i, &t), fail(Reason::TimedOut));
        // Our stores came back 10 s ago: the runner's held verdict may still be coming.
        i.clocks_since = at(690);
        assert_eq!(decide(&i, &t), Decision::Keep);
        i.now = at(721);
        assert_eq!(decide(&i, &t), fail(Reason::TimedOut));
    }

    #[test]
    fn a_start_is_contact() {
        let t = Thresholds::default();
        // Presence says silent for 300 s, but the runner started this task 1 s ago (a
        // presence read before its start, or written lazily): not lost.
        let mut running = task(Running);
        running.leased_at = Some(at(298));
        running.started_at = Some(at(299));
        assert_eq!(decide(&inputs(running, seen(0), 300), &t), Decision::Keep);
        // Nor offline when it leased the task a moment ago.
        let mut leased = task(Leased);
        leased.leased_at = Some(at(299));
        assert_eq!(decide(&inputs(leased, seen(0), 300), &t), Decision::Keep);
        // Silent long enough since the start, it is lost.
        assert_eq!(
            decide(&inputs(running, seen(0), 480), &t),
            fail(Reason::RunnerLost)
        );
    }

    #[test]
    fn our_own_outage_restarts_the_clocks() {
        let t = Thresholds::default();
        // Silent for 200 s, but Redis came back 10 s ago: nobody is declared lost.
        let mut i = inputs(task(Running), seen(0), 200);
        i.clocks_since = at(190);
        assert_eq!(decide(&i, &t), Decision::Keep);
        let mut i = inputs(task(Leased), seen(0), 200);
        i.clocks_since = at(190);
        assert_eq!(
            decide(&i, &t),
            Decision::Keep,
            "nor offline, nor past its ack timeout"
        );
        // A runner never heard from at all is measured from the outage too.
        let mut i = inputs(
            task(Running),
            RunnerFacts::Known {
                last_seen: None,
                boot_id: None,
            },
            200,
        );
        i.clocks_since = at(100);
        assert_eq!(decide(&i, &t), Decision::Keep);
        i.now = at(281);
        assert_eq!(decide(&i, &t), fail(Reason::RunnerLost));
    }

    fn any_status() -> impl Strategy<Value = TaskStatus> {
        proptest::sample::select(TaskStatus::ALL.to_vec())
    }

    prop_compose! {
        fn any_inputs()(
            status in any_status(),
            leased in proptest::option::of(-500i64..500),
            started in proptest::option::of(-500i64..500),
            timeout_s in 1i64..1000,
            attempt in 0i32..5,
            max_attempts in 1i32..5,
            task_boot in proptest::option::of(0u128..3),
            runner in proptest::option::of((proptest::option::of(-500i64..500), proptest::option::of(0u128..3))),
            claimed in -500i64..500,
            deleted in proptest::bool::ANY,
            now in 0i64..1500,
            since in -1000i64..1500,
        ) -> Inputs {
            Inputs {
                task: TaskFacts {
                    status,
                    leased_at: leased.map(at),
                    started_at: started.map(at),
                    timeout_s,
                    attempt,
                    max_attempts,
                    boot_id: task_boot.map(Uuid::from_u128),
                },
                runner: match runner {
                    None if deleted => RunnerFacts::Deleted { last_seen: leased.map(at) },
                    None => RunnerFacts::Gone,
                    Some((seen, boot)) => RunnerFacts::Known {
                        last_seen: seen.map(at),
                        boot_id: boot.map(Uuid::from_u128),
                    },
                },
                claimed_at: at(claimed),
                now: at(now),
                clocks_since: at(since.min(now)),
            }
        }
    }

    proptest! {
        #[test]
        fn each_decision_fits_the_status_it_moves(i in any_inputs()) {
            let d = decide(&i, &Thresholds::default());
            match d {
                // Only work that never started is handed out again: nothing runs twice.
                Decision::Requeue(_) => prop_assert!(matches!(i.task.status, Queued | Leased)),
                Decision::EndRun { status, retry, .. } => {
                    prop_assert_eq!(i.task.status, Running);
                    prop_assert!(matches!(status, Failed | TimedOut));
                    prop_assert_eq!(retry, i.task.attempt < i.task.max_attempts);
                }
                Decision::Cancel(_) => prop_assert_eq!(i.task.status, Cancelling),
                Decision::DropClaim => prop_assert!(i.task.status.is_terminal() || i.task.status == Scheduled),
                Decision::Keep => prop_assert!(matches!(i.task.status, Queued | Leased | Running | Cancelling)),
            }
        }

        #[test]
        fn staleness_never_fires_right_after_an_outage(mut i in any_inputs()) {
            i.clocks_since = i.now;
            let d = decide(&i, &Thresholds::default());
            let stale = |r: Reason| matches!(r, Reason::RunnerOffline | Reason::RunnerLost | Reason::AckTimeout);
            match d {
                Decision::Requeue(r) | Decision::Cancel(r) | Decision::EndRun { reason: r, .. } => prop_assert!(!stale(r), "{:?}", d),
                Decision::Keep | Decision::DropClaim => {}
            }
        }

        #[test]
        fn a_fresh_runner_on_the_same_boot_keeps_its_running_task(mut i in any_inputs()) {
            i.task.status = Running;
            i.task.started_at = Some(i.now);
            i.task.boot_id = Some(BOOT);
            i.runner = RunnerFacts::Known { last_seen: Some(i.now), boot_id: Some(BOOT) };
            prop_assert_eq!(decide(&i, &Thresholds::default()), Decision::Keep);
        }
    }
}
