//! The runner protocol spoken directly over HTTP: label routing, batched leases, priority,
//! the lease as a fence (stale reports refused, nothing changed), and what happens to a
//! claim when Postgres no longer calls the task queued.

use baton_core::LeaseId;
use baton_localcluster::testing as support;

use baton_client::{
    Client, CompleteTask, LeaseRequest, LeaseResponse, Outcome, StatusCode, SubmitTask,
};
use baton_core::TaskStatus;
use std::time::Duration;
use support::*;
use uuid::Uuid;

fn lease_req(max: u32) -> LeaseRequest {
    lease_now(Uuid::new_v4(), max)
}

async fn lease(runner: &Client, max: u32) -> LeaseResponse {
    runner.lease(&lease_req(max)).await.unwrap()
}

fn task(labels: &[&str], priority: i32) -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        labels: labels.iter().map(|s| s.to_string()).collect(),
        priority,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_wait_for_a_runner_whose_labels_cover_theirs() {
    let env = TestEnv::new("proto-labels").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, plain) = register_runner(&node.url, &["linux"], 4).await;
    let (_, gpu) = register_runner(&node.url, &["linux", "gpu"], 4).await;

    let (needs_gpu, _) = user.submit(&task(&["gpu", "linux"], 0)).await.unwrap();
    assert!(
        lease(&plain, 4).await.tasks.is_empty(),
        "a runner without gpu must not get it"
    );
    assert_eq!(
        user.task_get(needs_gpu.id).await.unwrap().status,
        TaskStatus::Queued
    );
    let got = lease(&gpu, 4).await;
    assert_eq!(got.tasks.len(), 1);
    assert_eq!(got.tasks[0].id, needs_gpu.id);
    assert_eq!(got.tasks[0].labels, vec!["gpu", "linux"]);

    // A task with no labels goes to anyone; one with labels nobody has waits.
    let (anyone, _) = user.submit(&task(&[], 0)).await.unwrap();
    let (nobody, _) = user.submit(&task(&["arm64"], 0)).await.unwrap();
    let got = lease(&plain, 4).await;
    assert_eq!(
        got.tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![anyone.id]
    );
    assert!(lease(&gpu, 4).await.tasks.is_empty());
    assert_eq!(
        user.task_get(nobody.id).await.unwrap().status,
        TaskStatus::Queued
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_lease_takes_several_tasks_best_first() {
    let env = TestEnv::new("proto-max").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (runner_id, runner) = register_runner(&node.url, &["linux"], 8).await;

    let (low, _) = user.submit(&task(&[], -5)).await.unwrap();
    let (first, _) = user.submit(&task(&[], 0)).await.unwrap();
    let (second, _) = user.submit(&task(&["linux"], 0)).await.unwrap();
    let (high, _) = user.submit(&task(&[], 10)).await.unwrap();

    let got = lease(&runner, 3).await;
    let ids: Vec<Uuid> = got.tasks.iter().map(|t| t.id).collect();
    assert_eq!(
        ids,
        vec![high.id, first.id, second.id],
        "priority first, then age, across queues"
    );
    for t in &got.tasks {
        let seen = user.task_get(t.id).await.unwrap();
        assert_eq!(seen.status, TaskStatus::Leased);
        assert_eq!(seen.runner_id, Some(runner_id));
    }
    let rest = lease(&runner, 3).await;
    assert_eq!(
        rest.tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![low.id]
    );
    assert!(
        lease(&runner, 3).await.tasks.is_empty(),
        "each task is handed out once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_lease_is_refused_and_changes_nothing() {
    let env = TestEnv::new("proto-stale").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (_, other_runner) = register_runner(&node.url, &[], 1).await;
    let (submitted, _) = user.submit(&task(&[], 0)).await.unwrap();
    let leased = lease(&runner, 1).await.tasks.remove(0);
    let stale = LeaseId::random();

    let conflict = |r: Result<_, baton_client::ClientError>| {
        let e = r.expect_err("must be refused");
        assert_eq!(e.status(), Some(StatusCode::CONFLICT), "{e}");
    };
    conflict(runner.start(submitted.id, stale).await.map(|_| ()));
    assert_eq!(
        user.task_get(submitted.id).await.unwrap().status,
        TaskStatus::Leased
    );

    runner.start(submitted.id, leased.lease_id).await.unwrap();
    let before = user.task_get(submitted.id).await.unwrap();
    assert_eq!(before.status, TaskStatus::Running);

    conflict(
        runner
            .log_append(submitted.id, stale, 0, "x".into())
            .await
            .map(|_| ()),
    );
    let report = CompleteTask::succeeded;
    conflict(
        runner
            .complete(submitted.id, &report(stale))
            .await
            .map(|_| ()),
    );
    let after = user.task_get(submitted.id).await.unwrap();
    assert_eq!(
        after, before,
        "refused reports leave the task exactly as it was"
    );

    // Another runner's task does not exist for this runner, whatever lease it shows.
    let not_found = other_runner
        .complete(submitted.id, &report(leased.lease_id))
        .await
        .unwrap_err();
    assert_eq!(not_found.status(), Some(StatusCode::NOT_FOUND));
    let not_found = other_runner
        .start(submitted.id, leased.lease_id)
        .await
        .unwrap_err();
    assert_eq!(not_found.status(), Some(StatusCode::NOT_FOUND));
    assert_eq!(user.task_get(submitted.id).await.unwrap(), before);

    // The real lease completes it; a repeat of that same report (its answer lost) is
    // answered with the task as it stands, and a different outcome is refused.
    let done = runner
        .complete(submitted.id, &report(leased.lease_id))
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Succeeded);
    let again = runner
        .complete(submitted.id, &report(leased.lease_id))
        .await
        .unwrap();
    assert_eq!(again, done);
    let mut failed = report(leased.lease_id);
    failed.outcome = Outcome::Failed;
    conflict(runner.complete(submitted.id, &failed).await.map(|_| ()));
    assert_eq!(user.task_get(submitted.id).await.unwrap(), done);
}

#[tokio::test(flavor = "multi_thread")]
async fn log_chunks_are_stored_once_by_offset() {
    let env = TestEnv::new("proto-logs").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (t, _) = user.submit(&task(&[], 0)).await.unwrap();
    let lease_id = lease(&runner, 1).await.tasks[0].lease_id;

    let refused = runner
        .log_append(t.id, lease_id, 0, "early".into())
        .await
        .unwrap_err();
    assert_eq!(
        refused.status(),
        Some(StatusCode::CONFLICT),
        "no logs before start"
    );
    runner.start(t.id, lease_id).await.unwrap();

    // A resend of the same chunk is acknowledged, not stored twice; an overlapping
    // chunk stores only its new tail.
    for (offset, chunk, acked) in [(0, "hello ", 6), (0, "hello ", 6), (3, "lo world", 11)] {
        let ack = runner
            .log_append(t.id, lease_id, offset, chunk.into())
            .await
            .unwrap();
        assert_eq!(ack.acked, acked, "{chunk:?} at {offset}");
    }
    // A chunk past the end is refused with the offset the server holds.
    let gap = runner
        .log_append(t.id, lease_id, 20, "?".into())
        .await
        .unwrap_err();
    assert_eq!(gap.status(), Some(StatusCode::RANGE_NOT_SATISFIABLE));
    match gap {
        baton_client::ClientError::Api(e) => assert_eq!(e.body.error.offset, Some(11)),
        other => panic!("{other}"),
    }
    let slice = user.task_logs(t.id, 0).await.unwrap();
    assert_eq!(&slice.bytes[..], b"hello world");
    assert_eq!(slice.next_offset, 11);
    assert_eq!(&user.task_logs(t.id, 6).await.unwrap().bytes[..], b"world");

    // The runner produced more than arrived: the log is marked incomplete.
    let done = runner
        .complete(
            t.id,
            &CompleteTask {
                outputs: Some(serde_json::json!({"artifact": "a.tar"})),
                log_size: Some(12),
                ..CompleteTask::succeeded(lease_id)
            },
        )
        .await
        .unwrap();
    assert!(done.log_incomplete);
    assert_eq!(done.log_size, 11);
    assert_eq!(done.outputs, Some(serde_json::json!({"artifact": "a.tar"})));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_popped_task_postgres_no_longer_calls_queued_is_not_handed_out() {
    let env = TestEnv::new("proto-cas-miss").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (t, _) = user.submit(&task(&[], 0)).await.unwrap();
    // The task moved on in Postgres (as a cancel would move it) while its queue entry
    // is still in Redis.
    sqlx::query("UPDATE tasks SET status = 'cancelled', finished_at = now() WHERE id = $1")
        .bind(t.id)
        .execute(&mut env.db().await)
        .await
        .unwrap();

    assert!(lease(&runner, 1).await.tasks.is_empty());
    let redis = env.redis().await;
    // Redis follows Postgres right after the answer.
    wait_for(
        "the node to drop its own claim",
        Duration::from_secs(5),
        || {
            let mut redis = redis.clone();
            let (running, owned) = (
                format!("{}running", env.redis_prefix),
                format!("{}owned:{}", env.redis_prefix, node.node_id),
            );
            async move {
                let claim: Option<String> = redis::cmd("HGET")
                    .arg(running)
                    .arg(t.id.to_string())
                    .query_async(&mut redis)
                    .await
                    .ok()?;
                let count: i64 = redis::cmd("SCARD")
                    .arg(owned)
                    .query_async(&mut redis)
                    .await
                    .ok()?;
                (claim.is_none() && count == 0).then_some(())
            }
        },
    )
    .await;
    assert_eq!(
        user.task_get(t.id).await.unwrap().status,
        TaskStatus::Cancelled
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_start_is_idempotent_and_counts_one_attempt() {
    let env = TestEnv::new("proto-start-twice").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (t, _) = user.submit(&task(&[], 0)).await.unwrap();
    let lease_id = lease(&runner, 1).await.tasks[0].lease_id;
    assert_eq!(runner.start(t.id, lease_id).await.unwrap().attempt, 1);
    assert_eq!(runner.start(t.id, lease_id).await.unwrap().attempt, 1);
    assert_eq!(user.task_get(t.id).await.unwrap().attempt, 1);
}

/// Each parked lease request holds a receiver on the node: one runner may not keep more
/// than `max_parked_per_runner` (64) waiting on a node. The one past it is answered 429
/// at once; another runner still parks; the first runner parks again once one returns.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_cannot_park_more_lease_requests_than_its_share() {
    let env = TestEnv::new("proto-parked-cap").await;
    let node = env.node().await;
    let (_, greedy) = register_runner(&node.url, &["nothing-comes"], 1).await;
    let waiting = |runner: Client| {
        tokio::spawn(async move {
            runner
                .lease(&LeaseRequest {
                    wait_s: 30,
                    ..lease_req(1)
                })
                .await
        })
    };
    let parked: Vec<_> = (0..64).map(|_| waiting(greedy.clone())).collect();
    node.wait_parked("64 parked", |n| n >= 64).await;
    let refused = greedy
        .lease(&LeaseRequest {
            wait_s: 30,
            ..lease_req(1)
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.status(),
        Some(StatusCode::TOO_MANY_REQUESTS),
        "{refused}"
    );
    // A lease that does not wait is no park, and another runner parks as before.
    assert!(greedy.lease(&lease_req(1)).await.unwrap().tasks.is_empty());
    let (_, other) = register_runner(&node.url, &["nothing-comes"], 1).await;
    let _other = waiting(other);
    node.wait_parked("the other runner parked", |n| n >= 65)
        .await;
    // Requests given up by the runner free their places.
    for request in &parked {
        request.abort();
    }
    node.wait_parked("the given-up requests to leave", |n| n <= 1)
        .await;
    let _again = waiting(greedy.clone());
    node.wait_parked("the runner parked again", |n| n >= 2)
        .await;
}

/// A log follow stream holds a receiver and a loop on the node while it is open: one
/// token may have at most `max_follows_per_token` (32) open on a node. The next is
/// answered 429; another token still follows; a closed stream frees its place.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_cannot_follow_more_logs_at_once_than_its_share() {
    let env = TestEnv::new("proto-follow-cap").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (t, _) = user.submit(&task(&[], 0)).await.unwrap();
    let leased = lease(&runner, 1).await.tasks.remove(0);
    runner.start(t.id, leased.lease_id).await.unwrap();

    let http = reqwest::Client::new();
    let url = format!("{}/v1/tasks/{}/logs?follow=true", node.url, t.id);
    let follow = |token: String| {
        let (http, url) = (http.clone(), url.clone());
        async move { http.get(&url).bearer_auth(token).send().await.unwrap() }
    };
    let mut open = Vec::new();
    for _ in 0..32 {
        let stream = follow(API_TOKEN.to_string()).await;
        assert_eq!(stream.status(), 200);
        open.push(stream);
    }
    let refused = follow(API_TOKEN.to_string()).await;
    assert_eq!(refused.status(), 429);
    let reader = user
        .token_create(&baton_client::CreateToken {
            name: "another".into(),
            scopes: vec![baton_client::Scope::Read],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(follow(reader.token).await.status(), 200);
    // A stream the client closed gives its place back.
    drop(open.pop());
    wait_for(
        "a place to be given back",
        Duration::from_secs(10),
        || async {
            let again = follow(API_TOKEN.to_string()).await;
            (again.status() == 200).then_some(again)
        },
    )
    .await;
}
