//! Submitting: idempotency keys, all-or-nothing batches, listing with filters and cursors.

use baton_localcluster::testing as support;

use baton_client::{SubmitTask, TaskQuery};
use baton_core::TaskStatus;
use support::*;

fn keyed(key: &str) -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        idempotency_key: Some(key.into()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_idempotency_key_twice_gives_one_task() {
    let env = TestEnv::new("submit-idem").await;
    let node_a = env.node().await;
    let node_b = env.node().await;
    let (a, b) = (user_client(&node_a.url), user_client(&node_b.url));

    let (first, created) = a.submit(&keyed("deploy-42")).await.unwrap();
    assert!(created);
    let (again, created_again) = b.submit(&keyed("deploy-42")).await.unwrap();
    assert!(!created_again, "the repeat is answered 200, not 201");
    assert_eq!(again.id, first.id);
    assert_eq!(env.count_tasks().await, 1);

    // Concurrent repeats on two nodes still make one task.
    let submits = (0..8).map(|i| {
        let client = if i % 2 == 0 { a.clone() } else { b.clone() };
        tokio::spawn(async move { client.submit(&keyed("race")).await.unwrap() })
    });
    let results = futures::future::join_all(submits).await;
    let ids: std::collections::BTreeSet<_> =
        results.iter().map(|r| r.as_ref().unwrap().0.id).collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(
        results.iter().filter(|r| r.as_ref().unwrap().1).count(),
        1,
        "exactly one 201"
    );
    assert_eq!(env.count_tasks().await, 2);

    // Only one queue entry for it, too.
    let (_, runner) = register_runner(&node_a.url, &[], 8).await;
    let leased = runner
        .lease(&lease_now(uuid::Uuid::new_v4(), 8))
        .await
        .unwrap();
    assert_eq!(leased.tasks.len(), 2);
}

/// A token of the caller's own, with `scopes`.
async fn token_with(
    admin: &baton_client::Client,
    name: &str,
    scopes: &[baton_client::Scope],
) -> baton_client::Client {
    let created = admin
        .token_create(&baton_client::CreateToken {
            name: name.into(),
            scopes: scopes.to_vec(),
            ..Default::default()
        })
        .await
        .unwrap();
    baton_client::Client::new(admin.base_url(), Some(created.token)).unwrap()
}

/// An attacker with a `submit` token claims a key its victim will use: the victim's
/// submit still makes its own task and runs, and neither sees the other's task.
#[tokio::test(flavor = "multi_thread")]
async fn an_idempotency_key_is_the_submitters_own() {
    let env = TestEnv::new("submit-idem-owner").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let attacker = token_with(&admin, "attacker", &[baton_client::Scope::Submit]).await;
    let victim = token_with(&admin, "victim", &[baton_client::Scope::Submit]).await;

    let (claimed, created) = attacker.submit(&keyed("nightly-build")).await.unwrap();
    assert!(created);
    let (own, created) = victim.submit(&keyed("nightly-build")).await.unwrap();
    assert!(created, "the victim's submit made a task of its own");
    assert_ne!(own.id, claimed.id);
    assert_eq!(own.idempotency_key.as_deref(), Some("nightly-build"));
    assert!(
        victim.task_get(claimed.id).await.is_err(),
        "the other's task stays hidden"
    );
    // Each token's repeat still finds its own.
    let (again, created) = victim.submit(&keyed("nightly-build")).await.unwrap();
    assert!(!created);
    assert_eq!(again.id, own.id);
    assert_eq!(env.count_tasks().await, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_is_all_or_nothing() {
    let env = TestEnv::new("submit-batch").await;
    let node = env.node().await;
    let client = user_client(&node.url);
    let tasks: Vec<SubmitTask> = (0..50)
        .map(|i| SubmitTask {
            script: Some(format!("echo {i}")),
            queue: Some(if i % 2 == 0 { "even" } else { "odd" }.into()),
            ..Default::default()
        })
        .collect();
    let created = client.submit_batch(tasks.clone()).await.unwrap();
    assert_eq!(created.tasks.len(), 50);
    assert!(created.tasks.iter().all(|t| t.status == TaskStatus::Queued));

    let mut broken = tasks;
    broken[49].queue = Some("NOT VALID".into());
    let err = client.submit_batch(broken).await.unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(422));
    assert!(err.to_string().contains("tasks[49]"), "{err}");
    assert_eq!(
        env.count_tasks().await,
        50,
        "the broken batch wrote nothing"
    );

    // Keys that already exist return their tasks inside a batch.
    client.submit(&keyed("k1")).await.unwrap();
    let mixed = client
        .submit_batch(vec![keyed("k1"), keyed("k2")])
        .await
        .unwrap();
    assert_eq!(mixed.tasks.len(), 2);
    assert_eq!(env.count_tasks().await, 52);
}

#[tokio::test(flavor = "multi_thread")]
async fn listing_filters_and_pages_newest_first() {
    let env = TestEnv::new("submit-list").await;
    let node = env.node().await;
    let client = user_client(&node.url);
    let mut ids = Vec::new();
    for i in 0..7 {
        let (t, _) = client
            .submit(&SubmitTask {
                command: Some(vec!["true".into()]),
                queue: Some(if i < 5 { "builds" } else { "deploys" }.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        ids.push(t.id);
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = client
            .task_list(&TaskQuery {
                queue: Some("builds".into()),
                status: Some("queued".into()),
                limit: Some(2),
                cursor: cursor.clone(),
                ..TaskQuery::default()
            })
            .await
            .unwrap();
        seen.extend(page.tasks.iter().map(|t| t.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let expected: Vec<_> = ids[..5].iter().rev().copied().collect();
    assert_eq!(seen, expected);
    let none = client
        .task_list(&TaskQuery {
            status: Some("succeeded".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(none.tasks.is_empty() && none.next_cursor.is_none());
}
