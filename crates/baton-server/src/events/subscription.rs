//! One subscriber: the history from where it stands (or from now), then every new entry
//! the node's reader hands on, through its filter and its token's scope — each event
//! once, in the history's order.

use super::catch_ups::CatchUps;
use super::tail::{READ_MAX, parse};
use super::{Batch, Event, EventLog, Kind, Position, Stored};
use baton_coord::{CoordError, HistoryEntry};
use std::sync::Arc;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// What a subscriber asked for, and what its token lets it see.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub queue: Option<String>,
    pub task: Option<Uuid>,
    /// Only the events of this pipeline's jobs.
    pub pipeline: Option<Uuid>,
    /// `None`: every kind.
    pub kinds: Option<Vec<Kind>>,
    /// A `submit`-only token: the events of its own tasks only.
    pub owner: Option<String>,
}

impl Filter {
    pub(crate) fn admits(&self, stored: &Stored) -> bool {
        let Some(kind) = stored.event.kind() else {
            // `resync` concerns everyone.
            return true;
        };
        if self.kinds.as_ref().is_some_and(|k| !k.contains(&kind)) {
            return false;
        }
        if self.owner.is_some() && stored.owner != self.owner {
            // Runners and nodes have no owner: a submit-only token sees none of them.
            return false;
        }
        let (queue, task) = match &stored.event {
            Event::Task { queue, task_id, .. } | Event::Schedule { queue, task_id, .. } => {
                (Some(queue), Some(*task_id))
            }
            _ => (None, None),
        };
        if self.queue.is_some() && queue != self.queue.as_ref() {
            return false;
        }
        if self.task.is_some() && task != self.task {
            return false;
        }
        if let Some(wanted) = self.pipeline {
            return matches!(&stored.event, Event::Task { pipeline_id: Some(p), .. } if *p == wanted);
        }
        true
    }
}

/// One frame to send: an event with its SSE id (`None` for a `resync` made for this
/// subscriber alone, which is no place in the history), or — `event: None` — only a
/// place, so a client that has received no event yet still has an id to resume from.
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    pub id: Option<String>,
    pub event: Option<Event>,
}

/// How a subscription ended early.
enum Stop {
    /// The client went away, or the node is draining.
    Gone,
    Redis(CoordError),
}

impl From<CoordError> for Stop {
    fn from(e: CoordError) -> Self {
        Stop::Redis(e)
    }
}

/// A subscription with its place taken: listening to the node's reader, and where it
/// starts decided. Made before the answer goes out, so everything that happens once the
/// client has its answer reaches it.
pub(crate) struct Start {
    news: broadcast::Receiver<Arc<Batch>>,
    at: Position,
    resync: Option<String>,
}

/// Takes the place of a new subscriber: after `resume` if the history still holds it,
/// else from now (with a `resync` to send first when `resume` was not held).
pub(crate) async fn start(log: &EventLog, resume: Option<Position>) -> Result<Start, CoordError> {
    // Listen before looking, so an entry appended between the two is not missed.
    let news = log.tail().subscribe();
    let bounds = log.coord().history_bounds().await?;
    let now = Position::after_entry(bounds.last.unwrap_or_default());
    let held = match resume {
        Some(p) => bounds.holds_since(p.entry) && log.coord().history_has(p.entry).await?,
        None => false,
    };
    let (at, resync) = match resume {
        Some(p) if held => (p, None),
        Some(_) => (now, Some(not_held(log))),
        None => (now, None),
    };
    Ok(Start { news, at, resync })
}

fn not_held(log: &EventLog) -> String {
    format!(
        "the history no longer holds what came after this id (it is held for {} s, and lost with Redis's data); read the state again",
        log.retention().as_secs()
    )
}

/// Who a subscription reads for, and the places it holds while it lives.
pub(crate) struct Reader {
    pub catch_ups: Arc<CatchUps>,
    /// The API token: its catch-ups share its turns.
    pub token: String,
    /// The token's stream place: held by the loop, not the response, so a client gone
    /// before the loop notices still counts until the loop ends.
    pub _held: crate::quota::Held<String>,
}

/// Feeds `out` until the client goes, the node drains, or Redis fails (the client then
/// reconnects, to this node or another, from the last id it got).
pub(crate) async fn run(
    log: EventLog,
    filter: Filter,
    start: Start,
    out: mpsc::Sender<Sent>,
    draining: CancellationToken,
    reader: Reader,
) {
    match feed(&log, &filter, start, &out, &draining, &reader).await {
        Ok(()) | Err(Stop::Gone) => {}
        Err(Stop::Redis(e)) => {
            tracing::debug!(error = %e, "event subscription ended: redis unreadable")
        }
    }
    drop(reader);
}

async fn feed(
    log: &EventLog,
    filter: &Filter,
    start: Start,
    out: &mpsc::Sender<Sent>,
    draining: &CancellationToken,
    reader: &Reader,
) -> Result<(), Stop> {
    let Start {
        mut news,
        mut at,
        resync,
    } = start;
    if let Some(reason) = resync {
        send(out, None, Some(Event::Resync { reason })).await?;
    }
    send(out, Some(at.to_id()), None).await?;
    catch_up(log, filter, &mut at, out, reader).await?;
    loop {
        let batch = tokio::select! {
            _ = out.closed() => return Err(Stop::Gone),
            _ = draining.cancelled() => return Err(Stop::Gone),
            batch = news.recv() => batch,
        };
        match batch {
            Ok(batch) if batch.after > at.entry => {
                catch_up(log, filter, &mut at, out, reader).await?
            }
            Ok(batch) => deliver(filter, &mut at, batch.entry, &batch.events, out).await?,
            Err(RecvError::Lagged(_)) => catch_up(log, filter, &mut at, out, reader).await?,
            Err(RecvError::Closed) => return Err(Stop::Gone),
        }
    }
}

/// Reads the history from `at` to its end, in its turn (`CatchUps`). If what follows `at`
/// has been trimmed away meanwhile (a subscriber slower than the retention), it says
/// `resync` and goes on from the oldest entry held.
///
/// It stops as soon as its client is gone. A filter that matches nothing sends nothing,
/// so after each full page the place reached is sent alone (an `id` frame): writing it
/// finds a client that has gone, and a client that reconnects resumes from there.
async fn catch_up(
    log: &EventLog,
    filter: &Filter,
    at: &mut Position,
    out: &mpsc::Sender<Sent>,
    reader: &Reader,
) -> Result<(), Stop> {
    let _turn = tokio::select! {
        _ = out.closed() => return Err(Stop::Gone),
        turn = reader.catch_ups.turn(&reader.token) => turn,
    };
    let bounds = log.coord().history_bounds().await?;
    if !bounds.holds_since(at.entry) || !log.coord().history_has(at.entry).await? {
        send(
            out,
            None,
            Some(Event::Resync {
                reason: not_held(log),
            }),
        )
        .await?;
        *at = Position::after_entry(bounds.last.unwrap_or_default());
    }
    loop {
        if out.is_closed() {
            return Err(Stop::Gone);
        }
        // Part of `at`'s entry may be left to send.
        let inclusive = at.index.is_some();
        let entries: Vec<HistoryEntry> = log
            .coord()
            .history_from(at.entry, inclusive, READ_MAX)
            .await?;
        let full = entries.len() == READ_MAX;
        for entry in entries {
            deliver(filter, at, entry.id, &parse(&entry.events), out).await?;
        }
        if !full {
            return Ok(());
        }
        send(out, Some(at.to_id()), None).await?;
    }
}

/// Sends what of entry `entry` comes after `at` and passes the filter; `at` moves past
/// the entry. Events are numbered by their place in the entry as written, those this
/// release cannot read (`None`) included, so every node gives an event the same id.
async fn deliver(
    filter: &Filter,
    at: &mut Position,
    entry: baton_coord::EntryId,
    events: &[Option<Stored>],
    out: &mpsc::Sender<Sent>,
) -> Result<(), Stop> {
    for (index, stored) in events.iter().enumerate() {
        let Some(stored) = stored else { continue };
        if at.before(entry, index) && filter.admits(stored) {
            send(
                out,
                Some(Position::id(entry, index)),
                Some(stored.event.clone()),
            )
            .await?;
        }
    }
    if entry >= at.entry {
        *at = Position::after_entry(entry);
    }
    Ok(())
}

async fn send(
    out: &mpsc::Sender<Sent>,
    id: Option<String>,
    event: Option<Event>,
) -> Result<(), Stop> {
    out.send(Sent { id, event }).await.map_err(|_| Stop::Gone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::TaskStatus;
    use chrono::Utc;

    fn task_event(owner: &str, queue: &str, task: Uuid) -> Stored {
        Stored {
            owner: Some(owner.into()),
            event: Event::Task {
                task_id: task,
                queue: queue.into(),
                status: TaskStatus::Queued,
                attempt: 0,
                step: 0,
                runner_id: None,
                node_id: "n".into(),
                schedule_id: None,
                pipeline_id: None,
                job: None,
                at: Utc::now(),
            },
        }
    }

    #[test]
    fn a_submit_token_sees_its_own_tasks_and_nothing_of_the_cluster() {
        let mine = task_event("me", "q", Uuid::new_v4());
        let theirs = task_event("them", "q", Uuid::new_v4());
        let node = Stored {
            owner: None,
            event: Event::Node {
                event: super::super::NodeChange::Joined,
                node_id: "n".into(),
                adopted_by: None,
                claims: None,
                at: Utc::now(),
            },
        };
        let resync = Stored {
            owner: None,
            event: Event::Resync { reason: "r".into() },
        };
        let scoped = Filter {
            owner: Some("me".into()),
            ..Filter::default()
        };
        assert!(scoped.admits(&mine));
        assert!(!scoped.admits(&theirs));
        assert!(!scoped.admits(&node));
        assert!(scoped.admits(&resync));
        let all = Filter::default();
        assert!(all.admits(&theirs) && all.admits(&node));
    }

    #[test]
    fn filters_by_queue_task_and_kind() {
        let id = Uuid::new_v4();
        let e = task_event("me", "build", id);
        let by_queue = |q: &str| Filter {
            queue: Some(q.into()),
            ..Filter::default()
        };
        assert!(by_queue("build").admits(&e));
        assert!(!by_queue("deploy").admits(&e));
        let by_task = |t: Uuid| Filter {
            task: Some(t),
            ..Filter::default()
        };
        assert!(by_task(id).admits(&e));
        assert!(!by_task(Uuid::new_v4()).admits(&e));
        let by_kind = |k: Kind| Filter {
            kinds: Some(vec![k]),
            ..Filter::default()
        };
        assert!(by_kind(Kind::Task).admits(&e));
        assert!(!by_kind(Kind::Runner).admits(&e));
    }
}
