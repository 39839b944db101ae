//! The hot path's writes, a batch at a time: inserts, starts, log appends and run ends,
//! each kind one statement for the whole batch (`… FROM unnest(…)` or
//! `jsonb_to_recordset`), every row a compare-and-set that says whether it changed.
//! The group committer (`group_commit.rs`) gathers concurrent requests' work into one
//! [`Work`] and one transaction; the store's single-item methods are a batch of one.
//!
//! Rows the compare-and-set did not change are read once more, together, to tell the
//! caller why (a repeat of a report that already took effect, a stale lease, another
//! runner's task). A batch never fails for one item's sake: each item gets its own
//! answer.

use crate::error::StoreError;
use crate::logs::LogAppend;
use crate::runs::{Fence, FinishPolicy, RunEnd, outbox_for_all};
use crate::tasks::{NewTask, TaskRecord};
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use sqlx::types::Json;
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// A runner's start acknowledgement, its lease already checked against the task's claim
/// in Redis (design.md §4.3): `queued -> running` under that lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartRun {
    pub task: Uuid,
    pub lease_id: Uuid,
    pub runner_id: Uuid,
    /// The agent process the lease went to (unknown for a claim of the previous format).
    pub boot_id: Option<Uuid>,
    /// When the lease was made (the claim's time).
    pub leased_at: DateTime<Utc>,
}

/// What a start did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub status: TaskStatus,
    pub attempt: i32,
}

/// A chunk of a running task's output, starting at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogWrite {
    pub task: Uuid,
    pub runner_id: Uuid,
    pub lease_id: Uuid,
    pub offset: i64,
    pub data: Vec<u8>,
}

/// The end of a run to record, fenced by its lease.
#[derive(Debug, Clone)]
pub struct FinishRun {
    pub task: Uuid,
    pub fence: Fence,
    pub end: RunEnd,
    /// A random draw in `[0, 1)` for the retry's jitter.
    pub jitter_unit: f64,
}

/// Everything one request (or several, merged) wants written, applied in this order in
/// one transaction: inserts, starts, log appends, run ends, then the reads.
#[derive(Debug, Clone, Default)]
pub struct Work {
    pub inserts: Vec<NewTask>,
    pub starts: Vec<StartRun>,
    pub logs: Vec<LogWrite>,
    pub finishes: Vec<FinishRun>,
    /// Rows to read after the writes (tasks just leased, a heartbeat's verdicts).
    pub reads: Vec<Uuid>,
}

impl Work {
    pub fn len(&self) -> usize {
        self.inserts.len()
            + self.starts.len()
            + self.logs.len()
            + self.finishes.len()
            + self.reads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Each item's answer, in the order of [`Work`].
#[derive(Debug, Clone, Default)]
pub struct Done {
    /// The row, and whether it was created (false: its idempotency key existed).
    pub inserts: Vec<Result<(TaskRecord, bool), StoreError>>,
    pub starts: Vec<Result<Started, StoreError>>,
    pub logs: Vec<Result<LogAppend, StoreError>>,
    pub finishes: Vec<Result<TaskRecord, StoreError>>,
    /// The rows of `reads` that exist.
    pub reads: Vec<TaskRecord>,
}

/// What the writes need besides the items: one clock for the batch, the log cap and the
/// retry policy.
#[derive(Debug, Clone, Copy)]
pub struct Apply {
    pub now: DateTime<Utc>,
    pub log_cap: i64,
    pub policy: FinishPolicy,
}

impl Apply {
    /// For work with no log appends or run ends (inserts, starts, reads).
    pub fn at(now: DateTime<Utc>) -> Apply {
        Apply {
            now,
            log_cap: 0,
            policy: FinishPolicy {
                backoff: baton_core::retry::TASK_RETRY,
                jitter_unit: 0.5,
                webhook_body: |_| Value::Null,
            },
        }
    }
}

/// Applies `work` on `conn` (inside the caller's transaction).
pub(crate) async fn apply(
    conn: &mut PgConnection,
    work: &Work,
    how: &Apply,
) -> Result<Done, StoreError> {
    Ok(Done {
        inserts: insert(conn, &work.inserts, how.now).await?,
        starts: start(conn, &work.starts, how.now).await?,
        logs: log_append(conn, &work.logs, how.log_cap).await?,
        finishes: finish(conn, &work.finishes, how).await?,
        reads: read(conn, &work.reads).await?,
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

async fn insert(
    conn: &mut PgConnection,
    tasks: &[NewTask],
    now: DateTime<Utc>,
) -> Result<Vec<Result<(TaskRecord, bool), StoreError>>, StoreError> {
    if tasks.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<Value> = tasks.iter().map(insert_row).collect();
    let created: HashMap<Uuid, TaskRecord> = sqlx::query_as::<_, TaskRecord>(
        "INSERT INTO tasks (id, queue, labels, command, script, env, payload, priority,
                            timeout_s, queue_timeout_s, max_attempts, idempotency_key,
                            status, created_by, traceparent, created_at, updated_at, queued_at,
                            run_at, notify_url, secret_env)
         SELECT r.id, r.queue, r.labels, r.command, r.script, r.env, r.payload, r.priority,
                r.timeout_s, r.queue_timeout_s, r.max_attempts, r.idempotency_key,
                CASE WHEN r.run_at > $2 THEN 'scheduled' ELSE 'queued' END,
                r.created_by, r.traceparent, $2, $2,
                CASE WHEN r.run_at > $2 THEN NULL ELSE $2::timestamptz END,
                r.run_at, r.notify_url, r.secret_env
         FROM jsonb_to_recordset($1) AS r(
                id uuid, queue text, labels text[], command text[], script text, env jsonb,
                payload jsonb, priority int4, timeout_s int4, queue_timeout_s int4,
                max_attempts int4, idempotency_key text, created_by text, traceparent text,
                run_at timestamptz, notify_url text, secret_env jsonb)
         ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
         RETURNING *",
    )
    .bind(Json(rows))
    .bind(now)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|t| (t.id, t))
    .collect();
    // The rest repeated an idempotency key: their tasks were committed before ours (the
    // insert waited for them), or earlier in this very batch.
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

/// One task as `jsonb_to_recordset` reads it.
fn insert_row(t: &NewTask) -> Value {
    serde_json::json!({
        "id": t.id,
        "queue": t.queue,
        "labels": t.labels,
        "command": t.command,
        "script": t.script,
        "env": t.env,
        "payload": t.payload,
        "priority": t.priority,
        "timeout_s": t.timeout_s,
        "queue_timeout_s": t.queue_timeout_s,
        "max_attempts": t.max_attempts,
        "idempotency_key": t.idempotency_key,
        "created_by": t.created_by,
        "traceparent": t.traceparent,
        "run_at": t.run_at,
        "notify_url": t.notify_url,
        "secret_env": t.secret_env,
    })
}

async fn start(
    conn: &mut PgConnection,
    starts: &[StartRun],
    now: DateTime<Utc>,
) -> Result<Vec<Result<Started, StoreError>>, StoreError> {
    let mut answered = Vec::with_capacity(starts.len());
    for round in rounds(starts, |s| s.task) {
        let batch: Vec<&StartRun> = round.iter().map(|&i| &starts[i]).collect();
        // A row leased in Postgres (by a node of the previous version) starts under the
        // lease it recorded; a `queued` one under the claim's lease the caller checked.
        let changed: HashMap<Uuid, i32> = sqlx::query_as::<_, (Uuid, i32)>(
            "UPDATE tasks t
             SET status = 'running', lease_id = r.lease, runner_id = r.runner,
                 boot_id = COALESCE(r.boot, t.boot_id),
                 leased_at = CASE WHEN t.status = 'queued' THEN r.leased_at ELSE t.leased_at END,
                 started_at = $6, updated_at = $6, attempt = t.attempt + 1,
                 log_size = 0, log_truncated = false, log_incomplete = false
             FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::timestamptz[])
                  AS r(id, lease, runner, boot, leased_at)
             WHERE t.id = r.id
               AND (t.status = 'queued'
                    OR (t.status = 'leased' AND t.lease_id = r.lease AND t.runner_id = r.runner))
             RETURNING t.id, t.attempt",
        )
        .bind(batch.iter().map(|s| s.task).collect::<Vec<_>>())
        .bind(batch.iter().map(|s| s.lease_id).collect::<Vec<_>>())
        .bind(batch.iter().map(|s| s.runner_id).collect::<Vec<_>>())
        .bind(batch.iter().map(|s| s.boot_id).collect::<Vec<_>>())
        .bind(batch.iter().map(|s| s.leased_at).collect::<Vec<_>>())
        .bind(now)
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .collect();
        let refused: Vec<Uuid> = batch
            .iter()
            .filter(|s| !changed.contains_key(&s.task))
            .map(|s| s.task)
            .collect();
        let holders = holders_of(conn, &refused).await?;
        for (&i, s) in round.iter().zip(&batch) {
            let answer = match changed.get(&s.task) {
                Some(&attempt) => Ok(Started {
                    status: TaskStatus::Running,
                    attempt,
                }),
                None => refusal(holders.get(&s.task), s.runner_id, s.lease_id, |h| {
                    // The same start again (its answer was lost): it took effect.
                    h.status == TaskStatus::Running
                })
                .map(|h| Started {
                    status: h.status,
                    attempt: h.attempt,
                }),
            };
            answered.push((i, answer));
        }
    }
    Ok(in_order(starts.len(), answered))
}

/// Who holds a task now, for telling a refused report why.
#[derive(Debug, Clone, sqlx::FromRow)]
struct Holder {
    id: Uuid,
    #[sqlx(try_from = "String")]
    status: TaskStatus,
    runner_id: Option<Uuid>,
    lease_id: Option<Uuid>,
    attempt: i32,
    log_size: i64,
}

async fn holders_of(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, Holder>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(sqlx::query_as::<_, Holder>(
        "SELECT id, status, runner_id, lease_id, attempt, log_size FROM tasks WHERE id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|h| (h.id, h))
    .collect())
}

/// Why a runner's compare-and-set changed nothing: another runner's task (or none) is not
/// found — its existence is not leaked; a moved status or another lease of this runner's
/// is a conflict. `already_done` recognises a retried report whose first attempt took
/// effect, which is answered with the task as it stands.
fn refusal<'h>(
    holder: Option<&'h Holder>,
    runner_id: Uuid,
    lease_id: Uuid,
    already_done: impl Fn(&Holder) -> bool,
) -> Result<&'h Holder, StoreError> {
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

async fn log_append(
    conn: &mut PgConnection,
    writes: &[LogWrite],
    cap: i64,
) -> Result<Vec<Result<LogAppend, StoreError>>, StoreError> {
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids: Vec<Uuid> = writes.iter().map(|w| w.task).collect();
    ids.sort();
    ids.dedup();
    // Locked in id order, so two batches never wait on each other in a circle.
    let mut holders: HashMap<Uuid, Holder> = sqlx::query_as::<_, Holder>(
        "SELECT id, status, runner_id, lease_id, attempt, log_size FROM tasks
         WHERE id = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|h| (h.id, h))
    .collect();
    let mut chunks: Vec<(Uuid, i32, i64, &[u8])> = Vec::new();
    let mut truncated: HashSet<Uuid> = HashSet::new();
    let mut answers = Vec::with_capacity(writes.len());
    for w in writes {
        answers.push(
            accept_chunk(holders.get_mut(&w.task), w, cap).map(|(append, stored)| {
                if let Some((attempt, at, bytes)) = stored {
                    chunks.push((w.task, attempt, at, bytes));
                }
                if append.truncated {
                    truncated.insert(w.task);
                }
                append.ack
            }),
        );
    }
    if !chunks.is_empty() {
        sqlx::query(
            r#"INSERT INTO task_logs (task_id, attempt, "offset", data)
               SELECT * FROM unnest($1::uuid[], $2::int4[], $3::int8[], $4::bytea[])"#,
        )
        .bind(chunks.iter().map(|c| c.0).collect::<Vec<_>>())
        .bind(chunks.iter().map(|c| c.1).collect::<Vec<_>>())
        .bind(chunks.iter().map(|c| c.2).collect::<Vec<_>>())
        .bind(chunks.iter().map(|c| c.3).collect::<Vec<_>>())
        .execute(&mut *conn)
        .await?;
    }
    let grown: Vec<(Uuid, i64)> = ids
        .iter()
        .filter_map(|id| holders.get(id))
        .map(|h| (h.id, h.log_size))
        .collect();
    if !grown.is_empty() {
        // Only the log columns change: a HOT update, no index touched.
        sqlx::query(
            "UPDATE tasks t SET log_size = r.size, log_truncated = t.log_truncated OR r.truncated
             FROM unnest($1::uuid[], $2::int8[], $3::bool[]) AS r(id, size, truncated)
             WHERE t.id = r.id AND t.log_size <> r.size",
        )
        .bind(grown.iter().map(|g| g.0).collect::<Vec<_>>())
        .bind(grown.iter().map(|g| g.1).collect::<Vec<_>>())
        .bind(
            grown
                .iter()
                .map(|g| truncated.contains(&g.0))
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(answers)
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
) -> Result<(Accepted, Option<(i32, i64, &'w [u8])>), StoreError> {
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
    let chunk = (!stored.is_empty()).then_some((holder.attempt, held, stored));
    Ok((
        Accepted {
            ack,
            truncated: stored.len() < fresh.len(),
        },
        chunk,
    ))
}

/// The retry rule of `baton_core::retry::after_run`, as SQL over the row before the
/// update (`t`) and the report (`r`): a `running` task whose run failed or timed out
/// retries while attempts remain. `tests/store_transitions.rs` checks it against
/// `after_run` case by case.
const RETRIES: &str = "(t.status = 'running' AND r.outcome IN ('failed', 'timed_out')
                        AND t.attempt < t.max_attempts)";

async fn finish(
    conn: &mut PgConnection,
    finishes: &[FinishRun],
    how: &Apply,
) -> Result<Vec<Result<TaskRecord, StoreError>>, StoreError> {
    if finishes.is_empty() {
        return Ok(Vec::new());
    }
    let backoff = &how.policy.backoff;
    // The delay of a retry is looked up by attempt (the doubling stays in `Backoff`) and
    // scaled by each report's own jitter.
    let schedule: Vec<f64> = backoff.schedule().iter().map(|d| d.as_secs_f64()).collect();
    let sql = format!(
        "UPDATE tasks t
         SET status = CASE WHEN {RETRIES} THEN 'scheduled' ELSE r.outcome END,
             run_at = CASE WHEN {RETRIES}
                 THEN $10 + make_interval(secs => ($11::float8[])
                          [LEAST(GREATEST(t.attempt, 1), cardinality($11::float8[]))] * r.jitter)
                 ELSE t.run_at END,
             finished_at = CASE WHEN {RETRIES} THEN NULL ELSE $10 END,
             updated_at = $10, exit_code = r.exit_code, error = r.error, outputs = r.outputs,
             log_incomplete = (r.log_size IS NOT NULL AND r.log_size > t.log_size)
         FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::int4[], $6::text[],
                     $7::jsonb[], $8::int8[], $9::float8[])
              AS r(id, lease, runner, outcome, exit_code, error, outputs, log_size, jitter)
         WHERE t.id = r.id AND t.lease_id = r.lease
           AND (r.runner IS NULL OR t.runner_id = r.runner)
           AND t.status IN ('running', 'cancelling')
         RETURNING t.*"
    );
    let mut answered = Vec::with_capacity(finishes.len());
    for round in rounds(finishes, |f| f.task) {
        let batch: Vec<&FinishRun> = round.iter().map(|&i| &finishes[i]).collect();
        let ended: HashMap<Uuid, TaskRecord> =
            sqlx::query_as::<_, TaskRecord>(sqlx::AssertSqlSafe(sql.clone()))
                .bind(batch.iter().map(|f| f.task).collect::<Vec<_>>())
                .bind(batch.iter().map(|f| f.fence.lease_id).collect::<Vec<_>>())
                .bind(batch.iter().map(|f| f.fence.runner_id).collect::<Vec<_>>())
                .bind(
                    batch
                        .iter()
                        .map(|f| f.end.outcome.as_str())
                        .collect::<Vec<_>>(),
                )
                .bind(batch.iter().map(|f| f.end.exit_code).collect::<Vec<_>>())
                .bind(
                    batch
                        .iter()
                        .map(|f| f.end.error.as_deref())
                        .collect::<Vec<_>>(),
                )
                .bind(
                    batch
                        .iter()
                        .map(|f| f.end.outputs.clone().map(Json))
                        .collect::<Vec<_>>(),
                )
                .bind(batch.iter().map(|f| f.end.log_size).collect::<Vec<_>>())
                .bind(
                    batch
                        .iter()
                        .map(|f| backoff.jitter_factor(f.jitter_unit))
                        .collect::<Vec<_>>(),
                )
                .bind(how.now)
                .bind(&schedule)
                .fetch_all(&mut *conn)
                .await?
                .into_iter()
                .map(|t| (t.id, t))
                .collect();
        let terminal: Vec<&TaskRecord> =
            ended.values().filter(|t| t.status.is_terminal()).collect();
        outbox_for_all(conn, &terminal, how.policy.webhook_body, how.now).await?;
        let refused: Vec<Uuid> = batch
            .iter()
            .filter(|f| !ended.contains_key(&f.task))
            .map(|f| f.task)
            .collect();
        let as_they_stand = rows_of(conn, &refused).await?;
        for (&i, f) in round.iter().zip(&batch) {
            let answer = match ended.get(&f.task) {
                Some(row) => Ok(row.clone()),
                None => finish_refused(as_they_stand.get(&f.task), f),
            };
            answered.push((i, answer));
        }
    }
    Ok(in_order(finishes.len(), answered))
}

async fn rows_of(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, TaskRecord>, StoreError> {
    Ok(read(conn, ids)
        .await?
        .into_iter()
        .map(|t| (t.id, t))
        .collect())
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

async fn read(conn: &mut PgConnection, ids: &[Uuid]) -> Result<Vec<TaskRecord>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(
        sqlx::query_as::<_, TaskRecord>("SELECT * FROM tasks WHERE id = ANY($1)")
            .bind(ids)
            .fetch_all(&mut *conn)
            .await?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_hold_each_task_once() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let items = [a, b, a, a, b];
        assert_eq!(
            rounds(&items, |&i| i),
            vec![vec![0, 1], vec![2, 4], vec![3]]
        );
        assert_eq!(
            in_order(3, vec![(2, 'c'), (0, 'a'), (1, 'b')]),
            vec!['a', 'b', 'c']
        );
    }

    fn holder(status: TaskStatus, size: i64) -> Holder {
        Holder {
            id: Uuid::nil(),
            status,
            runner_id: Some(Uuid::from_u128(1)),
            lease_id: Some(Uuid::from_u128(2)),
            attempt: 1,
            log_size: size,
        }
    }

    fn chunk(offset: i64, data: &[u8]) -> LogWrite {
        LogWrite {
            task: Uuid::nil(),
            runner_id: Uuid::from_u128(1),
            lease_id: Uuid::from_u128(2),
            offset,
            data: data.to_vec(),
        }
    }

    #[test]
    fn chunks_are_taken_once_and_in_order() {
        let mut h = holder(TaskStatus::Running, 4);
        let overlap = chunk(2, b"cdef");
        let (ok, stored) = accept_chunk(Some(&mut h), &overlap, 100).unwrap();
        assert_eq!(ok.ack.acked, 6, "an overlap stores only its new tail");
        assert_eq!(stored, Some((1, 4, &b"ef"[..])));
        let resend = chunk(0, b"abcdef");
        let (again, stored) = accept_chunk(Some(&mut h), &resend, 100).unwrap();
        assert_eq!(
            (again.ack.acked, stored),
            (6, None),
            "a resend stores nothing"
        );
        assert!(matches!(
            accept_chunk(Some(&mut h), &chunk(9, b"x"), 100),
            Err(StoreError::LogOffsetPastEnd {
                requested: 9,
                held: 6
            })
        ));
        let past_cap = chunk(6, b"ghij");
        let (capped, stored) = accept_chunk(Some(&mut h), &past_cap, 8).unwrap();
        assert!(capped.truncated);
        assert_eq!((capped.ack.acked, stored), (10, Some((1, 6, &b"gh"[..]))));
    }

    #[test]
    fn chunks_of_a_stale_lease_or_another_runner_are_refused() {
        let mut h = holder(TaskStatus::Running, 0);
        let mut stale = chunk(0, b"x");
        stale.lease_id = Uuid::from_u128(9);
        assert!(matches!(
            accept_chunk(Some(&mut h), &stale, 100),
            Err(StoreError::Conflict { .. })
        ));
        let mut other = chunk(0, b"x");
        other.runner_id = Uuid::from_u128(9);
        assert!(matches!(
            accept_chunk(Some(&mut h), &other, 100),
            Err(StoreError::NotFound)
        ));
        let mut done = holder(TaskStatus::Succeeded, 0);
        assert!(matches!(
            accept_chunk(Some(&mut done), &chunk(0, b"x"), 100),
            Err(StoreError::Conflict { .. })
        ));
        assert_eq!(h.log_size, 0, "nothing refused moves the log on");
    }
}
