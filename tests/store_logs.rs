//! The log cap, at the store: past `max_log_bytes` the runner's chunks are still
//! acknowledged (so it never resends them), but only the first bytes are kept and the log
//! is flagged truncated.

use baton_core::LeaseId;
use baton_localcluster::testing as support;

use baton_store::{NewTask, StartRun, Store, StoreOptions};
use chrono::Utc;
use support::*;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread")]
async fn output_past_the_cap_is_acknowledged_but_not_stored() {
    let env = TestEnv::new("store-log-cap").await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    let id = Uuid::now_v7();
    let (runner, lease) = (registered_runner(&store).await, LeaseId::random());
    store
        .task_insert(
            &NewTask {
                id,
                ..new_task_row()
            },
            Utc::now(),
        )
        .await
        .unwrap();
    store
        .task_start(
            StartRun {
                task: id,
                lease_id: lease,
                runner_id: runner,
                boot_id: Some(Uuid::new_v4()),
                leased_at: Utc::now(),
            },
            Utc::now(),
        )
        .await
        .unwrap();

    let cap = 10;
    // (offset, bytes, acknowledged through): the runner's offsets count what it sent,
    // kept or not, and a resend of a chunk already taken is acknowledged again.
    let appends: [(i64, &[u8], i64); 4] = [
        (0, b"12345678", 8),
        (8, b"abcdefgh", 16),
        (8, b"abcdefgh", 16),
        (16, b"more", 20),
    ];
    for (offset, bytes, acked) in appends {
        let appended = store
            .task_log_append(id, runner, lease, offset, bytes, cap)
            .await
            .unwrap();
        assert_eq!(appended.acked, acked, "append at {offset}");
    }

    let log = store.task_log_read(id, None, 0, 1 << 20).await.unwrap();
    assert_eq!(log.data, b"12345678ab");
    let task = store.task_get(id).await.unwrap();
    assert!(task.log_truncated);
    assert_eq!(task.log_size, 20);
}
