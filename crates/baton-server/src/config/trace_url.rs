//! `--ui-trace-url`: where the console links a task's trace, e.g. a Jaeger UI's
//! `https://jaeger.example.com/trace/{trace_id}`. Checked when the node starts, so a
//! typo is an error there rather than a dead link on every task page.

use serde::{Deserialize, Serialize};

/// An http(s) URL with `{trace_id}` in it, where the page puts the task's trace id
/// (32 hex digits, from its `traceparent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TraceUrlTemplate(String);

const TRACE_ID: &str = "{trace_id}";

impl TraceUrlTemplate {
    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TraceUrlTemplate {
    type Error = String;

    fn try_from(template: String) -> Result<Self, String> {
        if !template.contains(TRACE_ID) {
            return Err(format!(
                "the trace URL template must contain {TRACE_ID}, got {template:?}"
            ));
        }
        // Only web addresses: the page turns this into a link a user clicks.
        let example = template.replace(TRACE_ID, &"0".repeat(32));
        match reqwest::Url::parse(&example) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => {
                Ok(TraceUrlTemplate(template))
            }
            _ => Err(format!(
                "the trace URL template must be an absolute http or https URL, got {template:?}"
            )),
        }
    }
}

impl From<TraceUrlTemplate> for String {
    fn from(template: TraceUrlTemplate) -> String {
        template.0
    }
}

#[cfg(test)]
mod tests {
    use super::TraceUrlTemplate;

    #[test]
    fn a_template_is_a_web_address_with_a_place_for_the_trace_id() {
        let ok = TraceUrlTemplate::try_from("https://jaeger.example/trace/{trace_id}".to_string());
        assert_eq!(
            ok.unwrap().as_str(),
            "https://jaeger.example/trace/{trace_id}"
        );
        for bad in [
            "https://jaeger.example/trace/",
            "javascript:alert(1)//{trace_id}",
            "/trace/{trace_id}",
        ] {
            assert!(
                TraceUrlTemplate::try_from(bad.to_string()).is_err(),
                "{bad}"
            );
        }
    }
}
