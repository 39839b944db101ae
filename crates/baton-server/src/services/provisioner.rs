//! The provisioner, on every node with `[[provisioners]]` (docs/dynamic-runners.md):
//! each pass it adopts the assignments of dead nodes, judges the assignments it owns by
//! what is known of their runners (`provision::decide`), then admits new runners for the
//! demand it measured and has their backends start them. Admission is one Postgres
//! transaction per provisioner under an advisory lock, so nodes passing at once never
//! start more runners than the capacity or the demand allows. A backend's start or
//! release (a script may take minutes) runs beside the passes, and the assignment it
//! concerns is left alone until it is over.

use super::ServiceError;
use super::service::Service;
use crate::auth::{REGISTRATION_TOKEN_PREFIX, hash_token, new_token, revoke_everywhere};
use crate::config::ProvisionerConfig;
use crate::provision::backend::{Backend, RunnerToRelease, RunnerToStart};
use crate::provision::demand::Measure;
use crate::state::AppState;
use baton_core::RunnerId;
use baton_core::provision::{self, AfterFailure, RunnerFacts, State, Verdict};
use baton_store::{Admission, AssignmentFacts, AssignmentRecord, Candidate, StoreError};
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// However steady the set of live nodes, a node looks for orphaned assignments this
/// often: one that lapsed mid-pass may have committed some after its peers adopted.
const ADOPT_AT_LEAST_EVERY: Duration = Duration::from_secs(30);

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
    /// Attempts whose end began: their runner did not claim work in time, or exited
    /// before it did.
    pub failing: usize,
    /// Retries dropped: the demand they were for had gone.
    pub dropped: usize,
}

/// One provisioner, with its backend.
struct Provisioner {
    config: ProvisionerConfig,
    backend: Backend,
}

/// An attempt: an assignment and which start of a runner for it.
type Attempt = (Uuid, i32);

/// The longest a backend's start or release may run beside the passes: a script's own
/// limit, with room for the store calls around it.
const SIDE_WORK_LIMIT: Duration = Duration::from_secs(150);

/// How long a failed attempt's end waits after its runner's pause: any start under way
/// as the pause landed has committed by then (a start is one statement).
const END_AFTER_PAUSE: Duration = Duration::from_secs(2);

/// An attempt's busy mark, taken off however its side work ends.
struct Busy {
    inner: Arc<Inner>,
    attempt: Attempt,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.inner.busy().remove(&self.attempt);
    }
}

struct Inner {
    state: AppState,
    provisioners: Vec<Provisioner>,
    /// Attempts whose backend start or release is under way: not judged meanwhile.
    busy: Mutex<HashSet<Attempt>>,
    /// The live nodes at the last adoption, and when it was.
    adopted: Mutex<Option<(Vec<String>, Instant)>>,
    /// Whether this node may own open assignments: unknown at start, then what the last
    /// look found, set again by an admission or an adoption.
    may_own: AtomicBool,
}

/// Starts and releases ephemeral runners for waiting work.
pub struct Provisioners {
    inner: Arc<Inner>,
    interval: Duration,
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
            inner: Arc::new(Inner {
                state,
                provisioners,
                busy: Mutex::default(),
                adopted: Mutex::new(None),
                may_own: AtomicBool::new(true),
            }),
        }
    }

    /// One pass as of `now`.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<ProvisionReport, ServiceError> {
        self.inner.run_once(&self.inner, now).await
    }
}

impl Inner {
    fn node(&self) -> String {
        self.state.identity.id()
    }

    fn provisioner(&self, name: &str) -> Option<&Provisioner> {
        self.provisioners.iter().find(|p| p.config.name == name)
    }

    fn busy(&self) -> std::sync::MutexGuard<'_, HashSet<Attempt>> {
        self.busy.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn run_once(
        &self,
        me: &Arc<Inner>,
        now: DateTime<Utc>,
    ) -> Result<ProvisionReport, ServiceError> {
        let mut report = ProvisionReport::default();
        if !self.state.identity.is_live() {
            return Ok(report);
        }
        self.adopt(&mut report).await?;
        // Which runners exited is read before what Postgres knows of them: a runner
        // unregisters before it exits, so one seen exited is seen gone too.
        let exited: HashSet<Attempt> = self
            .provisioners
            .iter()
            .flat_map(|p| p.backend.exited_all())
            .collect();
        let mut due: Vec<usize> = vec![0; self.provisioners.len()];
        if self.may_own.load(Ordering::Relaxed) {
            // What was busy before the facts were read: an attempt whose side work ended
            // after the read is judged at the next pass, from fresh facts.
            let busy_before: HashSet<Attempt> = self.busy().clone();
            let owned = self.state.store.assignments_of(&self.node()).await?;
            self.may_own.store(!owned.is_empty(), Ordering::Relaxed);
            for facts in owned {
                let attempt = (facts.assignment.id, facts.assignment.attempt);
                if busy_before.contains(&attempt) {
                    continue;
                }
                if let Some(verdict) = self.judge(me, facts, &exited, now, &mut report).await?
                    && let Some(i) = self
                        .provisioners
                        .iter()
                        .position(|p| p.config.name == verdict)
                {
                    due[i] += 1;
                }
            }
        }
        let offers: Vec<_> = self.provisioners.iter().map(|p| p.config.offer()).collect();
        let measure = Measure {
            store: &self.state.store,
            coord: &self.state.coord,
            now,
            offline_after: Duration::from_secs(self.state.config.timings.runner_offline_after_s),
        };
        let demands = measure.demands(&offers).await?;
        for ((provisioner, demand), due) in self.provisioners.iter().zip(demands).zip(due) {
            crate::metrics::provision_demand(&provisioner.config.name, demand.uncovered());
            // Nothing waits and no retry of ours is due: no transaction at all.
            if demand.uncovered() == 0 && due == 0 {
                continue;
            }
            // A node that lapsed during this pass admits nothing: its peers may be
            // adopting its assignments.
            if !self.state.identity.is_live() {
                break;
            }
            self.admit(me, provisioner, demand.uncovered(), due, now, &mut report)
                .await?;
        }
        Ok(report)
    }

    /// Takes over the open assignments (of the provisioners this node has) of nodes that
    /// are no longer live, when the set of live nodes changed since the last look, and at
    /// least every [`ADOPT_AT_LEAST_EVERY`].
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
        let fresh = self
            .adopted
            .lock()
            .expect("adoption lock")
            .as_ref()
            .is_some_and(|(seen, at)| *seen == live && at.elapsed() < ADOPT_AT_LEAST_EVERY);
        if fresh {
            return Ok(());
        }
        let names: Vec<String> = self
            .provisioners
            .iter()
            .map(|p| p.config.name.clone())
            .collect();
        report.adopted = self
            .state
            .store
            .assignments_adopt(&self.node(), &live, &names)
            .await?;
        *self.adopted.lock().expect("adoption lock") = Some((live, Instant::now()));
        if report.adopted > 0 {
            self.may_own.store(true, Ordering::Relaxed);
            tracing::warn!(node.id = %self.node(), assignments = report.adopted, "adopted a dead node's runner assignments");
        }
        Ok(())
    }

    /// Admits and starts this provisioner's runners for `uncovered` waiting tasks, and
    /// its `due` retries.
    async fn admit(
        &self,
        me: &Arc<Inner>,
        provisioner: &Provisioner,
        uncovered: u64,
        due: usize,
        now: DateTime<Utc>,
        report: &mut ProvisionReport,
    ) -> Result<(), ServiceError> {
        let config = &provisioner.config;
        let node = self.node();
        // As many candidates as could be started: one per uncovered task or due retry,
        // within the capacity. Each has a token; the unused are dropped unstored.
        let wanted = (uncovered as usize + due).min(config.capacity as usize);
        let tokens: Vec<String> = (0..wanted)
            .map(|_| new_token(REGISTRATION_TOKEN_PREFIX))
            .collect();
        let candidates: Vec<Candidate> = tokens
            .iter()
            .map(|token| Candidate {
                runner_name: format!("{}-{}", config.name, hex::encode(rand::random::<[u8; 6]>())),
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
            let a = launch.assignment;
            report.started += 1;
            crate::metrics::provision_started(&config.name, config.backend.as_str());
            tracing::info!(assignment.id = %a.id, attempt = a.attempt, runner.name = %a.runner_name, provisioner = %config.name, "starting a runner on demand");
            let token = tokens[launch.candidate].clone();
            let server_url = server_url.clone();
            self.beside(me, (a.id, a.attempt), move |inner| async move {
                inner.start(&a, &token, &server_url).await
            });
        }
        Ok(())
    }

    /// Runs `work` beside the passes, the attempt marked busy until it is over — or
    /// abandoned after [`SIDE_WORK_LIMIT`], or panicked: the mark goes with it either way.
    fn beside<F, Fut>(&self, me: &Arc<Inner>, attempt: Attempt, work: F)
    where
        F: FnOnce(Arc<Inner>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(), ServiceError>> + Send,
    {
        if !self.busy().insert(attempt) {
            return;
        }
        let guard = Busy {
            inner: me.clone(),
            attempt,
        };
        let inner = me.clone();
        tokio::spawn(async move {
            let _guard = guard;
            match tokio::time::timeout(SIDE_WORK_LIMIT, work(inner)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(assignment.id = %attempt.0, attempt = attempt.1, error = %e, "runner on demand: a store failed; the next pass tries again")
                }
                Err(_) => {
                    tracing::warn!(assignment.id = %attempt.0, attempt = attempt.1, "runner on demand: a backend call ran out of time; the next pass tries again")
                }
            }
        });
    }

    /// Starts an admitted attempt's runner through its backend and records its handle;
    /// a refused start begins the attempt's end.
    async fn start(
        &self,
        a: &AssignmentRecord,
        token: &str,
        server_url: &str,
    ) -> Result<(), ServiceError> {
        let Some(provisioner) = self.provisioner(&a.provisioner) else {
            return Ok(());
        };
        let runner = RunnerToStart {
            assignment: a.id,
            attempt: a.attempt,
            provisioner: &a.provisioner,
            name: &a.runner_name,
            labels: &a.labels,
            queues: &a.queues,
            registration_token: token,
            server_url,
        };
        match provisioner.backend.start(&runner).await {
            Ok(handle) => {
                let kept = match &handle {
                    Some(handle) => {
                        self.state
                            .store
                            .assignment_set_handle((a.id, a.attempt, &self.node()), handle)
                            .await?
                    }
                    None => true,
                };
                if !kept {
                    // The attempt moved on while the backend started its runner (an
                    // adopter ended it without this handle): released here, at once.
                    let started = AssignmentRecord {
                        handle,
                        ..a.clone()
                    };
                    tracing::warn!(assignment.id = %a.id, "a runner started for an attempt that moved on; releasing it");
                    self.release(&started).await;
                }
            }
            Err(e) => {
                tracing::warn!(assignment.id = %a.id, error = %e, "the backend could not start a runner");
                let now = self.state.clock.now();
                self.begin_failing(provisioner, a, "start", &e.to_string(), now)
                    .await?;
            }
        }
        Ok(())
    }

    /// Judges one of this node's assignments and acts on the verdict. Returns the name
    /// of its provisioner when its retry is due (for the admission that follows).
    async fn judge(
        &self,
        me: &Arc<Inner>,
        facts: AssignmentFacts,
        exited: &HashSet<Attempt>,
        now: DateTime<Utc>,
        report: &mut ProvisionReport,
    ) -> Result<Option<String>, ServiceError> {
        let a = facts.assignment;
        let attempt = (a.id, a.attempt);
        let Some(provisioner) = self.provisioner(&a.provisioner) else {
            return Ok(None);
        };
        if self.busy().contains(&attempt) {
            return Ok(None);
        }
        let state = match a.state.as_str() {
            "starting" => State::Starting,
            "running" => State::Running,
            "retrying" => State::Retrying,
            _ => return Ok(None),
        };
        let since = |at: DateTime<Utc>| (now - at).to_std().unwrap_or_default();
        let runner_facts = RunnerFacts {
            registered: facts.runner_id.is_some(),
            left: facts.runner_left,
            paused: facts.runner_paused,
            took_work: facts.took_work,
            exited: exited.contains(&attempt),
            silent_for: facts.runner_seen.map(since),
        };
        let limits = provisioner.config.limits(Duration::from_secs(
            self.state.config.timings.runner_lost_after_s,
        ));
        let retry_due = a.retry_at.is_some_and(|at| at <= now);
        let failing = state == State::Starting && a.error.is_some();
        let runner = facts.runner_id.map(RunnerId::from);
        let node = self.node();
        match provision::decide(
            state,
            (since(a.started_at), retry_due, failing),
            runner_facts,
            &limits,
        ) {
            Verdict::Keep => {}
            // Started again (or dropped) by the admission that follows.
            Verdict::RetryDue => return Ok(Some(a.provisioner)),
            Verdict::Running => {
                if failing && let Some(runner) = runner {
                    self.set_paused(runner, false).await?;
                }
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
                report.done += 1;
                tracing::info!(assignment.id = %a.id, attempt = a.attempt, runner.name = %a.runner_name, "a runner started on demand is done; releasing it");
                self.beside(me, attempt, move |inner| async move {
                    if inner.release(&a).await {
                        let now = inner.state.clock.now();
                        inner
                            .state
                            .store
                            .assignment_done(a.id, a.attempt, &inner.node(), now)
                            .await?;
                    }
                    Ok(())
                });
            }
            Verdict::BeginFailing(failure) => {
                report.failing += 1;
                let reason = failure.as_str();
                self.begin_failing(provisioner, &a, reason, reason, now)
                    .await?;
            }
            Verdict::Pause => {
                let paused = self
                    .state
                    .store
                    .assignment_pause_late((a.id, a.attempt, &node), end_after(now), now)
                    .await?;
                for runner in paused {
                    revoke_everywhere(&self.state, runner).await;
                }
            }
            Verdict::Fail => {
                if let Some(runner) = runner {
                    // Its next request gets 401 and the agent exits.
                    match crate::auth::delete_runner(&self.state, runner).await {
                        Ok(()) | Err(StoreError::NotFound) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                self.beside(me, attempt, move |inner| async move {
                    if inner.release(&a).await {
                        let now = inner.state.clock.now();
                        inner.end_failed(&a, now).await?;
                    }
                    Ok(())
                });
            }
        }
        Ok(None)
    }

    /// The first step of a failed attempt's end, in one transaction: marked failing (so
    /// whoever owns it next goes on with the end), its token revoked so its runner can no
    /// longer register, and every runner registered with it paused so it takes nothing
    /// more. The end itself waits [`END_AFTER_PAUSE`], by which any start that was under
    /// way as the pause landed has committed.
    async fn begin_failing(
        &self,
        provisioner: &Provisioner,
        a: &AssignmentRecord,
        reason: &'static str,
        error: &str,
        now: DateTime<Utc>,
    ) -> Result<(), ServiceError> {
        let Some(paused) = self
            .state
            .store
            .assignment_begin_failing((a.id, a.attempt, &self.node()), error, end_after(now), now)
            .await?
        else {
            return Ok(());
        };
        for runner in paused {
            revoke_everywhere(&self.state, runner).await;
        }
        crate::metrics::provision_failed(
            &a.provisioner,
            provisioner.config.backend.as_str(),
            reason,
        );
        tracing::warn!(assignment.id = %a.id, attempt = a.attempt, runner.name = %a.runner_name, error, "a runner started on demand failed its assignment");
        Ok(())
    }

    /// The last step of a failed attempt's end, once its runner is deleted and released:
    /// the assignment retries after a backoff, or gives up.
    async fn end_failed(
        &self,
        a: &AssignmentRecord,
        now: DateTime<Utc>,
    ) -> Result<(), ServiceError> {
        let Some(provisioner) = self.provisioner(&a.provisioner) else {
            return Ok(());
        };
        let limits = provisioner.config.limits(Duration::ZERO);
        let (wait, gives_up) =
            match provision::after_failure(a.attempt as u32, &limits, rand::random::<f64>()) {
                AfterFailure::Retry(wait) => (wait, false),
                AfterFailure::GiveUp(cool) => (cool, true),
            };
        let retry_at = chrono::Duration::from_std(wait)
            .ok()
            .and_then(|wait| now.checked_add_signed(wait))
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let error = a.error.as_deref().unwrap_or("failed");
        let deleted = self
            .state
            .store
            .assignment_fail(
                (a.id, a.attempt, &self.node()),
                error,
                (retry_at, gives_up),
                now,
            )
            .await?;
        // A runner that registered with the attempt's token however late goes with it.
        for runner in deleted.unwrap_or_default() {
            revoke_everywhere(&self.state, runner).await;
        }
        Ok(())
    }

    /// Pauses or resumes a runner, on every node at once (their token caches forget it).
    async fn set_paused(&self, runner: RunnerId, paused: bool) -> Result<(), ServiceError> {
        match self.state.store.runner_set_paused(runner, paused).await {
            Ok(_) | Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
        revoke_everywhere(&self.state, runner).await;
        Ok(())
    }

    /// Whether the backend released the attempt's runner.
    async fn release(&self, a: &AssignmentRecord) -> bool {
        let Some(provisioner) = self.provisioner(&a.provisioner) else {
            return false;
        };
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

/// When a failed attempt's end may go on, paused at `now`.
fn end_after(now: DateTime<Utc>) -> DateTime<Utc> {
    now + chrono::Duration::from_std(END_AFTER_PAUSE).expect("a short grace")
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
        if report.started + report.failing + report.dropped + report.adopted as usize > 0 {
            tracing::info!(?report, "provisioner pass");
        }
    }
}
