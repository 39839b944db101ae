//! The OpenAPI document describes every route the node serves, and Schemathesis (from
//! PyPI), fuzzing a live node from it, finds no server error and no response that does
//! not match the document. Its output is kept in `target/schemathesis.txt`.

use baton_localcluster::testing as support;

use std::process::Command;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_document_lists_every_route() {
    let env = TestEnv::new("openapi-doc").await;
    let node = env.node().await;
    let doc = node.openapi().await;
    let paths = doc["paths"].as_object().unwrap();
    let expected = [
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/metrics", "get"),
        ("/openapi.json", "get"),
        ("/v1/tasks", "post"),
        ("/v1/tasks", "get"),
        ("/v1/tasks/batch", "post"),
        ("/v1/tasks/{id}", "get"),
        ("/v1/tasks/{id}/logs", "get"),
        ("/v1/tasks/{id}/logs/marks", "get"),
        ("/v1/tasks/{id}/attempts", "get"),
        ("/v1/tasks/count", "get"),
        ("/v1/tasks/{id}/cancel", "post"),
        ("/v1/tasks/{id}/retry", "post"),
        ("/v1/tasks/cancel", "post"),
        ("/v1/tasks/retry", "post"),
        ("/v1/events", "get"),
        ("/v1/me", "get"),
        ("/v1/schedules", "post"),
        ("/v1/schedules", "get"),
        ("/v1/schedules/{id}", "get"),
        ("/v1/schedules/{id}", "patch"),
        ("/v1/schedules/{id}", "delete"),
        ("/v1/schedules/{id}/pause", "post"),
        ("/v1/schedules/{id}/resume", "post"),
        ("/v1/schedules/{id}/trigger", "post"),
        ("/v1/pipelines", "post"),
        ("/v1/pipelines", "get"),
        ("/v1/pipelines/{id}", "get"),
        ("/v1/pipelines/{id}/cancel", "post"),
        ("/v1/pipelines/{id}/jobs/{job}/retry", "post"),
        ("/v1/runners", "get"),
        ("/v1/runners/{id}", "delete"),
        ("/v1/runners/{id}/pause", "post"),
        ("/v1/runners/{id}/resume", "post"),
        ("/v1/queues", "get"),
        ("/v1/queues/trends", "get"),
        ("/v1/queues/{name}/pause", "post"),
        ("/v1/queues/{name}/resume", "post"),
        ("/v1/queues/{name}/defaults", "put"),
        ("/v1/tokens", "post"),
        ("/v1/tokens", "get"),
        ("/v1/tokens/{id}", "delete"),
        ("/v1/registration-tokens", "post"),
        ("/v1/registration-tokens", "get"),
        ("/v1/registration-tokens/{id}", "delete"),
        ("/v1/webhooks/secret", "get"),
        ("/v1/nodes", "get"),
        ("/v1/demand", "get"),
        ("/v1/provisioners", "get"),
        ("/v1/runner/register", "post"),
        ("/v1/runner/lease", "post"),
        ("/v1/runner/exchange", "post"),
        ("/v1/runner/heartbeat", "post"),
        ("/v1/runner/unregister", "post"),
        ("/v1/runner/tasks/{id}/start", "post"),
        ("/v1/runner/tasks/{id}/logs", "post"),
        ("/v1/runner/tasks/{id}/complete", "post"),
    ];
    for (path, method) in expected {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} is described"
        );
    }
    let described: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(described, expected.len(), "and nothing else");
    // A generated client names its functions after the operation ids: one each.
    let mut ids: Vec<&str> = paths
        .values()
        .flat_map(|p| p.as_object().unwrap().values())
        .map(|op| {
            op["operationId"]
                .as_str()
                .expect("every operation has an id")
        })
        .collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "operation ids are unique: {ids:?}");
    // Every error answer refers to the one ErrorBody, so clients get one error type.
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
    let not_found = &paths["/v1/tasks/{id}"]["get"]["responses"]["404"];
    assert_eq!(
        not_found["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ErrorBody"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_server_error_and_no_response_off_the_schema() {
    let env = TestEnv::new("openapi-fuzz").await;
    let node = env.node().await;
    let mut runners = Vec::new();
    for _ in 0..8 {
        runners.push(
            register_runner_token(&node.url, &["linux"], 1)
                .await
                .0
                .to_string(),
        );
    }
    // Schedules that exist, for the operations on a schedule's id (hooks.py).
    let user = user_client(&node.url);
    let mut schedules = Vec::new();
    for i in 0..8 {
        let made = user
            .schedule_create(&baton_client::CreateSchedule {
                name: format!("fuzzed-{i}"),
                cron: "@yearly".into(),
                task: baton_client::SubmitTask {
                    command: Some(vec!["true".into()]),
                    ..Default::default()
                },
                ..Default::default()
            })
            .await
            .unwrap();
        schedules.push(made.id.to_string());
    }
    // Pipelines that exist, each with one job `a` no runner takes; half of them cancelled,
    // so that a re-run of `a` may be made.
    let mut pipelines = Vec::new();
    for i in 0..8 {
        let (made, _) = user
            .pipeline_submit(&baton_client::SubmitPipeline {
                name: Some(format!("fuzzed-{i}")),
                jobs: vec![baton_client::PipelineJobSpec {
                    name: "a".into(),
                    task: baton_client::SubmitTask {
                        command: Some(vec!["true".into()]),
                        labels: vec!["fuzzed-unserved".into()],
                        ..Default::default()
                    },
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await
            .unwrap();
        if i % 2 == 0 {
            user.pipeline_cancel(made.id).await.unwrap();
        }
        pipelines.push(made.id.to_string());
    }
    // The runner protocol answers an API token 403 whatever the input: it is fuzzed with
    // a runner's token below. Registration takes no bearer and stays here; its body is
    // given the registration token (hooks.py), which a fuzzer would never guess.
    // The event stream does not end, by design, so a request the fuzzer makes valid would
    // only hang until it gives up: its refusals are tested in tests/events.rs.
    let not_the_runner_protocol = [
        "--exclude-path-regex",
        "^(/v1/runner/(exchange|heartbeat|lease|unregister|tasks/)|/v1/events$)",
    ];
    let stdout = fuzz(
        &node.url,
        API_TOKEN,
        &not_the_runner_protocol,
        &[
            ("BATON_ST_RUNNER_IDS", runners.join(",")),
            ("BATON_ST_SCHEDULE_IDS", schedules.join(",")),
            ("BATON_ST_PIPELINE_IDS", pipelines.join(",")),
            ("BATON_ST_REGISTRATION_TOKEN", REGISTRATION_TOKEN.into()),
        ],
        120,
        "schemathesis.txt",
    )
    .await;
    assert!(
        stdout.contains("Tested: 49"),
        "every operation but the runner protocol's and the event stream was tested:\n{stdout}"
    );
    assert!(
        !stdout.contains("Authentication failed"),
        "every operation was reached past authentication:\n{stdout}"
    );
    assert!(
        !stdout.contains("Missing test data"),
        "every operation on an id met one that exists:\n{stdout}"
    );
}

/// The runner protocol, fuzzed with a runner's own token so its handlers are reached past
/// authentication (with the admin token they all answer 401).
#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_on_the_runner_protocol_with_a_runner_token() {
    let env = TestEnv::new("openapi-fuzz-runner").await;
    let node = env.node().await;
    let (_, token) = register_runner_token(&node.url, &["linux"], 2).await;
    // Unregistering would void the token and leave the rest of the run at 401. A lease
    // with nothing to hand out is parked for its `wait_s` (at most 50 s) by design, so
    // responses may take that long.
    let only_runner = [
        "--include-path-regex",
        "^/v1/runner/",
        "--exclude-path",
        "/v1/runner/unregister",
        "--max-response-time",
        "55",
    ];
    let stdout = fuzz(
        &node.url,
        &token,
        &only_runner,
        &[],
        90,
        "schemathesis-runner.txt",
    )
    .await;
    assert!(
        stdout.contains("Tested: 7"),
        "every runner operation was tested:\n{stdout}"
    );
    assert!(
        !stdout.contains("Authentication failed"),
        "the runner's token opened its operations:\n{stdout}"
    );
}

/// Runs Schemathesis against the node's document with `token`, keeps its output in
/// `target/<report>`, and fails the test on any problem it found.
async fn fuzz(
    base: &str,
    token: &str,
    extra: &[&str],
    vars: &[(&str, String)],
    seconds: u32,
    report: &str,
) -> String {
    let hooks = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis");
    let url = format!("{base}/openapi.json");
    let auth = format!("Authorization: Bearer {token}");
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let max_time = seconds.to_string();
    // Schemathesis keeps a cache of past crashes in its working directory; keep it out of
    // the source tree and out of the next run.
    let workdir = std::env::temp_dir().join(format!("baton-st-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&workdir).unwrap();
    let cwd = workdir.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("st")
            .args(["run", &url, "--header", &auth])
            .args(&extra)
            // Everything but "every schema-valid request is accepted": the server checks
            // more than JSON Schema can say (a URL's syntax, say) and answers those 422.
            .args([
                "--checks",
                "all",
                "--exclude-checks",
                "positive_data_acceptance",
            ])
            .args(["--max-examples", "30", "--max-time", &max_time])
            // One worker: CPython 3.11's `ast` keeps its recursion depth in shared state,
            // and Hypothesis parsing sources on two threads at once fails now and then with
            // "AST constructor recursion depth mismatch" (python/cpython#106905).
            .args(["--workers", "1", "--request-timeout", "60", "--seed", "1"])
            .current_dir(cwd)
            .env("SCHEMATHESIS_HOOKS", "hooks")
            .env("PYTHONPATH", &hooks)
            .env("NO_COLOR", "1")
            .envs(vars)
            .output()
            .expect("run schemathesis (`pip install schemathesis`; scripts/test.sh does)")
    })
    .await
    .unwrap();
    let _ = std::fs::remove_dir_all(&workdir);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(report);
    let _ = std::fs::write(path, stdout.as_bytes());
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
