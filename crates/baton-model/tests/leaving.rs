//! The third model checked (`baton_model::leaving`): a one-task runner that leaves. With
//! what it says as it leaves (what it runs, and the runs whose result is still out), no
//! run it never started ends as a deleted runner's, and no success on its way is ended
//! as forgotten. Silent, the checker finds hole 11: an answer dropped past the fence, a
//! second task run, the runner gone before a list could call the first run forgotten.
//! Listing only what it runs, it finds the second reader's point: a result still out,
//! its run called forgotten as the runner leaves.

use baton_model::leaving::{Leaving, OnceRunner, PROMISES};
use stateright::Checker;

mod support;

const MAX_TIME: u8 = 5;

fn finds(name: &str, leaving: Leaving, broken: &'static str) {
    let model = OnceRunner {
        leaving,
        max_time: MAX_TIME,
    };
    let actions = support::steps_breaking(name, &support::checked(model, ""), broken);
    let fixed = OnceRunner {
        leaving: Leaving::RunningAndReporting,
        max_time: MAX_TIME,
    };
    support::replayed_with_every_fix(name, &fixed, &actions, broken);
}

#[test]
fn leaving_with_what_it_holds_breaks_no_promise_within_the_bound() {
    let checker = support::checked(
        OnceRunner {
            leaving: Leaving::RunningAndReporting,
            max_time: MAX_TIME,
        },
        "",
    );
    for promise in PROMISES {
        checker.assert_no_discovery(promise);
    }
}

#[test]
fn hole_11_a_silent_leave_ends_a_run_it_never_started_as_a_deleted_runner_s() {
    finds("hole 11", Leaving::Silent, PROMISES[0]);
}

#[test]
fn hole_11_a_leave_that_leaves_out_a_result_still_out_calls_its_run_forgotten() {
    finds("hole 11, its result", Leaving::Running, PROMISES[1]);
}
