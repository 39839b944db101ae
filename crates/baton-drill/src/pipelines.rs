//! Pipelines under the drill (docs/pipelines.md): a small pipeline submitted every few
//! seconds for the whole drill, through every fault — a fan-out and fan-in, an `always`
//! job, a failing job with the job it skips and an `on_failure` job after that. Its jobs
//! join the load's tasks for the drill's checks (each ends once, never runs twice at
//! once, ends as it ran); here, once the cluster settled, that each job ended as its rule
//! says over how its needs ended, and that each job that ran started only after every job
//! it needs had stopped running (the jobs' own records).

use super::load::{Accepted, recorded};
use super::records::Run;
use baton_client::{Client, PipelineJobSpec, SubmitPipeline, SubmitTask};
use baton_core::TaskStatus;
use baton_core::pipeline::{ReleaseRule, Verdict, verdict};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How often a pipeline is submitted.
const EVERY: Duration = Duration::from_secs(4);

/// The pipeline: (name, needs, rule, work).
const JOBS: [(&str, &[&str], ReleaseRule, &str); 9] = [
    ("a", &[], ReleaseRule::OnSuccess, "true"),
    ("b1", &["a"], ReleaseRule::OnSuccess, "sleep 0.3"),
    ("b2", &["a"], ReleaseRule::OnSuccess, "sleep 0.5"),
    ("b3", &["a"], ReleaseRule::OnSuccess, "true"),
    ("c", &["b1", "b2", "b3"], ReleaseRule::OnSuccess, "true"),
    ("d", &["c"], ReleaseRule::Always, "true"),
    ("f", &[], ReleaseRule::OnSuccess, "exit 3"),
    ("g", &["f"], ReleaseRule::OnSuccess, "true"),
    ("h", &["g"], ReleaseRule::OnFailure, "true"),
];

/// What the pipelines did in a drill.
#[derive(Debug, Clone, Default)]
pub struct PipelineOutcome {
    pub pipelines: usize,
    pub jobs: usize,
    pub skipped: usize,
}

pub struct PipelineWorkload {
    client: Client,
    executions: PathBuf,
    seed: u64,
}

impl PipelineWorkload {
    pub fn new(client: Client, executions: &Path, seed: u64) -> PipelineWorkload {
        PipelineWorkload {
            client,
            executions: executions.to_path_buf(),
            seed,
        }
    }

    fn pipeline(&self, n: usize) -> SubmitPipeline {
        let jobs = JOBS
            .iter()
            .map(|(name, needs, rule, work)| PipelineJobSpec {
                name: name.to_string(),
                needs: needs.iter().map(|n| n.to_string()).collect(),
                task: SubmitTask {
                    script: Some(recorded(&self.executions, work)),
                    queue: Some("chaos-pipelines".into()),
                    timeout_s: Some(60),
                    when: (!needs.is_empty()).then_some(*rule),
                    ..SubmitTask::default()
                },
            })
            .collect();
        SubmitPipeline {
            name: Some(format!("chaos-{n}")),
            jobs,
            // Asked again after an answer lost to a fault, it is the same pipeline.
            idempotency_key: Some(format!("chaos-pipeline-{}-{n}", self.seed)),
        }
    }

    /// Submits a pipeline every [`EVERY`] until `stop`, each asked again until a node
    /// answers; the ids of those accepted, and a violation for each refused (the
    /// pipeline is valid: a 4xx is a bug).
    pub async fn run(self, stop: CancellationToken) -> (PipelineWorkload, Vec<Uuid>, Vec<String>) {
        let mut accepted = Vec::new();
        let mut refused = Vec::new();
        let mut n = 0;
        while !stop.is_cancelled() {
            let (index, pipeline) = (n, self.pipeline(n));
            n += 1;
            loop {
                match self.client.pipeline_submit(&pipeline).await {
                    Ok((made, _)) => {
                        accepted.push(made.id);
                        break;
                    }
                    Err(e) if e.status().is_some_and(|s| s.is_client_error()) => {
                        refused.push(format!("pipeline chaos-{index} refused: {e}"));
                        break;
                    }
                    Err(_) if stop.is_cancelled() => break,
                    Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
                }
            }
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(EVERY) => {}
            }
        }
        (self, accepted, refused)
    }

    /// Each pipeline's jobs as tasks for the drill's checks, read once the faults are over
    /// (asked again while the cluster answers 5xx or not at all).
    pub async fn jobs(&self, pipelines: &[Uuid]) -> anyhow::Result<Vec<Accepted>> {
        let mut jobs = Vec::new();
        for id in pipelines {
            let read = self.read(*id).await?;
            jobs.extend(read.jobs.iter().map(|j| Accepted {
                id: j.task_id,
                notify: false,
                cancelled_as: None,
                cancel_unanswered: false,
                cancelled_by_a_tick: false,
            }));
        }
        Ok(jobs)
    }

    async fn read(&self, id: Uuid) -> anyhow::Result<baton_client::Pipeline> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match self.client.pipeline_get(id).await {
                Ok(p) => return Ok(p),
                Err(e) if tokio::time::Instant::now() > deadline => {
                    return Err(anyhow::anyhow!("pipeline {id} not readable: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }

    /// After the cluster settled: each job ended as its rule says over how its needs
    /// ended, and each that ran started after every run of each job it needs had stopped.
    pub async fn check(
        &self,
        pipelines: &[Uuid],
        runs: &HashMap<Uuid, Vec<Run>>,
        violations: &mut Vec<String>,
    ) -> anyhow::Result<PipelineOutcome> {
        let mut outcome = PipelineOutcome {
            pipelines: pipelines.len(),
            ..Default::default()
        };
        for id in pipelines {
            let pipeline = self.read(*id).await?;
            let by_name: HashMap<&str, &baton_client::PipelineJob> =
                pipeline.jobs.iter().map(|j| (j.name.as_str(), j)).collect();
            outcome.jobs += pipeline.jobs.len();
            for job in &pipeline.jobs {
                if job.status == TaskStatus::Skipped {
                    outcome.skipped += 1;
                }
                let needs: Vec<&baton_client::PipelineJob> = job
                    .needs
                    .iter()
                    .filter_map(|n| by_name.get(n.as_str()).copied())
                    .collect();
                if needs.len() != job.needs.len() || job.runs != 1 {
                    violations.push(format!(
                        "pipeline {id} job {}: {} runs, needs {:?} not all found",
                        job.name, job.runs, job.needs
                    ));
                    continue;
                }
                let runs_of = |task: Uuid| runs.get(&task).cloned().unwrap_or_default();
                if !needs.is_empty() && needs.iter().all(|n| n.status.is_terminal()) {
                    let unmet = needs
                        .iter()
                        .filter(|n| n.status != TaskStatus::Succeeded)
                        .count() as i32;
                    let skipped = job.status == TaskStatus::Skipped;
                    let wrong = match verdict(job.when, 0, unmet) {
                        Verdict::Skip => !skipped,
                        Verdict::Release => skipped,
                        Verdict::Wait => true,
                    };
                    if wrong {
                        violations.push(format!(
                            "pipeline {id} job {}: ended {} ({:?} over needs {:?})",
                            job.name,
                            job.status,
                            job.when,
                            needs.iter().map(|n| n.status).collect::<Vec<_>>()
                        ));
                    }
                }
                let own = runs_of(job.task_id);
                if job.status == TaskStatus::Skipped && !own.is_empty() {
                    violations.push(format!(
                        "pipeline {id} job {}: skipped, yet it ran",
                        job.name
                    ));
                }
                for run in &own {
                    for need in &needs {
                        if let Some(late) = runs_of(need.task_id).iter().map(Run::last).max()
                            && late > run.start
                        {
                            violations.push(format!(
                                "pipeline {id} job {} started while {} still ran",
                                job.name, need.name
                            ));
                        }
                    }
                }
            }
        }
        Ok(outcome)
    }
}
