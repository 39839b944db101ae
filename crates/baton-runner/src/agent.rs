//! The agent's main loop: long-poll for as many tasks as there are free slots, run each
//! in its own task, and stop cleanly.
//!
//! On shutdown the agent stops leasing, lets running tasks finish for a grace period,
//! then kills and reports the rest. A 401 means the server no longer knows this runner:
//! it kills its tasks, forgets its identity and exits.
//!
//! All its talk with the server goes through the exchanger (`exchanger.rs`): starts,
//! completions and heartbeats of every slot, batched into one exchange, and the lease
//! requests. Every answer tells it which tasks to cancel and which leases are gone; with
//! no answer for `fence_after_s` it kills its tasks itself. A lease that got no answer
//! is asked again with the same request id, so the server replays what it leased
//! instead of stranding it.

use crate::config::RunnerConfig;
use crate::exchanger::{self, Ended};
use crate::executor::{Executor, RunResult};
use crate::health::{self, Health, SharedHealth};
use crate::isolation::{self, Isolation};
use crate::leftovers;
use crate::registration::Registration;
use crate::results::ResultSpool;
use crate::retry::{CallError, OnStop, Retrier, Stop, classify};
use crate::tracker::Tracker;
use baton_client::{Client, RegisterRunner, RunnerLeaving, RunningLease};
use kept::{deliver_kept, resend_kept};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod kept;

/// How long an ephemeral runner tries to unregister (a node or its stores out) before it
/// exits anyway.
const UNREGISTER_TRIES_FOR: Duration = Duration::from_secs(30);

/// Why the agent stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentExit {
    /// Asked to stop (SIGTERM, Ctrl-C).
    Shutdown,
    /// The server does not know this runner any more (deleted, or its token revoked).
    Unregistered,
    /// An ephemeral runner ran its one task and unregistered.
    Once,
    /// The server cannot serve a runner of this version (the reason is logged).
    Incompatible,
}

/// The server refused this agent's version (426) before it could register.
#[derive(Debug, thiserror::Error)]
#[error("the server cannot serve this runner version: {0}")]
pub struct IncompatibleRunner(pub String);

/// The runner agent: its settings and its client for the server, until `run` ends.
pub struct Agent {
    config: Arc<RunnerConfig>,
    client: Client,
    /// Taken out of the settings, and dropped once the runner is registered: nothing
    /// the agent keeps holds it for longer than it needs it.
    registration_token: Mutex<Option<String>>,
}

impl Agent {
    /// An agent with these settings; it talks to no server until `run`.
    pub fn new(mut config: RunnerConfig) -> anyhow::Result<Self> {
        let client =
            Client::new(&config.server, None)?.with_agent_version(config.announced_version());
        let registration_token = Mutex::new(config.registration_token.take());
        Ok(Agent {
            config: Arc::new(config),
            client,
            registration_token,
        })
    }

    /// The state dir is the agent's alone (0700): it holds the runner token and results;
    /// the work dir, where tasks run, is never inside it, and lets each task's user pass
    /// through to its own folder (0711) but list nobody's.
    /// Returns the work dir's absolute path.
    fn prepare_dirs(&self) -> anyhow::Result<std::path::PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let (state, work) = (&self.config.state_dir, &self.config.work_dir);
        std::fs::create_dir_all(state)?;
        std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o700))?;
        std::fs::create_dir_all(work)?;
        let (state, work) = (std::fs::canonicalize(state)?, std::fs::canonicalize(work)?);
        anyhow::ensure!(
            !work.starts_with(&state),
            "the work dir {} lies inside the state dir {}: a task could reach the runner's \
             token; put it elsewhere (--work-dir)",
            work.display(),
            state.display()
        );
        std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o711))?;
        Ok(work)
    }

    /// The stored identity, or a new registration when there is none.
    pub async fn registration(&self, shutdown: &CancellationToken) -> anyhow::Result<Registration> {
        let registration_token = self
            .registration_token
            .lock()
            .expect("registration token lock")
            .take();
        if let Some(reg) = Registration::load(&self.config.state_dir)? {
            anyhow::ensure!(
                same_server(&reg.server, &self.config.server) || self.config.allow_server_change,
                "this runner registered with {} but is told to talk to {}: its token would go \
                 to a server that did not issue it. Pass --allow-server-change if the cluster \
                 moved, or remove {} to register anew",
                reg.server,
                self.config.server,
                self.config.state_dir.display()
            );
            return Ok(reg);
        }
        let Some(registration_token) = registration_token else {
            anyhow::bail!(
                "this runner is not registered yet ({} holds no identity): pass --registration-token",
                self.config.state_dir.display()
            );
        };
        let request = RegisterRunner {
            registration_token,
            name: self.config.name.clone(),
            labels: self.config.labels.clone(),
            queues: self.config.queues.clone(),
            capacity: self.config.capacity as i32,
            version: self.config.announced_version(),
        };
        let (client, request) = (&self.client, &request);
        let registered = Retrier::new(self.config.backoff())
            .stopped_by(shutdown.clone(), OnStop::End)
            .call(move || async move {
                let answer = client.register(request).await.map_err(classify);
                if let Err(e) = &answer
                    && e.retryable()
                {
                    tracing::warn!(error = %e, "registration failed; retrying");
                }
                answer
            })
            .await;
        let registered = match registered {
            Ok(registered) => registered,
            Err(CallError::Stop(Stop::Incompatible(reason))) => {
                return Err(IncompatibleRunner(reason).into());
            }
            // Registration never gives up on its own: only a stop ends its retrying.
            Err(e) if e.retryable() => anyhow::bail!("stopped before registering"),
            Err(other) => anyhow::bail!("registration refused: {other}"),
        };
        let reg = Registration {
            runner_id: registered.runner_id,
            token: registered.token,
            server: self.config.server.clone(),
        };
        reg.save(&self.config.state_dir)?;
        tracing::info!(runner.id = %reg.runner_id, "registered");
        Ok(reg)
    }

    /// Runs until `shutdown` (a graceful stop: running tasks get the shutdown grace) or
    /// `orphaned` (the runner's supervisor died: every task is killed at once, since
    /// nothing would be left to stop them if this agent died next).
    pub async fn run(
        self,
        shutdown: CancellationToken,
        orphaned: CancellationToken,
    ) -> anyhow::Result<AgentExit> {
        // Its /metrics is served beside /healthz; without one, recording costs nothing.
        if self.config.healthz_listen.is_some() {
            crate::metrics::install();
        }
        // Up before registering: a probe must not restart an agent that is only waiting
        // for a server to come up.
        let health: SharedHealth = Arc::new(Mutex::new(Health {
            not_leasing_because: Some("registering".into()),
            ..Health::default()
        }));
        if let Some(addr) = self.config.healthz_listen {
            let (health, stop) = (health.clone(), shutdown.clone());
            tokio::spawn(async move {
                if let Err(e) = health::serve(addr, health, stop).await {
                    tracing::error!(error = %e, %addr, "cannot serve /healthz");
                }
            });
        }
        isolation::forbid_dumps();
        let mut isolation = Isolation::choose(
            self.config.run_as.as_deref(),
            self.config.slot_uid_base,
            self.config.task_max_processes,
        )?;
        let work_root = self.prepare_dirs()?;
        isolation.check_reach(&work_root).await?;
        let isolation = Arc::new(isolation);
        let reg = self.registration(&shutdown).await?;
        health.lock().expect("health lock").runner_id = Some(reg.runner_id);
        if matches!(*isolation, Isolation::SameUser) {
            tracing::warn!(
                "tasks run as this agent's own user and can read its runner token: run the \
                 agent as root (each slot then runs as a user of its own) or pass --run-as"
            );
        }
        let client = self.client.with_token(reg.token.clone());
        let mark: Arc<str> = leftovers::mark(&self.config.state_dir)
            .map_err(|e| anyhow::anyhow!("cannot keep the runner's mark in the state dir: {e}"))?
            .into();
        std::fs::create_dir_all(self.config.spool_dir())
            .map_err(|e| anyhow::anyhow!("cannot make the log spool dir: {e}"))?;
        let killed = leftovers::kill_marked(&mark);
        if killed > 0 {
            tracing::warn!(
                killed,
                "killed tasks a previous run of this runner left behind"
            );
        }
        // Time-ordered, so the server can tell a later boot from an earlier one seen late;
        // never earlier than the last, whatever the clock did meanwhile.
        let boot_id = crate::boots::next(&self.config.state_dir)
            .map_err(|e| anyhow::anyhow!("cannot keep the boot id in the state dir: {e}"))?;
        tracing::info!(runner.id = %reg.runner_id, boot.id = %boot_id, capacity = self.config.capacity, tasks_run = %isolation.describe(), "runner started");
        let results = ResultSpool::open(&self.config.results_dir())
            .map_err(|e| anyhow::anyhow!("cannot keep results in the state dir: {e}"))?;
        let undelivered =
            deliver_kept(&client, boot_id, &results, self.config.backoff(), &shutdown).await;
        // An ephemeral runner takes exactly one task.
        let capacity = if self.config.once {
            1
        } else {
            self.config.capacity as usize
        };
        let slots = Arc::new(Semaphore::new(capacity));
        let tracker = Arc::new(Tracker::default());
        crate::metrics::slots_total(capacity);
        let took_one = Arc::new(AtomicBool::new(false));
        let stop_leasing = CancellationToken::new();
        let hold = {
            let (config, took_one, health, tracker) = (
                self.config.clone(),
                took_one.clone(),
                health.clone(),
                tracker.clone(),
            );
            // The exchanger asks before every exchange; the disk is looked at once a
            // second at most.
            let disk: std::sync::Mutex<Option<(std::time::Instant, Option<String>)>> =
                std::sync::Mutex::new(None);
            Arc::new(move || {
                let why = if config.once && took_one.load(Ordering::Relaxed) {
                    Some("an ephemeral runner with its one task".to_string())
                } else {
                    let mut disk = disk.lock().expect("disk check lock");
                    match &*disk {
                        Some((at, why)) if at.elapsed() < DISK_CHECK_EVERY => why.clone(),
                        _ => {
                            let why = low_disk(&config);
                            *disk = Some((std::time::Instant::now(), why.clone()));
                            why
                        }
                    }
                };
                set_health(&health, &tracker, why.clone());
                why
            }) as Arc<dyn Fn() -> Option<String> + Send + Sync>
        };
        let (reports, mut assigned, mut exchanging) = exchanger::spawn(exchanger::Setup {
            client: client.clone(),
            config: self.config.clone(),
            boot_id,
            tracker: tracker.clone(),
            slots: slots.clone(),
            hold,
            stop_leasing: stop_leasing.clone(),
        });
        let force_stop = CancellationToken::new();
        let executor = Arc::new(Executor {
            client: client.clone(),
            config: self.config.clone(),
            reports,
            mark,
            isolation: isolation.clone(),
            work_root: work_root.into(),
            results: results.clone(),
        });
        if !undelivered.is_empty() {
            tokio::spawn(resend_kept(
                executor.reports.clone(),
                results.clone(),
                undelivered,
                self.config.backoff(),
                force_stop.clone(),
            ));
        }
        let mut tasks = JoinSet::new();
        let unregistered = CancellationToken::new();
        let mut incompatible: Option<String> = None;
        let mut exchanger_done = false;

        loop {
            while let Some(done) = tasks.try_join_next() {
                note_result(done, &unregistered);
            }
            if shutdown.is_cancelled()
                || unregistered.is_cancelled()
                || incompatible.is_some()
                || (self.config.once && took_one.load(Ordering::Relaxed))
            {
                break;
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = unregistered.cancelled() => break,
                _ = orphaned.cancelled() => {
                    // As if this agent had crashed too: killed, not reported; the server
                    // finds the runner restarted or lost.
                    tracing::error!("the runner's supervisor is gone: killing every task");
                    tracker.abandon_all();
                    break;
                }
                Some(done) = tasks.join_next(), if !tasks.is_empty() => note_result(done, &unregistered),
                ended = &mut exchanging, if !exchanger_done => {
                    exchanger_done = true;
                    match ended {
                        Ok(Ended::Unregistered) => unregistered.cancel(),
                        Ok(Ended::Incompatible(reason)) => incompatible = Some(reason),
                        Ok(Ended::Shutdown) => break,
                        Err(e) => anyhow::bail!("the exchanger failed: {e}"),
                    }
                }
                assignment = assigned.recv() => {
                    let Some(exchanger::Assigned { task, slot, control, since }) = assignment else { continue };
                    took_one.store(true, Ordering::Relaxed);
                    let busy = crate::metrics::BusySlot::take();
                    let (executor, tracker, stop) =
                        (executor.clone(), tracker.clone(), force_stop.clone());
                    let user = isolation.take_user();
                    tasks.spawn(async move {
                        let (id, lease) = (task.id, task.lease_id);
                        let result = executor.run(task, since, stop, control, user).await;
                        if matches!(result, RunResult::Abandoned | RunResult::Kept) {
                            // The server may still count it running: a run it no longer
                            // hears of is ended once this agent's list leaves it out.
                            tracker.dropped_runs();
                        }
                        tracker.remove(id, lease);
                        drop(slot);
                        drop(busy);
                        result
                    });
                }
            }
        }
        stop_leasing.cancel();

        let exit = if let Some(reason) = &incompatible {
            tracing::error!(%reason, "the server cannot serve this runner version: stopping");
            force_stop.cancel();
            AgentExit::Incompatible
        } else if unregistered.is_cancelled() {
            tracing::warn!("the server no longer knows this runner: stopping its tasks");
            force_stop.cancel();
            AgentExit::Unregistered
        } else if self.config.once && took_one.load(Ordering::Relaxed) && !shutdown.is_cancelled() {
            AgentExit::Once
        } else {
            AgentExit::Shutdown
        };
        if exit == AgentExit::Once {
            // Its one task runs to its end (or until asked to stop, then the usual grace).
            tokio::select! {
                _ = async { while let Some(done) = tasks.join_next().await { note_result(done, &unregistered) } } => {}
                _ = shutdown.cancelled() => {}
            }
        }
        self.drain(&mut tasks, &force_stop, &unregistered).await;
        // The last reports are out: the exchanger ends once every handle to it is gone.
        drop(executor);
        if !exchanger_done {
            let _ = tokio::time::timeout(Duration::from_secs(5), exchanging).await;
        }
        if exit == AgentExit::Once {
            self.unregister(&client, boot_id, &tracker, &results, &shutdown)
                .await;
            Registration::remove(&self.config.state_dir)?;
        }
        if exit == AgentExit::Unregistered {
            Registration::remove(&self.config.state_dir)?;
        }
        tracing::info!(?exit, "runner stopped");
        Ok(exit)
    }

    /// Leaves, saying which runs it still holds: those it tracks, and those whose result it
    /// kept, undelivered (the last try of which may still land) — each as reporting. The
    /// server ends every other run of this boot as forgotten — one from an answer that
    /// came back after the fence, which this agent never started — and deletes the runner.
    /// Tried for up to [`UNREGISTER_TRIES_FOR`]: a runner not deleted is left to its
    /// provisioner or an operator.
    async fn unregister(
        &self,
        client: &Client,
        boot_id: uuid::Uuid,
        tracker: &Tracker,
        results: &ResultSpool,
        shutdown: &CancellationToken,
    ) {
        let mut running = tracker.leases();
        for kept in results.pending() {
            if !running.iter().any(|r| r.task_id == kept.task_id) {
                running.push(RunningLease {
                    task_id: kept.task_id,
                    lease_id: kept.lease_id,
                    reporting: true,
                });
            }
        }
        let leaving = RunnerLeaving { boot_id, running };
        let leaving = &leaving;
        let left = Retrier::new(self.config.backoff())
            .until(Instant::now() + UNREGISTER_TRIES_FOR)
            .stopped_by(shutdown.clone(), OnStop::LastTry)
            .call(move || async move { client.unregister(leaving).await.map_err(classify) })
            .await;
        match left {
            // A try whose answer was lost deleted it: the next one is refused as unknown.
            Ok(()) | Err(CallError::Stop(Stop::Unregistered)) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not unregister; an operator can delete the runner")
            }
        }
    }

    /// Lets running tasks finish within the shutdown grace, then stops the rest.
    async fn drain(
        &self,
        tasks: &mut JoinSet<RunResult>,
        force_stop: &CancellationToken,
        unregistered: &CancellationToken,
    ) {
        if tasks.is_empty() {
            return;
        }
        tracing::info!(
            running = tasks.len(),
            grace_s = self.config.shutdown_grace_s,
            "waiting for running tasks"
        );
        let grace_end = Instant::now() + self.config.shutdown_grace();
        loop {
            tokio::select! {
                done = tasks.join_next() => match done {
                    Some(done) => note_result(done, unregistered),
                    None => return,
                },
                _ = tokio::time::sleep_until(grace_end), if !force_stop.is_cancelled() => {
                    tracing::warn!(running = tasks.len(), "shutdown grace over: stopping tasks");
                    force_stop.cancel();
                }
            }
        }
    }
}

/// Whether two server URLs name the same server (a trailing slash aside).
fn same_server(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// How long a look at the free disk space holds.
const DISK_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Why the agent should not lease now: too little disk left for a task's work folder
/// (as act_runner checks before it takes a job).
fn low_disk(config: &RunnerConfig) -> Option<String> {
    let free = health::free_disk_mb(&config.work_dir)?;
    (free < config.min_free_disk_mb).then(|| {
        format!(
            "only {free} MiB free in {}, below {} MiB",
            config.work_dir.display(),
            config.min_free_disk_mb
        )
    })
}

fn set_health(health: &SharedHealth, tracker: &Tracker, not_leasing: Option<String>) {
    let mut h = health.lock().expect("health lock");
    h.running = tracker.len();
    h.leasing = not_leasing.is_none();
    h.not_leasing_because = not_leasing;
}

fn note_result(done: Result<RunResult, tokio::task::JoinError>, unregistered: &CancellationToken) {
    match done {
        Ok(RunResult::Unregistered) => unregistered.cancel(),
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "a task supervisor crashed"),
    }
}
