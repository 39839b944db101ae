//! Flow control in the lease script (docs/flow-control.md), against a real Redis: a full
//! concurrency group parks its tasks without hiding the tasks behind them, a freed slot
//! lets the oldest waiting task back, in order, and a paused queue is never a candidate
//! (nor unpaused by a repair that read Postgres before the pause).

use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_localcluster::testing as support;

use baton_coord::{Coord, CoordOptions, Enqueue, LeaseAsk, Popped, ReplayKey, RunEnded, WakeBus};
use baton_core::LabelSet;
use baton_core::flow::Group;
use std::time::Duration;
use support::*;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const NOW: i64 = 1_800_000_000_000;

async fn coord(env: &TestEnv) -> Coord {
    Coord::from_url(&env.redis_url, &env.redis_prefix, &CoordOptions::default()).unwrap()
}

fn entry(queue: &str, at_ms: i64, group: Option<(&str, i32)>) -> Enqueue {
    Enqueue {
        task_id: Uuid::now_v7(),
        queue: queue.into(),
        labels: LabelSet::empty(),
        priority: 0,
        enqueued_at_ms: at_ms,
        group: group.map(|(key, limit)| Group {
            key: key.into(),
            limit,
        }),
        owner: "tests".into(),
    }
}

/// What a runner of any labels leases with `wanted` leases.
async fn lease(coord: &Coord, wanted: usize) -> Vec<Popped> {
    let leases: Vec<LeaseId> = (0..wanted).map(|_| LeaseId::random()).collect();
    let replay = ReplayKey {
        key: format!("test-replay-{}", Uuid::new_v4()),
        ttl_ms: 60_000,
    };
    coord
        .lease(&LeaseAsk {
            node: "n1",
            runner: RunnerId::random(),
            boot_id: Uuid::new_v4(),
            labels: &LabelSet::empty(),
            queues: &[],
            lease_ids: &leases,
            replay: &replay,
            retry: false,
            claims_of: &[],
            now_ms: NOW,
        })
        .await
        .unwrap()
        .popped
}

fn ids(popped: &[Popped]) -> Vec<Uuid> {
    let mut ids: Vec<Uuid> = popped.iter().map(|p| p.task_id).collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_group_parks_its_tasks_and_a_freed_slot_lets_the_oldest_back() {
    let env = TestEnv::new("redis-groups").await;
    let coord = coord(&env).await;
    // Three of one group (limit 1) first in line, two of no group behind them.
    let grouped: Vec<Enqueue> = (0..3)
        .map(|i| entry("default", NOW + i, Some(("g", 1))))
        .collect();
    let free: Vec<Enqueue> = (10..12).map(|i| entry("default", NOW + i, None)).collect();
    coord.enqueue(&grouped).await.unwrap();
    coord.enqueue(&free).await.unwrap();

    let first = lease(&coord, 3).await;
    let mut expected = vec![grouped[0].task_id, free[0].task_id, free[1].task_id];
    expected.sort();
    assert_eq!(
        ids(&first),
        expected,
        "one of the group, and the tasks behind it"
    );
    assert_eq!(coord.group_counts("g").await.unwrap(), (1, 2));
    assert!(lease(&coord, 3).await.is_empty(), "the group is full");

    // The run ends: its slot goes to the oldest waiting task of the group, and only it.
    let held = first
        .iter()
        .find(|p| p.task_id == grouped[0].task_id)
        .unwrap();
    let ended = RunEnded {
        task: held.task_id,
        lease_id: held.lease_id,
        retry_at_ms: None,
    };
    assert_eq!(coord.runs_ended(&[ended], &[]).await.unwrap(), 1);
    let next = lease(&coord, 3).await;
    assert_eq!(ids(&next), vec![grouped[1].task_id]);
    assert_eq!(coord.group_counts("g").await.unwrap(), (1, 1));

    // A lease Postgres refuses goes back to its queue and frees its slot as well.
    assert!(coord.claim_requeue("n1", &next[0]).await.unwrap());
    assert_eq!(coord.group_counts("g").await.unwrap(), (0, 0));
    let again = lease(&coord, 3).await;
    assert_eq!(
        ids(&again),
        vec![grouped[1].task_id],
        "in order: it was older"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_queue_is_never_a_candidate_until_resumed() {
    let env = TestEnv::new("redis-paused").await;
    let coord = coord(&env).await;
    let held = entry("held", NOW, None);
    let open = entry("open", NOW + 1, None);
    coord.queue_paused_set("held", true).await.unwrap();
    coord.enqueue(&[held.clone(), open.clone()]).await.unwrap();
    assert_eq!(ids(&lease(&coord, 2).await), vec![open.task_id]);
    assert!(lease(&coord, 2).await.is_empty());
    coord.queue_paused_set("held", false).await.unwrap();
    assert_eq!(ids(&lease(&coord, 2).await), vec![held.task_id]);
}

/// The repair pass reads Postgres, then mirrors it: a pause or resume the API writes in
/// between is newer than that read and stays (once, the mirror undid a pause, and a
/// paused queue's task was counted as calling for a runner until the next pass). Only
/// that queue is left: another, written long before, is mended all the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_read_before_a_pause_or_resume_does_not_undo_it() {
    let env = TestEnv::new("redis-paused-mirror").await;
    let coord = coord(&env).await;
    let wakes = WakeBus::spawn(&coord, CancellationToken::new());
    let redis = redis::Client::open(env.redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let channel = format!("{}wake", env.redis_prefix);
    wait_for(
        "the wake-ups to be listened to",
        Duration::from_secs(10),
        || {
            let (mut redis, channel) = (redis.clone(), channel.clone());
            async move {
                let (_, listeners): (String, u64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut redis)
                    .await
                    .ok()?;
                (listeners > 0).then_some(())
            }
        },
    )
    .await;
    let held = ["held".to_string()];
    let read_before = coord.paused_marks().await.unwrap();
    coord.queue_paused_set("held", true).await.unwrap();
    assert!(!coord.paused_mirror(&read_before, &[]).await.unwrap());
    assert_eq!(coord.queues_paused().await.unwrap(), held);

    let read_before = coord.paused_marks().await.unwrap();
    coord.queue_paused_set("held", false).await.unwrap();
    assert!(!coord.paused_mirror(&read_before, &held).await.unwrap());
    assert!(coord.queues_paused().await.unwrap().is_empty());

    // Read after the last write, the mirror is the truth, and mends a lost copy.
    let read_after = coord.paused_marks().await.unwrap();
    assert!(coord.paused_mirror(&read_after, &held).await.unwrap());
    assert_eq!(coord.queues_paused().await.unwrap(), held);
    assert!(!coord.paused_mirror(&read_after, &held).await.unwrap());

    // Another queue paused since the read stays paused; "held", resumed in Postgres (its
    // Redis copy lost, say), is mended regardless.
    // A resume the mirror makes wakes every parked lease, as the API's does.
    coord.queue_paused_set("other", true).await.unwrap();
    let news = wakes.queue_news();
    assert!(coord.paused_mirror(&read_after, &[]).await.unwrap());
    assert_eq!(
        coord.queues_paused().await.unwrap(),
        vec!["other".to_string()]
    );
    wait_for("the resume's wake-up", Duration::from_secs(10), || async {
        (wakes.queue_news() > news).then_some(())
    })
    .await;
}
