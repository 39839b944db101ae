//! Runner/server version skew in a rolling upgrade: a runner announces its version on
//! every runner API call; the oldest supported one (and an agent from before the header)
//! keeps working; one the server cannot serve gets a clear 426 and the agent exits with
//! the reason instead of failing obscurely.

use baton_localcluster::testing as support;

use baton_client::RUNNER_VERSION_HEADER;
use baton_core::version::MIN_RUNNER_VERSION;
use std::time::Duration;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_server_answers_each_announced_version() {
    let env = TestEnv::new("skew-http").await;
    let node = env.node().await;
    let (_, token) = register_runner_token(&node.url, &["x"], 1).await;
    let http = reqwest::Client::new();
    let heartbeat = |version: Option<&str>| {
        let mut req = http
            .post(format!("{}/v1/runner/heartbeat", node.url))
            .bearer_auth(&token)
            .json(&serde_json::json!({ "boot_id": uuid::Uuid::new_v4(), "running": [] }));
        if let Some(v) = version {
            req = req.header(RUNNER_VERSION_HEADER, v);
        }
        req.send()
    };
    let oldest = MIN_RUNNER_VERSION.to_string();
    for ok in [None, Some(oldest.as_str()), Some(env!("CARGO_PKG_VERSION"))] {
        let resp = heartbeat(ok).await.unwrap();
        assert_eq!(resp.status(), 200, "{ok:?}");
    }
    for (refused, says) in [
        ("0.0.9", "upgrade the runner"),
        ("1.0.0", "another major version"),
        ("nightly", "not MAJOR.MINOR.PATCH"),
    ] {
        let resp = heartbeat(Some(refused)).await.unwrap();
        assert_eq!(resp.status(), 426, "{refused}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "runner_version_unsupported");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{refused}: {message}");
    }
    // The user API does not care.
    let resp = http
        .get(format!("{}/v1/tasks", node.url))
        .bearer_auth(API_TOKEN)
        .header(RUNNER_VERSION_HEADER, "0.0.1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_oldest_supported_agent_works_and_a_too_old_one_exits_with_the_reason() {
    let env = TestEnv::new("skew-agent").await;
    let node = env.node().await;
    let client = user_client(&node.url);
    let oldest = MIN_RUNNER_VERSION.to_string();
    let mut runner = env
        .runner_with(&node.url, &["skew"], 1, &["--reported-version", &oldest])
        .await;
    run_true(&env, &client, "skew").await;
    runner.signal("TERM");
    assert_eq!(runner.wait_exit(Duration::from_secs(30)).await, Some(0));

    // The same runner (same identity) downgraded past what the server supports: its first
    // lease is refused and it stops, saying why.
    let mut downgraded = RunnerProc::start(
        &env,
        &node.url,
        &["skew"],
        1,
        &["--reported-version", "0.0.9"],
        Some(&runner.state_dir),
        &[],
    )
    .await;
    assert_eq!(downgraded.wait_exit(Duration::from_secs(30)).await, Some(4));
    let log = std::fs::read_to_string(&downgraded.log).unwrap();
    assert!(log.contains("upgrade the runner"), "{log}");

    // A new one that old cannot even register.
    let mut fresh = env
        .runner_with(&node.url, &["skew"], 1, &["--reported-version", "0.0.9"])
        .await;
    assert_eq!(fresh.wait_exit(Duration::from_secs(30)).await, Some(4));
    let log = std::fs::read_to_string(&fresh.log).unwrap();
    assert!(log.contains("cannot serve this runner version"), "{log}");
}
