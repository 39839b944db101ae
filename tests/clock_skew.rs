//! Nodes whose wall clocks disagree. Wherever one node's time is judged by another — a
//! runner's presence stamped by the node it talks to and judged by the node that owns its
//! task — both read the cluster's clock (Redis's), so a node half a minute behind moves
//! no threshold. The skewed node reads its wall clock through libfaketime (Debian
//! `faketime`, which scripts/test.sh installs).

use baton_localcluster::testing as support;

use baton_client::{Exchange, RunningLease, SubmitTask};
use baton_core::TaskStatus;
use baton_localcluster::skewed_clock::faketime_library;
use std::time::Duration;
use support::procs::RunnerProc;
use support::*;
use uuid::Uuid;

/// Runs on this node's wall clock, `offset_s` from the real one (monotonic time untouched).
fn skewed(offset_s: i64) -> Vec<(String, String)> {
    vec![
        (
            "LD_PRELOAD".into(),
            faketime_library()
                .expect("libfaketime (apt-get install faketime)")
                .display()
                .to_string(),
        ),
        ("FAKETIME".into(), format!("{offset_s:+}")),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}

/// A runner leases on node B (B owns the task's claim and reconciles it), then is heard
/// only by node A, whose wall clock is 30 s behind — far more than `runner_lost_after`
/// (6 s here). A's presence stamps must not look 30 s old to B.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_heard_only_by_a_node_whose_clock_is_behind_is_not_lost() {
    let env = TestEnv::new("clock-skew-presence").await;
    let behind = NodeProc::start_with_env(&env, &FAST_HA, &skewed(-30)).await;
    let owner = env.node_with(&FAST_HA).await;
    let user = user_client(&owner.url);
    let (_, token) = register_runner_token(&owner.url, &[], 1).await;
    let on_owner = baton_client::Client::new(&owner.url, Some(token.clone())).unwrap();
    let on_behind = baton_client::Client::new(&behind.url, Some(token)).unwrap();
    let (task, _) = user
        .submit(&SubmitTask {
            command: Some(vec!["true".into()]),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let boot = Uuid::now_v7();
    let leased = on_owner
        .exchange(&exchange_starting(boot, 1, 0))
        .await
        .unwrap()
        .tasks;
    assert_eq!(leased.len(), 1);
    let held = RunningLease {
        task_id: task.id,
        lease_id: leased[0].lease_id,
        reporting: false,
    };
    // The runner's own heartbeat cadence, for twice `runner_lost_after`, through A only.
    let mut beats = tokio::time::interval(Duration::from_secs(1));
    for _ in 0..12 {
        beats.tick().await;
        let answer = on_behind
            .exchange(&Exchange {
                request_id: Uuid::new_v4(),
                boot_id: boot,
                running: Some(vec![held]),
                ..Exchange::default()
            })
            .await
            .unwrap();
        assert!(
            answer.gone.is_empty(),
            "the lease is still the runner's: {answer:?}"
        );
    }
    let now = user.task_get(task.id).await.unwrap();
    assert_eq!(now.status.as_str(), "running", "not ended as lost: {now:?}");
}

/// A runner killed and started again after its wall clock was stepped back an hour (an
/// NTP correction, a VM restored from a snapshot): its new boot must still count as later
/// than the one its run was leased to, so the run — which died with the old boot — ends
/// at once as `runner restarted`. Before, the new boot's id (a UUIDv7, from the wall
/// clock) sorted before the old one, the restart went unseen, and the run was left to its
/// timeout (the drill found a finished run ended `timed_out` so).
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_restarted_on_a_clock_stepped_back_is_seen_restarted() {
    let env = TestEnv::new("clock-skew-boot").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let fast = ["--heartbeat-s", "1"];
    let mut runner = env.runner_with(&node.url, &["a"], 1, &fast).await;
    let (task, _) = user
        .submit(&SubmitTask {
            script: Some("exec sleep 300".into()),
            labels: vec!["a".into()],
            timeout_s: Some(120),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    wait_for("the task to run", Duration::from_secs(30), || async {
        let now = user.task_get(task.id).await.ok()?;
        (now.status == TaskStatus::Running).then_some(())
    })
    .await;

    runner.kill();
    let _again = RunnerProc::start(
        &env,
        &node.url,
        &["a"],
        1,
        &fast,
        Some(&runner.state_dir),
        &skewed(-3600),
    )
    .await;
    let ended = wait_for(
        "the run to be ended, well before its timeout",
        Duration::from_secs(30),
        || async {
            let now = user.task_get(task.id).await.ok()?;
            now.status.is_terminal().then_some(now)
        },
    )
    .await;
    assert_eq!(ended.status, TaskStatus::Failed, "{ended:?}");
    assert_eq!(
        ended.error.as_deref(),
        Some("runner restarted"),
        "{ended:?}"
    );
}
