//! One tenant cannot starve the others (docs/security.md, "A tenant cannot starve
//! another"): each attack of the security review, performed against a real node and
//! Postgres, leaves the node serving everyone else.

use baton_localcluster::testing as support;

use baton_client::{CreateToken, Scope, SubmitTask};
use std::time::{Duration, Instant};
use support::*;
use uuid::Uuid;

/// The attack: tasks with 1 MiB commands planted, then 16 text searches for something
/// none holds, at once. Before, each read every planted command whole, 16 searches held
/// every connection of the node's pool for many seconds, and any request that needed one
/// — a token check included — waited behind them. Now a search reads the first 4 KiB of
/// each command, only `max_text_searches` (2) run at once on a node (the rest get 429),
/// and each is bounded in Postgres: a token is checked at once while they run.
#[tokio::test(flavor = "multi_thread")]
async fn text_searches_over_planted_huge_commands_leave_the_node_answering_others() {
    let env = TestEnv::new("tenant-text-search").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let (seed, _) = admin
        .submit(&SubmitTask {
            labels: vec!["nobody-runs-this".into()],
            script: Some("true".into()),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    // 96 copies of it, each with a script of 1 MiB of text that does not compress.
    let mut db = env.db().await;
    sqlx::query(
        "INSERT INTO tasks
         SELECT (jsonb_populate_record(t, jsonb_build_object(
                   'id', gen_random_uuid(),
                   'script', (SELECT string_agg(md5(random()::text || n), '')
                              FROM generate_series(1, 32768) AS n)))).*
         FROM tasks t, generate_series(1, 96)
         WHERE t.id = $1",
    )
    .bind(seed.id)
    .execute(&mut db)
    .await
    .unwrap();
    let other = admin
        .token_create(&CreateToken {
            name: "another-tenant".into(),
            scopes: vec![Scope::Submit],
            ..Default::default()
        })
        .await
        .unwrap();
    let other = baton_client::Client::new(&node.url, Some(other.token)).unwrap();

    let http = reqwest::Client::new();
    let searches: Vec<_> = (0..16)
        .map(|_| {
            let request = http
                .get(format!(
                    "{}/v1/tasks?text=no-such-text-{}",
                    node.url,
                    Uuid::new_v4()
                ))
                .bearer_auth(API_TOKEN);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                response.status().as_u16()
            })
        })
        .collect();
    // Once searches hold connections (or all are answered already): another tenant's
    // token is checked, and the tenant answered.
    wait_for("the searches to run", Duration::from_secs(30), || async {
        let running: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND state = 'active'
               AND pid <> pg_backend_pid() AND query LIKE '%ILIKE $10%'",
        )
        .fetch_one(&mut env.db().await)
        .await
        .unwrap();
        (running >= 2 || searches.iter().all(|s| s.is_finished())).then_some(())
    })
    .await;
    let asked = Instant::now();
    other
        .task_list(&Default::default())
        .await
        .expect("another tenant is answered");
    let took = asked.elapsed();
    let mut statuses = Vec::new();
    for search in searches {
        statuses.push(search.await.unwrap());
    }
    assert!(
        statuses.iter().all(|s| [200, 429].contains(s)),
        "{statuses:?}"
    );
    assert!(statuses.contains(&200), "{statuses:?}");
    assert!(
        took < Duration::from_secs(1),
        "another tenant waited {took:?} behind the searches ({statuses:?})"
    );
}
