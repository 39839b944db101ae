//! The batched runner exchange against real nodes, Redis and Postgres: each item is
//! answered on its own, a resend is answered as the first attempt was on any node, a
//! node killed inside a group commit acknowledges nothing it did not commit and loses
//! nothing it acknowledged, and a Postgres outage answers every item "retry".

mod support;

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

fn start(task_id: Uuid, lease_id: Uuid) -> StartItem {
    StartItem {
        task_id,
        lease_id,
        traceparent: None,
    }
}

fn done(task_id: Uuid, lease_id: Uuid) -> CompletionItem {
    CompletionItem {
        task_id,
        lease_id,
        outcome: Outcome::Succeeded,
        exit_code: Some(0),
        error: None,
        outputs: None,
        log_size: Some(0),
        log_tail: None,
        traceparent: None,
    }
}

/// Leases `n` tasks over the exchange: (task, lease) pairs.
async fn lease(runner: &Client, n: u32) -> Vec<(Uuid, Uuid)> {
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
                start(b.id, Uuid::new_v4()),
                start(Uuid::now_v7(), Uuid::new_v4()),
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
                done(a.id, lease_a),
                done(b.id, Uuid::new_v4()),
                done(Uuid::now_v7(), Uuid::new_v4()),
                done(theirs.id, their_lease),
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
            completions: vec![done(a.id, lease_a)],
            ..exchange()
        })
        .await
        .unwrap();
    assert_eq!(results(&again).1, vec![Done]);
    assert_eq!(stored(&env, a.id).await, ("succeeded".into(), 1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resent_exchange_is_answered_as_the_first_on_another_node() {
    let env = TestEnv::new("exchange-replay").await;
    let node_a = env.node().await;
    let node_b = env.node().await;
    let user = user_client(&node_a.url);
    let (_, token) = register_runner_token(&node_a.url, &[], 4).await;
    let on_a = Client::new(&node_a.url, Some(token.clone())).unwrap();
    let on_b = Client::new(&node_b.url, Some(token)).unwrap();
    let (first, _) = user.submit(&task()).await.unwrap();
    let first_lease = lease(&on_a, 1).await[0].1;
    for _ in 0..2 {
        user.submit(&task()).await.unwrap();
    }

    // One exchange: a start, a completion, and a lease of two more.
    let sent = Exchange {
        starts: vec![start(first.id, first_lease)],
        max: 2,
        ..exchange()
    };
    let answered = on_a.exchange(&sent).await.unwrap();
    assert_eq!(results(&answered).0, vec![ItemResult::Done]);
    assert_eq!(answered.tasks.len(), 2);
    // Its answer was lost; the runner sends it again, to node B.
    let replayed = on_b
        .exchange(&Exchange {
            retry: true,
            ..sent.clone()
        })
        .await
        .unwrap();
    assert_eq!(
        replayed.starts, answered.starts,
        "the start answered as before"
    );
    assert_eq!(
        replayed.tasks, answered.tasks,
        "the same tasks under the same leases"
    );
    assert_eq!(
        stored(&env, first.id).await,
        ("running".into(), 1),
        "started once"
    );
    // Nothing was handed out twice, nor stranded.
    assert!(lease(&on_a, 4).await.is_empty());
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
    assert!(faulty.child.wait().is_ok(), "the node died");
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
    let pg = PostgresProc::start().await;
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

    pg.down();
    let batch = Exchange {
        starts: vec![start(waiting.id, lease_of(waiting.id))],
        completions: vec![done(running.id, lease_of(running.id))],
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

    pg.up();
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
