//! A batch of many plain inserts is written by `COPY` and its rows built in the node
//! (`crates/baton-store/src/transitions/copy_in.rs`, docs/throughput.md decision 12): the
//! rows it answers with are the rows Postgres keeps, and the rows the one statement
//! writes for the same tasks — every kind of value a task may carry, at a time with
//! nanoseconds.

use baton_localcluster::testing as support;

use baton_core::TaskStatus;
use baton_core::retry_policy::RetryPolicy;
use baton_store::{Apply, NewTask, Store, StoreOptions, TaskRecord, Work};
use chrono::{Duration, TimeZone, Utc};
use serde_json::json;
use std::collections::BTreeMap;
use support::*;
use uuid::Uuid;

async fn store(name: &str) -> (TestEnv, Store) {
    let env = TestEnv::new(name).await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    (env, store)
}

/// Forty tasks, each different from the one before in some value a submit can set.
fn varied_tasks(now: chrono::DateTime<Utc>) -> Vec<NewTask> {
    let nanos = |t: chrono::DateTime<Utc>| t + Duration::nanoseconds(123_456_789);
    (0..40)
        .map(|i| {
            let mut t = new_task_row();
            t.queue = format!("q-{}", i % 3);
            t.priority = i - 20;
            match i % 8 {
                0 => {}
                1 => {
                    t.command = None;
                    t.script = Some(format!("echo 'ünïcode {i}' \"quoted\"\n\texit 0"));
                }
                2 => {
                    t.payload = Some(
                        json!({"zeta": 1, "a": [1.5, -0.0, "x"], "nested": {"k": null},
                                            "big": 12345678901234567_u64, "é": "\u{1F600}"}),
                    );
                    t.labels = vec!["gpu".into(), "linux".into()];
                }
                3 => {
                    t.payload = Some(serde_json::Value::Null);
                    t.env = BTreeMap::from([
                        ("A".into(), "1".into()),
                        ("B_2".into(), "two words".into()),
                    ]);
                    t.secret_env = BTreeMap::from([("TOKEN".into(), "sealed:abc".into())]);
                }
                4 => {
                    t.run_at = Some(nanos(now + Duration::seconds(90)));
                    t.notify_url = Some("https://hooks.example/done?x=1".into());
                }
                5 => {
                    t.run_at = Some(nanos(now - Duration::seconds(5)));
                    t.traceparent =
                        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into());
                }
                6 => {
                    t.schedule_id = Some(Uuid::now_v7());
                    t.scheduled_for =
                        Some(nanos(Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap()));
                    t.retry_of = Some(Uuid::now_v7());
                    t.retry_policy = Some(RetryPolicy {
                        backoff_base_s: Some(1.5),
                        backoff_factor: Some(3.0),
                        ..RetryPolicy::default()
                    });
                }
                _ => {
                    t.concurrency_key = Some(format!("group-{i}"));
                    t.concurrency_limit = Some(2);
                    t.max_attempts = 3;
                    t.timeout_s = 7;
                    t.queue_timeout_s = 11;
                }
            }
            t
        })
        .collect()
}

/// `rows` by id, as the batch gave them back, with `id` and the id-derived nothing else.
fn by_id(rows: Vec<TaskRecord>) -> BTreeMap<Uuid, TaskRecord> {
    rows.into_iter().map(|t| (t.id, t)).collect()
}

/// Whether two rows hold the same values: the payloads as JSON values (a key's place in
/// an object is not a value), every other column as written.
fn assert_same(a: &TaskRecord, b: &TaskRecord, what: &str) {
    let payload = |t: &TaskRecord| t.payload.as_ref().map(|p| p.0.clone());
    assert_eq!(payload(a), payload(b), "{what}: payload of {}", a.id);
    let without_payload = |t: &TaskRecord| {
        let mut t = t.clone();
        t.payload = None;
        format!("{t:?}")
    };
    assert_eq!(without_payload(a), without_payload(b), "{what}: {}", a.id);
}

async fn written(store: &Store, tasks: &[NewTask], chunk: usize, how: &Apply) -> Vec<TaskRecord> {
    let mut answered = Vec::new();
    for batch in tasks.chunks(chunk) {
        let done = store
            .write_now(
                &Work {
                    inserts: batch.to_vec(),
                    ..Work::default()
                },
                how,
            )
            .await
            .unwrap();
        for insert in done.inserts {
            let (row, created) = insert.unwrap();
            assert!(created);
            answered.push(row);
        }
    }
    answered
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copied_batch_answers_the_rows_postgres_keeps_and_the_statement_would_write() {
    let (_env, store) = store("store-copy-in").await;
    let now = Utc::now() + Duration::nanoseconds(987);
    let how = Apply::at(now);
    let tasks = varied_tasks(now);
    // All forty in one batch: by `COPY`.
    let copied = written(&store, &tasks, tasks.len(), &how).await;
    let ids: Vec<Uuid> = tasks.iter().map(|t| t.id).collect();
    let kept = by_id(store.tasks_by_ids(&ids).await.unwrap());
    assert_eq!(kept.len(), 40);
    for row in &copied {
        assert_same(row, &kept[&row.id], "answered against kept");
    }
    let statuses: Vec<TaskStatus> = copied.iter().map(|t| t.status).collect();
    assert!(statuses.contains(&TaskStatus::Scheduled) && statuses.contains(&TaskStatus::Queued));

    // The same tasks again under new ids, eight at a time: by the one statement.
    let again: Vec<NewTask> = tasks
        .iter()
        .map(|t| NewTask {
            id: Uuid::now_v7(),
            ..t.clone()
        })
        .collect();
    let stated = written(&store, &again, 8, &how).await;
    let stated_kept = by_id(
        store
            .tasks_by_ids(&again.iter().map(|t| t.id).collect::<Vec<_>>())
            .await
            .unwrap(),
    );
    for ((copied, stated), original) in copied.iter().zip(&stated).zip(&again) {
        assert_same(
            stated,
            &stated_kept[&original.id],
            "statement's answer against kept",
        );
        let mut as_copied = stated_kept[&original.id].clone();
        as_copied.id = copied.id;
        assert_same(copied, &as_copied, "copied against the statement's row");
    }
}

/// A row Postgres refuses fails its whole batch: nothing of it is kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_copied_batch_with_a_refused_row_keeps_nothing() {
    let (_env, store) = store("store-copy-in-refused").await;
    let mut tasks: Vec<NewTask> = (0..40).map(|_| new_task_row()).collect();
    // Neither a command nor a script: the table's check refuses it.
    tasks[17].command = None;
    let refused = store
        .write_now(
            &Work {
                inserts: tasks.clone(),
                ..Work::default()
            },
            &Apply::at(Utc::now()),
        )
        .await;
    assert!(refused.is_err(), "the batch was written");
    let ids: Vec<Uuid> = tasks.iter().map(|t| t.id).collect();
    assert!(store.tasks_by_ids(&ids).await.unwrap().is_empty());
}
