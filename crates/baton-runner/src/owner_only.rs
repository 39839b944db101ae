//! Files of the agent's own that nobody else may read (its runner token, the results it
//! has not delivered yet), written whole or not at all: into a temporary file beside the
//! target, flushed to disk, then renamed over it. A crash mid-write leaves the old file
//! (or none) and a stray `.tmp`, never half of a token or a result.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Replaces `file` with `bytes`, readable and writable by the agent's user alone.
pub(crate) fn write(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temporary(file);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    out.write_all(bytes)?;
    out.sync_all()?;
    std::fs::rename(&tmp, file)
}

/// Where `file` is written before it is renamed into place: `runner.json.tmp` for
/// `runner.json`, so a reader that takes only `.json` files never sees it.
fn temporary(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}
