//! Graceful drain, behind the production nginx configuration (deploy/nginx/baton.conf):
//! SIGTERM a node that has runners parked on it and tasks it dispatched still running.
//! Its parked leases are answered at once with no work, nginx sends everything after to
//! the other node, no request through nginx fails, the node leaves the cluster (its claims
//! adopted) and exits within its grace period, and every task ends once, on its first run.

use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use baton_core::TaskStatus;
use std::time::{Duration, Instant};
use support::nginx::{NginxProc, conf};
use support::*;
use uuid::Uuid;

const DRAIN_GRACE_S: u64 = 10;

/// The production configuration with this test's nodes in it.
fn lb_config(nodes: &[&NodeProc]) -> String {
    let ports: Vec<u16> = nodes
        .iter()
        .map(|n| n.url.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    conf::site(conf::PRODUCTION, "{listen}", &ports)
}

/// How many lease requests are parked on a node now.
async fn parked_on(url: &str) -> Option<u64> {
    let ready: serde_json::Value = reqwest::get(format!("{url}/readyz"))
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    ready["parked_leases"].as_u64()
}

fn task(i: usize, sleep_s: f32) -> SubmitTask {
    SubmitTask {
        labels: vec!["drain".into()],
        script: Some(format!("sleep {sleep_s}; echo task {i} done")),
        idempotency_key: Some(format!("drain-{i}")),
        ..SubmitTask::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_draining_node_hands_over_without_failing_a_request() {
    let env = TestEnv::new("drain").await;
    let grace = DRAIN_GRACE_S.to_string();
    let with_grace: Vec<&str> = FAST_HA
        .iter()
        .copied()
        .chain(["--drain-grace-s", &grace])
        .collect();
    let mut a = env.node_with(&with_grace).await;
    let b = env.node_with(&FAST_HA).await;
    let lb = NginxProc::start(&env.dir, &lb_config(&[&a, &b])).await;
    // A lease parked on A itself, from a runner speaking the protocol directly (parked
    // before anything else can be, so A's count is this one).
    let (_, direct) = register_runner(&a.url, &["elsewhere"], 1).await;
    let parked = tokio::spawn(async move {
        let started = Instant::now();
        let answer = direct.lease(&lease_waiting(Uuid::new_v4(), 1, 50)).await;
        (answer, started.elapsed())
    });
    a.wait_parked("the direct lease parked on A", |n| n >= 1)
        .await;
    // Two agents with a free slot each once four tasks run, so each keeps a lease parked
    // on one node or the other.
    let runners = [
        env.runner_with(&lb.url, &["drain"], 3, &["--wait-s", "20"])
            .await,
        env.runner_with(&lb.url, &["drain"], 3, &["--wait-s", "20"])
            .await,
    ];
    let client = user_client(&lb.url);

    // Work A dispatched and that is still running when it is told to stop.
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(client.submit(&task(i, 3.0)).await.unwrap().0.id);
    }
    wait_for("all four running", Duration::from_secs(20), || {
        let client = &client;
        let ids = &ids;
        async move {
            for id in ids {
                if client.task_get(*id).await.ok()?.status != TaskStatus::Running {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;
    // The precondition: both agents parked too (besides the direct lease on A).
    let (on_a, on_b) = wait_for("both agents parked", Duration::from_secs(20), || async {
        let (on_a, on_b) = (parked_on(&a.url).await?, parked_on(&b.url).await?);
        (on_a + on_b >= 3).then_some((on_a, on_b))
    })
    .await;
    eprintln!("parked before the drain: {on_a} on A, {on_b} on B");

    let a_url = a.url.clone();
    let stopping = Instant::now();
    let terminated = tokio::spawn(async move {
        let code = a.terminate(Duration::from_secs(DRAIN_GRACE_S + 5)).await;
        (code, a)
    });
    // A first says it is leaving (its listener still open): readiness fails.
    let readyz = wait_for("A's readiness to fail", Duration::from_secs(5), || {
        let req = reqwest::get(format!("{a_url}/readyz"));
        async move {
            req.await
                .ok()
                .filter(|r| r.status() == 503)
                .map(|r| r.status())
        }
    })
    .await;
    assert_eq!(readyz, 503);
    // New work keeps arriving through nginx while A drains.
    for i in 4..10 {
        let (t, created) = client
            .submit(&task(i, 0.2))
            .await
            .expect("a submit during the drain");
        assert!(created);
        ids.push(t.id);
    }

    let (answer, waited) = parked.await.unwrap();
    let answer = answer.expect("the parked lease is answered, not failed");
    assert!(answer.tasks.is_empty(), "no work from a draining node");
    assert!(
        waited < Duration::from_secs(5),
        "answered early: {waited:?} of 30 s"
    );
    let (code, a) = terminated.await.unwrap();
    assert_eq!(
        code,
        Some(0),
        "A exits cleanly within its grace; see {}",
        a.log.display()
    );
    eprintln!("A drained and exited in {:?}", stopping.elapsed());
    assert!(
        stopping.elapsed() < Duration::from_secs(DRAIN_GRACE_S),
        "A exited in {:?}",
        stopping.elapsed()
    );

    // A left the cluster at once; B holds everything still dispatched.
    let b_client = user_client(&b.url);
    let nodes = b_client.nodes().await.unwrap();
    assert_eq!(
        nodes
            .nodes
            .iter()
            .map(|n| n.id.as_str())
            .collect::<Vec<_>>(),
        vec![b.node_id.as_str()]
    );
    for id in &ids {
        let done = env.wait_terminal(&b_client, *id).await;
        assert_eq!(done.status, TaskStatus::Succeeded, "task {id}");
        assert_eq!(done.attempt, 1, "task {id} ran once");
    }
    for (i, runner) in runners.iter().enumerate() {
        let log = std::fs::read_to_string(&runner.log).unwrap();
        assert!(!log.contains("runner stopped"), "runner {i} kept running");
    }
    // Nothing nginx passed on failed: no 5xx in its access log.
    let access = std::fs::read_to_string(lb.dir.join("access.log")).unwrap();
    let failed: Vec<&str> = access
        .lines()
        .filter(|l| {
            l.split('"')
                .nth(2)
                .and_then(|rest| rest.split_whitespace().next())
                .is_some_and(|status| status.starts_with('5'))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "requests failed through nginx:\n{}",
        failed.join("\n")
    );
}
