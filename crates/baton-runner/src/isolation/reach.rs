//! Whether a task's user can get to a folder at all. Root gets everywhere; a task runs as
//! another uid, in no folder's group, so each folder on the way must let *others* pass
//! (`o+x`). A checkout under `/root` (0700) or any `mktemp -d` does not: there a task
//! could not even enter its own work dir.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The first folder on the way to `dir` (itself excluded: the agent makes that one
/// passable) that a user other than its owner and group cannot pass through, if any.
/// `dir` must be absolute and exist.
pub(crate) fn first_closed_ancestor(dir: &Path) -> Option<PathBuf> {
    let mut ancestors: Vec<&Path> = dir.ancestors().skip(1).collect();
    ancestors.reverse();
    ancestors.into_iter().find_map(|folder| {
        let mode = std::fs::metadata(folder).ok()?.permissions().mode();
        (mode & 0o001 == 0).then(|| folder.to_path_buf())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;

    #[test]
    fn the_closed_folder_nearest_the_root_is_named() {
        let top = std::env::temp_dir().join(format!("reach-{}", uuid::Uuid::new_v4().simple()));
        let (open, closed) = (top.join("open"), top.join("open/closed"));
        let inner = closed.join("a/b");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::set_permissions(&top, Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&open, Permissions::from_mode(0o711)).unwrap();
        std::fs::set_permissions(&closed, Permissions::from_mode(0o700)).unwrap();
        assert_eq!(first_closed_ancestor(&inner), Some(closed.clone()));
        // The folder itself does not count: the agent opens it.
        assert_eq!(
            first_closed_ancestor(&closed.join("a")),
            Some(closed.clone())
        );
        std::fs::set_permissions(&closed, Permissions::from_mode(0o701)).unwrap();
        assert_eq!(first_closed_ancestor(&inner), None);
        std::fs::remove_dir_all(&top).unwrap();
    }
}
