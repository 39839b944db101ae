//! Runner assignments (docs/dynamic-runners.md): each is one runner a provisioner starts
//! for waiting work. Admission is one transaction per provisioner under an advisory lock,
//! so nodes admitting at once never start more runners than the capacity or the demand
//! allows; every later move is a compare-and-set on the owning node, the state and the
//! attempt, so a node that lost an assignment to an adopter changes nothing of it.

use crate::Store;
use crate::error::StoreError;
use crate::metered::MeteredTx;
use baton_core::RunnerId;
use baton_core::provision::{Assigned, to_start};
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

/// An assignment as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AssignmentRecord {
    /// Its id.
    pub id: Uuid,
    /// The provisioner (its name in the settings) it belongs to.
    pub provisioner: String,
    /// The backend that starts its runner.
    pub backend: String,
    /// The labels its runner carries.
    pub labels: Vec<String>,
    /// The queues its runner serves; empty: all.
    pub queues: Vec<String>,
    /// `starting`, `running`, `retrying`, `done`, `failed` or `dropped`.
    pub state: String,
    /// Which start of a runner for it this is (1 for the first).
    pub attempt: i32,
    /// The node that owns it.
    pub node_id: String,
    /// The name of this attempt's runner.
    pub runner_name: String,
    /// This attempt's one-use registration token.
    pub registration_token_id: Uuid,
    /// What the backend needs to release the runner.
    pub handle: Option<String>,
    /// When it was admitted.
    pub created_at: DateTime<Utc>,
    /// When this attempt's runner was started.
    pub started_at: DateTime<Utc>,
    /// When its runner was seen holding a task.
    pub claimed_at: Option<DateTime<Utc>>,
    /// When a retrying assignment may start a runner again.
    pub retry_at: Option<DateTime<Utc>>,
    /// When it ended (`done`, `failed`, `dropped`).
    pub ended_at: Option<DateTime<Utc>>,
    /// Why its last attempt failed.
    pub error: Option<String>,
}

/// The columns of [`AssignmentRecord`].
macro_rules! assignment_columns {
    () => {
        "a.id, a.provisioner, a.backend, a.labels, a.queues, a.state, a.attempt, a.node_id,
         a.runner_name, a.registration_token_id, a.handle, a.created_at, a.started_at,
         a.claimed_at, a.retry_at, a.ended_at, a.error"
    };
}

/// An open assignment with what Postgres knows of its current runner.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AssignmentFacts {
    /// The assignment.
    #[sqlx(flatten)]
    pub assignment: AssignmentRecord,
    /// The runner that registered with this attempt's token.
    pub runner_id: Option<Uuid>,
    /// That runner unregistered or was deleted.
    pub runner_left: bool,
    /// That runner is paused (a failing attempt's runner is, so it takes nothing more).
    pub runner_paused: bool,
    /// That runner holds a started task.
    pub took_work: bool,
    /// When that runner was last heard, as presence was last copied to Postgres (its
    /// registration when never since).
    pub runner_seen: Option<DateTime<Utc>>,
}

/// What a provisioner admits with: its settings and the demand its node measured.
#[derive(Debug, Clone)]
pub struct Admission<'a> {
    /// The provisioner's name.
    pub provisioner: &'a str,
    /// Its backend's name.
    pub backend: &'a str,
    /// Its runners' labels.
    pub labels: &'a [String],
    /// Its runners' queues; empty: all.
    pub queues: &'a [String],
    /// Most runners starting or running at once.
    pub capacity: u64,
    /// Waiting tasks no registered runner could take now.
    pub uncovered: u64,
    /// The admitting node, which owns what it admits.
    pub node: &'a str,
    /// A runner's registration token expires this long after its start.
    pub claim_timeout: chrono::Duration,
    /// The time of the pass.
    pub now: DateTime<Utc>,
}

/// A runner the caller is ready to start: its name and token, made before admission so
/// the token's secret never reaches the store.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The runner's name.
    pub runner_name: String,
    /// The SHA-256 of its registration token.
    pub token_hash: Vec<u8>,
}

/// A runner admission said to start, with the candidate whose token it got.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Index into the candidates given.
    pub candidate: usize,
    /// The assignment, as now stored (`starting`).
    pub assignment: AssignmentRecord,
}

/// What one admission did.
#[derive(Debug, Clone, Default)]
pub struct Admitted {
    /// Runners to start: new assignments, and retries whose time came.
    pub launches: Vec<Launch>,
    /// Retries dropped: the demand they were for is gone, or there is no room.
    pub dropped: usize,
}

impl Store {
    /// Admits runners for one provisioner, under its advisory lock: first this node's
    /// retrying assignments whose time came (started again while demand and capacity
    /// allow, dropped otherwise), then new ones (`provision::to_start`). Each launch uses
    /// the next of `candidates`, whose token is stored one-use, scoped to the runner's
    /// labels and queues, expiring at the claim timeout.
    pub async fn assignments_admit(
        &self,
        admission: &Admission<'_>,
        candidates: &[Candidate],
    ) -> Result<Admitted, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext('baton:provision:' || $1))")
            .bind(admission.provisioner)
            .execute(&mut *tx)
            .await?;
        // This node's due retries, locked before the count, so a row that moves while
        // this admission runs is counted as it is once moved.
        let due: Vec<(Uuid, i32)> = sqlx::query_as(
            "SELECT id, attempt FROM runner_assignments
             WHERE provisioner = $1 AND node_id = $2 AND state = 'retrying' AND retry_at <= $3
             ORDER BY retry_at FOR UPDATE",
        )
        .bind(admission.provisioner)
        .bind(admission.node)
        .bind(admission.now)
        .fetch_all(&mut *tx)
        .await?;
        let mut assigned = assigned(&mut tx, admission.provisioner, admission.now).await?;
        let mut out = Admitted::default();
        let mut next = candidates.iter().enumerate().peekable();
        for (id, attempt) in due {
            // No candidate left (the caller made fewer than are due): the next pass.
            if next.peek().is_none() {
                break;
            }
            assigned.retrying = assigned.retrying.saturating_sub(1);
            let room = admission.capacity > assigned.starting + assigned.running;
            let wanted = admission.uncovered > assigned.starting + assigned.retrying;
            if !(room && wanted) {
                let dropped = sqlx::query(
                    "UPDATE runner_assignments SET state = 'dropped', ended_at = $3
                     WHERE id = $1 AND attempt = $2 AND node_id = $4 AND state = 'retrying'",
                )
                .bind(id)
                .bind(attempt)
                .bind(admission.now)
                .bind(admission.node)
                .execute(&mut *tx)
                .await?;
                out.dropped += dropped.rows_affected() as usize;
                continue;
            }
            let (index, candidate) = next.next().expect("peeked");
            // The token is stored once the row is this attempt's: a row that moved on
            // leaves none behind.
            let token = Uuid::now_v7();
            let Some(assignment) = sqlx::query_as::<_, AssignmentRecord>(concat!(
                "UPDATE runner_assignments a
                 SET state = 'starting', attempt = attempt + 1, runner_name = $3,
                     registration_token_id = $4, handle = NULL, started_at = $5, retry_at = NULL,
                     error = NULL
                 WHERE id = $1 AND attempt = $2 AND node_id = $6 AND state = 'retrying'
                 RETURNING ",
                assignment_columns!()
            ))
            .bind(id)
            .bind(attempt)
            .bind(&candidate.runner_name)
            .bind(token)
            .bind(admission.now)
            .bind(admission.node)
            .fetch_optional(&mut *tx)
            .await?
            else {
                continue;
            };
            insert_token(&mut tx, token, admission, candidate).await?;
            assigned.starting += 1;
            out.launches.push(Launch {
                candidate: index,
                assignment,
            });
        }
        let fresh = to_start(admission.capacity, admission.uncovered, assigned);
        for (index, candidate) in next.take(fresh as usize) {
            let token = Uuid::now_v7();
            insert_token(&mut tx, token, admission, candidate).await?;
            let assignment = sqlx::query_as::<_, AssignmentRecord>(concat!(
                "INSERT INTO runner_assignments AS a
                     (id, provisioner, backend, labels, queues, state, attempt, node_id,
                      runner_name, registration_token_id, created_at, started_at)
                 VALUES ($1, $2, $3, $4, $5, 'starting', 1, $6, $7, $8, $9, $9)
                 RETURNING ",
                assignment_columns!()
            ))
            .bind(Uuid::now_v7())
            .bind(admission.provisioner)
            .bind(admission.backend)
            .bind(admission.labels)
            .bind(admission.queues)
            .bind(admission.node)
            .bind(&candidate.runner_name)
            .bind(token)
            .bind(admission.now)
            .fetch_one(&mut *tx)
            .await?;
            out.launches.push(Launch {
                candidate: index,
                assignment,
            });
        }
        tx.commit().await?;
        Ok(out)
    }

    /// This node's open assignments, each with what Postgres knows of its runner.
    pub async fn assignments_of(&self, node: &str) -> Result<Vec<AssignmentFacts>, StoreError> {
        Ok(sqlx::query_as::<_, AssignmentFacts>(concat!(
            "SELECT ",
            assignment_columns!(),
            ", r.id AS runner_id,
               COALESCE(r.deleted_at IS NOT NULL, false) AS runner_left,
               COALESCE(r.paused, false) AS runner_paused,
               COALESCE(EXISTS (SELECT 1 FROM tasks t WHERE t.runner_id = r.id
                                AND t.status IN ('leased', 'running', 'cancelling')), false)
                   AS took_work,
               GREATEST(r.last_seen, r.created_at) AS runner_seen
             FROM runner_assignments a
             LEFT JOIN runners r ON r.registration_token_id = a.registration_token_id
             WHERE a.node_id = $1 AND a.ended_at IS NULL
             ORDER BY a.id"
        ))
        .bind(node)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Open assignments, all provisioners and nodes: for the metrics and the operators.
    pub async fn assignments_open(&self) -> Result<Vec<AssignmentRecord>, StoreError> {
        Ok(sqlx::query_as::<_, AssignmentRecord>(concat!(
            "SELECT ",
            assignment_columns!(),
            " FROM runner_assignments a WHERE a.ended_at IS NULL ORDER BY a.id"
        ))
        .fetch_all(&self.pool)
        .await?)
    }

    /// Takes over the open assignments of `provisioners` (those this node has) whose
    /// nodes are not in `live` (which holds this node): one statement, so of two nodes
    /// adopting at once the second finds them taken.
    pub async fn assignments_adopt(
        &self,
        node: &str,
        live: &[String],
        provisioners: &[String],
    ) -> Result<u64, StoreError> {
        Ok(sqlx::query(
            "UPDATE runner_assignments SET node_id = $1
             WHERE ended_at IS NULL AND node_id <> ALL($2) AND provisioner = ANY($3)",
        )
        .bind(node)
        .bind(live)
        .bind(provisioners)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    /// Records the backend's handle of an attempt's runner, while the attempt is still
    /// starting and this node's; `false` otherwise, and the starter releases the runner
    /// itself (an adopter may have ended the attempt without the handle).
    pub async fn assignment_set_handle(
        &self,
        (id, attempt, node): (Uuid, i32, &str),
        handle: &str,
    ) -> Result<bool, StoreError> {
        let moved = sqlx::query(
            "UPDATE runner_assignments SET handle = $4
             WHERE id = $1 AND attempt = $2 AND node_id = $3 AND state = 'starting'",
        )
        .bind(id)
        .bind(attempt)
        .bind(node)
        .bind(handle)
        .execute(&self.pool)
        .await?;
        Ok(moved.rows_affected() == 1)
    }

    /// `starting → running`: its runner took a task at `now`.
    pub async fn assignment_running(
        &self,
        id: Uuid,
        attempt: i32,
        node: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let moved = sqlx::query(
            "UPDATE runner_assignments SET state = 'running', claimed_at = $4, error = NULL
             WHERE id = $1 AND attempt = $2 AND node_id = $3 AND state = 'starting'",
        )
        .bind(id)
        .bind(attempt)
        .bind(node)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(moved.rows_affected() == 1)
    }

    /// Begins a failed attempt's end, in one transaction: the attempt marked failing, for
    /// `error`, its end not before `not_before` (`retry_at` on a starting row); its token
    /// revoked; every runner registered with it paused, so it can start nothing. Returns
    /// the runners paused, or `None` when the attempt had moved on.
    pub async fn assignment_begin_failing(
        &self,
        (id, attempt, node): (Uuid, i32, &str),
        error: &str,
        not_before: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Option<Vec<RunnerId>>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let token: Option<(Uuid,)> = sqlx::query_as(
            "UPDATE runner_assignments SET error = $4, retry_at = $5
             WHERE id = $1 AND attempt = $2 AND node_id = $3 AND state = 'starting'
               AND error IS NULL
             RETURNING registration_token_id",
        )
        .bind(id)
        .bind(attempt)
        .bind(node)
        .bind(error)
        .bind(not_before)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((token,)) = token else {
            return Ok(None);
        };
        let paused = revoke_and_pause(&mut tx, token, now).await?;
        tx.commit().await?;
        Ok(Some(paused))
    }

    /// A failing attempt's runner that registered after its token's revocation (its use
    /// taken just before): paused too, and the end put off to `not_before` again.
    /// Returns the runners paused.
    pub async fn assignment_pause_late(
        &self,
        (id, attempt, node): (Uuid, i32, &str),
        not_before: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<RunnerId>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let token: Option<(Uuid,)> = sqlx::query_as(
            "UPDATE runner_assignments SET retry_at = $4
             WHERE id = $1 AND attempt = $2 AND node_id = $3 AND state = 'starting'
               AND error IS NOT NULL
             RETURNING registration_token_id",
        )
        .bind(id)
        .bind(attempt)
        .bind(node)
        .bind(not_before)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((token,)) = token else {
            return Ok(Vec::new());
        };
        let paused = revoke_and_pause(&mut tx, token, now).await?;
        tx.commit().await?;
        Ok(paused)
    }

    /// `starting | running → done`: its runner finished and left. Its token is revoked
    /// too (a one-use token is spent already; this covers a runner that never used it).
    pub async fn assignment_done(
        &self,
        id: Uuid,
        attempt: i32,
        node: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        let token: Option<(Uuid,)> = sqlx::query_as(
            "UPDATE runner_assignments SET state = 'done', ended_at = $4
             WHERE id = $1 AND attempt = $2 AND node_id = $3
               AND state IN ('starting', 'running')
             RETURNING registration_token_id",
        )
        .bind(id)
        .bind(attempt)
        .bind(node)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        revoke_with(tx, token, now).await
    }

    /// `starting → retrying` at `retry_at`, or `→ failed` when it `gives_up` (its
    /// attempts spent; it still stands for its task until `retry_at`, see
    /// `Assigned::cooling`): its runner did not claim work, for `error`. Its token is
    /// revoked and every runner registered with it deleted in the same transaction.
    /// Returns the runners deleted, or `None` when the attempt had moved on.
    pub async fn assignment_fail(
        &self,
        (id, attempt, node): (Uuid, i32, &str),
        error: &str,
        (retry_at, gives_up): (DateTime<Utc>, bool),
        now: DateTime<Utc>,
    ) -> Result<Option<Vec<RunnerId>>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let token: Option<(Uuid,)> = sqlx::query_as(
            "UPDATE runner_assignments
             SET state = CASE WHEN $7 THEN 'failed' ELSE 'retrying' END,
                 retry_at = $6,
                 ended_at = CASE WHEN $7 THEN $4 END,
                 error = $5
             WHERE id = $1 AND attempt = $2 AND node_id = $3 AND state = 'starting'
             RETURNING registration_token_id",
        )
        .bind(id)
        .bind(attempt)
        .bind(node)
        .bind(now)
        .bind(error)
        .bind(retry_at)
        .bind(gives_up)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((token,)) = token else {
            return Ok(None);
        };
        // Any runner registered with the attempt's token goes with it, whenever it
        // registered.
        let deleted: Vec<(RunnerId,)> = sqlx::query_as(
            "UPDATE runners SET deleted_at = $2
             WHERE registration_token_id = $1 AND deleted_at IS NULL RETURNING id",
        )
        .bind(token)
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        revoke_with(tx, Some((token,)), now).await?;
        Ok(Some(deleted.into_iter().map(|(id,)| id).collect()))
    }
}

/// Revokes `token` and pauses every runner registered with it; the runners paused.
async fn revoke_and_pause(
    tx: &mut MeteredTx,
    token: Uuid,
    now: DateTime<Utc>,
) -> Result<Vec<RunnerId>, StoreError> {
    sqlx::query(
        "UPDATE registration_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
    )
    .bind(token)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    let paused: Vec<(RunnerId,)> = sqlx::query_as(
        "UPDATE runners SET paused = true
         WHERE registration_token_id = $1 AND deleted_at IS NULL AND NOT paused RETURNING id",
    )
    .bind(token)
    .fetch_all(&mut **tx)
    .await?;
    Ok(paused.into_iter().map(|(id,)| id).collect())
}

/// Revokes the token an attempt's end returned, and commits both; `false` when the
/// attempt had moved on (nothing changed).
async fn revoke_with(
    mut tx: MeteredTx,
    token: Option<(Uuid,)>,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let Some((token,)) = token else {
        return Ok(false);
    };
    sqlx::query(
        "UPDATE registration_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
    )
    .bind(token)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// A provisioner's open assignments, and those that gave up lately, counted by state.
async fn assigned(
    conn: &mut PgConnection,
    provisioner: &str,
    now: DateTime<Utc>,
) -> Result<Assigned, StoreError> {
    // Two scans, each on its partial index, rather than one `OR` that reads the whole
    // retention's rows.
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT state, count(*) FROM (
             SELECT state FROM runner_assignments WHERE provisioner = $1 AND ended_at IS NULL
             UNION ALL
             SELECT state FROM runner_assignments
             WHERE provisioner = $1 AND state = 'failed' AND retry_at > $2
         ) AS counted GROUP BY state",
    )
    .bind(provisioner)
    .bind(now)
    .fetch_all(&mut *conn)
    .await?;
    let mut assigned = Assigned::default();
    for (state, count) in rows {
        let count = count as u64;
        match state.as_str() {
            "starting" => assigned.starting = count,
            "running" => assigned.running = count,
            "retrying" => assigned.retrying = count,
            "failed" => assigned.cooling = count,
            _ => {}
        }
    }
    Ok(assigned)
}

/// Stores an attempt's one-use registration token, scoped to the runner it starts.
async fn insert_token(
    conn: &mut PgConnection,
    id: Uuid,
    admission: &Admission<'_>,
    candidate: &Candidate,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO registration_tokens
             (id, token_hash, name, expires_at, uses_left, labels, queues, created_at, provisioner)
         VALUES ($1, $2, $3, $4, 1, $5, $6, $7, $8)",
    )
    .bind(id)
    .bind(&candidate.token_hash)
    .bind(format!(
        "{}: {}",
        admission.provisioner, candidate.runner_name
    ))
    .bind(admission.now + admission.claim_timeout)
    .bind(admission.labels)
    .bind((!admission.queues.is_empty()).then_some(admission.queues))
    .bind(admission.now)
    .bind(admission.provisioner)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
