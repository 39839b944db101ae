//! How runs end and tasks move on: a runner's report, the reconciler's verdicts, retries,
//! promotion of due `scheduled` tasks, expiry of queued ones.
//!
//! Every transition is a compare-and-set on the status and, for anything touching a run,
//! on its lease id — the fencing token that keeps a stale runner or a node that lost its
//! claims from changing anything. A terminal transition writes its side effects (the
//! completion webhook) to the outbox in the same transaction, so they are recorded exactly
//! once even if the node dies right after the commit, and delivered at least once
//! (design.md §4.8).

use crate::Store;
use crate::error::StoreError;
use crate::tasks::TaskRecord;
use crate::transitions::{Apply, FinishRun, Work};
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use baton_core::backoff::Backoff;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// How a run ended, as its runner reported it or as the server decided.
#[derive(Debug, Clone)]
pub struct RunEnd {
    /// The status the run ended with.
    pub outcome: TaskStatus,
    /// The process's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// Why it failed, in words.
    pub error: Option<String>,
    /// What the task returned, as JSON.
    pub outputs: Option<Value>,
    /// Bytes of output the runner produced; a stored log shorter than this is marked
    /// incomplete.
    pub log_size: Option<i64>,
}

impl RunEnd {
    /// A server-side end: no exit code, a reason.
    pub fn by_server(outcome: TaskStatus, reason: &str) -> RunEnd {
        RunEnd {
            outcome,
            exit_code: None,
            error: Some(reason.to_string()),
            outputs: None,
            log_size: None,
        }
    }
}

/// Who ends the run: the lease it must hold, and for a runner's own report, the runner.
#[derive(Debug, Clone, Copy)]
pub struct Fence {
    /// The lease the run must still hold.
    pub lease_id: LeaseId,
    /// The reporting runner; `None` for the server's own end.
    pub runner_id: Option<RunnerId>,
}

/// What retries cost: the backoff, and a random draw for its jitter (for a single
/// report; a batch carries one per report).
#[derive(Debug, Clone, Copy)]
pub struct FinishPolicy {
    /// The waits between retries.
    pub backoff: Backoff,
    /// A random draw in `[0, 1)` for the jitter.
    pub jitter_unit: f64,
}

impl Store {
    /// Ends a `running` or `cancelling` run: `scheduled` for a retry when attempts remain
    /// (see `baton_core::after_run`), otherwise the terminal status, with its outbox rows.
    /// A runner repeating a report that already took effect gets the task as it stands.
    /// (A batch of one: the group committer writes many in one statement.)
    pub async fn task_finish_run(
        &self,
        id: Uuid,
        fence: Fence,
        end: &RunEnd,
        policy: &FinishPolicy,
        now: DateTime<Utc>,
    ) -> Result<TaskRecord, StoreError> {
        let work = Work {
            finishes: vec![FinishRun {
                task: id,
                fence,
                end: end.clone(),
                jitter_unit: policy.jitter_unit,
            }],
            ..Work::default()
        };
        let how = Apply {
            now,
            log_cap: 0,
            policy: *policy,
        };
        self.write_now(&work, &how)
            .await?
            .finishes
            .pop()
            .expect("one answer")
    }

    /// `leased -> queued` under the given lease: the runner never started it, so it is
    /// safe to hand out again. It keeps its place in line (its original `queued_at`).
    /// Here and in the promotions the row keeps its `lease_id`: the lease that held it
    /// last may not start it again (`transitions/sql.rs` `start`).
    pub async fn task_requeue(
        &self,
        id: Uuid,
        lease_id: LeaseId,
        now: DateTime<Utc>,
    ) -> Result<Option<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(
            "UPDATE tasks
             SET status = 'queued', runner_id = NULL, boot_id = NULL,
                 leased_at = NULL, updated_at = $3
             WHERE id = $1 AND status = 'leased' AND lease_id = $2
             RETURNING *",
        )
        .bind(id)
        .bind(lease_id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Voids leases Redis handed out that Postgres never saw start: each `(task, lease)`
    /// whose row is still `queued` gets that lease added to its `voided_leases`, which the
    /// start compare-and-set refuses for good (`transitions/sql.rs` `start`), as it refuses
    /// the lease of the last run (`lease_id`, left as it is). Only then may the task go
    /// back to its queue: a start held up past the dispatch grace, or one whose commit
    /// answered with an error after it committed, either landed first (the row is no
    /// longer queued, and the task stays with its runner) or can never land. Returns the
    /// tasks voided, which are safe to requeue.
    pub async fn tasks_void_leases(
        &self,
        leases: &[(Uuid, LeaseId)],
        now: DateTime<Utc>,
    ) -> Result<Vec<Uuid>, StoreError> {
        let mut leases = leases.to_vec();
        // In id order, like the other multi-row updates; should a plan lock them otherwise
        // and deadlock, the pass fails and the next one voids them.
        leases.sort();
        let (ids, lease_ids): (Vec<Uuid>, Vec<LeaseId>) = leases.into_iter().unzip();
        Ok(sqlx::query_scalar(
            "UPDATE tasks t SET voided_leases = array_append(t.voided_leases, r.lease),
                                updated_at = $3
             FROM unnest($1::uuid[], $2::uuid[]) AS r(id, lease)
             WHERE t.id = r.id AND t.status = $4
             RETURNING t.id",
        )
        .bind(&ids)
        .bind(&lease_ids)
        .bind(now)
        .bind(TaskStatus::Queued.as_str())
        .fetch_all(&self.pool)
        .await?)
    }

    /// `scheduled -> queued` for those of `ids` that are due (design.md §4.5: Postgres
    /// first, then the Redis add).
    pub async fn tasks_promote(
        &self,
        ids: &[Uuid],
        now: DateTime<Utc>,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(
            "UPDATE tasks SET status = 'queued', queued_at = $2, updated_at = $2,
                              runner_id = NULL, boot_id = NULL
             WHERE id = ANY($1) AND status = 'scheduled' AND run_at <= $2
             RETURNING *",
        )
        .bind(ids)
        .bind(now)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Promotes up to `limit` `scheduled` tasks due before `due_before`, whatever Redis
    /// knows of them: the repair pass's net under the fast path.
    pub async fn tasks_promote_overdue(
        &self,
        due_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(
            "UPDATE tasks SET status = 'queued', queued_at = $2, updated_at = $2,
                              runner_id = NULL, boot_id = NULL
             WHERE id IN (SELECT id FROM tasks
                          WHERE status = 'scheduled' AND run_at <= $1
                          ORDER BY run_at LIMIT $3 FOR UPDATE SKIP LOCKED)
             RETURNING *",
        )
        .bind(due_before)
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// `queued -> expired` for up to `limit` tasks nobody took within their
    /// `queue_timeout_s`, with their outbox rows. A paused queue's tasks do not expire,
    /// and a resume restarts the clock: a task expires only once it has waited its
    /// `queue_timeout_s` both since it was queued and since its queue was last resumed
    /// (docs/flow-control.md).
    pub async fn tasks_expire_due(
        &self,
        now: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let expired = sqlx::query_as::<_, TaskRecord>(
            "UPDATE tasks
             SET status = 'expired', finished_at = $1, updated_at = $1,
                 error = 'no runner took it within its queue timeout'
             WHERE id IN (SELECT id FROM tasks
                          WHERE status = 'queued'
                            AND queued_at + make_interval(secs => queue_timeout_s) < $1
                            AND NOT EXISTS (
                                SELECT 1 FROM queues q
                                WHERE q.name = tasks.queue
                                  AND (q.paused OR q.resumed_at
                                       + make_interval(secs => tasks.queue_timeout_s) >= $1))
                          LIMIT $2 FOR UPDATE SKIP LOCKED)
             RETURNING *",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
        outbox_for_all(&mut tx, &expired.iter().collect::<Vec<_>>(), now).await?;
        tx.commit().await?;
        expired
            .iter()
            .filter_map(EndedRun::of)
            .for_each(|run| count_ended(&run));
        Ok(expired)
    }
}

/// What a committed terminal write counts: its outcome, its queue, and how long the run it
/// ended took (none for a task that never started).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EndedRun {
    status: TaskStatus,
    queue: String,
    ran_for: Option<f64>,
}

impl EndedRun {
    /// The count of `task` as written, if the write ended it without ending a run (a
    /// cancel or an expiry of a task that waited: its `started_at` is an earlier
    /// attempt's, if any, and says nothing of this end).
    pub(crate) fn of(task: &TaskRecord) -> Option<EndedRun> {
        task.status.is_terminal().then(|| EndedRun {
            status: task.status,
            queue: task.queue.clone(),
            ran_for: None,
        })
    }

    /// The count of `task` as a run's end wrote it: the run took from its start (this
    /// attempt's, written by its start) to its end.
    pub(crate) fn of_run(task: &TaskRecord) -> Option<EndedRun> {
        let ran_for = match (task.started_at, task.finished_at) {
            (Some(started), Some(finished)) => {
                Some((finished - started).num_microseconds().unwrap_or(0).max(0) as f64 / 1e6)
            }
            _ => None,
        };
        Self::of(task).map(|ended| EndedRun { ran_for, ..ended })
    }
}

/// The most queue names the completion series carry as their `queue` label, per
/// process; the rest count under `other`. Queue names are the submitters' to choose, and
/// the recorder keeps a series for every label value it ever saw: without a bound, one
/// submitter using ever new names would grow `/metrics` and the node's memory without end.
pub(crate) const QUEUE_LABELS_MAX: usize = 100;

/// The `queue` label of `queue`: itself while fewer than [`QUEUE_LABELS_MAX`] names were
/// seen (or it was one of them), else `other`.
fn queue_label(queue: &str) -> String {
    static SEEN: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut seen = SEEN.lock().expect("queue labels lock");
    if seen.contains(queue) || (seen.len() < QUEUE_LABELS_MAX && seen.insert(queue.to_string())) {
        queue.to_string()
    } else {
        "other".to_string()
    }
}

/// Counts a committed terminal transition (`baton_tasks_completed_total{outcome,queue}`)
/// and the time its run took (`baton_task_run_seconds{outcome,queue}`). The store is the
/// one place that knows a terminal write happened, and happened once: a repeated report,
/// answered with the task as it stands, writes nothing and counts nothing. The console's
/// trends count it too (`baton_core::trend_tally`).
pub(crate) fn count_ended(run: &EndedRun) {
    baton_core::trend_tally::ended(&run.queue, run.status);
    let (outcome, queue) = (run.status.as_str(), queue_label(&run.queue));
    metrics::counter!(TASKS_COMPLETED, "outcome" => outcome, "queue" => queue.clone()).increment(1);
    if let Some(seconds) = run.ran_for {
        metrics::histogram!(TASK_RUN_SECONDS, "outcome" => outcome, "queue" => queue)
            .record(seconds);
    }
}

/// Counter of tasks that reached a terminal status, by `outcome` (the status) and `queue`.
pub const TASKS_COMPLETED: &str = "baton_tasks_completed_total";

/// Histogram of how long the runs that ended a task took, start to end, by `outcome` and
/// `queue`.
pub const TASK_RUN_SECONDS: &str = "baton_task_run_seconds";

/// The side effects of terminal transitions, in their transaction: one statement for the
/// rows of those that notify a webhook. The idempotency key (task and final status) is
/// what the receiver deduplicates on; the body is built from the final row when it is
/// delivered.
pub(crate) async fn outbox_for_all(
    conn: &mut PgConnection,
    tasks: &[&TaskRecord],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let notify: Vec<(&TaskRecord, &str)> = tasks
        .iter()
        .filter(|t| t.status.is_terminal())
        .filter_map(|t| Some((*t, t.notify_url.as_deref()?)))
        .collect();
    if notify.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO outbox (task_id, kind, target, idempotency_key, created_at, next_attempt_at)
         SELECT r.task_id, 'webhook', r.target, r.task_id || ':' || r.status, $4, $4
         FROM unnest($1::uuid[], $2::text[], $3::text[]) AS r(task_id, target, status)
         ON CONFLICT (idempotency_key) DO NOTHING",
    )
    .bind(notify.iter().map(|(t, _)| t.id).collect::<Vec<_>>())
    .bind(notify.iter().map(|(_, url)| *url).collect::<Vec<_>>())
    .bind(
        notify
            .iter()
            .map(|(t, _)| t.status.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod queue_label_tests {
    use super::{QUEUE_LABELS_MAX, queue_label};

    #[test]
    fn queue_labels_are_bounded_and_a_name_keeps_its_own() {
        let first = "labels-test-first";
        assert_eq!(queue_label(first), first);
        let overflowed = (0..=QUEUE_LABELS_MAX)
            .map(|i| format!("labels-test-{i}"))
            .find(|name| queue_label(name) == "other");
        assert!(
            overflowed.is_some(),
            "past {QUEUE_LABELS_MAX} names, `other`"
        );
        assert_eq!(
            queue_label(first),
            first,
            "a name seen before keeps its label"
        );
    }
}
