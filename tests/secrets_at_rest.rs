//! A task's `secret_env` as someone who can read Postgres (a dump, a replica, a backup)
//! or a runner that never starts the task would see it: sealed in every row, handed over
//! only with a recorded start, erased the moment the task ends, and opened only by a node
//! that holds the key that sealed it (docs/security.md, "Secrets at rest").

use baton_localcluster::testing as support;

use baton_client::{CompleteTask, Exchange, LeaseRequest, StartItem, SubmitTask};
use baton_core::TaskStatus;
use sqlx::Row;
use std::collections::BTreeMap;
use support::*;
use uuid::Uuid;

const BOOT: Uuid = Uuid::from_u128(0x5ec7e75);

/// A lease as this release's agents ask it: secrets with the start's answer.
fn lease_one() -> LeaseRequest {
    LeaseRequest {
        secrets_at_start: true,
        ..lease_now(BOOT, 1)
    }
}

fn secret_task(name: &str, value: &str) -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        secret_env: [(name.to_string(), value.to_string())].into(),
        ..Default::default()
    }
}

/// The row's `secret_env` as Postgres holds it.
async fn stored_secrets(env: &TestEnv, task: Uuid) -> BTreeMap<String, String> {
    let mut db = env.db().await;
    let row = sqlx::query("SELECT secret_env FROM tasks WHERE id = $1")
        .bind(task)
        .fetch_one(&mut db)
        .await
        .unwrap();
    let value: serde_json::Value = row.get(0);
    serde_json::from_value(value).unwrap()
}

fn fresh_secret() -> String {
    format!("s3cret-{}", Uuid::new_v4().simple())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_is_sealed_in_postgres_given_only_with_the_start_and_erased_at_the_end() {
    let env = TestEnv::new("secrets-sealed").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let secret = fresh_secret();
    let (t, _) = user
        .submit(&secret_task("DEPLOY_TOKEN", &secret))
        .await
        .unwrap();

    // Whoever reads the table reads ciphertext.
    let stored = stored_secrets(&env, t.id).await;
    assert!(
        stored["DEPLOY_TOKEN"].starts_with("sealed:v1:"),
        "sealed: {stored:?}"
    );
    assert!(!stored["DEPLOY_TOKEN"].contains(&secret));

    // A lease is no start: it carries no secret, the start's answer does.
    let leased = runner.lease(&lease_one()).await.unwrap().tasks;
    assert_eq!(leased.len(), 1);
    assert!(leased[0].secret_env.is_empty(), "a lease carries no secret");
    let started = runner.start(t.id, leased[0].lease_id).await.unwrap();
    assert_eq!(
        started.secret_env,
        BTreeMap::from([("DEPLOY_TOKEN".to_string(), secret.clone())])
    );

    runner
        .complete(
            t.id,
            &CompleteTask {
                log_size: None,
                ..CompleteTask::succeeded(leased[0].lease_id)
            },
        )
        .await
        .unwrap();
    // Ended: the value is gone from the row; the name stays, as the view shows it.
    assert_eq!(
        stored_secrets(&env, t.id).await,
        BTreeMap::from([("DEPLOY_TOKEN".to_string(), String::new())])
    );
    let done = user.task_get(t.id).await.unwrap();
    assert_eq!(done.status, TaskStatus::Succeeded);
    assert_eq!(done.secret_env_keys, vec!["DEPLOY_TOKEN"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exchange_hands_secrets_out_with_its_starts_only() {
    let env = TestEnv::new("secrets-exchange").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 2).await;
    let (first, second) = (fresh_secret(), fresh_secret());
    let (a, _) = user.submit(&secret_task("A", &first)).await.unwrap();
    let exchange = |max, start_leased, starts| Exchange {
        request_id: Uuid::new_v4(),
        boot_id: BOOT,
        max,
        start_leased,
        starts,
        secrets_at_start: true,
        ..Default::default()
    };

    // Leased and started in one exchange: the task arrives started, with its secret.
    let answer = runner.exchange(&exchange(1, true, vec![])).await.unwrap();
    assert_eq!(answer.tasks.len(), 1);
    assert!(answer.tasks[0].started);
    assert_eq!(answer.tasks[0].secret_env["A"], first);

    // Leased unstarted: no secret until its start item is answered.
    let (b, _) = user.submit(&secret_task("B", &second)).await.unwrap();
    let answer = runner.exchange(&exchange(1, false, vec![])).await.unwrap();
    assert_eq!(answer.tasks.len(), 1);
    assert_eq!(answer.tasks[0].id, b.id);
    assert!(answer.tasks[0].secret_env.is_empty());
    let start = StartItem {
        task_id: b.id,
        lease_id: answer.tasks[0].lease_id,
        traceparent: None,
    };
    let answer = runner
        .exchange(&exchange(0, false, vec![start]))
        .await
        .unwrap();
    assert_eq!(answer.starts.len(), 1);
    assert_eq!(answer.starts[0].secret_env["B"], second);
    assert!(a.id != b.id);
}

/// Every way a task ends erases its secret values: the trigger's list of terminal
/// statuses is checked against `TaskStatus`, so a new terminal status cannot slip past.
#[tokio::test(flavor = "multi_thread")]
async fn every_terminal_status_erases_the_secret_values() {
    let env = TestEnv::new("secrets-erased").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let mut db = env.db().await;
    for status in TaskStatus::ALL {
        let (t, _) = user
            .submit(&SubmitTask {
                queue: Some("nobody-serves-this".into()),
                ..secret_task("K", "value")
            })
            .await
            .unwrap();
        sqlx::query("UPDATE tasks SET status = $2 WHERE id = $1")
            .bind(t.id)
            .bind(status.to_string())
            .execute(&mut db)
            .await
            .unwrap();
        let erased = stored_secrets(&env, t.id).await["K"].is_empty();
        assert_eq!(
            erased,
            status.is_terminal(),
            "{status}: erased={erased}, terminal={}",
            status.is_terminal()
        );
    }
    // A user's cancel of a queued task, through the API.
    let (t, _) = user.submit(&secret_task("K", "value")).await.unwrap();
    user.task_cancel(t.id).await.unwrap();
    assert_eq!(stored_secrets(&env, t.id).await["K"], "");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_key_still_opens_and_a_node_without_the_key_hands_out_nothing() {
    let env = TestEnv::new("secrets-rotation").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let new_key = "bmV3LWtleS1uZXctbmV3LWtleS1uZXctbmV3LWtleSE=";
    let rotated = env
        .node_with_env(
            &[],
            &[(
                "BATON_SECRETS_KEY".into(),
                format!("{new_key}\n{SECRETS_KEY}"),
            )],
        )
        .await;
    let only_new = env
        .node_with_env(&[], &[("BATON_SECRETS_KEY".into(), new_key.into())])
        .await;
    let (_, token) = register_runner_token(&node.url, &[], 2).await;
    let runner_on = |url: &str| baton_client::Client::new(url, Some(token.clone())).unwrap();
    let secret = fresh_secret();

    // Sealed under the old key; a node whose ring lacks it records the start but hands
    // over no run without its secret: the runner is told the task is not its to run.
    let (t, _) = user.submit(&secret_task("K", &secret)).await.unwrap();
    let leased = runner_on(&only_new.url)
        .lease(&lease_one())
        .await
        .unwrap()
        .tasks;
    assert_eq!(leased.len(), 1);
    let refused = runner_on(&only_new.url)
        .start(t.id, leased[0].lease_id)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.starts_with("403") && refused.contains("secrets_unavailable"),
        "{refused}"
    );

    // The rotated ring seals with the new key and still opens what the old one sealed.
    let (u, _) = user.submit(&secret_task("K", &secret)).await.unwrap();
    let (v, _) = user_client(&rotated.url)
        .submit(&secret_task("K", &secret))
        .await
        .unwrap();
    let key_id = |sealed: &str| sealed.split(':').nth(2).unwrap().to_string();
    assert_ne!(
        key_id(&stored_secrets(&env, u.id).await["K"]),
        key_id(&stored_secrets(&env, v.id).await["K"]),
        "sealed under different keys"
    );
    let rotated_runner = runner_on(&rotated.url);
    let leased = rotated_runner
        .lease(&LeaseRequest {
            max: 2,
            ..lease_one()
        })
        .await
        .unwrap()
        .tasks;
    let mut ids: Vec<Uuid> = leased.iter().map(|l| l.id).collect();
    ids.sort();
    let mut expected = vec![u.id, v.id];
    expected.sort();
    assert_eq!(ids, expected);
    for lease in &leased {
        let started = rotated_runner
            .start(lease.id, lease.lease_id)
            .await
            .unwrap();
        assert_eq!(started.secret_env["K"], secret);
    }
    let listed = user.task_list(&Default::default()).await.unwrap();
    assert!(!serde_json::to_string(&listed).unwrap().contains(&secret));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_without_a_key_refuses_secrets_and_stores_nothing() {
    let env = TestEnv::new("secrets-no-key").await;
    let node = env
        .node_with_env(&[], &[("BATON_SECRETS_KEY".into(), String::new())])
        .await;
    let user = user_client(&node.url);
    let refused = user.submit(&secret_task("K", "value")).await.unwrap_err();
    let text = refused.to_string();
    assert!(
        text.starts_with("422") && text.contains("secrets_unavailable"),
        "{text}"
    );
    assert_eq!(env.count_tasks().await, 0, "nothing half-written");
    // Without secrets the same cluster takes the task.
    user.submit(&SubmitTask {
        command: Some(vec!["true".into()]),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// A runner that does not say it takes secrets with its start (as agents before
/// `secrets_at_start` did, or any client that leaves it out) gets none with its lease:
/// a lease never started learns nothing. They come with the start's answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_that_does_not_ask_gets_secrets_with_the_start_only() {
    let env = TestEnv::new("secrets-not-asked").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let secret = fresh_secret();
    let (t, _) = user.submit(&secret_task("K", &secret)).await.unwrap();
    let lease = lease_now(BOOT, 1);
    assert!(!lease.secrets_at_start);
    let leased = runner.lease(&lease).await.unwrap().tasks;
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].id, t.id);
    assert!(
        leased[0].secret_env.is_empty(),
        "a secret went out with a lease: {:?}",
        leased[0].secret_env.keys()
    );
    let started = runner.start(t.id, leased[0].lease_id).await.unwrap();
    assert_eq!(started.secret_env["K"], secret);
}

/// While agents of a release before `secrets_at_start` still run, a node started with
/// `--secrets-with-lease` hands secrets out with the lease, as those agents need.
#[tokio::test(flavor = "multi_thread")]
async fn an_earlier_agent_gets_its_secrets_with_the_lease_where_the_node_allows_it() {
    let env = TestEnv::new("secrets-older-agent").await;
    let node = NodeProc::start(&env, &["--secrets-with-lease"]).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let secret = fresh_secret();
    let (t, _) = user.submit(&secret_task("K", &secret)).await.unwrap();
    let leased = runner.lease(&lease_now(BOOT, 1)).await.unwrap().tasks;
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].id, t.id);
    assert_eq!(leased[0].secret_env["K"], secret);
}

/// During a rolling upgrade a node of the release before sealing still serves, and would
/// hand a sealed value to its runner as it is: while one is live, secrets are stored as
/// that release stored them.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_are_not_sealed_while_a_node_that_cannot_open_them_serves() {
    let env = TestEnv::new("secrets-rolling").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let mut redis = env.redis().await;
    // An earlier release's node, as its liveness record reads: it says nothing of sealing.
    let _: () = redis::cmd("SET")
        .arg(format!("{}node:older-node", env.redis_prefix))
        .arg(r#"{"id":"older-node","addr":"127.0.0.1:1","started_at_ms":0}"#)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut redis)
        .await
        .unwrap();
    let secret = fresh_secret();
    let (t, _) = user.submit(&secret_task("K", &secret)).await.unwrap();
    assert_eq!(
        stored_secrets(&env, t.id).await["K"],
        secret,
        "stored as the older node can hand it out"
    );
}
