//! The steady load: a mix of quick, slow, failing and retried tasks, some with a
//! completion webhook, submitted through the load balancer. Every task records its own
//! execution in a shared file — a start line and an end line with nanosecond times — so
//! the checks can see whether one task ever ran twice at once.
//!
//! Each submit carries an idempotency key, so one that got no answer (its node died) is
//! simply sent again; a task counts as accepted once some answer was 2xx.

use baton_client::{Client, SubmitTask};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A task this drill submitted and the server accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub id: Uuid,
    pub notify: bool,
}

pub struct Load {
    client: Client,
    executions: PathBuf,
    webhook_url: String,
    seed: u64,
    accepted: Mutex<Vec<Accepted>>,
    retries: AtomicU64,
}

/// The work a task does, wrapped so it records its start and end.
fn recorded(executions: &Path, work: &str) -> String {
    let file = executions.display();
    format!(
        "echo \"S $BATON_TASK_ID $BATON_ATTEMPT $(date +%s%N)\" >> {file}\n\
         ( {work} )\n\
         rc=$?\n\
         echo \"E $BATON_TASK_ID $BATON_ATTEMPT $(date +%s%N)\" >> {file}\n\
         exit $rc"
    )
}

impl Load {
    pub fn new(
        lb_url: &str,
        executions: &Path,
        webhook_url: &str,
        seed: u64,
    ) -> anyhow::Result<Load> {
        Ok(Load {
            client: Client::new(lb_url, Some(super::cluster::API_TOKEN.into()))?,
            executions: executions.to_path_buf(),
            webhook_url: webhook_url.to_string(),
            seed,
            accepted: Mutex::new(Vec::new()),
            retries: AtomicU64::new(0),
        })
    }

    pub fn accepted(&self) -> Vec<Accepted> {
        self.accepted.lock().expect("accepted lock").clone()
    }

    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    fn task(&self, rng: &mut StdRng, n: u64) -> (SubmitTask, bool) {
        let (work, max_attempts) = match rng.random_range(0..10) {
            0..=3 => (":".to_string(), 1),
            4..=5 => (format!("sleep {}", rng.random_range(1..=3)), 1),
            6 => ("echo failing >&2; exit 3".to_string(), 1),
            // Fails its first attempt, succeeds on a retry.
            7..=8 => ("[ \"$BATON_ATTEMPT\" -ge 2 ] || exit 1".to_string(), 3),
            _ => (
                format!("sleep {}; echo slow and retried", rng.random_range(1..=2)),
                2,
            ),
        };
        let notify = rng.random_range(0..5) == 0;
        let task = SubmitTask {
            script: Some(recorded(&self.executions, &work)),
            labels: vec!["chaos".into()],
            max_attempts: Some(max_attempts),
            timeout_s: Some(30),
            idempotency_key: Some(format!("chaos-{}-{n}", self.seed)),
            notify_url: notify.then(|| self.webhook_url.clone()),
            ..Default::default()
        };
        (task, notify)
    }

    /// Submits at `rate` tasks per second until `stop`. Returns problems worth a
    /// violation (a submit the server refused as invalid).
    pub async fn run(
        self: std::sync::Arc<Self>,
        rate: f64,
        stop: CancellationToken,
    ) -> Vec<String> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x5eed);
        let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.01)));
        let mut inflight = tokio::task::JoinSet::new();
        let mut n = 0u64;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            n += 1;
            let (task, notify) = self.task(&mut rng, n);
            let load = self.clone();
            inflight.spawn(async move { load.submit(task, notify).await });
        }
        let mut problems = Vec::new();
        while let Some(done) = inflight.join_next().await {
            if let Ok(Err(problem)) = done {
                problems.push(problem);
            }
        }
        problems
    }

    /// Submits until some node accepts it, or gives up after a minute of failures (the
    /// task then was never accepted, which is no violation).
    async fn submit(&self, task: SubmitTask, notify: bool) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match self.client.submit(&task).await {
                Ok((t, _)) => {
                    self.accepted
                        .lock()
                        .expect("accepted lock")
                        .push(Accepted { id: t.id, notify });
                    return Ok(());
                }
                Err(e)
                    if e.status()
                        .is_some_and(|s| s.is_client_error() && s.as_u16() != 429) =>
                {
                    return Err(format!("a valid submit was refused: {e}"));
                }
                Err(_) if tokio::time::Instant::now() < deadline => {
                    self.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(_) => return Ok(()),
            }
        }
    }
}
