//! When each part of a task's output came, and on which stream. The log itself stays the
//! bytes the task wrote, as a terminal shows them; beside it, a runner records a *mark*
//! whenever output arrives on the other stream than the last, or arrives at least
//! [`MARK_EVERY_MS`] after the last mark (a second, past [`FINE_MARKS`]): the bytes from a
//! mark's offset up to the next mark came at its time on its stream. A reader stamps each line with the mark of its
//! first byte (`baton task logs --timestamps`, the console). Marks travel with the chunk
//! they describe, in a header of their own ([`HEADER`], [`encode`]) — so an older node
//! that knows nothing of them takes the chunk as before — and with a completion's log
//! tail.

use serde::{Deserialize, Serialize};

/// The header a log chunk's marks travel in.
pub const HEADER: &str = "x-baton-log-marks";

/// The most marks one chunk carries. A runner cuts a chunk short at the mark past it:
/// the header stays a few KiB, under any proxy's limit.
pub const MAX_PER_CHUNK: usize = 150;

/// Output on one stream closer together than this shares a mark: a chatty task costs
/// at most a hundred marks a second, and a line's time is right to within this.
pub const MARK_EVERY_MS: i64 = 10;

/// Past this many marks in an attempt, a mark every [`COARSE_MARK_EVERY_MS`]: a task
/// that talks for hours keeps times to the second.
pub const FINE_MARKS: usize = 10_000;

/// The spacing of marks past [`FINE_MARKS`].
pub const COARSE_MARK_EVERY_MS: i64 = 1_000;

/// The most marks one attempt's log keeps (hours of output at a mark a second); past
/// them, later output shares the last mark's time and stream. Bounds what a task writing
/// one byte at a time to alternate streams can cost.
pub const MAX_PER_ATTEMPT: usize = 20_000;

/// How far apart marks on one stream are, once an attempt has `marks` of them.
pub fn mark_every_ms(marks: usize) -> i64 {
    if marks < FINE_MARKS {
        MARK_EVERY_MS
    } else {
        COARSE_MARK_EVERY_MS
    }
}

/// Which of the process's streams bytes were written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl LogStream {
    fn letter(self) -> char {
        match self {
            LogStream::Stdout => 'o',
            LogStream::Stderr => 'e',
        }
    }
}

/// The bytes from `offset` up to the next mark came at `at_ms` (milliseconds since the
/// Unix epoch, the runner's clock) on `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// Where in the attempt's output the bytes start.
    pub offset: i64,
    /// When they came.
    pub at_ms: i64,
    /// On which stream.
    pub stream: LogStream,
}

/// The latest time a mark may carry (year 9999): what a date type can hold.
const MAX_AT_MS: i64 = 253_402_300_799_000;

/// `marks` as the header spells them: `offset@at_ms:o` (or `:e`), space-separated.
pub fn encode(marks: &[Mark]) -> String {
    marks
        .iter()
        .map(|m| format!("{}@{}:{}", m.offset, m.at_ms, m.stream.letter()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The marks of a chunk of `len` bytes at `offset`, from the header's text: at most
/// [`MAX_PER_CHUNK`], in order of offset, each within the chunk.
pub fn decode(text: &str, offset: i64, len: usize) -> Result<Vec<Mark>, String> {
    let end = offset.saturating_add(i64::try_from(len).unwrap_or(i64::MAX));
    let mut marks = Vec::new();
    for word in text.split_ascii_whitespace() {
        if marks.len() == MAX_PER_CHUNK {
            return Err(format!("more than {MAX_PER_CHUNK} marks in one chunk"));
        }
        let bad = || format!("`{word}` is not a mark (offset@milliseconds:o or :e)");
        let (at_offset, rest) = word.split_once('@').ok_or_else(bad)?;
        let (at_ms, stream) = rest.split_once(':').ok_or_else(bad)?;
        let mark = Mark {
            offset: at_offset.parse().map_err(|_| bad())?,
            at_ms: at_ms.parse().map_err(|_| bad())?,
            stream: match stream {
                "o" => LogStream::Stdout,
                "e" => LogStream::Stderr,
                _ => return Err(bad()),
            },
        };
        if !(0..=MAX_AT_MS).contains(&mark.at_ms) {
            return Err(format!("mark `{word}`: the time is out of range"));
        }
        if mark.offset < offset || mark.offset >= end {
            return Err(format!(
                "mark `{word}` is outside the chunk's bytes ({offset}..{end})"
            ));
        }
        if marks.last().is_some_and(|m: &Mark| m.offset > mark.offset) {
            return Err(format!("mark `{word}` comes before the mark ahead of it"));
        }
        marks.push(mark);
    }
    Ok(marks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_read_back_as_written() {
        let marks = vec![
            Mark {
                offset: 100,
                at_ms: 1_765_000_000_000,
                stream: LogStream::Stdout,
            },
            Mark {
                offset: 157,
                at_ms: 1_765_000_000_012,
                stream: LogStream::Stderr,
            },
        ];
        let text = encode(&marks);
        assert_eq!(text, "100@1765000000000:o 157@1765000000012:e");
        assert_eq!(decode(&text, 100, 60), Ok(marks));
        assert_eq!(decode("", 0, 10), Ok(vec![]));
    }

    #[test]
    fn a_mark_outside_its_chunk_or_out_of_order_or_malformed_is_refused() {
        for (text, why) in [
            ("99@1:o", "before the chunk"),
            ("160@1:o", "past its end"),
            ("120@1:o 110@1:o", "out of order"),
            ("120@1:x", "unknown stream"),
            ("120:1@o", "malformed"),
            ("120@-5:o", "time out of range"),
            ("12a@1:o", "not a number"),
        ] {
            assert!(decode(text, 100, 60).is_err(), "{why}: {text}");
        }
        let many = (0..=MAX_PER_CHUNK)
            .map(|i| format!("{i}@1:o"))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(decode(&many, 0, 1000).is_err(), "too many");
    }
}
