//! Group commit: concurrent requests' writes share one transaction.
//!
//! Each request hands its [`Work`] to the node's committer and waits. A writer of the
//! committer takes what has gathered — whatever arrived while the previous batches were
//! being written, up to `max_items`, after waiting at most `linger` for more — merges
//! it, and writes it in one statement or one transaction (see `transitions/`). A few
//! writers work at once, each on its own connection, so one request's independent parts
//! (a runner's run ends, and its starts once Redis has checked them) are written side
//! by side. Only
//! after the commit is each request answered with its own items' results, so an
//! answer is never a transition Postgres could still lose, and a node killed with a
//! batch in flight has acknowledged nothing of it.
//!
//! With no load there is nothing to wait for and a request is written at once; under
//! load the batches grow by themselves, and commits per task fall with them.
//!
//! A batch that fails as a whole for a reason of one request's (a value Postgres
//! refuses) is written again request by request, so one bad request never fails the
//! others; a batch that fails because Postgres is unavailable answers every request
//! with that (retryable) error.

use crate::Store;
use crate::error::StoreError;
use crate::runs::FinishPolicy;
use crate::transition::Transition;
use crate::transitions::{Apply, Done, Work};
use baton_core::fault::Fault;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, mpsc, oneshot};

/// Histogram of how many items each group commit wrote.
pub const BATCH_ITEMS: &str = "baton_group_commit_items";

/// Where the time a batch is written at comes from.
pub type Now = std::sync::Arc<dyn Fn() -> chrono::DateTime<chrono::Utc> + Send + Sync>;

/// How the group committer gathers and writes its batches.
#[derive(Clone)]
pub struct GroupCommitSettings {
    /// Batches written at once, each on its own connection.
    pub writers: usize,
    /// Most items in one transaction.
    pub max_items: usize,
    /// How long the committer waits for more once it has something (zero: it writes
    /// what has gathered at once).
    pub linger: Duration,
    /// The most bytes of log kept per task.
    pub log_cap: i64,
    /// The retry backoff of the run ends it writes.
    pub policy: FinishPolicy,
    /// The time its transitions are written at: the cluster's clock, so a start written by
    /// one node and judged by another's reconciler are on one clock.
    pub now: Now,
    /// Test-only fault injection: `AbortBeforeCommit` and `AbortAfterCommit` end the
    /// process at that point of a group commit, as a crash there would;
    /// `FailAfterCommit` answers every committed batch with an error, as a connection
    /// lost after the commit would. The node's other faults do nothing here.
    pub fault: Option<Fault>,
    /// Told of each committed batch's status changes, before its requests are answered.
    pub observer: Option<CommitObserver>,
}

/// Told of every batch's status changes once they are committed, before any of its
/// requests is answered — so what a caller does next (queue the task, answer the runner)
/// comes after the news of it: the node's event stream (`baton-server/src/events/`).
pub type CommitObserver = Arc<
    dyn Fn(Vec<Transition>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

/// The node's committer. Cheap to clone.
#[derive(Debug, Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<Job>,
}

struct Job {
    work: Work,
    reply: oneshot::Sender<Result<Done, StoreError>>,
}

/// How many requests may wait for the committer before new ones wait to be queued.
const QUEUE_DEPTH: usize = 4096;

impl GroupCommit {
    /// Starts the committer; it ends when every handle is dropped.
    pub fn spawn(store: Store, settings: GroupCommitSettings) -> GroupCommit {
        let (queue, jobs) = mpsc::channel(QUEUE_DEPTH);
        let jobs = Arc::new(Mutex::new(jobs));
        for _ in 0..settings.writers.max(1) {
            tokio::spawn(commit_loop(store.clone(), settings.clone(), jobs.clone()));
        }
        GroupCommit { queue }
    }

    /// Writes `work` in the next group commit; answers once it is committed.
    pub async fn write(&self, work: Work) -> Result<Done, StoreError> {
        if work.is_empty() {
            return Ok(Done::default());
        }
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Job { work, reply })
            .await
            .map_err(|_| StoreError::Unavailable("the node is shutting down".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the group commit was abandoned".into()))?
    }
}

/// One writer: it takes the queue, gathers a batch, lets the queue go to the next writer
/// and writes the batch — so while one batch is being written the next gathers.
async fn commit_loop(
    store: Store,
    settings: GroupCommitSettings,
    jobs: Arc<Mutex<mpsc::Receiver<Job>>>,
) {
    loop {
        let batch = {
            let mut jobs = jobs.lock().await;
            match gather(&mut jobs, &settings).await {
                Some(batch) => batch,
                None => return,
            }
        };
        commit(&store, &settings, batch).await;
    }
}

/// The next batch: the first job to come, and whatever else is there (up to
/// `max_items`, after at most `linger`). `None` once every handle is gone.
async fn gather(
    jobs: &mut mpsc::Receiver<Job>,
    settings: &GroupCommitSettings,
) -> Option<Vec<Job>> {
    {
        let first = jobs.recv().await?;
        let mut items = first.work.len();
        let mut batch = vec![first];
        let linger_until = tokio::time::Instant::now() + settings.linger;
        while items < settings.max_items {
            let next = match jobs.try_recv() {
                Ok(job) => Some(job),
                Err(_) if settings.linger.is_zero() => None,
                Err(_) => tokio::time::timeout_at(linger_until, jobs.recv())
                    .await
                    .ok()
                    .flatten(),
            };
            let Some(job) = next else { break };
            items += job.work.len();
            batch.push(job);
        }
        metrics::histogram!(BATCH_ITEMS).record(items as f64);
        Some(batch)
    }
}

async fn commit(store: &Store, settings: &GroupCommitSettings, batch: Vec<Job>) {
    let how = Apply {
        now: (settings.now)(),
        log_cap: settings.log_cap,
        policy: settings.policy,
    };
    if batch.len() == 1 {
        let job = batch.into_iter().next().expect("one job");
        let done = write_one(store, settings, &job.work, &how).await;
        let _ = job.reply.send(done);
        return;
    }
    let (merged, sizes) = merge(&batch);
    match write_one(store, settings, &merged, &how).await {
        Ok(done) => {
            for (job, done) in batch.into_iter().zip(split(done, &sizes)) {
                let _ = job.reply.send(Ok(done));
            }
        }
        Err(e @ StoreError::Unavailable(_)) => {
            for job in batch {
                let _ = job.reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            // Something in one request Postgres refuses: each on its own, so only that one
            // fails.
            tracing::debug!(error = %e, requests = batch.len(), "group commit refused; writing its requests one by one");
            for job in batch {
                let done = write_one(store, settings, &job.work, &how).await;
                let _ = job.reply.send(done);
            }
        }
    }
}

async fn write_one(
    store: &Store,
    settings: &GroupCommitSettings,
    work: &Work,
    how: &Apply,
) -> Result<Done, StoreError> {
    let mut done = crate::transitions::write(&store.pool, work, how, || {
        fault(settings, Fault::AbortBeforeCommit)
    })
    .await?;
    fault(settings, Fault::AbortAfterCommit);
    if let Some(observer) = &settings.observer
        && !done.transitions.is_empty()
    {
        observer(std::mem::take(&mut done.transitions)).await;
    }
    if settings.fault == Some(Fault::FailAfterCommit) {
        // The commit took effect, but its answer never reached the node: the ambiguous
        // case every caller must treat as "may have happened".
        return Err(StoreError::Unavailable(
            "fault injection: the answer to a commit was lost".into(),
        ));
    }
    Ok(done)
}

fn fault(settings: &GroupCommitSettings, at: Fault) {
    if settings.fault.as_ref() == Some(&at) {
        tracing::error!(
            fault = %at,
            "fault injection: aborting inside a group commit"
        );
        std::process::abort();
    }
}

/// How many items of each kind one request contributed, and the rows it reads.
#[derive(Debug, Clone, Default)]
struct Sizes {
    inserts: usize,
    starts: usize,
    logs: usize,
    finishes: usize,
    reads: Vec<uuid::Uuid>,
}

fn merge(batch: &[Job]) -> (Work, Vec<Sizes>) {
    let mut merged = Work::default();
    let mut sizes = Vec::with_capacity(batch.len());
    for job in batch {
        let w = &job.work;
        sizes.push(Sizes {
            inserts: w.inserts.len(),
            starts: w.starts.len(),
            logs: w.logs.len(),
            finishes: w.finishes.len(),
            reads: w.reads.clone(),
        });
        merged.inserts.extend(w.inserts.iter().cloned());
        merged.starts.extend(w.starts.iter().cloned());
        merged.logs.extend(w.logs.iter().cloned());
        merged.finishes.extend(w.finishes.iter().cloned());
        merged.reads.extend(w.reads.iter().copied());
    }
    merged.reads.sort();
    merged.reads.dedup();
    (merged, sizes)
}

/// Each request's share of a merged batch's answers: its own items' results, and the
/// rows it asked to read.
fn split(done: Done, sizes: &[Sizes]) -> Vec<Done> {
    let Done {
        inserts,
        starts,
        logs,
        finishes,
        reads,
        // Counted and told already, for the batch as a whole.
        ended: _,
        transitions: _,
    } = done;
    let rows: std::collections::HashMap<uuid::Uuid, crate::TaskRecord> =
        reads.into_iter().map(|t| (t.id, t)).collect();
    let (mut inserts, mut starts, mut logs, mut finishes) = (
        inserts.into_iter(),
        starts.into_iter(),
        logs.into_iter(),
        finishes.into_iter(),
    );
    sizes
        .iter()
        .map(|s| Done {
            inserts: inserts.by_ref().take(s.inserts).collect(),
            starts: starts.by_ref().take(s.starts).collect(),
            logs: logs.by_ref().take(s.logs).collect(),
            finishes: finishes.by_ref().take(s.finishes).collect(),
            reads: s
                .reads
                .iter()
                .filter_map(|id| rows.get(id).cloned())
                .collect(),
            transitions: Vec::new(),
            ended: Vec::new(),
        })
        .collect()
}
