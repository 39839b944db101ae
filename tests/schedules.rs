//! Schedules against real nodes, Redis and Postgres: every tick fires exactly once while
//! nodes are killed and restarted; overlap `skip` skips and says so; after every node
//! was down, catch-up `latest` fires one missed tick and `skip` none; the API and CLI
//! do what they say, and bad input writes nothing.

use baton_localcluster::testing as support;

use baton_client::{
    ApiError, BulkRequest, ClientError, CreateSchedule, CreateToken, Schedule, Scope, SubmitTask,
    TaskQuery, UpdateSchedule,
};
use chrono::{DateTime, Utc};
use sqlx::Row;
use std::time::Duration;
use support::procs::{NodeProc, baton_cli};
use support::{API_TOKEN, TestEnv, user_client, wait_for};
use uuid::Uuid;

/// The nodes' misfire grace in these tests (the default).
const GRACE_MS: i64 = 2_000;

fn every_second(name: &str, overlap: &str, catch_up: &str, script: &str) -> CreateSchedule {
    CreateSchedule {
        name: name.into(),
        cron: "* * * * * *".into(),
        task: SubmitTask {
            queue: Some("sched".into()),
            script: Some(script.into()),
            ..SubmitTask::default()
        },
        overlap: Some(overlap.into()),
        catch_up: Some(catch_up.into()),
        catch_up_window_s: Some(3_600),
        ..CreateSchedule::default()
    }
}

/// Each tick's tasks: (tick, how many tasks it made, the latest created_at of them).
async fn ticks_of(env: &TestEnv, schedule: Uuid) -> Vec<(DateTime<Utc>, i64, DateTime<Utc>)> {
    let mut db = env.db().await;
    sqlx::query(
        "SELECT scheduled_for, count(*) AS n, max(created_at) AS created FROM tasks
         WHERE schedule_id = $1 AND idempotency_key NOT LIKE '%/trigger/%'
         GROUP BY scheduled_for ORDER BY scheduled_for",
    )
    .bind(schedule)
    .fetch_all(&mut db)
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.get("scheduled_for"), r.get("n"), r.get("created")))
    .collect()
}

async fn fired_past(node: &NodeProc, id: Uuid, at_least: i64) -> Schedule {
    let user = user_client(&node.url);
    wait_for(
        &format!("schedule {id} to fire {at_least} ticks"),
        Duration::from_secs(30),
        || {
            let user = user.clone();
            async move {
                let s = user.schedule_get(id).await.ok()?;
                (s.fired_count >= at_least).then_some(s)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_tick_fires_exactly_once_while_nodes_are_killed_and_restarted() {
    let env = TestEnv::new("schedules-exactly-once").await;
    let mut nodes = [env.node().await, env.node().await, env.node().await];
    let user = user_client(&nodes[0].url);
    let schedule = user
        .schedule_create(&every_second("every-second", "allow", "all", "true"))
        .await
        .unwrap();
    let started = Utc::now();
    fired_past(&nodes[0], schedule.id, 2).await;
    // Thirty seconds in which each node in turn is killed (SIGKILL, mid-pass or not) and
    // a fresh one started in its place; two keep firing meanwhile.
    for round in 0..6 {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let victim = round % 3;
        nodes[victim].kill();
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        nodes[victim] = env.node().await;
    }
    let live = &nodes[0];
    let user = user_client(&live.url);
    user.schedule_action(schedule.id, "pause").await.unwrap();
    let ticks = ticks_of(&env, schedule.id).await;
    assert!(
        ticks.len() >= 28,
        "only {} ticks fired in {:?}",
        ticks.len(),
        Utc::now() - started
    );
    for (tick, n, _) in &ticks {
        assert_eq!(*n, 1, "tick {tick} made {n} tasks");
    }
    for pair in ticks.windows(2) {
        assert_eq!(
            (pair[1].0 - pair[0].0).num_milliseconds(),
            1_000,
            "a tick between {} and {} did not fire",
            pair[0].0,
            pair[1].0
        );
    }
    let s = user.schedule_get(schedule.id).await.unwrap();
    assert_eq!(s.skipped_count, 0, "catch-up `all` skips nothing: {s:?}");
    assert_eq!(s.fired_count, ticks.len() as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_skip_with_a_slow_task_skips_ticks_and_records_them() {
    let env = TestEnv::new("schedules-overlap-skip").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 2).await;
    let user = user_client(&node.url);
    let schedule = user
        .schedule_create(&SubmitAndSkip::schedule())
        .await
        .unwrap();
    let s = wait_for(
        "three runs and skipped ticks",
        Duration::from_secs(60),
        || {
            let user = user.clone();
            async move {
                let s = user.schedule_get(schedule.id).await.ok()?;
                let done = s
                    .last_runs
                    .iter()
                    .filter(|r| r.task.as_ref().is_some_and(|t| t.status.is_terminal()))
                    .count();
                (done >= 2 && s.skipped_count >= 3).then_some(s)
            }
        },
    )
    .await;
    user.schedule_action(schedule.id, "pause").await.unwrap();
    assert!(
        s.last_runs.iter().any(|r| r.outcome == "skipped_overlap"),
        "skips are shown: {:?}",
        s.last_runs
    );
    // No run began before the one before it had finished.
    let mut db = env.db().await;
    let runs: Vec<(DateTime<Utc>, Option<DateTime<Utc>>)> = sqlx::query(
        "SELECT created_at, finished_at FROM tasks WHERE schedule_id = $1 ORDER BY scheduled_for",
    )
    .bind(schedule.id)
    .fetch_all(&mut db)
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.get("created_at"), r.get("finished_at")))
    .collect();
    for pair in runs.windows(2) {
        let finished = pair[0].1.expect("an earlier run had finished");
        assert!(
            pair[1].0 >= finished - chrono::Duration::milliseconds(100),
            "a run was made at {} while the previous one ran until {finished}",
            pair[1].0
        );
    }
}

/// A schedule every second whose task outlasts three ticks.
struct SubmitAndSkip;

impl SubmitAndSkip {
    fn schedule() -> CreateSchedule {
        CreateSchedule {
            task: SubmitTask {
                script: Some("sleep 3".into()),
                ..SubmitTask::default()
            },
            ..every_second("slow", "skip", "skip", "")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_every_node_was_down_latest_fires_one_missed_tick_and_skip_none() {
    let env = TestEnv::new("schedules-catch-up").await;
    let mut node = env.node().await;
    let user = user_client(&node.url);
    let latest = user
        .schedule_create(&every_second("latest", "allow", "latest", "true"))
        .await
        .unwrap();
    let skip = user
        .schedule_create(&every_second("skip", "allow", "skip", "true"))
        .await
        .unwrap();
    fired_past(&node, latest.id, 2).await;
    fired_past(&node, skip.id, 2).await;
    node.kill();
    let down = Utc::now();
    // The outage itself: ten seconds with no node up.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let node = env.node().await;
    let up = Utc::now();
    for s in [&latest, &skip] {
        wait_for("ticks after the restart", Duration::from_secs(30), || {
            let user = user_client(&node.url);
            async move {
                let s = user.schedule_get(s.id).await.ok()?;
                (s.next_fire_at? > up + chrono::Duration::seconds(2)).then_some(())
            }
        })
        .await;
    }
    let caught_up = |ticks: &[(DateTime<Utc>, i64, DateTime<Utc>)]| {
        ticks
            .iter()
            .filter(|(tick, _, _)| *tick >= down && *tick <= up)
            .filter(|(tick, _, created)| (*created - *tick).num_milliseconds() > GRACE_MS)
            .count()
    };
    let latest_ticks = ticks_of(&env, latest.id).await;
    let skip_ticks = ticks_of(&env, skip.id).await;
    assert_eq!(
        caught_up(&latest_ticks),
        1,
        "latest fires one missed tick: {latest_ticks:?}"
    );
    assert_eq!(caught_up(&skip_ticks), 0, "skip fires none: {skip_ticks:?}");
    for s in [&latest, &skip] {
        let s = user_client(&node.url).schedule_get(s.id).await.unwrap();
        let missed: i64 = s
            .last_runs
            .iter()
            .filter(|r| r.outcome == "skipped_missed")
            .filter_map(|r| r.ticks)
            .sum();
        assert!(
            missed >= 6,
            "{}: {missed} ticks recorded missed: {:?}",
            s.name,
            s.last_runs
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_api_and_cli_create_show_change_pause_trigger_and_delete() {
    let env = TestEnv::new("schedules-api").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let created = user
        .schedule_create(&CreateSchedule {
            name: "nightly".into(),
            cron: "30 2 * * *".into(),
            timezone: Some("Europe/Berlin".into()),
            task: SubmitTask {
                command: Some(vec!["true".into()]),
                ..SubmitTask::default()
            },
            ..CreateSchedule::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (created.overlap.as_str(), created.catch_up.as_str()),
        ("skip", "latest")
    );
    let shown = user.schedule_get(created.id).await.unwrap();
    assert_eq!(shown.next_fires.len(), 10);
    assert!(shown.next_fires.windows(2).all(|w| w[0] < w[1]));
    let first = shown
        .next_fire_at
        .unwrap()
        .with_timezone(&chrono_tz::Europe::Berlin);
    assert_eq!(first.format("%H:%M").to_string(), "02:30", "{first}");

    // A change of the expression moves the next tick; pause hides it; resume brings it.
    let changed = user
        .schedule_update(
            created.id,
            &UpdateSchedule {
                cron: Some("0 */6 * * *".into()),
                ..UpdateSchedule::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(changed.cron, "0 */6 * * *");
    let paused = user.schedule_action(created.id, "pause").await.unwrap();
    assert!(paused.paused && paused.next_fire_at.is_none());
    let resumed = user.schedule_action(created.id, "resume").await.unwrap();
    assert!(!resumed.paused && resumed.next_fire_at.is_some());

    // A trigger makes a task now, found by its schedule.
    let triggered = user.schedule_action(created.id, "trigger").await.unwrap();
    let run = triggered
        .last_runs
        .first()
        .and_then(|r| r.task.clone())
        .expect("the triggered run");
    assert_eq!(run.schedule_id, Some(created.id));
    let listed = user
        .task_list(&TaskQuery {
            schedule_id: Some(created.id),
            ..TaskQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(
        listed.tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![run.id]
    );
    // Bulk actions take a schedule's tasks: a dry run counts, then the cancel acts.
    let by_schedule = |dry_run| BulkRequest {
        schedule_id: Some(created.id),
        dry_run,
        ..BulkRequest::default()
    };
    let counted = user.tasks_cancel(&by_schedule(true)).await.unwrap();
    assert_eq!((counted.matched, counted.acted), (1, 0));
    assert_eq!(
        user.task_get(run.id).await.unwrap().status.as_str(),
        "queued"
    );
    let cancelled = user.tasks_cancel(&by_schedule(false)).await.unwrap();
    assert_eq!(cancelled.acted, 1);
    assert_eq!(
        user.task_get(run.id).await.unwrap().status.as_str(),
        "cancelled"
    );

    // The CLI creates and lists.
    let out = baton_cli(
        &node.url,
        API_TOKEN,
        &[
            "schedule",
            "create",
            "--name",
            "from-cli",
            "--cron",
            "@hourly",
            "--overlap",
            "queue",
            "--",
            "echo",
            "hi",
        ],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = baton_cli(&node.url, API_TOKEN, &["schedule", "list"]).await;
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains("from-cli") && listing.contains("nightly"),
        "{listing}"
    );

    // A name is unique per owner.
    let again = user
        .schedule_create(&CreateSchedule {
            name: "nightly".into(),
            cron: "@daily".into(),
            task: shown.task.clone(),
            ..CreateSchedule::default()
        })
        .await
        .unwrap_err();
    assert_eq!(again.status().map(|s| s.as_u16()), Some(409), "{again}");

    // Deleting leaves its tasks.
    user.schedule_delete(created.id).await.unwrap();
    let gone = user.schedule_get(created.id).await.unwrap_err();
    assert_eq!(gone.status().map(|s| s.as_u16()), Some(404));
    assert!(user.task_get(run.id).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_schedules_are_refused_naming_the_field_and_nothing_is_written() {
    let env = TestEnv::new("schedules-bad-input").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let good = || CreateSchedule {
        name: "ok".into(),
        cron: "*/5 * * * *".into(),
        task: SubmitTask {
            command: Some(vec!["true".into()]),
            ..SubmitTask::default()
        },
        ..CreateSchedule::default()
    };
    let cases: Vec<(&str, CreateSchedule)> = vec![
        (
            "cron",
            CreateSchedule {
                cron: "61 * * * *".into(),
                ..good()
            },
        ),
        (
            "cron",
            CreateSchedule {
                cron: "every day".into(),
                ..good()
            },
        ),
        (
            "timezone",
            CreateSchedule {
                timezone: Some("Mars/Olympus".into()),
                ..good()
            },
        ),
        (
            "overlap",
            CreateSchedule {
                overlap: Some("merge".into()),
                ..good()
            },
        ),
        (
            "catch_up",
            CreateSchedule {
                catch_up: Some("sometimes".into()),
                ..good()
            },
        ),
        (
            "catch_up_window_s",
            CreateSchedule {
                catch_up_window_s: Some(0),
                ..good()
            },
        ),
        (
            "jitter_s",
            CreateSchedule {
                jitter_s: Some(-1),
                ..good()
            },
        ),
        (
            "name",
            CreateSchedule {
                name: "".into(),
                ..good()
            },
        ),
        (
            "end_at",
            CreateSchedule {
                start_at: Some(Utc::now() + chrono::Duration::days(2)),
                end_at: Some(Utc::now() + chrono::Duration::days(1)),
                ..good()
            },
        ),
        (
            "task.queue",
            CreateSchedule {
                task: SubmitTask {
                    queue: Some("No Spaces".into()),
                    ..good().task
                },
                ..good()
            },
        ),
        (
            "task.run_at",
            CreateSchedule {
                task: SubmitTask {
                    run_at: Some(Utc::now()),
                    ..good().task
                },
                ..good()
            },
        ),
        (
            "task.command",
            CreateSchedule {
                task: SubmitTask {
                    command: None,
                    ..good().task
                },
                ..good()
            },
        ),
    ];
    for (field, req) in cases {
        let e = user.schedule_create(&req).await.unwrap_err();
        let ClientError::Api(ApiError { status, body }) = &e else {
            panic!("{field}: {e}");
        };
        assert_eq!(status.as_u16(), 422, "{field}: {e}");
        assert!(
            body.error.message.starts_with(field),
            "{field}: {}",
            body.error.message
        );
    }
    // An unknown field, and a read-only token, are refused too.
    let raw = reqwest::Client::new()
        .post(format!("{}/v1/schedules", node.url))
        .bearer_auth(API_TOKEN)
        .json(&serde_json::json!({"name": "x", "cron": "@daily", "task": {"command": ["true"]}, "every": "day"}))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 422);
    let reader = user
        .token_create(&CreateToken {
            name: "reader".into(),
            scopes: vec![Scope::Read],
            ..CreateToken::default()
        })
        .await
        .unwrap();
    let as_reader = baton_client::Client::new(&node.url, Some(reader.token)).unwrap();
    let e = as_reader.schedule_create(&good()).await.unwrap_err();
    assert_eq!(e.status().map(|s| s.as_u16()), Some(403));
    let mut db = env.db().await;
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM schedules")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(n, 0, "nothing written");
}

/// Postgres cut off from the only node for a few seconds — as in a failover, every pass
/// fails, and one query hangs on a link that answers nothing. Before, the schedule
/// service then slept its whole `schedule_poll_ms` (30 s) and the ticks stopped that
/// long after Postgres was back; now it tries again after `schedule_retry_ms` (1 s), a
/// pass is bounded by twice `store_timeout_ms` (2 s), and the first tick after the cut
/// heals fires within their sum and a second (docs/schedules.md).
#[tokio::test(flavor = "multi_thread")]
async fn ticks_resume_within_the_retry_bound_after_postgres_comes_back() {
    let link =
        baton_localcluster::fault_proxy::FaultProxy::in_front_of(&support::admin_database_url())
            .await
            .unwrap();
    let mut through = reqwest::Url::parse(&support::admin_database_url()).unwrap();
    through.set_port(Some(link.port())).unwrap();
    let env = TestEnv::with_servers("sched-resume", through.as_str(), &support::redis_url()).await;
    let node = env.node().await;
    let schedule = user_client(&node.url)
        .schedule_create(&every_second("resume", "allow", "all", "true"))
        .await
        .unwrap();
    fired_past(&node, schedule.id, 2).await;

    link.set(baton_localcluster::fault_proxy::Link::Cut);
    // The outage lasts until the node has seen it (its readiness says Postgres is away):
    // by then its passes fail, and one may hang on the cut link.
    let http = reqwest::Client::new();
    wait_for(
        "the node to see Postgres away",
        Duration::from_secs(30),
        || async {
            let status = http
                .get(format!("{}/readyz", node.url))
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .ok()?
                .status();
            (status.as_u16() == 503).then_some(())
        },
    )
    .await;
    let healed = Utc::now();
    link.set(baton_localcluster::fault_proxy::Link::Open);

    let first_after: DateTime<Utc> = wait_for(
        "a tick to fire after Postgres came back",
        Duration::from_secs(45),
        || async {
            ticks_of(&env, schedule.id)
                .await
                .into_iter()
                .map(|(_, _, created)| created)
                .filter(|created| *created > healed)
                .min()
        },
    )
    .await;
    // schedule_retry_ms + 2 × store_timeout_ms + the tick's own second.
    let bound = chrono::Duration::milliseconds(1_000 + 2 * 2_000 + 1_000);
    assert!(
        first_after - healed <= bound,
        "the first tick after the outage fired {} ms after it ended (bound {} ms)",
        (first_after - healed).num_milliseconds(),
        bound.num_milliseconds()
    );
}

/// Overlap `cancel`: a tick fires while the previous run still runs, and the node dies
/// right after the fire commits. Before, the cancel of the previous run came after that
/// commit, so both runs went on; now it is in the fire's own transaction, and the
/// previous run is `cancelling` the moment the next exists.
#[tokio::test(flavor = "multi_thread")]
async fn overlap_cancel_is_in_the_fires_own_transaction() {
    let env = TestEnv::new("sched-cancel-durable").await;
    let mut node = env.node_with(&["--fault", "after-fire"]).await;
    let _runner = env.runner(&node.url, &[], 2).await;
    let user = user_client(&node.url);
    let schedule = user
        .schedule_create(&every_second("cancels", "cancel", "skip", "sleep 300"))
        .await
        .unwrap();
    // The first tick's run starts; the next tick cancels it, and the node aborts there.
    let status = node.exited().await.unwrap();
    assert!(
        !status.success(),
        "the node aborted at the fault: {status:?}"
    );
    let runs: Vec<(String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT status, scheduled_for FROM tasks WHERE schedule_id = $1 ORDER BY scheduled_for",
    )
    .bind(schedule.id)
    .fetch_all(&mut env.db().await)
    .await
    .unwrap();
    assert_eq!(runs.len(), 2, "two ticks fired: {runs:?}");
    assert!(
        matches!(runs[0].0.as_str(), "cancelling" | "cancelled"),
        "the previous run is cancelled with the fire that made the next: {runs:?}"
    );
}
