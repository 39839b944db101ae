//! The OpenAPI document describes every route the node serves, and Schemathesis (from
//! PyPI), fuzzing a live node from it, finds no server error and no response that does
//! not match the document. Its output is kept in `target/schemathesis.txt`.

mod support;

use std::process::Command;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_document_lists_every_route() {
    let env = TestEnv::new("openapi-doc").await;
    let node = env.node().await;
    let doc: serde_json::Value = reqwest::get(format!("{}/openapi.json", node.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths = doc["paths"].as_object().unwrap();
    let expected = [
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/openapi.json", "get"),
        ("/v1/tasks", "post"),
        ("/v1/tasks", "get"),
        ("/v1/tasks/batch", "post"),
        ("/v1/tasks/{id}", "get"),
        ("/v1/tasks/{id}/logs", "get"),
        ("/v1/tasks/{id}/cancel", "post"),
        ("/v1/runners", "get"),
        ("/v1/runners/{id}", "delete"),
        ("/v1/runners/{id}/pause", "post"),
        ("/v1/runners/{id}/resume", "post"),
        ("/v1/tokens", "post"),
        ("/v1/tokens", "get"),
        ("/v1/tokens/{id}", "delete"),
        ("/v1/registration-tokens", "post"),
        ("/v1/nodes", "get"),
        ("/v1/runner/register", "post"),
        ("/v1/runner/lease", "post"),
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
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object());
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_server_error_and_no_response_off_the_schema() {
    let env = TestEnv::new("openapi-fuzz").await;
    let node = env.node().await;
    let hooks = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis");
    let url = format!("{}/openapi.json", node.url);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("st")
            .args([
                "run",
                &url,
                "--header",
                &format!("Authorization: Bearer {API_TOKEN}"),
            ])
            // Everything but "every schema-valid request is accepted": the server checks
            // more than JSON Schema can say (a URL's syntax, say) and answers those 422.
            .args([
                "--checks",
                "all",
                "--exclude-checks",
                "positive_data_acceptance",
            ])
            .args([
                "--max-examples",
                "30",
                "--max-time",
                "120",
                "--workers",
                "2",
            ])
            .args(["--request-timeout", "45", "--seed", "1"])
            .env("SCHEMATHESIS_HOOKS", "hooks")
            .env("PYTHONPATH", &hooks)
            .env("NO_COLOR", "1")
            .output()
            .expect("run schemathesis (`pip install schemathesis`; scripts/test.sh does)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/schemathesis.txt");
    let _ = std::fs::write(report, stdout.as_bytes());
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Tested: 24"),
        "every operation was tested:\n{stdout}"
    );
}
