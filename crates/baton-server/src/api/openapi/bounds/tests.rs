use super::*;
use baton_core::after_run::TASK_RETRY;
use baton_core::retry_policy::RetryPolicy;

/// The document as the wire types declare it, before the node writes its bounds.
fn declared() -> Value {
    crate::api::routes(&Limits::default()).1
}

/// Keywords that state a limit. A lower bound of 0 or 1 says "not negative" or "not
/// empty", not a limit, and is left out.
const BOUND_KEYWORDS: [&str; 7] = [
    "maximum",
    "exclusiveMaximum",
    "maxLength",
    "maxItems",
    "minimum",
    "exclusiveMinimum",
    "minLength",
];

/// Bounds the wire types declare for a check baton-core keeps to itself; each is
/// compared with that check below (`core_checks_agree_with_the_document`).
const DECLARED_ONLY: [(At, &str); 6] = [
    (At::Property("SubmitTask", "idempotency_key"), "maxLength"),
    (
        At::Property("SubmitPipeline", "idempotency_key"),
        "maxLength",
    ),
    (At::Property("RetryPolicy", "backoff_base_s"), "maximum"),
    (At::Property("RetryPolicy", "backoff_factor"), "maximum"),
    (At::Property("RetryPolicy", "backoff_cap_s"), "maximum"),
    (At::Property("RetryPolicy", "jitter"), "maximum"),
];

/// Every (place, keyword, value) of a limit the document states, read from it: the
/// properties of each component schema and the parameters of each operation.
fn stated(document: &Value) -> Vec<(At, &'static str, Value)> {
    let mut found = Vec::new();
    let mut note = |at: At, schema: &Value| {
        let branches = ["oneOf", "anyOf"]
            .into_iter()
            .filter_map(|k| schema.get(k)?.as_array())
            .flatten();
        for part in std::iter::once(schema).chain(branches) {
            for keyword in BOUND_KEYWORDS {
                if let Some(value) = part.get(keyword) {
                    let lower = keyword.starts_with("min") || keyword == "exclusiveMinimum";
                    let trivial = lower && (*value == 0 || *value == 1);
                    if !trivial {
                        found.push((at, keyword, value.clone()));
                    }
                }
            }
        }
    };
    let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    for (name, schema) in document["components"]["schemas"].as_object().unwrap() {
        let parts: Vec<&Value> = match schema.get("allOf") {
            Some(all) => all.as_array().unwrap().iter().collect(),
            None => vec![schema],
        };
        for part in parts {
            for (property, s) in part["properties"].as_object().into_iter().flatten() {
                note(At::Property(leak(name), leak(property)), s);
            }
        }
    }
    for (path, methods) in document["paths"].as_object().unwrap() {
        for (method, operation) in methods.as_object().unwrap() {
            for p in operation["parameters"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap();
                note(
                    At::Parameter(leak(path), leak(method), leak(name)),
                    &p["schema"],
                );
            }
        }
    }
    found
}

#[test]
fn every_limit_the_document_states_is_written_from_the_check_it_describes() {
    let document = declared();
    let table = bounds(&Limits::default());
    let unnamed: Vec<String> = stated(&document)
        .into_iter()
        .filter(|(at, keyword, _)| !DECLARED_ONLY.contains(&(*at, *keyword)))
        .filter(|(at, keyword, _)| !table.iter().any(|b| b.at == *at && b.keyword == *keyword))
        .map(|(at, keyword, value)| format!("{at:?} {keyword} = {value}"))
        .collect();
    assert!(
        unnamed.is_empty(),
        "bounds the document states but `bounds()` does not write (name their limits): {unnamed:#?}"
    );
    for (at, keyword, value) in stated(&document) {
        let Some(bound) = table.iter().find(|b| b.at == at && b.keyword == keyword) else {
            continue;
        };
        // A client generated from the wire types alone is told the default node's
        // limits.
        assert_eq!(
            bound.value, value,
            "{at:?} {keyword}: the wire type declares {value}, the default limit is {}",
            bound.value
        );
    }
}

#[test]
fn every_bound_names_a_place_the_document_has() {
    let mut document = declared();
    for bound in bounds(&Limits::default()) {
        assert!(
            holder(&mut document, bound.at, bound.keyword).is_some(),
            "{:?} {} is not in the document",
            bound.at,
            bound.keyword
        );
    }
}

#[test]
fn a_node_with_other_limits_states_them() {
    let limits = Limits {
        max_lease: 7,
        max_wait_s: 9,
        max_labels: 5,
        max_attempts: 3,
        max_timeout_s: 60,
        max_queue_timeout_s: 120,
        max_notify_url: 300,
        ..Limits::default()
    };
    let mut document = declared();
    state(&mut document, &limits);
    let at = |schema: &str, property: &str, keyword: &str| {
        let part = match document["components"]["schemas"][schema].get("allOf") {
            Some(all) => all
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["properties"].get(property).is_some())
                .unwrap(),
            None => &document["components"]["schemas"][schema],
        };
        let schema = &part["properties"][property];
        let branch = ["oneOf", "anyOf"]
            .into_iter()
            .filter_map(|k| schema.get(k)?.as_array())
            .flatten()
            .find(|b| b.get(keyword).is_some());
        branch.unwrap_or(schema)[keyword].clone()
    };
    assert_eq!(at("LeaseRequest", "max", "maximum"), 7);
    assert_eq!(at("Exchange", "max", "maximum"), 7);
    assert_eq!(at("LeaseRequest", "wait_s", "maximum"), 9);
    assert_eq!(at("Exchange", "wait_s", "maximum"), 9);
    assert_eq!(at("SubmitTask", "labels", "maxItems"), 5);
    assert_eq!(at("SubmitTask", "max_attempts", "maximum"), 3);
    assert_eq!(at("QueueDefaults", "max_attempts", "maximum"), 3);
    assert_eq!(at("SubmitTask", "timeout_s", "maximum"), 60);
    assert_eq!(at("SubmitTask", "queue_timeout_s", "maximum"), 120);
    assert_eq!(at("SubmitTask", "notify_url", "maxLength"), 300);
}

#[test]
fn core_checks_agree_with_the_document() {
    let document = declared();
    let stated = stated(&document);
    let value = |schema: &'static str, property: &'static str, keyword: &str| {
        stated
            .iter()
            .find(|(at, k, _)| *at == At::Property(schema, property) && *k == keyword)
            .map(|(_, _, v)| v.as_f64().unwrap())
            .unwrap()
    };
    let longest = value("SubmitTask", "idempotency_key", "maxLength") as usize;
    assert!(validate::check_idempotency_key(&"k".repeat(longest)).is_ok());
    assert!(validate::check_idempotency_key(&"k".repeat(longest + 1)).is_err());

    let resolves = |policy: RetryPolicy| policy.resolved(&TASK_RETRY).is_ok();
    let cap = value("RetryPolicy", "backoff_cap_s", "maximum");
    let base = value("RetryPolicy", "backoff_base_s", "maximum");
    let factor = value("RetryPolicy", "backoff_factor", "maximum");
    let with = |base_s: f64, factor: f64, cap_s: f64| RetryPolicy {
        backoff_base_s: Some(base_s),
        backoff_factor: Some(factor),
        backoff_cap_s: Some(cap_s),
        ..RetryPolicy::default()
    };
    assert!(resolves(with(base, factor, cap)));
    assert!(!resolves(with(base + 1.0, factor, cap)));
    assert!(!resolves(with(base, factor + 1.0, cap)));
    assert!(!resolves(with(base, factor, cap + 1.0)));
    let jitter = value("RetryPolicy", "jitter", "maximum");
    let with_jitter = |jitter: f64| RetryPolicy {
        jitter: Some(jitter),
        ..RetryPolicy::default()
    };
    assert!(resolves(with_jitter(jitter)));
    assert!(!resolves(with_jitter(jitter + 0.5)));
}
