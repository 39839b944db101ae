//! One pass of an exchange: the lease script, the group commit, the script after it, and
//! each item's answer from what they did.

use super::super::DispatchError;
use super::super::Dispatcher;
use super::super::finish::{AfterCommit, finish_item};
use super::super::lease::{self, Pop};
use super::super::verdicts::{self, Verdicts};
use super::starts::{StartCheck, check_start, start_from_row, with_secrets};
use super::{ChunkKey, ItemKey, RunnerAnswer, RunnerCall, StartAnswer, chunk_key};
use crate::auth::Runner;
use crate::queueing::queue_entry;
use baton_client::RunningLease;
use baton_coord::{Popped, ReplayKey};
use baton_core::LeaseId;
use baton_core::TaskStatus;
use baton_store::{Done, Fence, LogAppend, Started, StoreError, TaskRecord, Work};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// One pass: Redis, the group commit, Redis. Every item is matched to its claim, its
/// write's result and its answer by its key ([`ItemKey`]).
pub(super) async fn pass(
    dispatcher: &Dispatcher,
    runner: &Runner,
    call: &RunnerCall,
    max: u32,
    replay: &ReplayKey,
) -> Result<RunnerAnswer, DispatchError> {
    let running: &[RunningLease] = call.running.as_deref().unwrap_or_default();
    let mut claims_of: Vec<Uuid> = call.starts.iter().map(|s| s.task).collect();
    claims_of.extend(running.iter().map(|r| r.task_id));
    let pop = lease::pop(
        dispatcher,
        runner,
        Pop {
            boot_id: call.boot_id.unwrap_or_default(),
            max,
            replay,
            // A runner that asked for work and is given none here (it is paused, or this
            // node drains or rejoins) may be resending, unmarked, an exchange that leased
            // and started tasks: the script still looks its record up.
            retry: call.retry || (max == 0 && call.max > 0),
            claims_of: &claims_of,
        },
    )
    .await;
    let (claims, popped, replayed, redis_error) = match pop {
        Ok(p) => (p.claims, p.popped, p.replayed, None),
        Err(e) => (HashMap::new(), Vec::new(), Vec::new(), Some(e)),
    };
    if let Some(e) = redis_error
        .as_ref()
        .filter(|_| !call.has_items() && call.running.is_none())
    {
        return Err(e.clone().into());
    }

    // Each start (once, whatever the times it is sent) with how it is decided before
    // Postgres is asked.
    let mut checks: Vec<(ItemKey, StartCheck)> = Vec::with_capacity(call.starts.len());
    for start in &call.starts {
        let key = start.key();
        if checks.iter().any(|(k, _)| *k == key) {
            continue;
        }
        let check = match &redis_error {
            Some(e) => StartCheck::Refused(e.clone().into()),
            None => check_start(
                runner,
                call.boot_id,
                start.task,
                start.lease_id,
                claims.get(&start.task),
            ),
        };
        checks.push((key, check));
    }
    let mut work = Work {
        starts: checks
            .iter()
            .filter_map(|(_, c)| match c {
                StartCheck::Record(s) => Some(*s),
                _ => None,
            })
            .collect(),
        ..ends_of(runner, call)
    };
    if call.start_leased {
        // Checked by construction: the script has just claimed each under its lease
        // (or, for a resend, found it still claimed so). They are answered through the
        // rows (`lease::views`).
        work.starts.extend(lease::starts_of(
            runner,
            call.boot_id,
            &popped,
            &replayed,
            dispatcher.clock.now(),
        ));
    }
    work.reads.extend(popped.iter().map(|p| p.task_id));
    work.reads.extend(replayed.iter().map(|(task, _)| *task));
    // A start's answer carries its task's secrets, from the row it recorded.
    work.reads.extend(
        checks
            .iter()
            .filter(|(_, check)| !matches!(check, StartCheck::Refused(_)))
            .map(|(key, _)| key.task),
    );
    work.reads.extend(running.iter().map(|r| r.task_id));
    // Each item joins its own task's trace, where the runner's span for it is.
    let spans: Vec<(Item, tracing::Span)> = call
        .starts
        .iter()
        .map(|s| {
            let span = item_span("task.start", s.task, s.traceparent.as_deref());
            (Item::Start(s.key()), span)
        })
        .chain(call.completions.iter().map(|c| {
            let span = item_span("task.complete", c.task, c.traceparent.as_deref());
            (Item::Completion(c.key()), span)
        }))
        .collect();
    let keys = WriteKeys::of(&work);

    let done = match dispatcher.commit.write(work).await {
        Ok(done) => done,
        Err(e) if !call.has_items() => {
            requeue(dispatcher, &popped).await;
            return Err(e.into());
        }
        Err(e) => {
            requeue(dispatcher, &popped).await;
            return Ok(failed(call, checks, e));
        }
    };
    let Done {
        starts,
        logs,
        finishes,
        reads,
        ..
    } = done;
    let Written {
        mut starts,
        logs,
        finishes,
    } = keys.answered(starts, logs, finishes);
    let rows: HashMap<Uuid, TaskRecord> = reads.into_iter().map(|t| (t.id, t)).collect();

    // Claims the commit showed to be stale, and runs that ended: one Redis script.
    let mut dropped: Vec<(TaskRecord, LeaseId)> = Vec::new();
    // Starts Postgres refused while the task stays queued: this runner may not take it.
    let mut refused: Vec<Popped> = Vec::new();
    let start_answers: HashMap<ItemKey, Result<StartAnswer, DispatchError>> = checks
        .into_iter()
        .map(|(key, check)| {
            let answer = match check {
                StartCheck::Record(_) => {
                    let answer = starts
                        .remove(&key)
                        .expect("the store answers every start it is given");
                    if answer.is_err()
                        && let Some(row) = rows.get(&key.task)
                    {
                        if row.status == TaskStatus::Queued {
                            refused.push(Popped::of(&queue_entry(row), key.lease));
                        } else {
                            // Cancelled or expired before its start: this lease's claim goes.
                            dropped.push((row.clone(), key.lease));
                        }
                    }
                    answer.map_err(DispatchError::from)
                }
                StartCheck::AskRow => start_from_row(rows.get(&key.task), runner.id, key.lease),
                StartCheck::Refused(e) => Err(e),
            };
            let answer =
                answer.and_then(|started| with_secrets(dispatcher, started, rows.get(&key.task)));
            (key, answer)
        })
        .collect();
    let lease::Views {
        tasks,
        moved_on: not_leasable,
        refused: not_for_this_runner,
        claims_lost,
    } = lease::views(
        dispatcher,
        runner,
        (&popped, &replayed),
        &rows,
        lease::Handing {
            started: call.start_leased,
            secrets_at_start: call.secrets_at_start,
        },
    )
    .await;
    let mut ended: Vec<(&TaskRecord, LeaseId)> = finishes
        .iter()
        .filter_map(|(key, r)| Some((r.as_ref().ok()?, key.lease)))
        .collect();
    ended.extend(dropped.iter().map(|(row, lease)| (row, *lease)));
    ended.extend(not_leasable.iter().map(|(row, lease)| (row, *lease)));
    let mut log_news: Vec<Uuid> = logs
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|((key, _), _)| key.task)
        .collect();
    log_news.extend(ended.iter().map(|(row, _)| row.id));
    log_news.sort();
    log_news.dedup();
    AfterCommit::of(&ended, &log_news).spawn(&dispatcher.coord);
    adopt_lost_claims(dispatcher, &claims_lost).await;
    refused.extend(not_for_this_runner);
    if !refused.is_empty() {
        tracing::warn!(runner.id = %runner.id, tasks = refused.len(), "postgres refused starts for this runner (deleted, paused, not matching, or its group full): back to their queues");
        claim_groups_of(dispatcher, &refused, &rows).await;
        requeue(dispatcher, &refused).await;
        mirror_pauses(dispatcher).await;
    }
    for popped in lease::unread(&popped, &rows) {
        // Its row is gone (deleted): nothing to hand out, and nothing to keep a claim for.
        if let Err(e) = dispatcher
            .coord
            .claim_release(popped.task_id, popped.lease_id)
            .await
        {
            tracing::warn!(error = %e, task.id = %popped.task_id, "could not drop a claim on a deleted task; repair will");
        }
    }

    let (logs, completions) = before_start(dispatcher, runner, logs, finishes).await;
    for (item, span) in &spans {
        let refused = match item {
            Item::Start(key) => start_answers.get(key).and_then(|r| r.as_ref().err()),
            Item::Completion(key) => completions.get(key).and_then(|r| r.as_ref().err()),
        };
        span.record("result", refused.map_or("done", DispatchError::kind));
    }
    drop(spans);
    // A run whose completion this same exchange carries is over, and the runner hears
    // how from the completion's answer: calling its lease gone as well would only tell
    // the runner to stop a task that has stopped, and it is not overdue.
    let reported = |task: &Uuid| call.completions.iter().any(|c| c.task == *task);
    let verdicts = if call.running.is_some() && redis_error.is_none() {
        let mut verdicts = verdicts::of(runner, running, &rows, &claims);
        verdicts.gone.retain(|task| !reported(task));
        let unreported: Vec<RunningLease> = running
            .iter()
            .filter(|lease| !reported(&lease.task_id))
            .copied()
            .collect();
        let overdue =
            verdicts::end_overdue_runs(dispatcher, runner, &unreported, &rows, call.running_as_of)
                .await;
        verdicts.cancel.retain(|task| !overdue.contains(task));
        verdicts.gone.extend(overdue);
        verdicts
    } else {
        Verdicts::default()
    };
    if let (Some(_), Some(boot)) = (&call.running, call.boot_id) {
        verdicts::end_forgotten_runs(dispatcher, runner, boot, running, call.running_as_of).await;
    }
    Ok(RunnerAnswer {
        starts: start_answers,
        logs,
        completions,
        tasks,
        verdicts,
        ..RunnerAnswer::default()
    })
}

/// An item a span is about.
enum Item {
    Start(ItemKey),
    Completion(ItemKey),
}

/// The keys of the items a pass writes, in the order of its [`Work`], which the store
/// answers in: what pairs each write with its result, once, here.
struct WriteKeys {
    starts: Vec<ItemKey>,
    logs: Vec<ChunkKey>,
    finishes: Vec<ItemKey>,
}

/// Each written item's result, by its key.
struct Written {
    starts: HashMap<ItemKey, Result<Started, StoreError>>,
    logs: HashMap<ChunkKey, Result<LogAppend, StoreError>>,
    finishes: HashMap<ItemKey, Result<TaskRecord, StoreError>>,
}

impl WriteKeys {
    fn of(work: &Work) -> WriteKeys {
        WriteKeys {
            starts: work
                .starts
                .iter()
                .map(|s| ItemKey {
                    task: s.task,
                    lease: s.lease_id,
                })
                .collect(),
            logs: work.logs.iter().map(chunk_key).collect(),
            finishes: work
                .finishes
                .iter()
                .map(|f| ItemKey {
                    task: f.task,
                    lease: f.fence.lease_id,
                })
                .collect(),
        }
    }

    fn answered(
        self,
        starts: Vec<Result<Started, StoreError>>,
        logs: Vec<Result<LogAppend, StoreError>>,
        finishes: Vec<Result<TaskRecord, StoreError>>,
    ) -> Written {
        Written {
            starts: by_key(self.starts.into_iter().zip(starts)),
            logs: by_key(self.logs.into_iter().zip(logs)),
            finishes: by_key(self.finishes.into_iter().zip(finishes)),
        }
    }
}

/// Results by their item's key. An item sent twice in one call is answered by what took
/// effect: the first success, else the last refusal (a runner reporting two ends of one
/// run has the first recorded, and its claim dropped with it).
fn by_key<K: Eq + std::hash::Hash, T>(
    results: impl Iterator<Item = (K, Result<T, StoreError>)>,
) -> HashMap<K, Result<T, StoreError>> {
    let mut by_key: HashMap<K, Result<T, StoreError>> = HashMap::new();
    for (key, result) in results {
        match by_key.entry(key) {
            Entry::Occupied(mut kept) if kept.get().is_err() => {
                *kept.get_mut() = result;
            }
            Entry::Occupied(_) => {}
            Entry::Vacant(slot) => {
                slot.insert(result);
            }
        }
    }
    by_key
}

/// Reports of a lease the runner holds but has not started: Postgres does not know the
/// lease yet (the row says `queued`, with no runner) and finds no such task of this
/// runner's; the claim tells it is a report out of order, a conflict like any other.
async fn before_start(
    dispatcher: &Dispatcher,
    runner: &Runner,
    logs: HashMap<ChunkKey, Result<LogAppend, StoreError>>,
    finishes: HashMap<ItemKey, Result<TaskRecord, StoreError>>,
) -> (
    HashMap<ChunkKey, Result<LogAppend, DispatchError>>,
    HashMap<ItemKey, Result<TaskRecord, DispatchError>>,
) {
    let mut unknown: Vec<ItemKey> = logs
        .iter()
        .filter(|(_, r)| matches!(r, Err(StoreError::NotFound)))
        .map(|((key, _), _)| *key)
        .chain(
            finishes
                .iter()
                .filter(|(_, r)| matches!(r, Err(StoreError::NotFound)))
                .map(|(key, _)| *key),
        )
        .collect();
    unknown.sort_by_key(|k| (k.task, k.lease));
    unknown.dedup();
    let mut unstarted: HashSet<ItemKey> = HashSet::new();
    if !unknown.is_empty() {
        let ids: Vec<Uuid> = unknown.iter().map(|key| key.task).collect();
        if let Ok(claims) = dispatcher.coord.claims_by_task(&ids).await {
            unstarted = unknown
                .into_iter()
                .filter(|key| {
                    claims
                        .get(&key.task)
                        .is_some_and(|c| c.lease_id == key.lease && c.runner == Some(runner.id))
                })
                .collect();
        }
    }
    let answered = |key: &ItemKey, error: StoreError, reason: &'static str| {
        if unstarted.contains(key) {
            DispatchError::Stale {
                status: baton_core::TaskStatus::Leased,
                reason,
            }
        } else {
            error.into()
        }
    };
    let logs = logs
        .into_iter()
        .map(|(key, r)| {
            let r =
                r.map_err(|e| answered(&key.0, e, "logs are accepted only while the task runs"));
            (key, r)
        })
        .collect();
    let completions = finishes
        .into_iter()
        .map(|(key, r)| {
            let r = r.map_err(|e| answered(&key, e, "the task is not running"));
            (key, r)
        })
        .collect();
    (logs, completions)
}

/// The span of one item: under the runner's span for it when it sent one, else under the
/// request's.
fn item_span(name: &'static str, task: Uuid, traceparent: Option<&str>) -> tracing::Span {
    let span = match name {
        "task.start" => {
            tracing::info_span!("task.start", task.id = %task, result = tracing::field::Empty)
        }
        _ => tracing::info_span!("task.complete", task.id = %task, result = tracing::field::Empty),
    };
    baton_client::trace_context::adopt_parent(&span, traceparent);
    span
}

/// Postgres could not take the pass: what was popped goes back to its queue, claim
/// dropped, in one script each (design.md §4.3) — but only what Postgres confirms did not
/// start. An error can come after the commit took effect (the connection lost while the
/// answer was on its way), and a task started under its lease and queued again would run
/// twice. When Postgres cannot even say, the claims stay and the reconciler requeues them
/// at the ack timeout, by the same fenced path.
async fn requeue(dispatcher: &Dispatcher, popped: &[Popped]) {
    if popped.is_empty() {
        return;
    }
    let leases: Vec<(Uuid, LeaseId)> = popped.iter().map(|p| (p.task_id, p.lease_id)).collect();
    let unstarted = match dispatcher
        .store
        .tasks_void_leases(&leases, dispatcher.clock.now())
        .await
    {
        Ok(voided) => voided,
        Err(e) => {
            tracing::warn!(error = %e, "could not void leases Postgres may not have recorded; the reconciler will requeue them");
            return;
        }
    };
    let node = dispatcher.node_id();
    for p in popped.iter().filter(|p| unstarted.contains(&p.task_id)) {
        if let Err(e) = dispatcher.coord.claim_requeue(&node, p).await {
            tracing::warn!(error = %e, task.id = %p.task_id, "could not put a task back; the reconciler will");
        }
    }
}

/// The log chunks and run ends of `call`, as the store writes them.
fn ends_of(runner: &Runner, call: &RunnerCall) -> Work {
    Work {
        logs: call.logs.clone(),
        finishes: call
            .completions
            .iter()
            .map(|c| {
                let fence = Fence {
                    lease_id: c.lease_id,
                    runner_id: Some(runner.id),
                };
                finish_item(c.task, fence, c.end.clone())
            })
            .collect(),
        ..Work::default()
    }
}

/// Postgres could not take the pass: every item is answered with the (retryable) error.
fn failed(
    call: &RunnerCall,
    checks: Vec<(ItemKey, StartCheck)>,
    error: StoreError,
) -> RunnerAnswer {
    let error = DispatchError::from(error);
    RunnerAnswer {
        starts: checks
            .into_iter()
            .map(|(key, check)| match check {
                StartCheck::Refused(e) => (key, Err(e)),
                _ => (key, Err(error.clone())),
            })
            .collect(),
        logs: call
            .logs
            .iter()
            .map(|w| (chunk_key(w), Err(error.clone())))
            .collect(),
        completions: call
            .completions
            .iter()
            .map(|c| (c.key(), Err(error.clone())))
            .collect(),
        ..RunnerAnswer::default()
    }
}

/// Popped tasks that run under another lease: Redis lost their run's claim in a failover.
/// The claims just made become theirs, keeping the group slots (design.md §4.13); one
/// that fails here is adopted by the reconciler's next pass, by the same script.
async fn adopt_lost_claims(dispatcher: &Dispatcher, lost: &[baton_coord::ClaimAdopt]) {
    if lost.is_empty() {
        return;
    }
    tracing::warn!(
        tasks = lost.len(),
        "popped tasks already running: their claims were lost in Redis, adopted for their runs"
    );
    let now_ms = dispatcher.clock.now().timestamp_millis();
    if let Err(e) = dispatcher.coord.claims_adopt(now_ms, lost).await {
        tracing::warn!(error = %e, "lost claims not adopted; the reconciler will");
    }
}

/// A start refused may be one whose group Redis thinks freer than Postgres does (a run's
/// claim and slot lost in a failover): the runs of its group are claimed again at once,
/// slots and all, or the task put back would be popped and refused again until the
/// repair pass.
async fn claim_groups_of(
    dispatcher: &Dispatcher,
    refused: &[Popped],
    rows: &HashMap<Uuid, TaskRecord>,
) {
    let mut groups: Vec<String> = refused
        .iter()
        .filter_map(|p| rows.get(&p.task_id)?.concurrency_key.clone())
        .collect();
    groups.sort();
    groups.dedup();
    if groups.is_empty() {
        return;
    }
    match dispatcher
        .claimer()
        .claim_groups(&groups, dispatcher.clock.now())
        .await
    {
        Ok(0) => {}
        Ok(runs) => tracing::warn!(
            runs,
            "runs of a refused start's group had lost their claims in Redis: claimed again"
        ),
        Err(e) => tracing::debug!(error = %e, "groups not claimed again; the repair pass will"),
    }
}

/// A start refused may be one from a queue Redis thinks open but Postgres has paused (its
/// `paused` copy lost in a failover): the copy is mended at once, or the task put back
/// would be popped and refused again until the repair pass.
async fn mirror_pauses(dispatcher: &Dispatcher) {
    let mirrored = async {
        // The marks before Postgres: a pause written after this read is newer than it.
        let marks = dispatcher
            .coord
            .paused_marks()
            .await
            .map_err(|e| e.to_string())?;
        let paused = dispatcher
            .store
            .queues_paused()
            .await
            .map_err(|e| e.to_string())?;
        dispatcher
            .coord
            .paused_mirror(&marks, &paused)
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    match mirrored {
        Ok(true) => tracing::warn!("the paused queues in Redis did not match Postgres: mirrored"),
        Ok(false) => {}
        Err(e) => tracing::debug!(error = %e, "paused queues not mirrored; the repair pass will"),
    }
}
