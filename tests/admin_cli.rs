//! The operator's command line: API tokens, registration tokens and runners, driven
//! through `baton token`, `baton registration-token` and `baton runners` against a node.

mod support;

use serde_json::Value;
use support::procs::baton_cli;
use support::*;

fn json_of(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "the command succeeds: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the command prints JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn api_tokens_are_created_used_listed_and_revoked() {
    let env = TestEnv::new("admin-cli-tokens").await;
    let node = env.node().await;
    let made = json_of(
        &baton_cli(
            &node.url,
            API_TOKEN,
            &["token", "create", "--name", "ci", "--scope", "submit"],
        )
        .await,
    );
    let (id, secret) = (
        made["id"].as_str().unwrap(),
        made["token"].as_str().unwrap(),
    );
    assert!(secret.starts_with("bat_"), "{made}");

    let submitted = baton_cli(&node.url, secret, &["task", "submit", "--", "true"]).await;
    assert!(submitted.status.success(), "the new token submits");
    let listed = json_of(&baton_cli(&node.url, API_TOKEN, &["token", "list"]).await);
    let ours = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .expect("the token is listed");
    assert_eq!(ours["name"], "ci");
    assert_eq!(ours["scopes"], serde_json::json!(["submit"]));
    assert!(
        !listed.to_string().contains(secret),
        "listings never hold secrets"
    );

    // The submit-only token may not create tokens itself.
    let refused = baton_cli(
        &node.url,
        secret,
        &["token", "create", "--name", "x", "--scope", "admin"],
    )
    .await;
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("403"),
        "{refused:?}"
    );

    assert!(
        baton_cli(&node.url, API_TOKEN, &["token", "revoke", id])
            .await
            .status
            .success()
    );
    let after = baton_cli(&node.url, secret, &["task", "submit", "--", "true"]).await;
    assert!(!after.status.success(), "a revoked token is refused");
    assert!(
        String::from_utf8_lossy(&after.stderr).contains("401"),
        "{after:?}"
    );

    let bad_scope = baton_cli(
        &node.url,
        API_TOKEN,
        &["token", "create", "--name", "x", "--scope", "root"],
    )
    .await;
    assert!(
        !bad_scope.status.success(),
        "an unknown scope is refused before any request"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn runners_register_with_a_made_token_and_are_paused_resumed_and_deleted() {
    let env = TestEnv::new("admin-cli-runners").await;
    let node = env.node().await;
    let made = json_of(
        &baton_cli(
            &node.url,
            API_TOKEN,
            &["registration-token", "create", "--uses", "1"],
        )
        .await,
    );
    assert_eq!(made["uses_left"], 1);
    let registration = made["token"].as_str().unwrap();
    let runner = env
        .runner_with(
            &node.url,
            &["linux"],
            1,
            &["--registration-token", registration],
        )
        .await;
    let id = wait_for(
        "the runner to register",
        std::time::Duration::from_secs(30),
        || async {
            let out = baton_cli(&node.url, API_TOKEN, &["runners", "list"]).await;
            let listing = String::from_utf8_lossy(&out.stdout).into_owned();
            listing
                .lines()
                .find(|l| l.contains("online"))
                .map(|l| l.split_whitespace().next().unwrap().to_string())
        },
    )
    .await;

    let paused = json_of(&baton_cli(&node.url, API_TOKEN, &["runners", "pause", &id]).await);
    assert_eq!(paused["paused"], true);
    let listing = baton_cli(&node.url, API_TOKEN, &["runners", "list"]).await;
    assert!(String::from_utf8_lossy(&listing.stdout).contains("paused"));
    let resumed = json_of(&baton_cli(&node.url, API_TOKEN, &["runners", "resume", &id]).await);
    assert_eq!(resumed["paused"], false);

    let deleted = baton_cli(&node.url, API_TOKEN, &["runners", "delete", &id]).await;
    assert!(deleted.status.success(), "{deleted:?}");
    let listing = baton_cli(&node.url, API_TOKEN, &["runners", "list"]).await;
    assert!(
        !String::from_utf8_lossy(&listing.stdout).contains(&id),
        "a deleted runner is not listed"
    );
    drop(runner);
}
