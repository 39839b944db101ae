//! The reconciler's decision table and the invariants it keeps, as property tests.

use super::TaskStatus::*;
use super::*;
use chrono::TimeZone;
use proptest::prelude::*;

fn at(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + s, 0).unwrap()
}

/// The thresholds the cases below are worked out with: the defaults but a 30 s timeout
/// grace (a task started at 1 with a 600 s timeout is due at 631).
fn thresholds() -> Thresholds {
    Thresholds {
        timeout_grace: Duration::seconds(30),
        ..Thresholds::default()
    }
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
        retry: false,
    }
}

#[test]
fn decision_table() {
    let t = thresholds();
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
            "running, past timeout plus grace, its runner heard: its list judges it, not this",
            inputs(task(Running), seen(632), 632),
            Decision::Keep,
        ),
        (
            "running, past timeout, runner silent since before the deadline",
            inputs(task(Running), seen(600), 700),
            Decision::Keep,
        ),
        (
            "running, past timeout and silent past the lost threshold",
            inputs(task(Running), seen(0), 700),
            fail(Reason::RunnerLost),
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
            "cancelling, past timeout, its runner heard",
            inputs(task(Cancelling), seen(700), 700),
            Decision::Keep,
        ),
        (
            "cancelling, past timeout, runner silent since before the deadline",
            inputs(task(Cancelling), seen(600), 700),
            Decision::Keep,
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
    let t = thresholds();
    let mut running = task(Running);
    running.max_attempts = 3;
    running.attempt = 2;
    let d = decide(&inputs(running, seen(0), 182), &t);
    assert_eq!(
        d,
        Decision::EndRun {
            reason: Reason::RunnerLost,
            retry: true
        }
    );
    running.attempt = 3;
    let d = decide(&inputs(running, seen(0), 182), &t);
    assert_eq!(
        d,
        Decision::EndRun {
            reason: Reason::RunnerLost,
            retry: false
        }
    );
}

#[test]
fn a_listed_run_is_overdue_only_past_its_timeout_and_grace() {
    let t = thresholds();
    // Started at 1 with a 600 s timeout and a 30 s grace: due at 631.
    assert!(!overdue(at(1), 600, &t, at(631)));
    assert!(overdue(at(1), 600, &t, at(632)));
}

#[test]
fn a_start_is_contact() {
    let t = thresholds();
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
    let t = thresholds();
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
        let d = decide(&i, &thresholds());
        match d {
            // Only work that never started is handed out again: nothing runs twice.
            Decision::Requeue(_) => prop_assert!(matches!(i.task.status, Queued | Leased)),
            Decision::EndRun { retry, .. } => {
                prop_assert_eq!(i.task.status, Running);
                prop_assert_eq!(retry, i.task.attempt < i.task.max_attempts);
            }
            Decision::Cancel(_) => prop_assert_eq!(i.task.status, Cancelling),
            Decision::DropClaim => prop_assert!(i.task.status.is_terminal() || matches!(i.task.status, Scheduled | Waiting)),
            Decision::Keep => prop_assert!(matches!(i.task.status, Queued | Leased | Running | Cancelling)),
        }
    }

    #[test]
    fn staleness_never_fires_right_after_an_outage(mut i in any_inputs()) {
        i.clocks_since = i.now;
        let d = decide(&i, &thresholds());
        let stale = |r: Reason| matches!(r, Reason::RunnerOffline | Reason::RunnerLost | Reason::AckTimeout);
        match d {
            Decision::Requeue(r) | Decision::Cancel(r) | Decision::EndRun { reason: r, .. } => prop_assert!(!stale(r), "{:?}", d),
            Decision::Keep | Decision::DropClaim => {}
        }
    }

    /// However long past its timeout, a run is not the reconciler's to end while its
    /// runner is heard: its result may be on its way, or its start never arrived
    /// (Known limits 11 and 12 of an earlier release). Only silence, a restart or a
    /// deletion end it here.
    #[test]
    fn a_heard_runners_run_is_never_ended_for_its_timeout(i in any_inputs()) {
        if let Decision::EndRun { reason, .. } | Decision::Cancel(reason) = decide(&i, &thresholds()) {
            prop_assert!(matches!(
                reason,
                Reason::RunnerLost | Reason::RunnerDeleted | Reason::RunnerRestarted
            ), "{:?}", reason);
        }
    }

    #[test]
    fn a_fresh_runner_on_the_same_boot_keeps_its_running_task(mut i in any_inputs()) {
        i.task.status = Running;
        i.task.started_at = Some(i.now);
        i.task.boot_id = Some(BOOT);
        i.runner = RunnerFacts::Known { last_seen: Some(i.now), boot_id: Some(BOOT) };
        prop_assert_eq!(decide(&i, &thresholds()), Decision::Keep);
    }
}
