//! Output shipping. A task's stdout and stderr are spooled to an unnamed file in the
//! state directory as they come, and shipped from there by byte offset. The server's answer
//! says how far it holds the log, so a lost answer, a resend or a server that restarted
//! mid-stream all resolve to "continue from the offset the server holds". Spooling to
//! disk keeps memory flat while the server is unreachable.

use crate::retry::{CallError, Retrier, classify};
use baton_client::{Client, ClientError, LogTail, StatusCode};
use baton_core::LeaseId;
use baton_core::backoff::Backoff;
use baton_core::log_marks::{self, LogStream, Mark};
use nix::fcntl::OFlag;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use tokio::time::Instant;
use uuid::Uuid;

/// A task's output on disk, appended by the readers and read by the shipper, with the
/// marks of when each part came and on which stream (`baton_core::log_marks`).
#[derive(Debug)]
pub(crate) struct LogSpool {
    file: File,
    /// The marks so far, by offset; its lock also makes appends one at a time
    /// (stdout's and stderr's readers both write).
    marks: Mutex<Vec<Mark>>,
    written: AtomicI64,
}

impl LogSpool {
    /// A spool in `dir` that has no name (`O_TMPFILE`): there is nothing to remove when
    /// the task ends, nor after a crash — the kernel frees it with its last descriptor.
    /// Where the file system makes no unnamed files, a named one is unlinked at once.
    pub(crate) fn create(dir: &Path) -> std::io::Result<LogSpool> {
        let unnamed = OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(OFlag::O_TMPFILE.bits())
            .open(dir);
        let file = match unnamed {
            Ok(file) => file,
            Err(_) => {
                let path = dir.join(format!("{}.log", Uuid::new_v4()));
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)?;
                std::fs::remove_file(&path)?;
                file
            }
        };
        Ok(LogSpool {
            file,
            marks: Mutex::new(Vec::new()),
            written: AtomicI64::new(0),
        })
    }

    /// Appends `bytes` the task wrote to `stream`, marking them when they are the first,
    /// come on the other stream than the last, or come [`log_marks::mark_every_ms`] after
    /// the last mark.
    pub(crate) fn append(&self, bytes: &[u8], stream: LogStream) -> std::io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut marks = self.marks.lock().expect("log spool lock");
        let offset = self.written.load(Ordering::Acquire);
        let at_ms = chrono::Utc::now().timestamp_millis();
        let every = log_marks::mark_every_ms(marks.len());
        let marked = marks
            .last()
            .is_some_and(|last: &Mark| last.stream == stream && at_ms - last.at_ms < every);
        if !marked && marks.len() < log_marks::MAX_PER_ATTEMPT {
            marks.push(Mark {
                offset,
                at_ms,
                stream,
            });
        }
        (&self.file).write_all(bytes)?;
        self.written
            .fetch_add(bytes.len() as i64, Ordering::Release);
        Ok(())
    }

    /// Up to `max` bytes from `offset` with their marks, cut short where a chunk would
    /// carry more than [`log_marks::MAX_PER_CHUNK`] marks.
    fn shipment(&self, offset: i64, max: usize) -> std::io::Result<(Vec<u8>, Vec<Mark>)> {
        // The marks and the end of what is written, read together: bytes appended after
        // are left for the next chunk with their marks, never sent without them.
        let (mut marks, written): (Vec<Mark>, i64) = {
            let all = self.marks.lock().expect("log spool lock");
            let from = all.partition_point(|m| m.offset < offset);
            let marks = all[from..]
                .iter()
                .take(log_marks::MAX_PER_CHUNK + 1)
                .copied()
                .collect();
            (marks, self.written())
        };
        let mut max = max.min(usize::try_from(written - offset).unwrap_or(0));
        if marks.len() > log_marks::MAX_PER_CHUNK {
            let cut = marks.pop().expect("more than the cap");
            max = max.min(usize::try_from(cut.offset - offset).unwrap_or(max));
        }
        let bytes = self.read_at(offset, max)?;
        let end = offset + bytes.len() as i64;
        marks.retain(|m| m.offset < end);
        Ok((bytes, marks))
    }

    /// Bytes produced so far: the size `complete` reports.
    pub(crate) fn written(&self) -> i64 {
        self.written.load(Ordering::Acquire)
    }

    fn read_at(&self, offset: i64, max: usize) -> std::io::Result<Vec<u8>> {
        let available = usize::try_from(self.written() - offset).unwrap_or(0);
        let mut buf = vec![0; available.min(max)];
        let mut filled = 0;
        while filled < buf.len() {
            let n = self
                .file
                .read_at(&mut buf[filled..], offset as u64 + filled as u64)?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        buf.truncate(filled);
        Ok(buf)
    }
}

/// Ships one task's spool.
pub(crate) struct Shipper {
    client: Client,
    task: Uuid,
    lease: LeaseId,
    /// Offset the server has acknowledged.
    acked: i64,
    chunk: usize,
    /// The server asked for this task to stop (a cancel).
    pub cancel_requested: bool,
}

impl Shipper {
    pub(crate) fn new(client: Client, task: Uuid, lease: LeaseId, chunk: usize) -> Self {
        Shipper {
            client,
            task,
            lease,
            acked: 0,
            chunk,
            cancel_requested: false,
        }
    }

    /// Sends what the spool holds beyond the acknowledged offset. On an error the bytes
    /// stay on disk for the next round.
    pub(crate) async fn ship(&mut self, spool: &LogSpool) -> Result<(), CallError> {
        while self.acked < spool.written() {
            let (chunk, marks) = spool
                .shipment(self.acked, self.chunk)
                .map_err(|e| CallError::Local(format!("cannot read the log spool: {e}")))?;
            if chunk.is_empty() {
                break;
            }
            match self
                .client
                .log_append_marked(self.task, self.lease, self.acked, chunk.into(), &marks)
                .await
            {
                Ok(ack) => {
                    self.acked = ack.acked;
                    self.cancel_requested |= ack.cancel;
                }
                Err(ClientError::Api(e)) if e.status == StatusCode::RANGE_NOT_SATISFIABLE => {
                    // The server holds less than we thought: resume from its offset.
                    let held = e.body.error.offset.unwrap_or(0);
                    tracing::info!(task.id = %self.task, held, sent = self.acked, "log rewound to the server's offset");
                    self.acked = held;
                }
                Err(e) => {
                    crate::metrics::report_error("logs");
                    return Err(classify(e));
                }
            }
        }
        Ok(())
    }

    /// What is written but not yet acknowledged, when it is at most `max` bytes: the tail
    /// to send with the completion. `None` when there is nothing, or more (ship it
    /// first).
    pub(crate) fn tail(&self, spool: &LogSpool, max: usize) -> Option<LogTail> {
        let left = usize::try_from(spool.written() - self.acked).ok()?;
        if left > max {
            return None;
        }
        if left == 0 {
            return None;
        }
        let (bytes, marks) = spool.shipment(self.acked, left).ok()?;
        if bytes.len() < left {
            // More marks than one tail carries: ship it as chunks first.
            return None;
        }
        let mut tail = LogTail::new(self.acked, &bytes);
        tail.marks = (!marks.is_empty()).then(|| log_marks::encode(&marks));
        Some(tail)
    }

    /// Whether written output is not yet acknowledged.
    pub(crate) fn behind(&self, spool: &LogSpool) -> bool {
        self.acked < spool.written()
    }

    /// Ships until everything written is acknowledged, retrying transient errors until
    /// `deadline`.
    pub(crate) async fn drain(
        &mut self,
        spool: &LogSpool,
        deadline: Instant,
    ) -> Result<(), CallError> {
        let mut retrier = Retrier::new(Backoff::RUNNER).patient_until(deadline);
        loop {
            match self.ship(spool).await {
                Ok(()) => return Ok(()),
                Err(e) => retrier.pause(e).await?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_marked_when_its_stream_changes_and_a_chunk_carries_its_marks_only() {
        // An unnamed file: nothing is left in the folder.
        let spool = LogSpool::create(&std::env::temp_dir()).unwrap();
        spool.append(b"out\n", LogStream::Stdout).unwrap();
        spool.append(b"more\n", LogStream::Stdout).unwrap();
        spool.append(b"err\n", LogStream::Stderr).unwrap();
        let (bytes, marks) = spool.shipment(0, 1 << 20).unwrap();
        assert_eq!(bytes, b"out\nmore\nerr\n");
        let streams: Vec<(i64, LogStream)> = marks.iter().map(|m| (m.offset, m.stream)).collect();
        assert!(
            streams == [(0, LogStream::Stdout), (9, LogStream::Stderr)]
                || streams
                    == [
                        (0, LogStream::Stdout),
                        (4, LogStream::Stdout),
                        (9, LogStream::Stderr)
                    ],
            "a mark where output starts and where the stream changes: {streams:?}"
        );
        let (from_five, marks) = spool.shipment(5, 1 << 20).unwrap();
        assert_eq!(from_five, b"ore\nerr\n");
        assert_eq!(
            marks.iter().map(|m| m.offset).collect::<Vec<_>>(),
            vec![9],
            "a mark before the chunk is the chunk before's"
        );
    }

    #[test]
    fn a_chunk_with_more_marks_than_a_header_takes_is_cut_short() {
        // An unnamed file: nothing is left in the folder.
        let spool = LogSpool::create(&std::env::temp_dir()).unwrap();
        for i in 0..400 {
            let stream = if i % 2 == 0 {
                LogStream::Stdout
            } else {
                LogStream::Stderr
            };
            spool.append(b"x\n", stream).unwrap();
        }
        let (bytes, marks) = spool.shipment(0, 1 << 20).unwrap();
        assert_eq!(marks.len(), log_marks::MAX_PER_CHUNK);
        assert_eq!(
            bytes.len(),
            2 * log_marks::MAX_PER_CHUNK,
            "cut at the next mark"
        );
        let text = log_marks::encode(&marks);
        assert_eq!(log_marks::decode(&text, 0, bytes.len()), Ok(marks));
    }
}
