//! The group commit's statements are planned once per connection (generic plans), and the
//! release's functions once per session: a plan is kept until Postgres replans it after
//! an `ANALYZE`. Planned while the statistics said no job was waiting — any cluster
//! before its first pipeline, any time the waiting jobs came after the last `ANALYZE` —
//! a release found the job it counts down by reading every waiting row, at every end
//! of a job something needs (the benchmark's pairs of jobs: 1.6 ms of Postgres CPU per
//! task, against 0.2 for plain tasks). Every row must be reached by its id, whatever the
//! statistics said when the statement was planned.

use baton_localcluster::testing as support;

use baton_core::{LeaseId, TaskStatus};
use baton_store::{
    Apply, Fence, FinishPolicy, FinishRun, NewTask, RunEnd, StartRun, Store, StoreOptions, Work,
};
use chrono::Utc;
use std::time::Duration;
use support::*;
use uuid::Uuid;

/// Finished tasks in the table when the statements are planned, and waiting jobs added
/// after: a statement that reads every waiting row reads this many at every release.
const BULK: i64 = 10_000;

/// One batch as a node's committer writes it: `pairs` tasks that another task needs
/// (each with its waiting job) and as many plain ones, started, then ended.
async fn one_round(env: &TestEnv, committer: &Store, runner: baton_core::RunnerId, pairs: usize) {
    let pipeline = Uuid::now_v7();
    let mut inserts = Vec::new();
    let mut needed = Vec::new();
    for i in 0..pairs {
        let need = NewTask {
            pipeline_id: Some(pipeline),
            job: Some(format!("need{i}")),
            has_dependents: true,
            ..new_task_row()
        };
        needed.push(need.id);
        inserts.push(need);
        inserts.push(new_task_row());
    }
    let ids: Vec<Uuid> = inserts.iter().map(|t| t.id).collect();
    committer
        .write_now(
            &Work {
                inserts,
                ..Work::default()
            },
            &Apply::at(Utc::now()),
        )
        .await
        .unwrap();
    // The jobs that wait for the needed ones, as a pipeline's insert leaves them.
    let mut db = env.db().await;
    for need in &needed {
        let job = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO tasks (id, queue, command, timeout_s, queue_timeout_s, status,
                                created_by, created_at, updated_at, pipeline_id, job,
                                release_when, needs_pending)
             VALUES ($1, 'default', ARRAY['true'], 60, 60, 'waiting', 'test', now(), now(),
                     $2, $3, 'on_success', 1)",
        )
        .bind(job)
        .bind(pipeline)
        .bind(format!("job-{job}"))
        .execute(&mut db)
        .await
        .unwrap();
        sqlx::query("INSERT INTO task_needs (needs_id, task_id) VALUES ($1, $2)")
            .bind(need)
            .bind(job)
            .execute(&mut db)
            .await
            .unwrap();
    }
    let lease = LeaseId::random();
    let now = Utc::now();
    let starts = ids
        .iter()
        .map(|&task| StartRun {
            task,
            lease_id: lease,
            runner_id: runner,
            boot_id: None,
            leased_at: now,
        })
        .collect();
    let done = committer
        .write_now(
            &Work {
                starts,
                ..Work::default()
            },
            &Apply::at(now),
        )
        .await
        .unwrap();
    assert!(done.starts.iter().all(|s| s.is_ok()), "every task started");
    let finishes = ids
        .iter()
        .map(|&task| FinishRun {
            task,
            fence: Fence {
                lease_id: lease,
                runner_id: Some(runner),
            },
            end: RunEnd {
                outcome: TaskStatus::Succeeded,
                exit_code: Some(0),
                error: None,
                outputs: None,
                log_size: Some(0),
            },
            jitter_unit: 0.5,
        })
        .collect();
    let done = committer
        .write_now(
            &Work {
                finishes,
                ..Work::default()
            },
            &Apply {
                now: Utc::now(),
                log_cap: 1 << 20,
                policy: FinishPolicy {
                    backoff: baton_core::after_run::TASK_RETRY,
                    jitter_unit: 0.5,
                },
            },
        )
        .await
        .unwrap();
    assert!(done.finishes.iter().all(|f| f.is_ok()), "every run ended");
}

/// `BULK` tasks of `status` added at once, no pipeline's (a waiting one needs nothing
/// that ends here).
async fn bulk(db: &mut sqlx::PgConnection, status: &str) {
    sqlx::query(
        "INSERT INTO tasks (id, queue, command, timeout_s, queue_timeout_s, status, created_by,
                            created_at, updated_at, finished_at, needs_pending)
         SELECT gen_random_uuid(), 'default', ARRAY['true'], 60, 60, $2, 'bulk', now(), now(),
                CASE WHEN $2 = 'waiting' THEN NULL ELSE now() END,
                CASE WHEN $2 = 'waiting' THEN 1 ELSE 0 END
         FROM generate_series(1, $1)",
    )
    .bind(BULK)
    .bind(status)
    .execute(db)
    .await
    .unwrap();
}

/// Rows of the tasks table read through a scan or an index, by every backend that has
/// left (a backend hands its counts in as it exits).
async fn tasks_rows_read(db: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT (COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0))::int8
         FROM pg_stat_user_tables WHERE relname = 'tasks'",
    )
    .fetch_one(db)
    .await
    .unwrap()
}

/// What a test needs: a migrated database whose tasks table no `ANALYZE` will touch
/// (one midway would replan the statements and hide what the tests look for; changing the
/// table's settings replans them too, so it comes first), a runner, a connection.
async fn set_up(env: &TestEnv) -> (baton_core::RunnerId, sqlx::PgConnection) {
    let setup = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    setup.migrate().await.unwrap();
    let runner = registered_runner(&setup).await;
    drop(setup);
    let mut db = env.db().await;
    sqlx::query("ALTER TABLE tasks SET (autovacuum_enabled = off)")
        .execute(&mut db)
        .await
        .unwrap();
    (runner, db)
}

/// One connection, its statements planned at their first batch: the node's committer's
/// (`generic_plans`), or its main pool's, whose writes (a cancel, an expiry, a lost run's
/// end) run the release with the planner settings of the release's functions alone.
fn one_connection(env: &TestEnv, generic_plans: bool) -> Store {
    Store::connect_lazy(
        &env.database_url,
        &StoreOptions {
            max_connections: 1,
            generic_plans,
            ..StoreOptions::default()
        },
    )
    .unwrap()
}

/// A round of batches through `store` (its statements planned now), the table grown by
/// `BULK` tasks of each of `grown`, three rounds more, and the rows they read checked.
async fn planned_then_grown(
    env: &TestEnv,
    runner: baton_core::RunnerId,
    mut db: sqlx::PgConnection,
    store: Store,
    grown: &[&str],
) {
    one_round(env, &store, runner, 2).await;
    for status in grown {
        bulk(&mut db, status).await;
    }
    for _ in 0..3 {
        one_round(env, &store, runner, 2).await;
    }
    rows_read_were_few(env, db, store).await;
}

/// Once `store` has closed: the rows of the tasks table every backend read, checked to be
/// few, and that each round released its two jobs.
async fn rows_read_were_few(env: &TestEnv, mut db: sqlx::PgConnection, store: Store) {
    let released: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE status = 'queued' AND released_by IS NOT NULL",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(released, 8, "each round's two waiting jobs were released");
    // Every other backend gone, so that each has handed in its counts.
    drop(store);
    let this: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut db)
        .await
        .unwrap();
    wait_for(
        "the other connections to close",
        Duration::from_secs(30),
        || async {
            let others: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> $1",
            )
            .bind(this)
            .fetch_one(&mut env.db().await)
            .await
            .unwrap();
            (others == 0).then_some(())
        },
    )
    .await;
    let read = tasks_rows_read(&mut db).await;
    println!("four rounds of batches read {read} rows of the tasks table");
    // By id, the four rounds read a few hundred rows at most (each row a few times); a
    // statement that scans the table, or every waiting row, reads 10,000 or more each time.
    // At least the rows they write: else the counts were not taken at all.
    assert!(
        read >= 24,
        "the counts of rows read were not handed in: {read}"
    );
    assert!(
        read < BULK / 4,
        "the batches read {read} rows of the tasks table: a statement planned on other \
         statistics reads more than the rows it writes"
    );
}

#[tokio::test]
async fn a_release_planned_before_jobs_waited_reads_only_the_rows_it_counts_down() {
    let env = TestEnv::new("store-plans-waiting").await;
    let (runner, mut db) = set_up(&env).await;
    bulk(&mut db, "succeeded").await;
    sqlx::query("ANALYZE tasks").execute(&mut db).await.unwrap();
    // Planned while the statistics know of no waiting job; then a large pipeline waits.
    planned_then_grown(&env, runner, db, one_connection(&env, true), &["waiting"]).await;
}

#[tokio::test]
async fn batches_planned_on_a_nearly_empty_table_read_only_their_rows_once_it_is_large() {
    let env = TestEnv::new("store-plans-empty").await;
    let (runner, db) = set_up(&env).await;
    // Planned on the table a node starting on a new cluster finds.
    let committer = one_connection(&env, true);
    planned_then_grown(&env, runner, db, committer, &["succeeded", "waiting"]).await;
}

#[tokio::test]
async fn a_release_outside_the_group_commit_reads_only_its_rows_too() {
    let env = TestEnv::new("store-plans-main-pool").await;
    let (runner, db) = set_up(&env).await;
    let main_pool = one_connection(&env, false);
    planned_then_grown(&env, runner, db, main_pool, &["succeeded", "waiting"]).await;
}

#[tokio::test]
async fn the_release_functions_plan_as_the_group_commits_sessions_do() {
    let env = TestEnv::new("store-plans-settings").await;
    let (_, mut db) = set_up(&env).await;
    for function in [
        "tasks_resolve",
        "tasks_give_needs_env",
        "tasks_dated_after_needs",
    ] {
        let settings: Vec<String> =
            sqlx::query_scalar("SELECT unnest(proconfig) FROM pg_proc WHERE proname = $1")
                .bind(function)
                .fetch_all(&mut db)
                .await
                .unwrap();
        for (name, value) in baton_store::BY_ID_ONLY {
            let setting = format!("{name}={value}");
            assert!(
                settings.contains(&setting),
                "{function} is planned without {setting}: {settings:?}"
            );
        }
    }
}
