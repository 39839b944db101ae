//! The general path: one statement per kind of transition, in the caller's transaction,
//! each kind in rounds in which a task appears once (one statement changes a row only
//! once). Log chunks are decided against the rows locked first; everything else is a
//! compare-and-set that says which rows it changed.

use super::binds::{bind_finishes, bind_starts, insert_rows};
use super::sql;
use super::{
    Apply, FinishRun, Holder, LogWrite, StartRun, Started, StoredChunk, accept_chunk,
    finish_refused, in_order, rounds,
};
use crate::error::StoreError;
use crate::logs::LogAppend;
use crate::tasks::{NewTask, TaskRecord};
use crate::transition::Transition;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

pub(super) async fn insert(
    conn: &mut PgConnection,
    tasks: &[NewTask],
    now: DateTime<Utc>,
) -> Result<Vec<Result<(TaskRecord, bool), StoreError>>, StoreError> {
    if tasks.is_empty() {
        return Ok(Vec::new());
    }
    let created = super::by_id(
        sqlx::query_as::<_, TaskRecord>(sqlx::AssertSqlSafe(sql::insert(1, 2)))
            .bind(insert_rows(tasks))
            .bind(now)
            .fetch_all(&mut *conn)
            .await?,
    );
    super::with_repeated_keys(&mut *conn, tasks, created).await
}

pub(super) async fn start(
    conn: &mut PgConnection,
    starts: &[StartRun],
    now: DateTime<Utc>,
    transitions: &mut Vec<Transition>,
) -> Result<Vec<Result<Started, StoreError>>, StoreError> {
    let statement = format!("{} RETURNING t.*", sql::start(1));
    let mut answered = Vec::with_capacity(starts.len());
    for round in rounds(starts, |s| s.task) {
        let batch: Vec<&StartRun> = round.iter().map(|&i| &starts[i]).collect();
        let changed = super::by_id(
            bind_starts(
                sqlx::query_as::<_, TaskRecord>(sqlx::AssertSqlSafe(statement.clone())),
                &batch,
                now,
            )
            .fetch_all(&mut *conn)
            .await?,
        );
        transitions.extend(Transition::all(changed.values()));
        let refused: Vec<Uuid> = batch
            .iter()
            .filter(|s| !changed.contains_key(&s.task))
            .map(|s| s.task)
            .collect();
        let holders = holders_of(conn, &refused).await?;
        for (&i, s) in round.iter().zip(&batch) {
            let answer = match changed.get(&s.task) {
                Some(row) => Ok(Started {
                    status: TaskStatus::Running,
                    attempt: row.attempt,
                }),
                None => super::start_refused(holders.get(&s.task), s),
            };
            answered.push((i, answer));
        }
    }
    Ok(in_order(starts.len(), answered))
}

pub(super) async fn holders_of(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, Holder>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    Ok(sqlx::query_as::<_, Holder>(
        "SELECT id, status, runner_id, lease_id, attempt, log_size FROM tasks WHERE id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|h| (h.id, h))
    .collect())
}

pub(super) async fn log_append(
    conn: &mut PgConnection,
    writes: &[LogWrite],
    cap: i64,
) -> Result<Vec<Result<LogAppend, StoreError>>, StoreError> {
    if writes.is_empty() {
        return Ok(Vec::new());
    }
    let mut ids: Vec<Uuid> = writes.iter().map(|w| w.task).collect();
    ids.sort();
    ids.dedup();
    // Locked in id order, so two batches never wait on each other in a circle.
    let mut holders: HashMap<Uuid, Holder> = sqlx::query_as::<_, Holder>(
        "SELECT id, status, runner_id, lease_id, attempt, log_size FROM tasks
         WHERE id = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|h| (h.id, h))
    .collect();
    let mut chunks: Vec<(Uuid, StoredChunk)> = Vec::new();
    let mut truncated: HashSet<Uuid> = HashSet::new();
    let mut answers = Vec::with_capacity(writes.len());
    for w in writes {
        answers.push(
            accept_chunk(holders.get_mut(&w.task), w, cap).map(|(append, stored)| {
                if let Some(stored) = stored {
                    chunks.push((w.task, stored));
                }
                if append.truncated {
                    truncated.insert(w.task);
                }
                append.ack
            }),
        );
    }
    if !chunks.is_empty() {
        sqlx::query(
            r#"INSERT INTO task_logs (task_id, attempt, "offset", data, marks)
               SELECT * FROM unnest($1::uuid[], $2::int4[], $3::int8[], $4::bytea[],
                                    $5::text[])"#,
        )
        .bind(chunks.iter().map(|c| c.0).collect::<Vec<_>>())
        .bind(chunks.iter().map(|c| c.1.attempt).collect::<Vec<_>>())
        .bind(chunks.iter().map(|c| c.1.offset).collect::<Vec<_>>())
        .bind(chunks.iter().map(|c| c.1.data).collect::<Vec<_>>())
        .bind(
            chunks
                .iter()
                .map(|c| (!c.1.marks.is_empty()).then(|| baton_core::log_marks::encode(&c.1.marks)))
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
    }
    let grown: Vec<(Uuid, i64)> = ids
        .iter()
        .filter_map(|id| holders.get(id))
        .map(|h| (h.id, h.log_size))
        .collect();
    if !grown.is_empty() {
        // Only the log columns change: a HOT update, no index touched.
        sqlx::query(
            "UPDATE tasks t SET log_size = r.size, log_truncated = t.log_truncated OR r.truncated
             FROM unnest($1::uuid[], $2::int8[], $3::bool[]) AS r(id, size, truncated)
             WHERE t.id = r.id AND t.log_size <> r.size",
        )
        .bind(grown.iter().map(|g| g.0).collect::<Vec<_>>())
        .bind(grown.iter().map(|g| g.1).collect::<Vec<_>>())
        .bind(
            grown
                .iter()
                .map(|g| truncated.contains(&g.0))
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(answers)
}

/// The answers to run ends, and the runs they ended (to count once committed).
pub(super) struct Finished {
    pub(super) answers: Vec<Result<TaskRecord, StoreError>>,
    pub(super) ended: Vec<crate::runs::EndedRun>,
    pub(super) transitions: Vec<Transition>,
}

pub(super) async fn finish(
    conn: &mut PgConnection,
    finishes: &[FinishRun],
    how: &Apply,
) -> Result<Finished, StoreError> {
    let mut written = Vec::new();
    if finishes.is_empty() {
        return Ok(Finished {
            answers: Vec::new(),
            ended: written,
            transitions: Vec::new(),
        });
    }
    let statement = format!(
        "WITH ended AS ({} RETURNING t.*), webhooks AS ({}) SELECT * FROM ended",
        sql::finish(1),
        sql::outbox_of("ended", 11)
    );
    let mut answered = Vec::with_capacity(finishes.len());
    let mut transitions = Vec::new();
    for round in rounds(finishes, |f| f.task) {
        let batch: Vec<&FinishRun> = round.iter().map(|&i| &finishes[i]).collect();
        let ended = super::by_id(
            bind_finishes(
                sqlx::query_as::<_, TaskRecord>(sqlx::AssertSqlSafe(statement.clone())),
                &batch,
                how,
            )
            .fetch_all(&mut *conn)
            .await?,
        );
        written.extend(ended.values().filter_map(crate::runs::EndedRun::of_run));
        transitions.extend(Transition::all(ended.values()));
        let refused: Vec<Uuid> = batch
            .iter()
            .filter(|f| !ended.contains_key(&f.task))
            .map(|f| f.task)
            .collect();
        let as_they_stand = super::rows_of(conn, &refused).await?;
        for (&i, f) in round.iter().zip(&batch) {
            let answer = match ended.get(&f.task) {
                Some(row) => Ok(row.clone()),
                None => finish_refused(as_they_stand.get(&f.task), f),
            };
            answered.push((i, answer));
        }
    }
    Ok(Finished {
        answers: in_order(finishes.len(), answered),
        ended: written,
        transitions,
    })
}

pub(super) async fn read(
    conn: &mut PgConnection,
    ids: &[Uuid],
) -> Result<Vec<TaskRecord>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_as::<_, TaskRecord>(super::READ_ROWS)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await?)
}
