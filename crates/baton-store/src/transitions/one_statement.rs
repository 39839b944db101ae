//! The common batch — no log chunks, no task twice — as one statement: the starts, the
//! run ends with their outbox rows, the inserts and the reads are each a
//! data-modifying (or reading) `WITH` part of it, so the whole batch is one round trip
//! to Postgres and one commit (the statement's own), atomic as a transaction would be.
//! The parts see the same snapshot, so a task may be written only once, and a read of a
//! task the batch writes is answered from what the write returned (or, when it changed
//! nothing, from a read after the statement), never from the snapshot.

use super::binds::{bind_finishes, bind_starts, insert_rows};
use super::sql;
use super::{
    Apply, Done, Holder, Started, Work, finish_refused, start_refused, with_repeated_keys,
};
use crate::error::StoreError;
use crate::metered::MeteredPool;
use crate::tasks::TaskRecord;
use crate::transition::Transition;
use baton_core::TaskStatus;
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// Whether `work` can be written as one statement.
pub(crate) fn eligible(work: &Work) -> bool {
    if !work.logs.is_empty() {
        return false;
    }
    let mut seen = HashSet::new();
    let once = work
        .starts
        .iter()
        .map(|s| s.task)
        .chain(work.finishes.iter().map(|f| f.task))
        .all(|id| seen.insert(id));
    // A read of a task inserted by the same statement would see the snapshot from
    // before it: no row.
    once && !work.inserts.iter().any(|t| work.reads.contains(&t.id))
}

/// The statement for the kinds `work` holds: only those parts, so Postgres plans no more
/// than it runs; each set of parts is its own prepared statement. Parameters, in order:
/// starts (8), run ends (13), inserts (2), reads (1), of the parts present.
fn statement(work: &Work, reads: bool) -> String {
    let (mut parts, mut selects, mut next) = (Vec::new(), Vec::new(), 1);
    if !work.starts.is_empty() {
        parts.push(format!("s AS ({} RETURNING t.*)", sql::start(next)));
        selects.push("SELECT 's' AS kind, s.* FROM s");
        next += 8;
    }
    if !work.finishes.is_empty() {
        parts.push(format!("f AS ({} RETURNING t.*)", sql::finish(next)));
        parts.push(format!("w AS ({})", sql::outbox_of("f", next + 10)));
        selects.push("SELECT 'f' AS kind, f.* FROM f");
        next += 13;
    }
    if !work.inserts.is_empty() {
        parts.push(format!("i AS ({})", sql::insert(next, next + 1)));
        selects.push("SELECT 'i' AS kind, i.* FROM i");
        next += 2;
    }
    if reads {
        parts.push(format!(
            "r AS (SELECT * FROM tasks WHERE id = ANY(${next}))"
        ));
        selects.push("SELECT 'r' AS kind, r.* FROM r");
    }
    format!("WITH {} {}", parts.join(", "), selects.join(" UNION ALL "))
}

/// A row the statement returned, and which part returned it.
#[derive(sqlx::FromRow)]
struct Returned {
    kind: String,
    #[sqlx(flatten)]
    task: TaskRecord,
}

/// Writes `work` (which must be [`eligible`]) in one statement.
pub(crate) async fn write(
    pool: &MeteredPool,
    work: &Work,
    how: &Apply,
    before_commit: impl FnOnce(),
) -> Result<Done, StoreError> {
    let mut conn = pool.acquire().await?;
    let starts = &work.starts;
    let finishes: Vec<_> = work.finishes.iter().collect();
    let written: HashSet<Uuid> = starts
        .iter()
        .map(|s| s.task)
        .chain(finishes.iter().map(|f| f.task))
        .collect();
    let mut reads = work.reads.clone();
    reads.sort();
    reads.dedup();
    let (read_written, plain_reads): (Vec<Uuid>, Vec<Uuid>) =
        reads.into_iter().partition(|id| written.contains(id));
    let mut query = sqlx::query_as::<_, Returned>(sqlx::AssertSqlSafe(statement(
        work,
        !plain_reads.is_empty(),
    )));
    if !starts.is_empty() {
        let starts: Vec<_> = starts.iter().collect();
        query = bind_starts(query, &starts, how.now);
    }
    if !finishes.is_empty() {
        query = bind_finishes(query, &finishes, how);
    }
    if !work.inserts.is_empty() {
        query = query.bind(insert_rows(&work.inserts)).bind(how.now);
    }
    if !plain_reads.is_empty() {
        query = query.bind(&plain_reads);
    }
    before_commit();
    let returned = query.fetch_all(&mut *conn).await?;
    conn.committed().await?;

    let (mut started, mut ended, mut created, mut read) =
        (HashMap::new(), HashMap::new(), HashMap::new(), Vec::new());
    for Returned { kind, task } in returned {
        match kind.as_str() {
            "s" => {
                started.insert(task.id, task);
            }
            "f" => {
                ended.insert(task.id, task);
            }
            "i" => {
                created.insert(task.id, task);
            }
            _ => read.push(task),
        }
    }
    // The refused are read again, to tell each why.
    let refused: Vec<Uuid> = starts
        .iter()
        .map(|s| s.task)
        .filter(|id| !started.contains_key(id))
        .chain(
            finishes
                .iter()
                .map(|f| f.task)
                .filter(|id| !ended.contains_key(id)),
        )
        .collect();
    let as_they_stand = super::rows_of(&mut conn, &refused).await?;
    let mut transitions = Transition::all(created.values());
    transitions.extend(Transition::all(started.values().chain(ended.values())));
    let inserts = with_repeated_keys(&mut conn, &work.inserts, created).await?;
    read.extend(read_written.iter().filter_map(|id| {
        started
            .get(id)
            .or_else(|| ended.get(id))
            .or_else(|| as_they_stand.get(id))
            .cloned()
    }));
    let written: Vec<crate::runs::EndedRun> = ended
        .values()
        .filter_map(crate::runs::EndedRun::of_run)
        .collect();
    Ok(Done {
        inserts,
        starts: starts
            .iter()
            .map(|s| match started.get(&s.task) {
                Some(row) => Ok(Started {
                    status: TaskStatus::Running,
                    attempt: row.attempt,
                }),
                None => start_refused(as_they_stand.get(&s.task).map(Holder::of).as_ref(), s),
            })
            .collect(),
        logs: Vec::new(),
        finishes: finishes
            .iter()
            .map(|f| match ended.get(&f.task) {
                Some(row) => Ok(row.clone()),
                None => finish_refused(as_they_stand.get(&f.task), f),
            })
            .collect(),
        reads: read,
        transitions,
        ended: written,
    })
}
