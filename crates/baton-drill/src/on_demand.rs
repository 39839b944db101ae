//! Runners on demand under the drill (docs/dynamic-runners.md): some of the load asks for
//! the `ephemeral` label, which only runners the nodes start on demand carry. The tasks'
//! invariants are the load's (checked with the rest); here, once the cluster settled,
//! that every runner started on demand is gone — no assignment left open, no runner
//! process left running — and what it took.

use super::cluster::{ChaosCluster, EPHEMERAL};
use std::time::Duration;

/// What runners on demand did in a drill.
#[derive(Debug, Clone, Default)]
pub struct OnDemand {
    /// Tasks that asked for the on-demand label.
    pub tasks: i64,
    /// Assignments admitted: one runner each, started again only after a failure.
    pub assignments: i64,
    /// Runners started, every attempt of every assignment.
    pub runners_started: i64,
    /// Attempts whose runner did not claim work in time, or died before it did.
    pub failed_attempts: i64,
}

/// Waits up to `within` for every runner started on demand to be gone; what they did,
/// and a violation if some are left.
pub async fn check(
    cluster: &ChaosCluster,
    within: Duration,
    violations: &mut Vec<String>,
) -> anyhow::Result<OnDemand> {
    let url = cluster.postgres.url_now().await?;
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await?;
    let dir = cluster.provisioned_dir();
    let deadline = tokio::time::Instant::now() + within;
    let (open, processes) = loop {
        let (open,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM runner_assignments WHERE ended_at IS NULL")
                .fetch_one(&mut conn)
                .await?;
        let processes = baton_localcluster::strays::runners_under(&dir).len();
        if (open == 0 && processes == 0) || tokio::time::Instant::now() >= deadline {
            break (open, processes);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if open > 0 || processes > 0 {
        violations.push(format!(
            "runners on demand left after the cluster settled: {open} open assignments, \
             {processes} runner processes"
        ));
    }
    let (tasks,): (i64,) = sqlx::query_as("SELECT count(*) FROM tasks WHERE $1 = ANY(labels)")
        .bind(EPHEMERAL)
        .fetch_one(&mut conn)
        .await?;
    let (assignments, runners_started, failed_attempts): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), COALESCE(sum(attempt), 0)::bigint,
                COALESCE(sum(attempt - CASE WHEN state = 'done' THEN 1 ELSE 0 END), 0)::bigint
         FROM runner_assignments",
    )
    .fetch_one(&mut conn)
    .await?;
    Ok(OnDemand {
        tasks,
        assignments,
        runners_started,
        failed_attempts,
    })
}
