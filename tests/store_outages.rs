//! Redis loses its data (FLUSHALL, a restart without persistence) under load, and
//! Postgres goes down and comes back: nothing accepted is lost, no task runs twice, and
//! the nodes recover by themselves.

use baton_localcluster::testing as support;

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
    let node_a = env.node_with(&FAST_HA).await;
    let node_b = env.node_with(&FAST_HA).await;
    let _r1 = env
        .runner_with(&node_a.url, &[], 3, &["--heartbeat-s", "1"])
        .await;
    let _r2 = env
        .runner_with(&node_b.url, &[], 3, &["--heartbeat-s", "1"])
        .await;
    let user = user_client(&node_a.url);
    let runs = file_tasks_may_write(&env.dir.join("runs.log"));
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
    let mut pg = PostgresProc::start().await;
    let env = TestEnv::with_servers("pg-outage", &pg.admin_url(), &redis_url()).await;
    let node = env.node_with(&FAST_HA).await;
    let _runner = env
        .runner_with(&node.url, &[], 2, &["--heartbeat-s", "1"])
        .await;
    let user = user_client(&node.url);
    let runs = file_tasks_may_write(&env.dir.join("runs.log"));
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(user.submit(&recorded(&runs, i)).await.unwrap().0.id);
    }

    pg.down().await;
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
    // The answers say what is away, not the store's own words (its address, its error):
    // those are in the node's log, under the id the answer gives.
    let readyz = http
        .get(format!("{}/readyz", node.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let port = pg
        .admin_url()
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    for body in [readyz.as_str(), &refused.to_string()] {
        assert!(
            body.contains("unavailable") && body.contains("node's log"),
            "{body}"
        );
        assert!(
            !body.contains(&port) && !body.to_lowercase().contains("connect"),
            "a 503 echoes the store's error: {body}"
        );
    }

    pg.up().await;
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

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_outage_longer_than_runner_lost_after_ends_no_running_task() {
    let mut pg = PostgresProc::start().await;
    let env = TestEnv::with_servers("pg-long-outage", &pg.admin_url(), &redis_url()).await;
    let node = env.node_with(&FAST_HA).await;
    let _runner = env
        .runner_with(&node.url, &[], 1, &["--heartbeat-s", "1"])
        .await;
    let user = user_client(&node.url);
    let runs = file_tasks_may_write(&env.dir.join("runs.log"));
    let (task, _) = user
        .submit(&SubmitTask {
            script: Some(format!(
                "echo \"$BATON_TASK_ID\" >> {}; sleep 14",
                runs.display()
            )),
            max_attempts: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    wait_for("the task to run", Duration::from_secs(15), || async {
        (user.task_get(task.id).await.ok()?.status == TaskStatus::Running).then_some(())
    })
    .await;

    // Postgres away for longer than `--runner-lost-after-s 6`, and the node's revocation
    // feed interrupted meanwhile (as a Redis hiccup does): the runner keeps running and
    // asking, but nobody can answer it.
    pg.down().await;
    let http = reqwest::Client::new();
    wait_for(
        "the node to see the outage",
        Duration::from_secs(15),
        || async {
            let ready = http.get(format!("{}/readyz", node.url)).send().await.ok()?;
            (ready.status().as_u16() == 503).then_some(())
        },
    )
    .await;
    let mut redis = env.redis().await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(format!("{}wake", env.redis_prefix))
        .arg("all")
        .query_async(&mut redis)
        .await
        .unwrap();
    // The fault is the outage's length, not an effect to wait for: past the lost
    // threshold, with the task still running.
    tokio::time::sleep(Duration::from_secs(9)).await;
    pg.up().await;

    let done = env.wait_terminal(&user, task.id).await;
    assert_eq!(
        done.status,
        TaskStatus::Succeeded,
        "the run outlived the outage and reported: {:?}",
        done.error
    );
    assert_eq!(done.attempt, 1, "never declared lost and run again");
    assert_eq!(runs_per_task(&runs).get(&task.id.to_string()), Some(&1));
}

/// What a node's 503 to a runner says about its presence: with Postgres out (Redis up)
/// the request still counts as a proof of life every node sees; with this node's Redis out
/// it cannot, and says so, so a runner stuck to it does not count the answer as contact
/// while the node adopting its claims watches its presence go stale.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_refusing_over_an_outage_says_whether_the_runner_was_heard() {
    let base = std::env::temp_dir().join(format!("baton-vouch-{}", Uuid::new_v4().simple()));
    let mut redis = RedisProc::start(&base).await;
    let mut pg = PostgresProc::start().await;
    let env = TestEnv::with_servers("outage-vouch", &pg.admin_url(), &redis.url()).await;
    let node = env.node_with(&FAST_HA).await;
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let poll = || {
        let runner = runner.clone();
        async move {
            runner
                .exchange(&baton_client::Exchange {
                    request_id: Uuid::new_v4(),
                    boot_id: Uuid::now_v7(),
                    max: 1,
                    ..Default::default()
                })
                .await
        }
    };
    let refusal =
        |answer: Result<baton_client::ExchangeAnswer, baton_client::ClientError>| match answer {
            Err(baton_client::ClientError::Api(e)) if e.status.as_u16() == 503 => {
                Some(e.body.error.presence_recorded)
            }
            _ => None,
        };
    poll().await.expect("both stores up: answered");
    // Something to lease, so the poll needs Postgres (an idle poll does not).
    let user = user_client(&node.url);
    user.submit(&recorded(
        &file_tasks_may_write(&env.dir.join("runs.log")),
        0,
    ))
    .await
    .unwrap();

    pg.down().await;
    let vouched = wait_for(
        "a 503 over the Postgres outage",
        Duration::from_secs(20),
        || async { refusal(poll().await) },
    )
    .await;
    assert_eq!(
        vouched,
        Some(true),
        "Redis is up: presence reaches every node"
    );
    pg.up().await;
    wait_for("Postgres back", Duration::from_secs(30), || async {
        poll().await.ok()
    })
    .await;

    redis.kill().await;
    wait_for(
        "a 503 that does not vouch for the runner",
        Duration::from_secs(20),
        || async { (refusal(poll().await) == Some(Some(false))).then_some(()) },
    )
    .await;
    let _ = std::fs::remove_dir_all(base);
}
