//! `--require-sync-standby`: a node acknowledges a write only when the primary that
//! committed it had a synchronous standby. The case it exists for, done by hand here as
//! pg_auto_failover does it on a failover (`docs/stores.md`): commits are waiting for a
//! standby that is gone, and the primary's `synchronous_standby_names` is emptied, which
//! releases them as if the standby had answered. A node without the flag answers 201 for
//! a task a failover would then lose; a node with it answers 503, and refuses further
//! writes, and reports not-ready, until a synchronous standby is back.

use baton_localcluster::testing as support;

use baton_client::{Client, SubmitTask};
use sqlx::{Connection, PgConnection};
use std::time::Duration;
use support::services::PostgresProc;
use support::*;

const STANDBY: &str = "baton_standby";

fn task(key: &str) -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        idempotency_key: Some(key.into()),
        ..Default::default()
    }
}

/// Sets the primary's `synchronous_standby_names`, as pg_auto_failover does: in the
/// configuration, then a reload.
async fn set_sync_standbys(primary: &PostgresProc, names: &str) {
    let mut conn = PgConnection::connect(&primary.admin_url()).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&mut conn)
        .await
        .unwrap();
}

/// How many of the primary's backends wait for a standby to confirm their commit.
async fn commits_waiting_for_a_standby(primary: &PostgresProc) -> i64 {
    let mut conn = PgConnection::connect(&primary.admin_url()).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

async fn wait_standby_in_sync(primary: &PostgresProc) {
    wait_for(
        "the standby to be synchronous",
        Duration::from_secs(30),
        || async {
            let mut conn = PgConnection::connect(&primary.admin_url()).await.ok()?;
            let state: Option<String> = sqlx::query_scalar(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
            )
            .bind(STANDBY)
            .fetch_optional(&mut conn)
            .await
            .ok()?;
            (state.as_deref() == Some("sync")).then_some(())
        },
    )
    .await;
}

async fn readiness(url: &str) -> u16 {
    reqwest::get(format!("{url}/readyz"))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

async fn submit_status(client: &Client, key: &str) -> u16 {
    match client.submit(&task(key)).await {
        Ok((_, true)) => 201,
        Ok((_, false)) => 200,
        Err(e) => e.status().map(|s| s.as_u16()).unwrap_or(0),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_commit_released_without_its_standby_is_not_acknowledged() {
    let primary = PostgresProc::start().await;
    let mut standby = PostgresProc::standby_of(&primary, STANDBY).await;
    set_sync_standbys(&primary, STANDBY).await;
    wait_standby_in_sync(&primary).await;

    let env = TestEnv::with_servers("sync-standby", &primary.admin_url(), &redis_url()).await;
    let guarded = env.node_with(&["--require-sync-standby"]).await;
    let plain = env.node().await;
    let (to_guarded, to_plain) = (user_client(&guarded.url), user_client(&plain.url));
    assert_eq!(readiness(&guarded.url).await, 200);
    assert_eq!(submit_status(&to_guarded, "while-in-sync").await, 201);
    assert_eq!(submit_status(&to_plain, "while-in-sync-plain").await, 201);

    // The standby is lost: commits wait for it.
    standby.down().await;
    let waiting_guarded = {
        let client = to_guarded.clone();
        tokio::spawn(async move { submit_status(&client, "released-guarded").await })
    };
    let waiting_plain = {
        let client = to_plain.clone();
        tokio::spawn(async move { submit_status(&client, "released-plain").await })
    };
    wait_for(
        "both submits' commits to wait for the standby",
        Duration::from_secs(20),
        || async { (commits_waiting_for_a_standby(&primary).await >= 2).then_some(()) },
    )
    .await;

    // Synchronous replication is turned off under them: both commits are released.
    set_sync_standbys(&primary, "").await;
    assert_eq!(
        waiting_plain.await.unwrap(),
        201,
        "without the flag, the released commit is acknowledged"
    );
    assert_eq!(
        waiting_guarded.await.unwrap(),
        503,
        "with it, a commit no standby confirmed is not acknowledged"
    );
    assert_eq!(
        env.count_tasks().await,
        4,
        "the refused task was committed all the same: a retry with its key finds it"
    );

    // While there is no synchronous standby, the guarded node writes nothing and is not
    // ready.
    assert_eq!(submit_status(&to_guarded, "while-alone").await, 503);
    assert_eq!(env.count_tasks().await, 4, "refused before it was written");
    assert_eq!(readiness(&guarded.url).await, 503);
    assert_eq!(readiness(&plain.url).await, 200);

    // The standby is back and synchronous again: the retry with the same key is answered
    // with the task the first try committed.
    standby.up().await;
    set_sync_standbys(&primary, STANDBY).await;
    wait_standby_in_sync(&primary).await;
    wait_for(
        "the guarded node to be ready",
        Duration::from_secs(20),
        || async { (readiness(&guarded.url).await == 200).then_some(()) },
    )
    .await;
    assert_eq!(submit_status(&to_guarded, "released-guarded").await, 200);
    assert_eq!(submit_status(&to_guarded, "in-sync-again").await, 201);
    assert_eq!(env.count_tasks().await, 5);
}
