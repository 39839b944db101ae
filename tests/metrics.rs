//! `/metrics` of a node and of a runner agent, read by Prometheus's own text parser
//! (PyPI `prometheus-client`, through tests/metrics/parse.py): every family of
//! docs/metrics.md is there with its type, and the counters and histograms move with
//! the work — a few tasks through a real node and a real runner process — and every
//! metric the Grafana dashboard reads is one of theirs.

use baton_localcluster::testing as support;

use baton_client::SubmitTask;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

const PARSER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/metrics/parse.py");
const TASKS: f64 = 3.0;

const NODE_FAMILIES: &[(&str, &str)] = &[
    ("baton_queue_depth", "gauge"),
    ("baton_tasks", "gauge"),
    ("baton_live_nodes", "gauge"),
    ("baton_parked_leases", "gauge"),
    ("baton_event_catch_ups", "gauge"),
    ("baton_tasks_submitted_total", "counter"),
    ("baton_tasks_leased_total", "counter"),
    ("baton_tasks_completed_total", "counter"),
    ("baton_pickup_latency_seconds", "histogram"),
    ("baton_lease_wait_seconds", "histogram"),
    ("baton_reconciler_actions_total", "counter"),
    ("baton_orphan_adoptions_total", "counter"),
    ("baton_redis_rebuilds_total", "counter"),
    ("baton_redis_errors_total", "counter"),
    ("baton_redis_command_duration_seconds", "histogram"),
    ("baton_postgres_errors_total", "counter"),
    ("baton_postgres_query_duration_seconds", "histogram"),
    ("baton_http_requests_total", "counter"),
    ("baton_http_request_duration_seconds", "histogram"),
    ("baton_schedule_fire_lag_seconds", "histogram"),
    ("baton_schedule_ticks_skipped_total", "counter"),
    ("baton_task_run_seconds", "histogram"),
    ("baton_build_info", "gauge"),
    ("process_cpu_seconds_total", "counter"),
    ("process_resident_memory_bytes", "gauge"),
    ("process_open_fds", "gauge"),
];

const RUNNER_FAMILIES: &[(&str, &str)] = &[
    ("baton_runner_slots_busy", "gauge"),
    ("baton_runner_slots_total", "gauge"),
    ("baton_runner_lease_requests_total", "counter"),
    ("baton_runner_backoffs_total", "counter"),
    ("baton_runner_report_errors_total", "counter"),
];

#[tokio::test(flavor = "multi_thread")]
async fn node_and_runner_metrics_parse_and_move_with_the_work() {
    let env = TestEnv::new("metrics").await;
    let node = env.node().await;
    let health = format!("127.0.0.1:{}", support::services::free_port());
    let _runner = env
        .runner_with(&node.url, &[], 2, &["--healthz-listen", &health])
        .await;
    let (node_metrics, runner_metrics) = (
        format!("{}/metrics", node.url),
        format!("http://{health}/metrics"),
    );
    let runner_before = wait_for("the runner's /metrics", Duration::from_secs(30), || {
        Scrape::try_of(&runner_metrics)
    })
    .await;
    let before = Scrape::of(&node_metrics).await;

    let client = user_client(&node.url);
    let mut ids = Vec::new();
    for i in 0..TASKS as usize {
        let task = SubmitTask {
            script: Some(format!("echo task {i}")),
            ..Default::default()
        };
        ids.push(client.submit(&task).await.unwrap().0.id);
    }
    for id in ids {
        let done = env.wait_terminal(&client, id).await;
        assert_eq!(done.status.as_str(), "succeeded");
    }

    // The terminal write is counted just after its commit, and the cluster-wide gauges
    // are refreshed every few seconds: wait for both.
    let after = wait_for(
        "the node's metrics to catch up",
        Duration::from_secs(20),
        || async {
            let now = Scrape::of(&node_metrics).await;
            let done = now.value("baton_tasks_completed_total", &[("outcome", "succeeded")])
                - before.value("baton_tasks_completed_total", &[("outcome", "succeeded")]);
            // Nothing left in flight, and the finished ones are not counted by the gauge.
            let in_flight = ["queued", "leased", "running"]
                .iter()
                .map(|s| now.value("baton_tasks", &[("status", s)]))
                .sum::<f64>();
            let finished = now.value("baton_tasks", &[("status", "succeeded")]);
            (done == TASKS && in_flight == 0.0 && finished == 0.0).then_some(now)
        },
    )
    .await;
    for (family, kind) in NODE_FAMILIES {
        assert_eq!(after.kind(family), Some(*kind), "node family {family}");
    }
    let moved = |sample: &str, labels: &[(&str, &str)]| {
        after.value(sample, labels) - before.value(sample, labels)
    };
    assert_eq!(moved("baton_tasks_submitted_total", &[]), TASKS);
    // Completions and run times per queue: the tasks went to `default`.
    let succeeded_in_default = [("outcome", "succeeded"), ("queue", "default")];
    assert_eq!(
        moved("baton_tasks_completed_total", &succeeded_in_default),
        TASKS
    );
    assert_eq!(
        moved("baton_task_run_seconds_count", &succeeded_in_default),
        TASKS
    );
    assert!(moved("baton_task_run_seconds_sum", &succeeded_in_default) > 0.0);
    assert_eq!(
        after.value(
            "baton_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert!(after.value("process_open_fds", &[]) > 0.0);
    // CPU time to the kernel's tick, as /proc says it, not cut to whole seconds (which
    // reads up to a second short, and 0 for a node's first second of work).
    let scraped = Scrape::of(&node_metrics)
        .await
        .value("process_cpu_seconds_total", &[]);
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", node.pid())).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let from_proc = ticks
        / nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .unwrap()
            .unwrap() as f64;
    assert!(
        scraped > 0.0 && (from_proc - scraped).abs() < 0.3,
        "the node's CPU seconds as /proc has them ({from_proc}): {scraped}"
    );
    assert!(after.value("process_resident_memory_bytes", &[]) > 0.0);
    assert_eq!(moved("baton_tasks_leased_total", &[]), TASKS);
    assert_eq!(moved("baton_pickup_latency_seconds_count", &[]), TASKS);
    assert_eq!(
        moved("baton_pickup_latency_seconds_bucket", &[("le", "+Inf")]),
        TASKS
    );
    assert!(moved("baton_pickup_latency_seconds_sum", &[]) > 0.0);
    assert!(moved("baton_lease_wait_seconds_count", &[("result", "tasks")]) >= 1.0);
    assert_eq!(
        moved(
            "baton_http_requests_total",
            &[
                ("method", "POST"),
                ("route", "/v1/tasks"),
                ("status", "201")
            ]
        ),
        TASKS
    );
    assert!(moved("baton_redis_command_duration_seconds_count", &[]) > 0.0);
    assert!(
        moved(
            "baton_postgres_query_duration_seconds_count",
            &[("op", "transaction")]
        ) > 0.0
    );
    assert_eq!(after.value("baton_live_nodes", &[]), 1.0);
    assert_eq!(after.value("baton_tasks", &[("status", "queued")]), 0.0);
    assert_eq!(
        after.value("baton_queue_depth", &[("queue", "default")]),
        0.0
    );

    // Routes are the matched templates, never raw paths with ids in them.
    let routes = after.label_values("baton_http_requests_total", "route");
    assert!(routes.contains("/v1/tasks/{id}"), "{routes:?}");
    assert!(
        routes.iter().all(|r| r == "unmatched" || !r.contains('-')),
        "no task id in a route label: {routes:?}"
    );

    let runner_after = wait_for(
        "the runner's slots to free",
        Duration::from_secs(10),
        || async {
            let now = Scrape::try_of(&runner_metrics).await?;
            (now.value("baton_runner_slots_busy", &[]) == 0.0).then_some(now)
        },
    )
    .await;
    for (family, kind) in RUNNER_FAMILIES {
        assert_eq!(
            runner_after.kind(family),
            Some(*kind),
            "runner family {family}"
        );
    }
    assert_eq!(runner_after.value("baton_runner_slots_total", &[]), 2.0);
    let leases = |s: &Scrape| s.value("baton_runner_lease_requests_total", &[("result", "tasks")]);
    assert!(leases(&runner_after) - leases(&runner_before) >= 1.0);

    // Every metric the Grafana dashboard reads (its panels and its variables) is one this
    // node or this runner exposes: a renamed or dropped metric leaves no panel empty.
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana/baton-dashboard.json"
    ))
    .unwrap();
    let names = regex::Regex::new(r"\b(?:baton|process)_[a-z0-9_]+").unwrap();
    let series = regex::Regex::new(r"_(?:bucket|sum|count)$").unwrap();
    let read: std::collections::BTreeSet<&str> =
        names.find_iter(&dashboard).map(|m| m.as_str()).collect();
    assert!(read.len() >= 20, "the dashboard reads {read:?}");
    for name in read {
        let family = series.replace(name, "");
        assert!(
            after.kind(&family).is_some() || runner_after.kind(&family).is_some(),
            "the dashboard reads {name}, which neither the node nor the runner exposes"
        );
    }
}

#[derive(Debug, Deserialize)]
struct Family {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    samples: Vec<Sample>,
}

#[derive(Debug, Deserialize)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: serde_json::Value,
}

/// One scrape, as the reference parser read it.
struct Scrape(Vec<Family>);

impl Scrape {
    async fn of(url: &str) -> Scrape {
        Self::try_of(url)
            .await
            .unwrap_or_else(|| panic!("no answer from {url}"))
    }

    async fn try_of(url: &str) -> Option<Scrape> {
        let response = reqwest::get(url).await.ok()?;
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(content_type, "text/plain; version=0.0.4");
        let text = response.text().await.ok()?;
        Some(
            tokio::task::spawn_blocking(move || parse(&text))
                .await
                .unwrap(),
        )
    }

    /// The type of a family, by the name its samples carry (the parser drops a
    /// counter's `_total` from the family name).
    fn kind(&self, family: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|f| f.name == family || format!("{}_total", f.name) == family)
            .map(|f| f.kind.as_str())
    }

    fn samples(&self) -> impl Iterator<Item = &Sample> {
        self.0.iter().flat_map(|f| &f.samples)
    }

    /// The sum of the samples of that name carrying these labels (0 when there is none).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| match &s.value {
                serde_json::Value::Number(n) => n.as_f64().unwrap(),
                other => panic!("{name}: not a finite number: {other}"),
            })
            .sum()
    }

    fn label_values(&self, name: &str, label: &str) -> std::collections::BTreeSet<String> {
        self.samples()
            .filter(|s| s.name == name)
            .filter_map(|s| s.labels.get(label).cloned())
            .collect()
    }
}

fn parse(text: &str) -> Scrape {
    let mut child = Command::new("python3")
        .arg(PARSER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused the text (pip install prometheus-client?):\n{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    Scrape(serde_json::from_slice(&out.stdout).expect("the parser prints JSON"))
}

/// A queue that drained reads 0, not "no data": a graph falls to the floor and an alert
/// on it resolves. (Queue names are the submitters' to choose, so the drained ones kept
/// are bounded by the node's `max_queues`: `metrics::with_drained_at_zero`'s unit test.)
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_that_drained_reads_zero() {
    let env = TestEnv::new("metrics-gone-queue").await;
    let node = env.node().await;
    let user = user_client(&node.url);
    let queue = format!(
        "fleeting-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let series = format!("baton_queue_depth{{queue=\"{queue}\"}}");
    let (task, _) = user
        .submit(&SubmitTask {
            queue: Some(queue.clone()),
            command: Some(vec!["true".into()]),
            labels: vec!["nobody-has-this".into()],
            ..SubmitTask::default()
        })
        .await
        .unwrap();
    let text = || async {
        reqwest::get(format!("{}/metrics", node.url))
            .await
            .ok()?
            .text()
            .await
            .ok()
    };
    wait_for("the queue's depth", Duration::from_secs(30), || async {
        text().await?.contains(&format!("{series} 1")).then_some(())
    })
    .await;
    user.task_cancel(task.id).await.unwrap();
    wait_for(
        "the queue's depth to read 0",
        Duration::from_secs(30),
        || async {
            let text = text().await?;
            (text.contains(&format!("{series} 0\n"))
                && text.contains("baton_queue_depth{queue=\"default\"}"))
            .then_some(())
        },
    )
    .await;
}
