//! The event stream (`GET /v1/events`, docs/events.md) on real nodes, Redis and Postgres:
//! a subscriber that drops and resumes on another node with `Last-Event-ID` gets every
//! task's events exactly once, in the order of its transitions; a position the history
//! no longer holds gets `resync`; a `submit` token sees its own tasks only; a node's
//! death is told with the node that adopted its claims.

use baton_localcluster::testing as support;

use baton_client::{Client, CreateToken, EventFilter, EventFrame, Scope, SubmitTask};
use futures::StreamExt;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;
use support::procs::baton_cli;
use support::*;
use tokio::sync::mpsc;
use uuid::Uuid;

fn true_task() -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        ..SubmitTask::default()
    }
}

/// Reads `client`'s events into a channel until the receiver is dropped (the frames
/// that only say a place to resume from are left out).
async fn subscribe(
    client: &Client,
    filter: EventFilter,
    last_id: Option<String>,
) -> mpsc::UnboundedReceiver<EventFrame> {
    let frames = client
        .events(&filter, last_id.as_deref())
        .await
        .expect("subscribe");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut frames = std::pin::pin!(frames);
        while let Some(Ok(frame)) = frames.next().await {
            if frame.is_place_only() {
                continue;
            }
            if tx.send(frame).is_err() {
                return;
            }
        }
    });
    rx
}

/// Takes frames from `rx` until `done` says so, within a deadline.
async fn receive_until(
    rx: &mut mpsc::UnboundedReceiver<EventFrame>,
    got: &mut Vec<EventFrame>,
    what: &str,
    done: impl Fn(&[EventFrame]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done(got) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(frame)) => got.push(frame),
            Ok(None) => panic!("the stream ended before {what}; got {got:#?}"),
            Err(_) => panic!("no {what} within the deadline; got {got:#?}"),
        }
    }
}

fn data(frame: &EventFrame) -> Value {
    serde_json::from_str(&frame.data).expect("event data is JSON")
}

/// Each task's statuses, in the order received.
fn statuses(frames: &[EventFrame]) -> BTreeMap<String, Vec<String>> {
    let mut by_task: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in frames.iter().filter(|f| f.event == "task") {
        let d = data(f);
        by_task
            .entry(d["task_id"].as_str().unwrap().to_string())
            .or_default()
            .push(d["status"].as_str().unwrap().to_string());
    }
    by_task
}

fn succeeded(frames: &[EventFrame], tasks: &[Uuid]) -> bool {
    let by_task = statuses(frames);
    tasks.iter().all(|id| {
        by_task
            .get(&id.to_string())
            .is_some_and(|s| s.iter().any(|s| s == "succeeded"))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_resumes_on_another_node_with_every_event_once_and_in_order() {
    let env = TestEnv::new("events-resume").await;
    let node_a = env.node().await;
    let node_b = env.node().await;
    let _runner = env.runner(&node_b.url, &[], 4).await;
    let (a, b) = (user_client(&node_a.url), user_client(&node_b.url));
    let tasks_only = EventFilter {
        kind: Some("task".into()),
        ..EventFilter::default()
    };

    let mut rx = subscribe(&a, tasks_only.clone(), None).await;
    let mut first_half = Vec::new();
    for i in 0..10 {
        let client = if i % 2 == 0 { &a } else { &b };
        first_half.push(client.submit(&true_task()).await.unwrap().0.id);
    }
    let mut got = Vec::new();
    receive_until(&mut rx, &mut got, "the first tasks' ends", |g| {
        succeeded(g, &first_half)
    })
    .await;
    drop(rx);
    let last_id = got
        .iter()
        .rev()
        .find_map(|f| f.id.clone())
        .expect("events carry ids");

    // While nobody listens, more happens, submitted through either node.
    let mut second_half = Vec::new();
    for i in 0..10 {
        let client = if i % 2 == 0 { &b } else { &a };
        second_half.push(client.submit(&true_task()).await.unwrap().0.id);
    }
    for id in &second_half {
        env.wait_terminal(&b, *id).await;
    }

    let mut rx = subscribe(&b, tasks_only, Some(last_id)).await;
    receive_until(&mut rx, &mut got, "the later tasks' ends", |g| {
        succeeded(g, &second_half)
    })
    .await;

    // No event twice, and the ids only go forward.
    let ids: Vec<&str> = got.iter().filter_map(|f| f.id.as_deref()).collect();
    assert_eq!(ids.len(), got.len(), "every task event has an id");
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an event came twice: {ids:?}");
    let order = |id: &str| {
        let (entry, index) = id.split_once(':').unwrap();
        let (ms, seq) = entry.split_once('-').unwrap();
        (
            ms.parse::<u64>().unwrap(),
            seq.parse::<u64>().unwrap(),
            index.parse::<u64>().unwrap(),
        )
    };
    assert!(
        ids.windows(2).all(|w| order(w[0]) < order(w[1])),
        "ids out of order: {ids:?}"
    );
    // Each task: queued, running, succeeded — exactly, in that order.
    let by_task = statuses(&got);
    for id in first_half.iter().chain(&second_half) {
        assert_eq!(
            by_task.get(&id.to_string()).map(Vec::as_slice),
            Some(&["queued", "running", "succeeded"].map(String::from)[..]),
            "task {id}"
        );
    }
    // Each event names the node that made the change.
    let nodes: HashSet<String> = got
        .iter()
        .map(|f| data(f)["node_id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        nodes.is_subset(&HashSet::from([
            node_a.node_id.clone(),
            node_b.node_id.clone()
        ])),
        "{nodes:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_position_the_history_no_longer_holds_gets_resync() {
    let env = TestEnv::new("events-resync").await;
    let node = env.node_with(&["--event-retention-s", "1"]).await;
    let client = user_client(&node.url);
    let mut rx = subscribe(&client, EventFilter::default(), None).await;
    let (task, _) = client.submit(&true_task()).await.unwrap();
    let mut got = Vec::new();
    receive_until(&mut rx, &mut got, "the queued event", |g| {
        g.iter().any(|f| data(f)["task_id"] == task.id.to_string())
    })
    .await;
    drop(rx);
    let old_id = got.last().unwrap().id.clone().unwrap();

    // Resuming at once: the history holds it, so no resync (and nothing was missed).
    let mut rx = subscribe(&client, EventFilter::default(), Some(old_id.clone())).await;
    client.submit(&true_task()).await.unwrap();
    let mut fresh = Vec::new();
    receive_until(&mut rx, &mut fresh, "the next event", |g| !g.is_empty()).await;
    assert_eq!(fresh[0].event, "task", "{fresh:?}");
    drop(rx);

    // Once the retention has passed and later appends trimmed it away: resync.
    let resync = wait_for(
        "a resync for a trimmed position",
        Duration::from_secs(30),
        || {
            let (client, old_id) = (client.clone(), old_id.clone());
            async move {
                client.submit(&true_task()).await.unwrap();
                let mut rx = subscribe(&client, EventFilter::default(), Some(old_id)).await;
                let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                    .await
                    .ok()??;
                (first.event == "resync").then_some(first)
            }
        },
    )
    .await;
    assert!(resync.id.is_none(), "a resync is no place in the history");
    assert!(
        data(&resync)["reason"].as_str().unwrap().contains("1 s"),
        "{resync:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_submit_token_sees_the_events_of_its_own_tasks_only() {
    let env = TestEnv::new("events-scope").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let token = admin
        .token_create(&CreateToken {
            name: "submitter".into(),
            scopes: vec![Scope::Submit],
            ..Default::default()
        })
        .await
        .unwrap()
        .token;
    let submitter = Client::new(&node.url, Some(token)).unwrap();
    let mut mine = subscribe(&submitter, EventFilter::default(), None).await;
    let mut everything = subscribe(&admin, EventFilter::default(), None).await;

    let (theirs, _) = admin.submit(&true_task()).await.unwrap();
    let _runner = env.runner(&node.url, &[], 1).await;
    let (own, _) = submitter.submit(&true_task()).await.unwrap();

    let mut seen_by_admin = Vec::new();
    receive_until(
        &mut everything,
        &mut seen_by_admin,
        "both tasks' ends",
        |g| succeeded(g, &[theirs.id, own.id]),
    )
    .await;
    assert!(
        seen_by_admin
            .iter()
            .any(|f| f.event == "runner" && data(f)["event"] == "joined"),
        "a read token sees the runner join: {seen_by_admin:#?}"
    );
    let mut seen = Vec::new();
    receive_until(&mut mine, &mut seen, "its own task's end", |g| {
        succeeded(g, &[own.id])
    })
    .await;
    // Everything the admin saw up to its own task's end has been delivered to the
    // submitter too, if it was to be: nothing else may be among what it got.
    assert!(
        seen.iter()
            .all(|f| f.event == "task" && data(f)["task_id"] == own.id.to_string()),
        "a submit token saw more than its own task: {seen:#?}"
    );

    // A bad filter is a clear 4xx, not a stream.
    let refused = admin
        .events(
            &EventFilter {
                kind: Some("tasks".into()),
                ..EventFilter::default()
            },
            None,
        )
        .await
        .err()
        .expect("an unknown kind is refused");
    assert_eq!(refused.status().map(|s| s.as_u16()), Some(422), "{refused}");
    let bad_id = admin
        .events(&EventFilter::default(), Some("not-an-id"))
        .await
        .err()
        .expect("a malformed Last-Event-ID is refused");
    assert_eq!(bad_id.status().map(|s| s.as_u16()), Some(422), "{bad_id}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_killed_with_claims_is_told_lost_with_its_adopter() {
    let env = TestEnv::new("events-node-lost").await;
    let mut doomed = env.node_with(&FAST_HA).await;
    let survivor = env.node_with(&FAST_HA).await;
    let _runner = env.runner(&doomed.url, &[], 1).await;
    let watcher = user_client(&survivor.url);
    let mut rx = subscribe(
        &watcher,
        EventFilter {
            kind: Some("node".into()),
            ..EventFilter::default()
        },
        None,
    )
    .await;
    let (task, _) = watcher
        .submit(&SubmitTask {
            command: Some(vec!["sleep".into(), "30".into()]),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    wait_for("the task to run", Duration::from_secs(30), || {
        let watcher = watcher.clone();
        async move {
            let t = watcher.task_get(task.id).await.ok()?;
            (t.status.as_str() == "running").then_some(())
        }
    })
    .await;
    doomed.kill();
    let mut got = Vec::new();
    receive_until(&mut rx, &mut got, "the node's loss", |g| {
        g.iter().any(|f| data(f)["event"] == "lost")
    })
    .await;
    let lost = data(got.iter().find(|f| data(f)["event"] == "lost").unwrap());
    assert_eq!(lost["node_id"], doomed.node_id.as_str());
    assert_eq!(lost["adopted_by"], survivor.node_id.as_str());
    assert!(lost["claims"].as_u64().unwrap() >= 1, "{lost}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_watches_events_and_waits_on_them() {
    let env = TestEnv::new("events-cli").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 1).await;

    let mut watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["task", "watch", "--kind", "task", "--output", "json"])
        .env("BATON_SERVER", &node.url)
        .env("BATON_TOKEN", API_TOKEN)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(watch.stdout.take().unwrap()));

    // `submit --wait` prints the output and exits with the task's own code; the retry
    // between its attempts is learnt from the events.
    let waited = baton_cli(
        &node.url,
        API_TOKEN,
        &[
            "task",
            "submit",
            "--wait",
            "--max-attempts",
            "2",
            "--script",
            "echo attempt; exit 3",
        ],
    )
    .await;
    assert_eq!(waited.status.code(), Some(3), "{waited:?}");
    assert_eq!(
        String::from_utf8_lossy(&waited.stdout),
        "attempt\nattempt\n",
        "both attempts' output: {waited:?}"
    );

    // The watcher printed that task's life, one JSON event per line.
    let mut statuses = Vec::new();
    while !statuses.iter().any(|s| s == "failed") {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("an event line in time")
            .unwrap()
            .expect("watch still runs");
        let event: Value = serde_json::from_str(&line).unwrap();
        statuses.push(event["status"].as_str().unwrap().to_string());
    }
    assert_eq!(
        statuses,
        [
            "queued",
            "running",
            "scheduled",
            "queued",
            "running",
            "failed"
        ],
        "a failed attempt retried once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_says_its_place_first_so_nothing_after_its_answer_is_missed() {
    let env = TestEnv::new("events-place").await;
    let node = env.node().await;
    let client = user_client(&node.url);
    // Once the answer has come, the stream's place is taken: the first frame says it,
    // before any event, and resuming from it gives everything that came after.
    let frames = client.events(&EventFilter::default(), None).await.unwrap();
    let (task, _) = client.submit(&true_task()).await.unwrap();
    let mut frames = Box::pin(frames);
    let place = frames.next().await.unwrap().unwrap();
    assert!(place.is_place_only(), "{place:?}");
    let queued = frames.next().await.unwrap().unwrap();
    assert_eq!(data(&queued)["task_id"], task.id.to_string());
    drop(frames);

    let mut rx = subscribe(&client, EventFilter::default(), place.id.clone()).await;
    let mut again = Vec::new();
    receive_until(&mut rx, &mut again, "the queued event again", |g| {
        !g.is_empty()
    })
    .await;
    assert_eq!(
        again[0].id, queued.id,
        "resumed from the place, the same event first"
    );
}

/// The event stream as a Redis failover leaves it: only the entries up to `kept` (the
/// replica had those), and its last id back there too.
async fn lose_entries_after(env: &TestEnv, kept: &str) {
    let key = baton_coord::Keys::new(&env.redis_prefix).events();
    let mut redis = env.redis().await;
    let held: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg(kept)
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut rebuild = redis::pipe();
    rebuild.atomic().del(&key).ignore();
    for entry in held.ids {
        let mut add = redis::cmd("XADD");
        add.arg(&key).arg(&entry.id);
        for (field, value) in entry.map {
            let value: Vec<u8> = redis::from_redis_value(value).unwrap();
            add.arg(field).arg(value);
        }
        rebuild.add_command(add).ignore();
    }
    let _: () = rebuild.query_async(&mut redis).await.unwrap();
}

/// A subscriber saw events a Redis failover then lost with the old master, and more were
/// appended on the old master after the last it saw; the new master appends again.
/// Resuming from the last id it saw: before, the new entries came after that id, so the
/// history looked whole and the lost events were skipped without a word; now a position
/// the history does not hold itself gets `resync`.
#[tokio::test(flavor = "multi_thread")]
async fn a_position_a_redis_failover_lost_gets_resync() {
    let env = TestEnv::new("events-failover").await;
    let node = env.node().await;
    let client = user_client(&node.url);
    let mut rx = subscribe(&client, EventFilter::default(), None).await;
    let mut submitted = Vec::new();
    for _ in 0..3 {
        submitted.push(client.submit(&true_task()).await.unwrap().0.id);
    }
    let mut got = Vec::new();
    receive_until(&mut rx, &mut got, "three queued events", |g| {
        submitted
            .iter()
            .all(|id| g.iter().any(|f| data(f)["task_id"] == id.to_string()))
    })
    .await;
    drop(rx);
    let ids: Vec<String> = got.iter().filter_map(|f| f.id.clone()).collect();
    let entry = |id: &str| id.split(':').next().unwrap().to_string();
    let (replicated, seen) = (entry(&ids[0]), ids.last().unwrap().clone());
    assert_ne!(
        replicated,
        entry(&seen),
        "the events are in separate entries"
    );

    lose_entries_after(&env, &replicated).await;
    client.submit(&true_task()).await.unwrap();
    let mut rx = subscribe(&client, EventFilter::default(), Some(seen)).await;
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a first frame")
        .expect("the stream goes on");
    assert_eq!(first.event, "resync", "{first:?}");
}

/// The attack from the security review: with a long history, open a stream that resumes
/// from its oldest entry with a filter that matches nothing, and hang up right after the
/// headers — 500 times. Before, each dropped stream went on reading the whole history
/// (it noticed its client gone only when it had something to send), and Redis answered
/// `XRANGE` for many seconds after the last one closed. Now a catch-up ends with its
/// client, and waits its turn behind a cap per node and per token: within a second of
/// the last request no reader is left.
#[tokio::test(flavor = "multi_thread")]
async fn streams_dropped_while_they_catch_up_leave_no_reader_behind() {
    let env = TestEnv::new("events-dropped-catch-up").await;
    let node = env.node().await;
    let key = baton_coord::Keys::new(&env.redis_prefix).events();
    let mut redis = env.redis().await;
    for _ in 0..20 {
        let mut append = redis::pipe();
        for _ in 0..1000 {
            append
                .cmd("XADD")
                .arg(&key)
                .arg("*")
                .arg("e")
                .arg("[]")
                .ignore();
        }
        let _: () = append.query_async(&mut redis).await.unwrap();
    }
    let oldest: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .arg("COUNT")
        .arg(1)
        .query_async(&mut redis)
        .await
        .unwrap();
    let oldest = oldest.ids[0].id.clone();

    let reads = r#"baton_redis_command_duration_seconds_count{op="xrange"}"#;
    let reads_before = scraped(&node.url, reads).await;
    let http = reqwest::Client::new();
    // 25 at a time, as a client in a hurry would.
    let statuses: Vec<u16> = futures::stream::iter(0..500)
        .map(|_| {
            let request = http
                .get(format!("{}/v1/events?task={}", node.url, Uuid::new_v4()))
                .bearer_auth(API_TOKEN)
                .header("last-event-id", &oldest);
            async move {
                let response = request.send().await.unwrap();
                // Hung up with the body unread: the connection closes.
                response.status().as_u16()
            }
        })
        .buffer_unordered(25)
        .collect()
        .await;
    let mut answered = BTreeMap::<u16, usize>::new();
    for status in statuses {
        *answered.entry(status).or_default() += 1;
    }
    assert!(answered.contains_key(&200), "{answered:?}");
    assert!(
        answered.keys().all(|s| [200, 429].contains(s)),
        "{answered:?}"
    );
    // Every read of the history a subscription makes is inside its turn, which the gauge
    // counts: at 0, nothing reads any more.
    let readers = "baton_event_catch_ups";
    wait_for(
        "no catch-up left reading",
        Duration::from_secs(1),
        || async { (scraped(&node.url, readers).await == 0.0).then_some(()) },
    )
    .await;
    let reads_after = scraped(&node.url, reads).await;
    // Each read the whole history (40 pages) before; now a few pages at most.
    assert!(
        reads_after - reads_before < 5.0 * 500.0,
        "{} history reads for 500 streams hung up at once",
        reads_after - reads_before
    );
}
