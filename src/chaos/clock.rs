//! Clock skew and clock steps, through libfaketime (Debian `faketime`): node 1 and runner
//! 1 of the drill read their wall clock through an offset kept in a file, which the drill
//! rewrites to step the clock mid-run. Their monotonic clocks are left alone, as NTP or
//! an operator's `date -s` would leave them.
//!
//! No node's wall clock is judged against another's: every time one node writes and
//! another judges is read from the cluster's clock (Redis's, `ClusterClock`), so node 1's
//! offset goes to a minute either way. A runner's wall clock is never compared with
//! anything, so its offset goes to hours either way.

use std::path::{Path, PathBuf};

/// The largest offset a node's wall clock is given: far past every threshold of the drill
/// (`runner_lost_after` is 14 s), which would all break if a node's own clock entered.
pub const NODE_SKEW_S: f64 = 60.0;
/// A runner's clock may be anywhere.
pub const RUNNER_SKEW_S: f64 = 2.0 * 3600.0;

/// Where Debian puts the library, on any architecture.
pub fn faketime_library() -> Option<PathBuf> {
    let dirs = std::fs::read_dir("/usr/lib").ok()?;
    dirs.flatten()
        .map(|arch| arch.path().join("faketime/libfaketime.so.1"))
        .find(|lib| lib.exists())
}

/// One process's clock offset.
#[derive(Debug, Clone)]
pub struct SkewedClock {
    file: PathBuf,
    library: PathBuf,
}

impl SkewedClock {
    /// A clock at offset zero, its offset kept in `file`.
    pub fn new(file: &Path, library: PathBuf) -> std::io::Result<SkewedClock> {
        let clock = SkewedClock {
            file: file.to_path_buf(),
            library,
        };
        clock.set(0.0)?;
        Ok(clock)
    }

    /// The environment that puts a process on this clock. The offset file is read again
    /// every second, so a step takes effect within one.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", self.library.display().to_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_CACHE_DURATION", "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .to_vec()
    }

    /// Steps the clock to `offset_s` from the real time.
    pub fn set(&self, offset_s: f64) -> std::io::Result<()> {
        std::fs::write(&self.file, format!("{offset_s:+.3}\n"))
    }
}
