//! Cancellation in every state: before it runs it is cancelled at once; while it runs its
//! runner is told (at once if parked), kills the process group and reports `cancelled`;
//! after it ended, a 409 with its status.

use baton_core::LeaseId;
use baton_localcluster::testing as support;

use baton_client::{CompleteTask, Outcome, SubmitTask};
use baton_core::TaskStatus;
use std::time::Duration;
use support::*;
use uuid::Uuid;

const BOOT: Uuid = Uuid::from_u128(0xb007);

fn simple(labels: &[&str]) -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        labels: labels.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// The task `runner` (boot `BOOT`) leases when it asks for one, there being one for it.
async fn lease_one(runner: &baton_client::Client) -> baton_client::LeasedTask {
    runner
        .lease(&lease_now(BOOT, 1))
        .await
        .unwrap()
        .tasks
        .remove(0)
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_that_have_not_started_are_cancelled_at_once() {
    let env = TestEnv::new("cancel-early").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &["x"], 4).await;
    let mut redis = env.redis().await;

    let (scheduled, _) = user
        .submit(&SubmitTask {
            run_at: Some(chrono::Utc::now() + chrono::Duration::hours(1)),
            ..simple(&[])
        })
        .await
        .unwrap();
    let (queued, _) = user.submit(&simple(&["nobody"])).await.unwrap();
    let (leased, _) = user.submit(&simple(&["x"])).await.unwrap();
    let lease = lease_one(&runner).await;
    assert_eq!(lease.id, leased.id);

    for t in [&scheduled, &queued, &leased] {
        let done = user.task_cancel(t.id).await.unwrap();
        assert_eq!(done.status, TaskStatus::Cancelled, "{t:?}");
    }
    // Gone from Redis: the delayed set, the queue, the claim.
    let prefix = &env.redis_prefix;
    let mut field = async |command: &str, key: String, id: Uuid| -> Option<String> {
        redis::cmd(command)
            .arg(key)
            .arg(id.to_string())
            .query_async(&mut redis)
            .await
            .unwrap()
    };
    let delayed = field("ZSCORE", format!("{prefix}delayed"), scheduled.id).await;
    let in_queue = field("ZSCORE", format!("{prefix}q:default:nobody"), queued.id).await;
    let claim = field("HGET", format!("{prefix}running"), leased.id).await;
    assert_eq!((delayed, in_queue, claim), (None, None, None));
    // The runner that held the lease cannot start it.
    let refused = runner.start(leased.id, lease.lease_id).await.unwrap_err();
    assert_eq!(refused.status().map(|s| s.as_u16()), Some(409));

    // Cancelling again, or a finished task, is a conflict that names the status.
    let again = user.task_cancel(queued.id).await.unwrap_err();
    match again {
        baton_client::ClientError::Api(e) => {
            assert_eq!(e.status.as_u16(), 409);
            assert_eq!(e.body.error.status, Some(TaskStatus::Cancelled));
        }
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_task_is_stopped_by_its_runner_and_reported_cancelled() {
    let env = TestEnv::new("cancel-running").await;
    let node_a = env.node_with(&FAST_HA).await;
    let node_b = env.node_with(&FAST_HA).await;
    // The runner parks on node A with a long wait; the cancel arrives on node B.
    let _runner = env
        .runner_with(
            &node_a.url,
            &[],
            2,
            &["--wait-s", "30", "--heartbeat-s", "30"],
        )
        .await;
    let user = user_client(&node_b.url);
    // A task that ignores nothing: its child shell traps TERM to show it got it.
    let (t, _) = user
        .submit(&SubmitTask {
            script: Some(
                "echo $$; sleep 300 & echo $!; trap 'echo got TERM; exit 143' TERM; wait".into(),
            ),
            ..Default::default()
        })
        .await
        .unwrap();
    let pids: Vec<u32> = wait_for(
        "the task to print its pids",
        Duration::from_secs(20),
        || async {
            let log = read_log(&user, t.id).await;
            let pids: Vec<u32> = String::from_utf8_lossy(&log)
                .lines()
                .filter_map(|l| l.parse().ok())
                .collect();
            (pids.len() == 2).then_some(pids)
        },
    )
    .await;
    // Its runner is parked (one free slot) with heartbeats 30 s apart: only the wake-up
    // can tell it quickly.
    node_a.wait_parked("the runner to park", |n| n >= 1).await;
    let cancelling = user.task_cancel(t.id).await.unwrap();
    assert_eq!(cancelling.status, TaskStatus::Cancelling);
    let done = wait_for(
        "the runner to report cancelled",
        Duration::from_secs(10),
        || async {
            user.task_get(t.id)
                .await
                .ok()
                .filter(|t| t.status.is_terminal())
        },
    )
    .await;
    assert_eq!(done.status, TaskStatus::Cancelled);
    for pid in pids {
        wait_for(
            &format!("{pid} to be gone"),
            Duration::from_secs(10),
            || async { (!alive(pid)).then_some(()) },
        )
        .await;
    }
    let log = String::from_utf8(read_log(&user, t.id).await).unwrap();
    assert!(log.contains("got TERM"), "SIGTERM first: {log}");
    // A cancelled task never retries, and cancelling it again is a conflict.
    assert_eq!(
        user.task_cancel(t.id)
            .await
            .unwrap_err()
            .status()
            .map(|s| s.as_u16()),
        Some(409)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_that_arrives_while_cancelling_stands_as_reported() {
    let run = a_cancelling_run("cancel-race", &FAST_HA).await;
    let (runner, task, lease) = (&run.runner, run.task, run.lease);
    let beat = runner
        .heartbeat(&heartbeat_of(BOOT, task, lease))
        .await
        .unwrap();
    assert_eq!(
        beat.cancel,
        vec![task],
        "the heartbeat answer carries the cancel"
    );
    let ack = runner.log_append(task, lease, 0, "x".into()).await.unwrap();
    assert!(ack.cancel, "so does a log answer");
    let done = runner
        .complete(
            task,
            &CompleteTask {
                outcome: Outcome::Failed,
                exit_code: Some(1),
                log_size: Some(1),
                ..CompleteTask::succeeded(lease)
            },
        )
        .await
        .unwrap();
    assert_eq!(
        done.status,
        TaskStatus::Failed,
        "the work did finish, and a cancelled task never retries"
    );
}

/// A node started with `node_args` and one runner (boot `BOOT`), and a task of that
/// runner leased, started, then cancelled: `cancelling`.
struct CancellingRun {
    user: baton_client::Client,
    runner: baton_client::Client,
    task: Uuid,
    lease: LeaseId,
    // Held for the test's length; the node is declared first so that it stops before its
    // environment goes.
    _node: NodeProc,
    _env: TestEnv,
}

async fn a_cancelling_run(name: &str, node_args: &[&str]) -> CancellingRun {
    let env = TestEnv::new(name).await;
    let node = env.node_with(node_args).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (t, _) = user
        .submit(&SubmitTask {
            max_attempts: Some(3),
            ..simple(&[])
        })
        .await
        .unwrap();
    let lease = lease_one(&runner).await;
    runner.start(t.id, lease.lease_id).await.unwrap();
    assert_eq!(
        user.task_cancel(t.id).await.unwrap().status,
        TaskStatus::Cancelling
    );
    CancellingRun {
        user,
        runner,
        task: t.id,
        lease: lease.lease_id,
        _node: node,
        _env: env,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_resent_after_a_cancel_took_effect_and_the_cancel_still_ends_it() {
    let run = a_cancelling_run("cancel-start-resent", &FAST_HA).await;
    let (runner, task, lease) = (&run.runner, run.task, run.lease);

    // The start's answer was lost; the runner sends it again.
    let again = runner
        .start(task, lease)
        .await
        .expect("the start took effect");
    assert_eq!(again.status, TaskStatus::Cancelling);
    let done = runner
        .complete(
            task,
            &CompleteTask {
                outcome: Outcome::Cancelled,
                exit_code: None,
                ..CompleteTask::succeeded(lease)
            },
        )
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelling_run_its_runner_forgot_ends_cancelled_not_failed() {
    let mut args = FAST_HA.to_vec();
    args.extend(["--forgotten-run-after-s", "1"]);
    let run = a_cancelling_run("cancel-forgotten", &args).await;
    let (user, runner, task) = (&run.user, &run.runner, run.task);

    // The runner's heartbeats no longer list the run: it forgot it (restarted its
    // process table, say). The server ends it — as the cancel the user asked for.
    let ended = wait_for(
        "the forgotten run to be ended",
        Duration::from_secs(20),
        || async {
            runner
                .heartbeat(&baton_client::Heartbeat {
                    boot_id: BOOT,
                    running: vec![],
                })
                .await
                .ok()?;
            let now = user.task_get(task).await.ok()?;
            now.status.is_terminal().then_some(now)
        },
    )
    .await;
    assert_eq!(ended.status, TaskStatus::Cancelled, "{:?}", ended.error);
}
