//! How a command ends: its exit code, and the lines that say why it failed.
//!
//! | code | when |
//! |------|------|
//! | 0    | it did what was asked (`task submit --wait`: the task succeeded; `pipeline submit --watch`, `pipeline watch`: the pipeline succeeded) |
//! | 1    | it failed: the server refused, could not be reached, or a waited task ended unsuccessfully without an exit code of its own |
//! | 2    | the command line was wrong (clap's usage errors) |
//! | 3    | `baton runner`: the runner was deleted on the server |
//! | 4    | `baton runner`: the server cannot serve this runner's version |
//! | 124  | `task submit --wait`: the task ran past its timeout (stopped by its runner, or `timed_out`), as `timeout(1)` says it |
//! | N    | `task submit --wait`: the task's own exit code N |
//!
//! A watched pipeline that did not succeed ends the command as its first failed job (in
//! the pipeline's order: by layer, then name) would end `task submit --wait`: 124 for its
//! timeout, its own exit code, else 1; a cancelled pipeline with no failed job, 1.

use super::connect;
use baton_client::{Pipeline, PipelineStatus, Task};
use baton_core::TaskStatus;
use baton_core::after_run::timed_out;
use std::process::ExitCode;

/// A waited task ran past its timeout.
pub const TIMED_OUT: u8 = 124;

/// The exit code of `task submit --wait` for the task it waited on.
pub fn of_task(task: &Task) -> ExitCode {
    of_end(task.status, task.exit_code, task.error.as_deref())
}

/// The exit code of `pipeline submit --watch` and `pipeline watch` for the pipeline they
/// watched to its end.
pub fn of_pipeline(pipeline: &Pipeline) -> ExitCode {
    if pipeline.status == PipelineStatus::Succeeded {
        return ExitCode::SUCCESS;
    }
    // The jobs come by layer, then name: the first failure is the earliest in the graph,
    // most often the cause of the rest.
    pipeline
        .jobs
        .iter()
        .find(|j| {
            matches!(
                j.status,
                TaskStatus::Failed | TaskStatus::TimedOut | TaskStatus::Expired
            )
        })
        .map_or(ExitCode::FAILURE, |j| {
            of_end(j.status, j.exit_code, j.error.as_deref())
        })
}

fn of_end(status: TaskStatus, exit_code: Option<i32>, error: Option<&str>) -> ExitCode {
    // A run stopped at its timeout ends `failed` by its runner's report, `timed_out` by
    // the server's verdict: either is the timeout's code.
    if timed_out(status, exit_code, error) {
        return ExitCode::from(TIMED_OUT);
    }
    match (status, exit_code) {
        (TaskStatus::Succeeded, _) => ExitCode::SUCCESS,
        (_, Some(code)) => ExitCode::from(u8::try_from(code).unwrap_or(1).max(1)),
        _ => ExitCode::FAILURE,
    }
}

/// What a failed command prints, a line each, to go after `baton: `. Each layer of an
/// error that repeats what it wraps (an HTTP client names the URL at each of its layers)
/// is said once; no server at the address is said in one line with its fix.
pub fn report(error: &anyhow::Error) -> Vec<String> {
    let mut said = String::new();
    for cause in error.chain() {
        if let Some(no_server) = connect::no_server(cause) {
            join(&mut said, &no_server);
            return vec![said];
        }
        let text = cause.to_string();
        if !said.contains(&text) {
            join(&mut said, &text);
        }
    }
    let mut lines = vec![said];
    lines.extend(connect::hint(error));
    lines
}

fn join(said: &mut String, text: &str) {
    if !said.is_empty() {
        said.push_str(": ");
    }
    said.push_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As the HTTP client's errors are: its message holds its cause's, which it also
    /// gives as its source.
    #[derive(Debug)]
    struct Wrapping(std::io::Error);

    impl std::fmt::Display for Wrapping {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "request failed: {}", self.0)
        }
    }

    impl std::error::Error for Wrapping {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_layer_that_repeats_its_cause_is_said_once() {
        let io = std::io::Error::other("error sending request for url (http://x/v1/tasks)");
        let error = anyhow::Error::new(Wrapping(io)).context("reading the task");
        assert_eq!(
            report(&error),
            ["reading the task: request failed: error sending request for url (http://x/v1/tasks)"]
        );
    }

    fn task(status: TaskStatus, exit_code: Option<i32>, error: Option<&str>) -> Task {
        serde_json::from_value(serde_json::json!({
            "error": error,
            "id": uuid::Uuid::nil(), "queue": "q", "labels": [], "env": {},
            "priority": 0, "timeout_s": 60, "queue_timeout_s": 60, "max_attempts": 1,
            "status": status, "attempt": 1, "created_at": "2026-12-04T10:00:00Z",
            "updated_at": "2026-12-04T10:00:00Z", "exit_code": exit_code,
            "log_size": 0, "log_truncated": false, "log_incomplete": false
        }))
        .unwrap()
    }

    #[test]
    fn a_waited_task_ends_the_command_with_its_own_code_or_a_named_one() {
        let by_runner = Some("timed out after 5 s");
        for (status, exit_code, error, expected) in [
            (TaskStatus::Succeeded, Some(0), None, ExitCode::SUCCESS),
            (TaskStatus::Failed, Some(7), None, ExitCode::from(7)),
            (TaskStatus::Failed, Some(256), None, ExitCode::FAILURE),
            (
                TaskStatus::Failed,
                None,
                by_runner,
                ExitCode::from(TIMED_OUT),
            ),
            (
                TaskStatus::Failed,
                None,
                Some("runner lost"),
                ExitCode::FAILURE,
            ),
            (
                TaskStatus::TimedOut,
                None,
                Some("timed out"),
                ExitCode::from(TIMED_OUT),
            ),
            (TaskStatus::Cancelled, None, None, ExitCode::FAILURE),
            (TaskStatus::Expired, None, None, ExitCode::FAILURE),
        ] {
            assert_eq!(
                of_task(&task(status, exit_code, error)),
                expected,
                "{status} {exit_code:?} {error:?}"
            );
        }
    }

    fn pipeline(jobs: &[(TaskStatus, Option<i32>, Option<&str>)]) -> Pipeline {
        let jobs: Vec<serde_json::Value> = jobs
            .iter()
            .enumerate()
            .map(|(i, (status, exit_code, error))| {
                serde_json::json!({
                    "name": format!("job{i}"), "needs": [], "when": "on_success",
                    "layer": i, "task_id": uuid::Uuid::nil(), "status": status,
                    "attempt": 1, "runs": 1, "exit_code": exit_code, "error": error
                })
            })
            .collect();
        let statuses = jobs
            .iter()
            .map(|j| serde_json::from_value(j["status"].clone()).unwrap());
        serde_json::from_value(serde_json::json!({
            "id": uuid::Uuid::nil(), "name": "p", "status": PipelineStatus::of(statuses),
            "created_at": "2026-12-04T10:00:00Z", "jobs": jobs
        }))
        .unwrap()
    }

    #[test]
    fn a_watched_pipeline_ends_the_command_as_its_first_failed_job() {
        use TaskStatus::*;
        for (jobs, expected) in [
            (
                vec![(Succeeded, Some(0), None), (Skipped, None, None)],
                ExitCode::SUCCESS,
            ),
            (
                vec![
                    (Succeeded, Some(0), None),
                    (Failed, Some(3), None),
                    (Failed, Some(5), None),
                ],
                ExitCode::from(3),
            ),
            (
                vec![(TimedOut, None, Some("timed out")), (Skipped, None, None)],
                ExitCode::from(TIMED_OUT),
            ),
            (
                vec![(Succeeded, Some(0), None), (Cancelled, None, None)],
                ExitCode::FAILURE,
            ),
            (
                vec![(Expired, None, None), (Skipped, None, None)],
                ExitCode::FAILURE,
            ),
        ] {
            let pipeline = pipeline(&jobs);
            assert_eq!(of_pipeline(&pipeline), expected, "{jobs:?}");
        }
    }
}
