//! One trace per task across processes, as Jaeger would receive it: a task submitted on
//! node A, leased and reported through node B (in the runner's batched exchanges, each
//! item with its own trace context), run by a runner agent arrives as one trace, with
//! every parent link right, from all three processes — over the three OTLP transports
//! (A: HTTP/protobuf, B: HTTP/JSON, runner: gRPC) — flushed when each process shuts
//! down.

use baton_localcluster::testing as support;

use baton_client::{StatusCode, SubmitTask};
use baton_core::TaskStatus;
use std::collections::HashMap;
use std::time::Duration;
use support::nginx::NginxProc;
use support::otlp::{OtlpSink, ReceivedSpan};
use support::*;

/// The trace id in a task's stored `traceparent`.
fn trace_of(task: &baton_client::Task) -> String {
    task.traceparent
        .as_deref()
        .and_then(|tp| tp.split('-').nth(1))
        .expect("the task keeps its submit span's trace context")
        .to_string()
}

/// The spans of one trace, once every name in `wanted` has arrived; on a timeout, what
/// did arrive, to see which process or link is missing.
async fn spans_named(sink: &OtlpSink, trace_id: &str, wanted: &[&str]) -> Vec<ReceivedSpan> {
    let of_trace = || {
        sink.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect::<Vec<_>>()
    };
    let arrived = poll_until(Duration::from_secs(20), || {
        let spans = of_trace();
        let complete = wanted.iter().all(|w| spans.iter().any(|s| s.name == *w));
        async move { complete.then_some(spans) }
    })
    .await;
    arrived.unwrap_or_else(|| {
        let all: Vec<String> = sink
            .spans()
            .iter()
            .map(|s| {
                format!(
                    "{} {} {} <- {}",
                    s.service, s.trace_id, s.name, s.parent_span_id
                )
            })
            .collect();
        panic!(
            "{wanted:?} not all in trace {trace_id}; received:\n{}",
            all.join("\n")
        )
    })
}

fn host(url: &str) -> &str {
    url.trim_start_matches("http://")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_is_one_trace_across_two_nodes_and_its_runner() {
    let env = TestEnv::new("tracing").await;
    let sink = OtlpSink::start().await;
    let mut a = env
        .node_with(&[
            "--otlp-endpoint",
            &sink.http_url,
            "--otlp-protocol",
            "http/protobuf",
            "--log-format",
            "json",
        ])
        .await;
    let mut b = env
        .node_with(&[
            "--otlp-endpoint",
            &sink.http_url,
            "--otlp-protocol",
            "http/json",
        ])
        .await;
    // The runner's requests go to B, everything else to A.
    let lb = NginxProc::start(
        &env.dir,
        &format!(
            "upstream a {{ server {}; }}\n upstream b {{ server {}; }}\n server {{\n listen {{listen}};\n \
             proxy_http_version 1.1;\n proxy_set_header Connection \"\";\n proxy_read_timeout 90s;\n \
             location /v1/runner/ {{ proxy_pass http://b; }}\n location / {{ proxy_pass http://a; }}\n }}",
            host(&a.url),
            host(&b.url)
        ),
    )
    .await;
    let mut runner = env
        .runner_with(
            &lb.url,
            &["trace"],
            1,
            &["--otlp-endpoint", &sink.grpc_url, "--otlp-protocol", "grpc"],
        )
        .await;

    let client = user_client(&a.url);
    let (task, created) = client
        .submit(&SubmitTask {
            labels: vec!["trace".into()],
            // Output while it runs is shipped as it comes; the rest goes with the report.
            script: Some("echo traced output; sleep 1; echo done".into()),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    assert!(created);
    let done = env.wait_terminal(&client, task.id).await;
    assert_eq!(done.status, TaskStatus::Succeeded);
    let trace_id = trace_of(&done);

    // Shutting down flushes each process's buffered spans.
    runner.signal("TERM");
    assert_eq!(runner.wait_exit(Duration::from_secs(30)).await, Some(0));
    assert_eq!(a.terminate(Duration::from_secs(30)).await, Some(0));
    assert_eq!(b.terminate(Duration::from_secs(30)).await, Some(0));

    let wanted = [
        "POST /v1/tasks",
        "task.lease",
        "task.run",
        "task.start",
        "task.execute",
        "runner.logs",
        "POST /v1/runner/tasks/{id}/logs",
        "runner.complete",
        "task.complete",
    ];
    let spans = spans_named(&sink, &trace_id, &wanted).await;
    let by_id: HashMap<&str, &ReceivedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let one = |name: &str| -> &ReceivedSpan {
        let found: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == name).collect();
        assert!(!found.is_empty(), "{name} in the trace");
        found[0]
    };
    let parent_of = |span: &ReceivedSpan| -> &str {
        by_id
            .get(span.parent_span_id.as_str())
            .unwrap_or_else(|| {
                panic!(
                    "{}'s parent {} is in the trace",
                    span.name, span.parent_span_id
                )
            })
            .name
            .as_str()
    };

    // Who sent what, and how.
    let submit = one("POST /v1/tasks");
    assert_eq!(submit.parent_span_id, "", "the submit is the trace's root");
    assert_eq!(submit.service, "baton-server");
    assert_eq!(submit.resource["service.instance.id"], a.node_id);
    assert_eq!(submit.transport, "http/protobuf");
    let lease = one("task.lease");
    assert_eq!(
        lease.resource["service.instance.id"], b.node_id,
        "leased through B"
    );
    assert_eq!(lease.transport, "http/json");
    assert_eq!(lease.attributes["task.id"], task.id.to_string());
    let run = one("task.run");
    assert_eq!(run.service, "baton-runner");
    assert_eq!(run.transport, "grpc");

    // The parent links: submit (A) → lease (B) → start (B) and run (runner) → each
    // report → B's span for it.
    assert_eq!(parent_of(lease), "POST /v1/tasks");
    assert_eq!(parent_of(run), "task.lease");
    // The agent asks for its tasks started: B records the start with the lease.
    assert_eq!(parent_of(one("task.start")), "task.lease");
    assert_eq!(one("task.start").resource["service.instance.id"], b.node_id);
    assert_eq!(parent_of(one("task.execute")), "task.run");
    // Output ships while the command runs, and what is left right after it ends.
    for logs in spans.iter().filter(|s| s.name == "runner.logs") {
        assert!(
            ["task.execute", "task.run"].contains(&parent_of(logs)),
            "{}",
            parent_of(logs)
        );
    }
    assert_eq!(parent_of(one("runner.complete")), "task.run");
    for (call, on_node) in [
        ("runner.logs", "POST /v1/runner/tasks/{id}/logs"),
        ("runner.complete", "task.complete"),
    ] {
        let server = one(on_node);
        assert_eq!(parent_of(server), call);
        assert_eq!(
            server.resource["service.instance.id"], b.node_id,
            "{on_node} on B"
        );
        assert_eq!(server.attributes["task.id"], task.id.to_string());
    }
    let logs = one("POST /v1/runner/tasks/{id}/logs");
    assert_eq!(logs.attributes["http.route"], "/v1/runner/tasks/{id}/logs");
    assert_eq!(logs.attributes["http.response.status_code"], "200");
    // No span of the trace hangs from a parent that never arrived.
    for span in &spans {
        if !span.parent_span_id.is_empty() {
            parent_of(span);
        }
    }
    // A's JSON log lines lead to the trace: the submit's line carries its ids.
    let log = std::fs::read_to_string(&a.log).unwrap();
    let submitted = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "task submitted" && l["fields"]["task.id"] == task.id.to_string())
        .expect("a JSON log line for the submit");
    assert_eq!(submitted["trace_id"], trace_id);
    assert_eq!(submitted["span_id"], submit.span_id);
    drop(lb);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_nothing_is_exported_and_the_task_keeps_the_callers_context() {
    let env = TestEnv::new("tracing-off").await;
    let node = env.node().await;
    let caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/tasks", node.url))
        .bearer_auth(API_TOKEN)
        .header("traceparent", caller)
        .json(&serde_json::json!({ "command": ["true"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let task: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(task["traceparent"], caller, "passed through untouched");
    let log = std::fs::read_to_string(&node.log).unwrap();
    assert!(
        !log.contains("exporting traces"),
        "no exporter without an endpoint"
    );
}

/// The story of a task whose node died: the adopting node's hand-over and its
/// reconciler's requeue join the task's trace, under the stored submit context.
#[tokio::test(flavor = "multi_thread")]
async fn an_adoption_and_the_reconcile_after_it_join_the_tasks_trace() {
    let env = TestEnv::new("tracing-adopt").await;
    let sink = OtlpSink::start().await;
    let traced: Vec<&str> = FAST_HA
        .iter()
        .copied()
        .chain(["--otlp-endpoint", &sink.http_url])
        .collect();
    let mut a = env.node_with(&FAST_HA).await;
    let mut b = env.node_with(&traced).await;
    let client = user_client(&b.url);
    let (task, _) = client
        .submit(&SubmitTask {
            labels: vec!["adopt".into()],
            command: Some(vec!["true".into()]),
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    // Leased through A by a runner that never starts it; then A dies holding the claim.
    let (_, runner) = register_runner(&a.url, &["adopt"], 1).await;
    let leased = runner
        .lease(&lease_waiting(uuid::Uuid::new_v4(), 1, 5))
        .await
        .unwrap();
    assert_eq!(leased.tasks.len(), 1);
    a.kill();
    // B adopts the claim and, the lease never acknowledged, puts the task back.
    wait_for(
        "the task back in its queue",
        Duration::from_secs(30),
        || {
            let client = &client;
            async move {
                let t = client.task_get(task.id).await.ok()?;
                (t.status == TaskStatus::Queued).then_some(())
            }
        },
    )
    .await;
    assert_eq!(b.terminate(Duration::from_secs(30)).await, Some(0));

    let spans = spans_named(
        &sink,
        &trace_of(&task),
        &["POST /v1/tasks", "task.adopt", "task.reconcile"],
    )
    .await;
    let submit = spans.iter().find(|s| s.name == "POST /v1/tasks").unwrap();
    for name in ["task.adopt", "task.reconcile"] {
        let span = spans.iter().find(|s| s.name == name).unwrap();
        assert_eq!(
            span.parent_span_id, submit.span_id,
            "{name} hangs under the submit"
        );
        assert_eq!(
            span.resource["service.instance.id"], b.node_id,
            "{name} on B"
        );
        assert_eq!(span.attributes["task.id"], task.id.to_string());
    }
}

/// A runner that exports no traces still ties its reports to the task's trace: they
/// carry the lease's context, so the node's spans for them hang under `task.lease`.
#[tokio::test(flavor = "multi_thread")]
async fn an_untraced_runner_s_reports_still_join_the_tasks_trace() {
    let env = TestEnv::new("tracing-untraced-runner").await;
    let sink = OtlpSink::start().await;
    let mut node = env.node_with(&["--otlp-endpoint", &sink.http_url]).await;
    let mut runner = env.runner(&node.url, &["plain"], 1).await;
    let client = user_client(&node.url);
    let task = run_true(&env, &client, "plain").await;
    runner.signal("TERM");
    assert_eq!(runner.wait_exit(Duration::from_secs(30)).await, Some(0));
    assert_eq!(node.terminate(Duration::from_secs(30)).await, Some(0));

    let spans = spans_named(
        &sink,
        &trace_of(&task),
        &["task.lease", "task.start", "task.complete"],
    )
    .await;
    let lease = spans.iter().find(|s| s.name == "task.lease").unwrap();
    for report in ["task.start", "task.complete"] {
        let span = spans.iter().find(|s| s.name == report).unwrap();
        assert_eq!(
            span.parent_span_id, lease.span_id,
            "{report} hangs under the lease"
        );
    }
    assert!(
        spans.iter().all(|s| s.service == "baton-server"),
        "the runner exported nothing"
    );
}
