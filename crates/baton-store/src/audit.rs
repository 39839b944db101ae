//! What the failover drill (`baton chaos`, crates/baton-drill) reads of the store to judge
//! a history, kept here beside the schema it reads so a change of the schema meets it:
//! an audit of every status write that matters (a trigger the drill installs in its own
//! database), and the few reads its checks make. Only the drill turns this on (the
//! `audit` feature); a node never installs the trigger.
//!
//! Each function takes a connection of its own: the drill connects to whichever server
//! is the primary now, across failovers.

use crate::StoreError;
use baton_core::RunnerId;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

/// The terminal statuses as an SQL list, `('succeeded', ...)`.
fn terminal_list() -> String {
    format!("({})", crate::sql_list(TaskStatus::TERMINAL))
}

/// Records every terminal write, so "written once" can be counted; every start and every
/// end of a run (the status leaving `running` or `cancelling`, with the error written and
/// the runner the run was on), so each end can be matched to its cause and each start
/// judged against a queue's pauses. Times are on the machine's real clock: a start's is
/// its statement's beginning (`statement_timestamp()`), when the snapshot its check of the
/// pauses reads was taken; the others' when they were written.
pub async fn install(conn: &mut PgConnection) -> Result<(), StoreError> {
    let record = format!(
        "CREATE FUNCTION chaos_record() RETURNS trigger AS $$
         BEGIN
             IF NEW.status IN {} AND NEW.status IS DISTINCT FROM OLD.status THEN
                 INSERT INTO chaos_terminal_writes (task_id, status, attempt)
                 VALUES (NEW.id, NEW.status, NEW.attempt);
             END IF;
             IF NEW.status = 'running' AND OLD.status IS DISTINCT FROM 'running' THEN
                 INSERT INTO chaos_starts (task_id, attempt, runner_id, queue, at)
                 VALUES (NEW.id, NEW.attempt, NEW.runner_id, NEW.queue, statement_timestamp());
             END IF;
             IF OLD.status IN ('running', 'cancelling')
                AND NEW.status NOT IN ('running', 'cancelling') THEN
                 INSERT INTO chaos_run_ends (task_id, attempt, runner_id, status, error)
                 VALUES (OLD.id, OLD.attempt, OLD.runner_id, NEW.status, NEW.error);
             END IF;
             RETURN NEW;
         END $$ LANGUAGE plpgsql",
        terminal_list()
    );
    for statement in [
        "CREATE TABLE chaos_terminal_writes (
             task_id uuid NOT NULL, status text NOT NULL, attempt integer NOT NULL,
             written_at timestamptz NOT NULL DEFAULT clock_timestamp())",
        "CREATE TABLE chaos_starts (
             task_id uuid NOT NULL, attempt integer NOT NULL, runner_id uuid, queue text NOT NULL,
             at timestamptz NOT NULL DEFAULT clock_timestamp())",
        "CREATE TABLE chaos_run_ends (
             task_id uuid NOT NULL, attempt integer NOT NULL, runner_id uuid,
             status text NOT NULL, error text,
             at timestamptz NOT NULL DEFAULT clock_timestamp())",
        &record,
        "CREATE TRIGGER chaos_audit AFTER UPDATE ON tasks
         FOR EACH ROW EXECUTE FUNCTION chaos_record()",
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// One write of a terminal status, as the audit recorded it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TerminalWrite {
    /// The task.
    pub task_id: Uuid,
    /// The status written (or, for a task's outcome, its status now).
    pub status: String,
    /// The attempt.
    pub attempt: i32,
    /// Seconds since the Unix epoch.
    pub at: f64,
}

/// Every terminal write recorded.
pub async fn terminal_writes(conn: &mut PgConnection) -> Result<Vec<TerminalWrite>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT task_id, status, attempt, EXTRACT(EPOCH FROM written_at)::float8 AS at
         FROM chaos_terminal_writes",
    )
    .fetch_all(conn)
    .await?)
}

/// One start of a run, as the audit recorded it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditedStart {
    /// The task.
    pub task_id: Uuid,
    /// The attempt.
    pub attempt: i32,
    /// Seconds since the Unix epoch, at its statement's beginning.
    pub at: f64,
}

/// Every start recorded of a task of `queue`.
pub async fn starts_in_queue(
    conn: &mut PgConnection,
    queue: &str,
) -> Result<Vec<AuditedStart>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT task_id, attempt, EXTRACT(EPOCH FROM at)::float8 AS at FROM chaos_starts
         WHERE queue = $1",
    )
    .bind(queue)
    .fetch_all(conn)
    .await?)
}

/// One end of a run, as the audit recorded it, with the start of that run and its task's
/// timeout.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditedEnd {
    /// The task.
    pub task_id: Uuid,
    /// The attempt.
    pub attempt: i32,
    /// The runner the run was on.
    pub runner_id: Option<RunnerId>,
    /// The status written (or, for a task's outcome, its status now).
    pub status: String,
    /// The error written with the status.
    pub error: Option<String>,
    /// Seconds since the Unix epoch; `None` when no start of it was recorded.
    pub started: Option<f64>,
    /// When it ended, in seconds since the Unix epoch.
    pub ended: f64,
    /// The task's timeout.
    pub timeout_s: Option<i64>,
}

/// Every end recorded of a run of `tasks`.
pub async fn run_ends(
    conn: &mut PgConnection,
    tasks: &[Uuid],
) -> Result<Vec<AuditedEnd>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT e.task_id, e.attempt, e.runner_id, e.status, e.error,
                (SELECT EXTRACT(EPOCH FROM max(s.at))::float8 FROM chaos_starts s
                  WHERE s.task_id = e.task_id AND s.attempt = e.attempt) AS started,
                EXTRACT(EPOCH FROM e.at)::float8 AS ended,
                t.timeout_s::int8 AS timeout_s
         FROM chaos_run_ends e JOIN tasks t ON t.id = e.task_id
         WHERE e.task_id = ANY($1)",
    )
    .bind(tasks)
    .fetch_all(conn)
    .await?)
}

/// How many of `tasks` are not terminal yet, and how many webhooks wait for delivery.
pub async fn still_open(conn: &mut PgConnection, tasks: &[Uuid]) -> Result<(i64, i64), StoreError> {
    let open: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM tasks WHERE id = ANY($1) AND status NOT IN {}",
        terminal_list()
    )))
    .bind(tasks)
    .fetch_one(&mut *conn)
    .await?;
    let undelivered: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox WHERE delivered_at IS NULL")
            .fetch_one(&mut *conn)
            .await?;
    Ok((open, undelivered))
}

/// Where a task ended up.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Outcome {
    /// The task.
    pub id: Uuid,
    /// The status written (or, for a task's outcome, its status now).
    pub status: String,
    /// The attempt.
    pub attempt: i32,
    /// The error written with the status.
    pub error: Option<String>,
}

/// The outcomes of `tasks` that exist.
pub async fn outcomes(conn: &mut PgConnection, tasks: &[Uuid]) -> Result<Vec<Outcome>, StoreError> {
    Ok(
        sqlx::query_as("SELECT id, status, attempt, error FROM tasks WHERE id = ANY($1)")
            .bind(tasks)
            .fetch_all(conn)
            .await?,
    )
}

/// Every runner's id and name, deleted ones too.
pub async fn runner_names(
    conn: &mut PgConnection,
) -> Result<Vec<(baton_core::RunnerId, String)>, StoreError> {
    Ok(sqlx::query_as("SELECT id, name FROM runners")
        .fetch_all(conn)
        .await?)
}

/// The concurrency group and limit of each of `tasks` that has one.
pub async fn groups_of(
    conn: &mut PgConnection,
    tasks: &[Uuid],
) -> Result<Vec<(Uuid, String, i32)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT id, concurrency_key, concurrency_limit FROM tasks
         WHERE id = ANY($1) AND concurrency_key IS NOT NULL",
    )
    .bind(tasks)
    .fetch_all(conn)
    .await?)
}

/// The tasks a schedule made.
pub async fn tasks_of_schedule(
    conn: &mut PgConnection,
    schedule: Uuid,
) -> Result<Vec<Uuid>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT id FROM tasks WHERE schedule_id = $1")
            .bind(schedule)
            .fetch_all(conn)
            .await?,
    )
}

/// When a schedule first made a task at or after `from`.
pub async fn first_made_since(
    conn: &mut PgConnection,
    schedule: Uuid,
    from: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT min(created_at) FROM tasks WHERE schedule_id = $1 AND created_at >= $2",
    )
    .bind(schedule)
    .bind(from)
    .fetch_one(conn)
    .await?)
}

/// Each tick a schedule made tasks for, with how many, in time order.
pub async fn ticks_made(
    conn: &mut PgConnection,
    schedule: Uuid,
) -> Result<Vec<(DateTime<Utc>, i64)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT scheduled_for, count(*) FROM tasks WHERE schedule_id = $1
         GROUP BY scheduled_for ORDER BY scheduled_for",
    )
    .bind(schedule)
    .fetch_all(conn)
    .await?)
}
