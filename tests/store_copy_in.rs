//! A batch of many plain inserts is written by `COPY` and its rows built in the node
//! (`crates/baton-store/src/transitions/copy_in.rs`, docs/throughput.md decision 12): the
//! rows it answers with are the rows Postgres keeps, and the rows the one statement
//! writes for the same tasks — every kind of value a task may carry, at a time with
//! nanoseconds.

use baton_localcluster::testing as support;

use baton_core::TaskStatus;
use baton_core::retry_policy::RetryPolicy;
use baton_store::{
    FinishPolicy, GroupCommit, GroupCommitSettings, NewTask, Store, StoreOptions, TaskRecord, Work,
};
use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use support::*;
use uuid::Uuid;

async fn store(name: &str) -> (TestEnv, Store) {
    let env = TestEnv::new(name).await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    (env, store)
}

/// A node's committer writing every batch at `now` — the one writer that copies (a
/// caller's own write may be cancelled, which a copy must not be).
fn committer(store: &Store, now: DateTime<Utc>) -> GroupCommit {
    GroupCommit::spawn(
        store.clone(),
        GroupCommitSettings {
            writers: 1,
            max_items: 4096,
            linger: std::time::Duration::ZERO,
            log_cap: 1 << 20,
            policy: FinishPolicy {
                backoff: baton_core::after_run::TASK_RETRY,
                jitter_unit: 0.5,
            },
            now: Arc::new(move || now),
            fault: None,
            observer: None,
        },
    )
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
                _ if i % 16 == 15 => {
                    // A pipeline's job, inserted waiting (with no edges: the table's
                    // columns are what is checked here).
                    t.pipeline_id = Some(Uuid::now_v7());
                    t.job = Some(format!("job-{i}"));
                    t.release_when = Some("on_success".into());
                    t.needs_pending = 2;
                    t.has_dependents = true;
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

async fn written(commit: &GroupCommit, tasks: &[NewTask], chunk: usize) -> Vec<TaskRecord> {
    let mut answered = Vec::new();
    for batch in tasks.chunks(chunk) {
        let done = commit
            .write(Work {
                inserts: batch.to_vec(),
                ..Work::default()
            })
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
    let commit = committer(&store, now);
    let tasks = varied_tasks(now);
    // All forty in one batch: by `COPY`.
    let copied = written(&commit, &tasks, tasks.len()).await;
    let ids: Vec<Uuid> = tasks.iter().map(|t| t.id).collect();
    let kept = by_id(store.tasks_by_ids(&ids).await.unwrap());
    assert_eq!(kept.len(), 40);
    for row in &copied {
        assert_same(row, &kept[&row.id], "answered against kept");
    }
    let statuses: Vec<TaskStatus> = copied.iter().map(|t| t.status).collect();
    for status in [
        TaskStatus::Scheduled,
        TaskStatus::Queued,
        TaskStatus::Waiting,
    ] {
        assert!(statuses.contains(&status), "no task {status:?}");
    }

    // The same tasks again under new ids, eight at a time: by the one statement.
    let again: Vec<NewTask> = tasks
        .iter()
        .map(|t| NewTask {
            id: Uuid::now_v7(),
            ..t.clone()
        })
        .collect();
    let stated = written(&commit, &again, 8).await;
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

/// A row Postgres refuses fails its whole batch: nothing of it is kept, and the
/// committer's next batch is written as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_copied_batch_with_a_refused_row_keeps_nothing() {
    let (_env, store) = store("store-copy-in-refused").await;
    let commit = committer(&store, Utc::now());
    let mut tasks: Vec<NewTask> = (0..40).map(|_| new_task_row()).collect();
    // Neither a command nor a script: the table's check refuses it.
    tasks[17].command = None;
    let refused = commit
        .write(Work {
            inserts: tasks.clone(),
            ..Work::default()
        })
        .await;
    assert!(refused.is_err(), "the batch was written");
    let ids: Vec<Uuid> = tasks.iter().map(|t| t.id).collect();
    assert!(store.tasks_by_ids(&ids).await.unwrap().is_empty());
    let next: Vec<NewTask> = (0..40).map(|_| new_task_row()).collect();
    assert_eq!(written(&commit, &next, 40).await.len(), 40);
    let ids: Vec<Uuid> = next.iter().map(|t| t.id).collect();
    assert_eq!(store.tasks_by_ids(&ids).await.unwrap().len(), 40);
}
