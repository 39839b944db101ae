//! Bad input gets a clear 4xx JSON error and changes nothing (design.md invariant 7).

use baton_localcluster::testing as support;

use reqwest::Method;
use serde_json::{Value, json};
use support::*;

struct Case {
    name: &'static str,
    method: Method,
    path: String,
    auth: Auth,
    body: Body,
    status: u16,
    code: &'static str,
}

#[derive(Clone, Copy)]
enum Auth {
    None,
    Bogus,
    Api,
    Runner,
}

enum Body {
    Empty,
    Json(Value),
    Raw(&'static str, Vec<u8>),
}

fn case(
    name: &'static str,
    method: Method,
    path: &str,
    auth: Auth,
    body: Body,
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        name,
        method,
        path: path.to_string(),
        auth,
        body,
        status,
        code,
    }
}

fn submit(name: &'static str, body: Value, status: u16, code: &'static str) -> Case {
    case(
        name,
        Method::POST,
        "/v1/tasks",
        Auth::Api,
        Body::Json(body),
        status,
        code,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn each_bad_request_gets_its_4xx_and_writes_nothing() {
    let env = TestEnv::new("bad-input").await;
    let node = env.node().await;
    let (_, runner_token) = register_runner_token(&node.url, &[], 1).await;
    let unknown = uuid::Uuid::new_v4();
    let ok_task = || json!({"command": ["true"]});
    let many: Vec<Value> = (0..1001).map(|_| ok_task()).collect();
    // One past the node's max_exchange_items (256).
    let too_many_running: Vec<Value> = (0..257)
        .map(|_| json!({"task_id": uuid::Uuid::new_v4(), "lease_id": uuid::Uuid::new_v4()}))
        .collect();

    let cases = vec![
        case(
            "malformed JSON",
            Method::POST,
            "/v1/tasks",
            Auth::Api,
            Body::Raw("application/json", b"{\"command\": [".to_vec()),
            400,
            "malformed_json",
        ),
        submit(
            "wrong type",
            json!({"command": "echo hi"}),
            422,
            "invalid_body",
        ),
        submit(
            "wrong type of priority",
            json!({"command": ["true"], "priority": "high"}),
            422,
            "invalid_body",
        ),
        submit(
            "unknown field",
            json!({"command": ["true"], "comand": ["x"]}),
            422,
            "invalid_body",
        ),
        submit(
            "missing command",
            json!({"queue": "default"}),
            422,
            "invalid",
        ),
        submit("empty argv", json!({"command": []}), 422, "invalid"),
        // Past what execve takes: accepted, it would only fail on a runner.
        submit(
            "an argument longer than execve takes",
            json!({"command": ["echo", "x".repeat(128 * 1024)]}),
            422,
            "invalid",
        ),
        submit(
            "a script longer than execve takes",
            json!({"script": "x".repeat(128 * 1024)}),
            422,
            "invalid",
        ),
        submit(
            "arguments and environment past execve's total",
            json!({
                "command": vec!["x".repeat(100_000); 9],
                "env": {"BIG": "y".repeat(100_000), "MORE": "z".repeat(100_000)},
            }),
            422,
            "invalid",
        ),
        submit("empty program", json!({"command": [""]}), 422, "invalid"),
        submit(
            "command and script",
            json!({"command": ["true"], "script": "true"}),
            422,
            "invalid",
        ),
        submit(
            "queue with bad characters",
            json!({"command": ["true"], "queue": "Bad Queue!"}),
            422,
            "invalid",
        ),
        submit(
            "queue too long",
            json!({"command": ["true"], "queue": "q".repeat(65)}),
            422,
            "invalid",
        ),
        submit(
            "bad label",
            json!({"command": ["true"], "labels": ["has space"]}),
            422,
            "invalid",
        ),
        submit(
            "bad env name",
            json!({"command": ["true"], "env": {"1X": "y"}}),
            422,
            "invalid",
        ),
        submit(
            "zero timeout",
            json!({"command": ["true"], "timeout_s": 0}),
            422,
            "invalid",
        ),
        submit(
            "negative queue timeout",
            json!({"command": ["true"], "queue_timeout_s": -1}),
            422,
            "invalid",
        ),
        submit(
            "priority out of range",
            json!({"command": ["true"], "priority": 1_000_000}),
            422,
            "invalid",
        ),
        submit(
            "empty idempotency key",
            json!({"command": ["true"], "idempotency_key": ""}),
            422,
            "invalid",
        ),
        submit(
            "concurrency limit of 0",
            json!({"command": ["true"], "concurrency_key": "k", "concurrency_limit": 0}),
            422,
            "invalid",
        ),
        submit(
            "negative concurrency limit",
            json!({"command": ["true"], "concurrency_key": "k", "concurrency_limit": -2}),
            422,
            "invalid",
        ),
        submit(
            "concurrency limit without a key",
            json!({"command": ["true"], "concurrency_limit": 2}),
            422,
            "invalid",
        ),
        submit(
            "empty concurrency key",
            json!({"command": ["true"], "concurrency_key": ""}),
            422,
            "invalid",
        ),
        submit(
            "concurrency key too long",
            json!({"command": ["true"], "concurrency_key": "k".repeat(129)}),
            422,
            "invalid",
        ),
        case(
            "pause of a queue with an invalid name",
            Method::POST,
            "/v1/queues/Not_A_Queue/pause",
            Auth::Api,
            Body::Empty,
            422,
            "invalid",
        ),
        submit(
            "NUL inside the payload",
            json!({"command": ["true"], "payload": {"a": "x\u{0}y"}}),
            422,
            "invalid",
        ),
        submit(
            "NUL inside the webhook URL",
            json!({"command": ["true"], "notify_url": "http://example.com/\u{0}x"}),
            422,
            "invalid",
        ),
        submit(
            "webhook URL that is not http",
            json!({"command": ["true"], "notify_url": "ftp://example.com/x"}),
            422,
            "invalid",
        ),
        submit(
            "run_at out of range",
            json!({"command": ["true"], "run_at": "+200000-01-01T00:00:00Z"}),
            422,
            "invalid",
        ),
        submit(
            "zero max attempts",
            json!({"command": ["true"], "max_attempts": 0}),
            422,
            "invalid",
        ),
        submit(
            "payload over the limit",
            json!({"command": ["true"], "payload": {"blob": "x".repeat(300 << 10)}}),
            413,
            "payload_too_large",
        ),
        case(
            "a registration body over its own, smaller limit",
            Method::POST,
            "/v1/runner/register",
            Auth::None,
            Body::Raw("application/json", vec![b' '; 65 << 10]),
            413,
            "body_too_large",
        ),
        case(
            "body over the limit",
            Method::POST,
            "/v1/tasks",
            Auth::Api,
            Body::Raw("application/json", vec![b' '; 9 << 20]),
            413,
            "body_too_large",
        ),
        case(
            "not JSON",
            Method::POST,
            "/v1/tasks",
            Auth::Api,
            Body::Raw("text/plain", b"echo hi".to_vec()),
            415,
            "unsupported_media_type",
        ),
        case(
            "too many tasks in a batch",
            Method::POST,
            "/v1/tasks/batch",
            Auth::Api,
            Body::Json(json!({"tasks": many})),
            413,
            "batch_too_large",
        ),
        case(
            "empty batch",
            Method::POST,
            "/v1/tasks/batch",
            Auth::Api,
            Body::Json(json!({"tasks": []})),
            422,
            "invalid",
        ),
        case(
            "one bad task in a batch",
            Method::POST,
            "/v1/tasks/batch",
            Auth::Api,
            Body::Json(json!({"tasks": [ok_task(), {"command": []}]})),
            422,
            "invalid",
        ),
        case(
            "no token",
            Method::POST,
            "/v1/tasks",
            Auth::None,
            Body::Json(ok_task()),
            401,
            "unauthorized",
        ),
        case(
            "wrong token",
            Method::POST,
            "/v1/tasks",
            Auth::Bogus,
            Body::Json(ok_task()),
            401,
            "unauthorized",
        ),
        case(
            "runner token on the user API",
            Method::POST,
            "/v1/tasks",
            Auth::Runner,
            Body::Json(ok_task()),
            403,
            "forbidden",
        ),
        case(
            "runner token reading tasks",
            Method::GET,
            "/v1/tasks",
            Auth::Runner,
            Body::Empty,
            403,
            "forbidden",
        ),
        case(
            "API token on the runner API",
            Method::POST,
            "/v1/runner/lease",
            Auth::Api,
            Body::Json(json!({"request_id": unknown, "max": 1, "boot_id": unknown})),
            403,
            "forbidden",
        ),
        case(
            "unknown task id",
            Method::GET,
            &format!("/v1/tasks/{unknown}"),
            Auth::Api,
            Body::Empty,
            404,
            "not_found",
        ),
        case(
            "unknown task's logs",
            Method::GET,
            &format!("/v1/tasks/{unknown}/logs"),
            Auth::Api,
            Body::Empty,
            404,
            "not_found",
        ),
        case(
            "malformed task id",
            Method::GET,
            "/v1/tasks/not-a-uuid",
            Auth::Api,
            Body::Empty,
            400,
            "invalid_path",
        ),
        case(
            "unknown status filter",
            Method::GET,
            "/v1/tasks?status=done",
            Auth::Api,
            Body::Empty,
            422,
            "invalid",
        ),
        case(
            "limit out of range",
            Method::GET,
            "/v1/tasks?limit=0",
            Auth::Api,
            Body::Empty,
            422,
            "invalid",
        ),
        case(
            "malformed cursor",
            Method::GET,
            "/v1/tasks?cursor=abc",
            Auth::Api,
            Body::Empty,
            400,
            "invalid_query",
        ),
        case(
            "negative log offset",
            Method::GET,
            &format!("/v1/tasks/{unknown}/logs?offset=-1"),
            Auth::Api,
            Body::Empty,
            422,
            "invalid",
        ),
        case(
            "unknown endpoint",
            Method::GET,
            "/v1/nope",
            Auth::Api,
            Body::Empty,
            404,
            "not_found",
        ),
        case(
            "wrong method",
            Method::DELETE,
            "/v1/tasks",
            Auth::Api,
            Body::Empty,
            405,
            "method_not_allowed",
        ),
        case(
            "bad registration token",
            Method::POST,
            "/v1/runner/register",
            Auth::None,
            Body::Json(json!({"registration_token": "nope", "name": "r"})),
            401,
            "unauthorized",
        ),
        case(
            "registration with a bad label",
            Method::POST,
            "/v1/runner/register",
            Auth::None,
            Body::Json(
                json!({"registration_token": REGISTRATION_TOKEN, "name": "r", "labels": ["a,b"]}),
            ),
            422,
            "invalid",
        ),
        case(
            "registration with zero capacity",
            Method::POST,
            "/v1/runner/register",
            Auth::None,
            Body::Json(
                json!({"registration_token": REGISTRATION_TOKEN, "name": "r", "capacity": 0}),
            ),
            422,
            "invalid",
        ),
        case(
            "lease of zero tasks",
            Method::POST,
            "/v1/runner/lease",
            Auth::Runner,
            Body::Json(json!({"request_id": unknown, "max": 0, "boot_id": unknown})),
            422,
            "invalid",
        ),
        // Each running lease costs a look-up: every endpoint that takes the list bounds it.
        case(
            "lease listing too many running leases",
            Method::POST,
            "/v1/runner/lease",
            Auth::Runner,
            Body::Json(
                json!({"request_id": unknown, "max": 1, "boot_id": unknown, "running": too_many_running}),
            ),
            413,
            "exchange_too_large",
        ),
        case(
            "heartbeat listing too many running leases",
            Method::POST,
            "/v1/runner/heartbeat",
            Auth::Runner,
            Body::Json(json!({"boot_id": unknown, "running": too_many_running})),
            413,
            "exchange_too_large",
        ),
        case(
            "exchange listing too many running leases",
            Method::POST,
            "/v1/runner/exchange",
            Auth::Runner,
            Body::Json(
                json!({"request_id": unknown, "boot_id": unknown, "running": too_many_running}),
            ),
            413,
            "exchange_too_large",
        ),
        // A runner's leaving refused leaves it registered (checked below).
        case(
            "unregister listing too many running leases",
            Method::POST,
            "/v1/runner/unregister",
            Auth::Runner,
            Body::Json(json!({"boot_id": unknown, "running": too_many_running})),
            413,
            "exchange_too_large",
        ),
        case(
            "unregister with a body that is not JSON",
            Method::POST,
            "/v1/runner/unregister",
            Auth::Runner,
            Body::Raw("text/plain", b"leaving".to_vec()),
            415,
            "unsupported_media_type",
        ),
        case(
            "unregister with malformed JSON",
            Method::POST,
            "/v1/runner/unregister",
            Auth::Runner,
            Body::Raw("application/json", b"{\"boot_id\":".to_vec()),
            400,
            "malformed_json",
        ),
        case(
            "unregister without its boot",
            Method::POST,
            "/v1/runner/unregister",
            Auth::Runner,
            Body::Json(json!({"running": []})),
            422,
            "invalid_body",
        ),
        case(
            "lease parking too long",
            Method::POST,
            "/v1/runner/lease",
            Auth::Runner,
            Body::Json(json!({"request_id": unknown, "max": 1, "wait_s": 51, "boot_id": unknown})),
            422,
            "invalid",
        ),
        case(
            "start of an unknown task",
            Method::POST,
            &format!("/v1/runner/tasks/{unknown}/start"),
            Auth::Runner,
            Body::Json(json!({"lease_id": unknown})),
            404,
            "not_found",
        ),
        case(
            "log chunk without a lease",
            Method::POST,
            &format!("/v1/runner/tasks/{unknown}/logs?offset=0"),
            Auth::Runner,
            Body::Raw("application/octet-stream", b"x".to_vec()),
            400,
            "invalid_query",
        ),
        case(
            "completion with an unknown outcome",
            Method::POST,
            &format!("/v1/runner/tasks/{unknown}/complete"),
            Auth::Runner,
            Body::Json(json!({"lease_id": unknown, "outcome": "exploded"})),
            422,
            "invalid_body",
        ),
    ];

    let http = reqwest::Client::new();
    for c in &cases {
        let mut req = http.request(c.method.clone(), format!("{}{}", node.url, c.path));
        req = match c.auth {
            Auth::None => req,
            Auth::Bogus => req.bearer_auth("not-a-token"),
            Auth::Api => req.bearer_auth(API_TOKEN),
            Auth::Runner => req.bearer_auth(&runner_token),
        };
        req = match &c.body {
            Body::Empty => req,
            Body::Json(v) => req.json(v),
            Body::Raw(ct, bytes) => req.header("content-type", *ct).body(bytes.clone()),
        };
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        assert_eq!(status, c.status, "{}: got {status} {text}", c.name);
        let body: Value =
            serde_json::from_str(&text).unwrap_or_else(|_| panic!("{}: not JSON: {text}", c.name));
        assert_eq!(body["error"]["code"], c.code, "{}: {text}", c.name);
        if c.name.contains("concurrency") {
            let field = if c.name.contains("concurrency key") {
                "concurrency_key"
            } else {
                "concurrency_limit"
            };
            assert!(text.contains(field), "{}: names {field}: {text}", c.name);
        }
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{}: the error explains itself: {text}",
            c.name
        );
    }

    assert_eq!(env.count_tasks().await, 0, "no bad request wrote a task");
    let runners: i64 = sqlx::query_scalar("SELECT count(*) FROM runners")
        .fetch_one(&mut env.db().await)
        .await
        .unwrap();
    assert_eq!(runners, 1, "no bad registration wrote a runner");
    let deleted: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runners WHERE deleted_at IS NOT NULL")
            .fetch_one(&mut env.db().await)
            .await
            .unwrap();
    assert_eq!(deleted, 0, "no refused unregister deleted its runner");
}

/// A body the server refuses before reading it all (too large, or sent with no token) is
/// still answered with its JSON error: the node reads the rest away instead of closing a
/// socket with unread bytes, which would reset the connection under the client's feet.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_body_is_answered_even_while_the_client_is_still_sending_it() {
    let env = TestEnv::new("bad-input-unread").await;
    let node = env.node().await;
    let http = reqwest::Client::new();
    let over_the_limit = vec![b' '; 9 << 20];
    let unauthenticated = serde_json::to_vec(&json!({
        "command": ["true"],
        "env": {"PAD": "x".repeat(4 << 20)},
    }))
    .unwrap();
    for round in 0..12 {
        let too_large = http
            .post(format!("{}/v1/tasks", node.url))
            .bearer_auth(API_TOKEN)
            .header("content-type", "application/json")
            .body(over_the_limit.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("round {round}: the 413 was lost: {e:?}"));
        assert_eq!(too_large.status(), 413, "round {round}");
        let body: Value = too_large.json().await.unwrap();
        assert_eq!(body["error"]["code"], "body_too_large", "round {round}");

        let no_token = http
            .post(format!("{}/v1/tasks", node.url))
            .header("content-type", "application/json")
            .body(unauthenticated.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("round {round}: the 401 was lost: {e:?}"));
        assert_eq!(no_token.status(), 401, "round {round}");
        let body: Value = no_token.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unauthorized", "round {round}");
    }
    assert_eq!(env.count_tasks().await, 0, "no refused body wrote a task");
}
