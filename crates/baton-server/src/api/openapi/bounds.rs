//! The bounds the served document states for fields the node checks against a limit:
//! written from the very limits and constants the checks use, over what the wire types
//! declare, so a node run with other `[limits]` describes what it enforces.

use crate::api::{admin, bulk, pipelines, runner, task_list, trends};
use crate::config::Limits;
use baton_core::{cron, flow, labels, retry_policy, validate};
use serde_json::{Map, Value};

/// Where a bound sits in the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    /// A property of a component schema (of its `allOf` part, for one combined later).
    Property(&'static str, &'static str),
    /// A parameter of an operation: path, method, parameter name.
    Parameter(&'static str, &'static str, &'static str),
}

/// One bound: where, its JSON Schema keyword, and the value the node's check enforces.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bound {
    pub(crate) at: At,
    pub(crate) keyword: &'static str,
    pub(crate) value: Value,
}

/// Every bound the node writes, from `limits` and the checks' constants.
pub(crate) fn bounds(limits: &Limits) -> Vec<Bound> {
    use At::{Parameter, Property};
    let bound = |at, keyword, value: Value| Bound { at, keyword, value };
    let mut all = Vec::new();
    for schema in ["SubmitTask", "QueueDefaults"] {
        all.extend([
            bound(
                Property(schema, "max_attempts"),
                "maximum",
                limits.max_attempts.into(),
            ),
            bound(
                Property(schema, "concurrency_key"),
                "maxLength",
                flow::MAX_KEY_CHARS.into(),
            ),
            bound(
                Property(schema, "concurrency_limit"),
                "maximum",
                flow::MAX_LIMIT.into(),
            ),
        ]);
    }
    all.extend([
        bound(
            Property("SubmitTask", "labels"),
            "maxItems",
            limits.max_labels.into(),
        ),
        bound(
            Property("SubmitTask", "priority"),
            "minimum",
            validate::PRIORITY_MIN.into(),
        ),
        bound(
            Property("SubmitTask", "priority"),
            "maximum",
            validate::PRIORITY_MAX.into(),
        ),
        // A token's ceiling is checked as a priority is (`api/admin.rs`).
        bound(
            Property("CreateToken", "max_priority"),
            "minimum",
            validate::PRIORITY_MIN.into(),
        ),
        bound(
            Property("CreateToken", "max_priority"),
            "maximum",
            validate::PRIORITY_MAX.into(),
        ),
        bound(
            Property("SubmitTask", "timeout_s"),
            "maximum",
            limits.max_timeout_s.into(),
        ),
        bound(
            Property("SubmitTask", "queue_timeout_s"),
            "maximum",
            limits.max_queue_timeout_s.into(),
        ),
        bound(
            Property("SubmitTask", "notify_url"),
            "maxLength",
            limits.max_notify_url.into(),
        ),
        bound(
            Property("RegisterRunner", "name"),
            "maxLength",
            runner::MAX_NAME.into(),
        ),
        bound(
            Property("RegisterRunner", "labels"),
            "maxItems",
            labels::MAX_LABELS.into(),
        ),
        bound(
            Property("RegisterRunner", "capacity"),
            "maximum",
            runner::MAX_CAPACITY.into(),
        ),
        bound(
            Property("RegisterRunner", "version"),
            "maxLength",
            runner::MAX_VERSION_CHARS.into(),
        ),
        bound(
            Property("CreateToken", "name"),
            "maxLength",
            admin::MAX_TOKEN_NAME.into(),
        ),
        bound(
            Property("BulkRequest", "limit"),
            "maximum",
            bulk::BULK_MAX.into(),
        ),
        bound(
            Parameter("/v1/tasks", "get", "limit"),
            "maximum",
            task_list::LIST_MAX.into(),
        ),
        bound(
            Parameter("/v1/tasks", "get", "text"),
            "maxLength",
            task_list::TEXT_MAX_CHARS.into(),
        ),
        bound(
            Parameter("/v1/tasks/count", "get", "text"),
            "maxLength",
            task_list::TEXT_MAX_CHARS.into(),
        ),
        bound(
            Property("SubmitTask", "depends_on"),
            "maxItems",
            crate::admission::MAX_DEPENDS_ON.into(),
        ),
        bound(
            Property("SubmitPipeline", "name"),
            "maxLength",
            pipelines::MAX_NAME_CHARS.into(),
        ),
        bound(
            Parameter("/v1/pipelines", "get", "limit"),
            "maximum",
            pipelines::LIST_MAX.into(),
        ),
        bound(
            Parameter("/v1/queues/trends", "get", "minutes"),
            "maximum",
            trends::MAX_MINUTES.into(),
        ),
    ]);
    for schema in ["CreateToken", "CreateRegistrationToken"] {
        all.push(bound(
            Property(schema, "expires_in_s"),
            "maximum",
            admin::MAX_EXPIRY_S.into(),
        ));
    }
    for schema in ["LeaseRequest", "Exchange"] {
        all.extend([
            bound(Property(schema, "max"), "maximum", limits.max_lease.into()),
            bound(
                Property(schema, "wait_s"),
                "maximum",
                limits.max_wait_s.into(),
            ),
        ]);
    }
    for schema in ["CreateSchedule", "UpdateSchedule"] {
        all.extend([
            bound(
                Property(schema, "name"),
                "maxLength",
                crate::schedules::MAX_NAME.into(),
            ),
            bound(
                Property(schema, "cron"),
                "maxLength",
                cron::MAX_CRON_CHARS.into(),
            ),
            bound(
                Property(schema, "timezone"),
                "maxLength",
                cron::MAX_ZONE_CHARS.into(),
            ),
            bound(
                Property(schema, "catch_up_window_s"),
                "maximum",
                crate::schedules::MAX_CATCH_UP_WINDOW_S.into(),
            ),
            bound(
                Property(schema, "jitter_s"),
                "maximum",
                crate::schedules::MAX_JITTER_S.into(),
            ),
        ]);
    }
    for list in ["on_exit_codes", "never_on_exit_codes"] {
        all.push(bound(
            Property("RetryPolicy", list),
            "maxItems",
            retry_policy::MAX_EXIT_CODES.into(),
        ));
    }
    all
}

/// Writes every bound of `limits` into `document`. A bound whose place the document
/// lacks is skipped; the tests keep the table and the document in step.
pub(crate) fn state(document: &mut Value, limits: &Limits) {
    for bound in bounds(limits) {
        if let Some(schema) = holder(document, bound.at, bound.keyword) {
            schema.insert(bound.keyword.to_string(), bound.value);
        }
    }
}

/// The schema object that states `keyword` for `at`: the property's (or parameter's)
/// own, or the non-null branch of a nullable one.
pub(crate) fn holder<'a>(
    document: &'a mut Value,
    at: At,
    keyword: &str,
) -> Option<&'a mut Map<String, Value>> {
    let schema = match at {
        At::Property(schema, property) => {
            let schema = document.pointer_mut(&format!("/components/schemas/{schema}"))?;
            let parts: Vec<&mut Value> = match schema.get("allOf").is_some() {
                true => schema["allOf"].as_array_mut()?.iter_mut().collect(),
                false => vec![schema],
            };
            parts
                .into_iter()
                .find_map(|part| part.pointer_mut(&format!("/properties/{property}")))?
        }
        At::Parameter(path, method, name) => {
            let path = path.replace('~', "~0").replace('/', "~1");
            document
                .pointer_mut(&format!("/paths/{path}/{method}/parameters"))?
                .as_array_mut()?
                .iter_mut()
                .find(|p| p["name"] == name)?
                .get_mut("schema")?
        }
    };
    if schema.get(keyword).is_some() {
        return schema.as_object_mut();
    }
    schema
        .as_object_mut()?
        .iter_mut()
        .filter(|(k, _)| matches!(k.as_str(), "oneOf" | "anyOf"))
        .filter_map(|(_, branches)| branches.as_array_mut())
        .flatten()
        .find(|branch| branch.get(keyword).is_some())?
        .as_object_mut()
}

#[cfg(test)]
mod tests;
