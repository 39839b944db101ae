//! Redis proposes, Postgres decides: who may take a task is checked at its start, in
//! Postgres (the runner exists, is neither deleted nor paused, has the task's labels and
//! serves its queue), so a queue entry forged in Redis routes nothing to the wrong runner;
//! and a deleted runner is refused on every node at once, parked requests included.

use baton_localcluster::testing as support;

use baton_client::{Client, Exchange, SubmitTask};
use std::time::{Duration, Instant};
use support::*;
use uuid::Uuid;

fn poll(max: u32, wait_s: u32) -> Exchange {
    exchange_starting(Uuid::now_v7(), max, wait_s)
}

/// The queue key and score Redis holds `task` under.
async fn place_of(env: &TestEnv, task: Uuid) -> (String, f64) {
    let mut redis = env.redis().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}q:*", env.redis_prefix))
        .query_async(&mut redis)
        .await
        .unwrap();
    for key in keys {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(&key)
            .arg(task.to_string())
            .query_async(&mut redis)
            .await
            .unwrap();
        if let Some(score) = score {
            return (key, score);
        }
    }
    panic!("{task} is in no queue");
}

/// Someone with write access to Redis moves a task that needs a `gpu` runner into the
/// queue a runner without one serves, at the head. The runner's poll pops it, but its
/// start is refused in Postgres: the runner gets only its own work, and the task goes back
/// to its own queue, for a runner that may take it.
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_entry_forged_in_redis_routes_nothing_to_the_wrong_runner() {
    let env = TestEnv::new("trust-forged-entry").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, plain) = register_runner(&node.url, &[], 2).await;
    let ordinary = user
        .submit(&SubmitTask {
            command: Some(vec!["true".into()]),
            ..SubmitTask::default()
        })
        .await
        .unwrap()
        .0;
    let gpu_task = user
        .submit(&SubmitTask {
            command: Some(vec!["true".into()]),
            labels: vec!["gpu".into()],
            ..SubmitTask::default()
        })
        .await
        .unwrap()
        .0;
    let (plain_key, plain_score) = place_of(&env, ordinary.id).await;
    let (gpu_key, _) = place_of(&env, gpu_task.id).await;
    let mut redis = env.redis().await;
    let _: () = redis::pipe()
        .cmd("ZREM")
        .arg(&gpu_key)
        .arg(gpu_task.id.to_string())
        .cmd("ZADD")
        .arg(&plain_key)
        .arg(plain_score - 1.0)
        .arg(gpu_task.id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();

    let answer = plain.exchange(&poll(2, 0)).await.unwrap();
    let handed: Vec<Uuid> = answer.tasks.iter().map(|t| t.id).collect();
    assert_eq!(handed, vec![ordinary.id], "only its own work");
    let stored = user.task_get(gpu_task.id).await.unwrap();
    assert_eq!(stored.status.as_str(), "queued", "{stored:?}");
    assert_eq!(
        place_of(&env, gpu_task.id).await.0,
        gpu_key,
        "back in its own queue"
    );

    let (_, gpu_runner) = register_runner(&node.url, &["gpu"], 1).await;
    let answer = gpu_runner.exchange(&poll(1, 0)).await.unwrap();
    assert_eq!(answer.tasks.len(), 1);
    assert_eq!(answer.tasks[0].id, gpu_task.id);
    assert!(answer.tasks[0].started);
}

/// A runner parked on one node is deleted through another: its parked request is
/// answered 401 at once, not at the end of its park, and nothing is leased to it after.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_runner_is_refused_at_once_even_while_parked() {
    let env = TestEnv::new("trust-deleted-parked").await;
    let parked_on = env.node().await;
    let other = env.node().await;
    let (runner_id, token) = register_runner_token(&parked_on.url, &[], 1).await;
    let runner = Client::new(&parked_on.url, Some(token.clone())).unwrap();
    let parked = tokio::spawn(async move {
        let sent = Instant::now();
        let answer = runner.exchange(&poll(1, 30)).await;
        (answer, sent.elapsed())
    });
    parked_on
        .wait_parked("the runner to park", |n| n >= 1)
        .await;
    let deleted_at = Instant::now();
    user_client(&other.url)
        .runner_delete(runner_id)
        .await
        .unwrap();
    let (answer, _) = parked.await.unwrap();
    let refused_after = deleted_at.elapsed();
    let status = answer.err().and_then(|e| e.status()).map(|s| s.as_u16());
    assert_eq!(status, Some(401), "the parked request is refused");
    assert!(
        refused_after < Duration::from_secs(2),
        "refused {refused_after:?} after the delete"
    );
    // On the other node too, and with work waiting.
    user_client(&other.url)
        .submit(&SubmitTask {
            command: Some(vec!["true".into()]),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let on_other = Client::new(&other.url, Some(token)).unwrap();
    let status = on_other
        .exchange(&poll(1, 0))
        .await
        .err()
        .and_then(|e| e.status())
        .map(|s| s.as_u16());
    assert_eq!(status, Some(401));
}
