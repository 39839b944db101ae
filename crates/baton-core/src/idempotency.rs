//! Idempotency keys belong to whoever submits: the same key from two API tokens names two
//! tasks. A key is stored with its owner in front (`<owner>:<key>`), so the one unique
//! index over stored keys holds per owner, and nobody can claim another's key in advance
//! (their submit would never run) or read another's task through it.

/// The key as stored for `owner`.
pub fn scoped(owner: &str, key: &str) -> String {
    format!("{owner}:{key}")
}

/// The key as its owner gave it. A stored key without the owner's prefix (written before
/// keys were scoped) is shown as it is.
pub fn unscoped<'a>(owner: &str, stored: &'a str) -> &'a str {
    stored
        .strip_prefix(owner)
        .and_then(|rest| rest.strip_prefix(':'))
        .unwrap_or(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_stored_under_its_owner_and_shown_as_given() {
        let stored = scoped("tok-1", "deploy:42");
        assert_eq!(stored, "tok-1:deploy:42");
        assert_ne!(stored, scoped("tok-2", "deploy:42"));
        assert_eq!(unscoped("tok-1", &stored), "deploy:42");
        assert_eq!(unscoped("tok-2", "old-key"), "old-key");
    }
}
