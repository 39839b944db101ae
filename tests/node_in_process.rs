//! A node run inside the test's own process (`baton_server::start_on`), on a listener the
//! test bound, beside the real Redis and Postgres: it serves a task's whole way — submit,
//! an exchange that leases and starts it, the completion — and stops on the test's
//! signal, draining, with its port closed after. Its background services are reachable
//! from the test too, and each runs a pass against the live stores as that node.

use baton_localcluster::testing as support;

use baton_client::{CompletionItem, Exchange, ItemResult, SubmitTask};
use baton_core::TaskStatus;
use baton_server::ServeConfig;
use baton_server::services::Service;
use std::time::Duration;
use support::*;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread")]
async fn a_node_runs_in_the_tests_process_on_a_listener_it_is_given_and_stops_on_its_signal() {
    let env = TestEnv::new("node-in-process").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bound = listener.local_addr().unwrap();
    let config = ServeConfig {
        database_url: env.database_url.clone(),
        redis_url: env.redis_url.clone(),
        redis_prefix: env.redis_prefix.clone(),
        api_token: Some(API_TOKEN.into()),
        registration_token: Some(REGISTRATION_TOKEN.into()),
        drain_grace_s: 10,
        drain_notice_ms: 100,
        ..ServeConfig::default()
    };
    let node = baton_server::start_on(config, listener).await.unwrap();
    assert_eq!(node.addr, bound, "the node serves where the test bound");
    let url = format!("http://{bound}");
    let node_services = node.services();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(node.run_until(async {
        let _ = stopped.await;
    }));

    let user = user_client(&url);
    let (task, _) = user
        .submit(&SubmitTask {
            command: Some(vec!["true".into()]),
            ..Default::default()
        })
        .await
        .unwrap();
    let (_, runner) = register_runner(&url, &[], 1).await;
    let boot = Uuid::now_v7();
    let got = runner
        .exchange(&exchange_starting(boot, 1, 0))
        .await
        .unwrap();
    assert_eq!(
        got.tasks
            .iter()
            .map(|t| (t.id, t.started))
            .collect::<Vec<_>>(),
        vec![(task.id, true)],
        "the exchange leases the task and starts it"
    );
    let done = runner
        .exchange(&Exchange {
            completions: vec![CompletionItem::succeeded(task.id, got.tasks[0].lease_id)],
            ..exchange_starting(boot, 0, 0)
        })
        .await
        .unwrap();
    assert_eq!(done.completions[0].result, ItemResult::Done);
    assert_eq!(
        user.task_get(task.id).await.unwrap().status,
        TaskStatus::Succeeded
    );

    // Every service of the node, driven one pass at a time from here, as this node.
    let services = node_services;
    let now = chrono::Utc::now();
    assert_eq!(
        services.revocations.run_once().await.unwrap(),
        1,
        "the runner's token is the one the node has cached, and it is read again"
    );
    let fired = services.scheduler.run_once().await.unwrap();
    assert_eq!(fired.fired, 0, "no schedule: nothing fired");
    assert_eq!(services.outbox.run_once(now).await.unwrap().started, 0);
    passes(services.rebuilder, now).await;
    passes(services.reconciler, now).await;
    passes(services.orphan_cleaner, now).await;
    passes(services.promoter, now).await;
    passes(services.repairer, now).await;
    passes(services.janitor, now).await;
    passes(services.presence_flusher, now).await;
    passes(services.trends, now).await;

    stop.send(()).unwrap();
    let drained = tokio::time::timeout(Duration::from_secs(30), serving)
        .await
        .expect("the node stops within its drain grace")
        .unwrap();
    assert!(drained.is_ok(), "a clean drain: {drained:?}");
    assert!(
        tokio::net::TcpStream::connect(bound).await.is_err(),
        "nothing listens on the node's port once it stopped"
    );
}

/// A pass of `service` as of `now` succeeds against the live stores.
async fn passes(service: impl Service, now: chrono::DateTime<chrono::Utc>) {
    let name = std::any::type_name_of_val(&service);
    if let Err(e) = service.pass(now).await {
        panic!("a pass of {name} failed: {e}");
    }
}
