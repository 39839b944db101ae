//! The Redis side of design.md §4, script by script, against a real Redis: claims are
//! never overwritten, a task id is queued at most once, a failed Postgres write puts the
//! task back exactly, and claims are only removed by compare-and-delete.

use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_localcluster::testing as support;

use baton_coord::{
    ClaimedIfAbsent, Coord, CoordError, CoordOptions, DispatchedRow, Enqueue, LeaseAsk, Popped,
    ReplayKey,
};
use baton_core::LabelSet;
use support::services::RedisProc;
use support::*;
use uuid::Uuid;

/// A test's own Redis prefix (`name`) and a coordinator on it.
async fn env_and_coord(name: &str) -> (TestEnv, Coord) {
    let env = TestEnv::new(name).await;
    let coord =
        Coord::from_url(&env.redis_url, &env.redis_prefix, &CoordOptions::default()).unwrap();
    (env, coord)
}

fn entry(id: Uuid, queue: &str, labels: &[&str], priority: i32, at_ms: i64) -> Enqueue {
    Enqueue {
        task_id: id,
        queue: queue.into(),
        labels: LabelSet::new(labels.iter().copied()).unwrap(),
        priority,
        enqueued_at_ms: at_ms,
        group: None,
        owner: "tests".into(),
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
    lease_ids: &[LeaseId],
    replay: &ReplayKey,
    now_ms: i64,
) -> Result<Vec<Popped>, CoordError> {
    let leased = coord
        .lease(&LeaseAsk {
            node,
            runner: RunnerId::random(),
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

/// The tasks a lease popped, in its order.
fn task_ids(popped: &[Popped]) -> Vec<Uuid> {
    popped.iter().map(|p| p.task_id).collect()
}

/// What a runner of any labels leases on `node` with `wanted` leases.
async fn pop_any(coord: &Coord, node: &str, wanted: usize) -> Vec<Popped> {
    let leases: Vec<LeaseId> = (0..wanted).map(|_| LeaseId::random()).collect();
    pop(coord, node, &labels(&[]), &[], &leases, &replay(), NOW)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_id_is_queued_at_most_once() {
    let (_env, coord) = env_and_coord("redis-once").await;
    let id = Uuid::now_v7();
    coord
        .enqueue(&[entry(id, "default", &[], 0, NOW)])
        .await
        .unwrap();
    coord
        .enqueue(&[entry(id, "default", &[], 0, NOW + 5)])
        .await
        .unwrap();
    let popped = pop_any(&coord, "n1", 2).await;
    assert_eq!(popped.len(), 1);
    assert_eq!(popped[0].task_id, id);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lease_script_skips_and_drops_entries_of_claimed_tasks() {
    let (env, coord) = env_and_coord("redis-claimed").await;
    let claimed = Uuid::now_v7();
    let free = Uuid::now_v7();
    coord
        .enqueue(&[entry(claimed, "default", &[], 5, NOW)])
        .await
        .unwrap();
    let first = pop_any(&coord, "n1", 1).await;
    assert_eq!(first[0].task_id, claimed);
    // A stale re-add while the claim is live (e.g. a repair racing a lease).
    coord
        .enqueue(&[
            entry(claimed, "default", &[], 5, NOW),
            entry(free, "default", &[], 0, NOW),
        ])
        .await
        .unwrap();
    let second = pop_any(&coord, "n2", 2).await;
    assert_eq!(task_ids(&second), vec![free]);
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
    let (_env, coord) = env_and_coord("redis-match").await;
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
    let leases = || (0..3).map(|_| LeaseId::random()).collect::<Vec<_>>();
    let cases: [(&[&str], &[&str], Uuid); 3] = [
        (&["linux"], &["builds"], builds),
        (&["linux"], &[], plain),
        (&["linux", "gpu", "x86"], &[], gpu),
    ];
    for (runner_labels, queues, expected) in cases {
        let queues: Vec<String> = queues.iter().map(|q| q.to_string()).collect();
        let popped = pop(
            &coord,
            "n1",
            &labels(runner_labels),
            &queues,
            &leases(),
            &replay(),
            NOW,
        )
        .await
        .unwrap();
        assert_eq!(
            task_ids(&popped),
            vec![expected],
            "a runner of {runner_labels:?} serving {queues:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_postgres_write_puts_the_task_back_exactly_and_drops_the_claim() {
    let (_env, coord) = env_and_coord("redis-requeue").await;
    let early = Uuid::now_v7();
    let late = Uuid::now_v7();
    coord
        .enqueue(&[
            entry(early, "default", &[], 0, NOW),
            entry(late, "default", &[], 0, NOW + 10),
        ])
        .await
        .unwrap();
    let popped = pop_any(&coord, "n1", 1).await;
    assert_eq!(popped[0].task_id, early);

    // Another node cannot undo n1's lease, nor can n1 undo a different lease.
    let mut wrong_lease = popped[0].clone();
    wrong_lease.lease_id = LeaseId::random();
    assert!(!coord.claim_requeue("n1", &wrong_lease).await.unwrap());
    assert!(!coord.claim_requeue("n2", &popped[0]).await.unwrap());
    assert!(coord.claim_get(early).await.unwrap().is_some());

    assert!(coord.claim_requeue("n1", &popped[0]).await.unwrap());
    assert_eq!(coord.claim_get(early).await.unwrap(), None);
    assert!(coord.claims_of("n1").await.unwrap().is_empty());
    // Back at its old place: ahead of the later task.
    let again = pop_any(&coord, "n1", 2).await;
    assert_eq!(task_ids(&again), vec![early, late]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_is_released_only_under_its_own_lease() {
    let (_env, coord) = env_and_coord("redis-release").await;
    let id = Uuid::now_v7();
    coord
        .enqueue(&[entry(id, "default", &[], 0, NOW)])
        .await
        .unwrap();
    let popped = pop_any(&coord, "n1", 1).await;
    let lease = popped[0].lease_id;
    assert_eq!(coord.claims_of("n1").await.unwrap(), vec![id]);
    let claim = coord.claim_get(id).await.unwrap().unwrap();
    assert_eq!(claim.claimed_at_ms, NOW);

    assert!(!coord.claim_release(id, LeaseId::random()).await.unwrap());
    assert!(coord.claim_get(id).await.unwrap().is_some());
    // Any node may release (the completion can land anywhere); the owner's set follows.
    assert!(coord.claim_release(id, lease).await.unwrap());
    assert_eq!(coord.claim_get(id).await.unwrap(), None);
    assert!(coord.claims_of("n1").await.unwrap().is_empty());
    assert!(!coord.claim_release(id, lease).await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_generation_marker_is_written_only_while_the_rebuild_still_holds_its_lock() {
    let (env, coord) = env_and_coord("epoch-holding").await;
    let epoch = baton_coord::Epoch {
        id: Uuid::new_v4(),
        since_ms: 1,
    };
    let lock = coord
        .lock_acquire("rebuild", "node-a:1", std::time::Duration::from_secs(60))
        .await
        .unwrap()
        .expect("free");
    // Redis loses its data mid-rebuild (FLUSHALL, a restart without persistence): the
    // lock goes with it, and so must the marker — what was rebuilt is gone too.
    let mut redis = env.redis().await;
    let lock_key = format!("{}lock:rebuild", env.redis_prefix);
    let _: () = redis::cmd("DEL")
        .arg(&lock_key)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(!coord.epoch_set_holding(&lock, epoch).await.unwrap());
    assert_eq!(
        coord.epoch_get().await.unwrap(),
        None,
        "the next pass rebuilds"
    );

    let lock = coord
        .lock_acquire("rebuild", "node-a:2", std::time::Duration::from_secs(60))
        .await
        .unwrap()
        .expect("free again");
    assert!(coord.epoch_set_holding(&lock, epoch).await.unwrap());
    assert_eq!(coord.epoch_get().await.unwrap(), Some(epoch));
}

/// A dispatched row of the task of `entry` under `lease_id`, with no runner named.
fn row_of(entry: &Enqueue, lease_id: LeaseId, started: bool) -> DispatchedRow<'_> {
    DispatchedRow {
        entry,
        lease_id,
        runner: None,
        boot: None,
        started,
    }
}

/// The repair read a leased row, then the task was requeued (claim dropped, entry added)
/// before the repair's claim landed: the claim must not be planted, or the next lease drops
/// the entry as stale and the task is stranded, queued with neither entry nor lease. A
/// started run is another matter: its entry is a copy a failover brought back.
#[tokio::test(flavor = "multi_thread")]
async fn the_repair_does_not_claim_a_task_its_queue_holds() {
    let (_env, coord) = env_and_coord("redis-claim-absent").await;
    let id = Uuid::now_v7();
    let queued = entry(id, "default", &[], 0, NOW);
    coord.enqueue(std::slice::from_ref(&queued)).await.unwrap();
    let read_lease = LeaseId::random();
    assert_eq!(
        coord
            .claim_if_absent(&row_of(&queued, read_lease, false), "n1", NOW)
            .await
            .unwrap(),
        ClaimedIfAbsent::No,
        "a queued task is not claimed"
    );
    let popped = pop_any(&coord, "n2", 1).await;
    assert_eq!(task_ids(&popped), vec![id], "the next lease takes it");

    // Neither queued nor claimed (Redis lost it): the repair claims it.
    let lost = Uuid::now_v7();
    let lost_entry = entry(lost, "default", &[], 0, NOW);
    assert_eq!(
        coord
            .claim_if_absent(&row_of(&lost_entry, read_lease, false), "n1", NOW)
            .await
            .unwrap(),
        ClaimedIfAbsent::Claimed
    );
    assert_eq!(
        coord.claim_get(lost).await.unwrap().unwrap().lease_id,
        read_lease
    );

    // A started run its queue holds (a failover brought the entry back): claimed, and the
    // entry taken out, so no lease hands the run out again.
    let running = Uuid::now_v7();
    let copy = entry(running, "default", &[], 0, NOW);
    coord.enqueue(std::slice::from_ref(&copy)).await.unwrap();
    assert_eq!(
        coord
            .claim_if_absent(&row_of(&copy, read_lease, true), "n1", NOW)
            .await
            .unwrap(),
        ClaimedIfAbsent::TookItsEntry,
        "a started run its queue holds is claimed, and says it took the entry"
    );
    assert_eq!(
        coord
            .queue_missing(&[(running, copy.key_rel())])
            .await
            .unwrap(),
        vec![running],
        "its entry is gone"
    );
    assert!(
        pop_any(&coord, "n2", 1).await.is_empty(),
        "nothing to hand out"
    );

    // Had the run ended and the task been queued again meanwhile, the entry was the new
    // turn's: the repair pass (`undo_if_moved_on`) drops the claim and puts it back.
    assert!(coord.claim_release(running, read_lease).await.unwrap());
    assert_eq!(
        coord
            .enqueue_unclaimed(std::slice::from_ref(&copy))
            .await
            .unwrap(),
        1
    );
    let popped = pop_any(&coord, "n2", 1).await;
    assert_eq!(
        task_ids(&popped),
        vec![running],
        "the new turn is handed out"
    );
}

/// A failover dropped a run's claim and its group entry together (the task submitted and
/// leased within what the new master lacked). Before, the claim planted from the row held
/// no slot of the group, which then looked free to the next lease; now the row's group
/// entry is registered again and the claim takes its slot.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_from_the_row_registers_a_group_entry_the_failover_lost() {
    let (env, coord) = env_and_coord("redis-claim-absent-group").await;
    let run = Enqueue {
        group: Some(baton_core::flow::Group {
            key: "g".into(),
            limit: 1,
        }),
        ..entry(Uuid::now_v7(), "default", &[], 0, NOW)
    };
    assert_eq!(
        coord
            .claim_if_absent(&row_of(&run, LeaseId::random(), true), "n1", NOW)
            .await
            .unwrap(),
        ClaimedIfAbsent::Claimed
    );
    let mut redis = env.redis().await;
    let holds_a_slot: bool = redis::cmd("SISMEMBER")
        .arg(coord.keys().group_running("g"))
        .arg(run.task_id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(holds_a_slot, "the claim holds a slot of its group");

    // The next task of the group waits for it.
    let next = Enqueue {
        task_id: Uuid::now_v7(),
        ..run.clone()
    };
    coord.enqueue(std::slice::from_ref(&next)).await.unwrap();
    assert!(
        pop_any(&coord, "n2", 1).await.is_empty(),
        "the group (limit 1) is full"
    );
}

/// What a Redis failover answers for a while is "not now", which the API turns into a 503
/// to retry, not a 500: seen in an hour's drill, a queue's resume (a `MULTI`) sent to a
/// master that had lost the slot came back `EXECABORT` with each command `MOVED`, and a
/// script run on a new master that had not loaded it came back `NOSCRIPT`. Here, a
/// transaction on a replica (each write refused `READONLY` while queued) and an
/// `EVALSHA` of a script the server does not have.
#[tokio::test(flavor = "multi_thread")]
async fn a_failovers_refusals_are_unavailable_not_internal() {
    let env = TestEnv::new("redis-not-now").await;
    let master = RedisProc::start(&env.dir.join("master")).await;
    let replica = RedisProc::start(&env.dir.join("replica")).await;
    let client = |url: String| redis::Client::open(url).unwrap();
    let mut to_replica = client(replica.url())
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port)
        .query_async(&mut to_replica)
        .await
        .unwrap();

    let aborted = redis::pipe()
        .atomic()
        .set("k", "v")
        .ignore()
        .query_async::<()>(&mut to_replica)
        .await
        .unwrap_err();
    assert!(
        matches!(
            CoordError::from(aborted.clone()),
            CoordError::Unavailable(_)
        ),
        "{aborted}"
    );
    let unknown_script = redis::cmd("EVALSHA")
        .arg("0".repeat(40))
        .arg(0)
        .query_async::<()>(&mut to_replica)
        .await
        .unwrap_err();
    assert!(
        matches!(
            CoordError::from(unknown_script.clone()),
            CoordError::Unavailable(_)
        ),
        "{unknown_script}"
    );
}

/// Two nodes flush their presence buffers at their own pace: a stamp older than the one
/// Redis holds, written late, leaves the newer one in place.
#[tokio::test(flavor = "multi_thread")]
async fn presence_written_late_never_moves_a_runner_back() {
    let (_env, coord) = env_and_coord("redis-presence").await;
    let (runner, other) = (RunnerId::random(), RunnerId::random());
    let (old_boot, new_boot) = (Uuid::now_v7(), Uuid::now_v7());
    coord
        .presence_write(&[(runner, NOW + 200, new_boot)])
        .await
        .unwrap();
    coord
        .presence_write(&[(runner, NOW + 100, old_boot), (other, NOW, old_boot)])
        .await
        .unwrap();
    assert_eq!(
        coord.presence_get(&[runner, other]).await.unwrap(),
        vec![Some((NOW + 200, new_boot)), Some((NOW, old_boot))]
    );
    coord
        .presence_write(&[(runner, NOW + 300, new_boot)])
        .await
        .unwrap();
    assert_eq!(
        coord.presence_get(&[runner]).await.unwrap(),
        vec![Some((NOW + 300, new_boot))]
    );
}

/// The lease script drops a queue it empties from the `queues` hash; putting a task back
/// must register the queue again, or the task sits where no lease looks until it expires.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_put_back_in_a_queue_its_lease_emptied_is_found_again() {
    let (env, coord) = env_and_coord("redis-requeue-registers").await;
    let id = Uuid::now_v7();
    coord
        .enqueue(&[entry(id, "lonely", &[], 0, NOW)])
        .await
        .unwrap();
    // Asking for more than the queue holds: the script sees it emptied.
    let lease = || pop_any(&coord, "n1", 2);
    let popped = lease().await;
    assert_eq!(popped.len(), 1);
    let redis = env.redis().await;
    let queues = format!("{}queues", env.redis_prefix);
    let registered = |mut redis: redis::aio::MultiplexedConnection| {
        let queues = queues.clone();
        async move {
            let hit: bool = redis::cmd("HEXISTS")
                .arg(queues)
                .arg("q:lonely:-")
                .query_async(&mut redis)
                .await
                .unwrap();
            hit
        }
    };
    assert!(
        !registered(redis.clone()).await,
        "the emptied queue left the hash"
    );
    assert!(coord.claim_requeue("n1", &popped[0]).await.unwrap());
    assert!(
        registered(redis.clone()).await,
        "putting it back registers it"
    );
    let again = lease().await;
    assert_eq!(task_ids(&again), vec![id]);
}

/// Across many queues of several label sets, a lease takes exactly the best tasks the
/// runner may take, in order, though it reads only the best queues of each label set
/// (lua/queue_index.lua).
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_across_many_queues_takes_the_best_tasks_it_may_take() {
    let (_env, coord) = env_and_coord("redis-index-order").await;
    let label_sets: [&[&str]; 4] = [&[], &["gpu"], &["linux"], &["gpu", "windows"]];
    let mut entries = Vec::new();
    for i in 0..400u32 {
        let labels = label_sets[(i % 4) as usize];
        // Priorities and ages spread so the best tasks sit in many different queues.
        let priority = (i * 7 % 5) as i32;
        let at = NOW + i64::from(i * 13 % 97);
        let mut task = entry(
            Uuid::now_v7(),
            &format!("q{}", i % 50),
            labels,
            priority,
            at,
        );
        // An owner each: one owner's tasks are placed by their fair tags, one after the
        // other (lua/enqueue.lua); alone in its queue, a task's tag is its age.
        task.owner = format!("owner-{i}");
        entries.push(task);
    }
    coord.enqueue(&entries).await.unwrap();
    let runner_labels = labels(&["gpu", "linux"]);
    let may_take = |e: &&Enqueue| {
        e.labels
            .as_slice()
            .iter()
            .all(|l| runner_labels.as_slice().contains(l))
    };
    let mut expected: Vec<&Enqueue> = entries.iter().filter(may_take).collect();
    expected.sort_by(|a, b| {
        let score = |e: &Enqueue| baton_core::queue_order::score(e.priority, e.enqueued_at_ms);
        score(a)
            .total_cmp(&score(b))
            .then(a.task_id.cmp(&b.task_id))
    });
    let mut leased = Vec::new();
    while leased.len() < expected.len() {
        let leases: Vec<LeaseId> = (0..7).map(|_| LeaseId::random()).collect();
        let popped = pop(&coord, "n1", &runner_labels, &[], &leases, &replay(), NOW)
            .await
            .unwrap();
        assert!(
            !popped.is_empty(),
            "work is left: {} of {}",
            leased.len(),
            expected.len()
        );
        leased.extend(popped.into_iter().map(|p| p.task_id));
    }
    assert_eq!(
        leased,
        expected.iter().map(|e| e.task_id).collect::<Vec<_>>(),
        "best first, across every queue and label set the runner may serve"
    );
    // What it may not take is still there, and a runner limited to named queues finds
    // only theirs.
    let windows = labels(&["gpu", "windows"]);
    let named = vec!["q3".to_string(), "q7".to_string()];
    let leases: Vec<LeaseId> = (0..64).map(|_| LeaseId::random()).collect();
    let popped = pop(&coord, "n1", &windows, &named, &leases, &replay(), NOW)
        .await
        .unwrap();
    assert!(!popped.is_empty());
    assert!(
        popped
            .iter()
            .all(|p| p.queue_key.starts_with("q:q3:") || p.queue_key.starts_with("q:q7:"))
    );
}

/// Whatever empties a queue (a lease, a removal) takes it out of the index, and its label
/// set once no queue of it has work: nothing client-named lingers in Redis.
#[tokio::test(flavor = "multi_thread")]
async fn an_emptied_queue_leaves_the_index_and_so_does_its_label_set() {
    let (env, coord) = env_and_coord("redis-index-prune").await;
    let mut redis = env.redis().await;
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    coord
        .enqueue(&[
            entry(a, "one", &["x"], 0, NOW),
            entry(b, "two", &["x"], 0, NOW + 1),
        ])
        .await
        .unwrap();
    let prefix = env.redis_prefix.clone();
    let count = |key: &str, cmd: &str| {
        let key = format!("{prefix}{key}");
        let cmd = cmd.to_string();
        let mut redis = redis.clone();
        async move {
            let n: u64 = redis::cmd(&cmd)
                .arg(key)
                .query_async(&mut redis)
                .await
                .unwrap();
            n
        }
    };
    assert_eq!(count("ready:x", "ZCARD").await, 2);
    assert_eq!(count("labelsets", "HLEN").await, 1);
    coord
        .queue_remove(&[(a, "q:one:x".to_string())])
        .await
        .unwrap();
    assert_eq!(
        count("ready:x", "ZCARD").await,
        1,
        "the removal emptied `one`"
    );
    assert_eq!(count("queues", "HLEN").await, 1);
    let leases = [LeaseId::random()];
    let popped = pop(&coord, "n1", &labels(&["x"]), &[], &leases, &replay(), NOW)
        .await
        .unwrap();
    assert_eq!(popped[0].task_id, b);
    for (key, cmd) in [
        ("ready:x", "EXISTS"),
        ("labelsets", "HLEN"),
        ("queues", "HLEN"),
    ] {
        assert_eq!(count(key, cmd).await, 0, "{key} is empty");
    }
    let _: () = redis::cmd("PING").query_async(&mut redis).await.unwrap();
}

/// The repair pass mends an index that no longer matches its queues: a queue with work
/// the index lost is found again, and an entry for a queue with none is dropped.
#[tokio::test(flavor = "multi_thread")]
async fn the_repair_check_mends_a_queue_index_that_lost_its_entries() {
    let (env, coord) = env_and_coord("redis-index-repair").await;
    let mut redis = env.redis().await;
    let id = Uuid::now_v7();
    coord
        .enqueue(&[entry(id, "kept", &[], 0, NOW)])
        .await
        .unwrap();
    let prefix = &env.redis_prefix;
    let _: () = redis::cmd("DEL")
        .arg(format!("{prefix}ready:-"))
        .arg(format!("{prefix}labelsets"))
        .query_async(&mut redis)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("{prefix}ready:-"))
        .arg(1)
        .arg("q:gone:-")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(
        pop_any(&coord, "n1", 1).await.is_empty(),
        "lost from the index"
    );
    assert_eq!(coord.queue_index_repair().await.unwrap(), 3);
    assert_eq!(
        coord.queue_index_repair().await.unwrap(),
        0,
        "nothing left to mend"
    );
    let popped = pop_any(&coord, "n1", 1).await;
    assert_eq!(task_ids(&popped), vec![id]);
}

/// A queue whose best entry is stale (its task already claimed) or whose index entry
/// outlived its work does not leave a lease empty while other queues have work: the lease
/// reads the next queues in line for the places left.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_best_queue_does_not_hide_the_next_ones() {
    let (env, coord) = env_and_coord("redis-index-stale").await;
    let mut redis = env.redis().await;
    let (stale, fresh) = (Uuid::now_v7(), Uuid::now_v7());
    coord
        .enqueue(&[
            entry(stale, "first", &[], 5, NOW),
            entry(fresh, "second", &[], 0, NOW),
        ])
        .await
        .unwrap();
    // The best queue's only entry is a task some lease already claimed.
    let _: () = redis::cmd("HSET")
        .arg(format!("{}running", env.redis_prefix))
        .arg(stale.to_string())
        .arg("other-node|lease|0|runner|boot")
        .query_async(&mut redis)
        .await
        .unwrap();
    // And an index entry whose queue has no work at all ranks before both.
    let _: () = redis::cmd("ZADD")
        .arg(format!("{}ready:-", env.redis_prefix))
        .arg(-1e18)
        .arg("q:emptied:-")
        .query_async(&mut redis)
        .await
        .unwrap();
    let popped = pop_any(&coord, "n1", 1).await;
    assert_eq!(task_ids(&popped), vec![fresh]);
    let left: u64 = redis::cmd("ZCARD")
        .arg(format!("{}ready:-", env.redis_prefix))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(left, 0, "the stale and the empty queue left the index");
}
