//! Pipelines (docs/pipelines.md): jobs inserted with what they need, read back as a graph,
//! cancelled, and a failed job re-run with the jobs it had skipped.
//!
//! Releasing is not here: the terminal write of a job's last need releases or skips it
//! in the same transaction, whatever statement wrote it (the `tasks_release_dependents`
//! trigger and `tasks_resolve`, in the pipelines migration). What is here inserts a job
//! so that no end of a need can slip past it: a need that has not ended is marked
//! `has_dependents` under its row lock before the insert commits, so its end, waiting on
//! that lock, runs the release; a need that has already ended is counted off at once.

use crate::Store;
use crate::error::StoreError;
use crate::tasks::{NewTask, TaskRecord};
use crate::transitions::insert_in;
use baton_core::TaskStatus;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use std::collections::{BTreeSet, HashMap, HashSet};
use uuid::Uuid;

/// A pipeline to insert.
#[derive(Debug, Clone)]
pub struct NewPipeline {
    /// Its id (UUIDv7).
    pub id: Uuid,
    /// Its name, for people.
    pub name: String,
    /// The token that submitted it; its jobs are that token's tasks.
    pub created_by: String,
    /// Scoped to `created_by`: a repeat returns the first pipeline.
    pub idempotency_key: Option<String>,
    /// The schedule and tick that fired it, if one did.
    pub schedule_id: Option<Uuid>,
    /// The tick of `schedule_id`.
    pub scheduled_for: Option<DateTime<Utc>>,
}

/// A pipeline to write whole: its row, its jobs, and which job needs which, as edges
/// `(task, needs)`.
#[derive(Debug, Clone)]
pub struct PipelineRows {
    /// The pipeline.
    pub pipeline: NewPipeline,
    /// Its jobs, as tasks.
    pub jobs: Vec<NewTask>,
    /// Which job needs which.
    pub needs: Vec<(Uuid, Uuid)>,
}

/// A row of `pipelines`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PipelineRecord {
    /// Its id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// The token that submitted it.
    pub created_by: String,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// Its idempotency key, scoped.
    pub idempotency_key: Option<String>,
    /// The schedule that fired it.
    pub schedule_id: Option<Uuid>,
    /// The tick of `schedule_id`.
    pub scheduled_for: Option<DateTime<Utc>>,
}

/// A pipeline with the statuses of its jobs' latest tasks, for a listing.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PipelineSummary {
    /// Its id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// The token that submitted it.
    pub created_by: String,
    /// When it was submitted.
    pub created_at: DateTime<Utc>,
    /// The schedule that fired it.
    pub schedule_id: Option<Uuid>,
    /// Each job's latest status, one entry per job.
    pub statuses: Vec<String>,
    /// When the last of its jobs' latest tasks ended, if all have.
    pub finished_at: Option<DateTime<Utc>>,
}

/// A pipeline's jobs: every task of it (re-runs included, oldest first) and the edges
/// between them, `(task, needs)`.
#[derive(Debug, Clone, Default)]
pub struct PipelineJobs {
    /// Its tasks, by id (oldest first).
    pub tasks: Vec<TaskRecord>,
    /// Which task needs which.
    pub needs: Vec<(Uuid, Uuid)>,
}

/// The names of the jobs each task needs, made once for a whole pipeline (asked job by
/// job over its edges, a pipeline of 10,000 jobs took 10^8 steps).
pub struct NeededJobs(HashMap<Uuid, BTreeSet<String>>);

impl NeededJobs {
    /// The names of the jobs `task` needs.
    pub fn of(&self, task: Uuid) -> BTreeSet<String> {
        self.0.get(&task).cloned().unwrap_or_default()
    }
}

impl PipelineJobs {
    /// Each job's latest task, by job name.
    pub fn latest(&self) -> HashMap<&str, &TaskRecord> {
        let mut latest: HashMap<&str, &TaskRecord> = HashMap::new();
        for task in &self.tasks {
            if let Some(job) = task.job.as_deref() {
                let entry = latest.entry(job).or_insert(task);
                if task.id > entry.id {
                    *entry = task;
                }
            }
        }
        latest
    }

    /// The names of the jobs each task needs.
    pub fn needed_jobs(&self) -> NeededJobs {
        let job_of: HashMap<Uuid, &str> = self
            .tasks
            .iter()
            .filter_map(|t| Some((t.id, t.job.as_deref()?)))
            .collect();
        let mut needed: HashMap<Uuid, BTreeSet<String>> = HashMap::new();
        for (task, need) in &self.needs {
            if let Some(job) = job_of.get(need) {
                needed.entry(*task).or_default().insert(job.to_string());
            }
        }
        NeededJobs(needed)
    }
}

/// Inserts `tasks` and the edges `(task, needs)` inside `conn`'s transaction: needs
/// among `tasks` are new and unfinished; any other must exist. Each other need still
/// unfinished is marked as needed (its end will count it off); each already ended is
/// counted off now, which may release or skip the new task at once. Answers each task's
/// row in the order given, and whether it was inserted (a repeated idempotency key
/// inserts nothing and adds no edge: the first task answers).
async fn insert_with_needs(
    conn: &mut PgConnection,
    tasks: &[NewTask],
    needs: &[(Uuid, Uuid)],
    now: DateTime<Utc>,
) -> Result<Vec<(TaskRecord, bool)>, StoreError> {
    let inserted = insert_in(conn, tasks, now)
        .await?
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let created: HashSet<Uuid> = inserted
        .iter()
        .filter(|(_, c)| *c)
        .map(|(t, _)| t.id)
        .collect();
    let edges: Vec<&(Uuid, Uuid)> = needs
        .iter()
        .filter(|(task, _)| created.contains(task))
        .collect();
    if edges.is_empty() {
        return Ok(inserted);
    }
    let (dependents, needed): (Vec<Uuid>, Vec<Uuid>) = edges.iter().map(|(t, n)| (*t, *n)).unzip();
    sqlx::query(
        "INSERT INTO task_needs (task_id, needs_id)
         SELECT * FROM unnest($1::uuid[], $2::uuid[]) ON CONFLICT DO NOTHING",
    )
    .bind(&dependents)
    .bind(&needed)
    .execute(&mut *conn)
    .await
    .map_err(|e| match StoreError::from(e) {
        StoreError::Internal(m) if m.contains("task_needs_needs_id_fkey") => StoreError::NotFound,
        other => other,
    })?;
    let outside: Vec<Uuid> = needed
        .iter()
        .filter(|n| !created.contains(n))
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !outside.is_empty() {
        let live: Vec<Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "UPDATE tasks SET has_dependents = true
             WHERE id = ANY($1) AND status NOT IN ({})
             RETURNING id",
            crate::sql_list(TaskStatus::TERMINAL)
        )))
        .bind(&outside)
        .fetch_all(&mut *conn)
        .await?;
        let ended: Vec<Uuid> = outside.into_iter().filter(|n| !live.contains(n)).collect();
        if !ended.is_empty() {
            let mine: Vec<Uuid> = created.iter().copied().collect();
            sqlx::query("SELECT tasks_resolve($1, $2, NULL, $3)")
                .bind(&ended)
                .bind(&mine)
                .bind(now)
                .execute(&mut *conn)
                .await?;
        }
    }
    let ids: Vec<Uuid> = inserted.iter().map(|(t, _)| t.id).collect();
    let mut rows: HashMap<Uuid, TaskRecord> =
        sqlx::query_as::<_, TaskRecord>("SELECT * FROM tasks WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(&mut *conn)
            .await?
            .into_iter()
            .map(|t| (t.id, t))
            .collect();
    Ok(inserted
        .into_iter()
        .filter_map(|(t, c)| Some((rows.remove(&t.id)?, c)))
        .collect())
}

/// Inserts a pipeline and its jobs with their edges inside `conn`'s transaction (a
/// submit's, or a schedule's fire): its row and its jobs' rows, or `None` when its
/// idempotency key is taken (nothing written).
pub(crate) async fn insert_pipeline_in(
    conn: &mut PgConnection,
    pipeline: &NewPipeline,
    jobs: &[NewTask],
    needs: &[(Uuid, Uuid)],
    now: DateTime<Utc>,
) -> Result<Option<(PipelineRecord, Vec<TaskRecord>)>, StoreError> {
    let created: Option<PipelineRecord> = sqlx::query_as(
        "INSERT INTO pipelines (id, name, created_by, created_at, idempotency_key,
                                schedule_id, scheduled_for)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
         RETURNING *",
    )
    .bind(pipeline.id)
    .bind(&pipeline.name)
    .bind(&pipeline.created_by)
    .bind(now)
    .bind(&pipeline.idempotency_key)
    .bind(pipeline.schedule_id)
    .bind(pipeline.scheduled_for)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(record) = created else {
        return Ok(None);
    };
    let rows = insert_with_needs(conn, jobs, needs, now).await?;
    Ok(Some((record, rows.into_iter().map(|(t, _)| t).collect())))
}

impl Store {
    /// Inserts a pipeline and its jobs with their edges `(task, needs)`, in one
    /// transaction; a repeated idempotency key inserts nothing and answers the first
    /// pipeline (`false`).
    pub async fn pipeline_insert(
        &self,
        pipeline: &NewPipeline,
        jobs: &[NewTask],
        needs: &[(Uuid, Uuid)],
        now: DateTime<Utc>,
    ) -> Result<(PipelineRecord, Vec<TaskRecord>, bool), StoreError> {
        let mut tx = self.pool.begin().await?;
        let Some((record, rows)) = insert_pipeline_in(&mut tx, pipeline, jobs, needs, now).await?
        else {
            drop(tx);
            let existing: PipelineRecord =
                sqlx::query_as("SELECT * FROM pipelines WHERE idempotency_key = $1")
                    .bind(&pipeline.idempotency_key)
                    .fetch_one(&self.pool)
                    .await?;
            let jobs = self.pipeline_jobs(existing.id).await?.tasks;
            return Ok((existing, jobs, false));
        };
        tx.commit().await?;
        Ok((record, rows, true))
    }

    /// Inserts tasks that need existing tasks (`depends_on`), with their edges
    /// `(task, needs)`, in one transaction: see [`insert_with_needs`]. A need that does
    /// not exist is `NotFound`.
    pub async fn tasks_insert_with_needs(
        &self,
        tasks: &[NewTask],
        needs: &[(Uuid, Uuid)],
        now: DateTime<Utc>,
    ) -> Result<Vec<(TaskRecord, bool)>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let rows = insert_with_needs(&mut tx, tasks, needs, now).await?;
        tx.commit().await?;
        Ok(rows)
    }

    /// The pipeline `id`.
    pub async fn pipeline_get(&self, id: Uuid) -> Result<PipelineRecord, StoreError> {
        sqlx::query_as("SELECT * FROM pipelines WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound)
    }

    /// Every task of pipeline `id` (re-runs included), oldest first, and its edges.
    pub async fn pipeline_jobs(&self, id: Uuid) -> Result<PipelineJobs, StoreError> {
        let tasks: Vec<TaskRecord> =
            sqlx::query_as("SELECT * FROM tasks WHERE pipeline_id = $1 ORDER BY id")
                .bind(id)
                .fetch_all(&self.pool)
                .await?;
        let ids: Vec<Uuid> = tasks.iter().map(|t| t.id).collect();
        let needs: Vec<(Uuid, Uuid)> =
            sqlx::query_as("SELECT task_id, needs_id FROM task_needs WHERE task_id = ANY($1)")
                .bind(&ids)
                .fetch_all(&self.pool)
                .await?;
        Ok(PipelineJobs { tasks, needs })
    }

    /// The tasks `task` needs, by id.
    pub async fn task_needs(&self, task: Uuid) -> Result<Vec<Uuid>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT needs_id FROM task_needs WHERE task_id = $1 ORDER BY needs_id",
        )
        .bind(task)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Pipelines newest first, `created_by`'s only when given, older than `before`.
    pub async fn pipelines_list(
        &self,
        created_by: Option<&str>,
        before: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<PipelineSummary>, StoreError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT p.id, p.name, p.created_by, p.created_at, p.schedule_id,
                    COALESCE(l.statuses, '{{}}') AS statuses, l.finished_at
             FROM pipelines p
             LEFT JOIN LATERAL (
                 SELECT array_agg(status) AS statuses,
                        CASE WHEN bool_and(status IN ({terminal})) THEN max(finished_at) END
                            AS finished_at
                 FROM (SELECT DISTINCT ON (job) status, finished_at FROM tasks
                       WHERE pipeline_id = p.id ORDER BY job, id DESC) latest
             ) l ON true
             WHERE ($1::text IS NULL OR p.created_by = $1) AND ($2::uuid IS NULL OR p.id < $2)
             ORDER BY p.id DESC LIMIT $3",
            terminal = crate::sql_list(TaskStatus::TERMINAL)
        )))
        .bind(created_by)
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Cancels every `waiting` job of pipeline `id` in one statement, at `now`: the rows
    /// it cancelled. (Its other unfinished jobs are cancelled one by one, as any task.)
    pub async fn pipeline_cancel_waiting(
        &self,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let cancelled: Vec<TaskRecord> = sqlx::query_as(
            "UPDATE tasks SET status = 'cancelled', finished_at = $2, updated_at = $2,
                              error = 'cancelled with its pipeline'
             WHERE pipeline_id = $1 AND status = 'waiting'
             RETURNING *",
        )
        .bind(id)
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        // An end's webhook, in its own transaction (design.md §4.8).
        crate::runs::outbox_for_all(&mut tx, &cancelled.iter().collect::<Vec<_>>(), now).await?;
        tx.commit().await?;
        Ok(cancelled)
    }

    /// The tasks the ends of `ended` released or skipped (`released_by`), at whatever
    /// status they have reached since.
    pub async fn tasks_released_by(&self, ended: &[Uuid]) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(
            sqlx::query_as("SELECT * FROM tasks WHERE released_by = ANY($1) ORDER BY id")
                .bind(ended)
                .fetch_all(&self.pool)
                .await?,
        )
    }

    /// Re-runs job `old` of its pipeline, with every job it had skipped since (those
    /// that, through a chain of jobs skipped, needed it): one new task per job, `make`
    /// building each from its latest task, each needing the latest task of each job its
    /// model needed (the new one, where that job is re-run too). In one transaction under
    /// the pipeline's lock, so two re-runs at once make one. Answers the job's new task
    /// and every task inserted (the job's first), or `None` when `old` already has its
    /// re-run (`rerun_key`).
    pub async fn pipeline_rerun_job(
        &self,
        old: &TaskRecord,
        now: DateTime<Utc>,
        make: impl Fn(&TaskRecord) -> Result<NewTask, StoreError>,
    ) -> Result<Option<Vec<TaskRecord>>, StoreError> {
        let (Some(pipeline), Some(job)) = (old.pipeline_id, old.job.as_deref()) else {
            return Err(StoreError::NotFound);
        };
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT 1 FROM pipelines WHERE id = $1 FOR UPDATE")
            .bind(pipeline)
            .execute(&mut *tx)
            .await?;
        let existing: Option<Uuid> =
            sqlx::query_scalar("SELECT id FROM tasks WHERE idempotency_key = $1")
                .bind(crate::rerun_key(old))
                .fetch_optional(&mut *tx)
                .await?;
        if existing.is_some() {
            return Ok(None);
        }
        let tasks: Vec<TaskRecord> =
            sqlx::query_as("SELECT * FROM tasks WHERE pipeline_id = $1 ORDER BY id")
                .bind(pipeline)
                .fetch_all(&mut *tx)
                .await?;
        let ids: Vec<Uuid> = tasks.iter().map(|t| t.id).collect();
        let needs: Vec<(Uuid, Uuid)> =
            sqlx::query_as("SELECT task_id, needs_id FROM task_needs WHERE task_id = ANY($1)")
                .bind(&ids)
                .fetch_all(&mut *tx)
                .await?;
        let jobs = PipelineJobs { tasks, needs };
        let latest = jobs.latest();
        if latest.get(job).map(|t| t.id) != Some(old.id) {
            return Err(StoreError::Conflict {
                status: old.status,
                reason: "a later run of this job exists: re-run that one",
            });
        }
        let needed_jobs = jobs.needed_jobs();
        let needed: HashMap<&str, BTreeSet<String>> = latest
            .iter()
            .map(|(name, t)| (*name, needed_jobs.of(t.id)))
            .collect();
        // The job, then each job skipped that needs one re-run, layer by layer.
        let mut rerun: Vec<&str> = vec![job];
        let mut at = 0;
        while at < rerun.len() {
            let parent = rerun[at].to_string();
            let mut next: Vec<&str> = needed
                .iter()
                .filter(|(name, needs)| {
                    needs.contains(&parent)
                        && latest[**name].status == TaskStatus::Skipped
                        && !rerun.contains(name)
                })
                .map(|(name, _)| *name)
                .collect();
            next.sort_unstable();
            rerun.extend(next);
            at += 1;
        }
        // A job re-run is placed after every job it needs that is re-run too.
        let mut ordered: Vec<&str> = Vec::with_capacity(rerun.len());
        while ordered.len() < rerun.len() {
            let before = ordered.len();
            for name in &rerun {
                let ready = !ordered.contains(name)
                    && needed[*name]
                        .iter()
                        .all(|n| !rerun.contains(&n.as_str()) || ordered.contains(&n.as_str()));
                if ready {
                    ordered.push(name);
                }
            }
            if ordered.len() == before {
                return Err(StoreError::Internal(format!(
                    "pipeline {pipeline}: its jobs' needs form a cycle"
                )));
            }
        }
        let mut new_ids: HashMap<&str, Uuid> = HashMap::new();
        let mut new_tasks = Vec::with_capacity(ordered.len());
        let mut edges = Vec::new();
        for name in &ordered {
            let model = latest[*name];
            let mut task = make(model)?;
            if *name == job {
                task.idempotency_key = Some(crate::rerun_key(old));
                task.retry_of = Some(old.id);
            }
            task.pipeline_id = Some(pipeline);
            task.job = Some(name.to_string());
            task.release_when = model.release_when.clone();
            let needs = &needed[*name];
            task.needs_pending = i32::try_from(needs.len()).unwrap_or(i32::MAX);
            task.has_dependents = needed
                .iter()
                .any(|(other, n)| rerun.contains(other) && n.contains(*name));
            for need in needs {
                let need_id = new_ids
                    .get(need.as_str())
                    .copied()
                    .unwrap_or_else(|| latest[need.as_str()].id);
                edges.push((task.id, need_id));
            }
            new_ids.insert(name, task.id);
            new_tasks.push(task);
        }
        let rows = insert_with_needs(&mut tx, &new_tasks, &edges, now).await?;
        tx.commit().await?;
        Ok(Some(rows.into_iter().map(|(t, _)| t).collect()))
    }
}
