//! A task's life beyond one clean run: delayed start, retries, completion webhooks,
//! expiry in the queue, the server's own timeout, a deleted runner, lease replay and
//! retention.

use baton_core::LeaseId;
use baton_localcluster::testing as support;

use axum::http::HeaderMap;
use baton_client::{Client, CompleteTask, LeaseRequest, LeasedTask, Outcome, SubmitTask};
use baton_core::TaskStatus;
use chrono::Utc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;
use uuid::Uuid;

const BOOT: Uuid = Uuid::from_u128(0xb007);

fn lease_req(max: u32) -> LeaseRequest {
    lease_now(BOOT, max)
}

async fn lease(runner: &Client, max: u32) -> Vec<LeasedTask> {
    runner.lease(&lease_req(max)).await.unwrap().tasks
}

fn report(lease_id: LeaseId, outcome: Outcome, exit_code: i32) -> CompleteTask {
    CompleteTask {
        outcome,
        exit_code: Some(exit_code),
        ..CompleteTask::succeeded(lease_id)
    }
}

fn simple() -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delayed_task_waits_scheduled_then_runs() {
    let env = TestEnv::new("life-delayed").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let run_at = Utc::now() + chrono::Duration::seconds(2);
    let (t, _) = user
        .submit(&SubmitTask {
            run_at: Some(run_at),
            ..simple()
        })
        .await
        .unwrap();
    assert_eq!(t.status, TaskStatus::Scheduled);
    assert!(lease(&runner, 1).await.is_empty(), "not before its time");
    let got = wait_for(
        "the task to be promoted",
        Duration::from_secs(10),
        || async { lease(&runner, 1).await.into_iter().next() },
    )
    .await;
    assert_eq!(got.id, t.id);
    assert!(Utc::now() >= run_at);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_retries_while_attempts_remain() {
    let env = TestEnv::new("life-retry").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (t, _) = user
        .submit(&SubmitTask {
            max_attempts: Some(2),
            ..simple()
        })
        .await
        .unwrap();

    let first = lease(&runner, 1).await.remove(0);
    runner.start(t.id, first.lease_id).await.unwrap();
    let after = runner
        .complete(t.id, &report(first.lease_id, Outcome::Failed, 1))
        .await
        .unwrap();
    assert_eq!(
        after.status,
        TaskStatus::Scheduled,
        "attempt 1 of 2 failed: retry"
    );
    assert!(after.run_at.is_some());

    let second = wait_for("the retry", Duration::from_secs(10), || async {
        lease(&runner, 1).await.into_iter().next()
    })
    .await;
    assert_eq!(second.attempt, 2);
    runner.start(t.id, second.lease_id).await.unwrap();
    let done = runner
        .complete(t.id, &report(second.lease_id, Outcome::Failed, 1))
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Failed, "no attempts left");
    assert_eq!(done.attempt, 2);
    // The first run's lease is long gone.
    let stale = runner
        .complete(t.id, &report(first.lease_id, Outcome::Succeeded, 0))
        .await
        .unwrap_err();
    assert_eq!(stale.status().map(|s| s.as_u16()), Some(409));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completion_webhook_is_delivered_with_an_idempotency_key_and_retried() {
    // A receiver that refuses the first delivery.
    let got: Arc<Mutex<Vec<(String, serde_json::Value)>>> = Arc::default();
    let refused_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let app = {
        let (got, refused_once) = (got.clone(), refused_once.clone());
        axum::Router::new().route(
            "/hook",
            axum::routing::post(
                move |headers: HeaderMap, axum::Json(body): axum::Json<serde_json::Value>| {
                    let (got, refused_once) = (got.clone(), refused_once.clone());
                    async move {
                        if !refused_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                            return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                        }
                        let key = headers["idempotency-key"].to_str().unwrap().to_string();
                        got.lock().unwrap().push((key, body));
                        axum::http::StatusCode::OK
                    }
                },
            ),
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let env = TestEnv::new("life-webhook").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (t, _) = user
        .submit(&SubmitTask {
            notify_url: Some(hook),
            ..simple()
        })
        .await
        .unwrap();
    let leased = lease(&runner, 1).await.remove(0);
    runner.start(t.id, leased.lease_id).await.unwrap();
    runner
        .complete(t.id, &report(leased.lease_id, Outcome::Succeeded, 0))
        .await
        .unwrap();

    let deliveries = wait_for("the webhook", Duration::from_secs(15), || async {
        let got = got.lock().unwrap().clone();
        (!got.is_empty()).then_some(got)
    })
    .await;
    assert_eq!(deliveries.len(), 1);
    let (key, body) = &deliveries[0];
    assert_eq!(key, &format!("{}:succeeded", t.id));
    assert_eq!(body["event"], "task.finished");
    assert_eq!(body["task"]["id"], t.id.to_string());
    assert_eq!(body["task"]["status"], "succeeded");
    let delivered: Option<chrono::DateTime<Utc>> =
        sqlx::query_scalar("SELECT delivered_at FROM outbox WHERE task_id = $1")
            .bind(t.id)
            .fetch_one(&mut env.db().await)
            .await
            .unwrap();
    assert!(delivered.is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_nobody_takes_expires() {
    let env = TestEnv::new("life-expire").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (t, _) = user
        .submit(&SubmitTask {
            queue_timeout_s: Some(1),
            labels: vec!["nobody-has-this".into()],
            ..simple()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, t.id).await;
    assert_eq!(done.status, TaskStatus::Expired);
    let mut redis = env.redis().await;
    let left: i64 = redis::cmd("ZCARD")
        .arg(format!("{}q:default:nobody-has-this", env.redis_prefix))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(left, 0, "the expired task left its queue");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_times_out_a_run_whose_runner_never_reports() {
    let env = TestEnv::new("life-timeout").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (t, _) = user
        .submit(&SubmitTask {
            timeout_s: Some(1),
            ..simple()
        })
        .await
        .unwrap();
    let leased = lease(&runner, 1).await.remove(0);
    runner.start(t.id, leased.lease_id).await.unwrap();
    // The runner stays alive (heartbeats) but never reports.
    let done = wait_for(
        "the server to time the run out",
        Duration::from_secs(15),
        || async {
            let _ = runner
                .heartbeat(&heartbeat_of(BOOT, t.id, leased.lease_id))
                .await;
            user.task_get(t.id)
                .await
                .ok()
                .filter(|t| t.status.is_terminal())
        },
    )
    .await;
    assert_eq!(done.status, TaskStatus::TimedOut);
    // And the runner hears its lease is gone.
    let verdict = runner
        .heartbeat(&heartbeat_of(BOOT, t.id, leased.lease_id))
        .await
        .unwrap();
    assert_eq!(verdict.gone, vec![t.id]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_runner_s_tasks_are_requeued_or_ended() {
    let env = TestEnv::new("life-deleted").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (runner_id, runner) = register_runner(&node.url, &[], 2).await;
    let (started, _) = user.submit(&simple()).await.unwrap();
    let (waiting, _) = user.submit(&simple()).await.unwrap();
    let leased = lease(&runner, 2).await;
    let lease_of = |id| leased.iter().find(|l| l.id == id).unwrap().lease_id;
    runner
        .start(started.id, lease_of(started.id))
        .await
        .unwrap();
    sqlx::query("UPDATE runners SET deleted_at = now() WHERE id = $1")
        .bind(runner_id)
        .execute(&mut env.db().await)
        .await
        .unwrap();
    let ended = env.wait_terminal(&user, started.id).await;
    assert_eq!(ended.status, TaskStatus::Failed);
    assert_eq!(ended.error.as_deref(), Some("runner deleted"));
    // An agent cut off from every node never hears it was deleted and kills its task
    // only at its own fence; the run is ended no sooner than a lost runner's would be
    // (`--runner-lost-after-s 6` in FAST_HA), not at the offline threshold (4).
    let held = ended.finished_at.unwrap() - ended.started_at.unwrap();
    assert!(
        held >= chrono::Duration::milliseconds(5_500),
        "ended {held} after its start"
    );
    wait_for(
        "the unstarted task to be requeued",
        Duration::from_secs(10),
        || async {
            (user.task_get(waiting.id).await.ok()?.status == TaskStatus::Queued).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_lease_request_gets_the_same_tasks_back_on_any_node() {
    let env = TestEnv::new("life-replay").await;
    let node_a = env.node_with(&FAST_HA).await;
    let node_b = env.node_with(&FAST_HA).await;
    let user = user_client(&node_a.url);
    let (_, token) = register_runner_token(&node_a.url, &[], 4).await;
    let on_a = Client::new(&node_a.url, Some(token.clone())).unwrap();
    let on_b = Client::new(&node_b.url, Some(token)).unwrap();
    for _ in 0..2 {
        user.submit(&simple()).await.unwrap();
    }
    let request = lease_req(4);
    let first = on_a.lease(&request).await.unwrap().tasks;
    assert_eq!(first.len(), 2);
    // The answer was lost on the wire; the runner sends the same request to node B.
    let replayed = on_b.lease(&request).await.unwrap().tasks;
    assert_eq!(replayed, first, "the same tasks under the same leases");
    // Once a task is started, it is no longer replayed.
    on_b.start(first[0].id, first[0].lease_id).await.unwrap();
    let again = on_a.lease(&request).await.unwrap().tasks;
    assert_eq!(again, vec![first[1].clone()]);
    // A new request gets nothing more: nothing was stranded or handed out twice.
    assert!(lease(&on_a, 4).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn finished_tasks_and_their_logs_are_deleted_after_the_retention() {
    let env = TestEnv::new("life-retention").await;
    let mut args = FAST_HA.to_vec();
    args.extend(["--retention-s", "1", "--janitor-interval-ms", "300"]);
    let node = env.node_with(&args).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (done, _) = user.submit(&simple()).await.unwrap();
    let (pending, _) = user
        .submit(&SubmitTask {
            labels: vec!["later".into()],
            ..simple()
        })
        .await
        .unwrap();
    let leased = lease(&runner, 1).await.remove(0);
    runner.start(done.id, leased.lease_id).await.unwrap();
    runner
        .log_append(done.id, leased.lease_id, 0, "output".into())
        .await
        .unwrap();
    runner
        .complete(done.id, &report(leased.lease_id, Outcome::Succeeded, 0))
        .await
        .unwrap();
    wait_for(
        "the finished task to be deleted",
        Duration::from_secs(15),
        || async {
            let gone = user.task_get(done.id).await.err()?.status()?.as_u16() == 404;
            gone.then_some(())
        },
    )
    .await;
    let logs: i64 = sqlx::query_scalar("SELECT count(*) FROM task_logs WHERE task_id = $1")
        .bind(done.id)
        .fetch_one(&mut env.db().await)
        .await
        .unwrap();
    assert_eq!(logs, 0);
    assert_eq!(
        user.task_get(pending.id).await.unwrap().status,
        TaskStatus::Queued,
        "unfinished tasks stay"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn runner_presence_reaches_postgres_in_batches() {
    let env = TestEnv::new("life-presence").await;
    let node = env.node_with(&FAST_HA).await;
    let (runner_id, runner) = register_runner(&node.url, &[], 1).await;
    lease(&runner, 1).await;
    let (seen, boot): (Option<chrono::DateTime<Utc>>, Option<Uuid>) = wait_for(
        "presence to be flushed to postgres",
        Duration::from_secs(20),
        || async {
            let row: (Option<chrono::DateTime<Utc>>, Option<Uuid>) =
                sqlx::query_as("SELECT last_seen, boot_id FROM runners WHERE id = $1")
                    .bind(runner_id)
                    .fetch_one(&mut env.db().await)
                    .await
                    .ok()?;
            row.0.is_some().then_some(row)
        },
    )
    .await;
    assert!(seen.is_some());
    assert_eq!(boot, Some(BOOT));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_its_runner_stopped_listing_is_ended() {
    let env = TestEnv::new("life-forgotten").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 2).await;
    let (kept, _) = user.submit(&simple()).await.unwrap();
    let (dropped, _) = user
        .submit(&SubmitTask {
            max_attempts: Some(2),
            ..simple()
        })
        .await
        .unwrap();
    let leased = lease(&runner, 2).await;
    for l in &leased {
        runner.start(l.id, l.lease_id).await.unwrap();
    }
    let lease_of = |id| leased.iter().find(|l| l.id == id).unwrap().lease_id;
    // The runner goes on heartbeating, listing only one of its two runs (it gave up on
    // reporting the other, or fenced itself and came back).
    let beat = heartbeat_of(BOOT, kept.id, lease_of(kept.id));
    let retried = wait_for(
        "the forgotten run to be ended",
        Duration::from_secs(20),
        || async {
            runner.heartbeat(&beat).await.ok()?;
            user.task_get(dropped.id)
                .await
                .ok()
                .filter(|t| t.status == TaskStatus::Scheduled)
        },
    )
    .await;
    assert_eq!(
        retried.error.as_deref(),
        Some("the runner no longer runs it")
    );
    assert_eq!(
        user.task_get(kept.id).await.unwrap().status,
        TaskStatus::Running,
        "a listed run is kept"
    );
}
