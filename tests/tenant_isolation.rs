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
    plant_copies(&env, seed.id, 96, true).await;
    let other = tenant(&admin, &node.url, "another-tenant").await;

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

/// Inserts `copies` copies of the task `seed` straight into Postgres (faster than
/// submitting them), each with a new id and a script of 1 MiB: of text that does not
/// compress when `incompressible`, else of one letter.
async fn plant_copies(env: &TestEnv, seed: Uuid, copies: i32, incompressible: bool) {
    let script = if incompressible {
        "(SELECT string_agg(md5(random()::text || n), '') FROM generate_series(1, 32768) AS n)"
    } else {
        "repeat('y', 1 << 20)"
    };
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO tasks
         SELECT (jsonb_populate_record(t, jsonb_build_object(
                   'id', gen_random_uuid(), 'script', {script}))).*
         FROM tasks t, generate_series(1, $2)
         WHERE t.id = $1"
    )))
    .bind(seed)
    .bind(copies)
    .execute(&mut env.db().await)
    .await
    .unwrap();
}

/// A tenant's token of its own, limited to submitting.
async fn tenant(admin: &baton_client::Client, url: &str, name: &str) -> baton_client::Client {
    baton_client::Client::new(url, Some(token(admin, name, Scope::Submit).await)).unwrap()
}

/// A new API token with `scope`.
async fn token(admin: &baton_client::Client, name: &str, scope: Scope) -> String {
    admin
        .token_create(&CreateToken {
            name: name.into(),
            scopes: vec![scope],
            ..Default::default()
        })
        .await
        .unwrap()
        .token
}

fn with_labels(labels: &[String]) -> SubmitTask {
    SubmitTask {
        labels: labels.to_vec(),
        command: Some(vec!["true".into()]),
        ..SubmitTask::default()
    }
}

/// The attack: 256 submits with fresh labels no runner has (queued for as long as they
/// may wait) took every one of `max_label_sets` (256), and every other tenant's new label
/// set was refused. Now one token may have queued work with at most
/// `max_label_sets_per_owner` (32) label sets: its 256 are refused, and another tenant's
/// new label set is taken.
#[tokio::test(flavor = "multi_thread")]
async fn one_tenant_cannot_take_every_label_set() {
    let env = TestEnv::new("tenant-label-sets").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let (greedy, other) = (
        tenant(&admin, &node.url, "greedy").await,
        tenant(&admin, &node.url, "other").await,
    );
    let fresh = |n: usize| -> Vec<SubmitTask> {
        (0..n)
            .map(|_| with_labels(&[format!("nobody-{}", Uuid::new_v4().simple())]))
            .collect()
    };
    let refused = greedy.submit_batch(fresh(256)).await.unwrap_err();
    let baton_client::ClientError::Api(refused) = refused else {
        panic!("{refused}")
    };
    assert_eq!(
        (refused.status.as_u16(), refused.body.error.code.as_str()),
        (429, "too_many_label_sets"),
        "{}",
        refused.body.error.message
    );
    assert_eq!(
        env.count_tasks().await,
        0,
        "the refused batch wrote nothing"
    );
    // Its own share it has.
    let share = fresh(32);
    greedy.submit_batch(share.clone()).await.unwrap();
    assert!(greedy.submit_batch(fresh(1)).await.is_err());
    // Another tenant's new label set is taken.
    other.submit_batch(fresh(1)).await.unwrap();
    // And the label sets the greedy one holds still take its work.
    greedy.submit(&share[0]).await.unwrap();
}

/// The attack: concurrency keys were global, so a tenant naming another team's group
/// (`deploy-prod`, limit 1) with a long task of its own held the group's one place, and
/// the team's deploy waited behind it. Now a key a non-admin token names is its own
/// (`<token id>/deploy-prod`); an admin's key is shared as named.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_cannot_fill_another_teams_concurrency_group() {
    let env = TestEnv::new("tenant-groups").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let intruder = tenant(&admin, &node.url, "intruder").await;
    let _runner = env.runner(&node.url, &["groups"], 2).await;
    let in_group = |script: &str| SubmitTask {
        labels: vec!["groups".into()],
        script: Some(script.into()),
        concurrency_key: Some("deploy-prod".into()),
        concurrency_limit: Some(1),
        ..SubmitTask::default()
    };
    let (held, _) = intruder.submit(&in_group("sleep 60")).await.unwrap();
    let key = held.concurrency_key.clone().unwrap_or_default();
    assert!(
        key.ends_with("/deploy-prod") && key != "deploy-prod",
        "the intruder's key is its own: {key}"
    );
    wait_for(
        "the intruder's task to run",
        Duration::from_secs(30),
        || async {
            let t = intruder.task_get(held.id).await.ok()?;
            (t.status == baton_core::TaskStatus::Running).then_some(())
        },
    )
    .await;
    let (deploy, _) = admin.submit(&in_group("true")).await.unwrap();
    assert_eq!(deploy.concurrency_key.as_deref(), Some("deploy-prod"));
    let done = wait_for(
        "the team's deploy to run",
        Duration::from_secs(20),
        || async {
            let t = admin.task_get(deploy.id).await.ok()?;
            t.status.is_terminal().then_some(t)
        },
    )
    .await;
    assert_eq!(done.status, baton_core::TaskStatus::Succeeded, "{done:?}");
    admin.task_cancel(held.id).await.unwrap();
}

/// The node's peak resident memory so far, in KiB (`VmHWM`).
fn peak_memory_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// The attack: a body of 8 MiB of `0,` was parsed into a generic JSON value (~200 MiB)
/// before the handler looked at the token's scope — a read-only token's request cost the
/// node that much, as many times at once as it liked. Now the values are counted in the
/// bytes first and the body refused past `MAX_JSON_VALUES`: the node's peak memory barely
/// moves.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_of_millions_of_tiny_values_is_refused_before_it_is_built() {
    let env = TestEnv::new("tenant-json-values").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let reader = token(&admin, "reader", Scope::Read).await;
    let mut body = String::from("{\"tasks\":[");
    while body.len() < (8 << 20) - 64 {
        body.push_str("0,");
    }
    body.push_str("0]}");
    let before = peak_memory_kib(node.pid());
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/tasks/batch", node.url))
        .bearer_auth(&reader)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let error: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"]["code"], "invalid_body", "{error}");
    let grew_mib = (peak_memory_kib(node.pid()) - before) / 1024;
    assert!(
        grew_mib < 64,
        "the node's peak memory grew by {grew_mib} MiB"
    );
}

/// The attack: tasks of a MiB each (a script, a payload, env), listed 1,000 to a page:
/// each list answer shipped all of it, read from Postgres, held by the node and parsed by
/// every console tab (64 planted tasks: a 64 MiB answer). Now a list gives summaries — the
/// script cut to 256 characters, no env, payload or outputs, `summary: true` — and the
/// task itself gives it whole. The same for a schedule's template in the schedule list,
/// which also carries each schedule's next ticks and latest runs, so the console reads
/// no schedule's details.
#[tokio::test(flavor = "multi_thread")]
async fn lists_give_summaries_and_a_task_or_schedule_is_whole_on_request() {
    let env = TestEnv::new("tenant-summaries").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let big = "x".repeat(100 << 10);
    let (seed, _) = admin
        .submit(&SubmitTask {
            labels: vec!["nobody-runs-this".into()],
            script: Some(big.clone()),
            env: [("BIG".to_string(), big.clone())].into(),
            payload: Some(serde_json::json!({ "blob": big })),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    // 63 copies of it, each with a script of a MiB.
    plant_copies(&env, seed.id, 63, false).await;

    let answer = reqwest::Client::new()
        .get(format!("{}/v1/tasks?limit=1000", node.url))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body = answer.bytes().await.unwrap();
    println!("a list of 64 tasks of 1 MiB each: {} bytes", body.len());
    assert!(body.len() < 256 << 10, "{} bytes", body.len());
    let list: baton_client::TaskList = serde_json::from_slice(&body).unwrap();
    assert_eq!(list.tasks.len(), 64);
    for task in &list.tasks {
        assert!(task.summary);
        assert_eq!(task.script.as_deref().map(str::len), Some(256));
        assert!(task.env.is_empty() && task.payload.is_none());
    }
    let whole = admin.task_get(seed.id).await.unwrap();
    assert!(!whole.summary);
    assert_eq!(whole.script.as_deref(), Some(big.as_str()));
    assert_eq!(whole.env["BIG"], big);
    assert!(whole.payload.is_some());

    let schedule = admin
        .schedule_create(&baton_client::CreateSchedule {
            name: "big-template".into(),
            cron: "*/5 * * * *".into(),
            task: SubmitTask {
                command: Some(vec!["echo".into(), big.clone()]),
                payload: Some(serde_json::json!({ "blob": big })),
                ..SubmitTask::default()
            },
            ..Default::default()
        })
        .await
        .unwrap();
    admin.schedule_action(schedule.id, "trigger").await.unwrap();
    let listed = wait_for(
        "the triggered run in the list",
        Duration::from_secs(10),
        || async {
            let list = admin.schedules().await.unwrap();
            let s = list.schedules.into_iter().find(|s| s.id == schedule.id)?;
            (!s.last_runs.is_empty()).then_some(s)
        },
    )
    .await;
    assert!(listed.summary);
    assert_eq!(listed.next_fires.len(), 3);
    let command = listed.task.command.as_ref().unwrap();
    assert_eq!(command[0], "echo");
    assert_eq!(command[1].len(), 256);
    assert!(listed.task.payload.is_none());
    assert!(listed.last_runs[0].task.as_ref().unwrap().summary);
    let whole = admin.schedule_get(schedule.id).await.unwrap();
    assert!(!whole.summary);
    assert_eq!(whole.task.command.as_ref().unwrap()[1], big);
    assert!(whole.task.payload.is_some());
}
