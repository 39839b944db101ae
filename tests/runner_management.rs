//! Operating runners: list them, delete one (its agent exits, its tasks are taken back),
//! pause and resume, ephemeral runners, registration tokens with expiry and uses, the
//! agent's own health, and one runner unable to touch another's task.

use baton_core::RunnerId;
use baton_localcluster::testing as support;

use baton_client::{
    Client, CompleteTask, CreateRegistrationToken, LeaseRequest, RegisterRunner, SubmitTask,
};
use baton_core::TaskStatus;
use std::time::Duration;
use support::*;
use uuid::Uuid;

const BOOT: Uuid = Uuid::from_u128(0xb007);

fn simple() -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        ..Default::default()
    }
}

fn lease_req() -> LeaseRequest {
    lease_now(BOOT, 1)
}

/// When the runner last polled, from its presence in Redis.
async fn last_seen_ms(
    redis: &mut redis::aio::MultiplexedConnection,
    env: &TestEnv,
    runner: RunnerId,
) -> i64 {
    let value: Option<String> = redis::cmd("HGET")
        .arg(format!("{}presence", env.redis_prefix))
        .arg(runner.to_string())
        .query_async(redis)
        .await
        .unwrap();
    value
        .and_then(|v| v.split('|').next()?.parse().ok())
        .unwrap_or(0)
}

fn sha256_hex(s: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()[..64].to_string()
}

/// The runner id an agent registered as, from its state dir.
async fn agent_id(runner: &RunnerProc) -> RunnerId {
    wait_for("the agent to register", Duration::from_secs(20), || async {
        let text = std::fs::read_to_string(runner.state_dir.join("runner.json")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v["runner_id"].as_str()?.parse().ok()
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn runners_are_listed_paused_resumed_and_deleted() {
    let env = TestEnv::new("mgmt-runners").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let mut agent = env
        .runner_with(
            &node.url,
            &["linux"],
            2,
            &["--wait-s", "2", "--heartbeat-s", "1"],
        )
        .await;
    let id = agent_id(&agent).await;

    let listed = wait_for(
        "the runner to be listed online",
        Duration::from_secs(20),
        || async {
            user.runners()
                .await
                .ok()?
                .runners
                .into_iter()
                .find(|r| r.id == id && r.online)
        },
    )
    .await;
    assert_eq!(listed.labels, vec!["linux"]);
    assert_eq!(listed.capacity, 2);
    assert!(listed.last_seen.is_some() && !listed.paused);

    // Paused: it leases nothing.
    assert!(user.runner_pause(id, true).await.unwrap().paused);
    let (held, _) = user
        .submit(&SubmitTask {
            script: Some("echo ran".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    // Two of its polls begin after the submit (each parks 2 s) and the task stays queued.
    let submitted_ms = chrono::Utc::now().timestamp_millis();
    let mut redis = env.redis().await;
    for round in 1..=2 {
        let after = if round == 1 {
            submitted_ms
        } else {
            last_seen_ms(&mut redis, &env, id).await
        };
        wait_for(
            "the paused agent to poll again",
            Duration::from_secs(10),
            || {
                let mut redis = redis.clone();
                let env = &env;
                async move { (last_seen_ms(&mut redis, env, id).await > after).then_some(()) }
            },
        )
        .await;
    }
    assert_eq!(
        user.task_get(held.id).await.unwrap().status,
        TaskStatus::Queued
    );
    // Resumed: it runs it.
    assert!(!user.runner_pause(id, false).await.unwrap().paused);
    assert_eq!(
        env.wait_terminal(&user, held.id).await.status,
        TaskStatus::Succeeded
    );

    // Deleted while running a task: the agent exits (401), the task is taken back.
    let (long, _) = user
        .submit(&SubmitTask {
            script: Some("sleep 300".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    wait_for("the long task to run", Duration::from_secs(20), || async {
        (user.task_get(long.id).await.ok()?.status == TaskStatus::Running).then_some(())
    })
    .await;
    user.runner_delete(id).await.unwrap();
    assert_eq!(
        agent.wait_exit(Duration::from_secs(20)).await,
        Some(3),
        "exit code 3: unregistered"
    );
    let ended = env.wait_terminal(&user, long.id).await;
    assert_eq!(ended.status, TaskStatus::Failed);
    assert!(
        user.runners()
            .await
            .unwrap()
            .runners
            .iter()
            .all(|r| r.id != id)
    );
    assert_eq!(
        user.runner_delete(id)
            .await
            .unwrap_err()
            .status()
            .map(|s| s.as_u16()),
        Some(404)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ephemeral_runner_runs_one_task_and_unregisters() {
    let env = TestEnv::new("mgmt-once").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (first, _) = user.submit(&simple()).await.unwrap();
    let (second, _) = user.submit(&simple()).await.unwrap();
    let mut agent = env.runner_with(&node.url, &[], 4, &["--once"]).await;
    assert_eq!(agent.wait_exit(Duration::from_secs(30)).await, Some(0));
    let a = user.task_get(first.id).await.unwrap();
    let b = user.task_get(second.id).await.unwrap();
    let ran = [a.status, b.status]
        .iter()
        .filter(|s| **s == TaskStatus::Succeeded)
        .count();
    assert_eq!(ran, 1, "one task, not two: {:?} {:?}", a.status, b.status);
    assert!(
        user.runners().await.unwrap().runners.is_empty(),
        "it unregistered"
    );
    assert!(!agent.state_dir.join("runner.json").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_short_of_disk_leases_nothing_and_says_why() {
    let env = TestEnv::new("mgmt-disk").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let port = support::services::free_port();
    let listen = format!("127.0.0.1:{port}");
    let _agent = env
        .runner_with(
            &node.url,
            &[],
            1,
            &[
                "--min-free-disk-mb",
                "999999999",
                "--healthz-listen",
                &listen,
            ],
        )
        .await;
    let (t, _) = user.submit(&simple()).await.unwrap();
    let health: serde_json::Value = wait_for(
        "the agent's /healthz once registered",
        Duration::from_secs(20),
        || async {
            let body: serde_json::Value = reqwest::get(format!("http://{listen}/healthz"))
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            // Past "registering": the reason it gives once it would lease.
            let reason = body["not_leasing_because"].as_str().unwrap_or_default();
            reason.contains("MiB free").then_some(body)
        },
    )
    .await;
    assert_eq!(health["leasing"], false);
    assert!(
        health["not_leasing_because"]
            .as_str()
            .unwrap()
            .contains("MiB free"),
        "{health}"
    );
    assert_eq!(
        user.task_get(t.id).await.unwrap().status,
        TaskStatus::Queued
    );
}

/// Registers a runner claiming `labels` and `queues` with `token`.
async fn register_with(
    anon: &Client,
    token: &str,
    labels: &[&str],
    queues: &[&str],
) -> Result<baton_client::RunnerRegistered, baton_client::ClientError> {
    anon.register(&RegisterRunner {
        registration_token: token.into(),
        name: "r".into(),
        labels: labels.iter().map(|s| s.to_string()).collect(),
        queues: queues.iter().map(|s| s.to_string()).collect(),
        capacity: 1,
        version: "test".into(),
    })
    .await
}

fn status(e: &baton_client::ClientError) -> Option<u16> {
    e.status().map(|s| s.as_u16())
}

#[tokio::test(flavor = "multi_thread")]
async fn registration_tokens_expire_and_run_out() {
    let env = TestEnv::new("mgmt-regtokens").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let anon = Client::new(&node.url, None).unwrap();

    // Left without limits: one use, a day.
    let once = admin
        .registration_token_create(&CreateRegistrationToken::default())
        .await
        .unwrap();
    assert!(once.token.starts_with("brg_") && once.token.len() > 60);
    assert_eq!(once.view.uses_left, Some(1));
    let lives = once.view.expires_at.unwrap() - once.view.created_at;
    assert_eq!(lives.num_seconds(), 86_400, "a day");
    register_with(&anon, &once.token, &[], &[]).await.unwrap();
    let spent = register_with(&anon, &once.token, &[], &[])
        .await
        .unwrap_err();
    assert_eq!(status(&spent), Some(401), "one use only");

    let brief = admin
        .registration_token_create(&CreateRegistrationToken {
            uses: Some(5),
            expires_in_s: Some(1),
            ..CreateRegistrationToken::default()
        })
        .await
        .unwrap();
    register_with(&anon, &brief.token, &[], &[]).await.unwrap();
    wait_for("the token to expire", Duration::from_secs(10), || async {
        register_with(&anon, &brief.token, &[], &[])
            .await
            .err()
            .filter(|e| status(e) == Some(401))
    })
    .await;
}

/// Twenty runners racing for the last three uses of a token: three get in.
#[tokio::test(flavor = "multi_thread")]
async fn runners_racing_for_the_last_uses_of_a_token_get_exactly_that_many() {
    let env = TestEnv::new("mgmt-regrace").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let anon = Client::new(&node.url, None).unwrap();
    let three = admin
        .registration_token_create(&CreateRegistrationToken {
            uses: Some(3),
            ..CreateRegistrationToken::default()
        })
        .await
        .unwrap();
    let racers = (0..20).map(|_| {
        let (anon, token) = (anon.clone(), three.token.clone());
        tokio::spawn(async move { register_with(&anon, &token, &[], &[]).await })
    });
    let mut admitted = 0;
    for racer in racers.collect::<Vec<_>>() {
        match racer.await.unwrap() {
            Ok(_) => admitted += 1,
            Err(e) => assert_eq!(status(&e), Some(401), "{e}"),
        }
    }
    assert_eq!(admitted, 3);
    let listed = admin.registration_tokens().await.unwrap();
    let row = listed
        .registration_tokens
        .iter()
        .find(|t| t.id == three.view.id)
        .unwrap();
    assert_eq!(row.uses_left, Some(0));
}

/// A token limited to labels and queues lets a runner claim no more, and a revoked one
/// lets no runner in; neither refusal uses the token up.
#[tokio::test(flavor = "multi_thread")]
async fn a_registration_token_limits_what_its_runners_claim_and_can_be_revoked() {
    let env = TestEnv::new("mgmt-regscope").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let anon = Client::new(&node.url, None).unwrap();
    let scoped = admin
        .registration_token_create(&CreateRegistrationToken {
            name: Some("builders".into()),
            uses: Some(2),
            labels: Some(vec!["linux".into(), "arm64".into()]),
            queues: Some(vec!["builds".into()]),
            ..CreateRegistrationToken::default()
        })
        .await
        .unwrap();
    let runners_before = admin.runners().await.unwrap().runners.len();
    for (labels, queues, what) in [
        (
            &["linux", "gpu"][..],
            &["builds"][..],
            "a label it does not allow",
        ),
        (
            &["linux"][..],
            &["deploys"][..],
            "a queue it does not allow",
        ),
        (&["linux"][..], &[][..], "every queue, by naming none"),
    ] {
        let refused = register_with(&anon, &scoped.token, labels, queues)
            .await
            .expect_err(what);
        assert_eq!(status(&refused), Some(403), "{what}: {refused}");
        assert!(refused.to_string().contains("builds"), "{refused}");
    }
    assert_eq!(admin.runners().await.unwrap().runners.len(), runners_before);
    register_with(&anon, &scoped.token, &["linux"], &["builds"])
        .await
        .unwrap();

    admin
        .registration_token_revoke(scoped.view.id)
        .await
        .unwrap();
    let revoked = register_with(&anon, &scoped.token, &["linux"], &["builds"])
        .await
        .unwrap_err();
    assert_eq!(status(&revoked), Some(401));
    let row = admin
        .registration_tokens()
        .await
        .unwrap()
        .registration_tokens
        .into_iter()
        .find(|t| t.id == scoped.view.id)
        .unwrap();
    assert_eq!(row.uses_left, Some(1), "refusals took no use");
    assert!(row.revoked_at.is_some());
    assert_eq!(row.name.as_deref(), Some("builders"));
    let again = admin
        .registration_token_revoke(scoped.view.id)
        .await
        .unwrap_err();
    assert_eq!(status(&again), Some(404));
    let bad = admin
        .registration_token_create(&CreateRegistrationToken {
            queues: Some(vec![]),
            ..CreateRegistrationToken::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status(&bad), Some(422), "{bad}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_cannot_touch_another_runners_task() {
    let env = TestEnv::new("mgmt-isolation").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, a) = register_runner(&node.url, &[], 1).await;
    let (_, b) = register_runner(&node.url, &[], 1).await;
    let (t, _) = user.submit(&simple()).await.unwrap();
    let lease = a.lease(&lease_req()).await.unwrap().tasks.remove(0);
    a.start(t.id, lease.lease_id).await.unwrap();
    let before = user.task_get(t.id).await.unwrap();

    let report = CompleteTask::succeeded(lease.lease_id);
    let refusals = [
        b.start(t.id, lease.lease_id).await.map(|_| ()).unwrap_err(),
        b.log_append(t.id, lease.lease_id, 0, "x".into())
            .await
            .map(|_| ())
            .unwrap_err(),
        b.complete(t.id, &report).await.map(|_| ()).unwrap_err(),
    ];
    for e in refusals {
        assert_eq!(e.status().map(|s| s.as_u16()), Some(404), "not leaked: {e}");
    }
    // Nor read it through the user API.
    let read = b.task_get(t.id).await.unwrap_err();
    assert_eq!(read.status().map(|s| s.as_u16()), Some(403));
    // And heartbeating someone else's lease only hears that it is gone.
    let beat = b
        .heartbeat(&heartbeat_of(BOOT, t.id, lease.lease_id))
        .await
        .unwrap();
    assert_eq!(beat.gone, vec![t.id]);
    assert_eq!(
        user.task_get(t.id).await.unwrap(),
        before,
        "nothing changed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn secret_env_reaches_the_process_and_is_never_shown() {
    let env = TestEnv::new("mgmt-secret").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let runner = env.runner(&node.url, &[], 1).await;
    let secret = format!("s3cret-{}", Uuid::new_v4().simple());
    let (t, _) = user
        .submit(&SubmitTask {
            // Compared by hash, so the script itself does not carry the secret.
            script: Some(format!(
                "[ \"$(printf %s \"$DEPLOY_TOKEN\" | sha256sum | cut -c1-64)\" = {} ] && echo the secret arrived",
                sha256_hex(&secret)
            )),
            secret_env: [("DEPLOY_TOKEN".to_string(), secret.clone())].into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, t.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded);
    assert_eq!(read_log(&user, t.id).await, b"the secret arrived\n");
    assert_eq!(done.secret_env_keys, vec!["DEPLOY_TOKEN"]);
    let shown = serde_json::to_string(&done).unwrap()
        + &serde_json::to_string(&user.task_list(&Default::default()).await.unwrap()).unwrap();
    assert!(
        !shown.contains(&secret),
        "the read API never returns the value"
    );
    for log in [&node.log, &runner.log] {
        assert!(
            !std::fs::read_to_string(log).unwrap().contains(&secret),
            "never logged: {}",
            log.display()
        );
    }
}

/// A deleted runner's presence leaves Redis once its runs can no longer need it
/// (`runner_lost_after`), so the hash every reconcile pass reads does not grow with every
/// runner that ever was; a live runner's stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_runner_s_presence_is_pruned_and_a_live_one_s_kept() {
    let env = TestEnv::new("presence-prune").await;
    let mut args = FAST_HA.to_vec();
    args.extend(["--janitor-interval-ms", "300"]);
    let node = env.node_with(&args).await;
    let user = user_client(&node.url);
    let (deleted, deleted_client) = register_runner(&node.url, &[], 1).await;
    let (kept, kept_client) = register_runner(&node.url, &[], 1).await;
    let mut redis = env.redis().await;
    for client in [&deleted_client, &kept_client] {
        client.lease(&lease_req()).await.unwrap();
    }
    wait_for("both presences in Redis", Duration::from_secs(10), || {
        let mut redis = redis.clone();
        let env = &env;
        async move {
            let (a, b) = (
                last_seen_ms(&mut redis, env, deleted).await,
                last_seen_ms(&mut redis, env, kept).await,
            );
            (a > 0 && b > 0).then_some(())
        }
    })
    .await;
    user.runner_delete(deleted).await.unwrap();
    wait_for(
        "the deleted runner's presence to be pruned",
        Duration::from_secs(30),
        || {
            let mut redis = redis.clone();
            let env = &env;
            async move { (last_seen_ms(&mut redis, env, deleted).await == 0).then_some(()) }
        },
    )
    .await;
    assert!(
        last_seen_ms(&mut redis, &env, kept).await > 0,
        "a live runner's presence stays"
    );
}
