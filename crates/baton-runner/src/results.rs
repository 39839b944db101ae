//! Results not yet taken by the server, kept on disk. A task's completion is written here
//! before it is first sent and removed once a node has answered it (recorded, or refused
//! for good: a stale lease, an unknown task). While the agent lives it keeps sending;
//! when it stops (or dies) first — all nodes away, Postgres out longer than anyone waits —
//! its next start sends what it finds here before anything else, so a run that finished
//! is never reported as lost because nobody was there to hear it.

use baton_client::CompletionItem;
use baton_core::LeaseId;
use std::path::{Path, PathBuf};

/// Kept this long at most: by then the server has long ended the run another way.
const KEPT_AT_MOST: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Clone)]
pub(crate) struct ResultSpool {
    dir: PathBuf,
}

impl ResultSpool {
    /// The spool in `dir` (made if missing, owner-only).
    pub(crate) fn open(dir: &Path) -> std::io::Result<ResultSpool> {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        Ok(ResultSpool {
            dir: dir.to_path_buf(),
        })
    }

    fn file(&self, lease_id: LeaseId) -> PathBuf {
        self.dir.join(format!("{lease_id}.json"))
    }

    /// Keeps `result` until [`taken`](Self::taken): written whole or not at all. Its log
    /// tail is kept without marks: an agent of an earlier release, started on this state
    /// folder after a rollback, reads no field it does not know and would drop the result.
    pub(crate) fn keep(&self, result: &CompletionItem) -> std::io::Result<()> {
        let mut kept = result.clone();
        if let Some(tail) = kept.log_tail.as_mut() {
            tail.marks = None;
        }
        crate::owner_only::write(&self.file(kept.lease_id), &serde_json::to_vec(&kept)?)
    }

    /// The server has it (or will never take it): forgotten.
    pub(crate) fn taken(&self, lease_id: LeaseId) {
        let file = self.file(lease_id);
        if let Err(e) = std::fs::remove_file(&file)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(file = %file.display(), error = %e, "a delivered result stays on disk");
        }
    }

    /// Every result kept, oldest first; ones kept too long, or unreadable, are dropped.
    pub(crate) fn pending(&self) -> Vec<CompletionItem> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut kept = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                let _ = std::fs::remove_file(&path); // a write cut short
                continue;
            }
            let age = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|at| at.elapsed().ok())
                .unwrap_or_default();
            match std::fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<CompletionItem>(&bytes).ok())
            {
                Some(result) if age < KEPT_AT_MOST => kept.push((age, result)),
                _ => {
                    tracing::warn!(file = %path.display(), "dropping a kept result that is unreadable or too old");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        kept.sort_by_key(|(age, _)| std::cmp::Reverse(*age));
        kept.into_iter().map(|(_, result)| result).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn result(lease_id: LeaseId) -> CompletionItem {
        CompletionItem::succeeded(Uuid::new_v4(), lease_id)
    }

    #[test]
    fn a_result_is_kept_owner_only_until_taken() {
        let dir = std::env::temp_dir().join(format!("baton-results-{}", Uuid::new_v4()));
        let spool = ResultSpool::open(&dir).unwrap();
        let (a, b) = (result(LeaseId::random()), result(LeaseId::random()));
        spool.keep(&a).unwrap();
        spool.keep(&b).unwrap();
        std::fs::write(dir.join("cut-short.json.tmp"), b"{").unwrap();
        let mut pending = spool.pending();
        pending.sort_by_key(|r| r.lease_id);
        let mut expected = vec![a.clone(), b.clone()];
        expected.sort_by_key(|r| r.lease_id);
        assert_eq!(pending, expected);
        let mode = std::fs::metadata(spool.file(a.lease_id))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        spool.taken(a.lease_id);
        assert_eq!(spool.pending(), vec![b]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
