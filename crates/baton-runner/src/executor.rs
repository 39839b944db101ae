//! The shell executor: one leased task, from `start` to `complete`.
//!
//! The task runs as the leader of a new process group (argv directly, or a script through
//! `sh -c`), with its own working directory and environment. Stopping it — timeout,
//! cancel, lost lease, runner shutdown — signals the whole group: SIGTERM, then SIGKILL
//! after a grace period. Leftovers of a finished task are killed too, so nothing it
//! started outlives it.

use crate::config::RunnerConfig;
use crate::guard;
use crate::leftovers;
use crate::logship::{LogSpool, Shipper};
use crate::process_group::signal_group;
use crate::retry::{CallError, Retrier, Stop, classify};
use crate::tracker::TaskControl;
use baton_client::trace_context;
use baton_client::{Client, CompleteTask, LeasedTask, Outcome};
use nix::sys::signal::Signal;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How long reports are retried while the server is unreachable.
const REPORT_PATIENCE: Duration = Duration::from_secs(120);
/// After the task exits, how long its output pipes may stay open (a grandchild that left
/// the group holding them) before we stop reading.
const PIPE_DRAIN: Duration = Duration::from_secs(5);

/// Why a run ended, before it is turned into a report.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    Exited(ExitStatus),
    TimedOut,
    CancelRequested,
    RunnerStopping,
    SpawnFailed(String),
    /// The server said stop (lease gone, runner unregistered): nothing to report.
    Stopped(Stop),
}

/// What the agent needs to know afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunResult {
    Reported,
    /// Not reported: the lease was gone, or the report never got through.
    Abandoned,
    /// The server says this runner is not registered: the agent must stop.
    Unregistered,
}

fn stopped(stop: Stop) -> RunResult {
    match stop {
        Stop::Unregistered => RunResult::Unregistered,
        Stop::LeaseGone | Stop::Refused(_) | Stop::Incompatible(_) => RunResult::Abandoned,
    }
}

pub struct Executor {
    pub client: Client,
    pub config: Arc<RunnerConfig>,
}

impl Executor {
    /// Runs one task to its report. `stop` is the runner's forced stop (its shutdown
    /// grace is over): the task is killed and reported failed. `control` carries the
    /// server's cancel and lease-gone verdicts.
    pub async fn run(
        &self,
        task: LeasedTask,
        stop: CancellationToken,
        control: TaskControl,
    ) -> RunResult {
        // The run joins its task's trace under the server's lease span.
        let span = tracing::info_span!(
            "task.run",
            task.id = %task.id,
            lease.id = %task.lease_id,
            task.attempt = task.attempt,
        );
        trace_context::adopt_parent(&span, task.traceparent.as_deref());
        // Without a tracer of our own, the reports still carry the lease's context.
        let for_task = Executor {
            client: self.client.with_trace_fallback(task.traceparent.clone()),
            config: self.config.clone(),
        };
        for_task
            .run_traced(task, stop, control)
            .instrument(span)
            .await
    }

    async fn run_traced(
        &self,
        task: LeasedTask,
        stop: CancellationToken,
        control: TaskControl,
    ) -> RunResult {
        let id = task.id;
        // The task's time counts from the first `start` attempt: the server's clock starts
        // at its commit, which a lost answer and our retries may have preceded.
        let deadline = Instant::now() + Duration::from_secs(task.timeout_s.max(0) as u64);
        if let Err(e) = self.acknowledge(&task).await {
            // Never started, so never run: the server requeues it after its ack timeout.
            tracing::warn!(task.id = %id, error = %e, "lease not acknowledged; task not run");
            return match e {
                CallError::Stop(s) => stopped(s),
                _ => RunResult::Abandoned,
            };
        }
        let spool_path = self.config.state_dir.join("logs").join(format!("{id}.log"));
        let spool = match LogSpool::create(&spool_path) {
            Ok(spool) => Arc::new(spool),
            Err(e) => {
                let ending = Ending::SpawnFailed(format!("cannot create the log spool: {e}"));
                return self.report(&task, ending, 0).await;
            }
        };
        let mut shipper = Shipper::new(
            self.client.clone(),
            id,
            task.lease_id,
            self.config.log_chunk_bytes,
        );
        let ending = self
            .execute(&task, &spool, &mut shipper, stop, control, deadline)
            .instrument(tracing::info_span!("task.execute", task.id = %id))
            .await;
        if !matches!(ending, Ending::Stopped(_)) {
            let deadline = Instant::now() + REPORT_PATIENCE;
            if let Err(e) = shipper.drain(&spool, deadline).await {
                tracing::warn!(task.id = %id, error = %e, "output not fully shipped; the log will be marked incomplete");
            }
        }
        self.report(&task, ending, spool.written()).await
    }

    async fn acknowledge(&self, task: &LeasedTask) -> Result<(), CallError> {
        let mut retrier = Retrier::new(Instant::now() + REPORT_PATIENCE);
        loop {
            match self.client.start(task.id, task.lease_id).await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    crate::metrics::report_error("start");
                    retrier.pause(classify(e)).await?
                }
            }
        }
    }

    /// The task's command under a guard (`baton task-guard -- ...`): argv as given, or
    /// the script through `sh -c`.
    fn command(&self, task: &LeasedTask, dir: &Path) -> Command {
        let guard = std::env::current_exe().unwrap_or_else(|_| "baton".into());
        let mut cmd = Command::new(guard);
        cmd.arg(guard::SUBCOMMAND).arg("--");
        match (&task.command, &task.script) {
            (Some(argv), _) if !argv.is_empty() => cmd.args(argv),
            (_, script) => cmd.args(["sh", "-c", script.as_deref().unwrap_or_default()]),
        };
        // The runner's own settings (its registration token among them) stay with it.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("BATON_") {
                cmd.env_remove(key);
            }
        }
        // Secret values go into the process and nowhere else: never logged or echoed.
        cmd.envs(&task.env)
            .envs(&task.secret_env)
            .env("BATON_TASK_ID", task.id.to_string())
            .env("BATON_ATTEMPT", task.attempt.to_string())
            .env("BATON_QUEUE", &task.queue);
        // The process may trace too, under the execution's span.
        if let Some(tp) = trace_context::traceparent_of(&tracing::Span::current())
            .or_else(|| task.traceparent.clone())
        {
            cmd.env("TRACEPARENT", tp);
        }
        // The guard's stdin is our pipe: it closes when this process dies.
        cmd.current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        cmd
    }

    async fn execute(
        &self,
        task: &LeasedTask,
        spool: &Arc<LogSpool>,
        shipper: &mut Shipper,
        stop: CancellationToken,
        control: TaskControl,
        deadline: Instant,
    ) -> Ending {
        let dir = self.config.work_dir.join(task.id.to_string());
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return Ending::SpawnFailed(format!(
                "cannot create the work dir {}: {e}",
                dir.display()
            ));
        }
        let mut child = match self.command(task, &dir).spawn() {
            Ok(child) => child,
            Err(e) => {
                let msg = format!("cannot start the command: {e}");
                let _ = spool.append(format!("baton: {msg}\n").as_bytes());
                let _ = std::fs::remove_dir_all(&dir);
                return Ending::SpawnFailed(msg);
            }
        };
        let pgid = child.id().expect("a just-spawned child has a pid");
        // Held, never written, until the task is over: its end is the guard's signal.
        let lifeline = child.stdin.take();
        tracing::info!(task.id = %task.id, pid = pgid, "task running");
        if let Err(e) = leftovers::record(&self.config.state_dir, task.id, pgid) {
            tracing::warn!(error = %e, "cannot record the task's process group");
        }
        let readers = [
            child.stdout.take().map(|o| spawn_reader(o, spool.clone())),
            child.stderr.take().map(|e| spawn_reader(e, spool.clone())),
        ];
        let timeout = tokio::time::sleep_until(deadline);
        tokio::pin!(timeout);
        let mut flush = tokio::time::interval(self.config.log_flush());
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        let ending = loop {
            tokio::select! {
                status = child.wait() => break match status {
                    Ok(status) => Ending::Exited(status),
                    Err(e) => Ending::SpawnFailed(format!("lost track of the process: {e}")),
                },
                _ = &mut timeout => break Ending::TimedOut,
                _ = stop.cancelled() => break Ending::RunnerStopping,
                _ = control.cancel.cancelled() => break Ending::CancelRequested,
                _ = control.gone.cancelled() => break Ending::Stopped(Stop::LeaseGone),
                _ = flush.tick() => {
                    match shipper.ship(spool).await {
                        Ok(()) | Err(CallError::Transient(_)) => {}
                        Err(CallError::Stop(s @ (Stop::LeaseGone | Stop::Unregistered))) => {
                            break Ending::Stopped(s);
                        }
                        Err(e) => tracing::warn!(task.id = %task.id, error = %e, "log shipping failed"),
                    }
                    if shipper.cancel_requested {
                        break Ending::CancelRequested;
                    }
                }
            }
        };
        if control.kill_now.is_cancelled() {
            // Self-fencing: no grace, the server is about to hand the task to another.
            signal_group(pgid, Signal::SIGKILL);
            let _ = child.wait().await;
        } else if !matches!(ending, Ending::Exited(_)) {
            self.terminate(pgid, &mut child).await;
        }
        drop(lifeline);
        // Whatever the task left running in its group goes with it.
        signal_group(pgid, Signal::SIGKILL);
        leftovers::forget(&self.config.state_dir, task.id);
        let drain_by = Instant::now() + PIPE_DRAIN;
        for reader in readers.into_iter().flatten() {
            let _ = tokio::time::timeout_at(drain_by, reader).await;
        }
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::debug!(dir = %dir.display(), error = %e, "work dir not removed");
        }
        ending
    }

    /// SIGTERM to the group, SIGKILL after the grace period.
    async fn terminate(&self, pgid: u32, child: &mut Child) {
        signal_group(pgid, Signal::SIGTERM);
        if tokio::time::timeout(self.config.kill_grace(), child.wait())
            .await
            .is_err()
        {
            signal_group(pgid, Signal::SIGKILL);
            let _ = child.wait().await;
        }
    }

    async fn report(&self, task: &LeasedTask, ending: Ending, log_size: i64) -> RunResult {
        let (outcome, exit_code, error) = match ending {
            Ending::Exited(status) => match (status.code(), status.signal()) {
                (Some(0), _) => (Outcome::Succeeded, Some(0), None),
                (Some(code), _) => (
                    Outcome::Failed,
                    Some(code),
                    Some(format!("exited with status {code}")),
                ),
                (None, Some(sig)) => (
                    Outcome::Failed,
                    None,
                    Some(format!("killed by signal {sig}")),
                ),
                (None, None) => (Outcome::Failed, None, Some("ended without a status".into())),
            },
            Ending::TimedOut => (
                Outcome::Failed,
                None,
                Some(format!("timed out after {} s", task.timeout_s)),
            ),
            Ending::CancelRequested => (Outcome::Cancelled, None, Some("cancelled".into())),
            Ending::RunnerStopping => (
                Outcome::Failed,
                None,
                Some("the runner shut down before the task finished".into()),
            ),
            Ending::SpawnFailed(msg) => (Outcome::Failed, None, Some(msg)),
            Ending::Stopped(stop) => return stopped(stop),
        };
        let report = CompleteTask {
            lease_id: task.lease_id,
            outcome,
            exit_code,
            error,
            outputs: None,
            log_size: Some(log_size),
        };
        let mut retrier = Retrier::new(Instant::now() + REPORT_PATIENCE);
        loop {
            match self.client.complete(task.id, &report).await {
                Ok(done) => {
                    tracing::info!(task.id = %task.id, status = %done.status, exit_code = ?exit_code, "task reported");
                    return RunResult::Reported;
                }
                Err(e) => {
                    crate::metrics::report_error("complete");
                    if let Err(e) = retrier.pause(classify(e)).await {
                        tracing::warn!(task.id = %task.id, error = %e, "result not delivered; the server will reconcile the task");
                        return match e {
                            CallError::Stop(s) => stopped(s),
                            _ => RunResult::Abandoned,
                        };
                    }
                }
            }
        }
    }
}

/// Copies one output pipe into the spool until it closes.
fn spawn_reader<R>(mut pipe: R, spool: Arc<LogSpool>) -> tokio::task::JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if let Err(e) = spool.append(&buf[..n]) {
                        tracing::warn!(error = %e, "cannot spool task output");
                        return;
                    }
                }
            }
        }
    })
}
