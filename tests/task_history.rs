//! What operators read of tasks beyond their state (issue 29), against real nodes, a
//! runner agent, Redis and Postgres: every run of a task as a row of its history; when
//! each line of its output came and on which stream; a task found by the short id the
//! tables show; a count and either order of a listing, within dates; and each queue's
//! minutes, with a queue listed while it has them.

use baton_localcluster::testing as support;

use baton_client::{RetryPolicy, SubmitTask};
use serde_json::Value;
use std::time::Duration;
use support::*;
use uuid::Uuid;

/// `GET path` with the tests' admin token (or `token`): status and JSON body.
async fn get(base: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("{base}{path}"))
        .bearer_auth(token.unwrap_or(API_TOKEN))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn script(queue: &str, label: &str, script: &str) -> SubmitTask {
    SubmitTask {
        queue: Some(queue.into()),
        labels: vec![label.into()],
        script: Some(script.into()),
        ..SubmitTask::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_run_of_a_task_is_a_row_of_its_history() {
    let env = TestEnv::new("history-attempts").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let _runner = env.runner(&node.url, &["hist"], 2).await;
    let (task, _) = user
        .submit(&SubmitTask {
            max_attempts: Some(3),
            retry: Some(RetryPolicy {
                backoff_base_s: Some(0.1),
                jitter: Some(0.0),
                ..RetryPolicy::default()
            }),
            ..script("default", "hist", "echo trying; exit 3")
        })
        .await
        .unwrap();
    let done = env.wait_terminal(&user, task.id).await;
    assert_eq!(done.status.as_str(), "failed");
    assert_eq!(done.attempt, 3);

    let (status, history) = get(&node.url, &format!("/v1/tasks/{}/attempts", task.id), None).await;
    assert_eq!(status, 200, "{history}");
    assert_eq!(history["task_id"], task.id.to_string());
    let attempts = history["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "one row per run: {history}");
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a["attempt"], i + 1);
        assert_eq!(a["exit_code"], 3, "each run's own exit code: {a}");
        assert_eq!(a["ended_as"], "failed");
        assert_eq!(a["retried"], i < 2, "the first two were retried: {a}");
        assert!(a["runner_name"].is_string(), "its runner by name: {a}");
        assert!(a["duration_ms"].as_i64().unwrap() >= 0);
        let (start, end) = (
            a["started_at"].as_str().unwrap(),
            a["ended_at"].as_str().unwrap(),
        );
        assert!(start <= end, "{a}");
    }
    assert!(
        attempts[0]["ended_at"].as_str() <= attempts[1]["started_at"].as_str(),
        "the retry started after the first run ended"
    );

    // A running task's current run is the last row, with no end yet.
    let (running, _) = user
        .submit(&script("default", "hist", "sleep 30"))
        .await
        .unwrap();
    let url = format!("/v1/tasks/{}/attempts", running.id);
    let live = wait_for("the run to start", Duration::from_secs(30), || async {
        let (_, body) = get(&node.url, &url, None).await;
        (body["attempts"].as_array().map(Vec::len) == Some(1)).then_some(body)
    })
    .await;
    let row = &live["attempts"][0];
    assert_eq!(row["attempt"], 1);
    assert!(
        row["ended_at"].is_null() && row["ended_as"].is_null(),
        "{row}"
    );
    assert!(row["started_at"].is_string(), "{row}");
    user.task_cancel(running.id).await.unwrap();
    env.wait_terminal(&user, running.id).await;
    let (_, ended) = get(&node.url, &url, None).await;
    assert_eq!(ended["attempts"][0]["ended_as"], "cancelled", "{ended}");
}

#[tokio::test(flavor = "multi_thread")]
async fn each_part_of_the_output_is_marked_with_its_time_and_stream() {
    let env = TestEnv::new("history-marks").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let _runner = env.runner(&node.url, &["marks"], 1).await;
    let (task, _) = user
        .submit(&script(
            "default",
            "marks",
            "echo out; sleep 0.3; echo err >&2; sleep 0.3; echo late",
        ))
        .await
        .unwrap();
    let done = env.wait_terminal(&user, task.id).await;
    assert_eq!(done.status.as_str(), "succeeded");
    assert_eq!(read_log(&user, task.id).await, b"out\nerr\nlate\n");

    let (status, body) = get(
        &node.url,
        &format!("/v1/tasks/{}/logs/marks", task.id),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["attempt"], 1);
    let marks: Vec<(i64, String, chrono::DateTime<chrono::Utc>)> = body["marks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["offset"].as_i64().unwrap(),
                m["stream"].as_str().unwrap().to_string(),
                m["at"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let at = |offset: i64| {
        marks
            .iter()
            .rev()
            .find(|m| m.0 <= offset)
            .unwrap_or_else(|| panic!("no mark at or before {offset}: {body}"))
    };
    let (out, err, late) = (at(0), at(4), at(8));
    assert_eq!((out.0, out.1.as_str()), (0, "stdout"), "{body}");
    assert_eq!((err.0, err.1.as_str()), (4, "stderr"), "{body}");
    assert_eq!((late.0, late.1.as_str()), (8, "stdout"), "{body}");
    assert!(
        err.2 - out.2 >= chrono::Duration::milliseconds(250)
            && late.2 - err.2 >= chrono::Duration::milliseconds(250),
        "each line carries its own time: {body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_is_found_by_its_short_id_and_an_ambiguous_one_names_the_tasks() {
    let env = TestEnv::new("history-short-ids").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let parked = |queue: &str| SubmitTask {
        queue: Some(queue.into()),
        labels: vec!["nobody-has-this".into()],
        command: Some(vec!["true".into()]),
        ..SubmitTask::default()
    };
    let (a, _) = user.submit(&parked("short")).await.unwrap();
    let short = a.id.to_string()[24..].to_string();
    for path in [
        format!("/v1/tasks/{short}"),
        format!("/v1/tasks/{}", short.to_uppercase()),
    ] {
        let (status, body) = get(&node.url, &path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["id"], a.id.to_string(), "the whole id comes back");
    }
    let (status, body) = get(&node.url, &format!("/v1/tasks/{short}/attempts"), None).await;
    assert_eq!(
        (status, body["task_id"].clone()),
        (200, Value::from(a.id.to_string()))
    );

    let (status, body) = get(&node.url, "/v1/tasks/000000000000", None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    for bad in ["not-a-uuid", "0123456789abc", "0123456789az"] {
        let (status, body) = get(&node.url, &format!("/v1/tasks/{bad}"), None).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("short id"),
            "the message says what an id may be: {body}"
        );
    }

    // Two tasks whose ids end alike (a collision of 48 random bits, made here by hand).
    let (b, _) = user.submit(&parked("short")).await.unwrap();
    let twin = Uuid::parse_str(&format!("{}{short}", &b.id.to_string()[..24])).unwrap();
    sqlx::query("UPDATE tasks SET id = $1 WHERE id = $2")
        .bind(twin)
        .bind(b.id)
        .execute(&mut env.db().await)
        .await
        .unwrap();
    let (status, body) = get(&node.url, &format!("/v1/tasks/{short}"), None).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "ambiguous_id");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&a.id.to_string()) && message.contains(&twin.to_string()),
        "{message}"
    );
    // The whole id still names each.
    let (status, _) = get(&node.url, &format!("/v1/tasks/{twin}"), None).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listing_is_counted_and_read_either_way_within_dates() {
    let env = TestEnv::new("history-listing").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let queue = "listed";
    let mut ids = Vec::new();
    for _ in 0..5 {
        let (t, _) = user
            .submit(&SubmitTask {
                queue: Some(queue.into()),
                labels: vec!["nobody-has-this".into()],
                command: Some(vec!["true".into()]),
                ..SubmitTask::default()
            })
            .await
            .unwrap();
        ids.push(t.id.to_string());
    }
    let listed = |body: &Value| -> Vec<String> {
        body["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (status, body) = get(&node.url, &format!("/v1/tasks/count?queue={queue}"), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["count"].as_i64(), body["capped"].as_bool()),
        (Some(5), Some(false))
    );

    let (_, oldest) = get(
        &node.url,
        &format!("/v1/tasks?queue={queue}&order=oldest&limit=3"),
        None,
    )
    .await;
    assert_eq!(listed(&oldest), ids[..3].to_vec(), "oldest first");
    let cursor = oldest["next_cursor"].as_str().unwrap();
    let (_, rest) = get(
        &node.url,
        &format!("/v1/tasks?queue={queue}&order=oldest&cursor={cursor}"),
        None,
    )
    .await;
    assert_eq!(
        listed(&rest),
        ids[3..].to_vec(),
        "the cursor pages on in the same order"
    );
    let (_, newest) = get(&node.url, &format!("/v1/tasks?queue={queue}"), None).await;
    let mut reversed = ids.clone();
    reversed.reverse();
    assert_eq!(listed(&newest), reversed, "newest first by default");

    // Dates: everything was created before now and after an hour ago; nothing after now.
    let now = chrono::Utc::now() + chrono::Duration::seconds(5);
    let hour_ago = now - chrono::Duration::hours(1);
    let enc = |t: chrono::DateTime<chrono::Utc>| {
        t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            .replace('+', "%2B")
    };
    let (_, within) = get(
        &node.url,
        &format!(
            "/v1/tasks/count?queue={queue}&created_after={}&created_before={}",
            enc(hour_ago),
            enc(now)
        ),
        None,
    )
    .await;
    assert_eq!(within["count"], 5, "{within}");
    let (_, later) = get(
        &node.url,
        &format!("/v1/tasks?queue={queue}&created_after={}", enc(now)),
        None,
    )
    .await;
    assert!(listed(&later).is_empty(), "{later}");

    for (path, code) in [
        (format!("/v1/tasks/count?queue={queue}&limit=3"), 400),
        (format!("/v1/tasks?queue={queue}&order=sideways"), 400),
        (
            format!(
                "/v1/tasks?created_after={}&created_before={}",
                enc(now),
                enc(hour_ago)
            ),
            422,
        ),
    ] {
        let (status, body) = get(&node.url, &path, None).await;
        assert_eq!(status, code, "{path}: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_queue_has_its_minutes_and_stays_listed_after_it_drains() {
    let env = TestEnv::new("history-trends").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let _runner = env.runner(&node.url, &["trend"], 4).await;
    let queue = "trended";
    let mut ids = Vec::new();
    for i in 0..6 {
        let exit = if i < 4 { "true" } else { "false" };
        let (t, _) = user.submit(&script(queue, "trend", exit)).await.unwrap();
        ids.push(t.id);
    }
    for id in ids {
        env.wait_terminal(&user, id).await;
    }
    // The node adds its counts every few seconds.
    let totals = wait_for("the queue's counts", Duration::from_secs(30), || async {
        let (status, body) = get(&node.url, "/v1/queues/trends?minutes=5", None).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["step_s"], 60);
        let q = body["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["queue"] == queue)?
            .clone();
        let points = q["points"].as_array().unwrap();
        assert_eq!(points.len(), 5, "a point per minute: {q}");
        let sum = |field: &str| {
            points
                .iter()
                .map(|p| p[field].as_u64().unwrap())
                .sum::<u64>()
        };
        let totals = (sum("submitted"), sum("succeeded"), sum("failed"));
        (totals == (6, 4, 2)).then_some(totals)
    })
    .await;
    assert_eq!(totals, (6, 4, 2));

    let (_, queues) = get(&node.url, "/v1/queues", None).await;
    let listed = queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == queue)
        .unwrap_or_else(|| panic!("a drained queue with history is listed: {queues}"))
        .clone();
    assert_eq!(
        (listed["depth"].as_i64(), listed["running"].as_i64()),
        (Some(0), Some(0))
    );

    for bad in ["minutes=0", "minutes=500", "hours=1"] {
        let (status, body) = get(&node.url, &format!("/v1/queues/trends?{bad}"), None).await;
        assert!((400..500).contains(&status), "{bad}: {status} {body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_id_names_only_the_callers_own_tasks_for_a_token_that_sees_only_its_own() {
    let env = TestEnv::new("history-short-id-tenants").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let submitter = |name: &'static str| {
        let admin = admin.clone();
        async move {
            admin
                .token_create(&baton_client::CreateToken {
                    name: name.into(),
                    scopes: vec![baton_client::Scope::Submit],
                    ..Default::default()
                })
                .await
                .unwrap()
                .token
        }
    };
    let (alice, bob) = (submitter("alice").await, submitter("bob").await);
    let parked = SubmitTask {
        labels: vec!["nobody-has-this".into()],
        command: Some(vec!["true".into()]),
        ..SubmitTask::default()
    };
    let as_token = |token: &str| baton_client::Client::new(&node.url, Some(token.into())).unwrap();
    let (mine, _) = as_token(&alice).submit(&parked).await.unwrap();
    let (theirs, _) = as_token(&bob).submit(&parked).await.unwrap();
    let short = mine.id.to_string()[24..].to_string();
    // Bob's task made to end as Alice's does.
    let twin = Uuid::parse_str(&format!("{}{short}", &theirs.id.to_string()[..24])).unwrap();
    sqlx::query("UPDATE tasks SET id = $1 WHERE id = $2")
        .bind(twin)
        .bind(theirs.id)
        .execute(&mut env.db().await)
        .await
        .unwrap();

    for path in [
        format!("/v1/tasks/{short}"),
        format!("/v1/tasks/{short}/attempts"),
    ] {
        let (status, body) = get(&node.url, &path, Some(&alice)).await;
        assert_eq!(
            status, 200,
            "{path}: Alice's own, as if Bob's were not there: {body}"
        );
        assert!(
            !body.to_string().contains(&twin.to_string()),
            "nothing of Bob's task: {body}"
        );
    }
    let (status, body) = get(&node.url, &format!("/v1/tasks/{short}"), Some(&bob)).await;
    assert_eq!(
        (status, body["id"].clone()),
        (200, Value::from(twin.to_string()))
    );
    let (status, body) = get(&node.url, &format!("/v1/tasks/{short}"), None).await;
    assert_eq!(status, 409, "the admin sees both: {body}");
    let (status, body) = get(
        &node.url,
        &format!("/v1/tasks/{}", &Uuid::now_v7().to_string()[24..]),
        Some(&alice),
    )
    .await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_that_ended_without_a_run_shows_no_run_of_its_own() {
    let env = TestEnv::new("history-no-run").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let parked = SubmitTask {
        labels: vec!["nobody-has-this".into()],
        command: Some(vec!["true".into()]),
        ..SubmitTask::default()
    };
    // Rows as a run retried before the history was kept leaves them: attempt 1's start
    // and exit code, then an end that was no run's.
    let mut db = env.db().await;
    let mut cases = Vec::new();
    for (status, error, runs) in [
        ("cancelled", baton_store::CANCELLED_BEFORE_IT_RAN, 0),
        ("expired", "no runner took it", 0),
        ("failed", "exit 3", 1),
    ] {
        let (task, _) = user.submit(&parked).await.unwrap();
        cases.push(((task.id, status, error), runs));
    }
    for ((id, status, error), runs) in cases {
        sqlx::query(
            "UPDATE tasks SET status = $2, error = $3, attempt = 1, exit_code = 3,
                              started_at = now() - interval '1 minute', finished_at = now()
             WHERE id = $1",
        )
        .bind(id)
        .bind(status)
        .bind(error)
        .execute(&mut db)
        .await
        .unwrap();
        let (code, body) = get(&node.url, &format!("/v1/tasks/{id}/attempts"), None).await;
        assert_eq!(code, 200, "{body}");
        let attempts = body["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), runs, "{status}: {body}");
        if runs == 1 {
            assert_eq!(attempts[0]["ended_as"], "failed");
            assert_eq!(attempts[0]["exit_code"], 3);
        }
    }
}
