//! Redis loses its data (FLUSHALL, a restart without persistence) under load, and
//! Postgres goes down and comes back: nothing accepted is lost, no task runs twice, and
//! the nodes recover by themselves.

mod support;

use baton_client::{Client, SubmitTask};
use baton_core::TaskStatus;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use support::services::{PostgresProc, RedisProc};
use support::*;
use uuid::Uuid;

/// A task that appends its id to `runs` when it runs, so a second run would show.
fn recorded(runs: &Path, i: usize) -> SubmitTask {
    SubmitTask {
        script: Some(format!(
            "echo \"$BATON_TASK_ID\" >> {}; sleep 0.2; echo {i}",
            runs.display()
        )),
        ..Default::default()
    }
}

async fn all_terminal(env: &TestEnv, client: &Client, ids: &[Uuid]) {
    for id in ids {
        let done = env.wait_terminal(client, *id).await;
        assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    }
}

fn runs_per_task(runs: &Path) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for line in std::fs::read_to_string(runs).unwrap_or_default().lines() {
        *seen.entry(line.to_string()).or_default() += 1;
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_losing_its_data_under_load_loses_nothing() {
    let base = std::env::temp_dir().join(format!("baton-redis-loss-{}", Uuid::new_v4().simple()));
    let mut redis = RedisProc::start(&base).await;
    let env = TestEnv::with_servers("redis-loss", &admin_database_url(), &redis.url()).await;
    let node_a = env.node_with(FAST_HA).await;
    let node_b = env.node_with(FAST_HA).await;
    let _r1 = env
        .runner_with(&node_a.url, &[], 3, &["--heartbeat-s", "1"])
        .await;
    let _r2 = env
        .runner_with(&node_b.url, &[], 3, &["--heartbeat-s", "1"])
        .await;
    let user = user_client(&node_a.url);
    let runs = env.dir.join("runs.log");
    let mut ids = Vec::new();

    for round in 0..3 {
        for i in 0..20 {
            let (t, _) = user
                .submit(&recorded(&runs, round * 100 + i))
                .await
                .unwrap();
            ids.push(t.id);
        }
        // Mid-load: first a FLUSHALL, then a crash and an empty restart.
        match round {
            0 => {
                let mut conn = env.redis().await;
                let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
            }
            1 => redis.restart().await,
            _ => {}
        }
    }
    all_terminal(&env, &user, &ids).await;
    let runs = runs_per_task(&runs);
    assert_eq!(runs.len(), ids.len(), "every task ran");
    assert!(
        runs.values().all(|&n| n == 1),
        "no task ran twice: {runs:?}"
    );
    let _ = std::fs::remove_dir_all(base);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_outage_makes_nodes_not_ready_and_they_recover_by_themselves() {
    let pg = PostgresProc::start().await;
    let env = TestEnv::with_servers("pg-outage", &pg.admin_url(), &redis_url()).await;
    let node = env.node_with(FAST_HA).await;
    let _runner = env
        .runner_with(&node.url, &[], 2, &["--heartbeat-s", "1"])
        .await;
    let user = user_client(&node.url);
    let runs = env.dir.join("runs.log");
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(user.submit(&recorded(&runs, i)).await.unwrap().0.id);
    }

    pg.down();
    let http = reqwest::Client::new();
    let ready = |url: String| {
        let http = http.clone();
        async move {
            http.get(format!("{url}/readyz"))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .ok()
        }
    };
    wait_for(
        "the node to report not ready",
        Duration::from_secs(15),
        || async { (ready(node.url.clone()).await == Some(503)).then_some(()) },
    )
    .await;
    let refused = user.submit(&recorded(&runs, 99)).await.unwrap_err();
    assert_eq!(refused.status().map(|s| s.as_u16()), Some(503), "{refused}");

    pg.up();
    wait_for(
        "the node to be ready again",
        Duration::from_secs(30),
        || async { (ready(node.url.clone()).await == Some(200)).then_some(()) },
    )
    .await;
    for i in 5..10 {
        ids.push(user.submit(&recorded(&runs, i)).await.unwrap().0.id);
    }
    all_terminal(&env, &user, &ids).await;
    let runs = runs_per_task(&runs);
    assert_eq!(runs.len(), ids.len());
    assert!(
        runs.values().all(|&n| n == 1),
        "no task ran twice: {runs:?}"
    );
}
