//! The operator's command line: API tokens, registration tokens and runners, driven
//! through `baton token`, `baton registration-token` and `baton runners` against a node.

use baton_localcluster::testing as support;

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
            &[
                "token", "create", "--name", "ci", "--scope", "submit", "--output", "json",
            ],
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
    let listed = json_of(&baton_cli(&node.url, API_TOKEN, &["token", "list", "-o", "json"]).await);
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
            &["registration-token", "create", "--uses", "1", "-o", "json"],
        )
        .await,
    );
    assert_eq!(made["uses_left"], 1);
    let registration = made["token"].as_str().unwrap();
    let listed = json_of(
        &baton_cli(
            &node.url,
            API_TOKEN,
            &["registration-token", "list", "-o", "json"],
        )
        .await,
    );
    assert!(
        !listed.to_string().contains(registration),
        "a listing shows no secret"
    );
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

    // Used up, then revoked: listed as such.
    let token_id = made["id"].as_str().unwrap();
    let revoked = baton_cli(
        &node.url,
        API_TOKEN,
        &["registration-token", "revoke", token_id],
    )
    .await;
    assert!(revoked.status.success(), "{revoked:?}");
    let listed = json_of(
        &baton_cli(
            &node.url,
            API_TOKEN,
            &["registration-token", "list", "-o", "json"],
        )
        .await,
    );
    let row = listed["registration_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == token_id)
        .cloned()
        .unwrap();
    assert_eq!(row["uses_left"], 0, "{row}");
    assert!(row["revoked_at"].is_string(), "{row}");

    let deleted = baton_cli(&node.url, API_TOKEN, &["runners", "delete", &id]).await;
    assert!(deleted.status.success(), "{deleted:?}");
    let listing = baton_cli(&node.url, API_TOKEN, &["runners", "list"]).await;
    assert!(
        !String::from_utf8_lossy(&listing.stdout).contains(&id),
        "a deleted runner is not listed"
    );
    drop(runner);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_token_stops_working_when_it_expires() {
    let env = TestEnv::new("admin-cli-expiry").await;
    let node = env.node().await;
    let made = json_of(
        &baton_cli(
            &node.url,
            API_TOKEN,
            &[
                "token",
                "create",
                "--name",
                "brief",
                "--scope",
                "read",
                "--expires-in-s",
                "3",
                "--output",
                "json",
            ],
        )
        .await,
    );
    let secret = made["token"].as_str().unwrap();
    assert!(made["expires_at"].is_string(), "{made}");
    let listing = baton_cli(&node.url, secret, &["task", "list"]).await;
    assert!(
        listing.status.success(),
        "works before it expires: {listing:?}"
    );
    wait_for(
        "the token to expire",
        std::time::Duration::from_secs(15),
        || async {
            let out = baton_cli(&node.url, secret, &["task", "list"]).await;
            let said = String::from_utf8_lossy(&out.stderr).into_owned();
            (!out.status.success() && said.contains("401")).then_some(())
        },
    )
    .await;
}

/// `--help` shows where a setting may come from, and with clap's default also the value it
/// finds there: a database URL's password or a token in the environment would be
/// printed to whoever reads a help screen (a CI log, a support ticket).
#[test]
fn help_never_shows_secrets_from_the_environment() {
    let secret = "s3cr3t-in-the-environment";
    let url = format!("postgres://baton:{secret}@db.internal/baton");
    let redis = format!("redis://:{secret}@redis.internal:6379");
    let drill: &[&[&str]] = if cfg!(feature = "drill") {
        &[&["chaos", "--help"]]
    } else {
        &[]
    };
    for command in [
        &["serve", "--help"][..],
        &["migrate", "--help"],
        &["runner", "--help"],
        &["dev", "--help"],
        &["task", "list", "--help"],
    ]
    .into_iter()
    .chain(drill.iter().copied())
    {
        let out = std::process::Command::new(support::procs::baton_binary())
            .args(command)
            .env("BATON_DATABASE_URL", &url)
            .env("BATON_REDIS_URL", &redis)
            .env("BATON_REDIS_PASSWORD", secret)
            .env("BATON_REDIS_SENTINEL_PASSWORD", secret)
            .env("BATON_REDIS_SENTINEL", &redis)
            .env("BATON_REDIS_CLUSTER", &redis)
            .env("BATON_CHAOS_DATABASE_URL", &url)
            .env("BATON_API_TOKEN", secret)
            .env("BATON_REGISTRATION_TOKEN", secret)
            .env("BATON_WEBHOOK_SECRET", secret)
            .env("BATON_TOKEN", secret)
            .output()
            .unwrap();
        assert!(out.status.success(), "{command:?}: {out:?}");
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            !shown.contains(secret),
            "`baton {}` printed a secret:\n{shown}",
            command.join(" ")
        );
    }
}
