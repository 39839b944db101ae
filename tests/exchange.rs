//! The batched runner exchange against real nodes, Redis and Postgres: each item is
//! answered on its own, a resend is answered as the first attempt was on any node (also
//! when the lease recorded the starts, `start_leased`), a
//! node killed inside a group commit acknowledges nothing it did not commit and loses
//! nothing it acknowledged, and a Postgres outage answers every item "retry".

use baton_core::LeaseId;
use baton_localcluster::testing as support;

use baton_client::{
    Client, CompletionItem, Exchange, ExchangeAnswer, ItemResult, Outcome, StartItem, SubmitTask,
};
use baton_core::TaskStatus;
use std::time::Duration;
use support::services::PostgresProc;
use support::*;
use uuid::Uuid;

const BOOT: Uuid = Uuid::from_u128(0xb007);

fn task() -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        ..SubmitTask::default()
    }
}

fn exchange() -> Exchange {
    Exchange {
        request_id: Uuid::new_v4(),
        boot_id: BOOT,
        ..Exchange::default()
    }
}

fn start(task_id: Uuid, lease_id: LeaseId) -> StartItem {
    StartItem {
        task_id,
        lease_id,
        traceparent: None,
    }
}

/// Leases `n` tasks over the exchange: (task, lease) pairs.
async fn lease(runner: &Client, n: u32) -> Vec<(Uuid, LeaseId)> {
    let answer = runner
        .exchange(&Exchange {
            max: n,
            ..exchange()
        })
        .await
        .unwrap();
    answer.tasks.iter().map(|t| (t.id, t.lease_id)).collect()
}

/// A task's status as Postgres has it (no Redis overlay).
async fn stored(env: &TestEnv, id: Uuid) -> (String, i32) {
    sqlx::query_as("SELECT status, attempt FROM tasks WHERE id = $1")
        .bind(id)
        .fetch_one(&mut env.db().await)
        .await
        .unwrap()
}

fn results(answer: &ExchangeAnswer) -> (Vec<ItemResult>, Vec<ItemResult>) {
    (
        answer.starts.iter().map(|a| a.result).collect(),
        answer.completions.iter().map(|a| a.result).collect(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_valid_stale_and_unknown_items_answers_each_and_changes_only_the_valid() {
    let env = TestEnv::new("exchange-mixed").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 4).await;
    let (_, other) = register_runner(&node.url, &["other"], 1).await;
    let (a, _) = user.submit(&task()).await.unwrap();
    let (b, _) = user.submit(&task()).await.unwrap();
    let (theirs, _) = user
        .submit(&SubmitTask {
            labels: vec!["other".into()],
            ..task()
        })
        .await
        .unwrap();
    let mine = lease(&runner, 2).await;
    let lease_of = |id: Uuid| mine.iter().find(|(t, _)| *t == id).unwrap().1;
    let (lease_a, lease_b) = (lease_of(a.id), lease_of(b.id));
    let their_lease = lease(&other, 1).await[0].1;

    let answer = runner
        .exchange(&Exchange {
            starts: vec![
                start(a.id, lease_a),
                start(b.id, LeaseId::random()),
                start(Uuid::now_v7(), LeaseId::random()),
                start(theirs.id, their_lease),
            ],
            ..exchange()
        })
        .await
        .unwrap();
    use ItemResult::*;
    assert_eq!(results(&answer).0, vec![Done, Stale, Gone, Gone]);
    assert_eq!(answer.starts[0].status, Some(TaskStatus::Running));
    assert_eq!(answer.starts[0].attempt, Some(1));
    assert_eq!(stored(&env, a.id).await, ("running".into(), 1));
    assert_eq!(
        stored(&env, b.id).await,
        ("queued".into(), 0),
        "still unstarted"
    );
    assert_eq!(
        user.task_get(b.id).await.unwrap().status,
        TaskStatus::Leased,
        "and still leased to the runner, under its real lease"
    );
    assert_eq!(stored(&env, theirs.id).await, ("queued".into(), 0));

    let answer = runner
        .exchange(&Exchange {
            starts: vec![start(b.id, lease_b)],
            completions: vec![
                CompletionItem::succeeded(a.id, lease_a),
                CompletionItem::succeeded(b.id, LeaseId::random()),
                CompletionItem::succeeded(Uuid::now_v7(), LeaseId::random()),
                CompletionItem::succeeded(theirs.id, their_lease),
            ],
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(
        results(&answer),
        (vec![Done], vec![Done, Stale, Gone, Gone])
    );
    assert_eq!(answer.completions[0].status, Some(TaskStatus::Succeeded));
    assert_eq!(stored(&env, a.id).await, ("succeeded".into(), 1));
    assert_eq!(
        stored(&env, b.id).await,
        ("running".into(), 1),
        "not ended by a stale lease"
    );
    assert_eq!(stored(&env, theirs.id).await, ("queued".into(), 0));

    // The same completion again (its answer lost) is answered as the first was.
    let again = runner
        .exchange(&Exchange {
            completions: vec![CompletionItem::succeeded(a.id, lease_a)],
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(results(&again).1, vec![Done]);
    assert_eq!(stored(&env, a.id).await, ("succeeded".into(), 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn each_item_is_answered_by_its_own_task_and_lease_in_any_order_and_repeated() {
    let env = TestEnv::new("exchange-keyed").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 4).await;
    let (a, _) = user.submit(&task()).await.unwrap();
    let (b, _) = user.submit(&task()).await.unwrap();
    let mine = lease(&runner, 2).await;
    let lease_of = |id: Uuid| mine.iter().find(|(t, _)| *t == id).unwrap().1;
    let (lease_a, lease_b) = (lease_of(a.id), lease_of(b.id));

    // b under a lease it does not hold before b under its own, and a twice: the store
    // answers what it writes in an order of its own, each item by its key.
    let answer = runner
        .exchange(&Exchange {
            starts: vec![
                start(b.id, LeaseId::random()),
                start(a.id, lease_a),
                start(b.id, lease_b),
                start(a.id, lease_a),
            ],
            ..exchange()
        })
        .await
        .unwrap();
    use ItemResult::*;
    assert_eq!(results(&answer).0, vec![Stale, Done, Done, Done]);
    let ids: Vec<Uuid> = answer.starts.iter().map(|s| s.task_id).collect();
    assert_eq!(
        ids,
        vec![b.id, a.id, b.id, a.id],
        "answered in the order asked"
    );
    assert_eq!(stored(&env, a.id).await, ("running".into(), 1));
    assert_eq!(stored(&env, b.id).await, ("running".into(), 1));

    let answer = runner
        .exchange(&Exchange {
            completions: vec![
                CompletionItem::succeeded(b.id, lease_b),
                CompletionItem::succeeded(a.id, LeaseId::random()),
                CompletionItem::succeeded(a.id, lease_a),
            ],
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(results(&answer).1, vec![Done, Stale, Done]);
    assert_eq!(answer.completions[0].task_id, b.id);
    assert_eq!(stored(&env, a.id).await, ("succeeded".into(), 1));
    assert_eq!(stored(&env, b.id).await, ("succeeded".into(), 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_ends_of_one_run_in_one_exchange_record_the_first_and_drop_its_claim() {
    let env = TestEnv::new("exchange-two-ends").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let (a, _) = user.submit(&task()).await.unwrap();
    let lease_a = lease(&runner, 1).await[0].1;
    let started = runner
        .exchange(&Exchange {
            starts: vec![start(a.id, lease_a)],
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(results(&started).0, vec![ItemResult::Done]);

    // A faulty runner reports two ends of the run: the first is recorded.
    let failed = CompletionItem {
        outcome: Outcome::Failed,
        exit_code: Some(1),
        ..CompletionItem::succeeded(a.id, lease_a)
    };
    let answer = runner
        .exchange(&Exchange {
            completions: vec![CompletionItem::succeeded(a.id, lease_a), failed],
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(results(&answer).1[0], ItemResult::Done);
    assert_eq!(stored(&env, a.id).await, ("succeeded".into(), 1));
    // The end that took effect drops the run's claim, as any end does.
    let running = format!("{}running", env.redis_prefix);
    wait_for("the run's claim to go", Duration::from_secs(10), || async {
        let claim: Option<String> = redis::cmd("HGET")
            .arg(&running)
            .arg(a.id.to_string())
            .query_async(&mut env.redis().await)
            .await
            .unwrap();
        claim.is_none().then_some(())
    })
    .await;
}

/// `sent` again, as a runner resends an exchange whose answer it lost.
async fn resend(to: &Client, sent: &Exchange) -> ExchangeAnswer {
    to.exchange(&Exchange {
        retry: true,
        ..sent.clone()
    })
    .await
    .unwrap()
}

/// Two nodes, a user client and one runner with a client on each node.
struct TwoNodes {
    env: TestEnv,
    _nodes: [NodeProc; 2],
    user: Client,
    on_a: Client,
    on_b: Client,
}

impl TwoNodes {
    async fn start(name: &str) -> TwoNodes {
        let env = TestEnv::new(name).await;
        let node_a = env.node().await;
        let node_b = env.node().await;
        let user = user_client(&node_a.url);
        let (_, token) = register_runner_token(&node_a.url, &[], 4).await;
        let on_a = Client::new(&node_a.url, Some(token.clone())).unwrap();
        let on_b = Client::new(&node_b.url, Some(token)).unwrap();
        TwoNodes {
            env,
            _nodes: [node_a, node_b],
            user,
            on_a,
            on_b,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resent_exchange_is_answered_as_the_first_on_another_node() {
    let two = TwoNodes::start("exchange-replay").await;
    let (first, _) = two.user.submit(&task()).await.unwrap();
    let first_lease = lease(&two.on_a, 1).await[0].1;
    for _ in 0..2 {
        two.user.submit(&task()).await.unwrap();
    }

    // One exchange: a start, a completion, and a lease of two more.
    let sent = Exchange {
        starts: vec![start(first.id, first_lease)],
        max: 2,
        ..exchange()
    };
    let answered = two.on_a.exchange(&sent).await.unwrap();
    assert_eq!(results(&answered).0, vec![ItemResult::Done]);
    assert_eq!(answered.tasks.len(), 2);
    // Its answer was lost; the runner sends it again, to node B.
    let replayed = resend(&two.on_b, &sent).await;
    assert_eq!(
        replayed.starts, answered.starts,
        "the start answered as before"
    );
    assert_eq!(
        replayed.tasks, answered.tasks,
        "the same tasks under the same leases"
    );
    assert_eq!(
        stored(&two.env, first.id).await,
        ("running".into(), 1),
        "started once"
    );
    // Nothing was handed out twice, nor stranded.
    assert!(lease(&two.on_a, 4).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_record_outlives_the_longest_park_and_the_runner_s_longest_backoff() {
    let env = TestEnv::new("exchange-replay-ttl").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (runner_id, token) = register_runner_token(&node.url, &[], 4).await;
    let runner = Client::new(&node.url, Some(token)).unwrap();
    user.submit(&task()).await.unwrap();
    let sent = Exchange {
        max: 1,
        start_leased: true,
        ..exchange()
    };
    assert_eq!(runner.exchange(&sent).await.unwrap().tasks.len(), 1);

    // A runner whose answer was lost resends after up to its longest backoff (30 s); the
    // first attempt may have parked for the longest wait (50 s) before answering. The
    // record must still be there, or the tasks it started are lost to the resend.
    let mut redis = env.redis().await;
    let ttl_ms: i64 = redis::cmd("PTTL")
        .arg(format!(
            "{}req:{runner_id}:{}",
            env.redis_prefix, sent.request_id
        ))
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(ttl_ms > 80_000, "the replay record lives {ttl_ms} ms");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exchange_that_asks_start_leased_gets_its_tasks_running_and_a_resend_the_same() {
    let two = TwoNodes::start("exchange-start-leased").await;
    for _ in 0..3 {
        two.user.submit(&task()).await.unwrap();
    }
    let sent = Exchange {
        max: 3,
        start_leased: true,
        ..exchange()
    };
    let answered = two.on_a.exchange(&sent).await.unwrap();
    assert_eq!(answered.tasks.len(), 3);
    for task in &answered.tasks {
        assert!(task.started, "{} arrived started", task.id);
        assert_eq!(task.attempt, 1);
        assert_eq!(stored(&two.env, task.id).await, ("running".into(), 1));
        let lease: Option<LeaseId> = sqlx::query_scalar("SELECT lease_id FROM tasks WHERE id = $1")
            .bind(task.id)
            .fetch_one(&mut two.env.db().await)
            .await
            .unwrap();
        assert_eq!(
            lease,
            Some(task.lease_id),
            "started under the lease it came with"
        );
    }
    // Its answer was lost; the resend, on node B, gets the same tasks, started once.
    let replayed = resend(&two.on_b, &sent).await;
    assert_eq!(replayed.tasks, answered.tasks);
    for task in &answered.tasks {
        assert_eq!(stored(&two.env, task.id).await, ("running".into(), 1));
    }
    // They run with no start item: the completion is all that is left to send.
    let first = &answered.tasks[0];
    let completed = two
        .on_b
        .exchange(&Exchange {
            completions: vec![CompletionItem::succeeded(first.id, first.lease_id)],
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(results(&completed).1, vec![ItemResult::Done]);
    assert_eq!(stored(&two.env, first.id).await, ("succeeded".into(), 1));
    // Nothing was handed out twice.
    assert!(lease(&two.on_a, 4).await.is_empty());
}

/// A node that dies at `fault` inside its group commit, with `n` runners' starts in it.
async fn killed_in_a_group_commit(fault: &str) {
    let env = TestEnv::new("exchange-killed").await;
    let healthy = env.node().await;
    let mut faulty = env.node_with(&["--fault", fault]).await;
    let user = user_client(&healthy.url);
    let n = 4;
    let mut runners = Vec::new();
    for _ in 0..n {
        let (_, token) = register_runner_token(&healthy.url, &[], 1).await;
        runners.push((
            Client::new(&healthy.url, Some(token.clone())).unwrap(),
            Client::new(&faulty.url, Some(token)).unwrap(),
        ));
    }
    let mut leased = Vec::new();
    for (on_healthy, _) in &runners {
        user.submit(&task()).await.unwrap();
        leased.push(lease(on_healthy, 1).await[0]);
    }
    // All four starts at once on the faulty node: they share its group commits.
    let sends = runners.iter().zip(&leased).map(|((_, on_faulty), (t, l))| {
        let sent = Exchange {
            starts: vec![start(*t, *l)],
            ..exchange()
        };
        async move { on_faulty.exchange(&sent).await }
    });
    let answers = futures::future::join_all(sends).await;
    assert!(faulty.exited().await.is_ok(), "the node died");
    let acknowledged: Vec<Uuid> = answers
        .iter()
        .zip(&leased)
        .filter(|(a, _)| {
            a.as_ref()
                .is_ok_and(|a| a.starts[0].result == ItemResult::Done)
        })
        .map(|(_, (t, _))| *t)
        .collect();
    assert!(
        acknowledged.is_empty(),
        "nothing was answered from the group commit it died in: {acknowledged:?}"
    );
    for (t, _) in &leased {
        let (status, _) = stored(&env, *t).await;
        match fault {
            "abort-before-commit" => assert_eq!(status, "queued", "not committed"),
            _ => assert!(["queued", "running"].contains(&status.as_str())),
        }
    }
    // Each runner sends its start again, to the healthy node: every one is started,
    // once, whether or not its first attempt had been committed.
    for ((on_healthy, _), (t, l)) in runners.iter().zip(&leased) {
        let answer = on_healthy
            .exchange(&Exchange {
                starts: vec![start(*t, *l)],
                ..exchange()
            })
            .await
            .unwrap();
        assert_eq!(answer.starts[0].result, ItemResult::Done, "{t}");
        assert_eq!(stored(&env, *t).await, ("running".into(), 1));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_killed_before_its_group_commit_commits_acknowledged_nothing() {
    killed_in_a_group_commit("abort-before-commit").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_killed_after_its_group_commit_committed_loses_nothing() {
    killed_in_a_group_commit("abort-after-commit").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_outage_answers_every_item_retry_and_changes_nothing() {
    let mut pg = PostgresProc::start().await;
    let env = TestEnv::with_servers("exchange-pg-outage", &pg.admin_url(), &redis_url()).await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 4).await;
    let (running, _) = user.submit(&task()).await.unwrap();
    let (waiting, _) = user.submit(&task()).await.unwrap();
    let mine = lease(&runner, 2).await;
    let lease_of = |id: Uuid| mine.iter().find(|(t, _)| *t == id).unwrap().1;
    let started = runner
        .exchange(&Exchange {
            starts: vec![start(running.id, lease_of(running.id))],
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(results(&started).0, vec![ItemResult::Done]);

    pg.down().await;
    let batch = Exchange {
        starts: vec![start(waiting.id, lease_of(waiting.id))],
        completions: vec![CompletionItem::succeeded(running.id, lease_of(running.id))],
        max: 2,
        ..exchange()
    };
    let answer = runner.exchange(&batch).await.unwrap();
    assert_eq!(
        results(&answer),
        (vec![ItemResult::Retry], vec![ItemResult::Retry]),
        "{answer:?}"
    );
    assert!(answer.tasks.is_empty());

    pg.up().await;
    let answer = wait_for("postgres back", Duration::from_secs(30), || async {
        let answer = runner
            .exchange(&Exchange {
                request_id: Uuid::new_v4(),
                ..batch.clone()
            })
            .await
            .ok()?;
        (results(&answer) == (vec![ItemResult::Done], vec![ItemResult::Done])).then_some(answer)
    })
    .await;
    assert_eq!(answer.completions[0].status, Some(TaskStatus::Succeeded));
    assert_eq!(stored(&env, running.id).await, ("succeeded".into(), 1));
    assert_eq!(stored(&env, waiting.id).await, ("running".into(), 1));
}

/// A start checked against its claim and then held up in Postgres past its ack timeout
/// (here a transaction holds the row): the reconciler must not hand the task out again
/// while that start can still land. Before the requeue was fenced in Postgres, the task
/// went back to its queue, the held-up start then committed, and a second runner leased
/// the same task while the first ran it.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_held_up_past_its_ack_timeout_is_not_handed_out_again() {
    let env = TestEnv::new("exchange-held-start").await;
    let node = env.node_with(&FAST_HA).await;
    let user = user_client(&node.url);
    let (_, first) = register_runner(&node.url, &[], 1).await;
    let (_, second) = register_runner(&node.url, &[], 1).await;
    let (submitted, _) = user.submit(&task()).await.unwrap();
    let (id, lease_id) = lease(&first, 1).await[0];
    assert_eq!(id, submitted.id);

    let mut holder = env.db().await;
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut holder)
        .await
        .unwrap();
    let held_start = tokio::spawn(async move {
        first
            .exchange(&Exchange {
                starts: vec![start(id, lease_id)],
                ..exchange()
            })
            .await
    });
    // Past the grace the reconciler acts: it either put the task back in Redis (the
    // defect) or its fence waits behind the held row with the start.
    let mut redis = env.redis().await;
    let running_key = format!("{}running", env.redis_prefix);
    wait_for(
        "the reconciler to act on the held-up lease",
        Duration::from_secs(20),
        || {
            let (mut redis, running_key) = (redis.clone(), running_key.clone());
            let env = &env;
            async move {
                let claimed: bool = redis::cmd("HEXISTS")
                    .arg(&running_key)
                    .arg(id.to_string())
                    .query_async(&mut redis)
                    .await
                    .ok()?;
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE wait_event_type = 'Lock' AND query ILIKE '%UPDATE tasks%'",
                )
                .fetch_one(&mut env.db().await)
                .await
                .ok()?;
                (!claimed || waiting >= 2).then_some(())
            }
        },
    )
    .await;
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    let answer = held_start.await.unwrap().unwrap();
    assert_eq!(results(&answer).0, vec![ItemResult::Done], "{answer:?}");

    assert_eq!(stored(&env, id).await, ("running".into(), 1));
    let queued: Option<f64> = redis::cmd("ZSCORE")
        .arg(format!("{}q:default:-", env.redis_prefix))
        .arg(id.to_string())
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(queued, None, "a started task is not in its queue");
    assert!(
        lease(&second, 1).await.is_empty(),
        "nobody else is handed a task that runs"
    );
}

/// A heartbeat's list is only as new as the answers its runner had: a run the list could
/// not know of yet (it started after the newest answer the runner had seen) is not taken
/// for forgotten, however late the list arrives. (The forgotten-run age is 0 here, so
/// only the list's own time separates the two.)
#[tokio::test(flavor = "multi_thread")]
async fn a_heartbeat_list_older_than_a_run_does_not_end_it() {
    let env = TestEnv::new("exchange-list-age").await;
    let node = env.node_with(&["--forgotten-run-after-s", "0"]).await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 1).await;
    let before_the_run = runner.exchange(&exchange()).await.unwrap().answered_at;
    assert!(
        before_the_run.is_some(),
        "every answer carries the server's time"
    );
    let (submitted, _) = user.submit(&task()).await.unwrap();
    let leased = runner
        .exchange(&Exchange {
            max: 1,
            start_leased: true,
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(leased.tasks.len(), 1);
    assert_eq!(stored(&env, submitted.id).await.0, "running");

    let heartbeat = |as_of| Exchange {
        running: Some(Vec::new()),
        running_as_of: as_of,
        ..exchange()
    };
    let late = runner.exchange(&heartbeat(before_the_run)).await.unwrap();
    assert_eq!(
        stored(&env, submitted.id).await.0,
        "running",
        "a list made before the run started does not end it"
    );
    runner.exchange(&heartbeat(late.answered_at)).await.unwrap();
    assert_ne!(
        stored(&env, submitted.id).await.0,
        "running",
        "a list made after the run started, without it: the runner forgot it"
    );
}

/// A heartbeat sent with the completion of one of the runs it lists: that run is over,
/// not gone — the runner is told `done` for it and no verdict — while the other run it
/// lists is still its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_completed_in_the_exchange_that_lists_it_is_not_called_gone() {
    let env = TestEnv::new("exchange-complete-and-list").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let (_, runner) = register_runner(&node.url, &[], 2).await;
    for _ in 0..2 {
        user.submit(&task()).await.unwrap();
    }
    let leased = runner
        .exchange(&Exchange {
            max: 2,
            start_leased: true,
            ..exchange()
        })
        .await
        .unwrap()
        .tasks;
    assert_eq!(leased.len(), 2);
    let (ending, going_on) = (&leased[0], &leased[1]);
    let held = |t: &baton_client::LeasedTask| baton_client::RunningLease {
        task_id: t.id,
        lease_id: t.lease_id,
        reporting: false,
    };
    let answer = runner
        .exchange(&Exchange {
            completions: vec![CompletionItem::succeeded(ending.id, ending.lease_id)],
            running: Some(vec![held(ending), held(going_on)]),
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(results(&answer).1, vec![ItemResult::Done]);
    assert!(
        answer.gone.is_empty() && answer.cancel.is_empty(),
        "no verdict on either run: {answer:?}"
    );
    assert_eq!(stored(&env, ending.id).await.0, "succeeded");
    assert_eq!(stored(&env, going_on.id).await.0, "running");
}

/// nginx resends an exchange whose node died after its lease script ran as it was sent:
/// without the runner's `retry` mark. The node it lands on still answers it as the first
/// attempt was — the tasks it started under their leases — rather than leasing afresh
/// and leaving those running in Postgres with nobody to run them.
#[tokio::test(flavor = "multi_thread")]
async fn an_exchange_resent_unmarked_by_the_load_balancer_is_answered_as_the_first() {
    let two = TwoNodes::start("exchange-resent-unmarked").await;
    for _ in 0..4 {
        two.user.submit(&task()).await.unwrap();
    }
    let sent = Exchange {
        max: 2,
        start_leased: true,
        ..exchange()
    };
    let answered = two.on_a.exchange(&sent).await.unwrap();
    assert_eq!(answered.tasks.len(), 2);
    let again = two.on_b.exchange(&sent).await.unwrap();
    assert_eq!(
        again.tasks, answered.tasks,
        "the same tasks, the same leases"
    );
    for task in &answered.tasks {
        assert_eq!(stored(&two.env, task.id).await, ("running".into(), 1));
    }
    // The other two are still there for the next exchange.
    assert_eq!(lease(&two.on_b, 4).await.len(), 2);
}

/// The lease's start committed, but the node never heard so (the connection was lost with
/// the commit's answer): the node must not put the task back in its queue — it is running
/// under its lease — and the runner's resend, on another node, gets it.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_whose_commit_answer_was_lost_is_not_queued_again() {
    let env = TestEnv::new("exchange-ambiguous-commit").await;
    let unsure = env.node_with(&["--fault", "fail-after-commit"]).await;
    let sound = env.node().await;
    let user = user_client(&sound.url);
    let (_, token) = register_runner_token(&sound.url, &[], 2).await;
    let on_unsure = Client::new(&unsure.url, Some(token.clone())).unwrap();
    let on_sound = Client::new(&sound.url, Some(token)).unwrap();
    let (task, _) = user.submit(&task()).await.unwrap();
    let sent = Exchange {
        max: 1,
        start_leased: true,
        ..exchange()
    };
    let refused = on_unsure.exchange(&sent).await;
    assert!(refused.is_err(), "the node could not say: {refused:?}");
    assert_eq!(stored(&env, task.id).await, ("running".into(), 1));
    assert!(
        lease(&on_sound, 2).await.is_empty(),
        "a started task is not handed out again"
    );
    let replayed = resend(&on_sound, &sent).await;
    assert_eq!(replayed.tasks.len(), 1);
    assert_eq!(replayed.tasks[0].id, task.id);
    assert!(replayed.tasks[0].started);
}

/// The same resend, landing on a node that has just looked for this runner's labels and
/// found the queues empty — emptied by the very lease the resend repeats. Its memory of
/// that look (`KnownEmpty`) was written after the queueing's wake-up, so the wake-up does
/// not end it; before the node consulted the replay record first, the resend was told
/// "nothing", and the task stayed `running` with nobody to run it until it ended `failed`
/// without ever having run.
#[tokio::test(flavor = "multi_thread")]
async fn an_unmarked_resend_is_replayed_by_a_node_that_knows_the_queues_empty() {
    let two = TwoNodes::start("exchange-resent-known-empty").await;
    let (_, other_token) = register_runner_token(two.on_a.base_url(), &[], 4).await;
    let other_on_b = Client::new(two.on_b.base_url(), Some(other_token)).unwrap();
    let (task, _) = two.user.submit(&task()).await.unwrap();
    let sent = Exchange {
        max: 1,
        start_leased: true,
        ..exchange()
    };
    let answered = two.on_a.exchange(&sent).await.unwrap();
    assert_eq!(
        answered.tasks.len(),
        1,
        "node A leased and started the task"
    );
    // The answer is lost. Meanwhile a runner of the same labels, parked on node B for a
    // second, looks after the submit's wake-up and finds the queue empty.
    let parked = other_on_b
        .exchange(&Exchange {
            max: 1,
            wait_s: 1,
            ..exchange()
        })
        .await
        .unwrap();
    assert!(parked.tasks.is_empty());
    // nginx sends the lost exchange on to node B, unmarked.
    let again = two.on_b.exchange(&sent).await.unwrap();
    assert_eq!(
        again.tasks, answered.tasks,
        "the resend gets the task its first attempt started"
    );
    assert_eq!(stored(&two.env, task.id).await, ("running".into(), 1));
}
