//! Submit → Redis queue → runner lease over HTTP → run → complete, across two nodes, with
//! a real runner agent process.

use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use baton_core::TaskStatus;
use std::time::{Duration, Instant};
use support::*;
use uuid::Uuid;

fn script(s: &str) -> SubmitTask {
    SubmitTask {
        script: Some(s.into()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_runs_across_two_nodes_and_fails_with_its_exit_code() {
    let env = TestEnv::new("e2e-two-nodes").await;
    let node_a = env.node().await;
    let node_b = env.node().await;
    let _runner = env.runner(&node_b.url, &[], 2).await;
    let (a, b) = (user_client(&node_a.url), user_client(&node_b.url));

    let (failing, created) = a.submit(&script("echo hello; exit 3")).await.unwrap();
    assert!(created);
    assert_eq!(failing.status, TaskStatus::Queued);
    let done = env.wait_terminal(&a, failing.id).await;
    assert_eq!(done.status, TaskStatus::Failed);
    assert_eq!(done.exit_code, Some(3));
    assert_eq!(done.attempt, 1);
    assert!(done.started_at.is_some() && done.finished_at.is_some());
    assert!(!done.log_incomplete);
    assert_eq!(read_log(&a, failing.id).await, b"hello\n");
    assert_eq!(
        read_log(&b, failing.id).await,
        b"hello\n",
        "logs are readable from either node"
    );

    let (ok, _) = b
        .submit(&SubmitTask {
            command: Some(vec!["sh".into(), "-c".into(), "echo \"$GREETING\"".into()]),
            env: [("GREETING".to_string(), "hi there".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&b, ok.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded);
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(read_log(&a, ok.id).await, b"hi there\n");

    // Nothing is left queued or claimed once both are done.
    let mut redis = env.redis().await;
    let claims: i64 = redis::cmd("HLEN")
        .arg(format!("{}running", env.redis_prefix))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(claims, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn large_and_binary_output_arrives_whole_and_in_order() {
    let env = TestEnv::new("e2e-output").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 1).await;
    let client = user_client(&node.url);

    let (big, _) = client.submit(&script("seq 1 300000")).await.unwrap();
    let (binary, _) = client
        .submit(&script("printf 'a\\377\\376b\\000c'"))
        .await
        .unwrap();
    let done = env.wait_terminal(&client, big.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded);
    let expected: String = (1..=300_000).map(|i| format!("{i}\n")).collect();
    let log = read_log(&client, big.id).await;
    assert_eq!(log.len(), expected.len());
    assert!(
        log == expected.as_bytes(),
        "output differs from `seq 1 300000`"
    );
    assert_eq!(done.log_size, expected.len() as i64);

    env.wait_terminal(&client, binary.id).await;
    assert_eq!(read_log(&client, binary.id).await, b"a\xff\xfeb\x00c");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_parked_on_one_node_gets_work_submitted_on_another_at_once() {
    let env = TestEnv::new("e2e-wake").await;
    let node_a = env.node().await;
    let node_b = env.node().await;
    let (_, runner) = register_runner(&node_a.url, &[], 1).await;

    let parked_at = Instant::now();
    let lease =
        tokio::spawn(async move { runner.lease(&lease_waiting(Uuid::new_v4(), 1, 30)).await });
    // Wait until node A reports the request parked.
    node_a
        .wait_parked("the lease to park on node A", |n| n >= 1)
        .await;

    let submitted_at = Instant::now();
    let (task, _) = user_client(&node_b.url)
        .submit(&script("true"))
        .await
        .unwrap();
    let answer = lease.await.unwrap().unwrap();
    let picked_up = submitted_at.elapsed();
    assert_eq!(answer.tasks.len(), 1);
    assert_eq!(answer.tasks[0].id, task.id);
    assert!(
        picked_up < Duration::from_secs(1),
        "pickup took {picked_up:?}, parked for {:?}",
        parked_at.elapsed()
    );
    let leased = user_client(&node_a.url).task_get(task.id).await.unwrap();
    assert_eq!(leased.status, TaskStatus::Leased);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parked_lease_whose_client_hung_up_strands_nothing() {
    let env = TestEnv::new("e2e-hangup").await;
    let node = env.node().await;
    let (_, runner) = register_runner(&node.url, &[], 1).await;

    // A runner that gives up on its long poll after 200 ms.
    let impatient = runner
        .request(reqwest::Method::POST, "/v1/runner/lease")
        .timeout(Duration::from_millis(200))
        .json(&lease_waiting(Uuid::new_v4(), 1, 20))
        .send()
        .await;
    assert!(impatient.is_err(), "the client side timed out");
    node.wait_parked("the abandoned lease to unpark", |n| n == 0)
        .await;

    let client = user_client(&node.url);
    let (task, _) = client.submit(&script("true")).await.unwrap();
    assert_eq!(
        client.task_get(task.id).await.unwrap().status,
        TaskStatus::Queued
    );
    let answer = runner.lease(&lease_now(Uuid::new_v4(), 1)).await.unwrap();
    assert_eq!(
        answer.tasks.len(),
        1,
        "the task waited for a runner that is still there"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_on_one_node_streams_output_shipped_to_another() {
    use futures::StreamExt;
    let env = TestEnv::new("e2e-follow").await;
    let node_a = env.node().await;
    let node_b = env.node().await;
    let _runner = env.runner(&node_b.url, &[], 1).await;
    let (a, b) = (user_client(&node_a.url), user_client(&node_b.url));
    // The task waits for a file the test creates once the first line has been seen.
    let gate = env.dir.join("gate");
    let (t, _) = b
        .submit(&script(&format!(
            "echo first; while [ ! -e {gate} ]; do sleep 0.1; done; echo second",
            gate = gate.display()
        )))
        .await
        .unwrap();
    let (_, stream) = a.task_logs_follow(t.id, None, 0).await.unwrap();
    let mut stream = std::pin::pin!(stream);
    let mut seen = Vec::new();
    while !seen.ends_with(b"first\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("output streams while the task runs")
            .unwrap()
            .unwrap();
        seen.extend_from_slice(&chunk);
    }
    assert_eq!(
        a.task_get(t.id).await.unwrap().status,
        TaskStatus::Running,
        "streamed before the end"
    );
    std::fs::write(&gate, "").unwrap();
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .unwrap()
    {
        seen.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(
        seen, b"first\nsecond\n",
        "and the stream ends with the task"
    );
    assert!(a.task_get(t.id).await.unwrap().status.is_terminal());
}
