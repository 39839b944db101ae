//! Nodes die: killed (SIGKILL) holding claims, killed between the Redis pop and the
//! Postgres write of a lease, or paused past their TTL. Every accepted task still ends,
//! exactly once, and a node that lost its claims does not act on them.

use baton_core::LeaseId;
use baton_localcluster::testing as support;

use baton_client::{Client, CompleteTask, LeasedTask, Outcome, SubmitTask};
use baton_core::TaskStatus;
use std::time::{Duration, Instant};
use support::*;
use uuid::Uuid;

fn task(script: &str) -> SubmitTask {
    SubmitTask {
        script: Some(script.into()),
        ..Default::default()
    }
}

/// The fake runners here never restart: one boot id for all of their requests.
const BOOT: Uuid = Uuid::from_u128(0xb007);

async fn lease(runner: &Client, max: u32) -> Vec<LeasedTask> {
    runner.lease(&lease_now(BOOT, max)).await.unwrap().tasks
}

fn done(lease_id: LeaseId, outcome: Outcome) -> CompleteTask {
    CompleteTask {
        outcome,
        ..CompleteTask::succeeded(lease_id)
    }
}

/// Claims per node, as `GET /v1/nodes` on `via` reports them.
async fn claims(via: &Client) -> Vec<(String, u64)> {
    via.nodes()
        .await
        .map(|l| l.nodes.into_iter().map(|n| (n.id, n.claims)).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_nodes_claims_are_adopted_and_its_tasks_finish_through_the_others() {
    let env = TestEnv::new("failover-node-kill").await;
    let mut node_a = env.node_with(&FAST_HA).await;
    let node_b = env.node_with(&FAST_HA).await;
    let user = user_client(&node_b.url);
    let (_, runner_on_a) = register_runner(&node_a.url, &[], 4).await;
    let runner_on_b = Client::new(&node_b.url, None)
        .unwrap()
        .with_token(token_of(&runner_on_a));

    let (t1, _) = user.submit(&task("true")).await.unwrap();
    let (t2, _) = user.submit(&task("true")).await.unwrap();
    let (t3, _) = user.submit(&task("true")).await.unwrap();
    let leased = lease(&runner_on_a, 3).await;
    assert_eq!(leased.len(), 3);
    let lease_of = |id: Uuid| leased.iter().find(|t| t.id == id).unwrap().lease_id;
    runner_on_a.start(t1.id, lease_of(t1.id)).await.unwrap();
    runner_on_a.start(t2.id, lease_of(t2.id)).await.unwrap();
    // t3 stays leased and never started.
    assert_eq!(
        claims(&user)
            .await
            .iter()
            .find(|(n, _)| *n == node_a.node_id)
            .map(|c| c.1),
        Some(3)
    );

    node_a.kill();
    let killed_at = Instant::now();
    wait_for(
        "node B to adopt node A's claims",
        Duration::from_secs(15),
        || async {
            let c = claims(&user).await;
            (c.len() == 1 && c[0] == (node_b.node_id.clone(), 3)).then_some(())
        },
    )
    .await;
    let adoption = killed_at.elapsed();
    println!("adopted after {adoption:?}");
    assert!(
        adoption < Duration::from_millis(3 * (1500 + 300)),
        "adoption took {adoption:?}"
    );

    // The runner goes on through node B: its report lands, and its lease still fences.
    let ok = runner_on_b
        .complete(t1.id, &done(lease_of(t1.id), Outcome::Succeeded))
        .await
        .unwrap();
    assert_eq!(ok.status, TaskStatus::Succeeded);
    // t3 was never started: node B hands it out again after its ack timeout.
    let again = wait_for(
        "t3 to be requeued and leased again",
        Duration::from_secs(15),
        || async {
            let got = lease(&runner_on_b, 1).await;
            got.into_iter().find(|t| t.id == t3.id)
        },
    )
    .await;
    assert_ne!(again.lease_id, lease_of(t3.id));
    let stale = runner_on_b.start(t3.id, lease_of(t3.id)).await.unwrap_err();
    assert_eq!(
        stale.status().map(|s| s.as_u16()),
        Some(409),
        "the old lease is fenced off"
    );
    runner_on_b.start(t3.id, again.lease_id).await.unwrap();
    runner_on_b
        .complete(t3.id, &done(again.lease_id, Outcome::Succeeded))
        .await
        .unwrap();
    // t2's runner never reports again: node B declares it lost.
    let t2_done = env.wait_terminal(&user, t2.id).await;
    assert_eq!(t2_done.status, TaskStatus::Failed);
    assert_eq!(t2_done.error.as_deref(), Some("runner lost"));

    for id in [t1.id, t2.id, t3.id] {
        assert!(user.task_get(id).await.unwrap().status.is_terminal());
    }
    // The claims go right after the commits (Redis follows Postgres, in the background).
    wait_for(
        "no claim to outlive its task",
        Duration::from_secs(5),
        || async { (claims(&user).await == vec![(node_b.node_id.clone(), 0)]).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_killed_between_the_redis_pop_and_the_postgres_write_loses_nothing() {
    let env = TestEnv::new("failover-after-pop").await;
    let mut args = FAST_HA.to_vec();
    args.extend(["--fault", "after-pop"]);
    let mut faulty = env.node_with(&args).await;
    let healthy = env.node_with(&FAST_HA).await;
    let user = user_client(&healthy.url);
    let (_, runner) = register_runner(&healthy.url, &[], 1).await;
    let runner_on_faulty = Client::new(&faulty.url, None)
        .unwrap()
        .with_token(token_of(&runner));

    let (t, _) = user.submit(&task("true")).await.unwrap();
    let crashed = runner_on_faulty.lease(&lease_now(BOOT, 1)).await;
    assert!(crashed.is_err(), "the node died mid-lease");
    assert!(faulty.exited().await.is_ok());
    let stored: String = sqlx::query_scalar("SELECT status FROM tasks WHERE id = $1")
        .bind(t.id)
        .fetch_one(&mut env.db().await)
        .await
        .unwrap();
    assert_eq!(stored, "queued", "Postgres never saw the lease");

    // The dead node's claim is adopted, found never dispatched, and the task queued again.
    let leased = wait_for(
        "the task to be handed out again",
        Duration::from_secs(20),
        || async { lease(&runner, 1).await.into_iter().find(|l| l.id == t.id) },
    )
    .await;
    runner.start(t.id, leased.lease_id).await.unwrap();
    let finished = runner
        .complete(t.id, &done(leased.lease_id, Outcome::Succeeded))
        .await
        .unwrap();
    assert_eq!(finished.status, TaskStatus::Succeeded);
    assert_eq!(finished.attempt, 1, "it ran once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_node_resumed_after_its_claims_were_adopted_does_not_act_on_them() {
    let env = TestEnv::new("failover-pause").await;
    let node_a = env.node_with(&FAST_HA).await;
    let node_b = env.node_with(&FAST_HA).await;
    let user = user_client(&node_b.url);
    let (_, runner_a) = register_runner(&node_a.url, &[], 2).await;
    let runner_b = Client::new(&node_b.url, None)
        .unwrap()
        .with_token(token_of(&runner_a));
    let (t, _) = user.submit(&task("true")).await.unwrap();
    let leased = lease(&runner_a, 1).await.remove(0);
    runner_a.start(t.id, leased.lease_id).await.unwrap();

    node_a.signal("STOP");
    wait_for(
        "node B to adopt the paused node's claim",
        Duration::from_secs(15),
        || async {
            let c = claims(&user).await;
            (c == vec![(node_b.node_id.clone(), 1)]).then_some(())
        },
    )
    .await;
    node_a.signal("CONT");

    // Node A comes back under a new id, with nothing: the claim stays node B's.
    let rejoined = wait_for(
        "node A to rejoin under a new id",
        Duration::from_secs(15),
        || async {
            let c = claims(&user).await;
            let a = c
                .iter()
                .find(|(id, _)| id.starts_with(&format!("{}.", node_a.node_id)))?
                .clone();
            (c.len() == 2).then_some((a, c))
        },
    )
    .await;
    assert_eq!(
        rejoined.0.1, 0,
        "the resumed node owns nothing: {:?}",
        rejoined.1
    );
    assert!(rejoined.1.contains(&(node_b.node_id.clone(), 1)));
    let mut redis = env.redis().await;
    let claim: String = redis::cmd("HGET")
        .arg(format!("{}running", env.redis_prefix))
        .arg(t.id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(
        claim.starts_with(&format!("{}|", node_b.node_id)),
        "{claim}"
    );

    let finished = runner_b
        .complete(t.id, &done(leased.lease_id, Outcome::Succeeded))
        .await
        .unwrap();
    assert_eq!(finished.status, TaskStatus::Succeeded);
    // Node A says why it came back under a new id (its log is written as it goes: read
    // until the line is there).
    wait_for(
        "node A to log that it had lapsed",
        Duration::from_secs(10),
        || {
            let log = std::fs::read_to_string(&node_a.log).unwrap_or_default();
            async move { log.contains("rejoining under a new id").then_some(()) }
        },
    )
    .await;
}

/// The bearer token a runner client carries (to use it through another node).
fn token_of(client: &Client) -> String {
    let req = client.request(reqwest::Method::GET, "/").build().unwrap();
    req.headers()["authorization"]
        .to_str()
        .unwrap()
        .trim_start_matches("Bearer ")
        .to_string()
}
