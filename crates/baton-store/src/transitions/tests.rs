//! The log-chunk and batching rules of the hot path's writes, without a database.

use super::*;
use baton_core::{LeaseId, RunnerId};

#[test]
fn rounds_hold_each_task_once() {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let items = [a, b, a, a, b];
    assert_eq!(
        rounds(&items, |&i| i),
        vec![vec![0, 1], vec![2, 4], vec![3]]
    );
    assert_eq!(
        in_order(3, vec![(2, 'c'), (0, 'a'), (1, 'b')]),
        vec!['a', 'b', 'c']
    );
}

fn holder(status: TaskStatus, size: i64) -> Holder {
    Holder {
        id: Uuid::nil(),
        status,
        runner_id: Some(RunnerId::from(Uuid::from_u128(1))),
        lease_id: Some(LeaseId::from(Uuid::from_u128(2))),
        attempt: 1,
        log_size: size,
    }
}

fn chunk(offset: i64, data: &[u8]) -> LogWrite {
    LogWrite {
        task: Uuid::nil(),
        runner_id: RunnerId::from(Uuid::from_u128(1)),
        lease_id: LeaseId::from(Uuid::from_u128(2)),
        offset,
        data: data.to_vec(),
        marks: Vec::new(),
    }
}

#[test]
fn chunks_are_taken_once_and_in_order() {
    let mut h = holder(TaskStatus::Running, 4);
    let overlap = chunk(2, b"cdef");
    let (ok, stored) = accept_chunk(Some(&mut h), &overlap, 100).unwrap();
    assert_eq!(ok.ack.acked, 6, "an overlap stores only its new tail");
    assert_eq!(bytes_of(stored), Some((1, 4, &b"ef"[..])));
    let resend = chunk(0, b"abcdef");
    let (again, stored) = accept_chunk(Some(&mut h), &resend, 100).unwrap();
    assert_eq!(
        (again.ack.acked, bytes_of(stored)),
        (6, None),
        "a resend stores nothing"
    );
    assert!(matches!(
        accept_chunk(Some(&mut h), &chunk(9, b"x"), 100),
        Err(StoreError::LogOffsetPastEnd {
            requested: 9,
            held: 6
        })
    ));
    let past_cap = chunk(6, b"ghij");
    let (capped, stored) = accept_chunk(Some(&mut h), &past_cap, 8).unwrap();
    assert!(capped.truncated);
    assert_eq!(
        (capped.ack.acked, bytes_of(stored)),
        (10, Some((1, 6, &b"gh"[..])))
    );
}

fn bytes_of(stored: Option<StoredChunk<'_>>) -> Option<(i32, i64, &[u8])> {
    stored.map(|c| (c.attempt, c.offset, c.data))
}

#[test]
fn a_chunk_keeps_the_marks_of_the_bytes_it_stores_only() {
    use baton_core::log_marks::{LogStream, Mark};
    let mark = |offset| Mark {
        offset,
        at_ms: 1_000 + offset,
        stream: LogStream::Stdout,
    };
    let mut h = holder(TaskStatus::Running, 4);
    // Bytes 2..10: 2 and 3 are held already; 8 and 9 are past the cap of 8.
    let overlap = LogWrite {
        marks: vec![mark(2), mark(5), mark(8)],
        ..chunk(2, b"cdefghij")
    };
    let (_, stored) = accept_chunk(Some(&mut h), &overlap, 8).unwrap();
    let stored = stored.expect("bytes 4..8 are new");
    assert_eq!((stored.offset, stored.data), (4, &b"efgh"[..]));
    assert_eq!(stored.marks, vec![mark(5)]);
}

#[test]
fn chunks_of_a_stale_lease_or_another_runner_are_refused() {
    let mut h = holder(TaskStatus::Running, 0);
    let mut stale = chunk(0, b"x");
    stale.lease_id = LeaseId::from(Uuid::from_u128(9));
    assert!(matches!(
        accept_chunk(Some(&mut h), &stale, 100),
        Err(StoreError::Conflict { .. })
    ));
    let mut other = chunk(0, b"x");
    other.runner_id = RunnerId::from(Uuid::from_u128(9));
    assert!(matches!(
        accept_chunk(Some(&mut h), &other, 100),
        Err(StoreError::NotFound)
    ));
    let mut done = holder(TaskStatus::Succeeded, 0);
    assert!(matches!(
        accept_chunk(Some(&mut done), &chunk(0, b"x"), 100),
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(h.log_size, 0, "nothing refused moves the log on");
}

/// The insert reads each task as `NewTask` serializes it, by column name: a field renamed
/// on one side only would insert NULL without an error.
#[test]
fn a_new_task_serializes_to_the_inserts_columns() {
    let task = NewTask {
        id: Uuid::nil(),
        queue: "q".into(),
        labels: vec![],
        command: Some(vec!["true".into()]),
        script: None,
        env: Default::default(),
        secret_env: Default::default(),
        payload: None,
        priority: 0,
        timeout_s: 1,
        queue_timeout_s: 1,
        max_attempts: 1,
        run_at: None,
        idempotency_key: None,
        notify_url: None,
        created_by: "t".into(),
        traceparent: None,
        schedule_id: None,
        scheduled_for: None,
        retry_of: None,
        retry_policy: None,
        concurrency_key: None,
        concurrency_limit: None,
        // Fields left out when empty: given, so that they are written.
        pipeline_id: Some(Uuid::nil()),
        job: Some("j".into()),
        release_when: Some("always".into()),
        needs_pending: 1,
        has_dependents: true,
    };
    let serialized = serde_json::to_value(&task).unwrap();
    let mut fields: Vec<&str> = serialized
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let statement = sql::insert(1, 2);
    let recordset = &statement[statement.find("AS r(").unwrap() + 5..];
    let recordset = &recordset[..recordset.find(')').unwrap()];
    let mut columns: Vec<&str> = recordset
        .split(',')
        .map(|c| c.split_whitespace().next().unwrap())
        .collect();
    fields.sort_unstable();
    columns.sort_unstable();
    assert_eq!(fields, columns);
}
