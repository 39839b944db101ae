//! When each part of a task's output arrived: `GET /v1/tasks/{id}/logs/marks`. A log is
//! stored as bytes, so a line's time is not in it; the marks say, for each run of bytes,
//! when it came and on which stream, and a reader stamps lines with them (`baton task
//! logs --timestamps`, the console's per-line times).

use crate::client::{Client, ClientError};
use crate::task_ref::TaskRef;
use chrono::{DateTime, Utc};
use reqwest::Method;
use serde::{Deserialize, Serialize};

/// Which of the process's streams bytes were written to (the runner records it).
pub use baton_core::log_marks::LogStream;

/// The bytes from `offset` up to the next mark (or the end) came at `at`, on `stream`.
#[derive(utoipa::ToSchema, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMark {
    /// Byte offset in the attempt's log where this run of bytes starts.
    pub offset: i64,
    /// When the bytes came.
    pub at: DateTime<Utc>,
    /// Which stream they were written to.
    pub stream: LogStream,
}

/// The marks of one attempt's log, by offset.
#[derive(utoipa::ToSchema, Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogMarks {
    /// The attempt whose log these marks are of.
    pub attempt: i32,
    /// By offset, the first at 0 when the log has any byte.
    pub marks: Vec<LogMark>,
}

impl LogMarks {
    /// The mark of the byte at `offset`: the last mark at or before it.
    pub fn at(&self, offset: i64) -> Option<&LogMark> {
        let after = self.marks.partition_point(|m| m.offset <= offset);
        after.checked_sub(1).map(|i| &self.marks[i])
    }
}

impl Client {
    /// The marks of one attempt's log (the latest when `None`).
    pub async fn task_log_marks(
        &self,
        id: impl Into<TaskRef>,
        attempt: Option<i32>,
    ) -> Result<LogMarks, ClientError> {
        let id = id.into();
        let mut req = self.request(Method::GET, &format!("/v1/tasks/{id}/logs/marks"));
        if let Some(attempt) = attempt {
            req = req.query(&[("attempt", attempt)]);
        }
        Self::json(req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_takes_the_last_mark_at_or_before_it() {
        let at = |s: i64| DateTime::from_timestamp(s, 0).unwrap();
        let marks = LogMarks {
            attempt: 1,
            marks: vec![
                LogMark {
                    offset: 0,
                    at: at(10),
                    stream: LogStream::Stdout,
                },
                LogMark {
                    offset: 6,
                    at: at(20),
                    stream: LogStream::Stderr,
                },
            ],
        };
        assert_eq!(marks.at(0).unwrap().at, at(10));
        assert_eq!(marks.at(5).unwrap().at, at(10));
        assert_eq!(marks.at(6).unwrap().stream, LogStream::Stderr);
        assert_eq!(marks.at(600).unwrap().at, at(20));
        let none = LogMarks {
            attempt: 1,
            marks: Vec::new(),
        };
        assert_eq!(none.at(0), None);
    }
}
