//! The hot path's writes, a batch at a time: inserts, starts, log appends, run ends (with
//! their outbox rows) and the reads that go with them, every row a compare-and-set that
//! says whether it changed. The group committer (`group_commit.rs`) gathers concurrent
//! requests' work into one [`Work`]; the store's single-item methods are a batch of one.
//!
//! A batch with no log chunks, in which no task appears twice — the common case — is
//! written as **one statement** (`one_statement.rs`): one round trip to Postgres and one
//! commit, however many kinds it holds. Any other batch takes the general path
//! (`by_kind.rs`): a transaction with one statement per kind. Both are built from the
//! same SQL (`sql.rs`), bound by the same code (`binds.rs`).
//!
//! Rows the compare-and-set did not change are read once more, together, to tell the
//! caller why (a repeat of a report that already took effect, a stale lease, another
//! runner's task). A batch never fails for one item's sake: each item gets its own
//! answer.

mod binds;
mod by_kind;
mod one_statement;
mod sql;

/// The rows of the tasks given as one array: the reads after a batch's writes.
pub(crate) const READ_ROWS: &str = "SELECT * FROM tasks WHERE id = ANY($1)";

use crate::error::StoreError;
use crate::logs::LogAppend;
use crate::metered::MeteredPool;
use crate::runs::{Fence, FinishPolicy, RunEnd};
use crate::tasks::{NewTask, TaskRecord};
use crate::transition::Transition;
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// A runner's start acknowledgement, its lease already checked against the task's claim
/// in Redis (design.md §4.3): `queued -> running` under that lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartRun {
    /// The task to start.
    pub task: Uuid,
    /// The lease it was handed out under.
    pub lease_id: LeaseId,
    /// The runner starting it.
    pub runner_id: RunnerId,
    /// The agent process the lease went to (unknown for a claim of the previous format).
    pub boot_id: Option<Uuid>,
    /// When the lease was made (the claim's time).
    pub leased_at: DateTime<Utc>,
}

/// What a start did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// Where the task is now.
    pub status: TaskStatus,
    /// The attempt now running.
    pub attempt: i32,
}

/// A chunk of a running task's output, starting at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogWrite {
    /// The task.
    pub task: Uuid,
    /// The runner sending it.
    pub runner_id: RunnerId,
    /// The lease it runs under.
    pub lease_id: LeaseId,
    /// Where the chunk starts in the attempt's output.
    pub offset: i64,
    /// The bytes.
    pub data: Vec<u8>,
    /// When its bytes came, and on which stream (`baton_core::log_marks`), in order of
    /// offset, each within the chunk; none from a runner of an earlier release.
    pub marks: Vec<baton_core::log_marks::Mark>,
}

/// The end of a run to record, fenced by its lease.
#[derive(Debug, Clone)]
pub struct FinishRun {
    /// The task.
    pub task: Uuid,
    /// The lease (and runner) the end must hold.
    pub fence: Fence,
    /// How the run ended.
    pub end: RunEnd,
    /// A random draw in `[0, 1)` for the retry's jitter.
    pub jitter_unit: f64,
}

/// Everything one request (or several, merged) wants written, applied in this order in
/// one transaction: inserts, starts, log appends, run ends, then the reads.
#[derive(Debug, Clone, Default)]
pub struct Work {
    /// Tasks to insert.
    pub inserts: Vec<NewTask>,
    /// Runs to start.
    pub starts: Vec<StartRun>,
    /// Log chunks to append.
    pub logs: Vec<LogWrite>,
    /// Runs to end.
    pub finishes: Vec<FinishRun>,
    /// Rows to read after the writes (tasks just leased, a heartbeat's verdicts).
    pub reads: Vec<Uuid>,
}

impl Work {
    /// How many items it holds.
    pub fn len(&self) -> usize {
        self.inserts.len()
            + self.starts.len()
            + self.logs.len()
            + self.finishes.len()
            + self.reads.len()
    }

    /// Whether it holds no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Each item's answer, in the order of [`Work`].
#[derive(Debug, Clone, Default)]
pub struct Done {
    /// The row, and whether it was created (false: its idempotency key existed).
    pub inserts: Vec<Result<(TaskRecord, bool), StoreError>>,
    /// Each start's answer.
    pub starts: Vec<Result<Started, StoreError>>,
    /// Each log chunk's answer.
    pub logs: Vec<Result<LogAppend, StoreError>>,
    /// Each run end's answer: the row as it stands.
    pub finishes: Vec<Result<TaskRecord, StoreError>>,
    /// The rows of `reads` that exist.
    pub reads: Vec<TaskRecord>,
    /// The status changes this work wrote, for the event stream: inserts, starts and
    /// run ends that took effect (a repeated report is no change).
    pub transitions: Vec<Transition>,
    /// The runs this work ended (not those a repeated report found), to count once
    /// committed.
    pub(crate) ended: Vec<crate::runs::EndedRun>,
}

/// What the writes need besides the items: one clock for the batch, the log cap and the
/// retry policy.
#[derive(Debug, Clone, Copy)]
pub struct Apply {
    /// The time the batch is written at.
    pub now: DateTime<Utc>,
    /// The most bytes of log kept per task.
    pub log_cap: i64,
    /// The retry backoff of the run ends.
    pub policy: FinishPolicy,
}

impl Apply {
    /// For work with no log appends or run ends (inserts, starts, reads).
    pub fn at(now: DateTime<Utc>) -> Apply {
        Apply {
            now,
            log_cap: 0,
            policy: FinishPolicy {
                backoff: baton_core::after_run::TASK_RETRY,
                jitter_unit: 0.5,
            },
        }
    }
}

/// Writes `work` and commits: as one statement when it fits, else by the general path in
/// a transaction. `before_commit` runs just before the commit (the group commit's fault
/// hook). Counts the runs it ended.
pub(crate) async fn write(
    pool: &MeteredPool,
    work: &Work,
    how: &Apply,
    before_commit: impl FnOnce(),
) -> Result<Done, StoreError> {
    let mut before_commit = Some(before_commit);
    let mut attempt = 1;
    let done = loop {
        let hook = || {
            if let Some(hook) = before_commit.take() {
                hook();
            }
        };
        let written = if one_statement::eligible(work) {
            one_statement::write(pool, work, how, hook).await
        } else {
            apply_in_transaction(pool, work, how, hook).await
        };
        match written {
            // Ends of pipeline jobs' needs lock the waiting jobs (docs/pipelines.md):
            // two batches each ending several can take those locks in opposite orders,
            // and Postgres ends one of them. Nothing of it was written: write it again.
            Err(e) if e.is_deadlock() && attempt < DEADLOCK_RETRIES => attempt += 1,
            written => break written?,
        }
    };
    done.ended.iter().for_each(crate::runs::count_ended);
    Ok(done)
}

/// How many times a batch Postgres ended for a deadlock is written in all.
const DEADLOCK_RETRIES: u32 = 3;

/// `work` by the general path, in a transaction of its own.
async fn apply_in_transaction(
    pool: &MeteredPool,
    work: &Work,
    how: &Apply,
    before_commit: impl FnOnce(),
) -> Result<Done, StoreError> {
    let mut tx = pool.begin().await?;
    let done = apply(&mut tx, work, how).await?;
    before_commit();
    tx.commit().await?;
    Ok(done)
}

/// Inserts `tasks` inside the caller's transaction (a schedule's fire), as the general
/// path does: a repeated idempotency key answers its existing task.
pub(crate) async fn insert_in(
    conn: &mut PgConnection,
    tasks: &[NewTask],
    now: DateTime<Utc>,
) -> Result<Vec<Result<(TaskRecord, bool), StoreError>>, StoreError> {
    by_kind::insert(conn, tasks, now).await
}

/// Applies `work` on `conn` by the general path (inside the caller's transaction).
async fn apply(conn: &mut PgConnection, work: &Work, how: &Apply) -> Result<Done, StoreError> {
    // In this order: a start, then its log, then its end, then what is read.
    let inserts = by_kind::insert(conn, &work.inserts, how.now).await?;
    let mut transitions = created(&inserts);
    let starts = by_kind::start(conn, &work.starts, how.now, &mut transitions).await?;
    let logs = by_kind::log_append(conn, &work.logs, how.log_cap).await?;
    let finishes = by_kind::finish(conn, &work.finishes, how).await?;
    transitions.extend(finishes.transitions);
    Ok(Done {
        inserts,
        starts,
        logs,
        transitions,
        ended: finishes.ended,
        finishes: finishes.answers,
        reads: by_kind::read(conn, &work.reads).await?,
    })
}

/// The inserts that created their task (not those that found its idempotency key).
fn created(inserts: &[Result<(TaskRecord, bool), StoreError>]) -> Vec<Transition> {
    Transition::all(inserts.iter().filter_map(|r| match r {
        Ok((row, true)) => Some(row),
        _ => None,
    }))
}

/// Each insert's answer from the rows `created` (by id): the others repeated an
/// idempotency key, and their tasks were committed before ours (the insert waited for
/// them), or earlier in this very batch.
async fn with_repeated_keys(
    conn: &mut PgConnection,
    tasks: &[NewTask],
    created: HashMap<Uuid, TaskRecord>,
) -> Result<Vec<Result<(TaskRecord, bool), StoreError>>, StoreError> {
    let repeated: Vec<&str> = tasks
        .iter()
        .filter(|t| !created.contains_key(&t.id))
        .filter_map(|t| t.idempotency_key.as_deref())
        .collect();
    let existing: HashMap<String, TaskRecord> = if repeated.is_empty() {
        HashMap::new()
    } else {
        sqlx::query_as::<_, TaskRecord>("SELECT * FROM tasks WHERE idempotency_key = ANY($1)")
            .bind(&repeated)
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .filter_map(|t| Some((t.idempotency_key.clone()?, t)))
            .collect()
    };
    Ok(tasks
        .iter()
        .map(|t| match created.get(&t.id) {
            Some(row) => Ok((row.clone(), true)),
            None => t
                .idempotency_key
                .as_ref()
                .and_then(|k| existing.get(k))
                .map(|row| (row.clone(), false))
                .ok_or_else(|| {
                    StoreError::Internal("idempotency conflict without an existing task".into())
                }),
        })
        .collect())
}

/// Rows by task id.
fn by_id(rows: Vec<TaskRecord>) -> HashMap<Uuid, TaskRecord> {
    rows.into_iter().map(|t| (t.id, t)).collect()
}

/// The rows of `ids` as they stand, by task id.
async fn rows_of(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, TaskRecord>, StoreError> {
    Ok(by_id(by_kind::read(conn, ids).await?))
}
/// Why a start changed nothing (`holder`: the row as it stands).
fn start_refused(holder: Option<&Holder>, s: &StartRun) -> Result<Started, StoreError> {
    refusal(holder, s.runner_id, s.lease_id, |h| {
        // The same start again (its answer was lost): it took effect, and a cancel may
        // have followed it.
        matches!(h.status, TaskStatus::Running | TaskStatus::Cancelling)
    })
    .map(|h| Started {
        status: h.status,
        attempt: h.attempt,
    })
}

/// Positions of `items` split into rounds in which each task appears once: one
/// statement may change a row only once.
fn rounds<T>(items: &[T], task: impl Fn(&T) -> Uuid) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut seen: Vec<HashSet<Uuid>> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let id = task(item);
        match seen.iter().position(|s| !s.contains(&id)) {
            Some(r) => {
                seen[r].insert(id);
                rounds[r].push(i);
            }
            None => {
                seen.push(HashSet::from([id]));
                rounds.push(vec![i]);
            }
        }
    }
    rounds
}

/// Puts each round's answers back in item order.
fn in_order<R>(len: usize, answered: Vec<(usize, R)>) -> Vec<R> {
    let mut slots: Vec<Option<R>> = (0..len).map(|_| None).collect();
    for (i, r) in answered {
        slots[i] = Some(r);
    }
    slots
        .into_iter()
        .map(|r| r.expect("every item answered"))
        .collect()
}

/// Who holds a task now, for telling a refused report why.
#[derive(Debug, Clone, sqlx::FromRow)]
pub(crate) struct Holder {
    id: Uuid,
    #[sqlx(try_from = "String")]
    status: TaskStatus,
    runner_id: Option<RunnerId>,
    lease_id: Option<LeaseId>,
    attempt: i32,
    log_size: i64,
}

impl Holder {
    fn of(task: &TaskRecord) -> Holder {
        Holder {
            id: task.id,
            status: task.status,
            runner_id: task.runner_id,
            lease_id: task.lease_id,
            attempt: task.attempt,
            log_size: task.log_size,
        }
    }
}

/// Why a runner's compare-and-set changed nothing: another runner's task (or none) is not
/// found — its existence is not leaked; a moved status or another lease of this runner's
/// is a conflict. `already_done` recognises a retried report whose first attempt took
/// effect, which is answered with the task as it stands.
fn refusal(
    holder: Option<&Holder>,
    runner_id: RunnerId,
    lease_id: LeaseId,
    already_done: impl Fn(&Holder) -> bool,
) -> Result<&Holder, StoreError> {
    let holder = holder
        .filter(|h| h.runner_id == Some(runner_id))
        .ok_or(StoreError::NotFound)?;
    if holder.lease_id != Some(lease_id) {
        return Err(StoreError::Conflict {
            status: holder.status,
            reason: "stale lease: the task was leased again",
        });
    }
    if already_done(holder) {
        return Ok(holder);
    }
    Err(StoreError::Conflict {
        status: holder.status,
        reason: "the task is not in a state that accepts this report",
    })
}

/// The part of a chunk a log keeps: its new bytes within the cap, with their marks.
pub(super) struct StoredChunk<'w> {
    pub attempt: i32,
    pub offset: i64,
    pub data: &'w [u8],
    pub marks: Vec<baton_core::log_marks::Mark>,
}

/// What one chunk does to its task's log.
struct Accepted {
    ack: LogAppend,
    truncated: bool,
}

/// Decides one chunk against the log held so far (and moves `holder.log_size` on): a
/// chunk already held (a resend) is not stored twice; one that overlaps the end stores
/// only its new tail; one that starts past the end is refused with the size held, so the
/// runner rewinds; past the cap it is acknowledged but not kept.
#[allow(clippy::type_complexity)]
fn accept_chunk<'w>(
    holder: Option<&mut Holder>,
    w: &'w LogWrite,
    cap: i64,
) -> Result<(Accepted, Option<StoredChunk<'w>>), StoreError> {
    let holder = holder
        .filter(|h| h.runner_id == Some(w.runner_id))
        .ok_or(StoreError::NotFound)?;
    if holder.lease_id != Some(w.lease_id) {
        return Err(StoreError::Conflict {
            status: holder.status,
            reason: "stale lease: the task was leased again",
        });
    }
    if !matches!(holder.status, TaskStatus::Running | TaskStatus::Cancelling) {
        return Err(StoreError::Conflict {
            status: holder.status,
            reason: "logs are accepted only while the task runs",
        });
    }
    let held = holder.log_size;
    if w.offset > held {
        return Err(StoreError::LogOffsetPastEnd {
            requested: w.offset,
            held,
        });
    }
    let already = usize::try_from(held - w.offset).unwrap_or(usize::MAX);
    let fresh = w.data.get(already..).unwrap_or_default();
    let room = usize::try_from((cap - held).max(0)).unwrap_or(usize::MAX);
    let stored = &fresh[..fresh.len().min(room)];
    holder.log_size = held + fresh.len() as i64;
    let ack = LogAppend {
        acked: holder.log_size,
        status: holder.status,
    };
    let stored_end = held + stored.len() as i64;
    let chunk = (!stored.is_empty()).then(|| StoredChunk {
        attempt: holder.attempt,
        offset: held,
        data: stored,
        marks: w
            .marks
            .iter()
            .filter(|m| (held..stored_end).contains(&m.offset))
            .copied()
            .collect(),
    });
    Ok((
        Accepted {
            ack,
            truncated: stored.len() < fresh.len(),
        },
        chunk,
    ))
}

/// Why a run end changed nothing. A runner's own report is fenced by runner and lease;
/// the same report again (its answer was lost) is answered with the task as it stands:
/// the outcome it recorded, or the retry a failure led to.
fn finish_refused(task: Option<&TaskRecord>, f: &FinishRun) -> Result<TaskRecord, StoreError> {
    let task = task.ok_or(StoreError::NotFound)?;
    if f.fence.runner_id.is_some() && task.runner_id != f.fence.runner_id {
        return Err(StoreError::NotFound);
    }
    if task.lease_id != Some(f.fence.lease_id) {
        return Err(StoreError::Conflict {
            status: task.status,
            reason: "stale lease: the task was leased again",
        });
    }
    let repeat = f.fence.runner_id.is_some()
        && (task.status == f.end.outcome
            || (task.status == TaskStatus::Scheduled && f.end.outcome == TaskStatus::Failed));
    if repeat {
        return Ok(task.clone());
    }
    Err(StoreError::Conflict {
        status: task.status,
        reason: "the task is not running",
    })
}

#[cfg(test)]
mod tests;
