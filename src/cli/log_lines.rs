//! A log read as lines, for `task logs --tail` and `--timestamps`. A log is bytes as the
//! process wrote them (not necessarily UTF-8, a last line perhaps without its newline),
//! so lines are cut at `\n` on the bytes and printed as they came; a line's time is its
//! first byte's, from the log's marks.

use baton_client::LogMarks;

/// Where the last `n` lines of `bytes` start. A newline ends a line; it does not start
/// an empty one after it.
pub fn tail_start(bytes: &[u8], n: usize) -> usize {
    if n == 0 {
        return bytes.len();
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    body.iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(n - 1)
        .map_or(0, |(i, _)| i + 1)
}

/// Cuts bytes that arrive in pieces into whole lines, each with the offset of its first
/// byte in the log.
#[derive(Debug, Default)]
pub struct LineCutter {
    /// The line begun and not yet ended.
    partial: Vec<u8>,
    /// Its first byte's offset.
    partial_start: i64,
}

impl LineCutter {
    /// A cutter for a log read from `offset` on.
    pub fn at(offset: i64) -> LineCutter {
        LineCutter {
            partial: Vec::new(),
            partial_start: offset,
        }
    }

    /// Takes the next bytes (they follow the last ones given); returns the lines they
    /// end, each with its newline.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<(i64, Vec<u8>)> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            self.partial.extend_from_slice(&rest[..=end]);
            let line = std::mem::take(&mut self.partial);
            let start = self.partial_start;
            self.partial_start += line.len() as i64;
            lines.push((start, line));
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
        lines
    }

    /// The line begun and never ended (the log's end has no newline), if any.
    pub fn finish(&mut self) -> Option<(i64, Vec<u8>)> {
        let line = std::mem::take(&mut self.partial);
        let start = self.partial_start;
        self.partial_start += line.len() as i64;
        (!line.is_empty()).then_some((start, line))
    }
}

/// The line with its time in front, and a newline after a last line that had none. A
/// line no mark covers (written before the server kept marks) shows `-` for its time.
pub fn stamped(start: i64, line: &[u8], marks: &LogMarks) -> Vec<u8> {
    let when = match marks.at(start) {
        Some(mark) => super::when::local_precise(mark.at),
        None => "-".to_string(),
    };
    let mut out = format!("{when}  ").into_bytes();
    out.extend_from_slice(line);
    if !line.ends_with(b"\n") {
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_client::{LogMark, LogStream};
    use chrono::{DateTime, Utc};

    #[test]
    fn the_tail_is_the_last_lines_with_or_without_a_final_newline() {
        assert_eq!(tail_start(b"a\nb\nc\n", 2), 2);
        assert_eq!(tail_start(b"a\nb\nc", 2), 2);
        assert_eq!(tail_start(b"a\nb\nc\n", 1), 4);
        assert_eq!(tail_start(b"a\nb\nc\n", 3), 0);
        assert_eq!(tail_start(b"a\nb\nc\n", 10), 0);
        assert_eq!(tail_start(b"a\nb\n", 0), 4);
        assert_eq!(tail_start(b"", 3), 0);
        assert_eq!(tail_start(b"a\n\n\n", 2), 2, "empty lines count");
    }

    #[test]
    fn pieces_are_cut_into_lines_at_their_offsets() {
        let mut cutter = LineCutter::at(100);
        assert_eq!(cutter.feed(b"hel"), Vec::<(i64, Vec<u8>)>::new());
        assert_eq!(cutter.feed(b"lo\nwor"), vec![(100, b"hello\n".to_vec())]);
        assert_eq!(
            cutter.feed(b"ld\n\nend"),
            vec![(106, b"world\n".to_vec()), (112, b"\n".to_vec())]
        );
        assert_eq!(cutter.finish(), Some((113, b"end".to_vec())));
        assert_eq!(cutter.finish(), None);
    }

    #[test]
    fn a_line_takes_the_time_of_its_first_byte() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let marks = LogMarks {
            attempt: 1,
            marks: vec![
                LogMark {
                    offset: 0,
                    at: at("2026-12-07T04:40:21.250Z"),
                    stream: LogStream::Stdout,
                },
                LogMark {
                    offset: 8,
                    at: at("2026-12-07T04:40:22.500Z"),
                    stream: LogStream::Stderr,
                },
            ],
        };
        let first = String::from_utf8(stamped(0, b"one\n", &marks)).unwrap();
        let expected = super::super::when::local_precise(at("2026-12-07T04:40:21.250Z"));
        assert_eq!(first, format!("{expected}  one\n"));
        // Begun before the second mark, ended after it: the first byte's time.
        let across = String::from_utf8(stamped(4, b"two and more", &marks)).unwrap();
        assert_eq!(across, format!("{expected}  two and more\n"));
        let later = String::from_utf8(stamped(8, b"three\n", &marks)).unwrap();
        assert!(later.contains(".500"), "{later}");
        let unmarked = LogMarks {
            attempt: 1,
            marks: Vec::new(),
        };
        assert_eq!(stamped(0, b"old\n", &unmarked), b"-  old\n");
    }
}
