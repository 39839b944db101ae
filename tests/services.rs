//! The node's services, one pass at a time, with the time the test chooses: each is built
//! in-process from the few handles it uses and driven through `run_once(now)` against
//! real Redis and Postgres, so a threshold of minutes or days is crossed by stepping `now`
//! instead of waiting. A real node serves the API the set-up goes through; its own
//! services run on the real clock, where none of these thresholds is near.

use baton_core::{LeaseId, RunnerId};
use baton_localcluster::testing as support;

use baton_client::{Client, SubmitTask};
use baton_coord::{Coord, CoordOptions, NodeInfo, RedisTarget};
use baton_core::TaskStatus;
use baton_server::config::Timings;
use baton_server::dispatch::finish::ServerFinalizer;
use baton_server::identity::NodeIdentity;
use baton_server::services::janitor::{Janitor, JanitorSettings};
use baton_server::services::orphan_cleaner::OrphanCleaner;
use baton_server::services::promoter::Promoter;
use baton_server::services::rebuilder::Rebuilder;
use baton_server::services::reconciler::{Reconciler, ReconcilerSettings};
use baton_server::services::repairer::{Mode, Repairer, RepairerSettings};
use baton_server::state::StalenessClocks;
use baton_store::{FinishPolicy, GroupCommit, GroupCommitSettings, Store, StoreOptions};
use chrono::{DateTime, Timelike, Utc};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use uuid::Uuid;

/// What the services are built from: the handles a node gives them, acting as `node_id`.
struct Handles {
    store: Store,
    coord: Coord,
    identity: Arc<NodeIdentity>,
    clocks: Arc<StalenessClocks>,
    commit: GroupCommit,
    timings: Timings,
}

impl Handles {
    fn new(env: &TestEnv, node_id: &str, started: DateTime<Utc>) -> Handles {
        let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
        let coord = Coord::new(
            RedisTarget::Url(env.redis_url.clone()),
            &env.redis_prefix,
            &CoordOptions::default(),
        )
        .unwrap();
        let identity = Arc::new(NodeIdentity::new(
            NodeInfo {
                id: node_id.to_string(),
                addr: "in-process".into(),
                started_at_ms: started.timestamp_millis(),
                opens_sealed_secrets: true,
            },
            3_600_000,
        ));
        // Live: the node of this id refreshes the key; these services act as it.
        identity.beat_succeeded(Instant::now());
        let timings = Timings::default();
        let commit = GroupCommit::spawn(
            store.clone(),
            GroupCommitSettings {
                writers: 1,
                max_items: 64,
                linger: Duration::ZERO,
                log_cap: 1 << 20,
                policy: FinishPolicy {
                    backoff: timings.retry_backoff(),
                    jitter_unit: 0.5,
                },
                now: Arc::new(Utc::now),
                fault: None,
                observer: None,
            },
        );
        Handles {
            store,
            coord,
            identity,
            clocks: Arc::new(StalenessClocks::new(started.timestamp_millis())),
            commit,
            timings,
        }
    }

    fn reconciler(&self) -> Reconciler {
        let finalizer = ServerFinalizer::new(
            self.commit.clone(),
            self.coord.clone(),
            self.identity.clone(),
            Duration::from_secs(30),
        );
        Reconciler::new(
            ReconcilerSettings::of(&self.timings),
            self.identity.clone(),
            self.store.clone(),
            self.coord.clone(),
            self.clocks.clone(),
            finalizer,
        )
    }
}

fn secs(s: i64) -> chrono::Duration {
    chrono::Duration::seconds(s)
}

async fn submit(user: &Client, task: SubmitTask) -> Uuid {
    user.submit(&SubmitTask {
        command: Some(vec!["true".into()]),
        ..task
    })
    .await
    .unwrap()
    .0
    .id
}

/// A node, and a task started on it by a runner of capacity 1: the task and its lease.
async fn a_started_task(env: &TestEnv) -> (NodeProc, Uuid, LeaseId) {
    let node = env.node().await;
    let (_, task, lease_id) = a_task_started_on(&node.url).await;
    (node, task, lease_id)
}

/// A runner of capacity 1 registered with the node at `url`, and a task it started there:
/// the runner, the task and its lease.
async fn a_task_started_on(url: &str) -> (RunnerId, Uuid, LeaseId) {
    let (runner_id, runner) = register_runner(url, &[], 1).await;
    let task = submit(&user_client(url), SubmitTask::default()).await;
    let answer = runner
        .exchange(&exchange_starting(Uuid::now_v7(), 1, 0))
        .await
        .unwrap();
    assert_eq!(answer.tasks.len(), 1, "the runner got its task");
    (runner_id, task, answer.tasks[0].lease_id)
}

async fn status(env: &TestEnv, id: Uuid) -> Option<(String, Option<String>)> {
    sqlx::query_as("SELECT status, error FROM tasks WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut env.db().await)
        .await
        .unwrap()
}

/// A running task whose runner fell silent: kept until `runner_lost_after` past the last
/// time any node heard the runner, ended at once after — and, while an outage of the
/// node's stores is on, or until its end is that long past, not ended at all.
#[tokio::test(flavor = "multi_thread")]
async fn the_reconciler_ends_a_silent_runners_run_only_past_runner_lost_after() {
    let env = TestEnv::new("services-reconciler").await;
    let node = env.node().await;
    let started = Utc::now();
    let (runner_id, task, _) = a_task_started_on(&node.url).await;
    let handles = Handles::new(&env, &node.node_id, started);
    let heard = wait_for(
        "the runner's presence in redis",
        Duration::from_secs(10),
        || {
            let coord = handles.coord.clone();
            async move { coord.presence_get(&[runner_id]).await.ok()?.pop()? }
        },
    )
    .await
    .0;
    let heard = DateTime::<Utc>::from_timestamp_millis(heard).unwrap();
    let lost_after = secs(handles.timings.runner_lost_after_s as i64);
    let reconciler = handles.reconciler();

    let report = reconciler
        .run_once(heard + lost_after - secs(5))
        .await
        .unwrap();
    assert_eq!((report.examined, report.ended), (1, 0), "{report:?}");
    assert_eq!(status(&env, task).await.unwrap().0, "running");

    // Postgres or Redis away: a silence then says nothing of the runner.
    handles.clocks.outage();
    let report = reconciler.run_once(heard + lost_after * 2).await.unwrap();
    assert_eq!(report.ended, 0, "nothing ends during an outage: {report:?}");
    let outage_ended = heard + lost_after;
    handles.clocks.healthy(outage_ended.timestamp_millis());
    let report = reconciler
        .run_once(outage_ended + lost_after - secs(5))
        .await
        .unwrap();
    assert_eq!(
        report.ended, 0,
        "the clocks restarted at the outage's end: {report:?}"
    );
    assert_eq!(status(&env, task).await.unwrap().0, "running");

    let report = reconciler
        .run_once(outage_ended + lost_after + secs(5))
        .await
        .unwrap();
    assert_eq!(report.ended, 1, "{report:?}");
    let (status, error) = status(&env, task).await.unwrap();
    assert_eq!(status, TaskStatus::Failed.as_str());
    assert!(
        error.as_deref().is_some_and(|e| e.contains("lost")),
        "ended as runner lost: {error:?}"
    );
}

/// A dead node's claims are taken over by one pass of another node's cleaner, once, and
/// the run under them goes on.
#[tokio::test(flavor = "multi_thread")]
async fn the_orphan_cleaner_adopts_a_dead_nodes_claims_once() {
    let env = TestEnv::new("services-orphans").await;
    let (mut node, task, _) = a_started_task(&env).await;
    let dead = node.node_id.clone();
    node.kill();
    let handles = Handles::new(&env, "adopter", Utc::now());
    // Its liveness key gone at once, as at the end of its TTL.
    handles.coord.node_leave(&dead).await.unwrap();
    let cleaner = OrphanCleaner::new(
        Duration::from_secs(1),
        handles.identity.clone(),
        handles.coord.clone(),
        handles.store.clone(),
        handles.reconciler(),
    );

    let report = cleaner.run_once(Utc::now()).await.unwrap();
    assert_eq!(report.dead_nodes, vec![dead], "{report:?}");
    assert_eq!(report.adopted, 1, "{report:?}");
    let claim = handles
        .coord
        .claim_get(task)
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(claim.node, "adopter");
    assert_eq!(
        status(&env, task).await.unwrap().0,
        "running",
        "the run goes on"
    );
    let again = cleaner.run_once(Utc::now()).await.unwrap();
    assert_eq!(again.adopted, 0, "adopted once: {again:?}");
}

/// A task waiting for its `run_at` is promoted by the first pass at or after it, never
/// before.
#[tokio::test(flavor = "multi_thread")]
async fn the_promoter_queues_a_delayed_task_at_its_time_and_not_before() {
    let env = TestEnv::new("services-promoter").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    // Whole seconds: Postgres rounds a timestamp given as text to microseconds.
    let run_at = (Utc::now() + secs(3600)).with_nanosecond(0).unwrap();
    let task = submit(
        &user,
        SubmitTask {
            run_at: Some(run_at),
            ..SubmitTask::default()
        },
    )
    .await;
    let handles = Handles::new(&env, &node.node_id, Utc::now());
    let promoter = Promoter::new(
        Duration::from_secs(1),
        handles.store.clone(),
        handles.coord.clone(),
    );
    let report = promoter.run_once(run_at - secs(1)).await.unwrap();
    assert_eq!(report.promoted, 0);
    assert_eq!(status(&env, task).await.unwrap().0, "scheduled");
    let report = promoter.run_once(run_at).await.unwrap();
    assert_eq!(report.promoted, 1);
    assert_eq!(status(&env, task).await.unwrap().0, "queued");
}

/// A finished task is kept for the retention, then deleted.
#[tokio::test(flavor = "multi_thread")]
async fn the_janitor_deletes_finished_tasks_once_the_retention_has_passed() {
    let env = TestEnv::new("services-janitor").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let task = submit(&user, SubmitTask::default()).await;
    let ended = user.task_cancel(task).await.unwrap();
    assert_eq!(ended.status, TaskStatus::Cancelled);
    let finished = Utc::now();
    let handles = Handles::new(&env, &node.node_id, finished);
    let settings = JanitorSettings::of(&handles.timings);
    let retention = settings.retention;
    let janitor = Janitor::new(settings, handles.store.clone(), handles.coord.clone());
    let report = janitor
        .run_once(finished + retention - secs(60))
        .await
        .unwrap();
    assert_eq!(report.tasks_deleted, 0);
    assert!(status(&env, task).await.is_some());
    let report = janitor
        .run_once(finished + retention + secs(60))
        .await
        .unwrap();
    assert_eq!(report.tasks_deleted, 1);
    assert!(status(&env, task).await.is_none(), "the task is gone");
}

/// A queued task no Redis queue holds is queued again — once it is older than the grace
/// that leaves a submit between its commit and its Redis add alone.
#[tokio::test(flavor = "multi_thread")]
async fn the_repair_pass_queues_a_lost_entry_again_only_past_its_grace() {
    let env = TestEnv::new("services-repairer").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let task = submit(
        &user,
        SubmitTask {
            queue: Some("repair".into()),
            ..SubmitTask::default()
        },
    )
    .await;
    let submitted = Utc::now();
    let handles = Handles::new(&env, &node.node_id, submitted);
    let queue_key = handles
        .coord
        .queue_entries()
        .await
        .unwrap()
        .into_iter()
        .find(|(_, ids)| ids.contains(&task))
        .expect("the submit queued the task")
        .0;
    handles
        .coord
        .queue_remove(&[(task, queue_key.clone())])
        .await
        .unwrap();
    let settings = RepairerSettings::of(&handles.timings);
    let grace = settings.grace;
    let repairer = Repairer::new(
        settings,
        handles.identity.clone(),
        handles.store.clone(),
        handles.coord.clone(),
    );
    let report = repairer
        .run_once(submitted, Mode::Periodic { grace })
        .await
        .unwrap();
    assert_eq!(report.requeued, 0, "within the grace: {report:?}");
    let missing = |coord: Coord, key: String| async move {
        coord.queue_missing(&[(task, key)]).await.unwrap()
    };
    assert_eq!(
        missing(handles.coord.clone(), queue_key.clone()).await,
        vec![task]
    );
    let later = submitted + chrono::Duration::from_std(grace).unwrap() + secs(1);
    let report = repairer
        .run_once(later, Mode::Periodic { grace })
        .await
        .unwrap();
    assert_eq!(report.requeued, 1, "{report:?}");
    assert!(missing(handles.coord.clone(), queue_key).await.is_empty());
}

/// A runner that registered a moment ago has not been heard long enough for its presence
/// to reach Redis (nodes write it once per `presence_write_ms`), nor Postgres: its
/// registration is the first sign of life its runs are judged by, not the node's start.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_registered_a_moment_ago_is_not_taken_for_lost() {
    let env = TestEnv::new("services-new-runner").await;
    // Presence stays in the node: nothing of this runner's reaches Redis or Postgres.
    let node = env.node_with(&["--presence-write-ms", "3600000"]).await;
    let long_ago = Utc::now() - secs(3600);
    let handles = Handles::new(&env, &node.node_id, long_ago);
    // The cluster has been up (and Redis whole) for an hour: the marker the node's first
    // rebuild wrote, written again an hour older.
    wait_for("the node's rebuild", Duration::from_secs(10), || async {
        handles.coord.epoch_get().await.ok()?
    })
    .await;
    let lock = handles
        .coord
        .lock_acquire("services-test", "services-test", Duration::from_secs(60))
        .await
        .unwrap()
        .expect("a lock nobody else takes");
    assert!(
        handles
            .coord
            .epoch_set_holding(
                &lock,
                baton_coord::Epoch {
                    id: Uuid::new_v4(),
                    since_ms: long_ago.timestamp_millis(),
                },
            )
            .await
            .unwrap()
    );
    let registered = Utc::now();
    let (_, task, _) = a_task_started_on(&node.url).await;
    let reconciler = handles.reconciler();
    let report = reconciler.run_once(Utc::now()).await.unwrap();
    assert_eq!((report.examined, report.ended), (1, 0), "{report:?}");
    assert_eq!(status(&env, task).await.unwrap().0, "running");
    // Never heard again: lost `runner_lost_after` past its registration.
    let lost_after = secs(handles.timings.runner_lost_after_s as i64);
    let report = reconciler
        .run_once(registered + lost_after + secs(5))
        .await
        .unwrap();
    assert_eq!(report.ended, 1, "{report:?}");
}

/// A server-side end with no Redis to take the finalize lock in: the run is left for the
/// next pass, not ended unlocked (the lock's doc), and nothing is half done.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_side_end_without_redis_leaves_the_run_for_the_next_pass() {
    let env = TestEnv::new("services-finalizer").await;
    let (node, task, lease_id) = a_started_task(&env).await;
    let handles = Handles::new(&env, &node.node_id, Utc::now());
    let nowhere = Coord::new(
        RedisTarget::Url("redis://127.0.0.1:1".into()),
        &env.redis_prefix,
        &CoordOptions {
            command_timeout: Duration::from_millis(200),
            connect_timeout: Duration::from_millis(200),
            ..CoordOptions::default()
        },
    )
    .unwrap();
    let finalizer = ServerFinalizer::new(
        handles.commit.clone(),
        nowhere,
        handles.identity.clone(),
        Duration::from_secs(30),
    );
    let end = baton_store::RunEnd::by_server(TaskStatus::Failed, "runner lost");
    let ended = finalizer.end(task, lease_id, end).await.unwrap();
    assert!(ended.is_none(), "left for the next pass: {ended:?}");
    assert_eq!(status(&env, task).await.unwrap().0, "running");
}

/// Redis lost its data: the rebuilder's pass puts every queued task back in its queue
/// and writes the generation marker last; the next pass finds the marker and does
/// nothing.
#[tokio::test(flavor = "multi_thread")]
async fn the_rebuilder_restores_the_queues_and_writes_the_marker_last() {
    let env = TestEnv::new("services-rebuilder").await;
    // Its own rebuilder looks once at start, then not for 20 s.
    let node = env.node_with(&["--node-ttl-ms", "60000"]).await;
    let user = user_client(&node.url);
    let tasks = [
        submit(&user, SubmitTask::default()).await,
        submit(&user, SubmitTask::default()).await,
    ];
    let handles = Handles::new(&env, &node.node_id, Utc::now());
    wait_for(
        "the node's first rebuild",
        Duration::from_secs(10),
        || async { handles.coord.epoch_get().await.ok()? },
    )
    .await;
    // Everything of this cluster's in Redis, gone.
    let mut redis = env.redis().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", env.redis_prefix))
        .query_async(&mut redis)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(keys)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(handles.coord.epoch_get().await.unwrap().is_none());
    let repairer = Repairer::new(
        RepairerSettings::of(&handles.timings),
        handles.identity.clone(),
        handles.store.clone(),
        handles.coord.clone(),
    );
    let rebuilder = Rebuilder::new(
        Duration::from_secs(1),
        handles.identity.clone(),
        handles.coord.clone(),
        repairer,
    );
    let now = Utc::now();
    let report = rebuilder.run_once(now).await.unwrap().expect("it rebuilt");
    assert_eq!(report.requeued, 2, "{report:?}");
    let epoch = handles
        .coord
        .epoch_get()
        .await
        .unwrap()
        .expect("the marker");
    assert_eq!(epoch.since_ms, now.timestamp_millis());
    let entries: Vec<Uuid> = handles
        .coord
        .queue_entries()
        .await
        .unwrap()
        .into_iter()
        .flat_map(|(_, ids)| ids)
        .collect();
    for task in tasks {
        assert!(entries.contains(&task), "{task} is queued again");
    }
    assert!(rebuilder.run_once(Utc::now()).await.unwrap().is_none());
}
