//! The runner protocol as tests speak it: clients with the tests' tokens, a runner
//! registered over HTTP, lease requests.

use super::{API_TOKEN, REGISTRATION_TOKEN};
use baton_client::{Client, Exchange, Heartbeat, LeaseRequest, RegisterRunner, RunningLease};
use baton_core::LeaseId;
use baton_core::RunnerId;
use uuid::Uuid;

/// A client with the tests' admin token.
pub fn user_client(base: &str) -> Client {
    Client::new(base, Some(API_TOKEN.into())).unwrap()
}

/// Registers a runner over HTTP and returns its id and a client holding its token, for
/// tests that speak the runner protocol themselves.
pub async fn register_runner(base: &str, labels: &[&str], capacity: i32) -> (RunnerId, Client) {
    let (id, token) = register_runner_token(base, labels, capacity).await;
    (id, Client::new(base, Some(token)).unwrap())
}

/// A lease of up to `max` tasks that does not wait, as agent `boot_id`.
pub fn lease_now(boot_id: Uuid, max: u32) -> LeaseRequest {
    lease_waiting(boot_id, max, 0)
}

/// A lease of up to `max` tasks, as agent `boot_id`, that parks up to `wait_s` seconds
/// for work when none is queued; a fresh request id, and nothing running.
pub fn lease_waiting(boot_id: Uuid, max: u32, wait_s: u32) -> LeaseRequest {
    LeaseRequest {
        request_id: Uuid::new_v4(),
        max,
        wait_s,
        boot_id,
        running: vec![],
        secrets_at_start: false,
    }
}

/// An exchange that reports nothing and leases up to `max` tasks started at once, as
/// agent `boot_id`, parking up to `wait_s` seconds for work; a fresh request id.
pub fn exchange_starting(boot_id: Uuid, max: u32, wait_s: u32) -> Exchange {
    Exchange {
        request_id: Uuid::new_v4(),
        boot_id,
        max,
        wait_s,
        start_leased: true,
        ..Exchange::default()
    }
}

/// A heartbeat of agent `boot_id` listing the one run `task_id` under `lease_id`.
pub fn heartbeat_of(boot_id: Uuid, task_id: Uuid, lease_id: LeaseId) -> Heartbeat {
    Heartbeat {
        boot_id,
        running: vec![RunningLease {
            task_id,
            lease_id,
            reporting: false,
        }],
    }
}

/// Registers a runner and returns its id and token.
pub async fn register_runner_token(
    base: &str,
    labels: &[&str],
    capacity: i32,
) -> (RunnerId, String) {
    let anon = Client::new(base, None).unwrap();
    let reg = anon
        .register(&RegisterRunner {
            registration_token: REGISTRATION_TOKEN.into(),
            name: format!("test-runner-{}", &Uuid::new_v4().simple().to_string()[..6]),
            labels: labels.iter().map(|s| s.to_string()).collect(),
            queues: vec![],
            capacity,
            version: "test".into(),
        })
        .await
        .expect("register runner");
    (reg.runner_id, reg.token)
}

/// The value of `series` (a metric's name with its labels, as `/metrics` prints it) on
/// the node at `base`; 0 when it is not there.
pub async fn scraped(base: &str, series: &str) -> f64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .expect("scrape /metrics")
        .text()
        .await
        .expect("read /metrics");
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}
