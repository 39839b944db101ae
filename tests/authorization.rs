//! Walks the authorization matrix of `docs/authorization.md` against a live node: every
//! operation × every kind of caller, each with a request that would succeed if allowed,
//! so a refusal can only come from authorization. The table is read from the document, so
//! the document cannot drift from the server.

use baton_core::{LeaseId, RunnerId};
use baton_localcluster::testing as support;

use baton_client::{Client, CreateRegistrationToken, CreateToken, Scope, SubmitTask};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use support::*;
use uuid::Uuid;

const DOC: &str = include_str!("../docs/authorization.md");

/// The bulk actions: `own` means they take only the caller's tasks.
const BULK: [&str; 2] = ["POST /v1/tasks/cancel", "POST /v1/tasks/retry"];

/// The listings whose `own` means "lists only the caller's", with the field listing them.
const LISTS: [(&str, &str); 3] = [
    ("GET /v1/tasks", "tasks"),
    ("GET /v1/schedules", "schedules"),
    ("GET /v1/pipelines", "pipelines"),
];

#[tokio::test(flavor = "multi_thread")]
async fn every_cell_of_the_documented_matrix_holds() {
    let env = TestEnv::new("authz").await;
    let node = env.node().await;
    let world = World::new(&node.url).await;
    let matrix = Matrix::from_doc(DOC);

    let described = described_operations(&node).await;
    let in_table: BTreeSet<String> = matrix.rows.iter().map(|r| r.operation.clone()).collect();
    assert_eq!(
        in_table, described,
        "the table lists exactly the documented operations"
    );

    let mut wrong = Vec::new();
    let mut cells = 0;
    for row in &matrix.rows {
        for (column, expected) in matrix.columns.iter().zip(&row.cells) {
            cells += 1;
            if let Err(e) = world.check(&row.operation, column, expected).await {
                wrong.push(format!("{} as {column}: {e}", row.operation));
            }
        }
    }
    assert!(
        cells >= 24 * 9,
        "the whole matrix was walked ({cells} cells)"
    );
    assert!(
        wrong.is_empty(),
        "cells that do not hold:\n{}",
        wrong.join("\n")
    );
}

/// `METHOD /path` of every operation in `/openapi.json`.
async fn described_operations(node: &NodeProc) -> BTreeSet<String> {
    let doc = node.openapi().await;
    let mut ops = BTreeSet::new();
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for method in methods.as_object().unwrap().keys() {
            ops.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    ops
}

struct Matrix {
    columns: Vec<String>,
    rows: Vec<Row>,
}

struct Row {
    operation: String,
    cells: Vec<String>,
}

impl Matrix {
    /// The table whose header starts with `| Operation |`.
    fn from_doc(doc: &str) -> Matrix {
        let split = |line: &str| -> Vec<String> {
            line.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect()
        };
        let mut lines = doc.lines().skip_while(|l| !l.starts_with("| Operation |"));
        let header = split(lines.next().expect("the matrix table is in the document"));
        let columns = header[1..].to_vec();
        let rows: Vec<Row> = lines
            .skip(1)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells = split(l);
                assert_eq!(cells.len(), header.len(), "a full row: {l}");
                Row {
                    operation: cells[0].clone(),
                    cells: cells[1..].to_vec(),
                }
            })
            .collect();
        Matrix { columns, rows }
    }
}

/// The callers and the things they act on.
struct World {
    base: String,
    http: reqwest::Client,
    admin: Client,
    /// Tokens for the API-token columns, by column name.
    unknown: String,
    revoked: String,
    registration: String,
    admin_token: String,
    submit: String,
    read: String,
    submit_read: String,
    /// A second submit-only token: its tasks are "another token's" to every caller.
    other_submitter: Client,
}

/// One request, ready to send.
struct Call {
    method: Method,
    path: String,
    body: Body,
}

enum Body {
    None,
    Json(Value),
    Bytes(Vec<u8>),
}

/// Whose task a task operation acts on.
#[derive(Clone, Copy, PartialEq)]
enum Whose {
    Callers,
    Anothers,
}

impl World {
    async fn new(base: &str) -> World {
        let admin = user_client(base);
        let mint_with = |scopes: Vec<Scope>| {
            let admin = admin.clone();
            async move {
                admin
                    .token_create(&CreateToken {
                        name: "authz".into(),
                        scopes,
                        ..Default::default()
                    })
                    .await
                    .unwrap()
            }
        };
        let mint = |scope: Scope| mint_with(vec![scope]);
        let revoked = mint(Scope::Admin).await;
        admin.token_revoke(revoked.view.id).await.unwrap();
        let registration = admin
            .registration_token_create(&Default::default())
            .await
            .unwrap()
            .token;
        let other = mint(Scope::Submit).await.token;
        World {
            base: base.to_string(),
            http: reqwest::Client::new(),
            unknown: format!("bat_{}", "0".repeat(64)),
            revoked: revoked.token,
            registration,
            admin_token: mint(Scope::Admin).await.token,
            submit: mint(Scope::Submit).await.token,
            read: mint(Scope::Read).await.token,
            submit_read: mint_with(vec![Scope::Submit, Scope::Read]).await.token,
            other_submitter: Client::new(base, Some(other)).unwrap(),
            admin,
        }
    }

    /// Checks one cell: `yes`, `own`, or the status it must be refused with.
    async fn check(&self, operation: &str, column: &str, expected: &str) -> Result<(), String> {
        match expected {
            "yes" => {
                let (status, _) = self.attempt(operation, column, Whose::Anothers).await;
                expect(status.is_success(), "allowed", status)
            }
            "own" => {
                let (status, body) = self.attempt(operation, column, Whose::Callers).await;
                expect(status.is_success(), "allowed on its own task", status)?;
                let (status, others) = self.attempt(operation, column, Whose::Anothers).await;
                if BULK.contains(&operation) {
                    // Allowed, but it takes only the caller's tasks (each call's filter
                    // selects a queue holding just the one task made for it).
                    expect(status.is_success(), "allowed", status)?;
                    return match (&body["matched"], &others["matched"]) {
                        (mine, _) if mine != 1 => Err(format!("took not its own task: {body}")),
                        (_, theirs) if theirs != 0 => {
                            Err(format!("took another token's task: {others}"))
                        }
                        _ => Ok(()),
                    };
                }
                if operation == "GET /v1/tasks/count" {
                    // Allowed, but it counts only the caller's: what its listing lists.
                    expect(status.is_success(), "allowed", status)?;
                    let (_, listed) = self.attempt("GET /v1/tasks", column, Whose::Callers).await;
                    let own = listed["tasks"].as_array().map_or(0, Vec::len);
                    return match body["count"].as_u64() {
                        Some(n) if n as usize == own && own > 0 => Ok(()),
                        _ => Err(format!("counts other than its own {own}: {body}")),
                    };
                }
                if let Some(field) = LISTS
                    .iter()
                    .find(|(op, _)| *op == operation)
                    .map(|(_, field)| *field)
                {
                    // A listing is allowed, but shows only the caller's own.
                    expect(status.is_success(), "allowed", status)?;
                    let ids = |v: &Value| -> Vec<String> {
                        v[field]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|t| t["id"].to_string())
                            .collect()
                    };
                    let (mine, listed) = (ids(&body), ids(&others));
                    let foreign: Vec<String> = match field {
                        "tasks" => self
                            .other_submitter
                            .task_list(&Default::default())
                            .await
                            .unwrap()
                            .tasks
                            .iter()
                            .map(|t| format!("\"{}\"", t.id))
                            .collect(),
                        "pipelines" => self
                            .other_submitter
                            .pipeline_list(None, None)
                            .await
                            .unwrap()
                            .pipelines
                            .iter()
                            .map(|p| format!("\"{}\"", p.id))
                            .collect(),
                        _ => self
                            .other_submitter
                            .schedules()
                            .await
                            .unwrap()
                            .schedules
                            .iter()
                            .map(|s| format!("\"{}\"", s.id))
                            .collect(),
                    };
                    return match foreign.iter().find(|id| listed.contains(id)) {
                        Some(id) => Err(format!("lists another token's {id}")),
                        None if mine.is_empty() => Err("lists none of its own".into()),
                        None => Ok(()),
                    };
                }
                expect(
                    status == StatusCode::NOT_FOUND,
                    "404 on another's task",
                    status,
                )
            }
            "own/403" => {
                let (status, _) = self.attempt(operation, column, Whose::Callers).await;
                expect(status.is_success(), "allowed on its own task", status)?;
                let (status, _) = self.attempt(operation, column, Whose::Anothers).await;
                expect(
                    status == StatusCode::FORBIDDEN,
                    "403 on another's task",
                    status,
                )
            }
            code => {
                let want: u16 = code.parse().map_err(|_| format!("bad cell {code:?}"))?;
                let (status, _) = self.attempt(operation, column, Whose::Anothers).await;
                expect(status.as_u16() == want, code, status)
            }
        }
    }

    /// Sets up what `operation` needs, then calls it as `column`.
    async fn attempt(&self, operation: &str, column: &str, whose: Whose) -> (StatusCode, Value) {
        // Runner columns get fresh runners: an allowed unregister ends its caller.
        let holder = self.register().await;
        let caller = match column {
            "none" => None,
            "unknown" => Some(self.unknown.clone()),
            "revoked" => Some(self.revoked.clone()),
            "registration" => Some(self.registration.clone()),
            "admin" => Some(self.admin_token.clone()),
            "submit" => Some(self.submit.clone()),
            "read" => Some(self.read.clone()),
            "submit+read" => Some(self.submit_read.clone()),
            "runner" => Some(holder.token.clone()),
            "other runner" => Some(self.register().await.token),
            other => panic!("unknown column {other:?}"),
        };
        let call = self
            .call_for(operation, caller.as_deref(), whose, &holder)
            .await;
        let mut request = self
            .http
            .request(call.method, format!("{}{}", self.base, call.path));
        if let Some(token) = &caller {
            request = request.bearer_auth(token);
        }
        request = match call.body {
            Body::None => request,
            Body::Json(v) => request.json(&v),
            Body::Bytes(b) => request
                .header("content-type", "application/octet-stream")
                .body(b),
        };
        let response = request.send().await.expect("the node answers");
        let status = response.status();
        if operation == "GET /v1/events" && status.is_success() {
            // A stream that does not end: its answer's status is the verdict.
            return (status, Value::Null);
        }
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body)
    }

    async fn call_for(
        &self,
        operation: &str,
        caller: Option<&str>,
        whose: Whose,
        holder: &Registered,
    ) -> Call {
        let (method, template) = operation.split_once(' ').unwrap();
        let method: Method = method.parse().unwrap();
        let call = |path: String, body: Body| Call {
            method: method.clone(),
            path,
            body,
        };
        let owner = match whose {
            Whose::Callers => Client::new(&self.base, caller.map(str::to_string)).unwrap(),
            Whose::Anothers => self.other_submitter.clone(),
        };
        let task_of = || async { owner.submit(&parked_task()).await.unwrap().0.id };
        // An ended task in a queue of its own (re-runs and bulk actions).
        let ended_in = |queue: String| {
            let owner = owner.clone();
            async move {
                let task = SubmitTask {
                    queue: Some(queue),
                    ..parked_task()
                };
                let id = owner.submit(&task).await.unwrap().0.id;
                owner.task_cancel(id).await.unwrap();
                id
            }
        };
        let fresh_queue = || format!("authz-{}", &Uuid::new_v4().simple().to_string()[..12]);
        let schedule_of = || {
            let owner = owner.clone();
            async move { owner.schedule_create(&schedule()).await.unwrap().id }
        };
        // A pipeline of one parked job; `ended`: cancelled, so its job may be re-run.
        let pipeline_of = |ended: bool| {
            let owner = owner.clone();
            async move {
                let (pipeline, _) = owner
                    .pipeline_submit(&serde_json::from_value(pipeline()).unwrap())
                    .await
                    .unwrap();
                if ended {
                    owner.pipeline_cancel(pipeline.id).await.unwrap();
                }
                pipeline.id
            }
        };
        match template {
            "/v1/pipelines" if method == Method::GET => {
                pipeline_of(false).await;
                call(template.into(), Body::None)
            }
            "/v1/pipelines" => call(template.into(), Body::Json(pipeline())),
            "/v1/pipelines/{id}" | "/v1/pipelines/{id}/cancel" => {
                let id = pipeline_of(false).await;
                call(template.replace("{id}", &id.to_string()), Body::None)
            }
            "/v1/pipelines/{id}/jobs/{job}/retry" => {
                let id = pipeline_of(true).await;
                let path = template
                    .replace("{id}", &id.to_string())
                    .replace("{job}", "parked");
                call(path, Body::None)
            }
            "/v1/schedules" if method == Method::GET => {
                schedule_of().await;
                call(template.into(), Body::None)
            }
            "/v1/schedules" => call(template.into(), Body::Json(json!(schedule()))),
            "/v1/schedules/{id}"
            | "/v1/schedules/{id}/pause"
            | "/v1/schedules/{id}/resume"
            | "/v1/schedules/{id}/trigger" => {
                let id = schedule_of().await;
                let body = match method {
                    Method::PATCH => Body::Json(json!({ "jitter_s": 1 })),
                    _ => Body::None,
                };
                call(template.replace("{id}", &id.to_string()), body)
            }
            "/healthz"
            | "/readyz"
            | "/metrics"
            | "/openapi.json"
            | "/v1/tasks"
            | "/v1/tasks/count"
            | "/v1/runners"
            | "/v1/queues"
            | "/v1/queues/trends"
            | "/v1/tokens"
            | "/v1/nodes"
            | "/v1/provisioners"
            | "/v1/webhooks/secret"
            | "/v1/events"
            | "/v1/me"
                if method == Method::GET =>
            {
                call(template.to_string(), Body::None)
            }
            "/v1/demand" => call("/v1/demand?labels=gpu".into(), Body::None),
            "/v1/tasks" => call(template.into(), Body::Json(json!(parked_task()))),
            "/v1/tasks/batch" => call(
                template.into(),
                Body::Json(json!({ "tasks": [parked_task(), parked_task()] })),
            ),
            "/v1/tasks/{id}"
            | "/v1/tasks/{id}/logs"
            | "/v1/tasks/{id}/logs/marks"
            | "/v1/tasks/{id}/attempts"
            | "/v1/tasks/{id}/cancel" => {
                let id = task_of().await;
                call(template.replace("{id}", &id.to_string()), Body::None)
            }
            "/v1/tasks/{id}/retry" => {
                let id = ended_in(fresh_queue()).await;
                call(template.replace("{id}", &id.to_string()), Body::None)
            }
            "/v1/tasks/cancel" => {
                let queue = fresh_queue();
                owner
                    .submit(&SubmitTask {
                        queue: Some(queue.clone()),
                        ..parked_task()
                    })
                    .await
                    .unwrap();
                call(template.into(), Body::Json(json!({ "queue": queue })))
            }
            "/v1/tasks/retry" => {
                let queue = fresh_queue();
                ended_in(queue.clone()).await;
                call(template.into(), Body::Json(json!({ "queue": queue })))
            }
            "/v1/runners/{id}" | "/v1/runners/{id}/pause" | "/v1/runners/{id}/resume" => {
                let target = self.register().await;
                call(template.replace("{id}", &target.id.to_string()), Body::None)
            }
            "/v1/queues/{name}/pause" | "/v1/queues/{name}/resume" => {
                call(template.replace("{name}", "authz-queue"), Body::None)
            }
            "/v1/queues/{name}/defaults" => call(
                template.replace("{name}", "authz-queue"),
                Body::Json(json!({ "max_attempts": 2 })),
            ),
            "/v1/tokens" => call(
                template.into(),
                Body::Json(json!({ "name": "made-in-authz", "scopes": ["read"] })),
            ),
            "/v1/tokens/{id}" => {
                let made = self
                    .admin
                    .token_create(&CreateToken {
                        name: "to-revoke".into(),
                        scopes: vec![Scope::Read],
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                call(
                    template.replace("{id}", &made.view.id.to_string()),
                    Body::None,
                )
            }
            "/v1/registration-tokens" => call(template.into(), Body::Json(json!({ "uses": 1 }))),
            "/v1/registration-tokens/{id}" => {
                let made = self
                    .admin
                    .registration_token_create(&CreateRegistrationToken::default())
                    .await
                    .unwrap();
                call(
                    template.replace("{id}", &made.view.id.to_string()),
                    Body::None,
                )
            }
            "/v1/runner/register" => call(
                template.into(),
                Body::Json(json!({
                    "registration_token": REGISTRATION_TOKEN,
                    "name": "authz-registered",
                    "labels": ["authz"],
                    "capacity": 1,
                    "version": "test",
                })),
            ),
            "/v1/runner/lease" => call(
                template.into(),
                Body::Json(json!({
                    "request_id": Uuid::new_v4(), "max": 1, "wait_s": 0,
                    "boot_id": Uuid::new_v4(), "running": [],
                })),
            ),
            "/v1/runner/heartbeat" => call(
                template.into(),
                Body::Json(json!({ "boot_id": Uuid::new_v4(), "running": [] })),
            ),
            "/v1/runner/exchange" => {
                let (task, lease) = self.leased_to(holder, false).await;
                call(
                    template.into(),
                    Body::Json(json!({
                        "request_id": Uuid::new_v4(), "boot_id": Uuid::new_v4(),
                        "starts": [{ "task_id": task, "lease_id": lease }],
                    })),
                )
            }
            "/v1/runner/unregister" => call(template.into(), Body::None),
            "/v1/runner/tasks/{id}/start" => {
                let (task, lease) = self.leased_to(holder, false).await;
                let path = template.replace("{id}", &task.to_string());
                call(path, Body::Json(json!({ "lease_id": lease })))
            }
            "/v1/runner/tasks/{id}/logs" => {
                let (task, lease) = self.leased_to(holder, true).await;
                let path = format!("/v1/runner/tasks/{task}/logs?lease_id={lease}&offset=0");
                call(path, Body::Bytes(b"hello\n".to_vec()))
            }
            "/v1/runner/tasks/{id}/complete" => {
                let (task, lease) = self.leased_to(holder, true).await;
                let path = template.replace("{id}", &task.to_string());
                call(
                    path,
                    Body::Json(
                        json!({ "lease_id": lease, "outcome": "succeeded", "exit_code": 0 }),
                    ),
                )
            }
            other => panic!("the matrix names an operation this test cannot call: {other}"),
        }
    }

    /// A fresh runner with a label of its own, so it leases only what is meant for it.
    async fn register(&self) -> Registered {
        let label = format!("r{}", &Uuid::new_v4().simple().to_string()[..10]);
        let (id, token) = register_runner_token(&self.base, &[label.as_str()], 1).await;
        Registered { id, token, label }
    }

    /// A task leased to `holder` (and started, if asked): its id and lease id.
    async fn leased_to(&self, holder: &Registered, started: bool) -> (Uuid, LeaseId) {
        let runner = Client::new(&self.base, Some(holder.token.clone())).unwrap();
        let task = SubmitTask {
            labels: vec![holder.label.clone()],
            ..parked_task()
        };
        let id = self.admin.submit(&task).await.unwrap().0.id;
        let leased = runner
            .lease(&lease_waiting(Uuid::new_v4(), 1, 10))
            .await
            .unwrap();
        let lease = leased
            .tasks
            .iter()
            .find(|t| t.id == id)
            .expect("the holder leased its task")
            .lease_id;
        if started {
            runner.start(id, lease).await.unwrap();
        }
        (id, lease)
    }
}

struct Registered {
    id: RunnerId,
    token: String,
    label: String,
}

/// A task no runner will ever lease (no runner has its label).
/// A schedule of a parked task, a name of its own, that never fires during the walk.
fn schedule() -> baton_client::CreateSchedule {
    baton_client::CreateSchedule {
        name: format!("authz-{}", &Uuid::new_v4().simple().to_string()[..12]),
        cron: "@yearly".into(),
        task: parked_task(),
        ..Default::default()
    }
}

/// A pipeline whose one job, `parked`, no runner takes.
fn pipeline() -> Value {
    let mut job = json!(parked_task());
    job["name"] = json!("parked");
    json!({ "name": "authz", "jobs": [job] })
}

fn parked_task() -> SubmitTask {
    SubmitTask {
        command: Some(vec!["true".into()]),
        labels: vec!["authz-parked".into()],
        ..Default::default()
    }
}

fn expect(ok: bool, what: &str, got: StatusCode) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("expected {what}, got {got}"))
    }
}

/// A token limited to queues and labels submits there only: elsewhere, or with a label
/// outside its list, is a 403 that writes nothing, for a single submit and for a batch
/// with one such task in it.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_limited_to_queues_and_labels_submits_nowhere_else() {
    let env = TestEnv::new("authz-token-limits").await;
    let node = env.node().await;
    let admin = user_client(&node.url);
    let made = admin
        .token_create(&CreateToken {
            name: "builds only".into(),
            scopes: vec![Scope::Submit, Scope::Read],
            queues: Some(vec!["builds".into()]),
            labels: Some(vec!["linux".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(made.view.queues, Some(vec!["builds".to_string()]));
    let limited = Client::new(&node.url, Some(made.token)).unwrap();
    let task = |queue: &str, labels: &[&str]| SubmitTask {
        queue: Some(queue.into()),
        labels: labels.iter().map(|l| l.to_string()).collect(),
        command: Some(vec!["true".into()]),
        ..Default::default()
    };
    let status = |e: baton_client::ClientError| match e {
        baton_client::ClientError::Api(e) => (e.status.as_u16(), e.body.error.message),
        other => panic!("{other}"),
    };

    limited.submit(&task("builds", &["linux"])).await.unwrap();
    limited.submit(&task("builds", &[])).await.unwrap();
    let (code, message) = status(limited.submit(&task("deploys", &[])).await.unwrap_err());
    assert_eq!(code, 403);
    assert!(message.contains("builds"), "{message}");
    let (code, message) = status(
        limited
            .submit(&task("builds", &["linux", "gpu"]))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 403);
    assert!(message.contains("gpu"), "{message}");
    let (code, _) = status(
        limited
            .submit_batch(vec![task("builds", &[]), task("default", &[])])
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 403);
    assert_eq!(env.count_tasks().await, 2, "only the allowed submits wrote");

    // Limits are checked when the token is made, too.
    let bad = admin
        .token_create(&CreateToken {
            name: "nowhere".into(),
            scopes: vec![Scope::Submit],
            queues: Some(vec![]),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status(bad).0, 422);
    let bad = admin
        .token_create(&CreateToken {
            name: "limited admin".into(),
            scopes: vec![Scope::Admin],
            queues: Some(vec!["builds".into()]),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        status(bad).0,
        422,
        "an admin token's limits would bind nothing"
    );
}
