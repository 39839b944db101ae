//! The folder a `baton dev` run keeps everything in: logs, the Redis and nginx folders,
//! the runners' state, and (when the `postgres` user can reach it) the Postgres cluster.

use anyhow::Context;
use std::path::{Path, PathBuf};

/// Marks a folder as made by `baton dev`, so wiping never hits a folder someone passed to
/// `--dir` by mistake (their home, a checkout).
const MARKER: &str = ".baton-dev-dir";

/// The folder, by its absolute path, and the places in it.
#[derive(Debug, Clone)]
pub struct WorkDir {
    root: PathBuf,
}

impl WorkDir {
    /// Wipes and recreates `dir`, so each run starts from nothing and is reproducible.
    pub fn recreate(dir: &Path) -> anyhow::Result<Self> {
        if dir.exists() {
            let empty = std::fs::read_dir(dir)
                .with_context(|| format!("reading {}", dir.display()))?
                .next()
                .is_none();
            if !empty && !dir.join(MARKER).exists() {
                anyhow::bail!(
                    "refusing to wipe {}: it is not empty and was not made by `baton dev` \
                     (no {MARKER} in it); pass another --dir",
                    dir.display()
                );
            }
            std::fs::remove_dir_all(dir).with_context(|| format!("wiping {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(
            dir.join(MARKER),
            "made by `baton dev`, which wipes this folder at each start\n",
        )?;
        Self::open(dir)
    }

    /// Uses `dir` as it is, making it and its subfolders: for a folder that is new anyway
    /// (a test's own), where there is nothing to wipe.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        // Absolute, since nginx and the runners resolve paths from elsewhere.
        let root = std::fs::canonicalize(dir)?;
        let work = WorkDir { root };
        for sub in ["logs", "redis", "nginx"] {
            std::fs::create_dir_all(work.root.join(sub))?;
        }
        Ok(work)
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<dir>/logs`, one file per process.
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// `<dir>/logs/<name>.log`.
    pub fn log(&self, name: &str) -> PathBuf {
        self.logs().join(format!("{name}.log"))
    }

    /// A path inside it.
    pub fn join(&self, sub: &str) -> PathBuf {
        self.root.join(sub)
    }
}
