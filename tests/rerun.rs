//! Re-runs, bulk actions and retry policies (issue 13), against a real node, runner,
//! Redis and Postgres: a re-run is a new task linked both ways and the old one keeps its
//! end; a bulk action says what it would take before it takes it, takes a bounded number
//! per call and only the caller's own tasks; a retry policy decides which failures retry.

use baton_localcluster::testing as support;

use baton_client::{
    BulkRequest, Client, ClientError, CreateToken, RetryPolicy, Scope, SubmitTask, Task,
};
use baton_core::TaskStatus;
use serde_json::json;
use support::procs::baton_cli;
use support::*;
use uuid::Uuid;

/// A script for runners labelled `label`.
fn script(label: &str, script: &str) -> SubmitTask {
    SubmitTask {
        labels: vec![label.into()],
        script: Some(script.into()),
        ..SubmitTask::default()
    }
}

/// A task no runner takes, in `queue`.
fn parked(queue: &str) -> SubmitTask {
    SubmitTask {
        queue: Some(queue.into()),
        labels: vec!["nobody-has-this".into()],
        command: Some(vec!["true".into()]),
        ..SubmitTask::default()
    }
}

/// A script that fails until `flag` exists, then succeeds.
fn until_flag(label: &str, queue: &str, flag: &std::path::Path) -> SubmitTask {
    SubmitTask {
        queue: Some(queue.into()),
        ..script(label, &format!("test -f {}", flag.display()))
    }
}

/// Where a test leaves a flag its tasks look for: not under /tmp, which each task of a
/// root runner has a private one of.
fn flag_file() -> std::path::PathBuf {
    support::procs::target_tmp_dir().join(format!("baton-rerun-flag-{}", Uuid::new_v4().simple()))
}

/// The status and error code of an error answer.
fn refusal(e: ClientError) -> (u16, String, String) {
    match e {
        ClientError::Api(e) => (e.status.as_u16(), e.body.error.code, e.body.error.message),
        other => panic!("expected an error answer, got {other}"),
    }
}

async fn token(admin: &Client, scopes: Vec<Scope>) -> Client {
    let made = admin
        .token_create(&CreateToken {
            name: "rerun".into(),
            scopes,
            ..Default::default()
        })
        .await
        .unwrap();
    Client::new(admin.base_url(), Some(made.token)).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ended_task_is_re_run_as_a_new_task_linked_both_ways() {
    let env = TestEnv::new("rerun-one").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let _runner = env.runner(&node.url, &["rr"], 2).await;
    let flag = flag_file();

    let (first, _) = user
        .submit(&until_flag("rr", "default", &flag))
        .await
        .unwrap();
    let first = env.wait_terminal(&user, first.id).await;
    assert_eq!(first.status, TaskStatus::Failed);

    std::fs::write(&flag, b"").unwrap();
    let (rerun, created) = user.task_retry(first.id).await.unwrap();
    assert!(created);
    assert_ne!(rerun.id, first.id);
    assert_eq!(
        rerun.retry_of,
        Some(first.id),
        "the new task names the old one"
    );
    assert_eq!(rerun.script, first.script);
    assert_eq!(rerun.attempt, 0);
    let rerun = env.wait_terminal(&user, rerun.id).await;
    assert_eq!(rerun.status, TaskStatus::Succeeded, "the re-run ran");

    let old = user.task_get(first.id).await.unwrap();
    assert_eq!(old.status, TaskStatus::Failed, "failed stays final");
    assert_eq!(old.finished_at, first.finished_at);
    assert_eq!(
        old.retried_by,
        Some(rerun.id),
        "the old task names its re-run"
    );

    // Asked again (a resent request, a double click): the same re-run, not another.
    let (again, created) = user.task_retry(first.id).await.unwrap();
    assert!(!created);
    assert_eq!(again.id, rerun.id);

    // The command line: the re-run's re-run.
    let out = baton_cli(
        &node.url,
        API_TOKEN,
        &["task", "retry", &rerun.id.to_string()],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let third: Task = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(third.retry_of, Some(rerun.id));
    let _ = std::fs::remove_file(&flag);
}

#[tokio::test(flavor = "multi_thread")]
async fn unfinished_tasks_and_tasks_with_erased_secrets_are_not_re_run() {
    let env = TestEnv::new("rerun-refused").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);

    let (waiting, _) = user.submit(&parked("default")).await.unwrap();
    let before = env.count_tasks().await;
    let (status, code, message) = refusal(user.task_retry(waiting.id).await.unwrap_err());
    assert_eq!((status, code.as_str()), (409, "conflict"), "{message}");
    assert!(message.contains("not ended"), "{message}");

    let secret = SubmitTask {
        secret_env: [("TOKEN".to_string(), "s3cr3t".to_string())].into(),
        ..parked("default")
    };
    let (secret, _) = user.submit(&secret).await.unwrap();
    user.task_cancel(secret.id).await.unwrap();
    let before_secret = env.count_tasks().await;
    let (status, code, message) = refusal(user.task_retry(secret.id).await.unwrap_err());
    assert_eq!(
        (status, code.as_str()),
        (409, "secrets_erased"),
        "{message}"
    );
    assert!(message.contains("TOKEN"), "names the secrets: {message}");
    assert_eq!(env.count_tasks().await, before_secret, "nothing written");
    assert_eq!(before + 1, before_secret);

    let (status, _, _) = refusal(user.task_retry(Uuid::now_v7()).await.unwrap_err());
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_cancel_counts_first_then_cancels_a_bounded_number_per_call() {
    let env = TestEnv::new("rerun-bulk-cancel").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(user.submit(&parked("bulk-a")).await.unwrap().0.id);
    }
    let (other, _) = user.submit(&parked("bulk-b")).await.unwrap();
    let by_queue = |limit, dry_run| BulkRequest {
        queue: Some("bulk-a".into()),
        status: Some("queued".into()),
        limit: Some(limit),
        dry_run,
        ..BulkRequest::default()
    };

    let dry = user.tasks_cancel(&by_queue(100, true)).await.unwrap();
    assert_eq!((dry.matched, dry.acted, dry.more), (5, 0, false));
    let listed: Vec<Uuid> = dry.tasks.iter().map(|t| t.id).collect();
    assert_eq!(listed, ids, "the tasks it would take, oldest first");
    for id in &ids {
        let t = user.task_get(*id).await.unwrap();
        assert_eq!(t.status, TaskStatus::Queued, "a dry run changes nothing");
    }

    // The command line's dry run says the same.
    let out = baton_cli(
        &node.url,
        API_TOKEN,
        &["task", "cancel", "--queue", "bulk-a", "--dry-run"],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["matched"], 5);

    let first = user.tasks_cancel(&by_queue(3, false)).await.unwrap();
    assert_eq!((first.matched, first.acted, first.more), (5, 3, true));
    assert!(
        first
            .tasks
            .iter()
            .all(|t| t.status == TaskStatus::Cancelled)
    );
    let rest = user.tasks_cancel(&by_queue(3, false)).await.unwrap();
    assert_eq!((rest.matched, rest.acted, rest.more), (2, 2, false));
    for id in &ids {
        let t = user.task_get(*id).await.unwrap();
        assert_eq!(t.status, TaskStatus::Cancelled);
    }
    let done = user.tasks_cancel(&by_queue(3, false)).await.unwrap();
    assert_eq!(
        (done.matched, done.acted),
        (0, 0),
        "nothing is cancelled twice"
    );
    let untouched = user.task_get(other.id).await.unwrap();
    assert_eq!(
        untouched.status,
        TaskStatus::Queued,
        "another queue is left alone"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_retry_re_runs_each_failed_task_once() {
    let env = TestEnv::new("rerun-bulk-retry").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let _runner = env.runner(&node.url, &["rr"], 4).await;
    let flag = flag_file();

    let mut failed = Vec::new();
    for _ in 0..3 {
        failed.push(
            user.submit(&until_flag("rr", "flaky", &flag))
                .await
                .unwrap()
                .0
                .id,
        );
    }
    let with_secret = SubmitTask {
        secret_env: [("KEY".to_string(), "v".to_string())].into(),
        ..until_flag("rr", "flaky", &flag)
    };
    let secret = user.submit(&with_secret).await.unwrap().0.id;
    let passed = user
        .submit(&SubmitTask {
            queue: Some("flaky".into()),
            ..script("rr", "true")
        })
        .await
        .unwrap()
        .0
        .id;
    for id in failed.iter().chain([&secret, &passed]) {
        env.wait_terminal(&user, *id).await;
    }

    let filter = |dry_run| BulkRequest {
        queue: Some("flaky".into()),
        status: Some("failed".into()),
        dry_run,
        ..BulkRequest::default()
    };
    let dry = user.tasks_retry(&filter(true)).await.unwrap();
    assert_eq!((dry.matched, dry.acted), (3, 0));
    assert_eq!(
        dry.with_secrets,
        Some(1),
        "the task with secrets is named, not taken"
    );
    assert!(dry.tasks.iter().all(|t| t.retried_by.is_none()));

    std::fs::write(&flag, b"").unwrap();
    let done = user.tasks_retry(&filter(false)).await.unwrap();
    assert_eq!((done.matched, done.acted, done.more), (3, 3, false));
    for item in &done.tasks {
        let rerun = item.retried_by.expect("each got its re-run");
        let rerun = env.wait_terminal(&user, rerun).await;
        assert_eq!(rerun.retry_of, Some(item.id));
        assert_eq!(rerun.status, TaskStatus::Succeeded);
        let old = user.task_get(item.id).await.unwrap();
        assert_eq!(
            (old.status, old.retried_by),
            (TaskStatus::Failed, Some(rerun.id))
        );
    }
    let again = user.tasks_retry(&filter(false)).await.unwrap();
    assert_eq!(
        (again.matched, again.acted),
        (0, 0),
        "nothing is re-run twice"
    );
    let _ = std::fs::remove_file(&flag);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_policy_decides_which_failures_retry() {
    let env = TestEnv::new("rerun-policy").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let _runner = env.runner(&node.url, &["rr"], 6).await;
    let quick = RetryPolicy {
        backoff_base_s: Some(0.2),
        ..RetryPolicy::default()
    };
    let task = |script_text: &str, retry: RetryPolicy, timeout_s: Option<i64>| SubmitTask {
        max_attempts: Some(2),
        timeout_s,
        retry: Some(retry),
        ..script("rr", script_text)
    };
    let on3 = RetryPolicy {
        on_exit_codes: Some(vec![3]),
        ..quick.clone()
    };
    let never4 = RetryPolicy {
        never_on_exit_codes: Some(vec![4]),
        ..quick.clone()
    };
    let no_timeout = RetryPolicy {
        on_timeout: Some(false),
        ..quick.clone()
    };
    // (what, submission, attempts it must end after)
    let cases = [
        (
            "exit 3, on_exit_codes [3]",
            task("exit 3", on3.clone(), None),
            2,
        ),
        ("exit 4, on_exit_codes [3]", task("exit 4", on3, None), 1),
        (
            "exit 4, never_on_exit_codes [4]",
            task("exit 4", never4.clone(), None),
            1,
        ),
        (
            "exit 5, never_on_exit_codes [4]",
            task("exit 5", never4, None),
            2,
        ),
        (
            "timeout, on_timeout false",
            task("sleep 30", no_timeout, Some(1)),
            1,
        ),
        (
            "timeout, on_timeout default",
            task("sleep 30", quick, Some(1)),
            2,
        ),
    ];
    let mut submitted = Vec::new();
    for (what, submission, attempts) in cases {
        let (t, _) = user.submit(&submission).await.unwrap();
        let shown = t.retry.as_ref().expect("the policy is shown");
        assert_eq!(shown.backoff_factor, Some(2.0), "{what}: shown resolved");
        assert!(shown.on_timeout.is_some(), "{what}: shown resolved");
        submitted.push((what, t.id, attempts));
    }
    // The command line's --retry, as the README shows it.
    let out = baton_cli(
        &node.url,
        API_TOKEN,
        &[
            "task",
            "submit",
            "--output",
            "json",
            "--label",
            "rr",
            "--max-attempts",
            "2",
            "--retry",
            r#"{"on_exit_codes": [3], "backoff_base_s": 0.2}"#,
            "--",
            "sh",
            "-c",
            "exit 3",
        ],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let by_cli: Task = serde_json::from_slice(&out.stdout).unwrap();
    submitted.push(("exit 3 from the command line", by_cli.id, 2));
    for (what, id, attempts) in submitted {
        let done = env.wait_terminal(&user, id).await;
        assert_eq!(done.status, TaskStatus::Failed, "{what}");
        assert_eq!(done.attempt, attempts, "{what}: {:?}", done.error);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_policies_and_filters_are_refused_by_name_and_write_nothing() {
    let env = TestEnv::new("rerun-bad-input").await;
    let node = env.node().await;
    let http = reqwest::Client::new();
    let post = |path: &str, body: serde_json::Value| {
        http.post(format!("{}{path}", node.url))
            .bearer_auth(API_TOKEN)
            .json(&body)
            .send()
    };
    let submit = |retry: serde_json::Value| json!({"command": ["true"], "retry": retry});
    let cases = [
        (
            "/v1/tasks",
            submit(json!({"on_exit_codes": [3], "never_on_exit_codes": [4]})),
            "never_on_exit_codes",
        ),
        (
            "/v1/tasks",
            submit(json!({"backoff_base_s": 0})),
            "backoff_base_s",
        ),
        (
            "/v1/tasks",
            submit(json!({"backoff_cap_s": -5})),
            "backoff_cap_s",
        ),
        (
            "/v1/tasks",
            submit(json!({"backoff_factor": 0.5})),
            "backoff_factor",
        ),
        ("/v1/tasks", submit(json!({"jitter": 2})), "jitter"),
        (
            "/v1/tasks",
            submit(json!({"on_exit_codes": []})),
            "on_exit_codes",
        ),
        (
            "/v1/tasks",
            submit(json!({"on_exit_code": [3]})),
            "on_exit_code",
        ),
        ("/v1/tasks/cancel", json!({}), "filter"),
        (
            "/v1/tasks/cancel",
            json!({"queue": "q", "limit": 0}),
            "limit",
        ),
        ("/v1/tasks/cancel", json!({"status": "succeeded"}), "status"),
        ("/v1/tasks/retry", json!({"status": "queued"}), "status"),
        ("/v1/tasks/retry", json!({"status": "bogus"}), "status"),
        ("/v1/tasks/retry", json!({"queue": "Bad Queue"}), "queue"),
        (
            "/v1/tasks/retry",
            json!({"queue": "q", "schedule": "x"}),
            "schedule",
        ),
        (
            "/v1/tasks/retry",
            json!({"created_after": "2026-12-02T00:00:00Z", "created_before": "2026-12-01T00:00:00Z"}),
            "created_before",
        ),
    ];
    for (path, body, field) in cases {
        let answer = post(path, body.clone()).await.unwrap();
        let status = answer.status().as_u16();
        let error: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(status, 422, "{path} {body}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(field),
            "{path} {body}: names {field}: {message}"
        );
    }
    assert_eq!(env.count_tasks().await, 0, "nothing written");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_submit_token_re_runs_and_cancels_only_its_own_tasks() {
    let env = TestEnv::new("rerun-authz").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let mine = token(&admin, vec![Scope::Submit]).await;
    let theirs = token(&admin, vec![Scope::Submit]).await;
    let seeing = token(&admin, vec![Scope::Submit, Scope::Read]).await;

    let own = mine.submit(&parked("shared")).await.unwrap().0;
    let other = theirs.submit(&parked("shared")).await.unwrap().0;
    let other_ended = theirs.submit(&parked("shared")).await.unwrap().0;
    theirs.task_cancel(other_ended.id).await.unwrap();

    let filter = |dry_run| BulkRequest {
        queue: Some("shared".into()),
        dry_run,
        ..BulkRequest::default()
    };
    let dry = mine.tasks_cancel(&filter(true)).await.unwrap();
    let listed: Vec<Uuid> = dry.tasks.iter().map(|t| t.id).collect();
    assert_eq!(
        (dry.matched, listed),
        (1, vec![own.id]),
        "its own task only"
    );
    let done = seeing.tasks_cancel(&filter(false)).await.unwrap();
    assert_eq!(done.matched, 0, "seeing every task is not owning them");
    let done = mine.tasks_cancel(&filter(false)).await.unwrap();
    assert_eq!(done.acted, 1);
    assert_eq!(
        admin.task_get(other.id).await.unwrap().status,
        TaskStatus::Queued,
        "another token's task is left alone"
    );
    let retried = mine.tasks_retry(&filter(false)).await.unwrap();
    let retried: Vec<Uuid> = retried.tasks.iter().map(|t| t.id).collect();
    assert_eq!(
        retried,
        vec![own.id],
        "a bulk retry takes its own ended task only"
    );

    let (status, _, _) = refusal(mine.task_retry(other_ended.id).await.unwrap_err());
    assert_eq!(
        status, 404,
        "a submit-only token does not see another's task"
    );
    let (status, _, _) = refusal(seeing.task_retry(other_ended.id).await.unwrap_err());
    assert_eq!(status, 403, "one that sees it may not change it");
    let (status, _, _) = refusal(mine.task_cancel(other.id).await.unwrap_err());
    assert_eq!(status, 404);
    let (rerun, _) = admin.task_retry(other_ended.id).await.unwrap();
    assert_eq!(
        theirs.task_get(rerun.id).await.unwrap().retry_of,
        Some(other_ended.id),
        "an admin's re-run stays its owner's"
    );
}
