//! What both models' tests do with the checker: run it to the end of a bound, and, when
//! it finds a promise broken, print the steps it found and replay them with every fix in.

use stateright::{Checker, Model, Path};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

/// Checks `model` to the end of its bound (or to its first break), and says how far it
/// looked, after `label`.
pub fn checked<M>(model: M, label: &str) -> impl Checker<M> + use<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    println!(
        "{label}{} states ({} unique), depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    checker
}

/// The steps `checker` found that break `broken`, printed; it fails the test (as `what`)
/// when the checker found none.
pub fn steps_breaking<M: Model>(
    what: &str,
    checker: &impl Checker<M>,
    broken: &'static str,
) -> Vec<M::Action>
where
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq + Debug,
{
    let path = checker
        .discovery(broken)
        .unwrap_or_else(|| panic!("{what}: the checker found no way to break \"{broken}\""));
    let actions = path.into_actions();
    // One print, so that the steps of tests running beside it do not interleave.
    let steps: String = actions.iter().map(|a| format!("\n  {a:?}")).collect();
    println!("{what} breaks \"{broken}\":{steps}");
    actions
}

/// Replays `actions` in `fixed`, the model with every fix in: there they are no longer a
/// way to break `broken` (a step is refused, or the promise holds at the end).
pub fn replayed_with_every_fix<M: Model>(
    what: &str,
    fixed: &M,
    actions: &[M::Action],
    broken: &'static str,
) where
    M::State: PartialEq,
    M::Action: PartialEq,
{
    let init = fixed.init_states().remove(0);
    if let Some(replayed) = Path::from_actions(fixed, init, actions) {
        let promise = fixed
            .properties()
            .into_iter()
            .find(|p| p.name == broken)
            .expect("a property of the model");
        assert!(
            (promise.condition)(fixed, replayed.last_state()),
            "{what}: with every fix in, the same steps still break \"{broken}\""
        );
    }
}
