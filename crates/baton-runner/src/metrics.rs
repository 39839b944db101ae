//! The agent's Prometheus metrics, served at `/metrics` beside `/healthz` when
//! `healthz_listen` is set (docs/metrics.md). Without it no recorder is installed and
//! recording costs nothing.

use baton_client::{ClientError, ExchangeAnswer};
use metrics::{counter, describe_counter, describe_gauge, gauge};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

/// Gauge: slots running a task now.
pub const SLOTS_BUSY: &str = "baton_runner_slots_busy";
/// Gauge: slots this agent has.
pub const SLOTS_TOTAL: &str = "baton_runner_slots_total";
/// Counter: exchanges that asked for work, by what they got back (`result`).
pub const LEASE_REQUESTS: &str = "baton_runner_lease_requests_total";
/// Counter: pauses before retrying a failed call to the server.
pub const BACKOFFS: &str = "baton_runner_backoffs_total";
/// Counter: failed calls to the server, by which call (`call`).
pub const REPORT_ERRORS: &str = "baton_runner_report_errors_total";

/// The calls whose failures `baton_runner_report_errors_total` counts.
const REPORT_CALLS: [&str; 4] = ["start", "logs", "complete", "heartbeat"];

static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's recorder, once; a second call (or one after another recorder
/// took the global slot) does not panic. The agent has no histograms, so there is no
/// upkeep to run between scrapes.
pub fn install() -> &'static PrometheusHandle {
    RECORDER.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("a metrics recorder was already installed: /metrics will be empty");
        }
        describe_gauge!(SLOTS_BUSY, "Tasks running now");
        describe_gauge!(SLOTS_TOTAL, "Tasks the agent runs at once (its capacity)");
        describe_counter!(
            LEASE_REQUESTS,
            "Lease requests, by result: tasks, empty, error"
        );
        describe_counter!(BACKOFFS, "Pauses before retrying a failed call");
        describe_counter!(REPORT_ERRORS, "Failed calls to the server, by call");
        for result in ["tasks", "empty", "error"] {
            counter!(LEASE_REQUESTS, "result" => result).increment(0);
        }
        for call in REPORT_CALLS {
            counter!(REPORT_ERRORS, "call" => call).increment(0);
        }
        counter!(BACKOFFS).increment(0);
        gauge!(SLOTS_BUSY).set(0.0);
        handle
    })
}

/// Records how many slots this agent has.
pub fn slots_total(capacity: usize) {
    gauge!(SLOTS_TOTAL).set(capacity as f64);
}

/// One busy slot while it lives: dropped with the task, however the task ends.
pub struct BusySlot(());

impl BusySlot {
    /// Counts one more slot busy, until the returned guard is dropped.
    pub fn take() -> BusySlot {
        gauge!(SLOTS_BUSY).increment(1.0);
        BusySlot(())
    }
}

impl Drop for BusySlot {
    fn drop(&mut self) {
        gauge!(SLOTS_BUSY).decrement(1.0);
    }
}

/// An exchange came back; one that asked for work counts as a lease request.
pub fn exchange_answered(answer: &Result<ExchangeAnswer, ClientError>) {
    let result = match answer {
        Ok(answer) if !answer.tasks.is_empty() => "tasks",
        Ok(_) => "empty",
        Err(_) => "error",
    };
    counter!(LEASE_REQUESTS, "result" => result).increment(1);
}

/// Counts one pause before a retry.
pub fn backoff() {
    counter!(BACKOFFS).increment(1);
}

/// A call to the server failed (`call`: one of `start`, `logs`, `complete`,
/// `heartbeat`).
pub fn report_error(call: &'static str) {
    counter!(REPORT_ERRORS, "call" => call).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_slot_is_freed_when_dropped_and_a_second_install_is_harmless() {
        let handle = install();
        slots_total(3);
        let busy = BusySlot::take();
        assert!(handle.render().contains("baton_runner_slots_busy 1"));
        drop(busy);
        let text = install().render();
        assert!(text.contains("baton_runner_slots_busy 0"), "{text}");
        assert!(text.contains("baton_runner_slots_total 3"), "{text}");
        assert!(text.contains("baton_runner_report_errors_total{call=\"heartbeat\"} 0"));
    }
}
