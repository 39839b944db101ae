//! The strict part of the verdict: no run ends without a reason the drill can name. Every
//! end of a run that is not its runner's word on an exit (a success, an exit code, a
//! cancel) — the server's verdicts (`runner lost`, `runner restarted`, the run forgotten,
//! `timed out`) and the runner's own kills (its timer, a signal) — is matched to a cause:
//! a fault of the fault log that could have brought that verdict about and that overlapped
//! the run, or its timeout really having passed while it ran. Anything else is a
//! violation, whatever status the task ended in and whether or not it was retried.

use baton_core::after_run::{FORGOTTEN_ERROR, RUNNER_TIMEOUT_ERROR, SERVER_TIMEOUT_ERROR};
use baton_core::reconcile::Reason;
use baton_store::audit;
use sqlx::PgConnection;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// What a fault touched, as far as a run's end can be blamed on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Runner `i` (0-based) was killed: its runs died with it.
    RunnerKilled(usize),
    /// Runner `i`'s link to the cluster was cut, one-way or slow: it may have gone unheard
    /// past a threshold, or fenced itself and killed its runs.
    RunnerLink(usize),
    /// Node `i` was killed, paused, aborted in a commit, or cut or slowed from a store:
    /// an answer it owed (a task handed out) may never have arrived.
    Node(usize),
    /// Node `i` was paused (SIGSTOP): it still accepts connections, and holds every
    /// request sent to it until the runner gives it up.
    NodeFrozen(usize),
    /// Every node at once: Postgres away, a store failing over or restarting.
    Stores,
}

/// A fault's span on the real clock, in seconds since the epoch (the audit's clock).
#[derive(Debug, Clone, Copy)]
pub struct FaultWindow {
    pub cause: Cause,
    pub from: f64,
    pub to: f64,
}

impl FaultWindow {
    /// A fault that begins now and lasts `lasting`.
    pub fn from_now(cause: Cause, lasting: Duration) -> FaultWindow {
        let from = unix_now();
        FaultWindow {
            cause,
            from,
            to: from + lasting.as_secs_f64(),
        }
    }

    /// A fault that began at `from` (unix seconds) and is over now.
    pub fn until_now(cause: Cause, from: f64) -> FaultWindow {
        FaultWindow {
            cause,
            from,
            to: unix_now(),
        }
    }
}

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Margin for a run's start: the audit's time is its start's statement, a little before
/// the runner has it.
const SLACK_S: f64 = 2.0;

/// A kind of fault that may bring about a kind of end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blame {
    /// The run's own runner killed.
    ItsRunnerKilled,
    /// The run's own runner's link faulted.
    ItsRunnerLink,
    /// Any node's fault: the node that handed the task out, or that held the runner's
    /// requests, is not recorded.
    AnyNode,
    Stores,
}

/// When, relative to the run, a fault must have been to bring about its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Near {
    /// At any time while it ran.
    TheRun,
    /// Around its start: the answer handing it out was held or lost (a frozen node
    /// commits a start it had begun up to a few seconds after it is let go).
    ItsStart,
    /// Within `runner_lost_after` before its end: what silenced its runner past the fence
    /// or the lost threshold.
    ItsEnd,
}

/// How long after a node or store fault's end a start it held may still commit: a frozen
/// node commits one it had begun a few seconds after it is let go, and an exchange the
/// fault held (refused, resent, or waiting on a Redis master that died) may be answered
/// up to the runner's fence after it was sent — the runner starts nothing from a later
/// answer, and the run is ended as forgotten. Store-failover drills met both: an exchange
/// sent as a node was killed, and one whose lease waited out a Sentinel failover, each
/// answered 7 s later, past a window of 5 s.
const START_AFTER_S: f64 = super::RUNNER_FENCE_AFTER_S as f64 + 1.0;

impl Blame {
    fn fits(self, cause: Cause, runner: Option<usize>) -> bool {
        match (self, cause) {
            (Blame::ItsRunnerKilled, Cause::RunnerKilled(r))
            | (Blame::ItsRunnerLink, Cause::RunnerLink(r)) => runner == Some(r),
            (Blame::AnyNode, Cause::Node(_) | Cause::NodeFrozen(_))
            | (Blame::Stores, Cause::Stores) => true,
            _ => false,
        }
    }
}

impl Near {
    fn fits(self, w: &FaultWindow, started: f64, ended: f64) -> bool {
        match self {
            Near::TheRun => w.from <= ended && w.to + SLACK_S >= started,
            Near::ItsStart => w.from <= started + SLACK_S && w.to + START_AFTER_S >= started,
            Near::ItsEnd => {
                let lost = super::RUNNER_LOST_AFTER_S as f64;
                w.from <= ended && w.to + lost + SLACK_S >= ended
            }
        }
    }
}

/// Which faults, and when, may bring about an end written with `error`; `None` for an
/// end the drill knows no cause of at all.
fn blamable(error: &str) -> Option<&'static [(Blame, Near)]> {
    use Blame::*;
    use Near::*;
    let lost = [
        Reason::RunnerLost.as_str(),
        Reason::RunnerOffline.as_str(),
        Reason::RunnerDeleted.as_str(),
    ];
    Some(match error {
        e if e == Reason::RunnerRestarted.as_str() => &[(ItsRunnerKilled, TheRun)],
        // Unheard past the threshold: killed, cut off, its requests held by a node that
        // answered nothing, or every node unable to record it.
        e if lost.contains(&e) => &[
            (ItsRunnerKilled, TheRun),
            (ItsRunnerLink, TheRun),
            (AnyNode, ItsEnd),
            (Stores, TheRun),
        ],
        // Forgotten: the runner's list lacks it. The runner was killed, or the answer
        // handing it out came later than the fence or never (its node stopped, its link
        // or the stores faulted), so it was never started.
        FORGOTTEN_ERROR => &[
            (ItsRunnerKilled, TheRun),
            (ItsRunnerLink, TheRun),
            (AnyNode, ItsStart),
            (Stores, TheRun),
            (Stores, ItsStart),
        ],
        // Its process killed from outside: the runner died, or fenced itself off, unheard
        // through a link, a node or stores that answered nothing (Known limit 3).
        e if e.starts_with("killed by signal") || e.starts_with("the runner shut down") => &[
            (ItsRunnerKilled, TheRun),
            (ItsRunnerLink, TheRun),
            (AnyNode, ItsEnd),
            (Stores, ItsEnd),
        ],
        _ => return None,
    })
}

/// Whether an end is the runner's word that needs no cause: its process exited by itself,
/// or was cancelled.
fn by_itself(status: &str, error: Option<&str>) -> bool {
    matches!(status, "succeeded" | "cancelled")
        || error.is_none()
        || error.is_some_and(|e| e.starts_with("exited with status") || e == "cancelled")
}

/// Runner ids by their drill index, from their registered names (`dev-runner-<n>`).
async fn runner_indexes(
    conn: &mut PgConnection,
) -> anyhow::Result<HashMap<baton_core::RunnerId, usize>> {
    Ok(audit::runner_names(conn)
        .await?
        .into_iter()
        .filter_map(|(id, name)| {
            let n: usize = name.rsplit('-').next()?.parse().ok()?;
            Some((id, n.checked_sub(1)?))
        })
        .collect())
}

/// Every run end of `tasks` that no fault in `windows` explains, in words. `cancelled`
/// names the tasks the drill cancelled (or may have): a signal may have ended theirs.
pub async fn unexplained_ends(
    conn: &mut PgConnection,
    tasks: &[Uuid],
    windows: &[FaultWindow],
    cancelled: &HashSet<Uuid>,
) -> anyhow::Result<Vec<String>> {
    let runners = runner_indexes(conn).await?;
    let ends = audit::run_ends(conn, tasks).await?;
    let mut violations = Vec::new();
    for end in ends {
        let error = end.error.as_deref();
        if by_itself(&end.status, error) {
            continue;
        }
        let error = error.unwrap_or_default();
        let started = end.started.unwrap_or(end.ended);
        let ran = end.ended - started;
        let what = format!(
            "task {} attempt {}: ended {} ({error:?}) after {ran:.1} s",
            end.task_id, end.attempt, end.status
        );
        // A timeout, the server's or the runner's own, is true when the time passed.
        if error == SERVER_TIMEOUT_ERROR || error.starts_with(RUNNER_TIMEOUT_ERROR) {
            let timeout = end.timeout_s.unwrap_or(i64::MAX) as f64;
            if ran + SLACK_S < timeout {
                violations.push(format!("{what}, before its timeout of {timeout} s"));
            }
            continue;
        }
        if error.starts_with("killed by signal") && cancelled.contains(&end.task_id) {
            continue;
        }
        let runner = end.runner_id.and_then(|id| runners.get(&id).copied());
        let Some(blames) = blamable(error) else {
            violations.push(format!("{what}: no such end is known to the drill"));
            continue;
        };
        let explained = windows.iter().any(|w| {
            blames
                .iter()
                .any(|(b, near)| b.fits(w.cause, runner) && near.fits(w, started, end.ended))
        });
        if !explained {
            violations.push(format!(
                "{what} on runner {}: no fault that could end it so overlapped the run",
                runner.map_or("?".into(), |r| (r + 1).to_string())
            ));
        }
    }
    Ok(violations)
}
