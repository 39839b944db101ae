//! Runners on demand, the pure part (docs/dynamic-runners.md): which waiting tasks a
//! provisioner serves, how many of them no registered runner could take now (the
//! *demand*), how many runners to start for it, and what to do with each assignment — a
//! runner to start — given what is known of its runner. Nothing here reads a clock or
//! does I/O; the node's provisioner gathers the facts and acts on the verdicts.

use crate::backoff::Backoff;
use crate::labels::{LabelSet, runner_can_take};
use std::time::Duration;

/// The runners a provisioner starts: their labels and the queues they serve (empty: all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The labels every runner it starts carries.
    pub labels: LabelSet,
    /// The queues they serve; empty: every queue.
    pub queues: Vec<String>,
}

impl Offer {
    /// Whether a task waiting in `queue` with `labels` calls for a runner of this offer:
    /// such a runner may take it, and the task asks for a label. An unlabeled task never
    /// starts a runner: any runner may take it, and which one is the operator's choice.
    pub fn serves(&self, queue: &str, labels: &LabelSet) -> bool {
        !labels.is_empty() && runner_can_take(&self.labels, &self.queues, queue, labels)
    }
}

/// Tasks waiting in one queue key (a queue and a label set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The queue.
    pub queue: String,
    /// The label set its tasks need.
    pub labels: LabelSet,
    /// How many wait in it.
    pub tasks: u64,
}

/// A registered runner that could take a task now: live, not paused, not deleted, and
/// not one a provisioner started (those are counted by their assignments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeRunner {
    /// Its labels.
    pub labels: LabelSet,
    /// The queues it serves; empty: all.
    pub queues: Vec<String>,
    /// Its capacity less the tasks it holds.
    pub free: u64,
}

/// The demand an offer sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    /// Tasks waiting that a runner of the offer could take (and that ask for a label).
    pub waiting: u64,
    /// How many of them registered runners could take now, with their free slots.
    pub covered: u64,
}

impl Demand {
    /// Tasks waiting that no registered runner could take now.
    pub fn uncovered(&self) -> u64 {
        self.waiting - self.covered
    }
}

/// The demand for `offer`: the waiting tasks it serves, less those the free runners could
/// take now. Each free slot covers one task at most, the keys taken in the order given,
/// so a runner matching several keys is not counted twice; the cover is greedy, which may
/// leave a task uncovered that a better pairing would have covered — a runner started for
/// nothing, never a task left waiting.
pub fn demand(offer: &Offer, waiting: &[Waiting], free: &[FreeRunner]) -> Demand {
    let mut slots: Vec<u64> = free.iter().map(|r| r.free).collect();
    let mut demand = Demand::default();
    for key in waiting.iter().filter(|w| offer.serves(&w.queue, &w.labels)) {
        demand.waiting += key.tasks;
        let mut left = key.tasks;
        for (runner, slots) in free.iter().zip(slots.iter_mut()) {
            if left == 0 {
                break;
            }
            if *slots > 0
                && runner_can_take(&runner.labels, &runner.queues, &key.queue, &key.labels)
            {
                let take = left.min(*slots);
                *slots -= take;
                left -= take;
            }
        }
        demand.covered += key.tasks - left;
    }
    demand
}

/// A provisioner's assignments that count against its capacity and its demand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Assigned {
    /// Runners started that have not yet taken a task.
    pub starting: u64,
    /// Runners that took their task and still run.
    pub running: u64,
    /// Assignments whose runner failed to claim work, waiting to be tried again.
    pub retrying: u64,
    /// Assignments that gave up lately (their attempts spent): for a while each still
    /// stands for the task it was for, so a backend whose runners keep failing is not
    /// asked for a new one at every pass.
    pub cooling: u64,
}

/// How many new runners to start: never past `capacity` runners starting or running,
/// and never more starting (or about to start again, or lately given up) than tasks no
/// runner could take.
pub fn to_start(capacity: u64, uncovered: u64, assigned: Assigned) -> u64 {
    let room = capacity.saturating_sub(assigned.starting + assigned.running + assigned.retrying);
    let wanted = uncovered.saturating_sub(assigned.starting + assigned.retrying + assigned.cooling);
    room.min(wanted)
}

/// Where an assignment stands (its row's `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Its runner was started and has not yet taken a task.
    Starting,
    /// Its runner took a task.
    Running,
    /// Its runner failed to claim work in time; it may be tried again at `retry_at`.
    Retrying,
}

/// What is known of an assignment's runner, gathered by the node that owns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunnerFacts {
    /// It registered with the assignment's token.
    pub registered: bool,
    /// It unregistered (an ephemeral runner leaving after its task) or was deleted.
    pub left: bool,
    /// It is paused: it takes no task (a failing attempt's runner is).
    pub paused: bool,
    /// It holds a started task.
    pub took_work: bool,
    /// Its process is known to have exited (only a backend that watches its runners
    /// knows: `process`, `sandbox`).
    pub exited: bool,
    /// How long since it was last heard, as Postgres last copied its presence (`None`:
    /// not registered). Lags Redis's, and knows nothing of the stores' outages: only a
    /// runner holding no task is judged by it.
    pub silent_for: Option<Duration>,
}

/// The thresholds an assignment is judged by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// A runner must register and take a task within this of its start.
    pub claim_timeout: Duration,
    /// A runner silent this long is gone (the server's `runner_lost_after_s`).
    pub runner_lost_after: Duration,
    /// How many times a runner is started for one assignment.
    pub max_attempts: u32,
    /// The wait before starting one again after a failure.
    pub retry: Backoff,
}

/// What follows a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Another attempt after this wait.
    Retry(Duration),
    /// The attempts are spent: the assignment gives up, and stands for its task this
    /// long (the backoff's longest wait) before a new one may be started for it.
    GiveUp(Duration),
}

/// After attempt `attempt` (1 for the first) failed. `unit` is a random draw in `[0, 1)`
/// for the jitter.
pub fn after_failure(attempt: u32, limits: &Limits, unit: f64) -> AfterFailure {
    if attempt < limits.max_attempts {
        AfterFailure::Retry(limits.retry.delay(attempt, unit))
    } else {
        AfterFailure::GiveUp(limits.retry.max)
    }
}

/// What to do with one assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing yet.
    Keep,
    /// Its runner took a task: count it running (a failing attempt's runner that took
    /// one before its pause landed is let go on: resumed, running).
    Running,
    /// Its runner is done and gone: release what the backend holds, end the assignment.
    Done,
    /// Its runner did not claim work in time, or died before it did: mark the attempt
    /// failing, revoke its token and pause its runner. The end waits for a later pass
    /// ([`Verdict::Fail`]): a start under way as the pause lands is seen by then.
    BeginFailing(Failure),
    /// A failing attempt's runner registered after the token was revoked (its use was
    /// taken just before): pause it too, and look again at the next pass.
    Pause,
    /// A failing attempt whose runner holds no task and can take none: delete the
    /// runner, release what the backend holds, then retry later or give up.
    Fail,
    /// Its retry is due: start a runner again if the demand is still there.
    RetryDue,
}

/// Why a runner failed its assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// It had not registered and taken a task within the claim timeout.
    ClaimTimeout,
    /// Its process exited before it took a task.
    Exited,
}

impl Failure {
    /// The reason's name, in the assignment's `error`, the logs and the metric's label.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::ClaimTimeout => "claim_timeout",
            Failure::Exited => "exited",
        }
    }
}

/// The decision for an assignment in `state`, `age` after its runner was started, with
/// `retry_due` saying whether its `retry_at` came (a retrying one's retry, a failing
/// one's end) and `failing` once an end began, given `runner`.
pub fn decide(
    state: State,
    (age, retry_due, failing): (Duration, bool, bool),
    runner: RunnerFacts,
    limits: &Limits,
) -> Verdict {
    match state {
        State::Retrying if retry_due => Verdict::RetryDue,
        State::Retrying => Verdict::Keep,
        // A failing runner that left did so because the end deleted it, or after a task
        // taken before its pause: either way, the end goes on.
        // The end waits for its moment (`retry_at` on a failing row): a start under way
        // as the pause landed has committed by then.
        State::Starting if failing && !retry_due => Verdict::Keep,
        State::Starting if failing => {
            if runner.registered && !runner.left && !runner.paused {
                Verdict::Pause
            } else if runner.took_work && !runner.left {
                Verdict::Running
            } else {
                Verdict::Fail
            }
        }
        // A runner that left after starting its task is done, whatever its process did.
        _ if runner.left => Verdict::Done,
        State::Starting if runner.took_work => Verdict::Running,
        State::Starting if runner.exited => Verdict::BeginFailing(Failure::Exited),
        State::Starting if age >= limits.claim_timeout => {
            Verdict::BeginFailing(Failure::ClaimTimeout)
        }
        State::Starting => Verdict::Keep,
        // Its task is the server's business now: the reconciler ends a run whose runner
        // is lost, judging silence as the server does (its own outages excused). So a
        // silent runner is let go only once it holds no task — never one whose silence is
        // only a store's outage and whose task still runs.
        State::Running if runner.exited => Verdict::Done,
        State::Running
            if !runner.took_work
                && runner
                    .silent_for
                    .is_some_and(|s| s >= limits.runner_lost_after) =>
        {
            Verdict::Done
        }
        State::Running => Verdict::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(labels: &[&str]) -> LabelSet {
        LabelSet::new(labels.iter().copied()).unwrap()
    }

    fn offer(labels: &[&str], queues: &[&str]) -> Offer {
        Offer {
            labels: set(labels),
            queues: queues.iter().map(|q| q.to_string()).collect(),
        }
    }

    fn waiting(queue: &str, labels: &[&str], tasks: u64) -> Waiting {
        Waiting {
            queue: queue.into(),
            labels: set(labels),
            tasks,
        }
    }

    fn runner(labels: &[&str], free: u64) -> FreeRunner {
        FreeRunner {
            labels: set(labels),
            queues: vec![],
            free,
        }
    }

    #[test]
    fn an_offer_serves_labelled_tasks_its_runners_may_take() {
        let eph = offer(&["ephemeral", "linux"], &[]);
        assert!(eph.serves("default", &set(&["ephemeral"])));
        assert!(eph.serves("build", &set(&["ephemeral", "linux"])));
        assert!(
            !eph.serves("default", &set(&[])),
            "unlabeled tasks start nothing"
        );
        assert!(!eph.serves("default", &set(&["gpu"])), "a label it lacks");
        let ci_only = offer(&["ephemeral"], &["ci"]);
        assert!(ci_only.serves("ci", &set(&["ephemeral"])));
        assert!(!ci_only.serves("default", &set(&["ephemeral"])));
    }

    #[test]
    fn demand_is_what_free_runners_cannot_cover() {
        let eph = offer(&["ephemeral"], &[]);
        let keys = [
            waiting("default", &["ephemeral"], 5),
            waiting("default", &[], 7),
            waiting("default", &["gpu"], 3),
        ];
        assert_eq!(
            demand(&eph, &keys, &[]),
            Demand {
                waiting: 5,
                covered: 0
            }
        );
        // A static runner with the label and two free slots covers two.
        let d = demand(&eph, &keys, &[runner(&["ephemeral", "x"], 2)]);
        assert_eq!((d.waiting, d.covered, d.uncovered()), (5, 2, 3));
        // One lacking the label covers nothing.
        assert_eq!(demand(&eph, &keys, &[runner(&["x"], 9)]).uncovered(), 5);
        // A slot covers one task once, over several keys.
        let two_keys = [
            waiting("a", &["ephemeral"], 2),
            waiting("b", &["ephemeral"], 2),
        ];
        assert_eq!(
            demand(&eph, &two_keys, &[runner(&["ephemeral"], 3)]).uncovered(),
            1
        );
    }

    #[test]
    fn starts_within_capacity_and_demand() {
        let none = Assigned::default();
        assert_eq!(to_start(8, 50, none), 8, "capacity bounds");
        assert_eq!(to_start(8, 3, none), 3, "demand bounds");
        let busy = Assigned {
            starting: 2,
            running: 5,
            ..Assigned::default()
        };
        assert_eq!(to_start(8, 50, busy), 1);
        assert_eq!(
            to_start(8, 2, busy),
            0,
            "the starting ones cover the demand"
        );
        let retrying = Assigned {
            retrying: 2,
            ..Assigned::default()
        };
        assert_eq!(to_start(8, 3, retrying), 1, "a retry to come counts");
        let cooling = Assigned {
            cooling: 3,
            ..Assigned::default()
        };
        assert_eq!(to_start(8, 3, cooling), 0, "one that just gave up counts");
        assert_eq!(to_start(8, 5, cooling), 2, "but takes no capacity");
    }

    const LIMITS: Limits = Limits {
        claim_timeout: Duration::from_secs(60),
        runner_lost_after: Duration::from_secs(180),
        max_attempts: 3,
        retry: Backoff {
            initial: Duration::from_secs(5),
            max: Duration::from_secs(300),
            jitter: 0.0,
        },
    };

    #[test]
    fn retries_back_off_until_attempts_are_spent() {
        let s = Duration::from_secs;
        assert_eq!(after_failure(1, &LIMITS, 0.5), AfterFailure::Retry(s(5)));
        assert_eq!(after_failure(2, &LIMITS, 0.5), AfterFailure::Retry(s(10)));
        assert_eq!(after_failure(3, &LIMITS, 0.5), AfterFailure::GiveUp(s(300)));
    }

    fn facts() -> RunnerFacts {
        RunnerFacts {
            registered: false,
            left: false,
            paused: false,
            took_work: false,
            exited: false,
            silent_for: None,
        }
    }

    #[test]
    fn decision_table() {
        let s = Duration::from_secs;
        let registered = RunnerFacts {
            registered: true,
            silent_for: Some(s(1)),
            ..facts()
        };
        let working = RunnerFacts {
            took_work: true,
            ..registered
        };
        let paused = RunnerFacts {
            paused: true,
            ..registered
        };
        type Case = (
            &'static str,
            State,
            (Duration, bool, bool),
            RunnerFacts,
            Verdict,
        );
        let starting = |age: u64| (s(age), false, false);
        let failing = (s(70), true, true);
        let cases: &[Case] = &[
            (
                "just started",
                State::Starting,
                starting(1),
                facts(),
                Verdict::Keep,
            ),
            (
                "registered, idle",
                State::Starting,
                starting(30),
                registered,
                Verdict::Keep,
            ),
            (
                "took its task",
                State::Starting,
                starting(2),
                working,
                Verdict::Running,
            ),
            (
                "never registered in time",
                State::Starting,
                starting(60),
                facts(),
                Verdict::BeginFailing(Failure::ClaimTimeout),
            ),
            (
                "registered but never took work",
                State::Starting,
                starting(61),
                registered,
                Verdict::BeginFailing(Failure::ClaimTimeout),
            ),
            (
                "died before its task",
                State::Starting,
                starting(2),
                RunnerFacts {
                    exited: true,
                    ..facts()
                },
                Verdict::BeginFailing(Failure::Exited),
            ),
            (
                "ran and left before the pass saw it work",
                State::Starting,
                starting(2),
                RunnerFacts {
                    left: true,
                    ..registered
                },
                Verdict::Done,
            ),
            (
                "failing, never registered",
                State::Starting,
                failing,
                facts(),
                Verdict::Fail,
            ),
            (
                "failing, paused, idle",
                State::Starting,
                failing,
                paused,
                Verdict::Fail,
            ),
            (
                "failing, registered after the token's revocation",
                State::Starting,
                failing,
                registered,
                Verdict::Pause,
            ),
            (
                "failing, took a task before the pause landed",
                State::Starting,
                failing,
                RunnerFacts {
                    took_work: true,
                    ..paused
                },
                Verdict::Running,
            ),
            (
                "failing, its runner deleted by the end",
                State::Starting,
                failing,
                RunnerFacts {
                    left: true,
                    ..paused
                },
                Verdict::Fail,
            ),
            (
                "running",
                State::Running,
                starting(500),
                working,
                Verdict::Keep,
            ),
            (
                "left after its task",
                State::Running,
                starting(5),
                RunnerFacts {
                    left: true,
                    ..working
                },
                Verdict::Done,
            ),
            (
                "its process exited",
                State::Running,
                starting(5),
                RunnerFacts {
                    exited: true,
                    ..working
                },
                Verdict::Done,
            ),
            (
                "silent past runner-lost, its task ended",
                State::Running,
                starting(500),
                RunnerFacts {
                    silent_for: Some(s(180)),
                    ..registered
                },
                Verdict::Done,
            ),
            (
                "silent past runner-lost, its task still running",
                State::Running,
                starting(500),
                RunnerFacts {
                    silent_for: Some(s(180)),
                    ..working
                },
                Verdict::Keep,
            ),
            (
                "retry not yet due",
                State::Retrying,
                starting(5),
                facts(),
                Verdict::Keep,
            ),
            (
                "retry due",
                State::Retrying,
                (s(5), true, false),
                facts(),
                Verdict::RetryDue,
            ),
        ];
        for (name, state, times, runner, verdict) in cases {
            assert_eq!(decide(*state, *times, *runner, &LIMITS), *verdict, "{name}");
        }
    }

    proptest! {
        /// Never more starting than uncovered tasks, never past capacity.
        #[test]
        fn to_start_keeps_its_bounds(capacity in 0u64..50, uncovered in 0u64..100,
                                     starting in 0u64..60, running in 0u64..60, retrying in 0u64..10) {
            let assigned = Assigned { starting, running, retrying, cooling: 0 };
            let n = to_start(capacity, uncovered, assigned);
            prop_assert!(starting + running + retrying + n <= capacity.max(starting + running + retrying));
            prop_assert!(n == 0 || starting + retrying + n <= uncovered);
        }

        /// The cover never exceeds the waiting tasks nor the free slots.
        #[test]
        fn cover_is_bounded(tasks in proptest::collection::vec(0u64..20, 0..5),
                            free in proptest::collection::vec(0u64..20, 0..5)) {
            let eph = offer(&["e"], &[]);
            let keys: Vec<Waiting> = tasks.iter().enumerate()
                .map(|(i, n)| waiting(&format!("q{i}"), &["e"], *n)).collect();
            let runners: Vec<FreeRunner> = free.iter().map(|f| runner(&["e"], *f)).collect();
            let d = demand(&eph, &keys, &runners);
            prop_assert_eq!(d.waiting, tasks.iter().sum::<u64>());
            prop_assert!(d.covered <= d.waiting);
            prop_assert!(d.covered <= free.iter().sum::<u64>());
            prop_assert_eq!(d.covered, d.waiting.min(free.iter().sum::<u64>()));
        }
    }
}
