//! The store against the status machine: every store operation that moves a task is run
//! from every status, against a real Postgres, and each move it makes must be an edge of
//! `baton_core::Transition` — so a compare-and-set that expects the wrong status fails
//! here, not in production. Together the operations write every edge but the lease,
//! which lives in Redis only (docs/status-machine.md).

use baton_core::LeaseId;
use baton_core::RunnerId;
use baton_localcluster::testing as support;

use baton_core::status::can_transition;
use baton_core::{TaskStatus, Transition};
use baton_store::{
    Apply, Fence, FinishPolicy, FinishRun, RunEnd, StartRun, Store, StoreError, StoreOptions, Work,
};
use chrono::{DateTime, Duration, Utc};
use std::collections::{BTreeSet, HashMap};
use support::*;
use uuid::Uuid;

/// Whether the machine has `from -> to`, directly or through the one edge Postgres never
/// writes: a lease, which lives in its Redis claim while the row stays `queued`, so the
/// start that follows it moves the row `queued -> running`.
fn allowed(from: TaskStatus, to: TaskStatus) -> bool {
    can_transition(from, to)
        || (Transition::Lease.from().contains(&from) && can_transition(Transition::Lease.to(), to))
}

/// Every store operation that may move a task, as the callers use it.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// A start under a lease Redis just made (the row's is that of its last run).
    StartNewLease,
    /// A start under the lease the row holds (a `leased` row of the previous version).
    StartOwnLease,
    /// A runner's report, with attempts left or not.
    RunnerEnds(TaskStatus, bool),
    /// The server's end of a run its runner will not report, with attempts left or not.
    ServerEnds(TaskStatus, bool),
    Requeue,
    Promote,
    PromoteOverdue,
    ExpireDue,
    Cancel,
}

fn every_op() -> Vec<Op> {
    // A runner reports only the outcomes the machine lets it; the server ends a run
    // failed, timed out, or (a pending cancel) cancelled.
    let reports = TaskStatus::ALL
        .into_iter()
        .filter(|s| Transition::Report(*s).is_valid());
    let server = [
        TaskStatus::Failed,
        TaskStatus::TimedOut,
        TaskStatus::Cancelled,
    ];
    let mut ops = vec![Op::StartNewLease, Op::StartOwnLease];
    for attempts_left in [true, false] {
        ops.extend(reports.clone().map(|s| Op::RunnerEnds(s, attempts_left)));
        ops.extend(server.map(|s| Op::ServerEnds(s, attempts_left)));
    }
    ops.extend([
        Op::Requeue,
        Op::Promote,
        Op::PromoteOverdue,
        Op::ExpireDue,
        Op::Cancel,
    ]);
    ops
}

struct World {
    store: Store,
    /// The test's own connections, apart from the store's.
    db: sqlx::PgPool,
    runner: RunnerId,
}

impl World {
    /// A task put in `status` an hour ago (due, past its queue timeout, long started),
    /// held by the runner under a lease; on its first attempt of one or of two; and a
    /// task waiting for it.
    async fn task_in(
        &self,
        status: TaskStatus,
        attempts_left: bool,
        now: DateTime<Utc>,
    ) -> (Uuid, LeaseId) {
        let (task, _) = self.store.task_insert(&new_task_row(), now).await.unwrap();
        let lease = LeaseId::random();
        sqlx::query(
            "UPDATE tasks SET status = $2, attempt = 1, max_attempts = $3, runner_id = $4,
                              lease_id = $5, run_at = $6, queued_at = $6, started_at = $6,
                              finished_at = $6
             WHERE id = $1",
        )
        .bind(task.id)
        .bind(status.as_str())
        .bind(if attempts_left { 2 } else { 1 })
        .bind(self.runner)
        .bind(lease)
        .bind(now - Duration::hours(1))
        .execute(&self.db)
        .await
        .unwrap();
        // A task waiting for it (docs/pipelines.md): its end, if an operation ends it,
        // releases or skips that one in the same transaction.
        let waiting = baton_store::NewTask {
            needs_pending: 1,
            release_when: Some("on_success".into()),
            ..new_task_row()
        };
        self.store.task_insert(&waiting, now).await.unwrap();
        sqlx::query("INSERT INTO task_needs (task_id, needs_id) VALUES ($1, $2);")
            .bind(waiting.id)
            .bind(task.id)
            .execute(&self.db)
            .await
            .unwrap();
        sqlx::query("UPDATE tasks SET has_dependents = true WHERE id = $1")
            .bind(task.id)
            .execute(&self.db)
            .await
            .unwrap();
        (task.id, lease)
    }

    async fn statuses(&self) -> HashMap<Uuid, TaskStatus> {
        sqlx::query_as::<_, (Uuid, String)>("SELECT id, status FROM tasks")
            .fetch_all(&self.db)
            .await
            .unwrap()
            .into_iter()
            .map(|(id, s)| (id, s.parse().unwrap()))
            .collect()
    }

    /// Runs `op` on `task`; a refusal is an answer, any other error fails the test.
    async fn run(&self, op: Op, task: Uuid, lease: LeaseId, now: DateTime<Utc>) {
        let refused = |r: Result<(), StoreError>| match r {
            Ok(()) | Err(StoreError::Conflict { .. } | StoreError::NotFound) => {}
            Err(e) => panic!("{op:?}: {e}"),
        };
        let end = |outcome, runner_id| FinishRun {
            task,
            fence: Fence {
                lease_id: lease,
                runner_id,
            },
            end: RunEnd::by_server(outcome, "ended"),
            jitter_unit: 0.5,
        };
        let start = |lease_id| StartRun {
            task,
            lease_id,
            runner_id: self.runner,
            boot_id: None,
            leased_at: now,
        };
        let work = match op {
            Op::StartNewLease => Some(Work {
                starts: vec![start(LeaseId::random())],
                ..Work::default()
            }),
            Op::StartOwnLease => Some(Work {
                starts: vec![start(lease)],
                ..Work::default()
            }),
            Op::RunnerEnds(outcome, _) => Some(Work {
                finishes: vec![end(outcome, Some(self.runner))],
                ..Work::default()
            }),
            Op::ServerEnds(outcome, _) => Some(Work {
                finishes: vec![end(outcome, None)],
                ..Work::default()
            }),
            _ => None,
        };
        if let Some(work) = work {
            let how = Apply {
                policy: FinishPolicy {
                    backoff: baton_core::after_run::TASK_RETRY,
                    jitter_unit: 0.5,
                },
                ..Apply::at(now)
            };
            let done = self.store.write_now(&work, &how).await.unwrap();
            for start in done.starts {
                refused(start.map(drop));
            }
            for finish in done.finishes {
                refused(finish.map(drop));
            }
            return;
        }
        let store = &self.store;
        let answer = match op {
            Op::Requeue => store.task_requeue(task, lease, now).await.map(drop),
            Op::Promote => store.tasks_promote(&[task], now).await.map(drop),
            Op::PromoteOverdue => store.tasks_promote_overdue(now, now, 1000).await.map(drop),
            Op::ExpireDue => store.tasks_expire_due(now, 1000).await.map(drop),
            Op::Cancel => store.task_cancel(task, None, None, now).await.map(drop),
            _ => unreachable!("written above"),
        };
        refused(answer);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_status_the_store_writes_is_an_edge_of_the_machine() {
    let env = TestEnv::new("status-machine").await;
    let store = Store::connect_lazy(&env.database_url, &StoreOptions::default()).unwrap();
    store.migrate().await.unwrap();
    let runner = registered_runner(&store).await;
    let db = sqlx::PgPool::connect(&env.database_url).await.unwrap();
    let world = World { store, db, runner };
    let now = Utc::now();

    let mut written = BTreeSet::new();
    for op in every_op() {
        let attempts_left = matches!(op, Op::RunnerEnds(_, true) | Op::ServerEnds(_, true));
        for from in TaskStatus::ALL {
            let (task, lease) = world.task_in(from, attempts_left, now).await;
            let before = world.statuses().await;
            world.run(op, task, lease, now).await;
            // Every row, not just the one named: the repair pass's operations take any.
            for (id, to) in world.statuses().await {
                let was = before[&id];
                if was != to {
                    assert!(allowed(was, to), "{op:?} moved a task {was} -> {to}");
                    written.insert((was.as_str(), to.as_str()));
                }
            }
        }
    }

    let mut unwritten = Vec::new();
    for from in TaskStatus::ALL {
        for to in TaskStatus::ALL {
            let pair = (from.as_str(), to.as_str());
            let the_lease = from == Transition::Lease.from()[0] && to == Transition::Lease.to();
            if can_transition(from, to) && !the_lease && !written.contains(&pair) {
                unwritten.push(pair);
            }
        }
    }
    assert!(
        unwritten.is_empty(),
        "no store operation writes {unwritten:?}"
    );

    // The reads whose status lists are written from `TaskStatus` agree with the rows.
    let rows = world.statuses().await;
    let count = |pred: fn(&TaskStatus) -> bool| rows.values().filter(|s| pred(s)).count() as i64;
    let queues = world.store.queues_list(None).await.unwrap();
    let default = queues.iter().find(|q| q.name == "default").unwrap();
    assert_eq!(default.waiting, count(|s| *s == TaskStatus::Queued));
    assert_eq!(default.running, count(|s| s.is_dispatched()));
    let runners = world.store.runners_list().await.unwrap();
    let held = runners
        .iter()
        .find(|(r, _)| r.id == world.runner)
        .unwrap()
        .1;
    assert_eq!(held, count(|s| s.is_dispatched()));
    // The janitor keeps an ended task a waiting task needs (docs/pipelines.md): here, the
    // tasks put straight in a terminal status, whose waiting task no end released.
    let needed: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM tasks t WHERE t.status IN ({})
           AND EXISTS (SELECT 1 FROM task_needs n JOIN tasks d ON d.id = n.task_id
                       WHERE n.needs_id = t.id AND d.status = 'waiting')",
        baton_store::sql_list(TaskStatus::TERMINAL)
    )))
    .fetch_one(&world.db)
    .await
    .unwrap();
    assert!(needed > 0, "some ended task is still needed");
    let deleted = world
        .store
        .tasks_delete_finished(now + Duration::days(1), 10_000)
        .await
        .unwrap();
    assert_eq!(deleted as i64, count(|s| s.is_terminal()) - needed);
}
