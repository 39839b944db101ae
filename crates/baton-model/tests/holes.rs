//! The model checked: with every fix in, none of the promises breaks within the bound;
//! with one fix out, the checker finds its hole — the counterexample each test prints is
//! the order of steps that breaks the promise, the one the real-process test of the same
//! hole replays (docs/failure-handling.md names them).

use baton_model::{Bound, Dispatch, Fixes, HELD, PROMISES, TimeoutVerdict};
use stateright::Checker;

mod support;

/// Checks `model` to the end of its bound, and says how far it looked.
fn checked(model: Dispatch) -> impl Checker<Dispatch> {
    support::checked(model, "")
}

/// The checker, with a fix taken out (`fixes`), finds `broken` broken; the order of
/// steps it found is printed, and replayed with every fix in: there it is no longer a
/// way to break the promise (a step is refused, or the promise holds at the end).
fn finds(name: &str, fixes: Fixes, bound: Bound, broken: &'static str) {
    let actions = support::steps_breaking(name, &checked(Dispatch { fixes, bound }), broken);
    if fixes != Fixes::ALL {
        let fixed = Dispatch {
            fixes: Fixes::ALL,
            bound,
        };
        support::replayed_with_every_fix(name, &fixed, &actions, broken);
    }
}

#[test]
fn with_every_fix_no_promise_breaks_within_the_bound() {
    for bound in [
        Bound::default(),
        Bound {
            retries: 0,
            ..Bound::default()
        },
    ] {
        let checker = checked(Dispatch {
            fixes: Fixes::ALL,
            bound,
        });
        for promise in HELD {
            checker.assert_no_discovery(promise);
        }
    }
}

#[test]
fn hole_1_a_start_on_its_way_taken_for_forgotten_runs_twice() {
    let fixes = Fixes {
        list_as_of_pins: false,
        ..Fixes::ALL
    };
    finds("hole 1", fixes, Bound::default(), PROMISES[0]);
}

/// Found under the timeout verdict of its time, the reconciler's on presence: a run
/// whose answer was held past the deadline and grace was timed out and retried, and the
/// runner, counting the timeout from the answer's arrival, spawned it beside the retry.
/// Under the heartbeat's verdict the model's runner stops its process in the very step
/// that ends the run, so the model no longer reaches it that way; the code's runner kills
/// it when that heartbeat's answer arrives, by when a retry may be queued, so the fix
/// stays.
#[test]
fn hole_1_an_answer_held_past_the_grace_runs_beside_the_retry() {
    let fixes = Fixes {
        timeout_from_start: false,
        timeout: TimeoutVerdict::ReconcilerHeard,
        ..Fixes::ALL
    };
    finds("hole 1, its variant", fixes, Bound::default(), PROMISES[0]);
}

#[test]
fn hole_2_a_resend_answered_from_known_empty_strands_a_started_task() {
    let fixes = Fixes {
        replay_before_known_empty: false,
        ..Fixes::ALL
    };
    let bound = Bound {
        retries: 0,
        ..Bound::default()
    };
    finds("hole 2", fixes, bound, PROMISES[1]);
}

#[test]
fn hole_4_a_silent_runners_success_is_overwritten_as_timed_out() {
    let fixes = Fixes {
        timeout: TimeoutVerdict::Reconciler,
        ..Fixes::ALL
    };
    let bound = Bound {
        retries: 0,
        ..Bound::default()
    };
    finds("hole 4", fixes, bound, PROMISES[2]);
}

#[test]
fn hole_4_a_result_behind_its_heartbeat_is_overwritten_as_timed_out() {
    let fixes = Fixes {
        timeout: TimeoutVerdict::ReconcilerHeard,
        results_with_heartbeat: false,
        ..Fixes::ALL
    };
    let bound = Bound {
        retries: 0,
        ..Bound::default()
    };
    finds("hole 4, through an outage", fixes, bound, PROMISES[2]);
}

/// Holes 9 and 10 (Known limits 11 and 12 of the release before), found with every fix
/// of their time in: with the timeout judged by the reconciler on presence, a runner
/// heard on its poll lane past the deadline while its success is held on the report lane
/// has that success overwritten as `timed_out`; and an answer handing out a started task
/// lost, its resend failing past the task's timeout and grace while the runner
/// heartbeats, times out a run that never ran.
#[test]
fn holes_9_and_10_the_timeout_judged_on_presence() {
    let fixes = Fixes {
        timeout: TimeoutVerdict::ReconcilerHeard,
        ..Fixes::ALL
    };
    let bound = Bound {
        retries: 0,
        ..Bound::default()
    };
    finds("hole 9", fixes, bound, PROMISES[2]);
    finds("hole 10", fixes, bound, PROMISES[3]);
}
