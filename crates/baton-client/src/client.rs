//! A typed HTTP client for the v1 API, used by the runner agent, the CLI and the tests.

use crate::bulk::{BulkAnswer, BulkRequest};
use crate::exchange::{Exchange, ExchangeAnswer};
use crate::task_ref::TaskRef;
use crate::wire::*;
use baton_core::LeaseId;
use baton_core::RunnerId;
use bytes::Bytes;
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use std::time::Duration;
use uuid::Uuid;

/// An error answer from the server, with its JSON body.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status}: {} ({})", body.error.message, body.error.code)]
pub struct ApiError {
    /// The HTTP status: the class of the failure (409 a conflict, 503 try again, ...).
    pub status: StatusCode,
    /// The JSON error body: its `error.code` is what to decide by.
    pub body: ErrorBody,
}

/// Why a call failed: the server said no, the request got no answer, or the answer made
/// no sense.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an error.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The request did not get an answer: connection refused, reset, timed out.
    #[error("request failed: {0}")]
    Transport(#[from] reqwest::Error),
    /// The answer was not what the API promises.
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The HTTP status of an error answer, if the server gave one.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Api(e) => Some(e.status),
            _ => None,
        }
    }
}

/// How long a request may take beyond its own long-poll wait.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A followed log stream may last as long as its task.
const FOLLOW_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// One caller of one cluster: its base URL, its token and a connection pool. Cheap to
/// clone (clones share the pool), and each `with_*` makes a variant of it.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    /// A runner agent's version, sent with each request (`RUNNER_VERSION_HEADER`).
    agent_version: Option<String>,
    /// Sent as `traceparent` when the caller has no trace context of its own (a runner
    /// that exports no traces still ties its task's reports to the task's trace).
    trace_fallback: Option<String>,
    /// Whether a completion's log tail may carry its marks now (`tail_marks.rs`).
    tail_marks: std::sync::Arc<crate::tail_marks::TailMarks>,
}

/// Makes ring the process's TLS provider unless one is set. reqwest is built without a
/// provider of its own (sqlx already brings ring), so every client goes through here.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Client {
    /// A client of the cluster at `base_url` (any node, or a balancer before them), calling
    /// with `token` as its bearer, if any.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Self, ClientError> {
        install_tls_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .pool_idle_timeout(Duration::from_secs(50))
            .build()?;
        Ok(Client {
            http,
            base: base_url.trim_end_matches('/').to_string(),
            token,
            agent_version: None,
            trace_fallback: None,
            tail_marks: Default::default(),
        })
    }

    /// The same client, sending `traceparent` when the calling span has no context.
    pub fn with_trace_fallback(&self, traceparent: Option<String>) -> Self {
        Client {
            trace_fallback: traceparent,
            ..self.clone()
        }
    }

    /// The same client, announcing itself as runner agent `version`.
    pub fn with_agent_version(&self, version: impl Into<String>) -> Self {
        Client {
            agent_version: Some(version.into()),
            ..self.clone()
        }
    }

    /// The same client, calling as `token` (the runner's own, once it has registered).
    pub fn with_token(&self, token: impl Into<String>) -> Self {
        Client {
            token: Some(token.into()),
            ..self.clone()
        }
    }

    /// The base URL calls go to, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// A request to `path` with the bearer token, for calls this client has no method for.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let mut req = self
            .http
            .request(method, format!("{}{}", self.base, path))
            .timeout(REQUEST_TIMEOUT);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(version) = &self.agent_version {
            req = req.header(RUNNER_VERSION_HEADER, version);
        }
        // The caller's span continues on the server (one trace per task).
        let mut headers = reqwest::header::HeaderMap::new();
        crate::trace_context::inject_current(&mut headers);
        if !headers.contains_key(crate::trace_context::TRACEPARENT)
            && let Some(value) = self
                .trace_fallback
                .as_deref()
                .and_then(|tp| reqwest::header::HeaderValue::from_str(tp).ok())
        {
            headers.insert(crate::trace_context::TRACEPARENT, value);
        }
        req.headers(headers)
    }

    pub(crate) async fn send(req: RequestBuilder) -> Result<Response, ClientError> {
        let resp = req.send().await?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str::<ErrorBody>(&text).map_err(|_| {
            ClientError::Protocol(format!("{status} with a non-JSON error body: {text:.200}"))
        })?;
        Err(ApiError { status, body }.into())
    }

    pub(crate) async fn json<T: DeserializeOwned>(req: RequestBuilder) -> Result<T, ClientError> {
        let resp = Self::send(req).await?;
        resp.json::<T>().await.map_err(ClientError::from)
    }

    /// Submits one task; `created` is false when the idempotency key matched an existing one.
    pub async fn submit(&self, task: &SubmitTask) -> Result<(Task, bool), ClientError> {
        let resp = Self::send(self.request(Method::POST, "/v1/tasks").json(task)).await?;
        let created = resp.status() == StatusCode::CREATED;
        Ok((resp.json().await?, created))
    }

    /// Submits up to the nodes' `max_batch` tasks (1,000 by default) at once, all or
    /// nothing.
    pub async fn submit_batch(&self, tasks: Vec<SubmitTask>) -> Result<TaskList, ClientError> {
        Self::json(
            self.request(Method::POST, "/v1/tasks/batch")
                .json(&SubmitBatch { tasks }),
        )
        .await
    }

    /// Submits a pipeline (docs/pipelines.md): every job written with its needs, or none;
    /// `created` is false when its idempotency key found an earlier one.
    pub async fn pipeline_submit(
        &self,
        pipeline: &SubmitPipeline,
    ) -> Result<(Pipeline, bool), ClientError> {
        let resp = Self::send(self.request(Method::POST, "/v1/pipelines").json(pipeline)).await?;
        let created = resp.status() == StatusCode::CREATED;
        Ok((resp.json().await?, created))
    }

    /// A pipeline with its jobs' latest tasks.
    pub async fn pipeline_get(&self, id: Uuid) -> Result<Pipeline, ClientError> {
        Self::json(self.request(Method::GET, &format!("/v1/pipelines/{id}"))).await
    }

    /// A page of pipelines, newest first; `before` is the previous page's `next_cursor`.
    pub async fn pipeline_list(
        &self,
        before: Option<Uuid>,
        limit: Option<i64>,
    ) -> Result<PipelineList, ClientError> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(before) = before {
            query.push(("before", before.to_string()));
        }
        if let Some(limit) = limit {
            query.push(("limit", limit.to_string()));
        }
        Self::json(self.request(Method::GET, "/v1/pipelines").query(&query)).await
    }

    /// Cancels every job of a pipeline that has not ended.
    pub async fn pipeline_cancel(&self, id: Uuid) -> Result<PipelineCancelled, ClientError> {
        Self::json(self.request(Method::POST, &format!("/v1/pipelines/{id}/cancel"))).await
    }

    /// Re-runs a pipeline's job, and the jobs it had skipped; `created` is false when its
    /// latest task already had its re-run.
    pub async fn pipeline_retry_job(
        &self,
        id: Uuid,
        job: &str,
    ) -> Result<(Pipeline, bool), ClientError> {
        let resp = Self::send(self.request(
            Method::POST,
            &format!("/v1/pipelines/{id}/jobs/{job}/retry"),
        ))
        .await?;
        let created = resp.status() == StatusCode::CREATED;
        Ok((resp.json().await?, created))
    }

    /// Cancels a task: at once if it has not started, through its runner if it runs.
    pub async fn task_cancel(&self, id: impl Into<TaskRef>) -> Result<Task, ClientError> {
        let id = id.into();
        Self::json(self.request(Method::POST, &format!("/v1/tasks/{id}/cancel"))).await
    }

    /// Re-runs an ended task as a new one linked to it; `created` is false when the task
    /// already had its re-run (which is returned).
    pub async fn task_retry(&self, id: impl Into<TaskRef>) -> Result<(Task, bool), ClientError> {
        let id = id.into();
        let resp = Self::send(self.request(Method::POST, &format!("/v1/tasks/{id}/retry"))).await?;
        let created = resp.status() == StatusCode::CREATED;
        Ok((resp.json().await?, created))
    }

    /// Cancels the tasks `filter` selects (a bounded number per call).
    pub async fn tasks_cancel(&self, filter: &BulkRequest) -> Result<BulkAnswer, ClientError> {
        Self::json(self.request(Method::POST, "/v1/tasks/cancel").json(filter)).await
    }

    /// Re-runs the ended tasks `filter` selects (a bounded number per call).
    pub async fn tasks_retry(&self, filter: &BulkRequest) -> Result<BulkAnswer, ClientError> {
        Self::json(self.request(Method::POST, "/v1/tasks/retry").json(filter)).await
    }

    /// Every registered runner, with its presence and how much it runs now.
    pub async fn runners(&self) -> Result<RunnerList, ClientError> {
        Self::json(self.request(Method::GET, "/v1/runners")).await
    }

    /// Deletes a runner: its token is refused from then on, and its unfinished tasks are
    /// ended or retried as a lost runner's.
    pub async fn runner_delete(&self, id: RunnerId) -> Result<(), ClientError> {
        Self::send(self.request(Method::DELETE, &format!("/v1/runners/{id}"))).await?;
        Ok(())
    }

    /// Pauses (`true`) or resumes a runner: a paused runner leases nothing.
    pub async fn runner_pause(&self, id: RunnerId, pause: bool) -> Result<RunnerView, ClientError> {
        let action = if pause { "pause" } else { "resume" };
        Self::json(self.request(Method::POST, &format!("/v1/runners/{id}/{action}"))).await
    }

    /// Every queue with settings or unfinished tasks: depth, running, paused.
    pub async fn queues(&self) -> Result<QueueList, ClientError> {
        Self::json(self.request(Method::GET, "/v1/queues")).await
    }

    /// Pauses (`true`) or resumes a queue: a paused queue hands out nothing.
    pub async fn queue_pause(&self, name: &str, pause: bool) -> Result<QueueView, ClientError> {
        let action = if pause { "pause" } else { "resume" };
        Self::json(self.request(Method::POST, &format!("/v1/queues/{name}/{action}"))).await
    }

    /// Replaces a queue's task defaults (`QueueDefaults::default()` clears them).
    pub async fn queue_set_defaults(
        &self,
        name: &str,
        defaults: &QueueDefaults,
    ) -> Result<QueueView, ClientError> {
        Self::json(
            self.request(Method::PUT, &format!("/v1/queues/{name}/defaults"))
                .json(defaults),
        )
        .await
    }

    /// Makes an API token; the answer carries its secret, shown this once.
    pub async fn token_create(&self, req: &CreateToken) -> Result<TokenCreated, ClientError> {
        Self::json(self.request(Method::POST, "/v1/tokens").json(req)).await
    }

    /// The calling token and what it may do.
    pub async fn me(&self) -> Result<Caller, ClientError> {
        Self::json(self.request(Method::GET, "/v1/me")).await
    }

    /// Every API token, newest first; never their secrets.
    pub async fn tokens(&self) -> Result<TokenList, ClientError> {
        Self::json(self.request(Method::GET, "/v1/tokens")).await
    }

    /// Revokes an API token: every node refuses it from its next request.
    pub async fn token_revoke(&self, id: Uuid) -> Result<(), ClientError> {
        Self::send(self.request(Method::DELETE, &format!("/v1/tokens/{id}"))).await?;
        Ok(())
    }

    /// Makes a registration token; the answer carries its secret, shown this once.
    pub async fn registration_token_create(
        &self,
        req: &CreateRegistrationToken,
    ) -> Result<RegistrationTokenCreated, ClientError> {
        Self::json(
            self.request(Method::POST, "/v1/registration-tokens")
                .json(req),
        )
        .await
    }

    /// Every registration token, newest first; never their secrets.
    pub async fn registration_tokens(&self) -> Result<RegistrationTokenList, ClientError> {
        Self::json(self.request(Method::GET, "/v1/registration-tokens")).await
    }

    /// Revokes a registration token: no runner registers with it from then on.
    pub async fn registration_token_revoke(&self, id: Uuid) -> Result<(), ClientError> {
        Self::send(self.request(Method::DELETE, &format!("/v1/registration-tokens/{id}"))).await?;
        Ok(())
    }

    /// One task, with what only a single read shows (its webhook's state, its re-run, the
    /// node holding its claim).
    pub async fn task_get(&self, id: impl Into<TaskRef>) -> Result<Task, ClientError> {
        let id = id.into();
        Self::json(self.request(Method::GET, &format!("/v1/tasks/{id}"))).await
    }

    /// A page of tasks, newest first; follow `next_cursor` for the next.
    pub async fn task_list(&self, query: &TaskQuery) -> Result<TaskList, ClientError> {
        Self::json(self.request(Method::GET, "/v1/tasks").query(query)).await
    }

    /// Log bytes of the latest attempt from `offset`, the offset to ask for next, and the
    /// task's status at the time of reading.
    pub async fn task_logs(
        &self,
        id: impl Into<TaskRef>,
        offset: i64,
    ) -> Result<LogSlice, ClientError> {
        self.task_logs_of(id, None, offset).await
    }

    /// Log bytes of one attempt (the latest when `None`).
    pub async fn task_logs_of(
        &self,
        id: impl Into<TaskRef>,
        attempt: Option<i32>,
        offset: i64,
    ) -> Result<LogSlice, ClientError> {
        let id = id.into();
        let mut req = self
            .request(Method::GET, &format!("/v1/tasks/{id}/logs"))
            .query(&[("offset", offset)]);
        if let Some(attempt) = attempt {
            req = req.query(&[("attempt", attempt)]);
        }
        let resp = Self::send(req).await?;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .ok_or_else(|| ClientError::Protocol(format!("log answer without {name}")))
        };
        let next_offset = header(log_headers::NEXT_OFFSET)?
            .parse()
            .map_err(|_| ClientError::Protocol("bad next offset".into()))?;
        let status = header(log_headers::TASK_STATUS)?
            .parse()
            .map_err(|_| ClientError::Protocol("bad task status".into()))?;
        let attempt = header(log_headers::ATTEMPT)?
            .parse()
            .map_err(|_| ClientError::Protocol("bad attempt".into()))?;
        Ok(LogSlice {
            bytes: resp.bytes().await?,
            next_offset,
            status,
            attempt,
        })
    }

    /// Follows one attempt's output (the latest when `None`) from `offset`: the answer
    /// streams bytes as they arrive and ends when the task is over or a newer attempt
    /// has started. Returns the attempt followed and the byte stream.
    pub async fn task_logs_follow(
        &self,
        id: impl Into<TaskRef>,
        attempt: Option<i32>,
        offset: i64,
    ) -> Result<
        (
            i32,
            impl futures::Stream<Item = Result<Bytes, reqwest::Error>>,
        ),
        ClientError,
    > {
        let id = id.into();
        let mut req = self
            .request(Method::GET, &format!("/v1/tasks/{id}/logs"))
            .query(&[
                ("offset", offset.to_string()),
                ("follow", "true".to_string()),
            ])
            // The stream lasts as long as the task: no overall deadline.
            .timeout(FOLLOW_TIMEOUT);
        if let Some(attempt) = attempt {
            req = req.query(&[("attempt", attempt)]);
        }
        let resp = Self::send(req).await?;
        let attempt = resp
            .headers()
            .get(log_headers::ATTEMPT)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .ok_or_else(|| ClientError::Protocol("follow answer without an attempt".into()))?;
        Ok((attempt, resp.bytes_stream()))
    }

    /// Registers a runner with a registration token; the answer is the runner's identity,
    /// its token shown this once.
    pub async fn register(&self, req: &RegisterRunner) -> Result<RunnerRegistered, ClientError> {
        Self::json(self.request(Method::POST, "/v1/runner/register").json(req)).await
    }

    /// Leases up to `req.max` tasks, parking up to `req.wait_s` seconds when there is none.
    pub async fn lease(&self, req: &LeaseRequest) -> Result<LeaseResponse, ClientError> {
        Self::json(
            self.request(Method::POST, "/v1/runner/lease")
                .timeout(REQUEST_TIMEOUT + Duration::from_secs(req.wait_s.into()))
                .json(req),
        )
        .await
    }

    /// The batched runner exchange: starts, completions, a heartbeat and a lease in one
    /// round trip; parks up to `ex.wait_s` when it carries no items and there is no work.
    pub async fn exchange(&self, ex: &Exchange) -> Result<ExchangeAnswer, ClientError> {
        self.exchange_within(ex, REQUEST_TIMEOUT).await
    }

    /// [`Client::exchange`], given up `answer_within` after the node should have answered
    /// (its park of `ex.wait_s` included): a runner whose fence is shorter than the usual
    /// timeout cannot wait on a node that holds its request without answering.
    pub async fn exchange_within(
        &self,
        ex: &Exchange,
        answer_within: Duration,
    ) -> Result<ExchangeAnswer, ClientError> {
        // One deadline for the exchange, a resend without marks included: a runner sizes
        // `answer_within` to its fence.
        let deadline =
            std::time::Instant::now() + answer_within + Duration::from_secs(ex.wait_s.into());
        let send = |ex: &Exchange| {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            Self::json(
                self.request(Method::POST, "/v1/runner/exchange")
                    .timeout(left.max(Duration::from_millis(100)))
                    .json(ex),
            )
        };
        let ex = self.tail_marks.offered(ex);
        let answer = send(&ex).await;
        match self.tail_marks.resend_after(&ex, &answer) {
            Some(unmarked) => send(&unmarked).await,
            None => answer,
        }
    }

    /// Says which leases the runner holds; the answer says which runs to stop.
    pub async fn heartbeat(&self, beat: &Heartbeat) -> Result<HeartbeatResponse, ClientError> {
        Self::json(
            self.request(Method::POST, "/v1/runner/heartbeat")
                .json(beat),
        )
        .await
    }

    /// The runner removes itself (an ephemeral runner after its one task).
    pub async fn unregister(&self, leaving: &RunnerLeaving) -> Result<(), ClientError> {
        Self::send(
            self.request(Method::POST, "/v1/runner/unregister")
                .json(leaving),
        )
        .await?;
        Ok(())
    }

    /// The live nodes, each with how many dispatched tasks it answers for.
    pub async fn nodes(&self) -> Result<NodeList, ClientError> {
        Self::json(self.request(Method::GET, "/v1/nodes")).await
    }

    /// The demand for a runner with `labels` serving `queues` (empty: all): waiting tasks
    /// it could take, and those no registered runner could take now.
    pub async fn demand(
        &self,
        labels: &[String],
        queues: &[String],
    ) -> Result<DemandView, ClientError> {
        let mut query = vec![("labels", labels.join(","))];
        if !queues.is_empty() {
            query.push(("queues", queues.join(",")));
        }
        Self::json(self.request(Method::GET, "/v1/demand").query(&query)).await
    }

    /// The node's provisioners, with their demand and open assignments.
    pub async fn provisioners(&self) -> Result<ProvisionerList, ClientError> {
        Self::json(self.request(Method::GET, "/v1/provisioners")).await
    }

    /// A report call: its own client span, which the server's request span continues.
    #[tracing::instrument(name = "runner.start", skip_all, fields(otel.kind = "client", task.id = %task))]
    pub async fn start(&self, task: Uuid, lease_id: LeaseId) -> Result<Started, ClientError> {
        Self::json(
            self.request(Method::POST, &format!("/v1/runner/tasks/{task}/start"))
                .json(&StartTask { lease_id }),
        )
        .await
    }

    /// A report call: its own client span, which the server's request span continues.
    pub async fn log_append(
        &self,
        task: Uuid,
        lease_id: LeaseId,
        offset: i64,
        chunk: Bytes,
    ) -> Result<LogAck, ClientError> {
        self.log_append_marked(task, lease_id, offset, chunk, &[])
            .await
    }

    /// [`Client::log_append`], with when the chunk's bytes came and on which stream
    /// (`baton_core::log_marks`; at most `MAX_PER_CHUNK`, each within the chunk).
    #[tracing::instrument(name = "runner.logs", skip_all, fields(otel.kind = "client", task.id = %task))]
    pub async fn log_append_marked(
        &self,
        task: Uuid,
        lease_id: LeaseId,
        offset: i64,
        chunk: Bytes,
        marks: &[baton_core::log_marks::Mark],
    ) -> Result<LogAck, ClientError> {
        let mut request = self
            .request(Method::POST, &format!("/v1/runner/tasks/{task}/logs"))
            .query(&[
                ("lease_id", lease_id.to_string()),
                ("offset", offset.to_string()),
            ])
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream");
        if !marks.is_empty() {
            request = request.header(
                baton_core::log_marks::HEADER,
                baton_core::log_marks::encode(marks),
            );
        }
        Self::json(request.body(chunk)).await
    }

    /// A report call: its own client span, which the server's request span continues.
    #[tracing::instrument(name = "runner.complete", skip_all, fields(otel.kind = "client", task.id = %task))]
    pub async fn complete(&self, task: Uuid, report: &CompleteTask) -> Result<Task, ClientError> {
        Self::json(
            self.request(Method::POST, &format!("/v1/runner/tasks/{task}/complete"))
                .json(report),
        )
        .await
    }
}

/// Filters and paging of `GET /v1/tasks`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct TaskQuery {
    /// Only tasks in this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Only tasks of this queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// At most this many tasks a page (default 100, at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page: the page after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Only the tasks this schedule made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<uuid::Uuid>,
    /// Only the tasks carrying this label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Only the tasks whose command or script contains this text, ignoring case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Only the tasks created at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_after: Option<chrono::DateTime<chrono::Utc>>,
    /// Only the tasks created before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before: Option<chrono::DateTime<chrono::Utc>>,
    /// `newest` first (the server's default) or `oldest` first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<TaskOrder>,
}

/// Which end of the time line a task listing starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskOrder {
    /// The newest first: what is happening now.
    Newest,
    /// The oldest first: what has waited longest.
    Oldest,
}

/// What one read of a task's log gave.
#[derive(Debug, Clone)]
pub struct LogSlice {
    /// Output bytes from the offset asked for, as the process wrote them (not necessarily
    /// UTF-8).
    pub bytes: Bytes,
    /// The offset just past these bytes: where to read from next.
    pub next_offset: i64,
    /// The task's status when the bytes were read: once terminal, no more bytes come.
    pub status: baton_core::TaskStatus,
    /// The attempt whose output this is (each attempt has its own log).
    pub attempt: i32,
}
