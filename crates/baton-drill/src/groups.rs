//! Concurrency groups in the load — one of limit 1, one of limit 3 — and the check that
//! no group ever had more runs going at once than its limit, judged from the tasks' own
//! records of when they ran (not from what the server believed), through Redis failovers
//! and restarts that lose the groups' slots.

use super::records::Run;
use sqlx::PgConnection;
use std::collections::HashMap;
use uuid::Uuid;

/// The load's groups: key and limit.
pub const GROUPS: [(&str, i64); 2] = [("chaos-group-of-one", 1), ("chaos-group-of-three", 3)];

/// A run's start (+1) or end (-1) in its group, when (ns), and whose.
type Move = (i128, i32, Uuid);

/// Each moment a group had more runs going than its limit, in words.
pub async fn over_their_limits(
    conn: &mut PgConnection,
    tasks: &[Uuid],
    runs: &HashMap<Uuid, Vec<Run>>,
) -> anyhow::Result<Vec<String>> {
    let grouped = baton_store::audit::groups_of(conn, tasks).await?;
    // Per group, its limit and every run's start (+1) and last sign of life (-1), in time
    // order; at one instant an end goes before a start (a run that ended as the next
    // began).
    let mut moves: HashMap<&str, (i32, Vec<Move>)> = HashMap::new();
    for (id, key, limit) in &grouped {
        let entry = moves.entry(key.as_str()).or_insert((*limit, Vec::new()));
        for run in runs.get(id).into_iter().flatten() {
            entry.1.push((run.start, 1, *id));
            entry.1.push((run.last(), -1, *id));
        }
    }
    let mut violations = Vec::new();
    for (key, (limit, mut moves)) in moves {
        moves.sort_by_key(|(at, change, _)| (*at, *change));
        let mut going = 0;
        for (at, change, id) in moves {
            going += change;
            if going > limit {
                violations.push(format!(
                    "group {key} (limit {limit}) had {going} runs going at {at} ns, when task \
                     {id} started"
                ));
            }
        }
    }
    Ok(violations)
}
