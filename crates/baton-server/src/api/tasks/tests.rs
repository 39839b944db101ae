use super::*;
use crate::config::Limits;
use crate::queue_defaults::DefaultsByQueue;
use crate::webhooks::AddressPolicy;
use axum::http::HeaderValue;
use baton_core::after_run::TASK_RETRY;
use baton_core::validate::DEFAULT_QUEUE;

#[test]
fn traceparent_is_kept_only_when_well_formed() {
    let mut headers = HeaderMap::new();
    headers.insert(
        "traceparent",
        HeaderValue::from_static("00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"),
    );
    assert_eq!(
        traceparent(&headers).as_deref(),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    headers.insert("traceparent", HeaderValue::from_static("00-xyz-01"));
    assert_eq!(traceparent(&headers), None);
}

#[test]
fn submissions_are_validated_field_by_field() {
    let limits = Limits::default();
    let ok = SubmitTask {
        command: Some(vec!["true".into()]),
        ..Default::default()
    };
    let policy = AddressPolicy::default();
    let none = DefaultsByQueue::new();
    let task = new_task(ok.clone(), &none, &limits, &policy, &TASK_RETRY, "t", None).unwrap();
    assert_eq!(task.queue, DEFAULT_QUEUE);
    assert_eq!(i64::from(task.timeout_s), limits.default_timeout_s);

    let bad = |f: fn(&mut SubmitTask)| {
        let mut t = ok.clone();
        f(&mut t);
        new_task(t, &none, &limits, &policy, &TASK_RETRY, "t", None)
            .unwrap_err()
            .status
    };
    assert_eq!(
        bad(|t| t.queue = Some("Bad Queue".into())),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        bad(|t| t.command = Some(vec![])),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        bad(|t| t.timeout_s = Some(0)),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(bad(|t| t.priority = 5000), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        bad(|t| t.payload = Some(serde_json::json!("x".repeat(300 << 10)))),
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert_eq!(
        bad(|t| t.notify_url = Some("http://169.254.169.254/latest/meta-data/".into())),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let allowing = AddressPolicy::new(&["169.254.169.254".into()]).unwrap();
    let internal = SubmitTask {
        notify_url: Some("http://169.254.169.254/hook".into()),
        ..ok.clone()
    };
    assert!(new_task(internal, &none, &limits, &allowing, &TASK_RETRY, "t", None).is_ok());
}
