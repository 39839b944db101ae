//! Field rules for what clients send. A failure names the field so the API can answer
//! 422 with a message the user can act on.

use std::collections::BTreeMap;

/// A well-formed but invalid value, attributed to a field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    /// The request field at fault.
    pub field: String,
    /// What is wrong with it, for the caller.
    pub message: String,
}

impl Invalid {
    /// A refusal of `field` with `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A name of 1..=max characters whose first is an ASCII letter or digit and whose every
/// character passes `allowed`.
pub(crate) fn check_name(
    field: &str,
    value: &str,
    max: usize,
    allowed: impl Fn(char) -> bool,
) -> Result<(), Invalid> {
    let first_ok = value
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    if !first_ok || value.len() > max || !value.chars().all(allowed) {
        return Err(Invalid::new(
            field,
            format!(
                "{value:?} is not a valid name: 1-{max} characters, starting with a letter or digit"
            ),
        ));
    }
    Ok(())
}

/// The queue a task goes to when it names none.
pub const DEFAULT_QUEUE: &str = "default";

/// Queue names match `[a-z0-9][a-z0-9._-]{0,63}` (design.md §2).
pub fn check_queue(queue: &str) -> Result<(), Invalid> {
    check_name("queue", queue, 64, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
    })
    .map_err(|_| {
        Invalid::new(
            "queue",
            format!(
                "{queue:?} is not a valid queue name: it must match [a-z0-9][a-z0-9._-]{{0,63}}"
            ),
        )
    })
}

/// Priority bounds keep the queue score exact in a double (see `queue_order::score`).
pub const PRIORITY_MIN: i32 = -1000;
/// The highest priority a task may have.
pub const PRIORITY_MAX: i32 = 1000;

/// Checks that `priority` is within [`PRIORITY_MIN`], [`PRIORITY_MAX`].
pub fn check_priority(priority: i32) -> Result<(), Invalid> {
    check_range("priority", priority, PRIORITY_MIN, PRIORITY_MAX)
}

/// A number within `min..=max`: every bound a client is held to is told this one way.
pub fn check_range<T>(field: &str, value: T, min: T, max: T) -> Result<(), Invalid>
where
    T: PartialOrd + std::fmt::Display,
{
    in_range(field, value, min, max, "")
}

/// A byte offset or count (of a task's output): the schemas say `minimum = 0`; this is the
/// answer to a client that sends a negative one anyway.
pub fn check_not_negative(field: &str, value: i64) -> Result<i64, Invalid> {
    if value < 0 {
        return Err(Invalid::new(field, "must not be negative"));
    }
    Ok(value)
}

/// A duration in seconds within `1..=max`.
pub fn check_seconds(field: &str, value: i64, max: i64) -> Result<(), Invalid> {
    in_range(field, value, 1, max, " seconds")
}

fn in_range<T>(field: &str, value: T, min: T, max: T, unit: &str) -> Result<(), Invalid>
where
    T: PartialOrd + std::fmt::Display,
{
    if value < min || value > max {
        return Err(Invalid::new(
            field,
            format!("must be between {min} and {max}{unit}, got {value}"),
        ));
    }
    Ok(())
}

/// What a task runs: an argv, or a script for `sh -c` — exactly one, never empty.
pub fn check_command(command: Option<&[String]>, script: Option<&str>) -> Result<(), Invalid> {
    match (command, script) {
        (Some(_), Some(_)) => Err(Invalid::new(
            "command",
            "give either command or script, not both",
        )),
        (None, None) => Err(Invalid::new(
            "command",
            "a task needs a command (argv) or a script",
        )),
        (Some(argv), None) if argv.is_empty() || argv[0].is_empty() => Err(Invalid::new(
            "command",
            "command must be a non-empty argv whose first element names a program",
        )),
        (Some(argv), None) if argv.iter().any(|a| a.contains('\0')) => Err(Invalid::new(
            "command",
            "arguments cannot contain NUL bytes",
        )),
        (None, Some(s)) if s.trim().is_empty() => {
            Err(Invalid::new("script", "script must not be empty"))
        }
        (None, Some(s)) if s.contains('\0') => {
            Err(Invalid::new("script", "script cannot contain NUL bytes"))
        }
        _ => Ok(()),
    }
}

/// The longest string `execve` takes, each argument and each `NAME=value` alike (Linux's
/// `MAX_ARG_STRLEN`, 32 pages): a longer one makes the exec fail on the runner.
pub const MAX_EXEC_STRING_BYTES: usize = 128 * 1024;

/// What a task's command, script and environment may add up to: half of Linux's
/// `ARG_MAX` for a default 8 MiB stack (2 MiB), the rest left to the variables the runner
/// sets and the pointers.
pub const MAX_EXEC_TOTAL_BYTES: usize = 1024 * 1024;

/// What the runner will hand to `execve` must fit what `execve` takes, or the task would
/// be accepted only to fail on a runner: each argument (a script is one, after `sh -c`)
/// and each variable at most [`MAX_EXEC_STRING_BYTES`], all of them together at most
/// [`MAX_EXEC_TOTAL_BYTES`].
pub fn check_exec_size<'a>(
    command: Option<&[String]>,
    script: Option<&str>,
    env: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), Invalid> {
    // Each string counts its terminating NUL, as the kernel counts it.
    let mut total = 0usize;
    for arg in command.into_iter().flatten() {
        if arg.len() + 1 > MAX_EXEC_STRING_BYTES {
            return Err(Invalid::new(
                "command",
                format!(
                    "each argument may be at most {} bytes",
                    MAX_EXEC_STRING_BYTES - 1
                ),
            ));
        }
        total += arg.len() + 1;
    }
    if let Some(script) = script {
        if script.len() + 1 > MAX_EXEC_STRING_BYTES {
            return Err(Invalid::new(
                "script",
                format!("may be at most {} bytes", MAX_EXEC_STRING_BYTES - 1),
            ));
        }
        total += script.len() + 1;
    }
    for (name, value) in env {
        let entry = name.len() + 1 + value.len() + 1;
        if entry > MAX_EXEC_STRING_BYTES {
            return Err(Invalid::new(
                "env",
                format!(
                    "{name}: a variable may be at most {} bytes, name and value together",
                    MAX_EXEC_STRING_BYTES - 2
                ),
            ));
        }
        total += entry;
    }
    if total > MAX_EXEC_TOTAL_BYTES {
        return Err(Invalid::new(
            "command",
            format!(
                "the command or script and the environment together may be at most \
                 {MAX_EXEC_TOTAL_BYTES} bytes, got {total}"
            ),
        ));
    }
    Ok(())
}

/// Environment variable names are POSIX-portable (`[A-Za-z_][A-Za-z0-9_]*`) and values
/// carry no NUL, so what the runner sets is exactly what was submitted.
pub fn check_env(env: &BTreeMap<String, String>, max_vars: usize) -> Result<(), Invalid> {
    if env.len() > max_vars {
        return Err(Invalid::new(
            "env",
            format!(
                "at most {max_vars} variables are allowed, got {}",
                env.len()
            ),
        ));
    }
    for (name, value) in env {
        let mut chars = name.chars();
        let ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && name.len() <= 256;
        if !ok {
            return Err(Invalid::new(
                "env",
                format!("{name:?} is not a valid variable name"),
            ));
        }
        if value.contains('\0') {
            return Err(Invalid::new(
                "env",
                format!("the value of {name} contains a NUL byte"),
            ));
        }
    }
    Ok(())
}

/// Idempotency keys are opaque to us, but bounded and printable.
pub fn check_idempotency_key(key: &str) -> Result<(), Invalid> {
    if key.is_empty() || key.chars().count() > 255 || key.chars().any(|c| c.is_control()) {
        return Err(Invalid::new(
            "idempotency_key",
            "must be 1-255 printable characters",
        ));
    }
    Ok(())
}

/// Numbers Postgres' `jsonb` stores and gives back intact: a float near the ends of the
/// double range comes back as a decimal too long to read as one. (`serde_json::Value`
/// numbers, walked without depending on serde_json here: the caller passes each float.)
pub fn check_json_float(field: &str, value: f64) -> Result<(), Invalid> {
    if value.is_finite() && value.abs() < 1e300 {
        return Ok(());
    }
    Err(Invalid::new(
        field,
        "numbers must lie between -1e300 and 1e300",
    ))
}

#[cfg(test)]
mod tests {

    #[test]
    fn what_execve_would_refuse_is_refused_at_submit() {
        let none = std::collections::BTreeMap::<String, String>::new();
        let big = "x".repeat(MAX_EXEC_STRING_BYTES);
        let fits = "x".repeat(MAX_EXEC_STRING_BYTES - 1);
        assert!(check_exec_size(Some(std::slice::from_ref(&fits)), None, &none).is_ok());
        assert_eq!(
            check_exec_size(Some(std::slice::from_ref(&big)), None, &none)
                .unwrap_err()
                .field,
            "command"
        );
        assert_eq!(
            check_exec_size(None, Some(&big), &none).unwrap_err().field,
            "script"
        );
        let env = std::collections::BTreeMap::from([("A".to_string(), big)]);
        assert_eq!(
            check_exec_size(None, Some("true"), &env).unwrap_err().field,
            "env"
        );
        // Each fits, together they do not.
        let many = vec![fits; 9];
        let total = check_exec_size(Some(&many), None, &none).unwrap_err();
        assert!(total.message.contains("together"), "{}", total.message);
    }

    use super::*;

    #[test]
    fn queue_names() {
        for good in ["default", "a", "builds.linux", "q_1-2", &"a".repeat(64)] {
            assert!(check_queue(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Default",
            "-a",
            ".a",
            "a b",
            "a:b",
            "a/b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(check_queue(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn commands() {
        let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_command(Some(&argv(&["echo", "hi"])), None).is_ok());
        assert!(check_command(None, Some("echo hi")).is_ok());
        assert!(check_command(None, None).is_err());
        assert!(check_command(Some(&[]), None).is_err());
        assert!(check_command(Some(&argv(&[""])), None).is_err());
        assert!(check_command(Some(&argv(&["a\0b"])), None).is_err());
        assert!(check_command(Some(&argv(&["echo"])), Some("echo")).is_err());
        assert!(check_command(None, Some("  ")).is_err());
    }

    #[test]
    fn env_names() {
        let env = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(check_env(&env(&[("A", "1"), ("_b2", "x")]), 10).is_ok());
        assert!(check_env(&env(&[("1A", "1")]), 10).is_err());
        assert!(check_env(&env(&[("A-B", "1")]), 10).is_err());
        assert!(check_env(&env(&[("", "1")]), 10).is_err());
        assert!(check_env(&env(&[("A", "a\0")]), 10).is_err());
        assert!(check_env(&env(&[("A", "1"), ("B", "2")]), 1).is_err());
    }

    #[test]
    fn bounds() {
        assert!(check_priority(PRIORITY_MAX).is_ok());
        assert!(check_priority(PRIORITY_MIN).is_ok());
        assert!(check_priority(PRIORITY_MAX + 1).is_err());
        assert!(check_seconds("timeout_s", 0, 10).is_err());
        assert!(check_seconds("timeout_s", 10, 10).is_ok());
        assert!(check_seconds("timeout_s", 11, 10).is_err());
        assert!(check_idempotency_key("k-1").is_ok());
        assert!(check_idempotency_key("").is_err());
        assert!(check_idempotency_key("a\nb").is_err());
    }
}
