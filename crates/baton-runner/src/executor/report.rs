//! A run's report: how it ended, as the server records it, and its delivery, retried
//! until a node takes it or the agent stops (then it waits on disk for the next start).

use super::{Ending, Executor, RunResult, stopped};
use crate::retry::{CallError, OnStop, Retrier};
use baton_client::{CompletionItem, ItemAnswer, LeasedTask, LogTail, Outcome};
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How long a stopping agent still tries to deliver a result before it keeps it on disk.
const LAST_TRY: Duration = Duration::from_secs(3);

impl Executor {
    /// Turns how the run ended into its result and hands that to the server.
    pub(super) async fn report(
        &self,
        task: &LeasedTask,
        ending: Ending,
        outputs: Option<serde_json::Value>,
        log_size: i64,
        log_tail: Option<LogTail>,
        stop: &CancellationToken,
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
                // The server's retry policy reads a timeout from these words.
                Some(format!(
                    "{}{} s",
                    baton_core::after_run::RUNNER_TIMEOUT_ERROR,
                    task.timeout_s
                )),
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
            outputs,
            log_size: Some(log_size),
            log_tail,
            traceparent: self.item_context(&span, task),
        };
        if let Err(e) = self.results.keep(&report) {
            tracing::warn!(task.id = %task.id, error = %e, "cannot keep the result on disk; it is lost if this agent stops before a node takes it");
        }
        // The result waits out any outage, for as long as the agent runs: nothing it says
        // is learned again. Once the agent stops, what is not delivered waits on disk.
        let answer = Retrier::new(self.config.backoff())
            .stopped_by(stop.clone(), OnStop::End)
            .woken_by(self.reports.heard())
            .call(|| self.send_result(&report, &span, stop))
            .await;
        match answer {
            Ok(Some(done)) => {
                tracing::info!(task.id = %task.id, status = ?done.status, exit_code = ?exit_code, "task reported");
                self.results.taken(task.lease_id);
                RunResult::Reported
            }
            Err(CallError::Stop(s)) => {
                tracing::warn!(task.id = %task.id, error = ?s, "result refused; the server has ended the task otherwise");
                self.results.taken(task.lease_id);
                stopped(s)
            }
            // No answer in the last try, a failure once the agent stopped, or a local one.
            Ok(None) | Err(_) => self.kept(task),
        }
    }

    /// One try at handing a result over. A stop that comes during the try drops it for
    /// the last try a stopping agent makes, bounded by [`LAST_TRY`]: `None` when that got
    /// no answer.
    async fn send_result(
        &self,
        report: &CompletionItem,
        span: &tracing::Span,
        stop: &CancellationToken,
    ) -> Result<Option<ItemAnswer>, CallError> {
        let send = || {
            self.reports
                .complete(report.clone())
                .instrument(span.clone())
        };
        let counted = |answer: Result<ItemAnswer, CallError>| {
            if answer.is_err() {
                crate::metrics::report_error("complete");
            }
            answer.map(Some)
        };
        if !stop.is_cancelled() {
            tokio::select! {
                answer = send() => return counted(answer),
                // Try once more as a stopping agent does.
                _ = stop.cancelled() => {}
            }
        }
        // The agent is stopping: one last try, bounded; what it cannot deliver waits on
        // disk for the next start.
        match tokio::time::timeout(LAST_TRY, send()).await {
            Ok(answer) => counted(answer),
            Err(_) => Ok(None),
        }
    }

    fn kept(&self, task: &LeasedTask) -> RunResult {
        tracing::warn!(task.id = %task.id, "result not delivered before the agent stopped; kept on disk for its next start");
        RunResult::Kept
    }
}
