//! The Redis side of design.md §4, script by script, against a real Redis: claims are
//! never overwritten, a task id is queued at most once, a failed Postgres write puts the
//! task back exactly, and claims are only removed by compare-and-delete.

mod support;

use baton_coord::{Coord, CoordError, CoordOptions, Enqueue, LeaseAsk, Popped, ReplayKey};
use baton_core::LabelSet;
use support::*;
use uuid::Uuid;

async fn coord(env: &TestEnv) -> Coord {
    Coord::from_url(&env.redis_url, &env.redis_prefix, &CoordOptions::default()).unwrap()
}

fn entry(id: Uuid, queue: &str, labels: &[&str], priority: i32, at_ms: i64) -> Enqueue {
    Enqueue {
        task_id: id,
        queue: queue.into(),
        labels: LabelSet::new(labels.iter().copied()).unwrap(),
        priority,
        enqueued_at_ms: at_ms,
    }
}

fn replay() -> ReplayKey {
    ReplayKey {
        key: format!("test-replay-{}", Uuid::new_v4()),
        ttl_ms: 60_000,
    }
}

fn labels(l: &[&str]) -> LabelSet {
    LabelSet::new(l.iter().copied()).unwrap()
}

const NOW: i64 = 1_800_000_000_000;

/// The lease script popping for a runner of these labels and queues.
async fn pop(
    coord: &Coord,
    node: &str,
    labels: &LabelSet,
    queues: &[String],
    lease_ids: &[Uuid],
    replay: &ReplayKey,
    now_ms: i64,
) -> Result<Vec<Popped>, CoordError> {
    let leased = coord
        .lease(&LeaseAsk {
            node,
            runner: Uuid::new_v4(),
            boot_id: Uuid::new_v4(),
            labels,
            queues,
            lease_ids,
            replay,
            retry: false,
            claims_of: &[],
            now_ms,
        })
        .await?;
    Ok(leased.popped)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_id_is_queued_at_most_once() {
    let env = TestEnv::new("redis-once").await;
    let coord = coord(&env).await;
    let id = Uuid::now_v7();
    coord
        .enqueue(&[entry(id, "default", &[], 0, NOW)])
        .await
        .unwrap();
    coord
        .enqueue(&[entry(id, "default", &[], 0, NOW + 5)])
        .await
        .unwrap();
    let popped = pop(
        &coord,
        "n1",
        &labels(&[]),
        &[],
        &[Uuid::new_v4(), Uuid::new_v4()],
        &replay(),
        NOW,
    )
    .await
    .unwrap();
    assert_eq!(popped.len(), 1);
    assert_eq!(popped[0].task_id, id);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lease_script_skips_and_drops_entries_of_claimed_tasks() {
    let env = TestEnv::new("redis-claimed").await;
    let coord = coord(&env).await;
    let claimed = Uuid::now_v7();
    let free = Uuid::now_v7();
    coord
        .enqueue(&[entry(claimed, "default", &[], 5, NOW)])
        .await
        .unwrap();
    let first = pop(
        &coord,
        "n1",
        &labels(&[]),
        &[],
        &[Uuid::new_v4()],
        &replay(),
        NOW,
    )
    .await
    .unwrap();
    assert_eq!(first[0].task_id, claimed);
    // A stale re-add while the claim is live (e.g. a repair racing a lease).
    coord
        .enqueue(&[
            entry(claimed, "default", &[], 5, NOW),
            entry(free, "default", &[], 0, NOW),
        ])
        .await
        .unwrap();
    let second = pop(
        &coord,
        "n2",
        &labels(&[]),
        &[],
        &[Uuid::new_v4(), Uuid::new_v4()],
        &replay(),
        NOW,
    )
    .await
    .unwrap();
    assert_eq!(
        second.iter().map(|p| p.task_id).collect::<Vec<_>>(),
        vec![free]
    );
    let claim = coord.claim_get(claimed).await.unwrap().unwrap();
    assert_eq!(
        (claim.node.as_str(), claim.lease_id),
        ("n1", first[0].lease_id),
        "the claim was not overwritten"
    );
    let mut redis = env.redis().await;
    let left: i64 = redis::cmd("ZCARD")
        .arg(format!("{}q:default:-", env.redis_prefix))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(
        left, 0,
        "the stale entry was dropped, not left to be popped again"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lease_script_matches_labels_and_queues() {
    let env = TestEnv::new("redis-match").await;
    let coord = coord(&env).await;
    let gpu = Uuid::now_v7();
    let builds = Uuid::now_v7();
    let plain = Uuid::now_v7();
    coord
        .enqueue(&[
            entry(gpu, "default", &["gpu", "linux"], 0, NOW),
            entry(builds, "builds", &[], 0, NOW + 1),
            entry(plain, "default", &[], 0, NOW + 2),
        ])
        .await
        .unwrap();
    let ids = |popped: Vec<baton_coord::Popped>| {
        popped.into_iter().map(|p| p.task_id).collect::<Vec<_>>()
    };
    let leases = || (0..3).map(|_| Uuid::new_v4()).collect::<Vec<_>>();
    let linux_builds_only = pop(
        &coord,
        "n1",
        &labels(&["linux"]),
        &["builds".to_string()],
        &leases(),
        &replay(),
        NOW,
    )
    .await
    .unwrap();
    assert_eq!(ids(linux_builds_only), vec![builds]);
    let linux = pop(
        &coord,
        "n1",
        &labels(&["linux"]),
        &[],
        &leases(),
        &replay(),
        NOW,
    )
    .await
    .unwrap();
    assert_eq!(ids(linux), vec![plain]);
    let gpu_runner = pop(
        &coord,
        "n1",
        &labels(&["linux", "gpu", "x86"]),
        &[],
        &leases(),
        &replay(),
        NOW,
    )
    .await
    .unwrap();
    assert_eq!(ids(gpu_runner), vec![gpu]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_postgres_write_puts_the_task_back_exactly_and_drops_the_claim() {
    let env = TestEnv::new("redis-requeue").await;
    let coord = coord(&env).await;
    let early = Uuid::now_v7();
    let late = Uuid::now_v7();
    coord
        .enqueue(&[
            entry(early, "default", &[], 0, NOW),
            entry(late, "default", &[], 0, NOW + 10),
        ])
        .await
        .unwrap();
    let popped = pop(
        &coord,
        "n1",
        &labels(&[]),
        &[],
        &[Uuid::new_v4()],
        &replay(),
        NOW,
    )
    .await
    .unwrap();
    assert_eq!(popped[0].task_id, early);

    // Another node cannot undo n1's lease, nor can n1 undo a different lease.
    let mut wrong_lease = popped[0].clone();
    wrong_lease.lease_id = Uuid::new_v4();
    assert!(!coord.claim_requeue("n1", &wrong_lease).await.unwrap());
    assert!(!coord.claim_requeue("n2", &popped[0]).await.unwrap());
    assert!(coord.claim_get(early).await.unwrap().is_some());

    assert!(coord.claim_requeue("n1", &popped[0]).await.unwrap());
    assert_eq!(coord.claim_get(early).await.unwrap(), None);
    assert!(coord.claims_of("n1").await.unwrap().is_empty());
    // Back at its old place: ahead of the later task.
    let again = pop(
        &coord,
        "n1",
        &labels(&[]),
        &[],
        &[Uuid::new_v4(), Uuid::new_v4()],
        &replay(),
        NOW,
    )
    .await
    .unwrap();
    assert_eq!(
        again.iter().map(|p| p.task_id).collect::<Vec<_>>(),
        vec![early, late]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_is_released_only_under_its_own_lease() {
    let env = TestEnv::new("redis-release").await;
    let coord = coord(&env).await;
    let id = Uuid::now_v7();
    coord
        .enqueue(&[entry(id, "default", &[], 0, NOW)])
        .await
        .unwrap();
    let popped = pop(
        &coord,
        "n1",
        &labels(&[]),
        &[],
        &[Uuid::new_v4()],
        &replay(),
        NOW,
    )
    .await
    .unwrap();
    let lease = popped[0].lease_id;
    assert_eq!(coord.claims_of("n1").await.unwrap(), vec![id]);
    let claim = coord.claim_get(id).await.unwrap().unwrap();
    assert_eq!(claim.claimed_at_ms, NOW);

    assert!(!coord.claim_release(id, Uuid::new_v4()).await.unwrap());
    assert!(coord.claim_get(id).await.unwrap().is_some());
    // Any node may release (the completion can land anywhere); the owner's set follows.
    assert!(coord.claim_release(id, lease).await.unwrap());
    assert_eq!(coord.claim_get(id).await.unwrap(), None);
    assert!(coord.claims_of("n1").await.unwrap().is_empty());
    assert!(!coord.claim_release(id, lease).await.unwrap());
}
