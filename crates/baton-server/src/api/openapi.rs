//! The OpenAPI document, generated from the handlers themselves: each handler carries its
//! `#[utoipa::path]` and the router registers exactly those (utoipa-axum), so a route and
//! its description cannot drift apart.

pub(super) mod bounds;

use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_client::ErrorBody;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The error answers any endpoint may give, each with the JSON error body of design.md
/// invariant 7.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub(super) enum Errors {
    /// Malformed: not JSON, a bad path or query parameter.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No token, or one the server does not know.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token's kind or scopes do not allow this.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such thing (or not the caller's to see).
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// The method is not served on this path.
    #[response(status = 405)]
    MethodNotAllowed(ErrorBody),
    /// A state conflict or a stale lease; `error.status` names the task's status.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// A body or field over its size limit.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The body is not of the expected content type.
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody),
    /// Well-formed but invalid.
    #[response(status = 422)]
    Invalid(ErrorBody),
    /// The caller holds as many of something as it may (parked lease requests).
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// Redis or Postgres unreachable: try again.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The operations anyone may call (health, readiness, metrics, this document, a runner's
/// registration, which carries its own token in the body) say so with an empty
/// `security`; the rest name the bearer token already. And the document says where the
/// API is: on the server that serves it.
pub(super) struct OpenOperationsAndServer;

impl Modify for OpenOperationsAndServer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                operation.security.get_or_insert_with(Vec::new);
            }
        }
        openapi.servers = Some(vec![utoipa::openapi::Server::new("/")]);
    }
}

/// A task runs a `command` or a `script`: exactly one. The derived schema lists both as
/// optional; this adds the rule, so generated clients and fuzzers know it. Applied once
/// the routes have added their schemas.
pub(super) struct CommandOrScript;

impl Modify for CommandOrScript {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::{
            AllOfBuilder, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type,
        };
        let Some(schemas) = openapi.components.as_mut().map(|c| &mut c.schemas) else {
            return;
        };
        let Some(RefOr::T(submit)) = schemas.get("SubmitTask").cloned() else {
            return;
        };
        let requires = |field: &str, schema: Schema| {
            ObjectBuilder::new()
                .required(field)
                .property(field, schema)
                .build()
        };
        let argv = ArrayBuilder::new()
            .items(ObjectBuilder::new().schema_type(Type::String))
            .build();
        let script = ObjectBuilder::new().schema_type(Type::String).build();
        let one_of = OneOfBuilder::new()
            .item(requires("command", Schema::Array(argv)))
            .item(requires("script", Schema::Object(script)))
            .build();
        let combined = AllOfBuilder::new()
            .item(submit)
            .item(Schema::OneOf(one_of))
            .build();
        schemas.insert("SubmitTask".to_string(), RefOr::T(Schema::AllOf(combined)));
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Baton",
        description = "High-availability task scheduler: the user, runner and operations API (design.md §6)."
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "tasks", description = "Submit, read, follow, cancel and re-run tasks, one or many"),
        (name = "events", description = "What happens in the cluster, as it happens: Server-Sent Events, resumable on any node"),
        (name = "pipelines", description = "Graphs of jobs, each released exactly once when what it needs has ended"),
        (name = "schedules", description = "Cron schedules that make tasks, each tick exactly once"),
        (name = "runner", description = "The runner protocol: register, lease, start, logs, complete"),
        (name = "admin", description = "Runners, queues and tokens"),
        (name = "operations", description = "Health, readiness, nodes"),
    )
)]
pub(super) struct ApiDoc;

/// This API document, as this node serves it.
#[utoipa::path(
    operation_id = "get_openapi_document",
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "This document", content_type = "application/json", body = Object))
)]
pub(super) async fn openapi_json(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(state.openapi.get().cloned().unwrap_or_default())
}
