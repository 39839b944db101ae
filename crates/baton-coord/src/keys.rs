//! The Redis key layout (design.md §7), all under one prefix.

/// The names of every Redis key, all under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// The layout under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_string(),
        }
    }

    /// The prefix every key starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A queue's sorted set, from its key relative to the prefix (`q:<queue>:<labels>`).
    pub fn queue(&self, rel: &str) -> String {
        format!("{}{rel}", self.prefix)
    }

    /// Queue key -> {queue, labels}: which queues exist, for lease matching.
    pub fn queues(&self) -> String {
        format!("{}queues", self.prefix)
    }

    /// Label-set part of a queue key -> that queue's meta (`{queue, labels}`): the label
    /// sets some queue with work has, which a lease matches a runner's labels against.
    pub fn labelsets(&self) -> String {
        format!("{}labelsets", self.prefix)
    }

    /// Queue key -> the score of its best entry, for the queues with work of one label
    /// set (`lua/queue_index.lua`).
    pub fn ready(&self, label_part: &str) -> String {
        format!("{}ready:{label_part}", self.prefix)
    }

    /// Task id -> "node|lease|claimed_at_ms": every dispatched task's one claim.
    pub fn running(&self) -> String {
        format!("{}running", self.prefix)
    }

    /// The claims one node holds.
    pub fn owned(&self, node: &str) -> String {
        format!("{}owned:{node}", self.prefix)
    }

    /// `<owner>|<priority>` -> that owner's next free fair tag at that priority in the
    /// queue `rel` (`lua/enqueue.lua`, which spells it out), kept until the last of them
    /// has passed.
    pub fn fair(&self, rel: &str) -> String {
        format!("{}fair:{rel}", self.prefix)
    }

    /// A node's liveness, with a TTL.
    pub fn node(&self, node: &str) -> String {
        format!("{}node:{node}", self.prefix)
    }

    /// Runner id -> "last_seen_ms|boot_id": presence kept out of Postgres.
    pub fn presence(&self) -> String {
        format!("{}presence", self.prefix)
    }

    /// The event history: a stream of what happened, read by `GET /v1/events`.
    pub fn events(&self) -> String {
        format!("{}events", self.prefix)
    }

    /// Pub/sub channel announcing newly queued work (payload: the queue key).
    pub fn wake(&self) -> String {
        format!("{}wake", self.prefix)
    }

    /// Task id -> run_at (ms): scheduled tasks waiting to be promoted.
    pub fn delayed(&self) -> String {
        format!("{}delayed", self.prefix)
    }

    /// A lock (finalize `fin:<task>`, `repair`, `rebuild`), SET NX PX with an owner token.
    pub fn lock(&self, name: &str) -> String {
        format!("{}lock:{name}", self.prefix)
    }

    /// Task id -> its concurrency group entry (`lua/groups.lua`).
    pub fn groups(&self) -> String {
        format!("{}grp", self.prefix)
    }

    /// A concurrency group's tasks that hold a lease.
    pub fn group_running(&self, key: &str) -> String {
        format!("{}grun:{key}", self.prefix)
    }

    /// A concurrency group's parked tasks, by queue score.
    pub fn group_waiting(&self, key: &str) -> String {
        format!("{}gwait:{key}", self.prefix)
    }

    /// The names of the paused queues, mirrored from Postgres: a lease skips them.
    pub fn paused(&self) -> String {
        format!("{}paused", self.prefix)
    }

    /// Queue -> a token set anew by each pause or resume the API writes, so the repair
    /// pass's mirror, read from Postgres before, can tell that it is older
    /// (`lua/paused_mirror.lua`).
    pub fn paused_marks(&self) -> String {
        format!("{}paused:marks", self.prefix)
    }

    /// The generation marker: missing means Redis lost its data.
    pub fn epoch(&self) -> String {
        format!("{}epoch", self.prefix)
    }

    /// What one lease request leased, for replaying it to a retry.
    pub fn lease_request(&self, runner: &str, request_id: &str) -> String {
        format!("{}req:{runner}:{request_id}", self.prefix)
    }

    /// Field -> count: what the cluster saw of each queue in the minute starting at
    /// `minute` (minutes since the Unix epoch), for the console's charts (`trends.rs`).
    pub fn trend(&self, minute: i64) -> String {
        format!("{}trend:{minute}", self.prefix)
    }
}
