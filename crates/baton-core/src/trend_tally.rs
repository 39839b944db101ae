//! What this process saw happen to each queue since the tally was last taken: tasks
//! accepted, and tasks ended (succeeded, or not). A node's trends service takes it every
//! few seconds and adds it to the cluster's per-minute counts in Redis, which the
//! console's charts read: counting here costs a lock and an addition per task, not a
//! Redis command. One tally per process: nodes embedded together in one process
//! (`baton_server::start_on`) count as one.

use crate::TaskStatus;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Counts for one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueTally {
    /// Tasks accepted.
    pub submitted: u64,
    /// Tasks that ended `succeeded`.
    pub succeeded: u64,
    /// Tasks that ended `failed` or `timed_out`.
    pub failed: u64,
    /// Tasks that ended `cancelled` or `expired`: stopped, rather than failed.
    pub cancelled: u64,
}

impl QueueTally {
    fn add(&mut self, other: QueueTally) {
        self.submitted += other.submitted;
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.cancelled += other.cancelled;
    }
}

/// The most queue names one tally holds; the rest count under [`OTHER_QUEUES`]. Queue
/// names are the submitters' to choose: without a bound, one submitting ever new names
/// would grow the tally (and the Redis hash it goes to) without end.
pub const MAX_QUEUES: usize = 1000;

/// Where queues past [`MAX_QUEUES`] count. Not a valid queue name (it has a space), so it
/// is never confused with one.
pub const OTHER_QUEUES: &str = "other queues";

static TALLY: Mutex<BTreeMap<String, QueueTally>> = Mutex::new(BTreeMap::new());

fn add(queue: &str, counts: QueueTally) {
    let mut tally = TALLY.lock().expect("trend tally lock");
    let key = if tally.contains_key(queue) || tally.len() < MAX_QUEUES {
        queue
    } else {
        OTHER_QUEUES
    };
    tally.entry(key.to_string()).or_default().add(counts);
}

/// `n` tasks of `queue` were accepted.
pub fn submitted(queue: &str, n: u64) {
    add(
        queue,
        QueueTally {
            submitted: n,
            ..QueueTally::default()
        },
    );
}

/// A task of `queue` ended: its terminal status `status` committed.
pub fn ended(queue: &str, status: TaskStatus) {
    let one = QueueTally::default();
    let counts = match status {
        TaskStatus::Succeeded => QueueTally {
            succeeded: 1,
            ..one
        },
        TaskStatus::Cancelled | TaskStatus::Expired => QueueTally {
            cancelled: 1,
            ..one
        },
        _ => QueueTally { failed: 1, ..one },
    };
    add(queue, counts);
}

/// Everything counted since the last take, leaving the tally empty.
pub fn take() -> BTreeMap<String, QueueTally> {
    std::mem::take(&mut *TALLY.lock().expect("trend tally lock"))
}

/// Puts back counts a take could not deliver, so the next take carries them.
pub fn put_back(counts: BTreeMap<String, QueueTally>) {
    for (queue, c) in counts {
        add(&queue, c);
    }
}
