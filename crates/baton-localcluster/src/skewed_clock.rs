//! A process's wall clock moved, through libfaketime (Debian `faketime`): the process reads
//! its wall clock through an offset kept in a file, which can be rewritten to step the
//! clock while it runs. Monotonic clocks are left alone, as NTP or an operator's `date -s`
//! would leave them. The drill skews node 1 and runner 1 this way; `tests/clock_skew.rs`
//! starts a node behind.

use std::path::{Path, PathBuf};

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
