//! The runner's identity, kept in its state directory: registered once, reused on every
//! start. The token is a secret: the file is written owner-only, atomically
//! ([`crate::owner_only`]).

use anyhow::Context;
use baton_core::RunnerId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// This runner's identity with its server, kept in the state dir between starts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Registration {
    /// The id the server gave this runner.
    pub runner_id: RunnerId,
    /// The secret the runner calls the server with.
    pub token: String,
    /// The server it was registered with; a different server means a new registration.
    pub server: String,
}

const FILE: &str = "runner.json";

fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

impl Registration {
    /// The identity kept in `state_dir`, or `None` when this runner never registered.
    pub fn load(state_dir: &Path) -> anyhow::Result<Option<Registration>> {
        let file = path(state_dir);
        match std::fs::read(&file) {
            Ok(bytes) => Ok(Some(
                serde_json::from_slice(&bytes)
                    .with_context(|| format!("reading {}", file.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", file.display())),
        }
    }

    /// Keeps the identity in `state_dir`, readable by its owner only.
    pub fn save(&self, state_dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating {}", state_dir.display()))?;
        let file = path(state_dir);
        crate::owner_only::write(&file, &serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", file.display()))
    }

    /// Forgets the identity: the server no longer knows this runner.
    pub fn remove(state_dir: &Path) -> anyhow::Result<()> {
        match std::fs::remove_file(path(state_dir)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn saves_owner_only_and_loads_back() {
        let dir = std::env::temp_dir().join(format!("baton-reg-{}", uuid::Uuid::new_v4()));
        assert_eq!(Registration::load(&dir).unwrap(), None);
        let reg = Registration {
            runner_id: RunnerId::random(),
            token: "brt_x".into(),
            server: "http://s".into(),
        };
        reg.save(&dir).unwrap();
        assert_eq!(Registration::load(&dir).unwrap(), Some(reg));
        let mode = std::fs::metadata(dir.join(FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        Registration::remove(&dir).unwrap();
        assert_eq!(Registration::load(&dir).unwrap(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
