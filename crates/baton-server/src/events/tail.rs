//! The node's one reader of the history: while anyone on this node subscribes, it waits
//! on the stream (`XREAD BLOCK`) and hands each new entry to every subscriber, so a
//! thousand subscribers cost Redis what one does, and a node nobody subscribes to reads
//! nothing at all.
//!
//! Each entry is handed on with the entry it follows. A subscriber that finds it follows
//! something later than what the subscriber has (it joined as the reader started, or it
//! fell behind) reads the gap from the history itself, so nothing is missed or doubled.

use super::Stored;
use baton_coord::{Coord, EntryId};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::broadcast;

/// One entry, parsed once for every subscriber.
#[derive(Debug)]
pub(crate) struct Batch {
    /// The entry read before it (the reader's position when it read this one).
    pub after: EntryId,
    pub entry: EntryId,
    pub events: Vec<Option<Stored>>,
}

/// How long one wait on the stream lasts: under the Redis command timeout, and the most
/// a reader with no subscriber left stays on.
const WAIT: Duration = Duration::from_millis(1000);
/// Most entries one read takes.
pub(super) const READ_MAX: usize = 500;
/// Entries waiting for a slow subscriber before it is told it lagged (and reads the
/// gap from the history).
const FANOUT: usize = 1024;
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(500);

pub(crate) struct Tail {
    coord: Coord,
    tx: broadcast::Sender<Arc<Batch>>,
    running: Arc<AtomicBool>,
}

impl Tail {
    pub(crate) fn new(coord: Coord) -> Tail {
        Tail {
            coord,
            tx: broadcast::channel(FANOUT).0,
            running: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A receiver of new entries; starts the reader if it is not running.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<Batch>> {
        let rx = self.tx.subscribe();
        if !self.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(read(
                self.coord.clone(),
                self.tx.clone(),
                self.running.clone(),
            ));
        }
        rx
    }
}

/// Parses an entry, each event in its place: one this release does not know (a newer
/// node's) is `None`, so the others keep the index every node gives them.
pub(super) fn parse(events: &str) -> Vec<Option<Stored>> {
    match serde_json::from_str::<Vec<serde_json::Value>>(events) {
        Ok(values) => values
            .into_iter()
            .map(|v| serde_json::from_value(v).ok())
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "an event history entry is not a JSON array; skipped");
            Vec::new()
        }
    }
}

async fn read(coord: Coord, tx: broadcast::Sender<Arc<Batch>>, running: Arc<AtomicBool>) {
    let mut at: Option<EntryId> = None;
    loop {
        if tx.receiver_count() == 0 {
            running.store(false, Ordering::Release);
            // A subscriber that came between the count and the store found the reader
            // running and started none: take the part back if so.
            if tx.receiver_count() == 0 || running.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        let from = match at {
            Some(id) => id,
            None => match coord.history_bounds().await {
                Ok(bounds) => *at.insert(bounds.last.unwrap_or_default()),
                Err(e) => {
                    tracing::debug!(error = %e, "event history unreadable; retrying");
                    tokio::time::sleep(RETRY_AFTER_ERROR).await;
                    continue;
                }
            },
        };
        match coord.history_wait(from, WAIT, READ_MAX).await {
            Ok(entries) => {
                let mut after = from;
                for entry in entries {
                    let batch = Batch {
                        after,
                        entry: entry.id,
                        events: parse(&entry.events),
                    };
                    after = entry.id;
                    let _ = tx.send(Arc::new(batch));
                }
                at = Some(after);
            }
            Err(e) => {
                tracing::debug!(error = %e, "event history unreadable; retrying");
                tokio::time::sleep(RETRY_AFTER_ERROR).await;
            }
        }
    }
}
