//! The model's state: what Postgres, Redis, the network and each runner hold.

use std::collections::BTreeSet;

/// A lease id: the n-th lease handed out.
pub type Lease = u8;
/// A request id: the n-th poll sent.
pub type Req = u8;
/// A runner: 0 or 1.
pub type Runner = usize;
/// A node: 0 or 1.
pub type Node = usize;
/// A time on the cluster's clock, in steps.
pub type Time = u8;

/// How a run ended, in Postgres.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum End {
    /// Its runner reported success.
    Succeeded,
    /// Its runner reported failure (its own timeout killed it).
    Failed,
    /// The server ended it: its runner no longer lists it.
    Forgotten,
    /// The server ended it: past its timeout and grace with no report.
    TimedOut,
}

/// The task's row: the source of truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Row {
    /// Waiting for a runner (Redis holds its queue entry).
    Queued,
    /// Started under `lease` by `runner` at `started`.
    Running {
        /// The lease of the run.
        lease: Lease,
        /// Who runs it.
        runner: Runner,
        /// When the start committed.
        started: Time,
    },
    /// Ended, for good, with the lease of the run that ended.
    Ended(End, Lease),
}

/// A poll on its way to the nodes: a load balancer may hand it to each node once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// Its id (the same for every resend).
    pub req: Req,
    /// Who sent it.
    pub runner: Runner,
    /// The nodes it has reached, one bit each.
    pub reached: u8,
}

/// An answer on its way back: the task it hands out (started), if any, and the node's
/// clock as it answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Answer {
    /// To whom.
    pub runner: Runner,
    /// To which request.
    pub req: Req,
    /// The lease handed out, started.
    pub lease: Option<Lease>,
    /// `answered_at`.
    pub at: Time,
    /// How long after the request arrived its look for work began (`leased_after_ms`):
    /// in this model a node looks at once, so the start is at the answer's time.
    pub started: Time,
}

/// A runner's report of how a run ended, on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Report {
    /// Who reports.
    pub runner: Runner,
    /// The run's lease.
    pub lease: Lease,
    /// Whether it exited 0 (within its timeout), or was killed by it.
    pub succeeded: bool,
}

/// A process running the task on a runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Process {
    /// The lease it runs under.
    pub lease: Lease,
    /// When it was spawned.
    pub spawned: Time,
    /// When the runner kills it: its timeout counted from when the runner believes the
    /// server started it.
    pub deadline: Time,
}

/// One runner agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Agent {
    /// Its poll out, with the newest `answered_at` it had when it sent it (`None`: it
    /// had none): the pin of `Lanes::list_as_of`.
    pub poll: Option<(Req, Option<Time>)>,
    /// The newest `answered_at` it has (`None`: none yet).
    pub answered_at: Option<Time>,
    /// The process it runs, if any.
    pub process: Option<Process>,
    /// When a node last heard it (its presence).
    pub heard: Time,
}

/// Everything, at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The cluster's clock.
    pub now: Time,
    /// Postgres.
    pub row: Row,
    /// Retries left (`max_attempts` − attempts made).
    pub retries_left: u8,
    /// Answers the network may still lose (the bound).
    pub losses_left: u8,
    /// Redis: the queue entry.
    pub queued: bool,
    /// Redis: the claim's lease.
    pub claim: Option<Lease>,
    /// Redis: what each request leased (§4.7).
    pub replay: BTreeSet<(Req, Lease)>,
    /// Each node's memory that the queue is empty.
    pub known_empty: [bool; 2],
    /// Leases handed out so far (the next lease's id).
    pub leases: Lease,
    /// Polls sent so far (the next request's id).
    pub polls: Req,
    /// Requests the load balancer may still hand to a node.
    pub requests: BTreeSet<Request>,
    /// Answers on their way.
    pub answers: BTreeSet<Answer>,
    /// Reports on their way.
    pub reports: BTreeSet<Report>,
    /// The runners.
    pub agents: [Agent; 2],
    /// Leases whose process ran (spawned): a run that never ran did nothing.
    pub ran: BTreeSet<Lease>,
    /// Leases whose process exited 0 within its timeout: a success.
    pub succeeded_in_time: BTreeSet<Lease>,
}

impl State {
    /// The processes running the task now, on every runner.
    pub fn processes(&self) -> usize {
        self.agents.iter().filter(|a| a.process.is_some()).count()
    }
}
