//! The drill pauses and resumes one queue throughout, while the load submits to it, and
//! checks from the audit that no task of that queue started while it was paused: from
//! the moment its pause was answered (committed in Postgres) to the moment its resume
//! was first asked for. A pause a Redis failover or restart lost must still start
//! nothing (a start checks Postgres's pauses).

use super::asking::until_answered;
use super::causes::unix_now;
use baton_client::Client;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sqlx::PgConnection;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The queue the drill pauses and resumes.
pub const PAUSED_QUEUE: &str = "chaos-paused";

/// The spans the queue was surely paused in, in unix seconds.
#[derive(Debug, Clone, Default)]
pub struct Pauses {
    pub spans: Vec<(f64, f64)>,
    /// Pauses or resumes no node answered in time: the drill could not do its part.
    pub errors: Vec<String>,
}

/// Pauses the queue for 2–6 s, resumes it for 2–6 s, and so on until `stop`; leaves it
/// resumed.
pub async fn run(client: Client, seed: u64, stop: CancellationToken) -> Pauses {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x9a05e);
    let mut pauses = Pauses::default();
    let within = Duration::from_secs(60);
    let mut between = || Duration::from_millis(rng.random_range(2000..6000));
    while !stop.is_cancelled() {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(between()) => {}
        }
        if let Err(e) = until_answered(within, || client.queue_pause(PAUSED_QUEUE, true)).await {
            pauses.errors.push(format!("pausing {PAUSED_QUEUE}: {e}"));
            continue;
        }
        let paused = unix_now();
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(between()) => {}
        }
        let resuming = unix_now();
        pauses.spans.push((paused, resuming));
        if let Err(e) = until_answered(within, || client.queue_pause(PAUSED_QUEUE, false)).await {
            pauses.errors.push(format!("resuming {PAUSED_QUEUE}: {e}"));
        }
    }
    pauses
}

/// Every start of a task of the paused queue inside a span it was paused in.
pub async fn starts_while_paused(
    conn: &mut PgConnection,
    pauses: &Pauses,
) -> anyhow::Result<Vec<String>> {
    let starts = baton_store::audit::starts_in_queue(conn, PAUSED_QUEUE).await?;
    let mut violations = pauses.errors.clone();
    for start in starts {
        let (task, attempt, at) = (start.task_id, start.attempt, start.at);
        if let Some((from, to)) = pauses
            .spans
            .iter()
            .find(|(from, to)| *from < at && at < *to)
        {
            violations.push(format!(
                "task {task} attempt {attempt} started {:.2} s into a pause of {PAUSED_QUEUE} \
                 ({:.1} s long)",
                at - from,
                to - from
            ));
        }
    }
    Ok(violations)
}
