//! Runner/server version skew. During a rolling upgrade old and new nodes serve side by
//! side and runners are upgraded on their own schedule, so the runner protocol only grows
//! (new fields are optional, old ones stay: the expand/contract rule of
//! `migrations/README.md`). A runner is refused only when it is older than the oldest
//! protocol this server still speaks, or from another major version.

use std::fmt;

/// The oldest runner this server still serves. Raise it only when a contract step
/// removes something older runners rely on.
pub const MIN_RUNNER_VERSION: Version = Version {
    major: 0,
    minor: 1,
    patch: 0,
};

/// A release's semantic version: `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// The major number.
    pub major: u64,
    /// The minor number.
    pub minor: u64,
    /// The patch number.
    pub patch: u64,
}

impl Version {
    /// `MAJOR.MINOR.PATCH`, with any `-pre`/`+build` suffix ignored.
    pub fn parse(text: &str) -> Option<Version> {
        let core = text.trim().split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
        let version = Version {
            major: parts.next()??,
            minor: parts.next()??,
            patch: parts.next()??,
        };
        parts.next().is_none().then_some(version)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Whether a runner reporting `runner` may talk to a server of version `server`; the
/// reason it may not, worded for the runner's operator, otherwise.
pub fn runner_compatible(server: Version, runner: &str) -> Result<(), String> {
    let Some(version) = Version::parse(runner) else {
        return Err(format!(
            "runner version {runner:?} is not MAJOR.MINOR.PATCH; this server ({server}) serves runners {MIN_RUNNER_VERSION} and newer within major {}",
            server.major
        ));
    };
    if version.major != server.major {
        return Err(format!(
            "runner {version} speaks another major version of the protocol than this server ({server}); use a {}.x runner",
            server.major
        ));
    }
    if version < MIN_RUNNER_VERSION {
        return Err(format!(
            "runner {version} is older than the oldest this server ({server}) supports ({MIN_RUNNER_VERSION}); upgrade the runner"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    #[test]
    fn parses_semver_and_ignores_suffixes() {
        assert_eq!(
            v("1.2.3"),
            Version {
                major: 1,
                minor: 2,
                patch: 3
            }
        );
        assert_eq!(v("0.1.0-rc.1+abc"), v("0.1.0"));
        for bad in ["", "1", "1.2", "1.2.3.4", "a.b.c", "1.-2.3"] {
            assert_eq!(Version::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn compatible_means_same_major_and_not_older_than_the_minimum() {
        let server = v("0.3.0");
        // Older but still supported, the same, and newer (runner upgraded first).
        for ok in ["0.1.0", "0.1.7", "0.3.0", "0.9.2"] {
            assert_eq!(runner_compatible(server, ok), Ok(()), "{ok}");
        }
        let too_old = runner_compatible(server, "0.0.9").unwrap_err();
        assert!(too_old.contains("upgrade the runner"), "{too_old}");
        let other_major = runner_compatible(server, "1.0.0").unwrap_err();
        assert!(
            other_major.contains("another major version"),
            "{other_major}"
        );
        assert!(runner_compatible(server, "latest").is_err());
    }
}
