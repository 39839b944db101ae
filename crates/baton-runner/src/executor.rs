//! The shell executor: one leased task, from `start` to `complete`.
//!
//! The task runs as the leader of a new process group (argv directly, or a script through
//! `sh -c`), with its own working directory and environment. Stopping it — timeout,
//! cancel, lost lease, runner shutdown — signals the whole group: SIGTERM, then SIGKILL
//! after a grace period. Leftovers of a finished task are killed too, so nothing it
//! started outlives it.

use crate::config::{LOG_TAIL_MAX, RunnerConfig};
use crate::exchanger::Reports;
use crate::leftovers;
use crate::logship::{LogSpool, Shipper};
use crate::process_group::signal_group;
use crate::retry::{CallError, Retrier, Stop};
use crate::tracker::TaskControl;
use baton_client::trace_context;
use baton_client::{Client, CompletionItem, LeasedTask, LogTail, Outcome};
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
    /// The command could not be started: the exit code a shell gives for that (127 not
    /// found, 126 not executable), and why.
    CannotStart(i32, String),
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
    /// Starts and completions go into the agent's batched exchange.
    pub reports: Reports,
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
            reports: self.reports.clone(),
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
        // Named by the lease, not the task: a task leased to this runner again must not
        // meet the leftovers of its previous attempt.
        let spool_path = self
            .config
            .state_dir
            .join("logs")
            .join(format!("{}.log", task.lease_id));
        let spool = match LogSpool::create(&spool_path) {
            Ok(spool) => Arc::new(spool),
            Err(e) => {
                let ending = Ending::SpawnFailed(format!("cannot create the log spool: {e}"));
                return self.report(&task, ending, 0, None).await;
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
        // What is left of the output travels with the completion when it is small;
        // otherwise it is shipped first.
        let mut tail = None;
        if !matches!(ending, Ending::Stopped(_)) {
            tail = shipper.tail(&spool, LOG_TAIL_MAX);
            if tail.is_none() && shipper.behind(&spool) {
                let deadline = Instant::now() + REPORT_PATIENCE;
                if let Err(e) = shipper.drain(&spool, deadline).await {
                    tracing::warn!(task.id = %id, error = %e, "output not fully shipped; the log will be marked incomplete");
                }
            }
        }
        self.report(&task, ending, spool.written(), tail).await
    }

    async fn acknowledge(&self, task: &LeasedTask) -> Result<(), CallError> {
        let span = tracing::info_span!("runner.start", otel.kind = "client", task.id = %task.id);
        let traceparent = self.item_context(&span, task);
        let mut retrier = Retrier::new(Instant::now() + REPORT_PATIENCE);
        loop {
            let answer = self
                .reports
                .start(task.id, task.lease_id, traceparent.clone())
                .instrument(span.clone())
                .await;
            match answer {
                Ok(_) => return Ok(()),
                Err(e) => {
                    crate::metrics::report_error("start");
                    retrier.pause(e).await?
                }
            }
        }
    }

    /// The trace context an item carries: its own client span's, or, for a runner that
    /// exports no traces, the lease's — so the node's span for it still joins the task's
    /// trace.
    fn item_context(&self, span: &tracing::Span, task: &LeasedTask) -> Option<String> {
        trace_context::traceparent_of(span).or_else(|| task.traceparent.clone())
    }

    /// The task's command: argv as given, or the script through `sh -c`. One process:
    /// the runner's supervisor, not a guard per task, kills it if this agent dies.
    fn command(&self, task: &LeasedTask, dir: &Path) -> Command {
        let mut cmd = match (&task.command, &task.script) {
            (Some(argv), _) if !argv.is_empty() => {
                let mut cmd = Command::new(&argv[0]);
                cmd.args(&argv[1..]);
                cmd
            }
            (_, script) => {
                let mut cmd = Command::new("sh");
                cmd.args(["-c", script.as_deref().unwrap_or_default()]);
                cmd
            }
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
        cmd.current_dir(dir)
            .stdin(Stdio::null())
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
        let dir = self.config.work_dir.join(task.lease_id.to_string());
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return Ending::SpawnFailed(format!(
                "cannot create the work dir {}: {e}",
                dir.display()
            ));
        }
        let mut child = match self.command(task, &dir).spawn() {
            Ok(child) => child,
            Err(e) => {
                let program = match (&task.command, &task.script) {
                    (Some(argv), _) if !argv.is_empty() => argv[0].as_str(),
                    _ => "sh",
                };
                let msg = format!("cannot start the command {program}: {e}");
                let _ = spool.append(format!("baton: {msg}\n").as_bytes());
                let _ = std::fs::remove_dir_all(&dir);
                // As a shell answers: 126 found but not executable, 127 anything else.
                let code = match e.kind() {
                    std::io::ErrorKind::PermissionDenied => 126,
                    _ => 127,
                };
                return Ending::CannotStart(code, msg);
            }
        };
        let pgid = child.id().expect("a just-spawned child has a pid");
        tracing::info!(task.id = %task.id, pid = pgid, "task running");
        if let Err(e) = leftovers::record(&self.config.state_dir, task.lease_id, pgid) {
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
        // Whatever the task left running in its group goes with it.
        signal_group(pgid, Signal::SIGKILL);
        leftovers::forget(&self.config.state_dir, task.lease_id);
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

    async fn report(
        &self,
        task: &LeasedTask,
        ending: Ending,
        log_size: i64,
        log_tail: Option<LogTail>,
    ) -> RunResult {
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
            Ending::CannotStart(code, msg) => (Outcome::Failed, Some(code), Some(msg)),
            Ending::Stopped(stop) => return stopped(stop),
        };
        let span = tracing::info_span!("runner.complete", otel.kind = "client", task.id = %task.id);
        let report = CompletionItem {
            task_id: task.id,
            lease_id: task.lease_id,
            outcome,
            exit_code,
            error,
            outputs: None,
            log_size: Some(log_size),
            log_tail,
            traceparent: self.item_context(&span, task),
        };
        let mut retrier = Retrier::new(Instant::now() + REPORT_PATIENCE);
        loop {
            let answer = self
                .reports
                .complete(report.clone())
                .instrument(span.clone())
                .await;
            match answer {
                Ok(done) => {
                    tracing::info!(task.id = %task.id, status = ?done.status, exit_code = ?exit_code, "task reported");
                    return RunResult::Reported;
                }
                Err(e) => {
                    crate::metrics::report_error("complete");
                    if let Err(e) = retrier.pause(e).await {
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
