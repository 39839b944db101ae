//! Every error code the API answers with (`error.code` of the JSON error body), as one
//! type: the server makes its answers from it, and a client decides by it — never by
//! comparing a string written in two places. On the wire the code stays a string, so a
//! client of this release reads a newer server's new codes as [`ErrorCode::parse`]'s
//! `None`.

macro_rules! error_codes {
    ($($variant:ident => $text:literal,)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($variant,)*
        }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)*
                }
            }

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
    MalformedJson => "malformed_json",
    UnreadableBody => "unreadable_body",
    InvalidQuery => "invalid_query",
    InvalidPath => "invalid_path",
    BodyTimeout => "body_timeout",
    // 401, 403, 404, 405.
    Unauthorized => "unauthorized",
    Forbidden => "forbidden",
    SecretsUnavailable => "secrets_unavailable",
    NotFound => "not_found",
    MethodNotAllowed => "method_not_allowed",
    // 409, 410, 416: state.
    Conflict => "conflict",
    Duplicate => "duplicate",
    SecretsErased => "secrets_erased",
    LogOffsetPastEnd => "log_offset_past_end",
    // 413: sizes.
    BodyTooLarge => "body_too_large",
    BatchTooLarge => "batch_too_large",
    ExchangeTooLarge => "exchange_too_large",
    PayloadTooLarge => "payload_too_large",
    OutputsTooLarge => "outputs_too_large",
    ErrorTooLarge => "error_too_large",
    LogTailTooLarge => "log_tail_too_large",
    // 415, 422, 426.
    UnsupportedMediaType => "unsupported_media_type",
    Invalid => "invalid",
    InvalidBody => "invalid_body",
    RunnerVersionUnsupported => "runner_version_unsupported",
    // 429: caps.
    TooManyRequests => "too_many_requests",
    TooManyQueues => "too_many_queues",
    TooManyLabelSets => "too_many_label_sets",
    // 5xx.
    Unavailable => "unavailable",
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
