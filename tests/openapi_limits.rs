//! A node run with other `[limits]` serves a document that states them: a client or a
//! fuzzer reading `/openapi.json` is told what this node enforces, not the defaults.

use baton_localcluster::testing as support;

use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_served_document_states_the_configured_limits() {
    let env = TestEnv::new("openapi-limits").await;
    let settings = env.dir.join("limits.toml");
    std::fs::write(&settings, "[limits]\nmax_lease = 7\nmax_attempts = 3\n").unwrap();
    let node = env
        .node_with(&["--config", settings.to_str().unwrap()])
        .await;
    let doc = node.openapi().await;
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["LeaseRequest"]["properties"]["max"]["maximum"], 7);
    assert_eq!(schemas["Exchange"]["properties"]["max"]["maximum"], 7);
    // And the node enforces what it states.
    let client = user_client(&node.url);
    let refused = client
        .submit(&baton_client::SubmitTask {
            command: Some(vec!["true".into()]),
            max_attempts: Some(4),
            ..Default::default()
        })
        .await;
    assert!(
        refused.is_err(),
        "max_attempts over the configured limit is refused"
    );
}
