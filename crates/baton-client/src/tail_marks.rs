//! A completion's log tail carries the marks of its bytes (`LogTail::marks`) — but a node
//! of an earlier release, which takes no field it does not know, refuses such a tail with
//! 422 `invalid_body` ("unknown field `marks`"), and with it the whole exchange: every
//! result in it would be lost. So a runner offers them, and on that refusal sends the same
//! exchange again without them (nothing of a refused exchange was done, and a resend is
//! replayable by its `request_id`), and offers none for [`REFUSED_FOR`] after. During a
//! rolling upgrade its tails then go unmarked for a while — their lines show no time of
//! their own — rather than be lost; the chunks' marks travel in a header every node
//! ignores or takes.

use crate::client::{ApiError, ClientError};
use crate::exchange::Exchange;
use std::borrow::Cow;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long after a refusal a runner sends tails without marks before it offers them
/// again: long enough that a fleet mid-upgrade costs few resends, short enough that the
/// marks come back soon after the last old node is gone.
pub(crate) const REFUSED_FOR: Duration = Duration::from_secs(600);

/// Whether tails may carry their marks now; one per client, shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct TailMarks {
    refused_at: Mutex<Option<Instant>>,
}

impl TailMarks {
    /// `ex` as it may go now: without its tails' marks while a refusal is recent.
    pub(crate) fn offered<'e>(&self, ex: &'e Exchange) -> Cow<'e, Exchange> {
        let refused = self
            .refused_at
            .lock()
            .expect("tail marks lock")
            .is_some_and(|at| at.elapsed() < REFUSED_FOR);
        if refused && carries_marks(ex) {
            Cow::Owned(without_marks(ex))
        } else {
            Cow::Borrowed(ex)
        }
    }

    /// `ex` to send again, when `answer` is a node refusing its tails' marks: noted, so
    /// the next exchanges go without them.
    pub(crate) fn resend_after<T>(
        &self,
        ex: &Exchange,
        answer: &Result<T, ClientError>,
    ) -> Option<Exchange> {
        let Err(ClientError::Api(e)) = answer else {
            return None;
        };
        if !(carries_marks(ex) && refuses_marks(e)) {
            return None;
        }
        *self.refused_at.lock().expect("tail marks lock") = Some(Instant::now());
        Some(without_marks(ex))
    }
}

fn carries_marks(ex: &Exchange) -> bool {
    ex.completions
        .iter()
        .any(|c| c.log_tail.as_ref().is_some_and(|t| t.marks.is_some()))
}

fn without_marks(ex: &Exchange) -> Exchange {
    let mut ex = ex.clone();
    for tail in ex
        .completions
        .iter_mut()
        .filter_map(|c| c.log_tail.as_mut())
    {
        tail.marks = None;
    }
    ex
}

/// The answer of a node that does not know `marks`. Judged by its code alone (a message's
/// wording is no contract): a body refused for another reason is refused again without
/// the marks, and the caller gets that answer as it would have.
fn refuses_marks(e: &ApiError) -> bool {
    e.status.as_u16() == 422 && e.body.error.code == crate::ErrorCode::InvalidBody.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::{CompletionItem, LogTail};
    use crate::wire::{ErrorBody, ErrorDetail};
    use baton_core::LeaseId;
    use uuid::Uuid;

    /// `LogTail` as the release before marks took it.
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct PreviousLogTail {
        offset: i64,
        data: String,
    }

    fn exchange_with_marked_tail() -> Exchange {
        let mut tail = LogTail::new(0, b"hello\n");
        tail.marks = Some("0@1765000000000:o".into());
        Exchange {
            completions: vec![CompletionItem {
                log_tail: Some(tail),
                ..CompletionItem::succeeded(Uuid::now_v7(), LeaseId::from(Uuid::now_v7()))
            }],
            ..Exchange::default()
        }
    }

    fn refused(code: &str, message: String) -> Result<(), ClientError> {
        Err(ClientError::Api(ApiError {
            status: reqwest::StatusCode::UNPROCESSABLE_ENTITY,
            body: ErrorBody {
                error: ErrorDetail {
                    code: code.into(),
                    message,
                    offset: None,
                    status: None,
                    presence_recorded: None,
                },
            },
        }))
    }

    #[test]
    fn a_tail_an_older_node_refuses_is_sent_again_without_its_marks_and_then_for_a_while() {
        let ex = exchange_with_marked_tail();
        let tail = ex.completions[0].log_tail.clone().unwrap();
        // What an older node says of it: serde's own refusal.
        let previous =
            serde_json::from_value::<PreviousLogTail>(serde_json::to_value(&tail).unwrap())
                .unwrap_err()
                .to_string();
        assert!(previous.contains("marks"), "{previous}");

        let marks = TailMarks::default();
        assert!(
            matches!(marks.offered(&ex), Cow::Borrowed(_)),
            "marks are offered until a node refuses them"
        );
        assert!(
            marks
                .resend_after(&ex, &refused("conflict", String::new()))
                .is_none(),
            "another refusal is no reason to resend"
        );
        let again = marks
            .resend_after(&ex, &refused("invalid_body", previous))
            .expect("sent again");
        let unmarked = again.completions[0].log_tail.as_ref().unwrap();
        assert_eq!(unmarked.marks, None);
        assert_eq!(unmarked.data, tail.data, "the bytes go as they were");
        assert!(
            serde_json::from_value::<PreviousLogTail>(serde_json::to_value(unmarked).unwrap())
                .is_ok(),
            "what an older node takes"
        );
        assert!(
            marks.offered(&ex).completions[0]
                .log_tail
                .as_ref()
                .unwrap()
                .marks
                .is_none(),
            "the next exchanges go without marks"
        );
    }
}
