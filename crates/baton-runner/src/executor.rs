//! The shell executor: one leased task, from `start` to `complete`.
//!
//! The task runs as the leader of a new process group (argv directly, or a script through
//! `sh -c`), with its own working directory and environment. Stopping it — timeout,
//! cancel, runner shutdown — signals the whole group: SIGTERM, then SIGKILL after a grace
//! period; a lease the server took back, or the runner's own fence, SIGKILLs it at once,
//! since the task may be handed to another runner now. Leftovers of a finished task are killed too, so nothing it
//! started outlives it.

use crate::config::{LOG_TAIL_MAX, RunnerConfig};
use crate::exchanger::Reports;
use crate::isolation::{self, Isolation, TaskUser};
use crate::leftovers;
use crate::logship::{LogSpool, Shipper};
use crate::masking::Masker;
use crate::process_group::signal_group;
use crate::results::ResultSpool;
use crate::retry::{CallError, Retrier, Stop};
use crate::tracker::TaskControl;
use baton_client::trace_context;
use baton_client::{Client, LeasedTask};
use baton_core::backoff::Backoff;
use baton_core::log_marks::LogStream;
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

mod report;

/// How long a start, and the output still to ship, are retried while the server is
/// unreachable. A completion is retried for as long as the agent lives, and kept on disk
/// beyond that (`results`).
const REPORT_PATIENCE: Duration = Duration::from_secs(120);
/// After the task exits, how long its output pipes may stay open (a grandchild that left
/// the group holding them) before we stop reading.
const PIPE_DRAIN: Duration = Duration::from_secs(5);

/// What a task gets of the agent's environment: enough to find programs and speak the
/// locale, nothing that is the runner's (its settings, tokens, proxies, preloads). The
/// task's own `env` and `secret_env` come on top, and `HOME` is its work dir.
pub(crate) const INHERITED_ENV: [&str; 5] = ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ"];

/// `PATH` for a task when the agent has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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
pub(crate) enum RunResult {
    Reported,
    /// Finished, but no node has taken the result yet: it is kept on disk, and the next
    /// start of this agent sends it.
    Kept,
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

pub(crate) struct Executor {
    pub client: Client,
    pub config: Arc<RunnerConfig>,
    /// Starts and completions go into the agent's batched exchange.
    pub reports: Reports,
    /// Put in every task's environment: how the next run of this agent finds what this
    /// one leaves behind (`leftovers`).
    pub mark: Arc<str>,
    /// Whom tasks run as, and what they see.
    pub isolation: Arc<Isolation>,
    /// The work dir, absolute: each task's folders are made in it.
    pub work_root: Arc<Path>,
    /// Where results wait until a node takes them.
    pub results: ResultSpool,
}

impl Executor {
    /// Runs one task to its report. `stop` is the runner's forced stop (its shutdown
    /// grace is over): the task is killed and reported failed. `control` carries the
    /// server's cancel and lease-gone verdicts. `user`: whom it runs as (`None`: the
    /// agent's own user), given back to the agent's isolation once nothing of the task
    /// is left.
    pub(crate) async fn run(
        &self,
        task: LeasedTask,
        since: Instant,
        stop: CancellationToken,
        control: TaskControl,
        user: Option<TaskUser>,
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
            mark: self.mark.clone(),
            isolation: self.isolation.clone(),
            work_root: self.work_root.clone(),
            results: self.results.clone(),
        };
        let mut user = user;
        let result = for_task
            .run_traced(task, since, stop, control, &mut user)
            .instrument(span)
            .await;
        // A task that never got as far as its process still holds its user.
        self.isolation.give_back(user).await;
        result
    }

    async fn run_traced(
        &self,
        mut task: LeasedTask,
        since: Instant,
        stop: CancellationToken,
        control: TaskControl,
        user: &mut Option<TaskUser>,
    ) -> RunResult {
        let id = task.id;
        // The task's time counts from no later than the server's: a task that arrived
        // started was committed after its exchange was first sent (`since`), however long
        // the answer then took; one started here counts from its first `start` attempt,
        // which a lost answer and our retries may precede. Counted here from later, a run
        // held up on its way could outlast the server's deadline and be ended and retried
        // while it still runs.
        let acknowledged_from = if task.started { since } else { Instant::now() };
        let deadline = acknowledged_from + Duration::from_secs(task.timeout_s.max(0) as u64);
        // A task that arrived started (`start_leased`) needs no acknowledgement.
        match self.acknowledge(&task).await {
            // The secrets come with the start's answer, not with the lease.
            Ok(secrets) => task.secret_env.extend(secrets),
            Err(e) => {
                // Never started, so never run: the server requeues it after its ack timeout.
                tracing::warn!(task.id = %id, error = %e, "lease not acknowledged; task not run");
                return match e {
                    CallError::Stop(s) => stopped(s),
                    _ => RunResult::Abandoned,
                };
            }
        }
        if Instant::now() >= deadline {
            // Its time was up before it could begin (an answer held up past it): the
            // server may already have ended and retried it, so it is not spawned even for
            // a moment — the model of the protocol (crates/baton-model) found the instant
            // in which it would run beside its retry.
            control.report_on_its_way();
            return self
                .report(&task, Ending::TimedOut, None, 0, None, &stop)
                .await;
        }
        let spool = match LogSpool::create(&self.config.spool_dir()) {
            Ok(spool) => Arc::new(spool),
            Err(e) => {
                let ending = Ending::SpawnFailed(format!("cannot create the log spool: {e}"));
                control.report_on_its_way();
                return self.report(&task, ending, None, 0, None, &stop).await;
            }
        };
        let mut shipper = Shipper::new(
            self.client.clone(),
            id,
            task.lease_id,
            self.config.log_chunk_bytes,
        );
        let (ending, outputs) = self
            .execute(
                &task,
                &spool,
                &mut shipper,
                stop.clone(),
                control.clone(),
                deadline,
                user.take(),
            )
            .instrument(tracing::info_span!("task.execute", task.id = %id))
            .await;
        // Also for a process that never started: its report follows.
        control.report_on_its_way();
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
        self.report(&task, ending, outputs, spool.written(), tail, &stop)
            .await
    }

    /// Records the start of a task that did not arrive started; its answer carries the
    /// task's secrets.
    async fn acknowledge(&self, task: &LeasedTask) -> Result<BTreeMap<String, String>, CallError> {
        if task.started {
            return Ok(BTreeMap::new());
        }
        let span = tracing::info_span!("runner.start", otel.kind = "client", task.id = %task.id);
        let traceparent = self.item_context(&span, task);
        let (reports, span, traceparent) = (&self.reports, &span, &traceparent);
        let answer = Retrier::new(Backoff::RUNNER)
            .patient_until(Instant::now() + REPORT_PATIENCE)
            .call(move || async move {
                let answer = reports
                    .start(task.id, task.lease_id, traceparent.clone())
                    .instrument(span.clone())
                    .await;
                if answer.is_err() {
                    crate::metrics::report_error("start");
                }
                answer
            })
            .await?;
        Ok(answer.secret_env)
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
        // An allow-list, not the agent's environment minus what we know of: the runner's
        // own settings, tokens and whatever else its environment holds stay with it.
        cmd.env_clear();
        for key in INHERITED_ENV {
            if let Some(value) = std::env::var_os(key) {
                cmd.env(key, value);
            }
        }
        if std::env::var_os("PATH").is_none() {
            cmd.env("PATH", DEFAULT_PATH);
        }
        cmd.env("HOME", dir);
        // Secret values go into the process and nowhere else: never logged or echoed.
        cmd.envs(&task.env)
            .envs(&task.secret_env)
            .env("BATON_TASK_ID", task.id.to_string())
            .env("BATON_ATTEMPT", task.attempt.to_string())
            .env(leftovers::MARK_VAR, &*self.mark)
            .env("BATON_QUEUE", &task.queue)
            .env(crate::outputs::VAR, crate::outputs::file_in(dir));
        // The process may trace too, under the execution's span.
        if let Some(tp) = trace_context::traceparent_of(&tracing::Span::current())
            .or_else(|| task.traceparent.clone())
        {
            cmd.env("TRACEPARENT", tp);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        cmd
    }

    // One run's every handle, each used once in its own step: a struct of them would be
    // built here only to be taken apart again.
    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        task: &LeasedTask,
        spool: &Arc<LogSpool>,
        shipper: &mut Shipper,
        stop: CancellationToken,
        control: TaskControl,
        deadline: Instant,
        user: Option<TaskUser>,
    ) -> (Ending, Option<serde_json::Value>) {
        let root = &self.work_root;
        let dir = root.join(task.lease_id.to_string());
        let tmp = root.join(format!("{}.tmp", task.lease_id));
        let made = isolation::make_task_dirs(&dir, &tmp, user).and_then(|()| {
            let mut cmd = self.command(task, &dir);
            // Another user than the agent's: it cannot read the runner's token, the
            // agent's memory, or its siblings' environment and work dirs.
            self.isolation.confine(&mut cmd, &dir, &tmp, user)?;
            Ok(cmd)
        });
        let mut cmd = match made {
            Ok(cmd) => cmd,
            Err(e) => {
                self.isolation.give_back(user).await;
                isolation::remove_task_dirs(&dir, &tmp);
                let ending = Ending::SpawnFailed(format!(
                    "cannot prepare the work dir {}: {e}",
                    dir.display()
                ));
                return (ending, None);
            }
        };
        let spawned = cmd.spawn();
        drop(cmd);
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                let program = match (&task.command, &task.script) {
                    (Some(argv), _) if !argv.is_empty() => argv[0].as_str(),
                    _ => "sh",
                };
                let msg = format!("cannot start the command {program}: {e}");
                let _ = spool.append(format!("baton: {msg}\n").as_bytes(), LogStream::Stderr);
                self.isolation.give_back(user).await;
                isolation::remove_task_dirs(&dir, &tmp);
                // As a shell answers: 126 found but not executable, 127 anything else.
                let code = match e.kind() {
                    std::io::ErrorKind::PermissionDenied => 126,
                    _ => 127,
                };
                return (Ending::CannotStart(code, msg), None);
            }
        };
        let pgid = child.id().expect("a just-spawned child has a pid");
        tracing::info!(task.id = %task.id, pid = pgid, "task running");
        // Each stream masks the task's secret values before they reach the spool.
        let secrets = || Masker::new(task.secret_env.values().map(String::as_str));
        let readers = [
            child
                .stdout
                .take()
                .map(|o| spawn_reader(o, LogStream::Stdout, spool.clone(), secrets())),
            child
                .stderr
                .take()
                .map(|e| spawn_reader(e, LogStream::Stderr, spool.clone(), secrets())),
        ];
        let timeout = tokio::time::sleep_until(deadline);
        tokio::pin!(timeout);
        let mut flush = tokio::time::interval(self.config.log_flush());
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

        // The output goes out in shipments that run beside the watch below, never in its
        // way: an exit, the deadline, a cancel or a lease taken back is seen as it comes,
        // however slow a shipment. One cut short is sent again at its offset and stored
        // once.
        let mut idle_shipper = Some(shipper);
        let mut shipment = None;
        let ending = loop {
            tokio::select! {
                status = child.wait() => break exited(status),
                // A process that exited before its deadline ended in time, even if this
                // agent looks only after it (stopped, or starved): the exit may not have
                // reached `wait` yet when the timer does, so the process is asked.
                _ = &mut timeout => break at_deadline(&mut child),
                _ = stop.cancelled() => break Ending::RunnerStopping,
                _ = control.cancel.cancelled() => break Ending::CancelRequested,
                _ = control.gone.cancelled() => break Ending::Stopped(Stop::LeaseGone),
                _ = flush.tick(), if idle_shipper.is_some() => {
                    let shipper = idle_shipper.take().expect("checked above");
                    shipment = Some(Box::pin(async move {
                        let shipped = shipper.ship(spool).await;
                        (shipper, shipped)
                    }));
                }
                (shipper, shipped) = async { shipment.as_mut().expect("a shipment under way").await }, if shipment.is_some() => {
                    shipment = None;
                    let cancel_requested = shipper.cancel_requested;
                    idle_shipper = Some(shipper);
                    match shipped {
                        Ok(()) | Err(CallError::Transient(_) | CallError::StoresOut(_)) => {}
                        Err(CallError::Stop(s @ (Stop::LeaseGone | Stop::Unregistered))) => {
                            break Ending::Stopped(s);
                        }
                        Err(e) => tracing::warn!(task.id = %task.id, error = %e, "log shipping failed"),
                    }
                    if cancel_requested {
                        break Ending::CancelRequested;
                    }
                }
            }
        };
        drop(shipment);
        control.report_on_its_way();
        let lease_gone = matches!(ending, Ending::Stopped(Stop::LeaseGone));
        if control.kill_now.is_cancelled() || lease_gone {
            // Self-fencing, or a lease the server took back: no grace, the task may be
            // handed to another runner now (a run ended past its timeout retries).
            signal_group(pgid, Signal::SIGKILL);
            let _ = child.wait().await;
        } else if !matches!(ending, Ending::Exited(_)) {
            self.terminate(pgid, &mut child).await;
        }
        // Whatever the task left running in its group goes with it, and, with a uid of
        // its own, whatever it hid in another group or session.
        signal_group(pgid, Signal::SIGKILL);
        self.isolation.give_back(user).await;
        let drain_by = Instant::now() + PIPE_DRAIN;
        for reader in readers.into_iter().flatten() {
            let _ = tokio::time::timeout_at(drain_by, reader).await;
        }
        // What it left for its dependents (docs/pipelines.md), read before its dir goes.
        let outputs = matches!(ending, Ending::Exited(_))
            .then(|| crate::outputs::read(&dir))
            .flatten();
        isolation::remove_task_dirs(&dir, &tmp);
        (ending, outputs)
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
}

/// How a run ended whose process `wait` returned.
fn exited(status: std::io::Result<std::process::ExitStatus>) -> Ending {
    match status {
        Ok(status) => Ending::Exited(status),
        Err(e) => Ending::SpawnFailed(format!("lost track of the process: {e}")),
    }
}

/// How a run ended whose deadline came: a process that exited before it ended in time,
/// even if the exit has not reached `wait` yet, so the process is asked.
fn at_deadline(child: &mut Child) -> Ending {
    match child.try_wait() {
        Ok(Some(status)) => Ending::Exited(status),
        _ => Ending::TimedOut,
    }
}

/// Copies one output pipe into the spool, its secrets masked, until it closes.
fn spawn_reader<R>(
    mut pipe: R,
    stream: LogStream,
    spool: Arc<LogSpool>,
    mut masker: Masker,
) -> tokio::task::JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let (masked, ended) = match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => (masker.finish(), true),
                Ok(n) => (masker.push(&buf[..n]), false),
            };
            if !masked.is_empty()
                && let Err(e) = spool.append(&masked, stream)
            {
                tracing::warn!(error = %e, "cannot spool task output");
                return;
            }
            if ended {
                return;
            }
        }
    })
}
