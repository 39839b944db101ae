//! The provisioner, on every node (docs/dynamic-runners.md): each pass it adopts the
//! assignments of dead nodes, judges the assignments it owns by what is known of their
//! runners (`provision::decide`), then admits new runners for the demand it measured and
//! starts them through their provisioner's backend. Admission is one Postgres
//! transaction per provisioner under an advisory lock, so nodes passing at once never
//! start more runners than the capacity or the demand allows.

use super::ServiceError;
use super::service::Service;
use crate::auth::{REGISTRATION_TOKEN_PREFIX, hash_token, new_token};
use crate::config::ProvisionerConfig;
use crate::provision::backend::{Backend, RunnerToRelease, RunnerToStart};
use crate::provision::demand::Measure;
use crate::state::AppState;
use baton_core::RunnerId;
use baton_core::provision::{self, AfterFailure, RunnerFacts, State, Verdict};
use baton_store::{Admission, AssignmentFacts, AssignmentRecord, Candidate, StoreError};
use chrono::{DateTime, Utc};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What a pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProvisionReport {
    /// Assignments of dead nodes taken over.
    pub adopted: u64,
    /// Runners started (new assignments and retries).
    pub started: usize,
    /// Runners that took their task.
    pub claimed: usize,
    /// Runners done and released.
    pub done: usize,
    /// Runners that failed their assignment (not registered or no task in time, or
    /// exited before one), and starts the backend refused.
    pub failed: usize,
    /// Retries dropped: the demand they were for had gone.
    pub dropped: usize,
}

/// One provisioner, with its backend.
struct Provisioner {
    config: ProvisionerConfig,
    backend: Backend,
}

/// Starts and releases ephemeral runners for waiting work.
pub struct Provisioners {
    state: AppState,
    provisioners: Vec<Provisioner>,
    interval: Duration,
    /// The live nodes at the last adoption: the next looks for orphans only when the set
    /// changed, so an idle pass costs Postgres nothing.
    live_at_adoption: Mutex<Option<Vec<String>>>,
    /// Whether this node may own open assignments: unknown at start, then what the last
    /// look found, set again by an admission or an adoption.
    may_own: AtomicBool,
}

impl Provisioners {
    /// The provisioners of the node whose state this is.
    pub(crate) fn new(state: AppState) -> Self {
        let exe = std::env::current_exe().unwrap_or_else(|_| "baton".into());
        let provisioners = state
            .config
            .provisioners
            .iter()
            .map(|config| Provisioner {
                config: config.clone(),
                backend: Backend::of(config, exe.clone()),
            })
            .collect();
        Provisioners {
            interval: Duration::from_millis(state.config.provision_interval_ms.max(100)),
            state,
            provisioners,
            live_at_adoption: Mutex::new(None),
            may_own: AtomicBool::new(true),
        }
    }

    fn node(&self) -> String {
        self.state.identity.id()
    }

    /// One pass as of `now`.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<ProvisionReport, ServiceError> {
        let mut report = ProvisionReport::default();
        if !self.state.identity.is_live() {
            return Ok(report);
        }
        self.adopt(&mut report).await?;
        if self.may_own.load(Ordering::Relaxed) {
            let owned = self.state.store.assignments_of(&self.node()).await?;
            self.may_own.store(!owned.is_empty(), Ordering::Relaxed);
            for facts in owned {
                self.judge(facts, now, &mut report).await?;
            }
        }
        if self.provisioners.is_empty() {
            return Ok(report);
        }
        let offers: Vec<_> = self.provisioners.iter().map(|p| p.config.offer()).collect();
        let measure = Measure {
            store: &self.state.store,
            coord: &self.state.coord,
            now,
            offline_after: Duration::from_secs(self.state.config.timings.runner_offline_after_s),
        };
        let demands = measure.demands(&offers).await?;
        for (provisioner, demand) in self.provisioners.iter().zip(demands) {
            crate::metrics::provision_demand(&provisioner.config.name, demand.uncovered());
            self.admit(provisioner, demand.uncovered(), now, &mut report)
                .await?;
        }
        Ok(report)
    }

    /// Takes over the open assignments of nodes that are no longer live, when the set
    /// of live nodes changed since the last look.
    async fn adopt(&self, report: &mut ProvisionReport) -> Result<(), ServiceError> {
        let mut live: Vec<String> = self
            .state
            .coord
            .nodes_live()
            .await?
            .into_iter()
            .map(|n| n.id)
            .chain([self.node()])
            .collect();
        live.sort();
        live.dedup();
        if self
            .live_at_adoption
            .lock()
            .expect("adoption lock")
            .as_ref()
            == Some(&live)
        {
            return Ok(());
        }
        report.adopted = self
            .state
            .store
            .assignments_adopt(&self.node(), &live)
            .await?;
        *self.live_at_adoption.lock().expect("adoption lock") = Some(live);
        if report.adopted > 0 {
            self.may_own.store(true, Ordering::Relaxed);
            tracing::warn!(node.id = %self.node(), assignments = report.adopted, "adopted a dead node's runner assignments");
        }
        Ok(())
    }

    fn provisioner(&self, name: &str) -> Option<&Provisioner> {
        self.provisioners.iter().find(|p| p.config.name == name)
    }

    /// Admits and starts this provisioner's runners for `uncovered` waiting tasks.
    async fn admit(
        &self,
        provisioner: &Provisioner,
        uncovered: u64,
        now: DateTime<Utc>,
        report: &mut ProvisionReport,
    ) -> Result<(), ServiceError> {
        let config = &provisioner.config;
        let node = self.node();
        let tokens: Vec<String> = (0..config.capacity)
            .map(|_| new_token(REGISTRATION_TOKEN_PREFIX))
            .collect();
        let candidates: Vec<Candidate> = tokens
            .iter()
            .map(|token| Candidate {
                runner_name: format!(
                    "{}-{}",
                    config.name,
                    &hex::encode(rand::random::<[u8; 6]>())
                ),
                token_hash: hash_token(token).to_vec(),
            })
            .collect();
        let labels = config.offer().labels.as_slice().to_vec();
        let admitted = self
            .state
            .store
            .assignments_admit(
                &Admission {
                    provisioner: &config.name,
                    backend: config.backend.as_str(),
                    labels: &labels,
                    queues: &config.queues,
                    capacity: u64::from(config.capacity),
                    uncovered,
                    node: &node,
                    claim_timeout: chrono::Duration::seconds(config.claim_timeout_s as i64),
                    now,
                },
                &candidates,
            )
            .await?;
        report.dropped += admitted.dropped;
        if !admitted.launches.is_empty() {
            self.may_own.store(true, Ordering::Relaxed);
        }
        let server_url = config
            .server_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.state.identity.current().addr));
        for launch in admitted.launches {
            let a = &launch.assignment;
            let runner = RunnerToStart {
                assignment: a.id,
                attempt: a.attempt,
                provisioner: &a.provisioner,
                name: &a.runner_name,
                labels: &a.labels,
                queues: &a.queues,
                registration_token: &tokens[launch.candidate],
                server_url: &server_url,
            };
            report.started += 1;
            crate::metrics::provision_started(&config.name, config.backend.as_str());
            tracing::info!(assignment.id = %a.id, attempt = a.attempt, runner.name = %a.runner_name, provisioner = %config.name, "starting a runner on demand");
            match provisioner.backend.start(&runner).await {
                Ok(Some(handle)) => {
                    self.state
                        .store
                        .assignment_set_handle(a.id, a.attempt, &node, &handle)
                        .await?;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(assignment.id = %a.id, error = %e, "the backend could not start a runner");
                    let failure = Failed {
                        reason: "start",
                        error: &e.to_string(),
                    };
                    self.fail(provisioner, a, None, failure, now, report)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Judges one of this node's assignments and acts on the verdict.
    async fn judge(
        &self,
        facts: AssignmentFacts,
        now: DateTime<Utc>,
        report: &mut ProvisionReport,
    ) -> Result<(), ServiceError> {
        let a = &facts.assignment;
        let Some(provisioner) = self.provisioner(&a.provisioner) else {
            // A provisioner this node is not configured with: its runners are judged by
            // a node that has it (or stay until one does).
            return Ok(());
        };
        let state = match a.state.as_str() {
            "starting" => State::Starting,
            "running" => State::Running,
            "retrying" => State::Retrying,
            _ => return Ok(()),
        };
        let since = |at: DateTime<Utc>| (now - at).to_std().unwrap_or_default();
        let runner = RunnerFacts {
            registered: facts.runner_id.is_some(),
            left: facts.runner_left,
            took_work: facts.took_work,
            exited: provisioner.backend.exited(a.id, a.attempt),
            silent_for: facts.runner_seen.map(since),
        };
        let limits = provisioner.config.limits(Duration::from_secs(
            self.state.config.timings.runner_lost_after_s,
        ));
        let retry_due = a.retry_at.is_some_and(|at| at <= now);
        let node = self.node();
        match provision::decide(state, since(a.started_at), retry_due, runner, &limits) {
            // A due retry is started again (or dropped) by the admission that follows.
            Verdict::Keep | Verdict::RetryDue => {}
            Verdict::Running => {
                if self
                    .state
                    .store
                    .assignment_running(a.id, a.attempt, &node, now)
                    .await?
                {
                    report.claimed += 1;
                    crate::metrics::provision_claimed(&a.provisioner, since(a.started_at));
                }
            }
            // Released before the assignment ends, so a node that dies in between leaves
            // it open for its adopter to release again (a backend's release is
            // idempotent); a release that fails is tried again at the next pass.
            Verdict::Done => {
                if self.release(provisioner, a).await
                    && self
                        .state
                        .store
                        .assignment_done(a.id, a.attempt, &node, now)
                        .await?
                {
                    report.done += 1;
                }
            }
            Verdict::Failed(failure) => {
                let runner = facts.runner_id.map(RunnerId::from);
                let failure = Failed {
                    reason: failure.as_str(),
                    error: failure.as_str(),
                };
                self.fail(provisioner, a, runner, failure, now, report)
                    .await?;
            }
        }
        Ok(())
    }

    /// Ends an attempt that failed: its token is revoked and its runner (if it
    /// registered) deleted, so it can neither register nor lease; the backend releases
    /// it; then the assignment retries later or gives up. The assignment moves last, so
    /// a node that dies before leaves it for its adopter to judge (and end) again.
    async fn fail(
        &self,
        provisioner: &Provisioner,
        a: &AssignmentRecord,
        runner: Option<RunnerId>,
        failed: Failed<'_>,
        now: DateTime<Utc>,
        report: &mut ProvisionReport,
    ) -> Result<(), ServiceError> {
        let limits = provisioner.config.limits(Duration::ZERO);
        let (wait, gives_up) =
            match provision::after_failure(a.attempt as u32, &limits, rand::random::<f64>()) {
                AfterFailure::Retry(wait) => (wait, false),
                AfterFailure::GiveUp(cool) => (cool, true),
            };
        let retry_at = now + chrono::Duration::from_std(wait).unwrap_or_default();
        match self
            .state
            .store
            .registration_token_revoke(a.registration_token_id, now)
            .await
        {
            Ok(()) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(runner) = runner {
            // Its next request gets 401 and the agent exits.
            match crate::auth::delete_runner(&self.state, runner).await {
                Ok(()) | Err(StoreError::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if !self.release(provisioner, a).await {
            return Ok(());
        }
        let moved = self
            .state
            .store
            .assignment_fail(
                (a.id, a.attempt, &self.node()),
                failed.error,
                (retry_at, gives_up),
                now,
            )
            .await?;
        if !moved {
            return Ok(());
        }
        report.failed += 1;
        crate::metrics::provision_failed(
            &a.provisioner,
            provisioner.config.backend.as_str(),
            failed.reason,
        );
        tracing::warn!(assignment.id = %a.id, attempt = a.attempt, runner.name = %a.runner_name, error = failed.error, gives_up, "a runner started on demand failed its assignment");
        Ok(())
    }

    /// Whether the backend released the attempt's runner.
    async fn release(&self, provisioner: &Provisioner, a: &AssignmentRecord) -> bool {
        let runner = RunnerToRelease {
            assignment: a.id,
            attempt: a.attempt,
            provisioner: &a.provisioner,
            name: &a.runner_name,
            handle: a.handle.as_deref(),
        };
        match provisioner.backend.release(&runner).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(assignment.id = %a.id, runner.name = %a.runner_name, error = %e, "the backend could not release a runner; trying again at the next pass");
                crate::metrics::provision_failed(
                    &a.provisioner,
                    provisioner.config.backend.as_str(),
                    "release",
                );
                false
            }
        }
    }
}

/// Why an attempt failed: a bounded reason for the metric, the whole error for the
/// assignment's row and the log.
struct Failed<'a> {
    reason: &'static str,
    error: &'a str,
}

impl Service for Provisioners {
    const NAME: &'static str = "provisioner";
    type Report = ProvisionReport;

    async fn pass(&self, now: DateTime<Utc>) -> Result<ProvisionReport, ServiceError> {
        self.run_once(now).await
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn tell(&self, report: &ProvisionReport) {
        if report.started + report.failed + report.dropped > 0 {
            tracing::info!(?report, "provisioner pass");
        }
    }
}
