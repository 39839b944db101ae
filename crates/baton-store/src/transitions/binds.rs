//! The parameters of `sql.rs`'s statements for a batch, bound in the order the SQL
//! numbers them, and the batch's rows in the one order every writer locks them.

use super::{Apply, FinishRun, StartRun, sql};
use crate::tasks::NewTask;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::types::Json;
use uuid::Uuid;

/// `batch` in task id order. Every statement that updates several rows takes their locks
/// in this one order, so two writers of the group commit whose batches share tasks wait
/// for each other instead of deadlocking.
fn by_task<'a, T>(batch: &[&'a T], task: impl Fn(&T) -> Uuid) -> Vec<&'a T> {
    let mut sorted = batch.to_vec();
    sorted.sort_by_key(|t| task(t));
    sorted
}

/// The binds of `sql::finish` for `batch`, in order.
pub(super) fn bind_finishes<'q, O>(
    query: QueryAs<'q, sqlx::Postgres, O, PgArguments>,
    batch: &[&FinishRun],
    how: &Apply,
) -> QueryAs<'q, sqlx::Postgres, O, PgArguments> {
    let batch = by_task(batch, |f| f.task);
    let backoff = &how.policy.backoff;
    // The delay of a retry is looked up by attempt (the doubling stays in `Backoff`) and
    // scaled by each report's own jitter.
    let schedule: Vec<f64> = backoff.schedule().iter().map(|d| d.as_secs_f64()).collect();
    query
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
                .map(|f| f.end.error.clone())
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
        .bind(batch.iter().map(|f| f.jitter_unit).collect::<Vec<_>>())
        .bind(how.now)
        .bind(schedule)
        .bind(
            sql::FINISH_FROM
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>(),
        )
}

/// The binds of `sql::start` for `batch`, in order.
pub(super) fn bind_starts<'q, O>(
    query: QueryAs<'q, sqlx::Postgres, O, PgArguments>,
    batch: &[&StartRun],
    now: DateTime<Utc>,
) -> QueryAs<'q, sqlx::Postgres, O, PgArguments> {
    let batch = by_task(batch, |s| s.task);
    let [queued, leased] = sql::START_FROM.map(TaskStatus::as_str);
    query
        .bind(batch.iter().map(|s| s.task).collect::<Vec<_>>())
        .bind(batch.iter().map(|s| s.lease_id).collect::<Vec<_>>())
        .bind(batch.iter().map(|s| s.runner_id).collect::<Vec<_>>())
        .bind(batch.iter().map(|s| s.boot_id).collect::<Vec<_>>())
        .bind(batch.iter().map(|s| s.leased_at).collect::<Vec<_>>())
        .bind(now)
        .bind(queued)
        .bind(leased)
}

/// The tasks as the insert's `jsonb_to_recordset` reads them: `NewTask` serializes to
/// its columns by name, straight from the structs (building a `serde_json::Value` per task
/// first was a tenth of a node's CPU in a bulk submit).
pub(super) fn insert_rows(tasks: &[NewTask]) -> Json<&[NewTask]> {
    Json(tasks)
}
