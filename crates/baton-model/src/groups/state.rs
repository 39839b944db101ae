//! The second model's state: the task rows and the queue's pause in Postgres, Redis as it
//! is now and as its replica has it, the nodes, and the Redis halves of passes a node has
//! begun.

/// A task: its index, which is also its place in the queue (the first task's score is
/// the better one, as the first submitted of one priority).
pub type Task = usize;
/// A node: 0 or 1.
pub type Node = usize;
/// A lease id: the n-th lease the lease script handed out.
pub type Lease = u8;

/// The most tasks a bound may ask for (the arrays are this long; tasks past the bound's
/// count are ended from the start and never touched).
pub const MAX_TASKS: usize = 3;

/// A task's row: the source of truth (`tasks.status` and `lease_id`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Row {
    /// Not submitted yet: the bound's late task ([`Bound::late`](super::Bound)), which
    /// is submitted while the others run, at a better score than theirs.
    Unsubmitted,
    /// Waiting for a runner.
    Queued,
    /// Started under the lease: its process runs.
    Running(Lease),
    /// Cancelled while it ran: its process runs until its runner reports.
    Cancelling(Lease),
    /// Its runner reported the end of its run.
    Ended,
    /// Cancelled: before it started, or its runner reported after a cancel.
    Cancelled,
}

impl Row {
    /// The lease of its run, while a process runs it (`TaskStatus::is_dispatched`, less
    /// `leased`, which only a node of the previous release writes).
    pub fn run(self) -> Option<Lease> {
        match self {
            Row::Running(lease) | Row::Cancelling(lease) => Some(lease),
            _ => None,
        }
    }

    /// Ended for good.
    pub fn finished(self) -> bool {
        matches!(self, Row::Ended | Row::Cancelled)
    }

    /// Its row exists and is not finished: what the repair pass reads as the group's.
    pub fn unfinished(self) -> bool {
        !self.finished() && self != Row::Unsubmitted
    }
}

/// A claim in the `running` hash: the node that owns it and the lease it is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Claim {
    /// The owner (`node|…`, and the node's `owned:` set).
    pub node: Node,
    /// The lease (`…|lease|…`).
    pub lease: Lease,
}

/// What Redis holds of the one queue and its concurrency group. Sets of tasks are bit
/// sets, task `t` as bit `1 << t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Redis {
    /// The queue's sorted set (by task index: the score order).
    pub queue: u8,
    /// The `running` hash: each task's claim.
    pub claims: [Option<Claim>; MAX_TASKS],
    /// `grp`: the tasks registered with the group.
    pub grp: u8,
    /// `grun:<key>`: the tasks holding a slot of the group.
    pub grun: u8,
    /// `gwait:<key>`: the tasks parked until a slot frees.
    pub gwait: u8,
    /// The `paused` set holds the queue.
    pub paused: bool,
    /// The generation marker `epoch` (epoch.rs): missing, Redis lost its data.
    pub epoch: bool,
}

/// The bit of task `t`.
pub fn bit(t: Task) -> u8 {
    1 << t
}

/// The Redis half of a pass a node began: its next step, lost if the node dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// The pass's group commit: the start of the task just popped under `lease`
    /// (`start_leased`: `start` in transitions/sql.rs, then `lease::views`).
    Start {
        /// The task popped.
        task: Task,
        /// The lease the lease script made.
        lease: Lease,
    },
    /// `claims_adopt.lua`: the claim just made under `from` becomes the run's, under `to`.
    Adopt {
        /// The task.
        task: Task,
        /// The lease the claim was made under.
        from: Lease,
        /// The run's lease, from its row.
        to: Lease,
    },
    /// `runs_end.lua` (`claim_release`, `AfterCommit`): the claim under `lease` goes,
    /// with its group entry (`forget`).
    Release {
        /// The task.
        task: Task,
        /// The lease whose claim goes.
        lease: Lease,
    },
    /// Submit's Redis add after its insert committed (`enqueue.lua`): in the queue,
    /// registered with the group.
    Enqueue {
        /// The task submitted.
        task: Task,
    },
    /// `requeue` in dispatch/exchange/pass.rs: `tasks_void_leases`, then
    /// `claim_requeue.lua` for a task Postgres confirms did not start. With the fix of
    /// the group's start check, the refusal first claims the group's runs that hold no
    /// claim (`claim_groups_of`, `claim_if_absent.lua` each).
    Requeue {
        /// The task.
        task: Task,
        /// The refused lease.
        lease: Lease,
    },
    /// `cancel::follow_up`: `queue_remove`, then `claim_release` of the lease read
    /// before the cancel (`lease_in_redis`).
    CancelTidy {
        /// The task.
        task: Task,
        /// The claim's lease as read before the cancel.
        lease: Option<Lease>,
    },
    /// `Coord::queue_paused_set`, after the pause or resume committed in Postgres.
    PausedSet(bool),
    /// The periodic repair pass's drops of stale claims and entries, after its claims,
    /// groups and queues.
    DropStale,
}

/// Everything, at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Postgres: the task rows.
    pub rows: [Row; MAX_TASKS],
    /// Postgres: the queue is paused (`queues.paused`).
    pub paused: bool,
    /// Postgres: every lease voided (`voided_leases`, written by `tasks_void_leases`),
    /// one bit each.
    pub voided: u16,
    /// Redis, as the master has it now.
    pub redis: Redis,
    /// Redis as its replica has it: what a failover keeps.
    pub replica: Redis,
    /// Which nodes live.
    pub alive: [bool; 2],
    /// The steps nodes still owe to passes they began, sorted (a node may owe one step
    /// twice).
    pub pending: Vec<(Node, Op)>,
    /// Leases handed out so far (the next lease's id).
    pub leases: Lease,
    /// Failovers the bound still allows.
    pub failovers: u8,
    /// Empty restarts the bound still allows.
    pub restarts: u8,
    /// Node deaths the bound still allows.
    pub deaths: u8,
    /// Cancels the bound still allows.
    pub cancels: u8,
    /// Pauses the bound still allows.
    pub pauses: u8,
    /// A start committed while Postgres had the queue paused, and how (what the promise
    /// looks at).
    pub paused_start: Option<PausedStart>,
}

/// How a start came to commit while Postgres had the queue paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PausedStart {
    /// Its lease popped before the pause, and Redis's copy says paused by the start.
    PoppedBeforeThePause,
    /// The pause's Redis write was still owed.
    CopyNotYetWritten,
    /// Redis's copy was written and lost (a failover, an empty restart): Redis says the
    /// queue is open and owes no write.
    CopyLost,
}

impl State {
    /// Tasks whose process runs: what the group's limit is about.
    pub fn running(&self) -> usize {
        self.rows.iter().filter(|r| r.run().is_some()).count()
    }

    /// Owes `node` the step `op`.
    pub fn owe(&mut self, node: Node, op: Op) {
        let at = self.pending.partition_point(|p| *p < (node, op));
        self.pending.insert(at, (node, op));
    }
}
