//! Flow control (docs/flow-control.md) against real nodes, runners, Redis and Postgres:
//! a concurrency group never runs more than its limit at once — as the runners' own
//! records of their runs show — even through a Redis data loss; a paused queue hands out
//! nothing, and its tasks neither run nor expire until it is resumed; a queue's defaults
//! fill what its tasks leave out, and nothing a task gives.

use baton_core::LeaseId;
use baton_localcluster::testing as support;

use baton_client::{Client, CreateToken, QueueDefaults, Scope, SubmitTask, Task};
use baton_core::TaskStatus;
use baton_store::{NewTask, Store, StoreOptions};
use chrono::{Duration as Span, Utc};
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use support::procs::baton_cli;
use support::services::RedisProc;
use support::*;
use uuid::Uuid;

/// A task of group `key` (limit 2) that runs `seconds` and records its start and end, in
/// nanoseconds, in `record`: the runner's own account of when it ran.
fn grouped(record: &Path, key: &str, seconds: f64) -> SubmitTask {
    let file = record.display();
    SubmitTask {
        script: Some(format!(
            "echo \"start $(date +%s%N) $BATON_TASK_ID\" >> {file}; sleep {seconds}; \
             echo \"end $(date +%s%N) $BATON_TASK_ID\" >> {file}"
        )),
        concurrency_key: Some(key.into()),
        concurrency_limit: Some(2),
        ..Default::default()
    }
}

/// The most runs the record shows at once, and how many runs it holds. An end and a
/// start at the same instant count the end first.
fn most_at_once(record: &Path) -> (usize, usize) {
    let mut events: Vec<(u128, bool)> = std::fs::read_to_string(record)
        .unwrap()
        .lines()
        .map(|line| {
            let mut parts = line.split(' ');
            let kind = parts.next().unwrap();
            let at: u128 = parts.next().unwrap().parse().unwrap();
            (at, kind == "start")
        })
        .collect();
    events.sort();
    let (mut now, mut most, mut runs) = (0usize, 0usize, 0usize);
    for (_, start) in events {
        if start {
            now += 1;
            runs += 1;
            most = most.max(now);
        } else {
            now -= 1;
        }
    }
    (most, runs)
}

fn starts(record: &Path) -> usize {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("start"))
        .count()
}

async fn all_succeed(env: &TestEnv, user: &Client, ids: &[Uuid]) {
    for id in ids {
        let done = env.wait_terminal(user, *id).await;
        assert_eq!(done.status, TaskStatus::Succeeded, "{done:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_of_limit_two_never_runs_three_at_once_across_nodes_and_runners() {
    let env = TestEnv::new("flow-group").await;
    let nodes = [env.node().await, env.node().await, env.node().await];
    let mut runners = Vec::new();
    for node in &nodes {
        runners.push(env.runner(&node.url, &[], 4).await);
    }
    let record = file_tasks_may_write(&env.dir.join("runs.log"));
    let user = user_client(&nodes[0].url);
    let mut ids = Vec::new();
    for i in 0..20 {
        // Submitted through every node: the limit is the cluster's, not a node's.
        let submitter = user_client(&nodes[i % 3].url);
        ids.push(
            submitter
                .submit(&grouped(&record, "tenant-a", 0.3))
                .await
                .unwrap()
                .0
                .id,
        );
    }
    all_succeed(&env, &user, &ids).await;
    let (most, runs) = most_at_once(&record);
    assert_eq!(runs, 20, "every task ran once");
    assert!(most <= 2, "{most} tasks of the group ran at once");
    assert_eq!(most, 2, "the group used both of its slots");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_keeps_its_limit_through_a_redis_data_loss() {
    let base = std::env::temp_dir().join(format!("baton-flow-loss-{}", Uuid::new_v4().simple()));
    let redis = RedisProc::start(&base).await;
    let env = TestEnv::with_servers("flow-group-loss", &admin_database_url(), &redis.url()).await;
    let nodes = [env.node_with(&FAST_HA).await, env.node_with(&FAST_HA).await];
    let mut runners = Vec::new();
    for node in &nodes {
        runners.push(
            env.runner_with(&node.url, &[], 4, &["--heartbeat-s", "1"])
                .await,
        );
    }
    let record = file_tasks_may_write(&env.dir.join("runs.log"));
    let user = user_client(&nodes[0].url);
    let mut ids = Vec::new();
    // Runs outlast the rebuild: the two running when Redis forgets must still count.
    for _ in 0..20 {
        ids.push(
            user.submit(&grouped(&record, "tenant-b", 1.5))
                .await
                .unwrap()
                .0
                .id,
        );
    }
    wait_for(
        "a few runs of the group",
        Duration::from_secs(30),
        || async { (starts(&record) >= 3).then_some(()) },
    )
    .await;
    // Redis forgets everything mid-run: queues, claims, the group's slots and waiting line.
    let mut conn = env.redis().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    all_succeed(&env, &user, &ids).await;
    let (most, runs) = most_at_once(&record);
    assert_eq!(runs, 20, "every task ran once");
    assert!(most <= 2, "{most} tasks of the group ran at once");
    drop(runners);
    let _ = std::fs::remove_dir_all(base);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_queue_hands_out_nothing_and_expires_nothing_until_resumed() {
    let env = TestEnv::new("flow-pause").await;
    let node = env.node_with(&["--repair-interval-ms", "200"]).await;
    let _runner = env.runner(&node.url, &[], 5).await;
    let user = user_client(&node.url);
    let paused = user.queue_pause("held", true).await.unwrap();
    assert!(paused.paused);

    let mut held = Vec::new();
    for _ in 0..5 {
        let task = SubmitTask {
            queue: Some("held".into()),
            command: Some(vec!["true".into()]),
            queue_timeout_s: Some(1),
            ..Default::default()
        };
        held.push(user.submit(&task).await.unwrap().0.id);
    }
    // The runner keeps polling: tasks of an open queue, submitted after the held ones,
    // run; a task no runner can take, with the held tasks' queue timeout, expires.
    for _ in 0..3 {
        let open = SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        };
        let open = user.submit(&open).await.unwrap().0.id;
        all_succeed(&env, &user, &[open]).await;
    }
    let control = SubmitTask {
        labels: vec!["nobody-has-this".into()],
        command: Some(vec!["true".into()]),
        queue_timeout_s: Some(1),
        ..Default::default()
    };
    let control = user.submit(&control).await.unwrap().0.id;
    let expired = env.wait_terminal(&user, control).await;
    assert_eq!(expired.status, TaskStatus::Expired);

    for id in &held {
        let task = user.task_get(*id).await.unwrap();
        assert_eq!(task.status, TaskStatus::Queued, "paused: {task:?}");
    }
    let listed = user.queues().await.unwrap();
    let queue = listed.queues.iter().find(|q| q.name == "held").unwrap();
    assert!(queue.paused);
    assert_eq!((queue.depth, queue.running), (5, 0));
    assert!(queue.oldest_waiting.is_some());

    let resumed = user.queue_pause("held", false).await.unwrap();
    assert!(!resumed.paused && resumed.resumed_at.is_some());
    all_succeed(&env, &user, &held).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_queue_timeout_stops_while_paused_and_counts_again_from_the_resume() {
    let env = TestEnv::new("flow-expiry").await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    let t0 = Utc::now();
    store.queue_set_paused("held", true, t0).await.unwrap();
    let task = NewTask {
        queue: "held".into(),
        queue_timeout_s: 10,
        ..new_task_row()
    };
    store.task_insert(&task, t0).await.unwrap();
    let expired_at = |at| {
        let store = store.clone();
        async move { store.tasks_expire_due(at, 10).await.unwrap().len() }
    };
    assert_eq!(
        expired_at(t0 + Span::hours(1)).await,
        0,
        "paused: no expiry"
    );
    let resume = t0 + Span::hours(1);
    store.queue_set_paused("held", false, resume).await.unwrap();
    assert_eq!(
        expired_at(resume + Span::seconds(5)).await,
        0,
        "its full queue timeout again from the resume"
    );
    assert_eq!(expired_at(resume + Span::seconds(11)).await, 1);
}

fn exits(queue: &str, code: i32) -> SubmitTask {
    SubmitTask {
        queue: Some(queue.into()),
        script: Some(format!("exit {code}")),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queues_defaults_fill_what_its_tasks_leave_out_and_nothing_they_give() {
    let env = TestEnv::new("flow-defaults").await;
    let node = env.node().await;
    let _runner = env.runner(&node.url, &[], 4).await;
    let user = user_client(&node.url);
    let before = user.submit(&exits("builds", 3)).await.unwrap().0;

    // Set from the command line, as docs/flow-control.md shows it.
    let out = baton_cli(
        &node.url,
        API_TOKEN,
        &[
            "queue",
            "defaults",
            "builds",
            "--max-attempts",
            "3",
            "--retry",
            r#"{"on_exit_codes": [3], "backoff_base_s": 0.2}"#,
            "--concurrency-limit",
            "1",
        ],
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let set: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(set["defaults"]["concurrency_key"], "queue:builds", "{set}");

    let record = file_tasks_may_write(&env.dir.join("runs.log"));
    let taken = user.submit(&exits("builds", 3)).await.unwrap().0;
    let not_listed = user.submit(&exits("builds", 4)).await.unwrap().0;
    let own_attempts = SubmitTask {
        max_attempts: Some(1),
        ..exits("builds", 3)
    };
    let own_attempts = user.submit(&own_attempts).await.unwrap().0;
    let own_group = SubmitTask {
        concurrency_key: Some("elsewhere".into()),
        ..exits("builds", 0)
    };
    let own_group = user.submit(&own_group).await.unwrap().0;
    let mut grouped_ids = Vec::new();
    for _ in 0..4 {
        // The recording task without a group of its own: it takes the queue's, limit 1.
        let task = SubmitTask {
            queue: Some("builds".into()),
            concurrency_key: None,
            concurrency_limit: None,
            ..grouped(&record, "-", 0.3)
        };
        grouped_ids.push(user.submit(&task).await.unwrap().0.id);
    }

    assert_eq!(taken.max_attempts, 3);
    assert_eq!(taken.concurrency_key.as_deref(), Some("queue:builds"));
    assert_eq!(taken.concurrency_limit, Some(1));
    let policy = taken.retry.as_ref().expect("the queue's policy, resolved");
    assert_eq!(policy.on_exit_codes, Some(vec![3]));
    assert_eq!(policy.backoff_base_s, Some(0.2));
    assert_eq!(policy.backoff_factor, Some(2.0), "the node fills the rest");
    assert_eq!(own_group.concurrency_key.as_deref(), Some("elsewhere"));
    assert_eq!(own_group.concurrency_limit, Some(1));

    // (what, task, attempts it ends after)
    for (what, task, attempts) in [
        ("exit 3: retried up to the queue's 3 attempts", &taken, 3),
        ("exit 4: not in the queue's on_exit_codes", &not_listed, 1),
        ("its own max_attempts 1", &own_attempts, 1),
    ] {
        let done = env.wait_terminal(&user, task.id).await;
        assert_eq!(done.status, TaskStatus::Failed, "{what}");
        assert_eq!(done.attempt, attempts, "{what}: {:?}", done.error);
    }
    all_succeed(&env, &user, &grouped_ids).await;
    all_succeed(&env, &user, &[own_group.id]).await;
    let (most, runs) = most_at_once(&record);
    assert_eq!(
        (most, runs),
        (1, 4),
        "the queue's group of one ran them one at a time"
    );

    let before: Task = user.task_get(before.id).await.unwrap();
    assert_eq!(
        (before.max_attempts, before.concurrency_key),
        (1, None),
        "a task accepted before the defaults keeps what it was given"
    );
    let listed = baton_cli(&node.url, API_TOKEN, &["queue", "list"]).await;
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(
        listed
            .lines()
            .any(|row| row.starts_with("builds ") && row.contains(r#"{"retry""#)),
        "queue list shows them in the builds row:\n{listed}"
    );

    let cleared = baton_cli(
        &node.url,
        API_TOKEN,
        &["queue", "defaults", "builds", "--clear"],
    )
    .await;
    assert!(cleared.status.success(), "{cleared:?}");
    let after = user.submit(&exits("builds", 0)).await.unwrap().0;
    assert_eq!(
        (after.max_attempts, after.concurrency_key, after.retry),
        (1, None, None)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_queue_defaults_are_refused_by_name_and_change_nothing() {
    let env = TestEnv::new("flow-defaults-bad").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let http = reqwest::Client::new();
    let put = |queue: &str, token: &str, body: serde_json::Value| {
        http.put(format!("{}/v1/queues/{queue}/defaults", node.url))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let cases = [
        ("strict", json!({"max_attempts": 0}), "max_attempts"),
        ("strict", json!({"max_attempts": 1000}), "max_attempts"),
        (
            "strict",
            json!({"concurrency_limit": 0}),
            "concurrency_limit",
        ),
        ("strict", json!({"concurrency_key": ""}), "concurrency_key"),
        ("strict", json!({"retry": {"jitter": 2}}), "retry.jitter"),
        (
            "strict",
            json!({"retry": {"backoff_base_s": 60, "backoff_cap_s": 1}}),
            "backoff_cap_s",
        ),
        ("strict", json!({"max_atempts": 2}), "max_atempts"),
        ("strict", json!({"max_attempts": "2"}), "invalid type"),
        ("Bad Queue", json!({"max_attempts": 2}), "queue"),
    ];
    for (queue, body, field) in cases {
        let answer = put(queue, API_TOKEN, body.clone()).await.unwrap();
        let status = answer.status().as_u16();
        let error: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(status, 422, "{queue} {body}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{body}: names {field}: {message}");
    }

    let submitter = admin
        .token_create(&CreateToken {
            name: "submitter".into(),
            scopes: vec![Scope::Submit],
            ..Default::default()
        })
        .await
        .unwrap();
    let refused = put("strict", &submitter.token, json!({"max_attempts": 5}))
        .await
        .unwrap();
    assert_eq!(
        refused.status().as_u16(),
        403,
        "only an admin sets a queue's defaults"
    );

    let queues = admin.queues().await.unwrap();
    assert!(
        queues.queues.iter().all(|q| q.defaults.is_none()),
        "nothing was set: {queues:?}"
    );
    let task = admin.submit(&exits("strict", 0)).await.unwrap().0;
    assert_eq!(task.max_attempts, 1);
    // The defaults a client sends are the ones it reads back.
    let set = admin
        .queue_set_defaults(
            "strict",
            &QueueDefaults {
                max_attempts: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(set.defaults.and_then(|d| d.max_attempts), Some(2));
}

/// A coordinator on the test's Redis, to read and break what the node keeps there.
fn coord_of(env: &TestEnv) -> baton_coord::Coord {
    baton_coord::Coord::from_url(
        &env.redis_url,
        &env.redis_prefix,
        &baton_coord::CoordOptions::default(),
    )
    .unwrap()
}

/// Redis as a failover leaves it when the new master did not have the last writes of a
/// lease that started `task`: no claim, no group slot, the task back in its queue. The
/// loss takes two steps here; a repair pass that claims the run between them (no claim,
/// no entry) makes the entry's step refuse, and the loss is done again.
async fn lose_the_lease_of(env: &TestEnv, task: &Task, group: &str) -> String {
    let coord = coord_of(env);
    let keys = coord.keys();
    let mut redis = env.redis().await;
    let entry = entry_of(task, group, task.priority);
    for _ in 0..100 {
        let _: () = redis::pipe()
            .atomic()
            .cmd("HDEL")
            .arg(keys.running())
            .arg(task.id.to_string())
            .ignore()
            .cmd("SREM")
            .arg(keys.group_running(group))
            .arg(task.id.to_string())
            .ignore()
            .query_async(&mut redis)
            .await
            .unwrap();
        let queued = coord
            .enqueue_unclaimed(std::slice::from_ref(&entry))
            .await
            .unwrap();
        if queued == 1 {
            return entry.key_rel();
        }
    }
    panic!("a repair pass claimed the run between the two steps of every loss");
}

/// The queue entry of `task`, in group `group` (at the task's limit), at `priority`.
fn entry_of(task: &Task, group: &str, priority: i32) -> baton_coord::Enqueue {
    baton_coord::Enqueue {
        task_id: task.id,
        queue: task.queue.clone(),
        labels: baton_core::labels::LabelSet::empty(),
        priority,
        enqueued_at_ms: task.queued_at.unwrap().timestamp_millis(),
        group: Some(baton_core::flow::Group {
            key: group.into(),
            limit: task.concurrency_limit.unwrap_or(1),
        }),
        owner: "tests".into(),
    }
}

/// Redis as a failover leaves a task of `group` parked behind a run whose lease it lost:
/// out of the group's waiting line and in its queue, ahead of the run's entry (the new
/// master had it queued at a higher priority, before the run's lease parked it).
async fn put_ahead(env: &TestEnv, task: &Task, group: &str) {
    let coord = coord_of(env);
    let mut redis = env.redis().await;
    let _: () = redis::cmd("ZREM")
        .arg(coord.keys().group_waiting(group))
        .arg(task.id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();
    let queued = coord
        .enqueue_unclaimed(&[entry_of(task, group, task.priority + 1)])
        .await
        .unwrap();
    assert_eq!(queued, 1, "the task is back in its queue");
}

/// How many tasks of group `key` hold a lease, as Postgres has them.
async fn holding_a_lease_in(env: &TestEnv, key: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM tasks WHERE concurrency_key = $1 AND status IN ('leased', 'running', 'cancelling')",
    )
    .bind(key)
    .fetch_one(&mut env.db().await)
    .await
    .unwrap()
}

/// Task `a` of group `g` started on the first of two runners, on a node whose repair
/// pass runs every `repair_interval_ms`, and the tasks of the group submitted after it.
struct GroupRun {
    /// Kept so the node lives as long as the test; first, so it stops before its
    /// environment goes.
    _node: support::procs::NodeProc,
    env: TestEnv,
    user: Client,
    first: (Client, Uuid),
    second: (Client, Uuid),
    a: Task,
    lease_a: LeaseId,
    /// The tasks of the group submitted once `a` started, in order.
    behind: Vec<Task>,
}

/// [`GroupRun`] with `behind` more tasks of the group (limit `limit`) submitted behind
/// the run.
async fn a_run_of_group_g(
    name: &str,
    limit: i64,
    repair_interval_ms: &str,
    behind: usize,
) -> GroupRun {
    let env = TestEnv::new(name).await;
    let node = env
        .node_with(&["--repair-interval-ms", repair_interval_ms])
        .await;
    let user = user_client(&node.url);
    let (_, first) = register_runner(&node.url, &[], 1).await;
    let (_, second) = register_runner(&node.url, &[], 4).await;
    let (boot_1, boot_2) = (Uuid::now_v7(), Uuid::now_v7());
    let same_group = SubmitTask {
        command: Some(vec!["true".into()]),
        concurrency_key: Some("g".into()),
        concurrency_limit: Some(limit),
        ..Default::default()
    };
    let (a, _) = user.submit(&same_group).await.unwrap();
    let got = first
        .exchange(&exchange_starting(boot_1, 1, 0))
        .await
        .unwrap();
    assert_eq!(
        got.tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![a.id]
    );
    let lease_a = got.tasks[0].lease_id;
    let mut waiting = Vec::with_capacity(behind);
    for _ in 0..behind {
        waiting.push(user.submit(&same_group).await.unwrap().0);
    }
    GroupRun {
        _node: node,
        env,
        user,
        first: (first, boot_1),
        second: (second, boot_2),
        a,
        lease_a,
        behind: waiting,
    }
}

impl GroupRun {
    /// The run's lease lost as a Redis failover loses it ([`lose_the_lease_of`]): the
    /// queue its entry is back in.
    async fn lose_its_lease(&self) -> String {
        let run = self.user.task_get(self.a.id).await.unwrap();
        lose_the_lease_of(&self.env, &run, "g").await
    }

    /// The second runner asks for two tasks; what it got, and how many tasks of group `g`
    /// then hold a lease.
    async fn second_asks(&self) -> (baton_client::ExchangeAnswer, i64) {
        let (second, boot) = &self.second;
        let again = second
            .exchange(&exchange_starting(*boot, 2, 0))
            .await
            .unwrap();
        (again, holding_a_lease_in(&self.env, "g").await)
    }

    /// Ends the run on the first runner with success, then asks on the second until a
    /// task is handed out; which one.
    async fn end_it_and_hand_out_next(&self) -> Uuid {
        let ((first, boot_1), (second, boot_2)) = (&self.first, &self.second);
        let done = first
            .exchange(&baton_client::Exchange {
                completions: vec![baton_client::CompletionItem::succeeded(
                    self.a.id,
                    self.lease_a,
                )],
                ..exchange_starting(*boot_1, 0, 0)
            })
            .await
            .unwrap();
        assert_eq!(done.completions[0].result, baton_client::ItemResult::Done);
        wait_for(
            "the waiting task to be handed out",
            Duration::from_secs(10),
            || async {
                let got = second
                    .exchange(&exchange_starting(*boot_2, 1, 0))
                    .await
                    .unwrap();
                got.tasks.first().map(|t| t.id)
            },
        )
        .await
    }
}

/// A Redis failover loses the claim and the group slot a lease took for a task that then
/// started: the task is back in its queue while it runs. The next lease pops it, its
/// start is refused, and — before — the pass released it with `forget`, which freed its
/// slot and let the next task of the group (limit 1) start beside it. Now the claim the
/// pop made becomes the run's, with its slot, and the next task waits for the first to end.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_lost_in_a_redis_failover_keeps_its_group_slot() {
    let run = a_run_of_group_g("flow-lost-claim", 1, "3600000", 1).await;

    run.lose_its_lease().await;
    let (second, boot_2) = &run.second;
    let got = second
        .exchange(&exchange_starting(*boot_2, 2, 0))
        .await
        .unwrap();
    assert!(
        got.tasks.is_empty(),
        "nothing for the second runner: {got:?}"
    );
    // The pass settles the popped claim after its answer: wait until it is gone (before)
    // or under the run's lease (now).
    let coord = coord_of(&run.env);
    let claim = wait_for(
        "the popped claim to settle",
        Duration::from_secs(10),
        || async {
            match coord.claim_get(run.a.id).await.unwrap() {
                Some(c) if c.lease_id != run.lease_a => None,
                settled => Some(settled),
            }
        },
    )
    .await;
    let (again, held) = run.second_asks().await;
    assert_eq!(held, 1, "group g (limit 1) runs {held} at once: {again:?}");
    assert!(
        claim.is_some_and(|c| c.runner.is_some()),
        "the run keeps a claim under its lease"
    );

    // When the first ends, the second gets its turn.
    let next = run.end_it_and_hand_out_next().await;
    assert_eq!(next, run.behind[0].id);
}

/// A Redis failover loses a run's lease and leaves a task of its group (limit 1) in the
/// queue ahead of the run's own entry. Before, the next lease popped that task, found the
/// group's slot free, and Postgres started it beside the run (the repair pass, which
/// would claim the run again, being up to `repair_interval_ms` away). Now the start
/// counts the group's dispatched rows and is refused; the refusal claims the run again
/// under its lease, slot and all, and the task waits for the run to end.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_a_failover_put_ahead_of_its_groups_run_waits_for_it() {
    let run = a_run_of_group_g("flow-ahead-of-lost", 1, "3600000", 1).await;
    let b = &run.behind[0];

    run.lose_its_lease().await;
    put_ahead(&run.env, &run.user.task_get(b.id).await.unwrap(), "g").await;
    let (again, held) = run.second_asks().await;
    assert_eq!(held, 1, "group g (limit 1) runs {held} at once: {again:?}");
    let coord = coord_of(&run.env);
    wait_for(
        "the run to be claimed again under its lease",
        Duration::from_secs(10),
        || async {
            let claim = coord.claim_get(run.a.id).await.unwrap();
            claim
                .is_some_and(|c| c.lease_id == run.lease_a)
                .then_some(())
        },
    )
    .await;

    // When the run ends, the task gets its turn.
    let next = run.end_it_and_hand_out_next().await;
    assert_eq!(next, b.id);
}

/// The same loss in a group of limit 2, with two tasks ahead of the run: the lease finds
/// both places free and one exchange pops both, whose starts go to Postgres in one
/// statement. Had each start counted only the rows committed before it, both would see
/// the run alone (1 < 2) and start beside it; the statement counts its own earlier
/// starts of the group too, and one of the two waits.
#[tokio::test(flavor = "multi_thread")]
async fn two_tasks_a_failover_put_ahead_of_a_run_take_its_groups_one_free_place() {
    // The first runner keeps the run; only the second asks again.
    let run = a_run_of_group_g("flow-two-ahead-of-lost", 2, "3600000", 2).await;

    run.lose_its_lease().await;
    for task in &run.behind {
        put_ahead(&run.env, &run.user.task_get(task.id).await.unwrap(), "g").await;
    }
    let (again, held) = run.second_asks().await;
    assert_eq!(held, 2, "group g (limit 2) runs {held} at once: {again:?}");
    assert_eq!(
        again.tasks.len(),
        1,
        "one of the two is handed out: {again:?}"
    );
}

/// The same loss, met first by the repair pass: the run's entry is back in its queue with
/// no claim, and no lease has popped it yet (every runner busy). Before, the pass dropped
/// the entry as stale — the row runs — and, the task being unclaimed, its group
/// bookkeeping with it: the next lease found the group (limit 1) free and started another
/// task beside the run, until a later pass claimed the first. Now the pass claims the run
/// under its lease, with its slot, taking the entry out; the next task waits.
///
/// The loss is repeated against passes run back to back, so that it also lands between a
/// pass's claim step and its drop of stale entries: a pass that found the run claimed
/// and then met its entry dropped it as stale, the same hole one step later.
#[tokio::test(flavor = "multi_thread")]
async fn the_repair_pass_claims_a_run_a_failover_put_back_in_its_queue() {
    const LOSSES: usize = 60;
    let run = a_run_of_group_g("flow-repair-lost-claim", 1, "10", 1).await;

    let coord = coord_of(&run.env);
    for loss in 1..=LOSSES {
        let queue = run.lose_its_lease().await;
        wait_for(
            "a repair pass to take the run's entry out of its queue",
            Duration::from_secs(10),
            || async {
                let missing = coord
                    .queue_missing(&[(run.a.id, queue.clone())])
                    .await
                    .unwrap();
                (!missing.is_empty()).then_some(())
            },
        )
        .await;
        let (again, held) = run.second_asks().await;
        assert_eq!(
            held, 1,
            "loss {loss}: group g (limit 1) runs {held} at once: {again:?}"
        );
        let claim = coord.claim_get(run.a.id).await.unwrap();
        assert!(
            claim.is_some_and(|c| c.lease_id == run.lease_a),
            "loss {loss}: the run is claimed under its lease"
        );
    }

    // When the first ends, the second gets its turn.
    let next = run.end_it_and_hand_out_next().await;
    assert_eq!(next, run.behind[0].id);
}

/// A pause whose Redis copy a failover lost: the lease script sees the queue open and
/// pops its task. Before, the start was recorded and the task ran from a paused queue;
/// now Postgres refuses the start, the task stays `queued`, and the copy is mended.
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_lost_in_a_redis_failover_still_starts_nothing() {
    let env = TestEnv::new("flow-lost-pause").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    user.queue_pause("held", true).await.unwrap();
    let coord = coord_of(&env);
    let mut redis = env.redis().await;
    let _: () = redis::cmd("DEL")
        .arg(coord.keys().paused())
        .query_async(&mut redis)
        .await
        .unwrap();
    let (task, _) = user
        .submit(&SubmitTask {
            command: Some(vec!["true".into()]),
            queue: Some("held".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let got = runner
        .exchange(&exchange_starting(Uuid::now_v7(), 1, 0))
        .await
        .unwrap();
    assert!(
        got.tasks.is_empty(),
        "a paused queue's task went out: {got:?}"
    );
    assert_eq!(
        user.task_get(task.id).await.unwrap().status,
        TaskStatus::Queued
    );
    let paused: bool = redis::cmd("SISMEMBER")
        .arg(coord.keys().paused())
        .arg("held")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(paused, "the pause is mirrored to Redis again");
}

/// The same loss, when the pass that popped the running task could not hand its claim to
/// the run (it died, or Redis failed it): the node's reconciler finds a claim under
/// another lease than the task's run. Before, it released the claim — and with it the
/// group slot; now it hands the claim to the run, slot and all.
#[tokio::test(flavor = "multi_thread")]
async fn the_reconciler_hands_a_claim_under_another_lease_to_the_run() {
    let env = TestEnv::new("flow-reconcile-adopt").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 4).await;
    let boot = Uuid::now_v7();
    let (a, _) = user
        .submit(&SubmitTask {
            command: Some(vec!["true".into()]),
            concurrency_key: Some("g".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let got = runner
        .exchange(&exchange_starting(boot, 1, 0))
        .await
        .unwrap();
    let lease_a = got.tasks[0].lease_id;
    let coord = coord_of(&env);
    let run = coord
        .claim_get(a.id)
        .await
        .unwrap()
        .expect("the run's claim");
    // A lease that popped it again after a failover left its own claim behind.
    let popped = LeaseId::random();
    let mut redis = env.redis().await;
    let _: () = redis::cmd("HSET")
        .arg(coord.keys().running())
        .arg(a.id.to_string())
        .arg(format!("{}|{popped}|{}||", run.node, run.claimed_at_ms))
        .query_async(&mut redis)
        .await
        .unwrap();
    let settled = wait_for(
        "the reconciler to settle the claim",
        Duration::from_secs(10),
        || async {
            match coord.claim_get(a.id).await.unwrap() {
                Some(c) if c.lease_id == popped => None,
                settled => Some(settled),
            }
        },
    )
    .await
    .map(|c| c.lease_id);
    assert_eq!(settled, Some(lease_a), "the claim is the run's again");
    let in_slot: bool = redis::cmd("SISMEMBER")
        .arg(coord.keys().group_running("g"))
        .arg(a.id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(in_slot, "and the run keeps its group slot");
}
