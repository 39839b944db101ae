//! `baton pipeline watch` and `pipeline submit --watch`: the pipeline read every second
//! until it ends, a line for each job whose status changed since the last read, in the
//! shape of `baton task watch`'s lines. A read that gets no answer (its node went away)
//! is tried again at the next tick, on whichever node answers; a refusal for good (no
//! such pipeline, a token that may not read it) ends the watch with the error.

use super::task_watch::for_good;
use super::when;
use baton_client::{Client, Pipeline, PipelineJob, PipelineStatus};
use chrono::{DateTime, Utc};
use std::io::Write;
use std::time::Duration;
use uuid::Uuid;

/// How often the pipeline is read: a job's change is seen within this, and a pipeline of
/// any size costs one request per tick.
const POLL: Duration = Duration::from_secs(1);

/// Watches pipeline `id` to its end and returns it as it ended. Prints each job's status
/// on the first read, then each change: as lines for people, or with `json` the whole
/// pipeline as one line of JSON whenever any job changed.
pub async fn watch(client: &Client, id: Uuid, json: bool) -> anyhow::Result<Pipeline> {
    let mut seen: Option<Pipeline> = None;
    loop {
        match client.pipeline_get(id).await {
            Ok(now) => {
                let changed = changes(seen.as_ref(), &now);
                let mut out = std::io::stdout().lock();
                if json && !changed.is_empty() {
                    writeln!(out, "{}", serde_json::to_string(&now)?)?;
                } else if !json {
                    let width = now.jobs.iter().map(|j| j.name.len()).max().unwrap_or(0);
                    for job in changed {
                        writeln!(out, "{}", line(job, width, Utc::now()))?;
                    }
                }
                out.flush()?;
                // Running while any job has not ended; any other status is its end.
                if now.status != PipelineStatus::Running {
                    return Ok(now);
                }
                seen = Some(now);
            }
            Err(e) if for_good(&e) => return Err(e.into()),
            // No node answered: asked again at the next tick.
            Err(_) => {}
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The jobs of `now` that are new or whose latest task or status differs from `before`:
/// on the first read all of them, in the pipeline's order; after, oldest change first
/// (each at the time its status began, as far as the job says).
fn changes<'a>(before: Option<&Pipeline>, now: &'a Pipeline) -> Vec<&'a PipelineJob> {
    let mut changed: Vec<&PipelineJob> = now
        .jobs
        .iter()
        .filter(|job| {
            let was = before.and_then(|b| b.jobs.iter().find(|j| j.name == job.name));
            was.is_none_or(|was| {
                (was.task_id, was.status, was.attempt) != (job.task_id, job.status, job.attempt)
            })
        })
        .collect();
    if before.is_some() {
        // Stable: jobs with no time of their own keep the pipeline's order.
        changed.sort_by_key(|job| since(job));
    }
    changed
}

/// When a job's current status began, as far as its times tell: its end, its start, its
/// release; none for a job still waiting.
fn since(job: &PipelineJob) -> Option<DateTime<Utc>> {
    if job.status.is_terminal() {
        job.finished_at
    } else {
        job.started_at.or(job.queued_at)
    }
}

/// One line for a person: when, the job, its status, its task and how it ended.
fn line(job: &PipelineJob, width: usize, now: DateTime<Utc>) -> String {
    let mut text = format!(
        "{}  {:<width$}  {:<10} task={} attempt={}",
        when::local(since(job).unwrap_or(now)),
        job.name,
        job.status.to_string(),
        baton_client::short_id(job.task_id),
        job.attempt,
    );
    if job.runs > 1 {
        text.push_str(&format!(" run={}", job.runs));
    }
    if let Some(code) = job.exit_code {
        text.push_str(&format!(" exit={code}"));
    }
    if let Some(error) = &job.error {
        text.push_str(&format!(" error={error:?}"));
    }
    text
}

/// What ends the watch on stderr: the pipeline's end, with the jobs that did not succeed.
pub fn summary(pipeline: &Pipeline) -> String {
    let took = super::pipeline_table::pipeline_duration(
        pipeline.created_at,
        pipeline.finished_at,
        Utc::now(),
    );
    let mut text = format!(
        "pipeline {} {} in {took}",
        pipeline.id,
        pipeline.status.as_str()
    );
    let unsuccessful: Vec<String> = pipeline
        .jobs
        .iter()
        .filter(|j| j.status != baton_core::TaskStatus::Succeeded)
        .map(|j| match j.exit_code {
            Some(code) => format!("{} {} (exit code {code})", j.name, j.status),
            None => format!("{} {}", j.name, j.status),
        })
        .collect();
    if !unsuccessful.is_empty() {
        text.push_str(&format!(": {}", unsuccessful.join(", ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::TaskStatus;
    use serde_json::json;

    fn pipeline(jobs: &[(&str, TaskStatus, &str)]) -> Pipeline {
        let jobs: Vec<_> = jobs
            .iter()
            .enumerate()
            .map(|(i, (name, status, task))| {
                let ended = status.is_terminal();
                json!({
                    "name": name, "needs": [], "when": "on_success", "layer": i,
                    "task_id": task, "status": status, "attempt": 1, "runs": 1,
                    "queued_at": "2026-12-04T10:00:00Z",
                    "started_at": (*status != TaskStatus::Queued).then_some(format!("2026-12-04T10:00:0{}Z", i + 5)),
                    "finished_at": ended.then_some(format!("2026-12-04T10:00:1{}Z", 9 - i)),
                })
            })
            .collect();
        serde_json::from_value(json!({
            "id": Uuid::nil(), "name": "p", "status": "running",
            "created_at": "2026-12-04T10:00:00Z", "jobs": jobs
        }))
        .unwrap()
    }

    const T1: &str = "019afc6e-0000-7000-8000-000000000001";
    const T2: &str = "019afc6e-0000-7000-8000-000000000002";
    const T3: &str = "019afc6e-0000-7000-8000-000000000003";

    #[test]
    fn each_change_is_told_once_in_the_order_it_happened() {
        use TaskStatus::*;
        let first = pipeline(&[("build", Running, T1), ("test", Queued, T2)]);
        let names = |jobs: Vec<&PipelineJob>| -> Vec<String> {
            jobs.iter().map(|j| j.name.clone()).collect()
        };
        assert_eq!(names(changes(None, &first)), ["build", "test"], "as listed");
        assert!(changes(Some(&first), &first).is_empty());

        // Both ended; `test` first, by its own end.
        let later = pipeline(&[("build", Succeeded, T1), ("test", Failed, T2)]);
        assert_eq!(names(changes(Some(&first), &later)), ["test", "build"]);

        // A re-run: same status as before it ended, a new task.
        let rerun = pipeline(&[("build", Succeeded, T1), ("test", Failed, T3)]);
        assert_eq!(names(changes(Some(&later), &rerun)), ["test"]);
    }

    #[test]
    fn a_line_says_when_what_and_how_it_ended() {
        let mut p = pipeline(&[("build", TaskStatus::Failed, T1)]);
        p.jobs[0].exit_code = Some(3);
        p.jobs[0].error = Some("exit code 3".into());
        let now = "2026-12-04T11:00:00Z".parse().unwrap();
        let text = line(&p.jobs[0], 8, now);
        let at = when::local("2026-12-04T10:00:19Z".parse().unwrap());
        assert_eq!(
            text,
            format!(
                "{at}  build     failed     task=000000000001 attempt=1 exit=3 error=\"exit code 3\""
            )
        );
        p.status = PipelineStatus::Failed;
        p.finished_at = Some("2026-12-04T10:00:20Z".parse().unwrap());
        assert_eq!(
            summary(&p),
            format!(
                "pipeline {} failed in 20.0s: build failed (exit code 3)",
                Uuid::nil()
            )
        );
    }
}
