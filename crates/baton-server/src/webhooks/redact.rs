//! A `notify_url` may carry credentials anywhere in it: the receiver's basic auth
//! (`https://user:password@host/`), a token as the user part (`https://TOKEN@host/`), a
//! secret path (Slack's `https://hooks.slack.com/services/T…/B…/XXXX`) or a token in the
//! query (`?token=…`). Anyone who may read the task or its schedule, any webhook body,
//! and anyone who reads the node's log must not learn them; so wherever the URL is shown
//! or logged, only its scheme, host and port are: the user part, path and query read
//! `***`. The stored URL keeps them, for the delivery.

use std::borrow::Cow;

/// What may be shown of a URL: scheme, host and port; whatever else it has is `***`.
pub(crate) fn redacted(url: &str) -> Cow<'_, str> {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        // Not a URL the parser reads (rows written before submit checked it): nothing of
        // it past the scheme is shown.
        return match url.find("://") {
            Some(start) if url.len() > start + 3 => Cow::Owned(format!("{}***", &url[..start + 3])),
            _ => Cow::Borrowed("***"),
        };
    };
    let mut shown = format!("{}://", parsed.scheme());
    if !parsed.username().is_empty() || parsed.password().is_some() {
        shown.push_str("***@");
    }
    shown.push_str(parsed.host_str().unwrap_or_default());
    if let Some(port) = parsed.port() {
        shown.push_str(&format!(":{port}"));
    }
    let path = parsed.path();
    shown.push_str(if path.is_empty() || path == "/" {
        path
    } else {
        "/***"
    });
    if parsed.query().is_some() {
        shown.push_str("?***");
    }
    if parsed.fragment().is_some() {
        shown.push_str("#***");
    }
    if shown == url {
        Cow::Borrowed(url)
    } else {
        Cow::Owned(shown)
    }
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn only_scheme_host_and_port_are_shown() {
        let table = [
            (
                "https://user:s3cret@example.com/hook?x=1",
                "https://***@example.com/***?***",
            ),
            ("http://:tok@example.com/", "http://***@example.com/"),
            ("https://t0ken@example.com/", "https://***@example.com/"),
            (
                "https://hooks.slack.com/services/T000/B000/XXXXSECRET",
                "https://hooks.slack.com/***",
            ),
            (
                "https://example.com:8443/notify?token=abc#frag",
                "https://example.com:8443/***?***#***",
            ),
            ("https://example.com/", "https://example.com/"),
            ("https://example.com", "https://example.com/"),
            ("not a url://u:p@host/x", "not a url://***"),
            ("garbage", "***"),
        ];
        for (url, shown) in table {
            assert_eq!(redacted(url), shown, "{url}");
        }
    }
}
