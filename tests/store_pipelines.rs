//! Pipelines at the store (docs/pipelines.md): the release rule in SQL is the core's,
//! case by case; needs ending at once in transactions of their own release each of their
//! jobs exactly once, however the ends interleave; and a task inserted while what it
//! needs is ending never waits forever.

use baton_localcluster::testing as support;

use baton_core::pipeline::{ReleaseRule, Verdict, verdict};
use baton_core::{LeaseId, TaskStatus};
use baton_store::{
    Fence, FinishPolicy, NewPipeline, NewTask, RunEnd, Store, StoreOptions, TaskRecord,
};
use chrono::{SubsecRound, Utc};
use support::*;
use uuid::Uuid;

/// A migrated store on a database of its own, which lives as long as the `TestEnv`.
async fn store(name: &str) -> (TestEnv, Store) {
    let env = TestEnv::new(name).await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    (env, store)
}

fn job(pipeline: Uuid, name: &str, needs: usize, rule: ReleaseRule, needed: bool) -> NewTask {
    NewTask {
        pipeline_id: Some(pipeline),
        job: Some(name.into()),
        needs_pending: needs as i32,
        release_when: (needs > 0).then(|| rule.as_str().to_string()),
        has_dependents: needed,
        ..new_task_row()
    }
}

fn pipeline(id: Uuid) -> NewPipeline {
    NewPipeline {
        id,
        name: "test".into(),
        created_by: "test".into(),
        idempotency_key: None,
        schedule_id: None,
        scheduled_for: None,
    }
}

/// Makes `ids` running under `lease`, as a start would (the status machine's checks are
/// the transitions' tests').
async fn run(env: &TestEnv, ids: &[Uuid], lease: LeaseId) {
    let mut db = env.db().await;
    sqlx::query(
        "UPDATE tasks SET status = 'running', lease_id = $2, attempt = 1 WHERE id = ANY($1)",
    )
    .bind(ids)
    .bind(lease)
    .execute(&mut db)
    .await
    .unwrap();
}

fn end(outcome: TaskStatus) -> RunEnd {
    RunEnd::by_server(outcome, "test")
}

fn policy() -> FinishPolicy {
    FinishPolicy {
        backoff: baton_core::after_run::TASK_RETRY,
        jitter_unit: 0.5,
    }
}

async fn rows(store: &Store, ids: &[Uuid]) -> Vec<TaskRecord> {
    let mut rows = store.tasks_by_ids(ids).await.unwrap();
    rows.sort_by_key(|t| ids.iter().position(|i| *i == t.id));
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sql_rule_is_the_core_rule() {
    let (env, _store) = store("store-pipeline-rule").await;
    let mut db = env.db().await;
    let mut cases = 0;
    for rule in [
        ReleaseRule::OnSuccess,
        ReleaseRule::OnFailure,
        ReleaseRule::Always,
    ] {
        for pending in 0..3 {
            for unmet in 0..3 {
                let sql: Option<String> =
                    sqlx::query_scalar("SELECT tasks_release_verdict($1, $2, $3)")
                        .bind(rule.as_str())
                        .bind(pending)
                        .bind(unmet)
                        .fetch_one(&mut db)
                        .await
                        .unwrap();
                let core = match verdict(rule, pending, unmet) {
                    Verdict::Wait => None,
                    Verdict::Release => Some("queued".to_string()),
                    Verdict::Skip => Some("skipped".to_string()),
                };
                assert_eq!(sql, core, "{rule:?} pending {pending} unmet {unmet}");
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 27);
}

/// Ten joins each need all twenty roots; the roots end at once, each in a transaction of
/// its own, some failing: each end is counted off each waiting join once (never twice:
/// no count goes below zero or past what ended), and each join is released or skipped
/// once, as its rule says.
#[tokio::test(flavor = "multi_thread")]
async fn needs_ending_at_once_release_each_job_exactly_once() {
    let (env, store) = store("store-pipeline-once").await;
    for round in 0..3 {
        let id = Uuid::now_v7();
        let roots: Vec<NewTask> = (0..20)
            .map(|i| job(id, &format!("root-{i}"), 0, ReleaseRule::OnSuccess, true))
            .collect();
        let rules = [
            ReleaseRule::OnSuccess,
            ReleaseRule::OnFailure,
            ReleaseRule::Always,
        ];
        let joins: Vec<NewTask> = (0..10)
            .map(|i| job(id, &format!("join-{i}"), 20, rules[i % 3], false))
            .collect();
        let edges: Vec<(Uuid, Uuid)> = joins
            .iter()
            .flat_map(|j| roots.iter().map(move |r| (j.id, r.id)))
            .collect();
        let all: Vec<NewTask> = roots.iter().chain(&joins).cloned().collect();
        store
            .pipeline_insert(&pipeline(id), &all, &edges, Utc::now())
            .await
            .unwrap();
        let root_ids: Vec<Uuid> = roots.iter().map(|t| t.id).collect();
        let lease = LeaseId::random();
        run(&env, &root_ids, lease).await;
        // In round 0 every root succeeds; in the others, one or several fail.
        let failing: Vec<usize> = match round {
            0 => vec![],
            1 => vec![7],
            _ => vec![0, 13, 19],
        };
        let ends = root_ids.iter().enumerate().map(|(i, root)| {
            let store = store.clone();
            let outcome = if failing.contains(&i) {
                TaskStatus::Failed
            } else {
                TaskStatus::Succeeded
            };
            let root = *root;
            tokio::spawn(async move {
                store
                    .task_finish_run(
                        root,
                        Fence {
                            lease_id: lease,
                            runner_id: None,
                        },
                        &end(outcome),
                        &policy(),
                        Utc::now(),
                    )
                    .await
                    .unwrap()
            })
        });
        for ended in futures::future::join_all(ends).await {
            assert!(ended.unwrap().status.is_terminal());
        }
        let join_ids: Vec<Uuid> = joins.iter().map(|t| t.id).collect();
        for (i, row) in rows(&store, &join_ids).await.into_iter().enumerate() {
            let rule = rules[i % 3];
            let (pending, unmet) = (row.needs_pending, row.needs_unmet as usize);
            if rule == ReleaseRule::OnSuccess && !failing.is_empty() {
                // Skipped at the first failure counted: the ends after it find it no
                // longer waiting and count nothing off.
                assert!(
                    unmet >= 1 && pending >= 0 && pending as usize + unmet <= 20,
                    "round {round} join-{i}: {pending} pending, {unmet} unmet"
                );
            } else {
                assert_eq!(
                    (pending, unmet),
                    (0, failing.len()),
                    "round {round} join-{i}: each end counted off once"
                );
            }
            let expected = match verdict(rule, 0, failing.len() as i32) {
                Verdict::Release => TaskStatus::Queued,
                Verdict::Skip => TaskStatus::Skipped,
                Verdict::Wait => unreachable!(),
            };
            assert_eq!(row.status, expected, "round {round} join-{i} ({rule:?})");
            assert!(row.released_by.is_some_and(|r| root_ids.contains(&r)));
        }
    }
}

/// A task naming a running task in `depends_on` while that task ends, over and over:
/// whichever commits first, the new task is released — never left waiting.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_inserted_as_its_need_ends_is_never_left_waiting() {
    let (env, store) = store("store-pipeline-race").await;
    for _ in 0..40 {
        let need = new_task_row();
        store.task_insert(&need, Utc::now()).await.unwrap();
        let lease = LeaseId::random();
        run(&env, &[need.id], lease).await;
        let waiter = NewTask {
            needs_pending: 1,
            release_when: Some(ReleaseRule::Always.as_str().into()),
            ..new_task_row()
        };
        let (edges, failed, policy) = ([(waiter.id, need.id)], end(TaskStatus::Failed), policy());
        let (inserted, ended) = tokio::join!(
            store.tasks_insert_with_needs(std::slice::from_ref(&waiter), &edges, Utc::now()),
            store.task_finish_run(
                need.id,
                Fence {
                    lease_id: lease,
                    runner_id: None,
                },
                &failed,
                &policy,
                Utc::now(),
            ),
        );
        inserted.unwrap();
        assert_eq!(ended.unwrap().status, TaskStatus::Failed);
        let row = store.task_get(waiter.id).await.unwrap();
        assert_eq!(row.status, TaskStatus::Queued, "left {:?}", row.status);
        assert_eq!((row.needs_pending, row.needs_unmet), (0, 1));
    }
}

/// A skip ends a job, so it counts off the jobs after it in the same transaction: a
/// chain of 300 skips in one statement's wake, down to an `always` job at its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_skip_cascades_down_a_long_chain_in_one_transaction() {
    let (env, store) = store("store-pipeline-chain").await;
    let id = Uuid::now_v7();
    let mut jobs = vec![job(id, "j0", 0, ReleaseRule::OnSuccess, true)];
    for i in 1..300 {
        jobs.push(job(id, &format!("j{i}"), 1, ReleaseRule::OnSuccess, true));
    }
    jobs.push(job(id, "last", 1, ReleaseRule::Always, false));
    let edges: Vec<(Uuid, Uuid)> = jobs.windows(2).map(|w| (w[1].id, w[0].id)).collect();
    store
        .pipeline_insert(&pipeline(id), &jobs, &edges, Utc::now())
        .await
        .unwrap();
    let lease = LeaseId::random();
    run(&env, &[jobs[0].id], lease).await;
    store
        .task_finish_run(
            jobs[0].id,
            Fence {
                lease_id: lease,
                runner_id: None,
            },
            &end(TaskStatus::Failed),
            &policy(),
            Utc::now(),
        )
        .await
        .unwrap();
    let ids: Vec<Uuid> = jobs.iter().map(|t| t.id).collect();
    let after = rows(&store, &ids).await;
    assert!(
        after[1..300]
            .iter()
            .all(|t| t.status == TaskStatus::Skipped)
    );
    assert_eq!(after[300].status, TaskStatus::Queued);
    assert!(after[1..].iter().all(|t| t.released_by == Some(jobs[0].id)));
    let released = store.tasks_released_by(&[jobs[0].id]).await.unwrap();
    assert_eq!(released.len(), 300);
}

/// Two batches, each ending two needs, lock the jobs waiting on them in opposite orders
/// (J1 needs A and D, J2 needs B and C; one batch ends A and B, the other C and D): one
/// of them meets a deadlock Postgres breaks, and is written again. Both ends hold, and
/// each job is released once.
#[tokio::test(flavor = "multi_thread")]
async fn batches_ending_needs_in_opposite_orders_both_commit() {
    let (env, store) = store("store-pipeline-deadlock").await;
    for _ in 0..10 {
        let id = Uuid::now_v7();
        let needs: Vec<NewTask> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| job(id, n, 0, ReleaseRule::OnSuccess, true))
            .collect();
        let j1 = job(id, "j1", 2, ReleaseRule::OnSuccess, false);
        let j2 = job(id, "j2", 2, ReleaseRule::OnSuccess, false);
        let edges = vec![
            (j1.id, needs[0].id),
            (j1.id, needs[3].id),
            (j2.id, needs[1].id),
            (j2.id, needs[2].id),
        ];
        let all: Vec<NewTask> = needs.iter().chain([&j1, &j2]).cloned().collect();
        store
            .pipeline_insert(&pipeline(id), &all, &edges, Utc::now())
            .await
            .unwrap();
        let lease = LeaseId::random();
        let ids: Vec<Uuid> = needs.iter().map(|t| t.id).collect();
        run(&env, &ids, lease).await;
        let batch = |pair: [Uuid; 2]| {
            let store = store.clone();
            tokio::spawn(async move {
                let work = baton_store::Work {
                    finishes: pair
                        .iter()
                        .map(|task| baton_store::FinishRun {
                            task: *task,
                            fence: Fence {
                                lease_id: lease,
                                runner_id: None,
                            },
                            end: end(TaskStatus::Succeeded),
                            jitter_unit: 0.5,
                        })
                        .collect(),
                    ..Default::default()
                };
                store
                    .write_now(&work, &baton_store::Apply::at(Utc::now()))
                    .await
            })
        };
        let (first, second) = tokio::join!(batch([ids[0], ids[1]]), batch([ids[2], ids[3]]));
        for done in [first.unwrap(), second.unwrap()] {
            let done = done.expect("a batch that met a deadlock is written again");
            assert!(done.finishes.iter().all(|f| f.is_ok()));
        }
        for row in rows(&store, &[j1.id, j2.id]).await {
            assert_eq!((row.status, row.needs_pending), (TaskStatus::Queued, 0));
        }
    }
}

/// An output of 3,001 characters, most of two bytes, cut to 4,096 bytes for the job that
/// needs it: at a character's edge, so the end that releases the job is written.
#[tokio::test(flavor = "multi_thread")]
async fn a_long_output_reaches_the_job_after_it_cut_at_a_characters_edge() {
    let (env, store) = store("store-pipeline-utf8").await;
    let id = Uuid::now_v7();
    let build = job(id, "build", 0, ReleaseRule::OnSuccess, true);
    let test = job(id, "test", 1, ReleaseRule::OnSuccess, false);
    store
        .pipeline_insert(
            &pipeline(id),
            &[build.clone(), test.clone()],
            &[(test.id, build.id)],
            Utc::now(),
        )
        .await
        .unwrap();
    let lease = LeaseId::random();
    run(&env, &[build.id], lease).await;
    let long = format!("x{}", "é".repeat(3000));
    let ended = store
        .task_finish_run(
            build.id,
            Fence {
                lease_id: lease,
                runner_id: None,
            },
            &RunEnd {
                outputs: Some(serde_json::json!({ "notes": long, "version": "1.0" })),
                ..end(TaskStatus::Succeeded)
            },
            &policy(),
            Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(ended.status, TaskStatus::Succeeded);
    let released = store.task_get(test.id).await.unwrap();
    assert_eq!(released.status, TaskStatus::Queued);
    let notes = &released.env.0["BATON_NEEDS_BUILD_NOTES"];
    assert!(
        notes.len() <= 4096 && notes.len() >= 4095,
        "{}",
        notes.len()
    );
    assert!(long.starts_with(notes.as_str()));
    assert_eq!(released.env.0["BATON_NEEDS_BUILD_VERSION"], "1.0");
}

/// Tasks inserted beside needs that already ended, one skipped at once: the skip is
/// counted off the task after it once, so that one still waits for its other need — and
/// a skipped job's webhook is due as any end's.
#[tokio::test(flavor = "multi_thread")]
async fn a_skip_at_insert_is_counted_once_and_its_webhook_is_due() {
    let (env, store) = store("store-pipeline-insert-skip").await;
    let failed = new_task_row();
    let still_running = new_task_row();
    store.task_insert(&failed, Utc::now()).await.unwrap();
    store.task_insert(&still_running, Utc::now()).await.unwrap();
    let lease = LeaseId::random();
    run(&env, &[failed.id, still_running.id], lease).await;
    store
        .task_finish_run(
            failed.id,
            Fence {
                lease_id: lease,
                runner_id: None,
            },
            &end(TaskStatus::Failed),
            &policy(),
            Utc::now(),
        )
        .await
        .unwrap();
    let skipped = NewTask {
        needs_pending: 1,
        release_when: Some("on_success".into()),
        has_dependents: true,
        notify_url: Some("http://127.0.0.1:9/hook".into()),
        ..new_task_row()
    };
    let after = NewTask {
        needs_pending: 2,
        release_when: Some("always".into()),
        ..new_task_row()
    };
    store
        .tasks_insert_with_needs(
            &[skipped.clone(), after.clone()],
            &[
                (skipped.id, failed.id),
                (after.id, skipped.id),
                (after.id, still_running.id),
            ],
            Utc::now(),
        )
        .await
        .unwrap();
    let rows = rows(&store, &[skipped.id, after.id]).await;
    assert_eq!(rows[0].status, TaskStatus::Skipped);
    assert_eq!(
        (rows[1].status, rows[1].needs_pending, rows[1].needs_unmet),
        (TaskStatus::Waiting, 1, 1),
        "the skip counted once; the running need still awaited"
    );
    let mut db = env.db().await;
    let hooks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox WHERE task_id = $1 AND idempotency_key = $1 || ':skipped'",
    )
    .bind(skipped.id)
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(hooks, 1);
}

/// Two ends committed in the opposite order of their times, as two nodes' batches can
/// be (each takes its time, then waits for the other's lock on the job): the job is
/// released at the later of them, never before a need it waited for ended — and a skip
/// is never dated before a need it counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_is_released_no_earlier_than_its_needs_ended() {
    let (env, store) = store("store-pipeline-release-time").await;
    for (late_outcome, rule, expected) in [
        (
            TaskStatus::Succeeded,
            ReleaseRule::OnSuccess,
            TaskStatus::Queued,
        ),
        (
            TaskStatus::Failed,
            ReleaseRule::OnFailure,
            TaskStatus::Queued,
        ),
        (
            TaskStatus::Succeeded,
            ReleaseRule::OnFailure,
            TaskStatus::Skipped,
        ),
    ] {
        let id = Uuid::now_v7();
        let first = job(id, "first", 0, ReleaseRule::OnSuccess, true);
        let second = job(id, "second", 0, ReleaseRule::OnSuccess, true);
        let join = job(id, "join", 2, rule, false);
        let edges = [(join.id, first.id), (join.id, second.id)];
        let all = [first.clone(), second.clone(), join.clone()];
        store
            .pipeline_insert(&pipeline(id), &all, &edges, Utc::now())
            .await
            .unwrap();
        let lease = LeaseId::random();
        run(&env, &[first.id, second.id], lease).await;
        // Postgres keeps microseconds.
        let earlier = Utc::now().trunc_subsecs(6);
        let later = earlier + chrono::Duration::milliseconds(40);
        // Committed first, dated later; then the end dated earlier.
        for (task, outcome, at) in [
            (first.id, late_outcome, later),
            (second.id, late_outcome, earlier),
        ] {
            store
                .task_finish_run(
                    task,
                    Fence {
                        lease_id: lease,
                        runner_id: None,
                    },
                    &end(outcome),
                    &policy(),
                    at,
                )
                .await
                .unwrap();
        }
        let row = store.task_get(join.id).await.unwrap();
        assert_eq!(row.status, expected, "{rule:?} after two {late_outcome:?}");
        let dated = if expected == TaskStatus::Queued {
            row.queued_at
        } else {
            row.finished_at
        };
        assert_eq!(
            dated,
            Some(later),
            "{rule:?}: dated at the later end, not the last counted"
        );
        assert_eq!(row.updated_at, later);
    }
}
