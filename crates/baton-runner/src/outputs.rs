//! A task's outputs (docs/pipelines.md): the task writes `name=value` lines to the file
//! `$BATON_OUTPUT` names, in its own work dir, as GitHub Actions' `$GITHUB_OUTPUT`; once
//! it has exited, the agent reads them and reports them with its result. A pipeline's
//! job gets those of the jobs it needs as `BATON_NEEDS_<JOB>_<NAME>`.
//!
//! The file is the task's, so it is read as such: never through a link (a task could
//! point it at a file of the agent's), only a regular file, only its first
//! [`MAX_BYTES`]; a line that is no `name=value` is skipped.

use serde_json::{Map, Value};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The variable naming the file.
pub(crate) const VAR: &str = "BATON_OUTPUT";

/// The most of the file read.
pub(crate) const MAX_BYTES: u64 = 64 << 10;

/// The most outputs kept (the first, in the file's order, a later line naming one again
/// replacing its value).
pub(crate) const MAX_OUTPUTS: usize = 64;

/// Where a task with work dir `dir` writes its outputs.
pub(crate) fn file_in(dir: &Path) -> PathBuf {
    dir.join(".baton-output")
}

/// The outputs written in `dir`'s file, if there are any.
pub(crate) fn read(dir: &Path) -> Option<Value> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(file_in(dir))
        .ok()?;
    // A regular file of the task's own making: not a device or a FIFO, nor a hard link
    // to a file of someone else's (a task isolated under a uid of its own could link a
    // file of the agent's it cannot read, where links to such files are allowed).
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.nlink() != 1 {
        return None;
    }
    let mut text = String::new();
    let mut bytes = Vec::new();
    file.take(MAX_BYTES).read_to_end(&mut bytes).ok()?;
    text.push_str(&String::from_utf8_lossy(&bytes));
    let outputs = parse(&text);
    (!outputs.is_empty()).then_some(Value::Object(outputs))
}

/// `name=value` lines; a name is a letter or `_`, then letters, digits, `_`, `-` or `.`,
/// at most 64 of them.
fn parse(text: &str) -> Map<String, Value> {
    let mut outputs = Map::new();
    for line in text.lines() {
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        let well_named = name.len() <= 64
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !well_named || (outputs.len() >= MAX_OUTPUTS && !outputs.contains_key(name)) {
            continue;
        }
        outputs.insert(name.to_string(), Value::String(cleaned(value)));
    }
    outputs
}

/// The most bytes of one value kept: what a dependent gets of it
/// (`baton_core::pipeline::MAX_NEEDS_VALUE_BYTES`).
const MAX_VALUE_BYTES: usize = baton_core::pipeline::MAX_NEEDS_VALUE_BYTES;

/// A value as it is reported: control characters but tabs left out (a NUL cannot be
/// stored, and none belongs in a variable), cut to [`MAX_VALUE_BYTES`] at a character's
/// edge.
fn cleaned(value: &str) -> String {
    let mut kept = String::with_capacity(value.len().min(MAX_VALUE_BYTES));
    for c in value.chars().filter(|c| *c == '\t' || !c.is_control()) {
        if kept.len() + c.len_utf8() > MAX_VALUE_BYTES {
            break;
        }
        kept.push(c);
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_outputs_and_the_rest_is_skipped() {
        let got = parse("version=1.2.3\nnot a line\n=x\n9lives=no\nimage.tag=a=b\nversion=1.2.4\n");
        assert_eq!(
            Value::Object(got),
            serde_json::json!({"version": "1.2.4", "image.tag": "a=b"})
        );
    }

    #[test]
    fn values_lose_control_characters_and_are_cut_at_a_characters_edge() {
        assert_eq!(cleaned("a\u{0}b\tc\u{1b}d"), "ab\tcd");
        let long = "é".repeat(3000);
        let cut = cleaned(&long);
        assert!(cut.len() <= MAX_VALUE_BYTES && cut.len() > MAX_VALUE_BYTES - 2);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_link_is_never_followed() {
        let dir = std::env::temp_dir().join(format!("baton-outputs-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, "token=hunter2\n").unwrap();
        std::os::unix::fs::symlink(&secret, file_in(&dir)).unwrap();
        assert_eq!(read(&dir), None);
        std::fs::remove_file(file_in(&dir)).unwrap();
        std::fs::hard_link(&secret, file_in(&dir)).unwrap();
        assert_eq!(read(&dir), None, "nor a hard link");
        std::fs::remove_file(file_in(&dir)).unwrap();
        std::fs::write(file_in(&dir), "ok=yes\n").unwrap();
        assert_eq!(read(&dir), Some(serde_json::json!({"ok": "yes"})));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
