//! The second model: Redis and Postgres state under node deaths, Redis failovers and
//! empty restarts, with a concurrency group, cancel and pause (docs/flow-control.md,
//! design.md §4.3, §4.6, §4.12, §4.13).
//!
//! Why a second model: the first ([`crate::Dispatch`]) is about the runner's lanes and
//! one task; what it leaves out — a node that dies with its claims, a Redis that loses the
//! writes it had not replicated, or everything, and the copies Redis keeps of a group's
//! slots and a queue's pause — is where hole 3 of issue 25 was: a failover lost a
//! started lease's claim and slot, the next lease popped the running task again, its
//! refused start released the claim with `forget` and promoted a waiting task, which ran
//! beside it. Each fix is a switch ([`Fixes`]); `tests/groups.rs` keeps the order of
//! steps the checker finds with one taken out.
//!
//! What is modelled (two or three tasks in one queue and one group, two nodes):
//! - **Postgres**: each task's row (`queued`, `running` or `cancelling` under a lease,
//!   ended, cancelled), the voided leases `start` refuses, and the queue's `paused`.
//! - **Redis** ([`Redis`]): the queue, the claims with their owning node, `grp`,
//!   `grun`, `gwait`, `paused` and the generation marker, changed only by the scripts
//!   (`scripts.rs`, one step each). It is kept twice: as the master has it and as the
//!   replica has it. [`Action::Replicate`] copies the first to the second (so any prefix
//!   of the writes may be the replicated one); [`Action::Failover`] drops what was not
//!   replicated; [`Action::RestartEmpty`] drops everything.
//! - **A node's pass** is its steps in order, each a step of its own, so anything may
//!   come between: the lease script pops and claims ([`Action::Lease`]), the group
//!   commit starts it (`start_leased`), then the Redis follow-up (adopt, release,
//!   requeue) — each owed step ([`Op`]) lost if the node dies first. Likewise a run's
//!   end (Postgres, then `runs_end.lua`), a cancel and a pause or resume.
//! - **Node services**: the reconciler on its own claims (adopt a claim under another
//!   lease than the run's, requeue an unstarted lease at its ack timeout, drop a claim on
//!   an ended task), the orphan cleaner's take-over of a dead node's claims, and the
//!   repair pass — the full rebuild when the generation marker is missing — in the
//!   order `Repairer::run_once` takes its steps: its claims, groups and queues as one
//!   step, its drops of stale claims and entries as the next, which a failover may come
//!   before.
//! - **Runners** are folded in: a run starts when its start commits and ends when a
//!   node takes its report; a cancelled run reports when its runner hears of it.
//!
//! - **A late submit** (with [`Bound::late`]): the first task is submitted while the
//!   others run, Postgres then `enqueue.lua`, at the best score (a higher priority), so
//!   that a failover can leave it ahead of a run's entry.
//!
//! Not modelled: runners' lanes, timeouts and verdicts (the first model), the
//! replay record and `KnownEmpty`, retries and delayed tasks, other submits (the tasks
//! are queued at the start), several queues (a better score stands for one), a node
//! paused and rejoining under a new id, the repair pass's grace periods, other steps
//! inside the repair pass's first step, and two starts committing at once (a start is
//! one step: the group's count in it sees every start before it).
//!
//! The bound (`tests/groups.rs`): two tasks in a group of limit 1 (and three in one of
//! limit 2), three or four leases, and one each of the faults and API calls, a few at a
//! time — a failover with a death, a cancel or a pause; an empty restart with a death and
//! a cancel, or a pause. Each check is 0.16–4.0 million distinct states (0.8–30 million
//! visited), at most 24 s optimized; the whole file about 90 s on one core beside a drill. Every fault
//! and call at once is too many states for CI (tens of millions before the pass was split).
//!
//! What it finds, with every fix in: every promise holds within the bound ([`HELD`]).
//! It found the third fix: before it, a running task whose claim Redis lost, back in its
//! queue, met a repair pass before any lease popped it again; the pass did not claim it
//! (`claim_if_absent.lua`: its queue held it) and dropped its entry as stale
//! (`drop_stale_entries`, `queue_remove.lua` with `forget`), so the next lease found the
//! group free and started another beside it, until the next pass claimed the first.
//! The same hole one step later — a failover between the pass's claim step and its drop
//! of stale entries — was found by the test suite in CI, with the model then taking the
//! pass as one step; the model now splits it there and finds that hole with its fix out
//! (`stale_entry_of_a_run_is_claimed`). And a task submitted after a run at a higher
//! priority, ahead of the run's entry once a failover lost its lease, was popped first
//! and started beside it — found by the Redis Sentinel drill in CI, with the model then
//! having no late submit; with it, and the start's count of the group's runs out
//! (`start_checks_group`), the checker finds that too.

mod scripts;
mod state;

pub use state::{Claim, Lease, MAX_TASKS, Node, Op, PausedStart, Redis, Row, State, Task, bit};

use stateright::{Model, Property};

/// The fixes of hole 3, each a switch: off, the step behaves as before its fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixes {
    /// A popped task whose row runs under another lease has the claim just made handed
    /// to its run, slot kept (`claims_adopt.lua`, from `lease::views`' `claims_lost` and
    /// from the reconciler), instead of released with `forget` as a moved-on task's.
    pub adopt_claim_of_running_row: bool,
    /// `start` refuses a queue Postgres has paused (`RUNNER_MAY_TAKE` in
    /// transitions/sql.rs), and a refused start mirrors the pauses to Redis
    /// (`mirror_pauses` in dispatch/exchange/pass.rs).
    pub start_checks_pause: bool,
    /// The repair pass claims a started run whose entry its queue holds (a copy a Redis
    /// failover or restart brought back): the entry goes and the run takes its group's
    /// slot (`claim_if_absent.lua`, `started`), instead of the entry being dropped as
    /// stale with the unclaimed task's group bookkeeping.
    pub repair_claims_queued_runs: bool,
    /// The repair pass's drop of stale entries claims a started run with no claim
    /// instead of dropping its entry (`drop_stale_entries`): a failover after the pass's
    /// claim step can have taken the run's claim and put its entry back.
    pub stale_entry_of_a_run_is_claimed: bool,
    /// `start` refuses a task whose group has its limit of runs in Postgres
    /// (`group_has_room` in transitions/sql.rs), and a refused start claims the group's
    /// runs that hold no claim (`claim_groups_of` in dispatch/exchange/pass.rs): a
    /// failover that lost a run's slot made the group look freer in Redis.
    pub start_checks_group: bool,
}

impl Fixes {
    /// Every fix in.
    pub const ALL: Fixes = Fixes {
        adopt_claim_of_running_row: true,
        start_checks_pause: true,
        repair_claims_queued_runs: true,
        stale_entry_of_a_run_is_claimed: true,
        start_checks_group: true,
    };
}

/// How far the checker looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// Tasks in the queue and the group (at most [`MAX_TASKS`]).
    pub tasks: usize,
    /// The group's limit.
    pub limit: u8,
    /// Leases the lease script may hand out, in all.
    pub leases: Lease,
    /// Failovers that drop the unreplicated writes.
    pub failovers: u8,
    /// Restarts of Redis with nothing.
    pub restarts: u8,
    /// Nodes that may die (at most one: a node must live to adopt).
    pub deaths: u8,
    /// Cancels.
    pub cancels: u8,
    /// Pauses of the queue (a resume is always allowed).
    pub pauses: u8,
    /// Whether the periodic repair pass runs (the rebuild after an empty restart always
    /// does).
    pub repair: bool,
    /// The first task is submitted late, while the others run, at a better score (a
    /// higher priority): after a failover that lost a run's lease it is ahead of the
    /// run's entry.
    pub late: bool,
}

impl Default for Bound {
    fn default() -> Self {
        Bound {
            tasks: 2,
            limit: 1,
            leases: 4,
            failovers: 1,
            restarts: 0,
            deaths: 1,
            cancels: 1,
            pauses: 1,
            repair: true,
            late: false,
        }
    }
}

/// Redis and Postgres under failures, one group.
#[derive(Clone, Debug)]
pub struct Groups {
    /// Which fixes are in.
    pub fixes: Fixes,
    /// How far the checker looks.
    pub bound: Bound,
}

/// One step of one actor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The API submits the late task on a node: Postgres, then `enqueue.lua`.
    Submit(Node),
    /// A node's lease pass runs `lease.lua` for a runner that wants one task
    /// (dispatch/lease.rs `pop`).
    Lease(Node),
    /// A node takes the next step of a pass it began.
    Follow(Node, Op),
    /// A node takes a runner's report: `finish` in transitions/sql.rs ends the run, and
    /// the node owes `runs_end.lua`.
    Report(Node, Task),
    /// A node's reconciler acts on its own claim of the task (services/reconciler.rs).
    Reconcile(Node, Task),
    /// A node's orphan cleaner takes over the dead node's claims
    /// (services/orphan_cleaner.rs, `claims_take_over.lua`).
    TakeOver(Node),
    /// A node's repair pass (services/repairer.rs `run_once`; `Mode::Rebuild`, by the
    /// rebuilder, when the generation marker is missing).
    Repair(Node),
    /// The API cancels a task on a node (dispatch/cancel.rs).
    Cancel(Node, Task),
    /// The API pauses the queue on a node: Postgres, then `queue_paused_set`.
    Pause(Node),
    /// The API resumes the queue on a node: Postgres, then `queue_paused_set`.
    Resume(Node),
    /// A node dies: it takes no step again, and owes none.
    Die(Node),
    /// The replica catches up with the master.
    Replicate,
    /// A Sentinel or Cluster failover: the replica becomes the master, and what it had
    /// not received is lost.
    Failover,
    /// Redis restarts with nothing (`restart-redis` of the drill, FLUSHALL).
    RestartEmpty,
}

/// The promises, by the names the checker reports.
pub const PROMISES: [&str; 3] = [
    "a group of N never has more than N running",
    "no task starts while Postgres has its queue paused",
    "nothing accepted is lost",
];

/// The promises the model finds kept within the bound, every fix in.
pub const HELD: [&str; 3] = PROMISES;

/// Found possible, as a check that the model can do what it must (every task ends).
pub const EVERY_TASK_ENDS: &str = "every task can end";

impl Groups {
    fn tasks(&self) -> std::ops::Range<Task> {
        0..self.bound.tasks
    }

    /// The tasks whose rows are not finished, as a bit set.
    fn unfinished(&self, state: &State) -> u8 {
        self.tasks()
            .filter(|t| !state.rows[*t].finished())
            .fold(0, |set, t| set | bit(t))
    }

    /// How many tasks besides `task` have a run: what `group_has_room` counts.
    fn runs_besides(state: &State, task: Task) -> usize {
        (0..MAX_TASKS)
            .filter(|t| *t != task && state.rows[*t].run().is_some())
            .count()
    }

    /// `Repairer::run_once`, in its order: claims (`claim_unclaimed`), the paused set and
    /// the groups (`flow_repair::repair`), then the queues (`requeue_missing`), as one
    /// step; the periodic pass then owes its drops of stale claims and entries
    /// ([`Op::DropStale`]), which other steps (a failover) may come before. The rebuild
    /// writes the generation marker last, in the same step.
    fn repair(&self, state: &mut State, node: Node) {
        let limit = self.bound.limit;
        let rebuild = !state.redis.epoch;
        let redis = &mut state.redis;
        for t in self.tasks() {
            if let Some(lease) = state.rows[t].run() {
                redis.claim_if_absent(t, node, lease, self.fixes.repair_claims_queued_runs);
            }
        }
        redis.paused = state.paused;
        let registered = redis.grp;
        let unfinished = self
            .tasks()
            .filter(|t| state.rows[*t].unfinished())
            .fold(0, |set, t| set | bit(t));
        redis.groups_repair(unfinished, limit);
        for t in self.tasks() {
            if registered & bit(t) != 0 && state.rows[t].finished() {
                redis.queue_remove(t, limit);
            }
        }
        for t in self.tasks() {
            if state.rows[t] == Row::Queued && redis.queue & bit(t) == 0 {
                redis.enqueue_unclaimed(t);
            }
        }
        if rebuild {
            redis.epoch = true;
        } else {
            state.owe(node, Op::DropStale);
        }
    }

    /// The periodic repair pass's last steps: `drop_stale_claims`, then
    /// `drop_stale_entries`, which (with the fix) claims a started run it meets
    /// unclaimed instead of dropping its entry.
    fn drop_stale(&self, state: &mut State, node: Node) {
        let limit = self.bound.limit;
        let redis = &mut state.redis;
        for t in self.tasks() {
            if let Some(claim) = redis.claims[t]
                && state.rows[t].finished()
            {
                redis.runs_end(t, claim.lease, limit);
            }
        }
        for t in self.tasks() {
            if redis.queue & bit(t) == 0 || state.rows[t] == Row::Queued {
                continue;
            }
            // `claim_if_absent.lua` takes the entry of a started run only with the third
            // fix; a run it leaves unclaimed has its entry dropped.
            if let Some(lease) = state.rows[t].run()
                && self.fixes.stale_entry_of_a_run_is_claimed
            {
                redis.claim_if_absent(t, node, lease, self.fixes.repair_claims_queued_runs);
            }
            if redis.queue & bit(t) != 0 {
                redis.queue_remove(t, limit);
            }
        }
    }

    /// The group commit of a pass that popped `task` under `lease` (`start_leased`): the
    /// start is a compare-and-set from `queued` that refuses a voided lease (and, with
    /// the fix, a paused queue); what the node owes next follows from the row
    /// (`lease::views`).
    fn start(&self, state: &mut State, node: Node, task: Task, lease: Lease) {
        match state.rows[task] {
            Row::Queued => {
                let voided = state.voided & (1 << lease) != 0;
                let paused = self.fixes.start_checks_pause && state.paused;
                let full = self.fixes.start_checks_group
                    && Self::runs_besides(state, task) >= usize::from(self.bound.limit);
                if voided || paused || full {
                    state.owe(node, Op::Requeue { task, lease });
                } else {
                    if state.paused && state.paused_start.is_none() {
                        let owed = state
                            .pending
                            .iter()
                            .any(|(_, op)| *op == Op::PausedSet(true));
                        state.paused_start = Some(if state.redis.paused {
                            PausedStart::PoppedBeforeThePause
                        } else if owed {
                            PausedStart::CopyNotYetWritten
                        } else {
                            PausedStart::CopyLost
                        });
                    }
                    state.rows[task] = Row::Running(lease);
                }
            }
            Row::Running(run) | Row::Cancelling(run) if self.fixes.adopt_claim_of_running_row => {
                state.owe(
                    node,
                    Op::Adopt {
                        task,
                        from: lease,
                        to: run,
                    },
                );
            }
            // Moved on: the claim goes (`AfterCommit`, `runs_end.lua`).
            _ => state.owe(node, Op::Release { task, lease }),
        }
    }

    /// A step a node owes.
    fn follow(&self, state: &mut State, node: Node, op: Op) {
        let limit = self.bound.limit;
        match op {
            Op::Start { task, lease } => self.start(state, node, task, lease),
            Op::Adopt { task, from, to } => state.redis.claims_adopt(task, from, to),
            Op::Release { task, lease } => state.redis.runs_end(task, lease, limit),
            Op::Enqueue { task } => state.redis.enqueue(task),
            Op::Requeue { task, lease } => {
                if self.fixes.start_checks_group {
                    for t in self.tasks() {
                        if let Some(run) = state.rows[t].run() {
                            state.redis.claim_if_absent(t, node, run, true);
                        }
                    }
                }
                // `tasks_void_leases` answers which did not start: only those go back.
                if state.rows[task] == Row::Queued {
                    state.voided |= 1 << lease;
                    state.redis.claim_requeue(task, node, lease, limit);
                }
                if self.fixes.start_checks_pause {
                    state.redis.paused = state.paused;
                }
            }
            Op::CancelTidy { task, lease } => {
                state.redis.queue_remove(task, limit);
                if let Some(lease) = lease {
                    state.redis.runs_end(task, lease, limit);
                }
            }
            Op::PausedSet(paused) => state.redis.paused = paused,
            Op::DropStale => self.drop_stale(state, node),
        }
    }

    /// Whether a step that moves a task on (not a fault, not an API call) changes
    /// anything: none, and a task unfinished, is a task nothing will finish.
    fn can_move(&self, state: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(state, &mut actions);
        actions.into_iter().any(|action| {
            matches!(
                action,
                Action::Submit(_)
                    | Action::Lease(_)
                    | Action::Follow(..)
                    | Action::Report(..)
                    | Action::Reconcile(..)
                    | Action::TakeOver(_)
                    | Action::Repair(_)
                    | Action::Resume(_)
            ) && self.next_state(state, action).is_some()
        })
    }
}

impl Model for Groups {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut rows = [Row::Ended; MAX_TASKS];
        let mut tasks = 0;
        for t in self.tasks() {
            rows[t] = Row::Queued;
            tasks |= bit(t);
        }
        if self.bound.late {
            rows[0] = Row::Unsubmitted;
            tasks &= !bit(0);
        }
        // Submitted: committed, queued and registered with the group, and replicated.
        let redis = Redis {
            queue: tasks,
            grp: tasks,
            epoch: true,
            ..Redis::EMPTY
        };
        vec![State {
            rows,
            paused: false,
            voided: 0,
            redis,
            replica: redis,
            alive: [true; 2],
            pending: Vec::new(),
            leases: 0,
            failovers: self.bound.failovers,
            restarts: self.bound.restarts,
            deaths: self.bound.deaths,
            cancels: self.bound.cancels,
            pauses: self.bound.pauses,
            paused_start: None,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for node in 0..2 {
            if !state.alive[node] {
                continue;
            }
            if state.rows[0] == Row::Unsubmitted {
                actions.push(Action::Submit(node));
            }
            if state.leases < self.bound.leases && state.redis.queue != 0 {
                actions.push(Action::Lease(node));
            }
            for (owner, op) in &state.pending {
                if *owner == node {
                    actions.push(Action::Follow(node, *op));
                }
            }
            for t in self.tasks() {
                if state.rows[t].run().is_some() {
                    actions.push(Action::Report(node, t));
                }
                if state.redis.claims[t].is_some_and(|c| c.node == node) {
                    actions.push(Action::Reconcile(node, t));
                }
                if state.cancels > 0 && matches!(state.rows[t], Row::Queued | Row::Running(_)) {
                    actions.push(Action::Cancel(node, t));
                }
            }
            if !state.alive[1 - node] {
                actions.push(Action::TakeOver(node));
            }
            // One pass at a time on a node: the next begins once this one has dropped.
            let passing = state.pending.contains(&(node, Op::DropStale));
            if (self.bound.repair || !state.redis.epoch) && !passing {
                actions.push(Action::Repair(node));
            }
            if state.paused {
                actions.push(Action::Resume(node));
            } else if state.pauses > 0 {
                actions.push(Action::Pause(node));
            }
            if state.deaths > 0 && state.alive[1 - node] {
                actions.push(Action::Die(node));
            }
        }
        if state.failovers > 0 && state.replica != state.redis {
            actions.push(Action::Replicate);
            actions.push(Action::Failover);
        }
        if state.restarts > 0 {
            actions.push(Action::RestartEmpty);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let limit = self.bound.limit;
        match action {
            Action::Submit(node) => {
                state.rows[0] = Row::Queued;
                state.owe(node, Op::Enqueue { task: 0 });
            }
            Action::Lease(node) => {
                let lease = state.leases;
                if let Some(task) = state.redis.lease(node, lease, limit) {
                    state.leases += 1;
                    state.owe(node, Op::Start { task, lease });
                }
            }
            Action::Follow(node, op) => {
                let at = state.pending.iter().position(|p| *p == (node, op))?;
                state.pending.remove(at);
                self.follow(&mut state, node, op);
            }
            Action::Report(node, task) => {
                let lease = state.rows[task].run()?;
                state.rows[task] = match state.rows[task] {
                    Row::Cancelling(_) => Row::Cancelled,
                    _ => Row::Ended,
                };
                state.owe(node, Op::Release { task, lease });
            }
            Action::Reconcile(node, task) => {
                let claim = state.redis.claims[task].filter(|c| c.node == node)?;
                match state.rows[task] {
                    Row::Running(run) | Row::Cancelling(run) => {
                        if run == claim.lease || !self.fixes.adopt_claim_of_running_row {
                            return None;
                        }
                        state.redis.claims_adopt(task, claim.lease, run);
                    }
                    // A lease never started, past its ack timeout (`Reason::AckTimeout`):
                    // voided in Postgres, then `claim_requeue.lua`.
                    Row::Queued => {
                        state.voided |= 1 << claim.lease;
                        state.redis.claim_requeue(task, node, claim.lease, limit);
                    }
                    Row::Ended | Row::Cancelled => state.redis.runs_end(task, claim.lease, limit),
                    Row::Unsubmitted => return None,
                }
            }
            Action::TakeOver(node) => state.redis.claims_take_over(1 - node, node),
            Action::Repair(node) => self.repair(&mut state, node),
            Action::Cancel(node, task) => {
                state.cancels -= 1;
                match state.rows[task] {
                    Row::Queued => {
                        // `lease_in_redis`: the claim is read before the cancel commits.
                        let lease = state.redis.claims[task].map(|c| c.lease);
                        state.rows[task] = Row::Cancelled;
                        state.owe(node, Op::CancelTidy { task, lease });
                    }
                    // The runner is woken and reports; the run's end frees the slot.
                    Row::Running(lease) => state.rows[task] = Row::Cancelling(lease),
                    _ => return None,
                }
            }
            Action::Pause(node) => {
                state.pauses -= 1;
                state.paused = true;
                state.owe(node, Op::PausedSet(true));
            }
            Action::Resume(node) => {
                state.paused = false;
                state.owe(node, Op::PausedSet(false));
            }
            Action::Die(node) => {
                state.deaths -= 1;
                state.alive[node] = false;
                state.pending.retain(|(owner, _)| *owner != node);
            }
            Action::Replicate => state.replica = state.redis,
            Action::Failover => {
                state.failovers -= 1;
                state.redis = state.replica;
            }
            Action::RestartEmpty => {
                state.restarts -= 1;
                state.redis = Redis::EMPTY;
                state.replica = Redis::EMPTY;
            }
        }
        // Once no failover is left, what the replica holds can matter no more: kept equal
        // to the master, so that states differing only there are one.
        if state.failovers == 0 {
            state.replica = state.redis;
        }
        // A step that changes nothing is no step (a repair with nothing to mend, a lease
        // on a paused queue).
        (state != *last).then_some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::<Self>::always(PROMISES[0], |model, state| {
                state.running() <= usize::from(model.bound.limit)
            }),
            Property::<Self>::always(PROMISES[1], |_, state| state.paused_start.is_none()),
            // Stateright's `eventually` is judged only at the ends of paths, and this
            // model's paths end only where the bound runs out: instead, no state may be
            // reached where a task is unfinished and no step could move it on — while
            // leases remain, so that the bound is not what stops it.
            Property::<Self>::always(PROMISES[2], |model, state| {
                state.leases >= model.bound.leases
                    || model.unfinished(state) == 0
                    || model.can_move(state)
            }),
            Property::<Self>::sometimes(EVERY_TASK_ENDS, |model, state| {
                model.unfinished(state) == 0
            }),
        ]
    }
}
