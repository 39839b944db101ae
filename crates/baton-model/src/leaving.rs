//! The third model: a one-task (`--once`) runner that leaves (holes 11 of
//! docs/failure-handling.md). Two tasks, one node, one runner; the runner's answers may
//! be held past its fence, its results held on their way, and it may be stopped while a
//! result is still out. It leaves (`POST /v1/runner/unregister`) once it has run a task;
//! a node's reconciler then ends any run still counted as its own as a deleted runner's.
//!
//! What is modelled, by the code names of the steps:
//! - **The node** hands the runner the first queued task, started (`start_leased`), and
//!   ends as forgotten the runs of the runner that a list leaves out, if they started
//!   more than [`FORGOTTEN_AFTER`] before the list (`verdicts::end_forgotten_runs`); a
//!   list is as of no later than a poll still out (`Lanes::list_as_of`).
//! - **The runner** polls while it has run nothing (`hold` once it took one), drops an
//!   answer that comes back more than [`FENCE`] after its poll went (`landed`), runs a
//!   task it took, reports its end (a report that may wait on its way), and leaves:
//!   before the fix with no word; with it, saying what it holds
//!   (`RunnerLeaving`), with or without the runs whose result is still out.
//! - **The reconciler** ends a run whose runner left as `runner deleted`
//!   (`reconcile.rs`, `RunnerFacts::Deleted`: after the lost threshold, which no step here
//!   needs).
//!
//! One attempt per task: a run that ends, ends its task.

use stateright::{Model, Property};
use std::collections::BTreeSet;

/// A time on the cluster's clock, in steps.
pub type Time = u8;
/// A task: 0 or 1 (its one run is named by it too).
pub type Task = usize;

/// How long after its poll went an answer may come back and still be started
/// (`fence_after_s`).
pub const FENCE: Time = 1;
/// `forgotten_run_after_s`: a list may call a run forgotten only if it started more than
/// this before the list's time. Longer than the fence, as 15 s is than 7 s.
pub const FORGOTTEN_AFTER: Time = 2;

/// What the runner says as it leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leaving {
    /// Nothing: the server deletes it, and its runs end as a deleted runner's (before
    /// hole 11's fix).
    Silent,
    /// What it runs, but not the runs whose result it kept: every other run ends as
    /// forgotten (the fix, before its second reader).
    Running,
    /// What it runs, and the runs whose result is still out, as reporting (the fix).
    RunningAndReporting,
}

/// How a run ended, in Postgres.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum End {
    /// Its runner reported success.
    Succeeded,
    /// The server ended it: its runner's list leaves it out.
    Forgotten,
    /// The reconciler ended it: its runner was deleted.
    RunnerDeleted,
}

/// A task's row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Row {
    /// Waiting in its queue.
    Queued,
    /// Started for the runner at this time.
    Running(Time),
    /// Ended, for good.
    Ended(End),
}

/// Everything, at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The cluster's clock.
    pub now: Time,
    /// Postgres: the two tasks' rows.
    pub rows: [Row; 2],
    /// The runner's poll out, with when it went; it stays out until its answer comes
    /// back (its lane is busy: a one-slot runner has one poll out at the most).
    pub poll: Option<Time>,
    /// The poll has reached the node.
    pub delivered: bool,
    /// The answer on its way: the task handed out, started.
    pub answer: Option<Task>,
    /// The task its process runs.
    pub process: Option<Task>,
    /// Successes on their way (or kept on disk).
    pub reports: BTreeSet<Task>,
    /// It ran a task: it takes no other.
    pub took_one: bool,
    /// It left (unregistered): it takes no step again.
    pub left: bool,
    /// Tasks whose process ran.
    pub ran: BTreeSet<Task>,
}

/// One step of one actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves on a step.
    Tick,
    /// The runner sends a poll.
    Poll,
    /// The node takes the poll: it starts the first queued task for the runner (its
    /// answer goes on its way), or answers nothing at once.
    Deliver,
    /// An answer reaches the runner.
    Receive(Task, Time),
    /// The runner's process exits 0, and its report is sent.
    Finish,
    /// A report reaches the node.
    DeliverReport(Task),
    /// The runner's list reaches the node (a heartbeat, or an idle poll's list).
    Heartbeat,
    /// The runner leaves (after its one task; or stopped, its result still out).
    Leave,
    /// The reconciler ends a run of the deleted runner.
    Reconcile(Task),
}

/// The promises, by the names the checker reports.
pub const PROMISES: [&str; 2] = [
    "a run ends as a deleted runner's only if it ran",
    "a success on its way is never ended as forgotten",
];

/// One `--once` runner leaving, checked to the clock's `max_time`.
#[derive(Clone, Debug)]
pub struct OnceRunner {
    /// What it says as it leaves.
    pub leaving: Leaving,
    /// The last step of the clock.
    pub max_time: Time,
}

impl OnceRunner {
    /// Ends as forgotten every run of the runner that `listed` leaves out, started
    /// before `started_before`.
    fn end_left_out(state: &mut State, listed: &BTreeSet<Task>, started_before: Time) {
        for (task, row) in state.rows.iter_mut().enumerate() {
            if let Row::Running(started) = *row
                && !listed.contains(&task)
                && started < started_before
            {
                *row = Row::Ended(End::Forgotten);
            }
        }
    }
}

impl Model for OnceRunner {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            rows: [Row::Queued; 2],
            poll: None,
            delivered: false,
            answer: None,
            process: None,
            reports: BTreeSet::new(),
            took_one: false,
            left: false,
            ran: BTreeSet::new(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_time {
            actions.push(Action::Tick);
        }
        for &report in &state.reports {
            actions.push(Action::DeliverReport(report));
        }
        for (task, row) in state.rows.iter().enumerate() {
            if state.left && matches!(row, Row::Running(_)) {
                actions.push(Action::Reconcile(task));
            }
        }
        if state.left {
            return;
        }
        if state.poll.is_some() && !state.delivered {
            actions.push(Action::Deliver);
        }
        if state.poll.is_none() && state.process.is_none() && !state.took_one {
            actions.push(Action::Poll);
        }
        if let (Some(sent), Some(task)) = (state.poll, state.answer) {
            actions.push(Action::Receive(task, sent));
        }
        if state.process.is_some() {
            actions.push(Action::Finish);
        }
        actions.push(Action::Heartbeat);
        if state.took_one && state.process.is_none() {
            actions.push(Action::Leave);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Poll => state.poll = Some(state.now),
            Action::Deliver => {
                match state.rows.iter().position(|r| *r == Row::Queued) {
                    Some(task) => {
                        state.rows[task] = Row::Running(state.now);
                        state.delivered = true;
                        state.answer = Some(task);
                    }
                    // Nothing to hand out: answered at once.
                    None => state.poll = None,
                }
            }
            Action::Receive(task, sent) => {
                state.poll = None;
                state.delivered = false;
                state.answer = None;
                // Past the fence: not started, nor reported (`landed`).
                if state.now <= sent + FENCE {
                    state.process = Some(task);
                    state.took_one = true;
                    state.ran.insert(task);
                }
            }
            Action::Finish => {
                let task = state.process.take()?;
                state.reports.insert(task);
            }
            Action::DeliverReport(task) => {
                state.reports.remove(&task);
                if matches!(state.rows[task], Row::Running(_)) {
                    state.rows[task] = Row::Ended(End::Succeeded);
                }
            }
            Action::Heartbeat => {
                // As of no later than a poll still out, unless it went longer than the
                // fence ago (its answer will not be started): a start on its way is
                // never called forgotten.
                let as_of = state
                    .poll
                    .filter(|&sent| state.now <= sent + FENCE)
                    .map_or(state.now, |sent| sent.min(state.now));
                let listed: BTreeSet<Task> = state
                    .process
                    .into_iter()
                    .chain(state.reports.iter().copied())
                    .collect();
                if as_of >= FORGOTTEN_AFTER {
                    Self::end_left_out(&mut state, &listed, as_of - FORGOTTEN_AFTER);
                }
            }
            Action::Leave => {
                state.left = true;
                let listed: BTreeSet<Task> = match self.leaving {
                    Leaving::Silent => return Some(state),
                    Leaving::Running => state.process.into_iter().collect(),
                    Leaving::RunningAndReporting => state
                        .process
                        .into_iter()
                        .chain(state.reports.iter().copied())
                        .collect(),
                };
                // However recently started.
                Self::end_left_out(&mut state, &listed, Time::MAX);
            }
            Action::Reconcile(task) => {
                if matches!(state.rows[task], Row::Running(_)) {
                    state.rows[task] = Row::Ended(End::RunnerDeleted);
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(PROMISES[0], |_, state| {
                state.rows.iter().enumerate().all(|(task, row)| {
                    *row != Row::Ended(End::RunnerDeleted) || state.ran.contains(&task)
                })
            }),
            Property::<Self>::always(PROMISES[1], |_, state| {
                state.rows.iter().enumerate().all(|(task, row)| {
                    *row != Row::Ended(End::Forgotten) || !state.reports.contains(&task)
                })
            }),
        ]
    }
}
