//! The second model checked (`baton_model::groups`): with every fix in, no group runs
//! over its limit, no task starts while its queue is paused and nothing accepted is lost,
//! within each bound below. With a fix of hole 3 taken out, the checker finds its hole:
//! the order of steps is printed, and replayed with every fix in it no longer breaks the
//! promise. The start's count of the group's runs (`start_checks_group`) is a second
//! fence behind each Redis-side fix — it refuses the second start any of them lets
//! through — so it is taken out with each, as the code was when each hole was found.

use baton_model::groups::{
    Action, Bound, EVERY_TASK_ENDS, Fixes, Groups, HELD, PROMISES, PausedStart, State,
};
use stateright::{Checker, Model, Property};

mod support;

const GROUP_LIMIT: &str = PROMISES[0];
const NO_PAUSED_START: &str = PROMISES[1];

/// No fault, no API call, until a bound asks for one.
const QUIET: Bound = Bound {
    tasks: 2,
    limit: 1,
    leases: 3,
    failovers: 0,
    restarts: 0,
    deaths: 0,
    cancels: 0,
    pauses: 0,
    repair: true,
    late: false,
};

/// The bounds "with every fix" is checked in: each fault with the API calls it meets, so
/// that each check stays small (all at once is tens of millions of states).
const BOUNDS: [Bound; 7] = [
    Bound {
        leases: 4,
        failovers: 1,
        deaths: 1,
        ..QUIET
    },
    Bound {
        failovers: 1,
        deaths: 1,
        cancels: 1,
        ..QUIET
    },
    Bound {
        failovers: 1,
        pauses: 1,
        ..QUIET
    },
    Bound {
        restarts: 1,
        deaths: 1,
        cancels: 1,
        ..QUIET
    },
    Bound {
        restarts: 1,
        pauses: 1,
        ..QUIET
    },
    Bound {
        tasks: 3,
        limit: 2,
        failovers: 1,
        ..QUIET
    },
    Bound {
        failovers: 1,
        deaths: 1,
        late: true,
        ..QUIET
    },
];

/// The model with one promise only, narrowed by `also`: the checker stops at the first
/// state that breaks it, which breadth-first is one of the fewest steps away (with every
/// promise, each later break found overwrites the one reported).
struct Seeking {
    model: Groups,
    name: &'static str,
    condition: fn(&Groups, &State) -> bool,
    also: fn(&State) -> bool,
}

impl Seeking {
    fn new(model: Groups, name: &'static str) -> Self {
        let condition = model
            .properties()
            .into_iter()
            .find(|p| p.name == name)
            .expect("a property of the model")
            .condition;
        Seeking {
            model,
            name,
            condition,
            also: |_| true,
        }
    }
}

impl Model for Seeking {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        self.model.init_states()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Self::Action>) {
        self.model.actions(state, actions);
    }

    fn next_state(&self, last: &State, action: Self::Action) -> Option<State> {
        self.model.next_state(last, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::always(self.name, |seeking: &Seeking, state| {
            (seeking.condition)(&seeking.model, state) || !(seeking.also)(state)
        })]
    }
}

/// Checks `model` to the end of `bound` (or to its first break), and says how far it
/// looked in which bound.
fn checked<M>(model: M, bound: Bound) -> impl Checker<M>
where
    M: Model<State = State, Action = Action> + Send + Sync + 'static,
{
    support::checked(model, &format!("{bound:?}: "))
}

/// The checker finds `seeking`'s promise broken; the order of steps it found is printed,
/// and, unless every fix was in, replayed with every fix in: there it is no longer a way
/// to break the promise (a step is refused, or the promise holds at the end).
fn finds(what: &str, seeking: Seeking) {
    let (fixes, bound, broken) = (seeking.model.fixes, seeking.model.bound, seeking.name);
    let actions = support::steps_breaking(what, &checked(seeking, bound), broken);
    if fixes != Fixes::ALL {
        let fixed = Groups {
            fixes: Fixes::ALL,
            bound,
        };
        support::replayed_with_every_fix(what, &fixed, &actions, broken);
    }
}

#[test]
fn with_every_fix_no_promise_breaks_within_the_bound() {
    for bound in BOUNDS {
        let checker = checked(
            Groups {
                fixes: Fixes::ALL,
                bound,
            },
            bound,
        );
        for promise in HELD {
            checker.assert_no_discovery(promise);
        }
        checker.assert_any_discovery(EVERY_TASK_ENDS);
    }
}

/// Without the periodic repair pass (the rebuild after an empty restart still runs), the
/// fixes of hole 3 keep the group within its limit. "Nothing accepted is lost" is not
/// asked here: the repair pass is what mends a copy Redis lost.
#[test]
fn with_every_fix_and_no_periodic_repair_the_group_keeps_its_limit() {
    for bound in BOUNDS {
        let bound = Bound {
            repair: false,
            deaths: 1,
            ..bound
        };
        let model = Groups {
            fixes: Fixes::ALL,
            bound,
        };
        checked(Seeking::new(model, GROUP_LIMIT), bound).assert_no_discovery(GROUP_LIMIT);
    }
}

#[test]
fn hole_3_a_claim_lost_in_a_failover_lets_the_group_run_over_its_limit() {
    let model = Groups {
        fixes: Fixes {
            adopt_claim_of_running_row: false,
            start_checks_group: false,
            ..Fixes::ALL
        },
        bound: Bound {
            failovers: 1,
            repair: false,
            ..QUIET
        },
    };
    finds("hole 3", Seeking::new(model, GROUP_LIMIT));
}

#[test]
fn hole_3_a_pause_lost_in_a_failover_lets_a_task_start() {
    let model = Groups {
        fixes: Fixes {
            start_checks_pause: false,
            ..Fixes::ALL
        },
        bound: Bound {
            failovers: 1,
            pauses: 1,
            ..QUIET
        },
    };
    // The shortest way needs no failover (a lease between the pause's commit and its
    // Redis write); the one hole 3 names goes through one.
    finds(
        "hole 3, its pause",
        Seeking::new(model.clone(), NO_PAUSED_START),
    );
    finds(
        "hole 3, its pause through a failover",
        Seeking {
            also: |state| state.paused_start == Some(PausedStart::CopyLost),
            ..Seeking::new(model, NO_PAUSED_START)
        },
    );
}

/// The third fix out: a running task Redis lost the claim of, its entry back in the
/// queue, meets the repair pass before any lease pops it; the pass does not claim it (its
/// queue holds it) and drops its entry as stale with its group entry, so the next lease
/// finds the group free. Through a failover, and through an empty restart whose rebuild
/// queued a task whose start, popped before the restart, then committed.
#[test]
fn hole_3_the_repair_pass_drops_a_run_a_failover_put_back_in_its_queue() {
    for bound in [
        Bound {
            failovers: 1,
            ..QUIET
        },
        Bound {
            restarts: 1,
            ..QUIET
        },
    ] {
        let model = Groups {
            fixes: Fixes {
                repair_claims_queued_runs: false,
                start_checks_group: false,
                ..Fixes::ALL
            },
            bound,
        };
        finds(
            "hole 3, through the repair pass",
            Seeking::new(model, GROUP_LIMIT),
        );
    }
}

/// The fourth fix out: the repair pass finds the run claimed, a failover then takes the
/// claim and puts the run's entry back, and the pass's drop of stale entries drops it
/// with the unclaimed task's group entry: the next lease finds the group free.
#[test]
fn hole_3_a_failover_inside_the_repair_pass_lets_it_drop_a_run_put_back_in_its_queue() {
    let model = Groups {
        fixes: Fixes {
            stale_entry_of_a_run_is_claimed: false,
            start_checks_group: false,
            ..Fixes::ALL
        },
        bound: Bound {
            failovers: 1,
            ..QUIET
        },
    };
    finds(
        "hole 3, through a failover inside the repair pass",
        Seeking::new(model, GROUP_LIMIT),
    );
}

/// The group's start check out: a failover loses a run's lease, and a task submitted
/// after it at a higher priority is ahead of the run's entry; the next lease pops it,
/// finds the group's slot free, and Postgres starts it beside the run (the Redis
/// Sentinel drill met it in CI).
#[test]
fn a_task_ahead_of_a_run_a_failover_unclaimed_starts_beside_it() {
    let model = Groups {
        fixes: Fixes {
            start_checks_group: false,
            ..Fixes::ALL
        },
        bound: Bound {
            failovers: 1,
            late: true,
            repair: false,
            ..QUIET
        },
    };
    finds(
        "a task ahead of a run unclaimed",
        Seeking::new(model, GROUP_LIMIT),
    );
}
