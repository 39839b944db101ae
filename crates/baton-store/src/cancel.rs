//! Cancellation. A task that has not started (waiting, scheduled, queued, leased) is cancelled at
//! once; a running one goes `cancelling` and its runner stops it and reports. Either way
//! one compare-and-set under a row lock, so a cancel racing a lease or a report ends in
//! exactly one of them.

use crate::Store;
use crate::error::StoreError;
use crate::runs::outbox_for_all;
use crate::tasks::TaskRecord;
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// The error of a task cancelled before its run (queued, scheduled, or leased and not
/// started): its row's times and exit code are then an earlier run's, if any.
pub const CANCELLED_BEFORE_IT_RAN: &str = "cancelled before it ran";

/// What a cancel did, and what it was cancelled from (for the Redis follow-up).
#[derive(Debug, Clone)]
pub struct Cancelled {
    /// The task as the cancel left it.
    pub task: TaskRecord,
    /// The status it had before.
    pub was: TaskStatus,
}

impl Store {
    /// Cancels `id`. `owner` limits it to tasks created by that token (a `submit`-scoped
    /// caller); another's task is not found. A finished task is a conflict. `lease` is
    /// the (runner, lease) of a lease held in Redis only, if there is one: a `queued` task
    /// cancelled under it records who held it, so that runner's start is told its lease
    /// was cancelled.
    pub async fn task_cancel(
        &self,
        id: Uuid,
        owner: Option<&str>,
        lease: Option<(RunnerId, LeaseId)>,
        now: DateTime<Utc>,
    ) -> Result<Cancelled, StoreError> {
        let mut tx = self.pool.begin().await?;
        let cancelled = cancel_in(&mut tx, id, owner, lease, now).await?;
        tx.commit().await?;
        if cancelled.task.status != cancelled.was
            && let Some(run) = crate::runs::EndedRun::of(&cancelled.task)
        {
            crate::runs::count_ended(&run);
        }
        Ok(cancelled)
    }
}

/// The cancel of [`Store::task_cancel`], in the caller's transaction: a schedule's fire
/// cancels the previous run in the same one as it makes the next (overlap `cancel`), so a
/// node killed between the two cannot leave both running. Counted by the caller once it
/// commits.
pub(crate) async fn cancel_in(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
    owner: Option<&str>,
    lease: Option<(RunnerId, LeaseId)>,
    now: DateTime<Utc>,
) -> Result<Cancelled, StoreError> {
    let task = sqlx::query_as::<_, TaskRecord>("SELECT * FROM tasks WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
        .filter(|t| owner.is_none_or(|o| t.created_by == o))
        .ok_or(StoreError::NotFound)?;
    let was = task.status;
    let to = match was {
        TaskStatus::Waiting | TaskStatus::Scheduled | TaskStatus::Queued | TaskStatus::Leased => {
            TaskStatus::Cancelled
        }
        TaskStatus::Running | TaskStatus::Cancelling => TaskStatus::Cancelling,
        terminal => {
            return Err(StoreError::Conflict {
                status: terminal,
                reason: "the task has already finished",
            });
        }
    };
    let task = if to == was {
        task
    } else {
        let done = sqlx::query_as::<_, TaskRecord>(
            "UPDATE tasks
             SET status = $2, updated_at = $3,
                 finished_at = CASE WHEN $2 = 'cancelled' THEN $3 ELSE finished_at END,
                 error = CASE WHEN $2 = 'cancelled' THEN $6 ELSE error END,
                 runner_id = CASE WHEN status = 'queued' THEN $4 ELSE runner_id END,
                 lease_id = CASE WHEN status = 'queued' THEN $5 ELSE lease_id END
             WHERE id = $1
             RETURNING *",
        )
        .bind(id)
        .bind(to.as_str())
        .bind(now)
        .bind(lease.map(|(runner, _)| runner))
        .bind(lease.map(|(_, lease)| lease))
        .bind(CANCELLED_BEFORE_IT_RAN)
        .fetch_one(&mut *conn)
        .await?;
        outbox_for_all(conn, &[&done], now).await?;
        done
    };
    Ok(Cancelled { task, was })
}
