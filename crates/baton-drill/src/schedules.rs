//! The drill's schedule workload: a schedule firing every second for the whole drill,
//! through node kills, pauses, store restarts and failovers and the clock steps, and the
//! check that every tick between its first and its last fired exactly once. Its catch-up
//! policy is `all` (within an hour), so a tick that fell in an outage of every node or of
//! Postgres still fires once the cluster is back: none may be missing, none doubled.

use super::cluster::ChaosCluster;
use baton_client::{Client, CreateSchedule, SubmitTask};
use baton_store::audit;
use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection};
use std::time::Duration;
use uuid::Uuid;

pub struct ScheduleWorkload {
    client: Client,
    id: Uuid,
}

/// What the check saw, for the report.
#[derive(Debug, Clone, Default)]
pub struct ScheduleOutcome {
    pub ticks: usize,
    pub doubled: usize,
    pub missing: usize,
    pub skipped: i64,
}

impl ScheduleWorkload {
    /// Creates the schedule (asking again while the cluster is not yet answering).
    pub async fn start(client: Client) -> anyhow::Result<ScheduleWorkload> {
        let request = CreateSchedule {
            name: "chaos-every-second".into(),
            cron: "* * * * * *".into(),
            task: SubmitTask {
                command: Some(vec!["true".into()]),
                queue: Some("chaos-schedule".into()),
                // No runner has it: the tasks wait, holding no claim, so the cluster can
                // settle while the schedule keeps firing. Made is what is checked.
                labels: vec!["chaos-schedule-unserved".into()],
                ..SubmitTask::default()
            },
            overlap: Some("allow".into()),
            catch_up: Some("all".into()),
            catch_up_window_s: Some(3_600),
            ..CreateSchedule::default()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match client.schedule_create(&request).await {
                Ok(made) => {
                    return Ok(ScheduleWorkload {
                        client,
                        id: made.id,
                    });
                }
                Err(e) if tokio::time::Instant::now() > deadline => {
                    return Err(anyhow::anyhow!(
                        "could not create the drill's schedule: {e}"
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// Pauses the schedule, asking again while the cluster answers 5xx or not at all: a
    /// Postgres primary killed last in the drill may still be waiting for its synchronous
    /// standby when the drill has settled otherwise. (A pause is the same asked twice.)
    async fn pause(&self) -> anyhow::Result<baton_client::Schedule> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match self.client.schedule_action(self.id, "pause").await {
                Ok(paused) => return Ok(paused),
                Err(e)
                    if e.status().is_some_and(|s| !s.is_server_error())
                        || tokio::time::Instant::now() > deadline =>
                {
                    return Err(anyhow::anyhow!("could not pause the drill's schedule: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// A write the cluster takes (a task nobody serves, in a queue of its own), asked
    /// again while the cluster answers 5xx or not at all: when it is answered, Postgres
    /// takes writes again. Its time is the node's own commit time.
    async fn writes_taken(&self) -> anyhow::Result<DateTime<Utc>> {
        let probe = SubmitTask {
            command: Some(vec!["true".into()]),
            queue: Some("chaos-schedule-probe".into()),
            labels: vec!["chaos-schedule-unserved".into()],
            ..SubmitTask::default()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match self.client.submit(&probe).await {
                Ok((made, _)) => return Ok(made.created_at),
                Err(e)
                    if e.status().is_some_and(|s| !s.is_server_error())
                        || tokio::time::Instant::now() > deadline =>
                {
                    return Err(anyhow::anyhow!("the cluster took no write: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// The schedule fires again within [`resume_limit`] of Postgres taking writes again,
    /// whatever failed over before: a tick made at or after `from`.
    async fn resumed(
        &self,
        cluster: &ChaosCluster,
        from: DateTime<Utc>,
        violations: &mut Vec<String>,
    ) -> anyhow::Result<()> {
        let limit = chrono::Duration::from_std(resume_limit())?;
        let mut conn = PgConnection::connect(&cluster.postgres.url_now().await?).await?;
        let first = loop {
            let made = audit::first_made_since(&mut conn, self.id, from).await?;
            // Past the limit by more than a look's own time: judged below.
            if made.is_some() || Utc::now() - from > limit + chrono::Duration::seconds(2) {
                break made;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        match first {
            Some(made) if made - from <= limit => {}
            made => violations.push(format!(
                "the drill's schedule fired first at {made:?} after Postgres took writes again                  at {from}: later than {limit} (schedule_retry_ms + 2 x store_timeout_ms +                  the tick's second)"
            )),
        }
        Ok(())
    }

    /// Checks the schedule resumed within its bound once Postgres took writes again,
    /// pauses it, then checks its ticks from the first to the last: each made one task,
    /// one second after the one before; and the last is no older than the pause (less the
    /// misfire grace), so no tick due was left.
    pub async fn check(
        &self,
        cluster: &ChaosCluster,
        violations: &mut Vec<String>,
    ) -> anyhow::Result<ScheduleOutcome> {
        let writes_back = self.writes_taken().await?;
        self.resumed(cluster, writes_back, violations).await?;
        let paused = self.pause().await?;
        let paused_at = paused.updated_at;
        let mut conn = PgConnection::connect(&cluster.postgres.url_now().await?).await?;
        let ticks = audit::ticks_made(&mut conn, self.id).await?;
        let mut outcome = ScheduleOutcome {
            ticks: ticks.len(),
            skipped: paused.skipped_count,
            ..ScheduleOutcome::default()
        };
        for (tick, n) in &ticks {
            if *n != 1 {
                outcome.doubled += 1;
                violations.push(format!("schedule tick {tick} made {n} tasks"));
            }
        }
        for pair in ticks.windows(2) {
            let gap = (pair[1].0 - pair[0].0).num_seconds();
            if gap != 1 {
                outcome.missing += (gap - 1).max(0) as usize;
                violations.push(format!(
                    "schedule ticks between {} and {} never fired",
                    pair[0].0, pair[1].0
                ));
            }
        }
        match ticks.last() {
            None => violations.push("the drill's schedule never fired".into()),
            Some((last, _)) if paused_at - *last > chrono::Duration::seconds(3) => {
                violations.push(format!(
                    "the drill's schedule fired last at {last}, though it ran until {paused_at}"
                ));
            }
            Some(_) => {}
        }
        if paused.skipped_count > 0 {
            violations.push(format!(
                "the drill's schedule skipped {} ticks (catch-up `all` skips none)",
                paused.skipped_count
            ));
        }
        Ok(outcome)
    }
}

/// The promise of docs/schedules.md ("After a store outage or failover"): a node's
/// schedule service tries a failed pass again after `schedule_retry_ms`, a pass that
/// hangs counts as failed after twice `store_timeout_ms`, and a due tick fires within its
/// second — so the schedule fires again within their sum of Postgres taking writes.
pub fn resume_limit() -> Duration {
    let node = baton_server::config::ServeConfig::default();
    Duration::from_millis(node.timings.schedule_retry_ms + 2 * node.store_timeout_ms + 1_000)
}
