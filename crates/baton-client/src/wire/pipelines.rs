//! Pipelines as users submit and read them (docs/pipelines.md): named jobs, each a task
//! template with the jobs it `needs`, released when they have ended as its `when` asks.

use super::tasks::SubmitTask;
use baton_core::TaskStatus;
use baton_core::pipeline::ReleaseRule;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use uuid::Uuid;

/// `POST /v1/pipelines`: the whole graph at once, all of it written or none.
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubmitPipeline {
    /// A name for people (default `pipeline`); at most 128 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 128)]
    pub name: Option<String>,
    /// The jobs, each with a name unique in the pipeline (`[a-z0-9][a-z0-9_-]{0,63}`).
    pub jobs: Vec<PipelineJobSpec>,
    /// Makes the submit safe to repeat, as a task's key: a second one by the same token
    /// creates nothing and answers 200 with the first pipeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f]+$"
    )]
    pub idempotency_key: Option<String>,
}

/// One job: its name, the jobs it needs, and the task it runs — every field of a task's
/// submit beside them (`when` says on which ends of its needs it is released; a job
/// names its needs with `needs`, never `depends_on`).
#[derive(utoipa::ToSchema, Debug, Clone, Default, Serialize, PartialEq)]
pub struct PipelineJobSpec {
    /// Its name: what other jobs' `needs` and the `BATON_NEEDS_<JOB>_<NAME>` variables call it.
    #[schema(pattern = r"^[a-z0-9][a-z0-9_-]{0,63}$")]
    pub name: String,
    /// The jobs of this pipeline it waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// The task it runs.
    #[serde(flatten)]
    pub task: SubmitTask,
}

/// A job is its `name` and `needs` beside a task's fields: read apart by hand, since a
/// task's unknown fields are refused and serde cannot refuse them through `flatten`.
impl<'de> Deserialize<'de> for PipelineJobSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut fields = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let name = match fields.remove("name") {
            Some(serde_json::Value::String(name)) => name,
            Some(_) => return Err(D::Error::custom("a job's name must be a string")),
            None => return Err(D::Error::missing_field("name")),
        };
        let needs = match fields.remove("needs") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(needs) => Vec::<String>::deserialize(needs)
                .map_err(|e| D::Error::custom(format!("job {name:?}: needs: {e}")))?,
        };
        let task = SubmitTask::deserialize(serde_json::Value::Object(fields))
            .map_err(|e| D::Error::custom(format!("job {name:?}: {e}")))?;
        Ok(PipelineJobSpec { name, needs, task })
    }
}

/// Where a pipeline stands, from its jobs' latest tasks.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PipelineStatus {
    /// Some job has not ended.
    Running,
    /// Every job ended, none failed or was cancelled (a job skipped by its rule is no failure).
    Succeeded,
    /// Every job ended and one failed, timed out or expired.
    Failed,
    /// Every job ended and one was cancelled.
    Cancelled,
}

impl PipelineStatus {
    /// A pipeline whose jobs' latest statuses are `statuses`.
    pub fn of(statuses: impl IntoIterator<Item = TaskStatus>) -> PipelineStatus {
        let statuses: Vec<TaskStatus> = statuses.into_iter().collect();
        if statuses.iter().any(|s| !s.is_terminal()) {
            PipelineStatus::Running
        } else if statuses.contains(&TaskStatus::Cancelled) {
            PipelineStatus::Cancelled
        } else if statuses.iter().any(|s| {
            matches!(
                s,
                TaskStatus::Failed | TaskStatus::TimedOut | TaskStatus::Expired
            )
        }) {
            PipelineStatus::Failed
        } else {
            PipelineStatus::Succeeded
        }
    }

    /// Its name, as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PipelineStatus::Running => "running",
            PipelineStatus::Succeeded => "succeeded",
            PipelineStatus::Failed => "failed",
            PipelineStatus::Cancelled => "cancelled",
        }
    }
}

/// A job as a pipeline's reader sees it: its latest task.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PipelineJob {
    /// Its name.
    pub name: String,
    /// The jobs it needs.
    pub needs: Vec<String>,
    /// On which ends of its needs it is released.
    pub when: ReleaseRule,
    /// How deep it lies: 0 for a job that needs nothing, else one more than its deepest need.
    pub layer: usize,
    /// Its latest task (a re-run's, once it has one).
    pub task_id: Uuid,
    /// That task's status.
    pub status: TaskStatus,
    /// Its attempt (retries within the task).
    pub attempt: i32,
    /// How many tasks the job has had: 1, plus one per re-run.
    pub runs: usize,
    /// When it was released to its queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_at: Option<DateTime<Utc>>,
    /// When its run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// Its run's exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it failed, or why it was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A pipeline with its jobs.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Pipeline {
    /// A UUIDv7.
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub status: PipelineStatus,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When its last job ended, once every job has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The schedule that fired it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<Uuid>,
    /// Its jobs, by layer, then name.
    pub jobs: Vec<PipelineJob>,
}

/// A pipeline in a listing: its jobs counted by their latest status.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PipelineSummary {
    /// Its id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// Where it stands.
    pub status: PipelineStatus,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// When its last job ended, once every job has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The schedule that fired it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<Uuid>,
    /// How many jobs it has.
    pub jobs: usize,
    /// Its jobs by latest status.
    pub counts: BTreeMap<String, usize>,
}

/// `GET /v1/pipelines`: newest first.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PipelineList {
    /// This page.
    pub pipelines: Vec<PipelineSummary>,
    /// The `before` of the next page, when there may be one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<Uuid>,
}

/// `POST /v1/pipelines/{id}/cancel`: what the cancel did.
#[derive(utoipa::ToSchema, Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PipelineCancelled {
    /// Jobs that were waiting, queued or scheduled and are now `cancelled`.
    pub cancelled: usize,
    /// Running jobs now `cancelling`: their runners stop them.
    pub cancelling: usize,
    /// The pipeline as it stands after.
    pub pipeline: Pipeline,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_its_name_and_needs_beside_a_tasks_fields() {
        let job: PipelineJobSpec = serde_json::from_value(serde_json::json!({
            "name": "test", "needs": ["build"], "when": "always", "script": "make test"
        }))
        .unwrap();
        assert_eq!(job.name, "test");
        assert_eq!(job.needs, vec!["build".to_string()]);
        assert_eq!(job.task.when, Some(ReleaseRule::Always));
        assert_eq!(job.task.script.as_deref(), Some("make test"));
        let back = serde_json::to_value(&job).unwrap();
        assert_eq!(back["needs"][0], "build");
        let unknown = serde_json::from_value::<PipelineJobSpec>(serde_json::json!({
            "name": "x", "scritp": "make"
        }));
        assert!(unknown.unwrap_err().to_string().contains("scritp"));
    }

    #[test]
    fn a_pipeline_stands_where_its_jobs_do() {
        use TaskStatus::*;
        assert_eq!(
            PipelineStatus::of([Succeeded, Waiting]),
            PipelineStatus::Running
        );
        assert_eq!(
            PipelineStatus::of([Succeeded, Skipped]),
            PipelineStatus::Succeeded
        );
        assert_eq!(
            PipelineStatus::of([Failed, Skipped, Succeeded]),
            PipelineStatus::Failed
        );
        assert_eq!(
            PipelineStatus::of([Failed, Cancelled]),
            PipelineStatus::Cancelled
        );
    }
}
