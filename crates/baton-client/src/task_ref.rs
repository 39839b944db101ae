//! A task as a caller names it in a path: its whole id, or its short id — the last 12 hex
//! digits, the random end of a UUIDv7, which the console's and the CLI's tables show. The
//! server looks a short id up among the tasks the caller may see: none is a 404, several
//! a 409 (`ambiguous_id`) whose message lists them.

use std::fmt;
use uuid::Uuid;

/// How many hex digits a short id has.
pub const SHORT_ID_LEN: usize = 12;

/// The short id of `id`: what tables show, and what a path may name the task by.
pub fn short_id(id: Uuid) -> String {
    let hex = id.simple().to_string();
    hex[hex.len() - SHORT_ID_LEN..].to_string()
}

/// A task named by its whole id or by its short id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TaskRef {
    /// The whole id.
    Id(Uuid),
    /// The last [`SHORT_ID_LEN`] hex digits of the id, lower case.
    Short(String),
}

impl TaskRef {
    /// The whole id, when that is what was given.
    pub fn id(&self) -> Option<Uuid> {
        match self {
            TaskRef::Id(id) => Some(*id),
            TaskRef::Short(_) => None,
        }
    }
}

impl From<Uuid> for TaskRef {
    fn from(id: Uuid) -> TaskRef {
        TaskRef::Id(id)
    }
}

impl std::str::FromStr for TaskRef {
    type Err = String;

    /// The forms the server takes, so that nothing it would answer is refused before the
    /// request, and nothing it would refuse is sent.
    fn from_str(s: &str) -> Result<TaskRef, String> {
        if let Ok(id) = Uuid::parse_str(s) {
            return Ok(TaskRef::Id(id));
        }
        if s.len() == SHORT_ID_LEN && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(TaskRef::Short(s.to_ascii_lowercase()));
        }
        Err(format!(
            "{:?} is not a task id: give the whole id (a UUID) or its short id, the last \
             {SHORT_ID_LEN} hex digits that tables show",
            s.chars().take(64).collect::<String>()
        ))
    }
}

/// As a server reads a path segment: either form, or a refusal saying what is taken.
impl<'de> serde::Deserialize<'de> for TaskRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TaskRef, D::Error> {
        let text = std::borrow::Cow::<str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// As a path segment takes it: both forms are URL-safe as they are.
impl fmt::Display for TaskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskRef::Id(id) => id.fmt(f),
            TaskRef::Short(short) => f.write_str(short),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_id_or_twelve_hex_digits_and_nothing_else() {
        let id = Uuid::now_v7();
        assert_eq!(id.to_string().parse::<TaskRef>(), Ok(TaskRef::Id(id)));
        let short = short_id(id);
        assert_eq!(short.len(), SHORT_ID_LEN);
        assert!(id.to_string().ends_with(&short));
        assert_eq!(
            short.to_ascii_uppercase().parse::<TaskRef>(),
            Ok(TaskRef::Short(short.clone())),
            "read in either case, sent in lower"
        );
        for bad in ["", "abc", "0123456789abc", "0123456789ag", "not-a-uuid"] {
            let refused = bad.parse::<TaskRef>().unwrap_err();
            assert!(refused.contains("short id"), "{bad:?}: {refused}");
        }
        assert_eq!(TaskRef::Short(short.clone()).to_string(), short);
    }
}
