//! Postgres, the source of truth: tasks, their logs, runners, tokens and schedules.
//!
//! Every status change is a compare-and-set on the expected status (and, for a runner's
//! report, on its lease), so two nodes racing on one task cannot both win, whatever Redis
//! says. Methods read entity-then-verb: `task_lease`, `task_complete`, `runner_insert`.

#![warn(missing_docs, unreachable_pub)]

mod assignments;
mod attempts;
#[cfg(feature = "audit")]
pub mod audit;
mod cancel;
mod counts;
mod error;
mod group_commit;
mod hosts;
mod logs;
mod metered;
mod outbox;
mod pipelines;
mod queued_rows;
mod queues;
mod replication;
mod rerun;
mod retention;
mod runners;
mod runs;
mod schedules;
mod statuses;
pub use statuses::sql_list;
mod tasks;
mod tokens;
mod transition;
mod transitions;
mod webhook_secret;

pub use assignments::{Admission, Admitted, AssignmentFacts, AssignmentRecord, Candidate, Launch};
pub use attempts::{AttemptRecord, SHORT_ID_MATCHES};
pub use cancel::CANCELLED_BEFORE_IT_RAN;
pub use cancel::Cancelled;
pub use error::{StoreError, unavailable_seen};
pub use group_commit::{
    BATCH_ITEMS as GROUP_COMMIT_ITEMS, CommitObserver, GroupCommit, GroupCommitSettings, Now,
};
pub use hosts::{primary_url, split as database_hosts};
pub use logs::{LogAppend, LogChunk};
pub use metered::{ERRORS as POSTGRES_ERRORS, QUERY_DURATION as POSTGRES_QUERY_DURATION};
pub use outbox::{OutboxRecord, OutboxState};
pub use pipelines::{
    NeededJobs, NewPipeline, PipelineJobs, PipelineRecord, PipelineRows, PipelineSummary,
};
pub use queued_rows::QueuedRow;
pub use queues::QueueRecord;
pub use rerun::{BulkAction, rerun_key};
pub use runners::{NewRunner, RunnerRecord};
pub use runs::{Fence, FinishPolicy, RunEnd, TASK_RUN_SECONDS, TASKS_COMPLETED};
pub use schedules::{Fire, Fired, ScheduleRecord, ScheduleSettings, ScheduleSkip};
pub use tasks::{ListOrder, NewTask, TaskFilter, TaskRecord};
pub use tokens::{
    ApiTokenRecord, NewApiToken, NewRegistrationToken, Registering, Registration,
    RegistrationTokenRecord,
};
pub use transition::Transition;
pub use transitions::{Apply, Done, FinishRun, LogWrite, StartRun, Started, Work};

use metered::MeteredPool;

/// `NotFound` when a statement about one row changed none.
pub(crate) fn changed_one(done: &sqlx::postgres::PgQueryResult) -> Result<(), StoreError> {
    match done.rows_affected() {
        0 => Err(StoreError::NotFound),
        _ => Ok(()),
    }
}

/// `status IN (…every unfinished status…)`, spelt out in a query so Postgres can use the
/// partial indexes on unfinished tasks (a status list passed as a parameter cannot show
/// it matches their predicate). From `TaskStatus`, so the list has one home; a test
/// holds the migrations' predicate to it.
pub(crate) static UNFINISHED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "status IN ({})",
        statuses::sql_list(baton_core::TaskStatus::UNFINISHED)
    )
});
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::time::Duration;
use uuid::Uuid;

/// Migrations embedded in the binary, applied by `baton migrate` and at `baton serve`
/// start. sqlx holds an advisory lock while applying, so replicas starting together
/// are safe.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// The Postgres store: every read and write of the task table and its neighbours.
#[derive(Debug, Clone)]
pub struct Store {
    pool: MeteredPool,
}

/// Pool settings; the acquire timeout bounds how long a request waits on a busy or
/// unreachable database before the node answers 503.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The most connections the pool holds.
    pub max_connections: u32,
    /// How long a request waits for a connection.
    pub acquire_timeout: Duration,
    /// Postgres cancels any statement running longer: a query stuck on a half-dead
    /// connection cannot hang a request or a service pass.
    pub statement_timeout: Duration,
    /// Plan each prepared statement once, for any parameters (`plan_cache_mode =
    /// force_generic_plan`): for the group commit's pool, whose statements are always
    /// the same few, look rows up by id, and would otherwise be planned again at every
    /// execution (planning the hot statement cost a quarter of its execution). Such a
    /// pool's sessions also take no sequential scan, hash join or merge join
    /// ([`BY_ID_ONLY`]).
    pub generic_plans: bool,
    /// Acknowledge a write only if the primary that committed it replicated it
    /// synchronously; refuse writes (503) and report not-ready while it has no
    /// synchronous standby (`replication.rs`).
    pub require_sync_standby: bool,
}

/// The planner settings of a session whose statements find every row by its id (the group
/// commit's, and the release's functions', `migrations/*_plans_by_id.sql`). Such a plan is
/// made once and kept until the connection is replaced or Postgres replans it (the
/// table's statistics change); made while the statistics were far from the table, it
/// read far more than the rows it writes: on a new cluster's nearly empty table a
/// batch's start and end joined it by hash over a sequential scan of the whole table,
/// and a release planned before any job waited read every waiting row (the benchmark's
/// pipelines phase on a fresh cluster: 1.6 ms of Postgres CPU per task, 0.2 ms for plain
/// tasks). Turned off, these scans and joins are taken only where no index could serve,
/// which no statement of such a session needs; what remains to the costs is which side of
/// a nested loop goes first, which the release's functions fix in how they are written.
pub const BY_ID_ONLY: [(&str, &str); 3] = [
    ("enable_seqscan", "off"),
    ("enable_hashjoin", "off"),
    ("enable_mergejoin", "off"),
];

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            generic_plans: false,
            require_sync_standby: false,
        }
    }
}

impl Store {
    /// Ends the row `id` at `now` once: `sql` stamps an end (a revoke, a delete) on a
    /// row not yet ended, binding the id as `$1` and `now` as `$2`. `NotFound` when it
    /// changed no row: there is no such row, or it had ended already.
    pub(crate) async fn end_once(
        &self,
        sql: &'static str,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(sql)
            .bind(id)
            .bind(now)
            .execute(&self.pool)
            .await?;
        changed_one(&done)
    }

    /// A pool that connects lazily, so a node can start (and report not-ready) while
    /// Postgres is down.
    ///
    /// `url` may name several hosts (a primary and its standbys, as libpq takes them):
    /// then the pool connects to whichever is writable, and follows a failover
    /// (`hosts.rs`). That needs a Tokio runtime, which watches for it.
    pub fn connect_lazy(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let tune = |connect: PgConnectOptions| {
            let connect = connect.options([(
                "statement_timeout",
                format!("{}ms", options.statement_timeout.as_millis()),
            )]);
            if options.generic_plans {
                connect
                    .options([("plan_cache_mode", "force_generic_plan")])
                    .options(BY_ID_ONLY)
            } else {
                connect
            }
        };
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout);
        let replication = || replication::Replication::new(options.require_sync_standby);
        let Some(failover) = hosts::Failover::of(url, tune)? else {
            let connect = tune(url.parse::<PgConnectOptions>().map_err(StoreError::from)?);
            return Ok(Self::with_replication(
                pool.connect_lazy_with(connect),
                replication(),
            ));
        };
        let failover = std::sync::Arc::new(failover);
        let first = failover.first();
        let switch = failover.clone();
        let pool = pool
            // A standby, or a primary demoted a moment ago, takes no writes: not kept.
            .after_connect(|conn, _| {
                Box::pin(async move {
                    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                        .fetch_one(conn)
                        .await?;
                    if in_recovery {
                        return Err(sqlx::Error::Protocol(
                            "connected to a Postgres standby, not the primary".into(),
                        ));
                    }
                    Ok(())
                })
            })
            .before_acquire(move |_, meta| {
                let stale = switch.opened_before_switch(meta.age);
                Box::pin(async move { Ok(!stale) })
            })
            .connect_lazy_with(first);
        tokio::spawn(failover.watch(pool.clone()));
        Ok(Self::with_replication(pool, replication()))
    }

    fn with_replication(pool: PgPool, replication: replication::Replication) -> Self {
        Store {
            pool: MeteredPool::new(pool, replication),
        }
    }

    /// Creates the database `url` names when it does not exist yet, so a first start
    /// needs no separate `createdb`. Replicas racing to create it are fine: losing the
    /// race is success.
    pub async fn database_create_if_missing(url: &str) -> Result<(), StoreError> {
        use sqlx::migrate::MigrateDatabase;
        let url = &hosts::primary_url(url).await?;
        if sqlx::Postgres::database_exists(url).await? {
            return Ok(());
        }
        match sqlx::Postgres::create_database(url).await {
            Ok(()) => Ok(()),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens `connections` of the pool's connections and has each read the tasks table
    /// once, as the hot path does. A backend's start and its first look at the table
    /// (its catalog caches filled, the statement planned) cost 10–25 ms on a busy
    /// machine: paid here, at the node's start, they are not paid by its first submit or
    /// by the first wake-up of a runner parked on it. Connections an idle pool closes
    /// later are opened again by a request, as before.
    ///
    /// At most the pool's size, and its failure is no outage: a Postgres that is away is
    /// found by the node's own checks, not counted here.
    pub async fn warm(&self, connections: usize) -> Result<(), sqlx::Error> {
        let pool = self.pool.inner();
        let connections = connections.min(pool.options().get_max_connections() as usize);
        let mut held = Vec::with_capacity(connections);
        for _ in 0..connections {
            held.push(pool.acquire().await?);
        }
        for conn in &mut held {
            sqlx::query(transitions::READ_ROWS)
                .bind(Vec::<Uuid>::new())
                .execute(&mut **conn)
                .await?;
        }
        Ok(())
    }

    /// Applies what is missing. A Postgres that cannot be reached (or is failing over)
    /// is `Unavailable`, anything else `Internal`.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(self.pool.inner()).await.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(e) => match StoreError::from(e) {
                StoreError::Unavailable(why) => StoreError::Unavailable(why),
                other => StoreError::Internal(format!("migration failed: {other}")),
            },
            e => StoreError::Internal(format!("migration failed: {e}")),
        })
    }

    /// One round trip, for readiness; with `require_sync_standby`, the primary must have
    /// a synchronous standby, or every write would be refused.
    pub async fn ping(&self) -> Result<(), StoreError> {
        if self.pool.replication().required() {
            let mut conn = self.pool.inner().acquire().await?;
            self.pool.replication().ready(&mut conn).await?;
        } else {
            sqlx::query("SELECT 1").execute(&self.pool).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_partial_indexes_cover_exactly_the_unfinished_statuses() {
        // The latest index of unfinished tasks (each replaces the last when the status
        // machine grows) lists exactly today's unfinished statuses.
        let latest = super::MIGRATOR
            .iter()
            .rfind(|m| m.description.contains("active") && !m.description.starts_with("drop"))
            .expect("an index of unfinished tasks");
        assert!(
            latest
                .sql
                .as_str()
                .contains(&format!("WHERE {}", *super::UNFINISHED)),
            "{}",
            latest.description
        );
    }
}
