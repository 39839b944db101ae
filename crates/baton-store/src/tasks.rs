//! The task table: submit, lease, start, complete, read.

use crate::Store;
use crate::error::StoreError;
use crate::transitions::{Apply, Done, StartRun, Started, Work};
use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use baton_core::retry_policy::RetryPolicy;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use std::collections::BTreeMap;
use std::time::Duration;
use uuid::Uuid;

/// How far a task's id (a UUIDv7, its time the node's clock as it admitted the task) may
/// lie from its `created_at` (the same node's clock a moment later, as the cluster keeps
/// it): a date filter reads ids within this of its dates, through the primary key, and
/// keeps those created within them exactly.
const CREATED_ID_SLACK: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// The least UUIDv7 of the millisecond `t`: every id made at or after it is at least this.
fn id_bound(t: DateTime<Utc>) -> Uuid {
    let ms = u128::try_from(t.timestamp_millis()).unwrap_or(0);
    Uuid::from_u128(ms << 80)
}

/// The conditions of a listing, over `$1`..`$13` as [`bind_filter`] binds them; `$3`
/// (the cursor) is compared by `$cursor_cmp`: below it newest first, above it oldest
/// first.
macro_rules! filter_conditions {
    ($cursor_cmp:literal) => {
        concat!(
            r"($1::text IS NULL OR status = $1)
               AND ($2::text IS NULL OR queue = $2)
               AND ($3::uuid IS NULL OR id ",
            $cursor_cmp,
            r" $3)
               AND ($5::text IS NULL OR created_by = $5)
               AND ($6::uuid IS NULL OR schedule_id = $6)
               AND ($7::timestamptz IS NULL OR created_at >= $7)
               AND ($8::timestamptz IS NULL OR created_at < $8)
               AND ($12::uuid IS NULL OR id >= $12)
               AND ($13::uuid IS NULL OR id < $13)
               AND ($9::text IS NULL OR $9 = ANY(labels))
               AND ($10::text IS NULL
                    OR left(array_to_string(command, ' '), $11) ILIKE $10 ESCAPE '\'
                    OR left(script, $11) ILIKE $10 ESCAPE '\')"
        )
    };
}

/// Binds `$1`..`$13` of [`filter_conditions`].
macro_rules! bind_filter {
    ($query:expr, $filter:expr, $label:expr, $text:expr) => {
        $query
            .bind($filter.status.map(TaskStatus::as_str))
            .bind($filter.queue.as_deref())
            .bind($filter.before)
            .bind($filter.limit)
            .bind($filter.created_by.as_deref())
            .bind($filter.schedule_id)
            .bind($filter.created_after)
            .bind($filter.created_before)
            .bind($label)
            .bind($text.map(contains_pattern))
            .bind(SEARCH_PREFIX_CHARS)
            .bind(
                $filter
                    .created_after
                    .map(|t| id_bound(t - CREATED_ID_SLACK)),
            )
            .bind(
                $filter
                    .created_before
                    .map(|t| id_bound(t + CREATED_ID_SLACK)),
            )
    };
}

/// A validated task about to be inserted. Serialized, it is a row as the insert's
/// `jsonb_to_recordset` reads it (`transitions/sql.rs`): each field's name is its column's.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct NewTask {
    /// Its id (UUIDv7: ids order by submit time).
    pub id: Uuid,
    /// Its queue.
    pub queue: String,
    /// The labels a runner must have to take it.
    pub labels: Vec<String>,
    /// The command to run, as argv (or `script`).
    pub command: Option<Vec<String>>,
    /// The script to run (or `command`).
    pub script: Option<String>,
    /// Its environment.
    pub env: BTreeMap<String, String>,
    /// Its secret environment, sealed.
    pub secret_env: BTreeMap<String, String>,
    /// Input for the task, as JSON.
    pub payload: Option<Value>,
    /// Higher runs first.
    pub priority: i32,
    /// How long a run may take, in seconds.
    pub timeout_s: i32,
    /// How long it may wait for a runner, in seconds.
    pub queue_timeout_s: i32,
    /// How many attempts it may have.
    pub max_attempts: i32,
    /// Delayed start: the task waits as `scheduled` until then.
    pub run_at: Option<DateTime<Utc>>,
    /// Its idempotency key, scoped to its owner: a repeat returns the first task.
    pub idempotency_key: Option<String>,
    /// Where its completion webhook goes.
    pub notify_url: Option<String>,
    /// The token that submitted it.
    pub created_by: String,
    /// The submit's trace context.
    pub traceparent: Option<String>,
    /// The schedule and tick that made it, if one did.
    pub schedule_id: Option<Uuid>,
    /// The tick of `schedule_id` that made it.
    pub scheduled_for: Option<DateTime<Utc>>,
    /// Re-runs and retry policies (issue 13): the task this one re-runs, and the task's
    /// own retry policy, resolved (`baton_core::retry_policy`).
    pub retry_of: Option<Uuid>,
    /// Its own retry policy, resolved.
    pub retry_policy: Option<RetryPolicy>,
    /// Flow control: the concurrency group, both or neither (docs/flow-control.md).
    pub concurrency_key: Option<String>,
    /// How many of its concurrency group may be dispatched at once.
    pub concurrency_limit: Option<i32>,
    /// Pipelines (docs/pipelines.md): the pipeline it is a job of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline_id: Option<Uuid>,
    /// Its job's name in the pipeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// When it is released (`ReleaseRule::as_str`), for a task with needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release_when: Option<String>,
    /// How many tasks it needs: above 0, it is inserted `waiting`.
    #[serde(skip_serializing_if = "is_zero")]
    pub needs_pending: i32,
    /// Whether a task inserted with it needs it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub has_dependents: bool,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// A row of the task table.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TaskRecord {
    /// Its id (UUIDv7).
    pub id: Uuid,
    /// Its queue.
    pub queue: String,
    /// The labels a runner must have to take it.
    pub labels: Vec<String>,
    /// The command to run, as argv (or `script`).
    pub command: Option<Vec<String>>,
    /// The script to run (or `command`).
    pub script: Option<String>,
    /// Its environment.
    pub env: Json<BTreeMap<String, String>>,
    /// Its secret environment, sealed (emptied when it ends).
    pub secret_env: Json<BTreeMap<String, String>>,
    /// Input for the task, as JSON.
    pub payload: Option<Json<Value>>,
    /// Higher runs first.
    pub priority: i32,
    /// How long a run may take, in seconds.
    pub timeout_s: i32,
    /// How long it may wait for a runner, in seconds.
    pub queue_timeout_s: i32,
    /// How many attempts it may have.
    pub max_attempts: i32,
    /// When it is due (a future submit, or a retry's backoff).
    pub run_at: Option<DateTime<Utc>>,
    /// Its idempotency key, scoped to its owner.
    pub idempotency_key: Option<String>,
    /// Where it is in the status machine.
    #[sqlx(try_from = "String")]
    pub status: TaskStatus,
    /// The attempt running or last run (1-based; 0 before the first start).
    pub attempt: i32,
    /// The runner that holds or last held it.
    pub runner_id: Option<RunnerId>,
    /// The lease of its current or last run: the fencing token.
    pub lease_id: Option<LeaseId>,
    /// The runner boot its run went to.
    pub boot_id: Option<Uuid>,
    /// Where its completion webhook goes.
    pub notify_url: Option<String>,
    /// The token that submitted it.
    pub created_by: String,
    /// The submit's trace context.
    pub traceparent: Option<String>,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When its row last changed.
    pub updated_at: DateTime<Utc>,
    /// When it was last queued: its place in line and its queue timeout count from here.
    pub queued_at: Option<DateTime<Utc>>,
    /// When its current lease was made.
    pub leased_at: Option<DateTime<Utc>>,
    /// When its current or last run started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// The last run's exit code.
    pub exit_code: Option<i32>,
    /// Why the last run failed, or why the server ended it.
    pub error: Option<String>,
    /// What the last run returned, as JSON.
    pub outputs: Option<Json<Value>>,
    /// Bytes of output received for the current attempt.
    pub log_size: i64,
    /// Whether output past the log cap was dropped.
    pub log_truncated: bool,
    /// Whether the runner reported more output than arrived.
    pub log_incomplete: bool,
    /// The schedule that made it.
    pub schedule_id: Option<Uuid>,
    /// The tick of `schedule_id` that made it.
    pub scheduled_for: Option<DateTime<Utc>>,
    /// Re-runs and retry policies (issue 13), as in [`NewTask`].
    pub retry_of: Option<Uuid>,
    /// Its own retry policy, resolved.
    pub retry_policy: Option<Json<RetryPolicy>>,
    /// Flow control: the concurrency group, both or neither (docs/flow-control.md).
    pub concurrency_key: Option<String>,
    /// How many of its concurrency group may be dispatched at once.
    pub concurrency_limit: Option<i32>,
    /// Pipelines (docs/pipelines.md), as in [`NewTask`]: the pipeline it is a job of.
    pub pipeline_id: Option<Uuid>,
    /// Its job's name in the pipeline.
    pub job: Option<String>,
    /// When it is released, for a task with needs (`ReleaseRule::as_str`).
    pub release_when: Option<String>,
    /// Needs not ended yet.
    pub needs_pending: i32,
    /// Needs that ended without succeeding.
    pub needs_unmet: i32,
    /// Whether some task needs it (its end runs the release).
    pub has_dependents: bool,
    /// The task whose end released or skipped it.
    pub released_by: Option<Uuid>,
}

/// Which tasks a listing or a bulk action takes.
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    /// Only tasks in this status.
    pub status: Option<TaskStatus>,
    /// Only tasks of this queue.
    pub queue: Option<String>,
    /// Only tasks submitted with this token.
    pub created_by: Option<String>,
    /// Only tasks older than this id (ids are UUIDv7, so older means smaller).
    pub before: Option<Uuid>,
    /// Only tasks made by this schedule.
    pub schedule_id: Option<Uuid>,
    /// The most tasks to return.
    pub limit: i64,
    /// Created in this window (bulk actions, issue 13): at or after / before.
    pub created_after: Option<DateTime<Utc>>,
    /// Created before this.
    pub created_before: Option<DateTime<Utc>>,
}

impl Store {
    /// Inserts a task, `queued` (or `scheduled` when `run_at` is in the future). With an
    /// idempotency key that already exists, inserts nothing and returns the existing
    /// task with `created = false`.
    pub async fn task_insert(
        &self,
        task: &NewTask,
        now: DateTime<Utc>,
    ) -> Result<(TaskRecord, bool), StoreError> {
        Ok(self
            .task_insert_batch(std::slice::from_ref(task), now)
            .await?
            .pop()
            .expect("one answer"))
    }

    /// Inserts every task or none, in one statement. Existing idempotency keys return
    /// their task.
    pub async fn task_insert_batch(
        &self,
        tasks: &[NewTask],
        now: DateTime<Utc>,
    ) -> Result<Vec<(TaskRecord, bool)>, StoreError> {
        let work = Work {
            inserts: tasks.to_vec(),
            ..Work::default()
        };
        self.write_now(&work, &Apply::at(now))
            .await?
            .inserts
            .into_iter()
            .collect()
    }

    /// The task `id`.
    pub async fn task_get(&self, id: Uuid) -> Result<TaskRecord, StoreError> {
        sqlx::query_as::<_, TaskRecord>("SELECT * FROM tasks WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)
    }

    /// The rows of `ids` that exist, in no particular order.
    pub async fn tasks_by_ids(&self, ids: &[Uuid]) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(
            sqlx::query_as::<_, TaskRecord>("SELECT * FROM tasks WHERE id = ANY($1)")
                .bind(ids)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// The rows of `ids` that exist, by id.
    pub async fn tasks_map(
        &self,
        ids: &[Uuid],
    ) -> Result<std::collections::HashMap<Uuid, TaskRecord>, StoreError> {
        Ok(self
            .tasks_by_ids(ids)
            .await?
            .into_iter()
            .map(|t| (t.id, t))
            .collect())
    }

    /// The runs `runner` holds under its boot `boot_id` that started before `before`: a
    /// heartbeat compares them with the ones it lists (those it no longer lists are
    /// forgotten).
    pub async fn runs_of_boot(
        &self,
        runner: RunnerId,
        boot_id: Uuid,
        before: DateTime<Utc>,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(
            "SELECT * FROM tasks
             WHERE runner_id = $1 AND boot_id = $2 AND status IN ('running', 'cancelling')
               AND started_at < $3",
        )
        .bind(runner)
        .bind(boot_id)
        .bind(before)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Tasks in one of `statuses` (unfinished ones), oldest id first after `after`: the
    /// repair pass walks the table with this, a page at a time.
    pub async fn tasks_page(
        &self,
        statuses: &[TaskStatus],
        after: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        // Unfinished statuses only, said so the partial index serves the walk.
        Ok(sqlx::query_as::<_, TaskRecord>(sqlx::AssertSqlSafe(format!(
            "SELECT * FROM tasks
             WHERE {} AND status = ANY($1) AND ($2::uuid IS NULL OR id > $2)
             ORDER BY id LIMIT $3",
            *crate::UNFINISHED
        )))
        .bind(&statuses)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// The dispatched tasks (leased, running, cancelling) of the concurrency groups
    /// `keys`: what holds their slots, as Postgres has it.
    pub async fn tasks_dispatched_in_groups(
        &self,
        keys: &[String],
    ) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(sqlx::query_as::<_, TaskRecord>(sqlx::AssertSqlSafe(format!(
            "SELECT * FROM tasks t WHERE {} AND t.concurrency_key = ANY($1)",
            crate::statuses::group_dispatched("t")
        )))
        .bind(keys)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Newest first, keyset-paginated on the id.
    pub async fn task_list(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(matching(filter, None, None, ListOrder::NewestFirst)
            .fetch_all(&self.pool)
            .await?)
    }

    /// [`Store::task_list`], narrowed further to the tasks carrying `label` and those
    /// whose command (its words joined by spaces) or script contains `text`, ignoring
    /// case and taking `%` and `_` literally. What a person looks for in a list, which is
    /// why these two are not in [`TaskFilter`]: a bulk action takes every field of that
    /// (`rerun::filter_sql`), and acts only on filters a caller can state exactly.
    ///
    /// No index serves either: the newest tasks are read in id order until `limit` match.
    /// So the text is looked for in the first [`SEARCH_PREFIX_CHARS`] characters of each
    /// command and script only (a planted 1 MiB command costs what a short one does), and
    /// a search is a statement of its own bounded by `bound` inside Postgres: one that
    /// runs past it is cancelled there and answered [`StoreError::OverBound`].
    pub async fn task_list_matching(
        &self,
        filter: &TaskFilter,
        label: Option<&str>,
        text: Option<&str>,
        order: ListOrder,
        bound: Duration,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let mut tx = self.bounded(bound).await?;
        let rows = matching(filter, label, text, order)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| over_bound(e, bound))?;
        tx.commit().await?;
        Ok(rows)
    }

    /// How many tasks [`Store::task_list_matching`] would list with no limit, counting
    /// at most `cap`: `(count, true)` when there are `cap` or more. A count reads every
    /// matching row, so it stops at `cap` and is bounded as a text search is.
    pub async fn task_count_matching(
        &self,
        filter: &TaskFilter,
        label: Option<&str>,
        text: Option<&str>,
        cap: i64,
        bound: Duration,
    ) -> Result<(i64, bool), StoreError> {
        let mut tx = self.bounded(bound).await?;
        let counted = TaskFilter {
            before: None,
            limit: cap,
            ..filter.clone()
        };
        let count: i64 = bind_filter!(
            sqlx::query_scalar(concat!(
                "SELECT count(*) FROM (SELECT 1 FROM tasks WHERE ",
                filter_conditions!("<"),
                " LIMIT $4) AS matched"
            )),
            counted,
            label,
            text
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| over_bound(e, bound))?;
        tx.commit().await?;
        Ok((count, count >= cap))
    }

    /// A transaction whose statements Postgres cancels past `bound`.
    async fn bounded(&self, bound: Duration) -> Result<crate::metered::MeteredTx, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('statement_timeout', $1, true)")
            .bind(format!("{}ms", bound.as_millis().max(1)))
            .execute(&mut *tx)
            .await?;
        Ok(tx)
    }

    /// `queued -> running` under a lease checked against its claim (or `leased ->
    /// running` for a row leased in Postgres): the runner acknowledged its lease. The
    /// attempt count goes up and the log starts afresh for this attempt. A repeated start
    /// under the same lease (its first answer was lost) succeeds again without counting
    /// an attempt. (A batch of one: the group committer writes many in one statement.)
    pub async fn task_start(
        &self,
        start: StartRun,
        now: DateTime<Utc>,
    ) -> Result<Started, StoreError> {
        let work = Work {
            starts: vec![start],
            ..Work::default()
        };
        self.write_now(&work, &Apply::at(now))
            .await?
            .starts
            .pop()
            .expect("one answer")
    }

    /// Applies `work` in a transaction of its own, at once.
    pub async fn write_now(&self, work: &Work, how: &Apply) -> Result<Done, StoreError> {
        crate::transitions::write(&self.pool, work, how, || {}).await
    }
}

/// What a list reads of each task: every column, but of the ones a task may fill with up
/// to a MiB, what a row of a list shows — the first 16 words of its command and the first
/// 256 characters of each and of its script, the first 1,024 of its error, the names of
/// its secrets, no `env`, `payload` or `outputs` — so a page of 1,000 planted tasks is
/// not a GiB read, shipped and rendered. `GET /v1/tasks/{id}` reads the task whole.
macro_rules! summary_columns {
    () => {
        "id, queue, labels,
         CASE WHEN command IS NULL THEN NULL
              ELSE ARRAY(SELECT left(word, 256)
                         FROM unnest(command[1:16]) WITH ORDINALITY AS w(word, n)
                         ORDER BY n)
         END AS command,
         left(script, 256) AS script,
         '{}'::jsonb AS env,
         (SELECT coalesce(jsonb_object_agg(name, ''), '{}'::jsonb)
          FROM jsonb_object_keys(secret_env) AS name) AS secret_env,
         NULL::jsonb AS payload,
         priority, timeout_s, queue_timeout_s, max_attempts, run_at, idempotency_key, status,
         attempt, runner_id, lease_id, boot_id, notify_url, created_by, traceparent,
         created_at, updated_at, queued_at, leased_at, started_at, finished_at, exit_code,
         left(error, 1024) AS error, NULL::jsonb AS outputs, log_size, log_truncated,
         log_incomplete, schedule_id, scheduled_for, retry_of, retry_policy, concurrency_key,
         concurrency_limit, pipeline_id, job, release_when, needs_pending, needs_unmet,
         has_dependents, released_by"
    };
}

pub(crate) use summary_columns;

/// The tasks `filter`, `label` and `text` select, newest first, as summaries
/// ([`summary_columns`]; see [`Store::task_list_matching`]).
/// Which end of the id order a listing starts from (ids are UUIDv7: creation order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ListOrder {
    /// The newest first; a cursor pages to older tasks.
    #[default]
    NewestFirst,
    /// The oldest first; a cursor pages to newer tasks.
    OldestFirst,
}

fn matching<'q>(
    filter: &'q TaskFilter,
    label: Option<&'q str>,
    text: Option<&str>,
    order: ListOrder,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, TaskRecord, sqlx::postgres::PgArguments> {
    let sql = match order {
        ListOrder::NewestFirst => concat!(
            "SELECT ",
            summary_columns!(),
            " FROM tasks WHERE ",
            filter_conditions!("<"),
            " ORDER BY id DESC LIMIT $4"
        ),
        ListOrder::OldestFirst => concat!(
            "SELECT ",
            summary_columns!(),
            " FROM tasks WHERE ",
            filter_conditions!(">"),
            " ORDER BY id ASC LIMIT $4"
        ),
    };
    bind_filter!(sqlx::query_as::<_, TaskRecord>(sql), filter, label, text)
}

/// A statement Postgres cancelled at its bound (`57014`) is [`StoreError::OverBound`].
fn over_bound(e: sqlx::Error, bound: Duration) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("57014") => {
            StoreError::OverBound(bound)
        }
        _ => e.into(),
    }
}

/// How much of each command and script a text search reads.
pub(crate) const SEARCH_PREFIX_CHARS: i32 = 4096;

/// A `LIKE` pattern matching any text that contains `text`: its own `%`, `_` and the
/// escape character are escaped, so a user's search is never a wildcard.
fn contains_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
mod contains_pattern_tests {
    use super::contains_pattern;

    #[test]
    fn wildcards_in_the_text_are_taken_literally() {
        assert_eq!(contains_pattern("make"), "%make%");
        assert_eq!(contains_pattern("100%_done"), r"%100\%\_done%");
        assert_eq!(contains_pattern(r"C:\tmp"), r"%C:\\tmp%");
    }
}

#[cfg(test)]
mod id_bound_tests {
    use super::id_bound;
    use uuid::{NoContext, Timestamp, Uuid};

    #[test]
    fn a_uuidv7_lies_between_the_bounds_of_its_millisecond() {
        let at = chrono::DateTime::from_timestamp_millis(1_765_000_000_123).unwrap();
        let id = Uuid::new_v7(Timestamp::from_unix(NoContext, 1_765_000_000, 123_000_000));
        assert!(id_bound(at) <= id);
        assert!(id < id_bound(at + chrono::TimeDelta::milliseconds(1)));
        assert!(id_bound(at - chrono::TimeDelta::milliseconds(1)) < id);
    }
}
