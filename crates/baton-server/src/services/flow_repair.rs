//! The repair pass's share of flow control (docs/flow-control.md): Redis' paused set and
//! concurrency groups are derived from Postgres like the queues are, and rebuilt from it
//! after a data loss. Run before anything is queued again, so a rebuilt queue never hands
//! out a paused queue's task or one past its group's limit.

use super::ServiceError;
use crate::queueing::queue_entry;
use baton_coord::{Coord, Enqueue};
use baton_store::Store;
use std::collections::BTreeMap;
use uuid::Uuid;

/// What the flow-control repair changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowRepair {
    /// The paused set did not match Postgres.
    pub paused_mirrored: bool,
    /// Group slots taken, freed, and waiting tasks let back, over every group.
    pub group_changes: u64,
    /// Group entries of tasks that ended, dropped.
    pub group_entries_dropped: u64,
}

/// Mirrors the paused queues, then recounts every group from its unfinished rows and
/// drops the group entries of tasks that ended. Claims must have been restored first:
/// a slot is held by a claim.
pub(super) async fn repair(store: &Store, coord: &Coord) -> Result<FlowRepair, ServiceError> {
    // The marks before Postgres: a pause written after this read is newer than it.
    let marks = coord.paused_marks().await?;
    let mut out = FlowRepair {
        paused_mirrored: coord
            .paused_mirror(&marks, &store.queues_paused().await?)
            .await?,
        ..FlowRepair::default()
    };
    // Redis first, Postgres after: an entry added after this read is not looked at, and
    // one read here belongs to a task whose row was committed before.
    let registered = coord.group_entries().await?;
    let mut groups: BTreeMap<String, Vec<Enqueue>> = BTreeMap::new();
    for task in store.tasks_grouped_active().await? {
        let entry = queue_entry(&task);
        if let Some(group) = &entry.group {
            groups.entry(group.key.clone()).or_default().push(entry);
        }
    }
    // Groups Redis knows that Postgres has no unfinished task of are recounted too:
    // their slots are freed.
    for (key, _) in registered.values() {
        groups.entry(key.clone()).or_default();
    }
    for (key, tasks) in &groups {
        let fixed = coord.group_repair(key, tasks).await?;
        out.group_changes += fixed.slots_taken + fixed.slots_freed + fixed.promoted;
    }
    let ids: Vec<Uuid> = registered.keys().copied().collect();
    let rows = store.tasks_map(&ids).await?;
    // Only a final row lets its entry go: a scheduled retry may be queued (and
    // registered again) at any moment.
    let ended: Vec<(Uuid, String)> = registered
        .into_iter()
        .filter(|(id, _)| rows.get(id).is_none_or(|t| t.status.is_terminal()))
        .map(|(id, (_, rel))| (id, rel))
        .collect();
    out.group_entries_dropped = ended.len() as u64;
    coord.queue_remove(&ended).await?;
    Ok(out)
}
