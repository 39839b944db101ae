//! Output shipping. A task's stdout and stderr are spooled to an unnamed file in the
//! state directory as they come, and shipped from there by byte offset. The server's answer
//! says how far it holds the log, so a lost answer, a resend or a server that restarted
//! mid-stream all resolve to "continue from the offset the server holds". Spooling to
//! disk keeps memory flat while the server is unreachable.

use crate::retry::{CallError, Retrier, classify};
use baton_client::{Client, ClientError, LogTail, StatusCode};
use baton_core::LeaseId;
use baton_core::backoff::Backoff;
use nix::fcntl::OFlag;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use tokio::time::Instant;
use uuid::Uuid;

/// A task's output on disk, appended by the readers and read by the shipper.
#[derive(Debug)]
pub(crate) struct LogSpool {
    file: File,
    /// Appends one at a time (stdout's and stderr's readers both write).
    appending: Mutex<()>,
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
            appending: Mutex::new(()),
            written: AtomicI64::new(0),
        })
    }

    pub(crate) fn append(&self, bytes: &[u8]) -> std::io::Result<()> {
        let _one_at_a_time = self.appending.lock().expect("log spool lock");
        (&self.file).write_all(bytes)?;
        self.written
            .fetch_add(bytes.len() as i64, Ordering::Release);
        Ok(())
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
            let chunk = spool
                .read_at(self.acked, self.chunk)
                .map_err(|e| CallError::Local(format!("cannot read the log spool: {e}")))?;
            if chunk.is_empty() {
                break;
            }
            match self
                .client
                .log_append(self.task, self.lease, self.acked, chunk.into())
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
        let bytes = spool.read_at(self.acked, left).ok()?;
        Some(LogTail::new(self.acked, &bytes))
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
