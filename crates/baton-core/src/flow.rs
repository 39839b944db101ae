//! Flow control (docs/flow-control.md): concurrency groups.
//!
//! A concurrency group is named by a task's `concurrency_key`: at most
//! `concurrency_limit` tasks of one key hold a lease (leased, running or cancelling) at
//! once across the cluster. The lease script enforces it atomically with the claim
//! (`baton-coord`'s `lua/groups.lua`); this module holds what needs no Redis: what a valid
//! group is.

use crate::validate::Invalid;

/// The longest concurrency key, in characters: room for a tenant and a resource name,
/// short enough to spend in a Redis key name per group.
pub const MAX_KEY_CHARS: usize = 128;

/// The highest limit: far above any real cluster's capacity, small enough that a typo of
/// a few digits is refused rather than read as "unlimited".
pub const MAX_LIMIT: i64 = 10_000;

/// A task's concurrency group, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The group's name: tasks with the same key share its limit.
    pub key: String,
    /// How many of the group's tasks may be dispatched at once.
    pub limit: i32,
}

/// Checks what a submit gave. A key without a limit is a group of one (a mutex: the
/// common case of "never two of these at once"); a limit without a key has nothing to
/// limit and is refused rather than ignored.
pub fn check_group(key: Option<&str>, limit: Option<i64>) -> Result<Option<Group>, Invalid> {
    let key = match (key, limit) {
        (None, None) => return Ok(None),
        (None, Some(_)) => {
            return Err(Invalid::new(
                "concurrency_limit",
                "a concurrency_limit needs a concurrency_key naming the group it limits",
            ));
        }
        (Some(key), _) => key,
    };
    if key.is_empty() || key.chars().count() > MAX_KEY_CHARS || key.chars().any(char::is_control) {
        return Err(Invalid::new(
            "concurrency_key",
            format!("must be 1-{MAX_KEY_CHARS} printable characters"),
        ));
    }
    let limit = limit.unwrap_or(1);
    crate::validate::check_range("concurrency_limit", limit, 1, MAX_LIMIT)?;
    Ok(Some(Group {
        key: key.to_string(),
        limit: i32::try_from(limit).expect("bounded by MAX_LIMIT"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_group_is_fine() {
        assert_eq!(check_group(None, None), Ok(None));
    }

    #[test]
    fn a_key_alone_is_a_mutex() {
        let g = check_group(Some("tenant-1"), None).unwrap().unwrap();
        assert_eq!((g.key.as_str(), g.limit), ("tenant-1", 1));
    }

    #[test]
    fn bad_groups_name_their_field() {
        let field =
            |key: Option<&str>, limit: Option<i64>| check_group(key, limit).unwrap_err().field;
        assert_eq!(field(None, Some(2)), "concurrency_limit");
        assert_eq!(field(Some("k"), Some(0)), "concurrency_limit");
        assert_eq!(field(Some("k"), Some(-3)), "concurrency_limit");
        assert_eq!(field(Some("k"), Some(MAX_LIMIT + 1)), "concurrency_limit");
        assert_eq!(field(Some("k"), Some(i64::MAX)), "concurrency_limit");
        assert_eq!(field(Some(""), Some(2)), "concurrency_key");
        assert_eq!(field(Some("a\nb"), None), "concurrency_key");
        let long = "k".repeat(MAX_KEY_CHARS + 1);
        assert_eq!(field(Some(&long), Some(2)), "concurrency_key");
    }

    #[test]
    fn limits_at_the_bounds_pass() {
        let long = "é".repeat(MAX_KEY_CHARS);
        assert_eq!(check_group(Some(&long), Some(1)).unwrap().unwrap().limit, 1);
        assert_eq!(
            check_group(Some("k"), Some(MAX_LIMIT))
                .unwrap()
                .unwrap()
                .limit,
            MAX_LIMIT as i32
        );
    }
}
