//! JSON shapes of the v1 API (design.md §6), one module per idea, all re-exported here.

pub use baton_core::retry_policy::RetryPolicy;

mod errors;
mod history;
mod nodes;
mod pipelines;
mod provisioning;
mod queues;
mod runners;
mod schemas;
mod tasks;
mod tokens;
mod trends;

pub use errors::*;
pub use history::*;
pub use nodes::*;
pub use pipelines::*;
pub use provisioning::*;
pub use queues::*;
pub use runners::*;
pub use schemas::*;
pub use tasks::*;
pub use tokens::*;
pub use trends::*;

/// Headers on `GET /v1/tasks/{id}/logs` answers.
pub mod log_headers {
    /// Offset of the first byte after this answer: the `offset` to ask for next.
    pub const NEXT_OFFSET: &str = "x-baton-next-offset";
    /// The task's status when the bytes were read; once terminal, no more bytes come.
    pub const TASK_STATUS: &str = "x-baton-task-status";
    /// The attempt whose output this is (each attempt has its own log).
    pub const ATTEMPT: &str = "x-baton-attempt";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_policy_is_an_object_never_an_array_of_its_fields() {
        let task = |retry: Value| {
            serde_json::from_value::<SubmitTask>(serde_json::json!({ "retry": retry }))
        };
        assert!(task(serde_json::json!([null, null])).is_err());
        assert!(task(serde_json::json!([5.0, 2.0])).is_err());
        assert!(task(serde_json::json!("x")).is_err());
        assert!(
            task(serde_json::json!({"bogus": 1})).is_err(),
            "unknown fields still refused"
        );
        let given = task(serde_json::json!({"backoff_base_s": 5.0})).unwrap();
        assert_eq!(given.retry.unwrap().backoff_base_s, Some(5.0));
        assert_eq!(task(Value::Null).unwrap().retry, None);
        let defaults = serde_json::json!({ "retry": [null] });
        assert!(serde_json::from_value::<QueueDefaults>(defaults).is_err());
    }
}
