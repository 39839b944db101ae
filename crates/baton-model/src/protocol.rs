//! The protocol's steps and the promises, as a stateright model.

use crate::state::{
    Agent, Answer, End, Lease, Node, Process, Report, Request, Row, Runner, State, Time,
};
use crate::{FORGOTTEN_AFTER, GRACE, RUN, TIMEOUT};
use stateright::{Model, Property};
use std::collections::BTreeSet;

/// The fixes of issue 25, each a switch: off, the step behaves as before its fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixes {
    /// Hole 1: a heartbeat's list is as of no later than what the runner had when it
    /// sent a leasing exchange still out (`Lanes::list_as_of`).
    pub list_as_of_pins: bool,
    /// Hole 1, its variant: a task that arrives started has its timeout counted from the
    /// server's start (`leased_after_ms`), not from the answer's arrival; one whose time
    /// is already up is not spawned.
    pub timeout_from_start: bool,
    /// Hole 2: a node answering from `KnownEmpty` first asks for the request's replay
    /// record (`Coord::replay_recorded`).
    pub replay_before_known_empty: bool,
    /// Who ends a run past its timeout and grace, and on what evidence (hole 4, then
    /// Known limits 11 and 12 of the release before).
    pub timeout: TimeoutVerdict,
    /// Hole 4, through a real outage: the first answer after failures sends the results
    /// waiting out their backoff (`Retrier::woken_by`), so a result travels with the
    /// heartbeat that first gets through.
    pub results_with_heartbeat: bool,
}

impl Fixes {
    /// Every fix in.
    pub const ALL: Fixes = Fixes {
        list_as_of_pins: true,
        timeout_from_start: true,
        replay_before_known_empty: true,
        timeout: TimeoutVerdict::Heartbeat,
        results_with_heartbeat: true,
    };
}

/// Where the `timed_out` verdict on a run with no report is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutVerdict {
    /// The reconciler, at the deadline: before hole 4's fix.
    Reconciler,
    /// The reconciler, once the runner has been heard since the deadline (presence):
    /// hole 4's fix, which still overwrote a success held on the report lane while the
    /// poll was heard, and timed out a start whose answer never arrived.
    ReconcilerHeard,
    /// The heartbeat, for a run its list shows still running — not reporting — as of past
    /// the deadline (`verdicts::end_overdue_runs`); the reconciler keeps none.
    Heartbeat,
}

/// How far the checker looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The last step of the clock.
    pub max_time: Time,
    /// Retries the task may have (`max_attempts` − 1).
    pub retries: u8,
    /// Answers the network may lose, in all.
    pub losses: u8,
}

impl Default for Bound {
    fn default() -> Self {
        Bound {
            max_time: 4,
            retries: 1,
            losses: 1,
        }
    }
}

/// The dispatch protocol of one task, two nodes and two runners.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// Which fixes are in.
    pub fixes: Fixes,
    /// How far the checker looks.
    pub bound: Bound,
}

/// One step of one actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock moves on a step.
    Tick,
    /// A runner sends a poll.
    Poll(Runner),
    /// The load balancer hands a poll to a node (again, to another node, if it was
    /// handed on: an unmarked resend).
    Deliver(Request, Node),
    /// An answer reaches its runner.
    Receive(Answer),
    /// An answer is lost on the way.
    Lose(Answer),
    /// A runner heartbeats (its report lane, answered at once by some node).
    Heartbeat(Runner),
    /// A runner's process exits 0.
    Finish(Runner),
    /// A runner's own timeout kills its process.
    Kill(Runner),
    /// A report reaches a node.
    DeliverReport(Report),
    /// A node's reconciler ends a run past its timeout and grace (not with
    /// [`TimeoutVerdict::Heartbeat`]).
    TimeOut,
}

/// The promises, by the names the checker reports.
pub const PROMISES: [&str; 4] = [
    "one run at a time",
    "no run is ended as forgotten that never ran",
    "a success in time is never overwritten",
    "no run times out that never ran",
];

/// The promises the model finds kept within the bound, every fix in: all of them.
pub const HELD: [&str; 4] = PROMISES;

impl Dispatch {
    /// Whether runner `r` may take a step other than its timer's: an agent whose process
    /// is past its deadline kills it first.
    fn awake(state: &State, r: Runner) -> bool {
        state.agents[r]
            .process
            .is_none_or(|p| state.now < p.deadline)
    }

    /// What a heartbeat's list is as of.
    fn list_as_of(&self, agent: &Agent) -> Option<Time> {
        match (self.fixes.list_as_of_pins, agent.poll) {
            (true, Some((_, pin))) => Some(match (agent.answered_at, pin) {
                (Some(a), Some(p)) => a.min(p),
                // Sent before any answer: no run may be called forgotten.
                _ => 0,
            }),
            _ => agent.answered_at,
        }
    }

    /// The end of a run the server writes: a retry while retries remain.
    fn end_run(state: &mut State, end: End, lease: Lease) {
        state.claim = None;
        if state.retries_left > 0 {
            state.retries_left -= 1;
            state.row = Row::Queued;
            state.queued = true;
            // The queueing's wake-up reaches every node.
            state.known_empty = [false; 2];
        } else {
            state.row = Row::Ended(end, lease);
        }
    }

    /// A node takes a report: a compare-and-set on its lease.
    fn report(state: &mut State, report: Report) {
        state.agents[report.runner].heard = state.now;
        if let Row::Running { lease, .. } = state.row
            && lease == report.lease
        {
            let end = if report.succeeded {
                End::Succeeded
            } else {
                End::Failed
            };
            state.row = Row::Ended(end, lease);
            state.claim = None;
        }
        state.reports.remove(&report);
    }
}

impl Model for Dispatch {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            row: Row::Queued,
            retries_left: self.bound.retries,
            losses_left: self.bound.losses,
            queued: true,
            claim: None,
            replay: BTreeSet::new(),
            known_empty: [false; 2],
            leases: 0,
            polls: 0,
            requests: BTreeSet::new(),
            answers: BTreeSet::new(),
            reports: BTreeSet::new(),
            agents: [Agent::default(); 2],
            ran: BTreeSet::new(),
            succeeded_in_time: BTreeSet::new(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.bound.max_time {
            actions.push(Action::Tick);
        }
        for r in 0..2 {
            let agent = &state.agents[r];
            if let Some(p) = agent.process {
                if state.now >= p.deadline {
                    actions.push(Action::Kill(r));
                } else if state.now >= p.spawned + RUN {
                    actions.push(Action::Finish(r));
                }
            }
            if !Self::awake(state, r) {
                continue;
            }
            if agent.poll.is_none() && agent.process.is_none() && state.polls < 3 {
                actions.push(Action::Poll(r));
            }
            actions.push(Action::Heartbeat(r));
        }
        for request in &state.requests {
            let agent = &state.agents[request.runner];
            // A first delivery, or a resend of one whose answer was lost while the
            // runner still waits for it.
            let waiting = agent.poll.map(|(req, _)| req) == Some(request.req)
                && !state.answers.iter().any(|a| a.req == request.req);
            if Self::awake(state, request.runner) && (request.reached == 0 || waiting) {
                for node in 0..2 {
                    if request.reached & (1 << node) == 0 {
                        actions.push(Action::Deliver(*request, node));
                    }
                }
            }
        }
        for answer in &state.answers {
            if Self::awake(state, answer.runner) {
                actions.push(Action::Receive(*answer));
            }
            if state.losses_left > 0 && answer.lease.is_some() {
                actions.push(Action::Lose(*answer));
            }
        }
        for report in &state.reports {
            actions.push(Action::DeliverReport(*report));
        }
        if let Row::Running { started, .. } = state.row
            && state.now > started + TIMEOUT + GRACE
            && self.fixes.timeout != TimeoutVerdict::Heartbeat
        {
            actions.push(Action::TimeOut);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Poll(r) => {
                let req = state.polls;
                state.polls += 1;
                state.agents[r].poll = Some((req, state.agents[r].answered_at));
                state.requests.insert(Request {
                    req,
                    runner: r,
                    reached: 0,
                });
            }
            Action::Deliver(request, node) => {
                state.requests.remove(&request);
                state.requests.insert(Request {
                    reached: request.reached | (1 << node),
                    ..request
                });
                let r = request.runner;
                state.agents[r].heard = state.now;
                // The record of what this request leased, still under its claim.
                let replayed = state
                    .replay
                    .iter()
                    .find(|(req, lease)| *req == request.req && state.claim == Some(*lease))
                    .map(|(_, lease)| *lease);
                let recorded = state.replay.iter().any(|(req, _)| *req == request.req);
                let shortcut =
                    state.known_empty[node] && !(self.fixes.replay_before_known_empty && recorded);
                let mut answer = Answer {
                    runner: r,
                    req: request.req,
                    lease: None,
                    at: state.now,
                    started: state.now,
                };
                if shortcut {
                    // "Nothing", from memory.
                } else if let Some(lease) = replayed {
                    if let Row::Running {
                        lease: running,
                        started,
                        ..
                    } = state.row
                        && running == lease
                    {
                        answer.lease = Some(lease);
                        answer.started = started;
                    }
                } else if state.queued {
                    // The lease script pops and claims; the start commits with it.
                    let lease = state.leases;
                    state.leases += 1;
                    state.queued = false;
                    state.claim = Some(lease);
                    state.replay.insert((request.req, lease));
                    if state.row == Row::Queued {
                        state.row = Row::Running {
                            lease,
                            runner: r,
                            started: state.now,
                        };
                        answer.lease = Some(lease);
                    }
                } else {
                    state.known_empty[node] = true;
                }
                state.answers.insert(answer);
            }
            Action::Receive(answer) => {
                state.answers.remove(&answer);
                let agent = &mut state.agents[answer.runner];
                if agent.poll.map(|(req, _)| req) != Some(answer.req) {
                    return Some(state); // an answer to a poll given up on: dropped
                }
                agent.poll = None;
                agent.answered_at = agent.answered_at.max(Some(answer.at));
                if let Some(lease) = answer.lease {
                    let from = if self.fixes.timeout_from_start {
                        answer.started
                    } else {
                        state.now
                    };
                    let deadline = from + TIMEOUT;
                    if self.fixes.timeout_from_start && state.now >= deadline {
                        // Its time is up before it began: not spawned, reported killed.
                        state.reports.insert(Report {
                            runner: answer.runner,
                            lease,
                            succeeded: false,
                        });
                    } else {
                        agent.process = Some(Process {
                            lease,
                            spawned: state.now,
                            deadline,
                        });
                        state.ran.insert(lease);
                    }
                }
            }
            Action::Lose(answer) => {
                state.answers.remove(&answer);
                state.losses_left -= 1;
                // The runner's poll failed: it is sent again as it was (same id), and
                // the load balancer hands it to a node it has not reached yet.
            }
            Action::Heartbeat(r) => {
                if self.fixes.results_with_heartbeat {
                    let waiting: Vec<Report> = state
                        .reports
                        .iter()
                        .filter(|p| p.runner == r)
                        .copied()
                        .collect();
                    for report in waiting {
                        Self::report(&mut state, report);
                    }
                }
                let agent = state.agents[r];
                state.agents[r].heard = state.now;
                let as_of = self.list_as_of(&agent).unwrap_or(state.now);
                // What it lists: its process, running, and a run whose report is still on
                // its way, `reporting`.
                let running = agent.process.map(|p| p.lease);
                let listed: BTreeSet<Lease> = running
                    .into_iter()
                    .chain(
                        state
                            .reports
                            .iter()
                            .filter(|p| p.runner == r)
                            .map(|p| p.lease),
                    )
                    .collect();
                if self.fixes.timeout == TimeoutVerdict::Heartbeat
                    && let Row::Running {
                        lease,
                        runner,
                        started,
                    } = state.row
                    && runner == r
                    && running == Some(lease)
                    && as_of > started + TIMEOUT + GRACE
                {
                    Self::end_run(&mut state, End::TimedOut, lease);
                }
                if let Row::Running {
                    lease,
                    runner,
                    started,
                } = state.row
                    && runner == r
                    && !listed.contains(&lease)
                    && started + FORGOTTEN_AFTER < as_of
                {
                    Self::end_run(&mut state, End::Forgotten, lease);
                }
                // A process under a lease that is no longer the runner's: stopped, unreported.
                if let Some(p) = agent.process {
                    let current = matches!(state.row, Row::Running { lease, runner, .. } if lease == p.lease && runner == r);
                    if !current {
                        state.agents[r].process = None;
                    }
                }
                state.agents[r].answered_at = Some(state.now);
            }
            Action::Finish(r) => {
                let p = state.agents[r].process.take()?;
                state.succeeded_in_time.insert(p.lease);
                state.reports.insert(Report {
                    runner: r,
                    lease: p.lease,
                    succeeded: true,
                });
            }
            Action::Kill(r) => {
                let p = state.agents[r].process.take()?;
                state.reports.insert(Report {
                    runner: r,
                    lease: p.lease,
                    succeeded: false,
                });
            }
            Action::DeliverReport(report) => Self::report(&mut state, report),
            Action::TimeOut => {
                let Row::Running {
                    lease,
                    runner,
                    started,
                } = state.row
                else {
                    return None;
                };
                let deadline = started + TIMEOUT + GRACE;
                let unheard = state.agents[runner].heard <= deadline;
                if self.fixes.timeout == TimeoutVerdict::ReconcilerHeard && unheard {
                    return None;
                }
                Self::end_run(&mut state, End::TimedOut, lease);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(PROMISES[0], |_, state| state.processes() <= 1),
            Property::<Self>::always(PROMISES[1], |_, state| match state.row {
                Row::Ended(End::Forgotten, lease) => state.ran.contains(&lease),
                _ => true,
            }),
            Property::<Self>::always(PROMISES[2], |_, state| match state.row {
                Row::Ended(End::Forgotten | End::TimedOut, lease) => {
                    !state.succeeded_in_time.contains(&lease)
                }
                _ => true,
            }),
            Property::<Self>::always(PROMISES[3], |_, state| match state.row {
                Row::Ended(End::TimedOut, lease) => state.ran.contains(&lease),
                _ => true,
            }),
        ]
    }
}
