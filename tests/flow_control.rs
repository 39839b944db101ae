//! Flow control (docs/flow-control.md) against real nodes, runners, Redis and Postgres:
//! a concurrency group never runs more than its limit at once — as the runners' own
//! records of their runs show — even through a Redis data loss; a paused queue hands out
//! nothing, and its tasks neither run nor expire until it is resumed.

mod support;

use baton_client::{Client, SubmitTask};
use baton_core::TaskStatus;
use baton_store::{NewTask, Store, StoreOptions};
use chrono::{Duration as Span, Utc};
use std::path::Path;
use std::time::Duration;
use support::services::RedisProc;
use support::*;
use uuid::Uuid;

/// A task of group `key` (limit 2) that runs `seconds` and records its start and end, in
/// nanoseconds, in `record`: the runner's own account of when it ran.
fn grouped(record: &Path, key: &str, seconds: f64) -> SubmitTask {
    let file = record.display();
    SubmitTask {
        script: Some(format!(
            "echo \"start $(date +%s%N) $BATON_TASK_ID\" >> {file}; sleep {seconds}; \
             echo \"end $(date +%s%N) $BATON_TASK_ID\" >> {file}"
        )),
        concurrency_key: Some(key.into()),
        concurrency_limit: Some(2),
        ..Default::default()
    }
}

/// The most runs the record shows at once, and how many runs it holds. An end and a
/// start at the same instant count the end first.
fn most_at_once(record: &Path) -> (usize, usize) {
    let mut events: Vec<(u128, bool)> = std::fs::read_to_string(record)
        .unwrap()
        .lines()
        .map(|line| {
            let mut parts = line.split(' ');
            let kind = parts.next().unwrap();
            let at: u128 = parts.next().unwrap().parse().unwrap();
            (at, kind == "start")
        })
        .collect();
    events.sort();
    let (mut now, mut most, mut runs) = (0usize, 0usize, 0usize);
    for (_, start) in events {
        if start {
            now += 1;
            runs += 1;
            most = most.max(now);
        } else {
            now -= 1;
        }
    }
    (most, runs)
}

fn starts(record: &Path) -> usize {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("start"))
        .count()
}

async fn all_succeed(env: &TestEnv, user: &Client, ids: &[Uuid]) {
    for id in ids {
        let done = env.wait_terminal(user, *id).await;
        assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_of_limit_two_never_runs_three_at_once_across_nodes_and_runners() {
    let env = TestEnv::new("flow-group").await;
    let nodes = [env.node().await, env.node().await, env.node().await];
    let mut runners = Vec::new();
    for node in &nodes {
        runners.push(env.runner(&node.url, &[], 4).await);
    }
    let record = file_tasks_may_write(&env.dir.join("runs.log"));
    let user = user_client(&nodes[0].url);
    let mut ids = Vec::new();
    for i in 0..20 {
        // Submitted through every node: the limit is the cluster's, not a node's.
        let submitter = user_client(&nodes[i % 3].url);
        ids.push(
            submitter
                .submit(&grouped(&record, "tenant-a", 0.3))
                .await
                .unwrap()
                .0
                .id,
        );
    }
    all_succeed(&env, &user, &ids).await;
    let (most, runs) = most_at_once(&record);
    assert_eq!(runs, 20, "every task ran once");
    assert!(most <= 2, "{most} tasks of the group ran at once");
    assert_eq!(most, 2, "the group used both of its slots");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_keeps_its_limit_through_a_redis_data_loss() {
    let base = std::env::temp_dir().join(format!("baton-flow-loss-{}", Uuid::new_v4().simple()));
    let redis = RedisProc::start(&base).await;
    let env = TestEnv::with_servers("flow-group-loss", &admin_database_url(), &redis.url()).await;
    let nodes = [env.node_with(FAST_HA).await, env.node_with(FAST_HA).await];
    let mut runners = Vec::new();
    for node in &nodes {
        runners.push(
            env.runner_with(&node.url, &[], 4, &["--heartbeat-s", "1"])
                .await,
        );
    }
    let record = file_tasks_may_write(&env.dir.join("runs.log"));
    let user = user_client(&nodes[0].url);
    let mut ids = Vec::new();
    // Runs outlast the rebuild: the two running when Redis forgets must still count.
    for _ in 0..20 {
        ids.push(
            user.submit(&grouped(&record, "tenant-b", 1.5))
                .await
                .unwrap()
                .0
                .id,
        );
    }
    wait_for(
        "a few runs of the group",
        Duration::from_secs(30),
        || async { (starts(&record) >= 3).then_some(()) },
    )
    .await;
    // Redis forgets everything mid-run: queues, claims, the group's slots and waiting line.
    let mut conn = env.redis().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    all_succeed(&env, &user, &ids).await;
    let (most, runs) = most_at_once(&record);
    assert_eq!(runs, 20, "every task ran once");
    assert!(most <= 2, "{most} tasks of the group ran at once");
    drop(runners);
    let _ = std::fs::remove_dir_all(base);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_queue_hands_out_nothing_and_expires_nothing_until_resumed() {
    let env = TestEnv::new("flow-pause").await;
    let node = env.node_with(&["--repair-interval-ms", "200"]).await;
    let _runner = env.runner(&node.url, &[], 5).await;
    let user = user_client(&node.url);
    let paused = user.queue_pause("held", true).await.unwrap();
    assert!(paused.paused);

    let mut held = Vec::new();
    for _ in 0..5 {
        let task = SubmitTask {
            queue: Some("held".into()),
            command: Some(vec!["true".into()]),
            queue_timeout_s: Some(1),
            ..Default::default()
        };
        held.push(user.submit(&task).await.unwrap().0.id);
    }
    // The runner keeps polling: tasks of an open queue, submitted after the held ones,
    // run; a task no runner can take, with the held tasks' queue timeout, expires.
    for _ in 0..3 {
        let open = SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        };
        let open = user.submit(&open).await.unwrap().0.id;
        all_succeed(&env, &user, &[open]).await;
    }
    let control = SubmitTask {
        labels: vec!["nobody-has-this".into()],
        command: Some(vec!["true".into()]),
        queue_timeout_s: Some(1),
        ..Default::default()
    };
    let control = user.submit(&control).await.unwrap().0.id;
    let expired = env.wait_terminal(&user, control).await;
    assert_eq!(expired.status, TaskStatus::Expired);

    for id in &held {
        let task = user.task_get(*id).await.unwrap();
        assert_eq!(task.status, TaskStatus::Queued, "paused: {task:?}");
    }
    let listed = user.queues().await.unwrap();
    let queue = listed.queues.iter().find(|q| q.name == "held").unwrap();
    assert!(queue.paused);
    assert_eq!((queue.depth, queue.running), (5, 0));
    assert!(queue.oldest_waiting.is_some());

    let resumed = user.queue_pause("held", false).await.unwrap();
    assert!(!resumed.paused && resumed.resumed_at.is_some());
    all_succeed(&env, &user, &held).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_queue_timeout_stops_while_paused_and_counts_again_from_the_resume() {
    let env = TestEnv::new("flow-expiry").await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    let t0 = Utc::now();
    store.queue_set_paused("held", true, t0).await.unwrap();
    let task = NewTask {
        queue: "held".into(),
        queue_timeout_s: 10,
        ..new_task_row()
    };
    store.task_insert(&task, t0).await.unwrap();
    let expired_at = |at| {
        let store = store.clone();
        async move { store.tasks_expire_due(at, 10).await.unwrap().len() }
    };
    assert_eq!(
        expired_at(t0 + Span::hours(1)).await,
        0,
        "paused: no expiry"
    );
    let resume = t0 + Span::hours(1);
    store.queue_set_paused("held", false, resume).await.unwrap();
    assert_eq!(
        expired_at(resume + Span::seconds(5)).await,
        0,
        "its full queue timeout again from the resume"
    );
    assert_eq!(expired_at(resume + Span::seconds(11)).await, 1);
}
