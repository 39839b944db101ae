//! The store's batched run end decides retries in SQL, looking the delay up in
//! `Backoff`'s schedule or computing it from the task's own retry policy; here it is held
//! to `baton_core::after_run::after_run`, case by case, against a real Postgres, and a batch
//! is shown to fence each row on its own. A start is fenced too: a lease whose run
//! already ended never starts the task again.

use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_localcluster::testing as support;

use baton_core::TaskStatus;
use baton_core::after_run::{AfterRun, EndedBy, RunEnded, after_run, timed_out};
use baton_core::backoff::Backoff;
use baton_core::retry_policy::RetryPolicy;
use baton_store::{Fence, FinishPolicy, NewTask, RunEnd, Store, StoreOptions, Work};
use chrono::Utc;
use std::time::Duration;
use support::*;
use uuid::Uuid;

const BACKOFF: Backoff = Backoff {
    initial: Duration::from_secs(2),
    max: Duration::from_secs(20),
    jitter: 0.2,
};

fn policy(jitter_unit: f64) -> FinishPolicy {
    FinishPolicy {
        backoff: BACKOFF,
        jitter_unit,
    }
}

fn new_task(max_attempts: i32) -> NewTask {
    NewTask {
        max_attempts,
        ..new_task_row()
    }
}

/// `task` inserted, then put in `status` at `attempt`, held by `runner` under `lease`.
async fn running_task(
    store: &Store,
    env: &TestEnv,
    status: TaskStatus,
    attempt: i32,
    task: NewTask,
    runner: RunnerId,
    lease: LeaseId,
) -> Uuid {
    let (task, _) = store.task_insert(&task, Utc::now()).await.unwrap();
    sqlx::query(
        "UPDATE tasks SET status = $2, attempt = $3, runner_id = $4, lease_id = $5,
                          started_at = now() WHERE id = $1",
    )
    .bind(task.id)
    .bind(status.as_str())
    .bind(attempt)
    .bind(runner)
    .bind(lease)
    .execute(&mut env.db().await)
    .await
    .unwrap();
    task.id
}

/// The row the run end wrote at `now` is what `after_run` decided: a retry after its
/// delay (to the microsecond Postgres keeps), or the terminal status.
fn ended_as_decided(
    ended: &baton_store::TaskRecord,
    decided: AfterRun,
    now: chrono::DateTime<Utc>,
    case: &str,
) {
    match decided {
        AfterRun::Retry { delay } => {
            assert_eq!(ended.status, TaskStatus::Scheduled, "{case}");
            let waits = (ended.run_at.unwrap() - now).to_std().unwrap();
            let off = waits.as_secs_f64() - delay.as_secs_f64();
            assert!(off.abs() < 0.001, "{case}: waits {waits:?}, not {delay:?}");
            assert_eq!(ended.finished_at, None, "{case}");
        }
        AfterRun::Terminal(status) => {
            assert_eq!(ended.status, status, "{case}");
            assert_eq!(ended.finished_at, Some(now), "{case}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_batched_run_end_retries_exactly_as_after_run_says() {
    let env = TestEnv::new("store-after-run").await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    let (runner, lease) = (RunnerId::random(), LeaseId::random());
    let outcomes = [
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::TimedOut,
    ];
    let mut cases = 0;
    for (by, reporter) in [(EndedBy::Runner, Some(runner)), (EndedBy::Server, None)] {
        for from in [TaskStatus::Running, TaskStatus::Cancelling] {
            for outcome in outcomes {
                for max_attempts in 1..=3 {
                    for attempt in 1..=max_attempts {
                        let unit = 0.1 + 0.1 * f64::from(attempt);
                        let id = running_task(
                            &store,
                            &env,
                            from,
                            attempt,
                            new_task(max_attempts),
                            runner,
                            lease,
                        )
                        .await;
                        // Postgres keeps microseconds.
                        let now =
                            chrono::DateTime::from_timestamp_micros(Utc::now().timestamp_micros())
                                .unwrap();
                        let ended = store
                            .task_finish_run(
                                id,
                                Fence {
                                    lease_id: lease,
                                    runner_id: reporter,
                                },
                                &RunEnd::by_server(outcome, "test"),
                                &policy(unit),
                                now,
                            )
                            .await
                            .unwrap();
                        let case = format!(
                            "{from} -> {outcome} by {by:?} at attempt {attempt}/{max_attempts}"
                        );
                        let run = RunEnded::without_exit_code(from, outcome, by);
                        let decided = after_run(&run, attempt, max_attempts, None, &BACKOFF, unit);
                        ended_as_decided(&ended, decided, now, &case);
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 2 * 2 * 4 * 6);
}

/// The same, for tasks with their own retry policy: exit-code lists, `on_timeout` (the
/// server's `timed_out` and the runner's own timeout report), and the policy's backoff
/// with its jitter and cap.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_policy_in_the_row_retries_exactly_as_after_run_says() {
    let env = TestEnv::new("store-retry-policy").await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    let (runner, lease) = (RunnerId::random(), LeaseId::random());
    let backoff = RetryPolicy {
        backoff_base_s: Some(1.5),
        backoff_factor: Some(3.0),
        backoff_cap_s: Some(10.0),
        jitter: Some(0.5),
        ..RetryPolicy::default()
    };
    let policies = [
        RetryPolicy {
            on_exit_codes: Some(vec![3, 7]),
            ..backoff.clone()
        },
        RetryPolicy {
            never_on_exit_codes: Some(vec![4]),
            on_timeout: Some(false),
            ..backoff.clone()
        },
        RetryPolicy {
            on_timeout: Some(true),
            ..backoff.clone()
        },
    ];
    // (outcome, exit code, error)
    let ends: [(TaskStatus, Option<i32>, Option<&str>); 6] = [
        (TaskStatus::Failed, Some(3), None),
        (TaskStatus::Failed, Some(4), None),
        (TaskStatus::Failed, None, Some("timed out after 5 s")),
        (TaskStatus::Failed, None, Some("killed by signal 9")),
        (TaskStatus::TimedOut, None, None),
        (TaskStatus::Succeeded, Some(0), None),
    ];
    let mut cases = 0;
    for retry in &policies {
        for (outcome, exit_code, error) in ends {
            for attempt in 1..=4 {
                let unit = 0.05 + 0.2 * f64::from(attempt);
                let task = NewTask {
                    retry_policy: Some(retry.clone()),
                    ..new_task(4)
                };
                let id = running_task(
                    &store,
                    &env,
                    TaskStatus::Running,
                    attempt,
                    task,
                    runner,
                    lease,
                )
                .await;
                let now =
                    chrono::DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap();
                let end = RunEnd {
                    outcome,
                    exit_code,
                    error: error.map(str::to_string),
                    outputs: None,
                    log_size: None,
                };
                let fence = Fence {
                    lease_id: lease,
                    runner_id: Some(runner),
                };
                let ended = store
                    .task_finish_run(id, fence, &end, &policy(unit), now)
                    .await
                    .unwrap();
                let run = RunEnded {
                    from: TaskStatus::Running,
                    outcome,
                    by: EndedBy::Runner,
                    exit_code,
                    timed_out: timed_out(outcome, exit_code, error),
                };
                let case = format!("{retry:?}: {outcome} {exit_code:?} {error:?} at {attempt}/4");
                let decided = after_run(&run, attempt, 4, Some(retry), &BACKOFF, unit);
                ended_as_decided(&ended, decided, now, &case);
                cases += 1;
            }
        }
    }
    assert_eq!(cases, 3 * 6 * 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_fences_each_row_by_its_own_lease_and_runner() {
    let env = TestEnv::new("store-batch-fence").await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    let (runner, lease) = (RunnerId::random(), LeaseId::random());
    let running = |runner| {
        let (store, env) = (&store, &env);
        async move {
            running_task(
                store,
                env,
                TaskStatus::Running,
                1,
                new_task(1),
                runner,
                lease,
            )
            .await
        }
    };
    let ok = running(runner).await;
    let stale = running(runner).await;
    let other = running(RunnerId::random()).await;
    let end = RunEnd::by_server(TaskStatus::Succeeded, "done");
    let finish = |task, lease_id| baton_store::FinishRun {
        task,
        fence: Fence {
            lease_id,
            runner_id: Some(runner),
        },
        end: end.clone(),
        jitter_unit: 0.5,
    };
    let done = store
        .write_now(
            &Work {
                finishes: vec![
                    finish(ok, lease),
                    finish(stale, LeaseId::random()),
                    finish(other, lease),
                    finish(Uuid::now_v7(), lease),
                    // The same report twice in one batch: the second is a repeat.
                    finish(ok, lease),
                ],
                ..Work::default()
            },
            &baton_store::Apply {
                policy: policy(0.5),
                ..baton_store::Apply::at(Utc::now())
            },
        )
        .await
        .unwrap();
    let got: Vec<String> = done
        .finishes
        .iter()
        .map(|r| match r {
            Ok(t) => t.status.to_string(),
            Err(baton_store::StoreError::Conflict { .. }) => "conflict".into(),
            Err(baton_store::StoreError::NotFound) => "not found".into(),
            Err(e) => format!("{e}"),
        })
        .collect();
    assert_eq!(
        got,
        [
            "succeeded",
            "conflict",
            "not found",
            "not found",
            "succeeded"
        ]
    );
    let status = |id: Uuid| {
        let env = &env;
        async move {
            sqlx::query_scalar::<_, String>("SELECT status FROM tasks WHERE id = $1")
                .bind(id)
                .fetch_one(&mut env.db().await)
                .await
                .unwrap()
        }
    };
    assert_eq!(status(stale).await, "running");
    assert_eq!(status(other).await, "running");
}

/// A node frozen between its claim check and its start write, while the runner's resent
/// start went through another node, ran and failed: the task is queued again for its
/// retry when the frozen write lands. The lease already ran once; it must not start the
/// retry, which another runner is about to lease.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_whose_run_ended_never_starts_the_task_again() {
    let env = TestEnv::new("store-start-fence").await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    let (task, _) = store.task_insert(&new_task(2), Utc::now()).await.unwrap();
    let runner = registered_runner(&store).await;
    let start = |lease_id| Work {
        starts: vec![baton_store::StartRun {
            task: task.id,
            lease_id,
            runner_id: runner,
            boot_id: None,
            leased_at: Utc::now(),
        }],
        ..Work::default()
    };
    let first = LeaseId::random();
    let started = store
        .write_now(&start(first), &baton_store::Apply::at(Utc::now()))
        .await
        .unwrap();
    assert_eq!(started.starts[0].as_ref().unwrap().attempt, 1);
    let failed = RunEnd {
        outcome: TaskStatus::Failed,
        exit_code: Some(1),
        error: None,
        outputs: None,
        log_size: Some(0),
    };
    let fence = Fence {
        lease_id: first,
        runner_id: Some(runner),
    };
    let ended = store
        .task_finish_run(task.id, fence, &failed, &policy(0.5), Utc::now())
        .await
        .unwrap();
    assert_eq!(ended.status, TaskStatus::Scheduled);
    let due = ended.run_at.unwrap() + chrono::Duration::seconds(1);
    let promoted = store.tasks_promote(&[task.id], due).await.unwrap();
    assert_eq!(promoted[0].status, TaskStatus::Queued);
    // Redis handed the retry to a lease that never started, and the requeue voided it:
    // that lease is refused too, and the last run's stays refused.
    let voided = LeaseId::random();
    assert_eq!(
        store
            .tasks_void_leases(&[(task.id, voided)], due)
            .await
            .unwrap(),
        vec![task.id]
    );

    for (lease, what) in [(first, "the first lease"), (voided, "a voided lease")] {
        let late = store
            .write_now(&start(lease), &baton_store::Apply::at(due))
            .await
            .unwrap();
        // Refused; whether as stale or as not this runner's, the runner abandons it.
        assert!(
            matches!(
                late.starts[0],
                Err(baton_store::StoreError::Conflict { .. } | baton_store::StoreError::NotFound)
            ),
            "{what} started the retry: {:?}",
            late.starts[0]
        );
    }
    let row = store.task_get(task.id).await.unwrap();
    assert_eq!((row.status, row.attempt), (TaskStatus::Queued, 1));

    let retry = store
        .write_now(&start(LeaseId::random()), &baton_store::Apply::at(due))
        .await
        .unwrap();
    assert_eq!(retry.starts[0].as_ref().unwrap().attempt, 2);
}
