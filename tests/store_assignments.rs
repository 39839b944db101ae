//! Runner assignments at the store (docs/dynamic-runners.md): admission never passes
//! the capacity or the demand, however many nodes admit at once; a failing attempt's
//! token, revoked after its use was taken, refuses the runner that used it; the end of a
//! failed attempt deletes every runner registered with its token.

use baton_localcluster::testing as support;

use baton_core::RunnerId;
use baton_store::{
    Admission, Candidate, NewRunner, Registering, Registration, Store, StoreError, StoreOptions,
};
use chrono::Utc;
use support::*;

fn candidates(n: usize) -> Vec<Candidate> {
    (0..n)
        .map(|i| Candidate {
            runner_name: format!("runner-{i}"),
            token_hash: uuid::Uuid::new_v4().as_bytes().to_vec(),
        })
        .collect()
}

fn admission<'a>(node: &'a str, labels: &'a [String], uncovered: u64) -> Admission<'a> {
    Admission {
        provisioner: "ephemeral",
        backend: "process",
        labels,
        queues: &[],
        capacity: 8,
        uncovered,
        node,
        claim_timeout: chrono::Duration::seconds(60),
        now: Utc::now(),
    }
}

/// The runner an attempt's backend started, registering with `token`.
fn ephemeral_runner(
    id: RunnerId,
    a: &baton_store::AssignmentRecord,
    token: uuid::Uuid,
    provisioner: Option<String>,
) -> NewRunner {
    NewRunner {
        id,
        name: a.runner_name.clone(),
        labels: a.labels.clone(),
        queues: vec![],
        capacity: 1,
        token_hash: uuid::Uuid::new_v4().as_bytes().to_vec(),
        version: "test".into(),
        registration_token_id: Some(token),
        provisioner,
    }
}

/// A migrated store on a database of its own, which lives as long as the `TestEnv`.
async fn store(name: &str) -> (TestEnv, Store) {
    let env = TestEnv::new(name).await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    (env, store)
}

#[tokio::test(flavor = "multi_thread")]
async fn nodes_admitting_at_once_stay_within_the_capacity_and_the_demand() {
    let (_env, store) = store("store-admission").await;
    let labels = vec!["ephemeral".to_string()];
    // Six nodes at once, each seeing 50 tasks no runner could take: 8 in all.
    let admitted = futures::future::join_all((0..6).map(|n| {
        let (store, labels) = (store.clone(), labels.clone());
        async move {
            let node = format!("node-{n}");
            store
                .assignments_admit(&admission(&node, &labels, 50), &candidates(8))
                .await
                .unwrap()
                .launches
                .len()
        }
    }))
    .await;
    assert_eq!(admitted.iter().sum::<usize>(), 8, "{admitted:?}");
    // With 8 starting, a demand of 10 admits nothing more: the capacity is full; and
    // once they run, a demand of 3 admits 0 while 8 are running.
    let more = store
        .assignments_admit(&admission("node-0", &labels, 10), &candidates(8))
        .await
        .unwrap();
    assert_eq!(more.launches.len(), 0);
    let open = store.assignments_open().await.unwrap();
    assert_eq!(open.len(), 8);
    assert!(open.iter().all(|a| a.state == "starting" && a.attempt == 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_revoked_after_its_use_was_taken_refuses_its_runner() {
    let (_env, store) = store("store-late-register").await;
    let labels = vec!["ephemeral".to_string()];
    let candidate = candidates(1);
    let admitted = store
        .assignments_admit(&admission("node-0", &labels, 1), &candidate)
        .await
        .unwrap();
    let a = &admitted.launches[0].assignment;
    let now = Utc::now();
    // The runner takes its token's use...
    let used = store
        .registration_token_consume(
            &candidate[0].token_hash,
            Registering {
                labels: &labels,
                queues: &[],
            },
            now,
        )
        .await
        .unwrap();
    let Registration::Accepted {
        token_id,
        provisioner,
    } = used
    else {
        panic!("the token lets its runner in: {used:?}");
    };
    assert_eq!(token_id, a.registration_token_id);
    // ...the attempt begins to fail before the runner's row is written...
    let paused = store
        .assignment_begin_failing((a.id, a.attempt, "node-0"), "claim_timeout", now, now)
        .await
        .unwrap();
    assert_eq!(paused, Some(vec![]), "no runner registered yet");
    // ...and the row is refused.
    let late = store
        .runner_insert(
            &ephemeral_runner(RunnerId::random(), a, token_id, provisioner),
            now,
        )
        .await;
    assert!(matches!(late, Err(StoreError::NotFound)), "{late:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_attempts_end_pauses_then_deletes_every_runner_of_its_token() {
    let (_env, store) = store("store-failed-end").await;
    let labels = vec!["ephemeral".to_string()];
    let admitted = store
        .assignments_admit(&admission("node-0", &labels, 1), &candidates(1))
        .await
        .unwrap();
    let a = &admitted.launches[0].assignment;
    let now = Utc::now();
    let runner = RunnerId::random();
    store
        .runner_insert(
            &ephemeral_runner(runner, a, a.registration_token_id, Some("ephemeral".into())),
            now,
        )
        .await
        .unwrap();
    let key = (a.id, a.attempt, "node-0");
    let paused = store
        .assignment_begin_failing(key, "claim_timeout", now, now)
        .await
        .unwrap();
    assert_eq!(paused, Some(vec![runner]));
    assert_eq!(
        store
            .assignment_begin_failing(key, "again", now, now)
            .await
            .unwrap(),
        None,
        "begun once"
    );
    let rows = store.runners_by_ids(&[runner]).await.unwrap();
    assert!(rows[0].paused && rows[0].deleted_at.is_none());
    let deleted = store
        .assignment_fail(key, "claim_timeout", (now, false), now)
        .await
        .unwrap();
    assert_eq!(deleted, Some(vec![runner]));
    let rows = store.runners_by_ids(&[runner]).await.unwrap();
    assert!(rows[0].deleted_at.is_some());
    let open = store.assignments_open().await.unwrap();
    assert_eq!(open[0].state, "retrying");
    // Another node's moves change nothing of it.
    assert_eq!(
        store
            .assignment_fail((a.id, a.attempt, "node-9"), "x", (now, true), now)
            .await
            .unwrap(),
        None
    );
}
