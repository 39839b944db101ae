//! Every error code the API answers with (`error.code` of the JSON error body), as one
//! type: the server makes its answers from it, and a client decides by it — never by
//! comparing a string written in two places. On the wire the code stays a string, so a
//! client of this release reads a newer server's new codes as [`ErrorCode::parse`]'s
//! `None`.

macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident => $text:literal,)*) => {
        /// An API error code: the `error.code` of an error answer.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)*
        }

        impl ErrorCode {
            /// Every code, once each.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code as the wire spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                }
            }

            /// The code the wire spells `code`; `None` for one this release does not know
            /// (a newer server's).
            pub fn parse(code: &str) -> Option<ErrorCode> {
                match code {
                    $($text => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

error_codes! {
    // 400: malformed requests.
    /// The body is not JSON at all.
    MalformedJson => "malformed_json",
    /// The body could not be read (the connection broke, or its encoding is bad).
    UnreadableBody => "unreadable_body",
    /// A query parameter is missing, unknown, or not of its type.
    InvalidQuery => "invalid_query",
    /// A path parameter is not of its type (an id that is not a UUID).
    InvalidPath => "invalid_path",
    /// The body came too slowly and was given up on (408).
    BodyTimeout => "body_timeout",
    // 401, 403, 404, 405.
    /// No token, or one no node knows (unknown, revoked, expired): a runner hearing it
    /// stops.
    Unauthorized => "unauthorized",
    /// The token's kind, scopes or limits do not allow this.
    Forbidden => "forbidden",
    /// The node has no key for secrets: it cannot seal a submit's `secret_env` (422), or
    /// open a started task's (403, the runner must not run it).
    SecretsUnavailable => "secrets_unavailable",
    /// No such thing, or not the caller's to see.
    NotFound => "not_found",
    /// The path is served, but not with this method.
    MethodNotAllowed => "method_not_allowed",
    // 409, 410, 416: state.
    /// The task's status or lease moved on, so nothing was changed: `error.status` says
    /// where it stands. A runner hearing it about a run stops that run.
    Conflict => "conflict",
    /// The name is taken (a schedule's, among its creator's).
    Duplicate => "duplicate",
    /// A short task id (the last 12 characters of its id) that more than one task's id
    /// ends with: the message lists them; use the whole id.
    AmbiguousId => "ambiguous_id",
    /// A re-run of a task whose `secret_env` values were erased when it ended: submit it
    /// again with its secrets.
    SecretsErased => "secrets_erased",
    /// A log chunk starts past the end of what the server holds (416): resend from
    /// `error.offset`.
    LogOffsetPastEnd => "log_offset_past_end",
    // 413: sizes.
    /// The request body is over the nodes' size limit.
    BodyTooLarge => "body_too_large",
    /// A batch submit of more tasks than one batch may hold.
    BatchTooLarge => "batch_too_large",
    /// An exchange carrying more items, or running leases, than one may.
    ExchangeTooLarge => "exchange_too_large",
    /// A task's `payload` is over the nodes' payload limit.
    PayloadTooLarge => "payload_too_large",
    /// A run's `outputs` are over the nodes' payload limit.
    OutputsTooLarge => "outputs_too_large",
    /// A run's `error` text is over 64 KiB.
    ErrorTooLarge => "error_too_large",
    /// A completion's log tail is over the log chunk limit.
    LogTailTooLarge => "log_tail_too_large",
    // 415, 422, 426.
    /// The body is not sent as `application/json`.
    UnsupportedMediaType => "unsupported_media_type",
    /// A well-formed value the server will not take; the message names the field.
    Invalid => "invalid",
    /// JSON that is not the request's shape (a field missing, unknown, or of the wrong
    /// type).
    InvalidBody => "invalid_body",
    /// The runner agent's version is one this server cannot serve (426): upgrade it.
    RunnerVersionUnsupported => "runner_version_unsupported",
    // 429: caps.
    /// The caller holds as many of something as it may (parked lease requests, log
    /// follows): try again once one ends.
    TooManyRequests => "too_many_requests",
    /// The submit would open a queue (name and label set) past the nodes' `max_queues`.
    TooManyQueues => "too_many_queues",
    /// The submit would add a label set past the nodes' `max_label_sets`.
    TooManyLabelSets => "too_many_label_sets",
    // 5xx.
    /// Redis or Postgres is out of reach, or the node is draining or rejoining: try again,
    /// on this node or another.
    Unavailable => "unavailable",
    /// A fault of the server's own; the message gives an id to find it in the node's log.
    Internal => "internal",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_as_itself_and_no_two_share_a_text() {
        let mut seen = std::collections::HashSet::new();
        for &code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            assert!(seen.insert(code.as_str()), "{code} twice");
        }
        assert_eq!(ErrorCode::parse("from_a_newer_server"), None);
    }
}
