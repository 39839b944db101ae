//! A task's own retry policy: how long to wait between attempts, and which failed runs
//! deserve another attempt at all. `max_attempts` still bounds how many there are; the
//! policy only narrows which failures use them and spaces them out.
//!
//! The policy is resolved when the task is submitted — every field the submitter left
//! out takes its queue's default, then the node's — and stored so. What a task's view shows is therefore
//! exactly what its run ends apply, and a node with other defaults changes nothing for
//! tasks already accepted.

use crate::backoff::Backoff;
use crate::validate::Invalid;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// `retry` on submit, and as stored with the task (resolved).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// The wait before the first retry, in seconds (default: the node's, 2 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0, maximum = 86400))]
    pub backoff_base_s: Option<f64>,
    /// Each further retry waits this many times longer (default 2; 1 keeps it constant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 100))]
    pub backoff_factor: Option<f64>,
    /// No wait is longer than this, in seconds (default: the node's, 5 min).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(exclusive_minimum = 0, maximum = 604800))]
    pub backoff_cap_s: Option<f64>,
    /// Relative spread of each wait: 0.2 means ±20 % (default 0.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0, maximum = 1))]
    pub jitter: Option<f64>,
    /// Retry a run that exited with one of these codes only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 64))]
    pub on_exit_codes: Option<Vec<i32>>,
    /// Never retry a run that exited with one of these codes. Not with `on_exit_codes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 64))]
    pub never_on_exit_codes: Option<Vec<i32>>,
    /// Retry a run that timed out (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<bool>,
}

/// Most exit codes a list may hold: a policy names a few, not a table.
pub const MAX_EXIT_CODES: usize = 64;
const MAX_BASE_S: f64 = 86_400.0;
const MAX_CAP_S: f64 = 604_800.0;
const MAX_FACTOR: f64 = 100.0;

impl RetryPolicy {
    /// The policy with every backoff field and `on_timeout` filled, those left out taken
    /// from `default` (the node's task backoff, which doubles), or refused naming the
    /// field (as `retry.<field>`). Checked after filling, so a cap below the default base
    /// is caught too.
    pub fn resolved(self, default: &Backoff) -> Result<RetryPolicy, Invalid> {
        let policy = RetryPolicy {
            backoff_base_s: self.backoff_base_s.or(Some(default.initial.as_secs_f64())),
            backoff_factor: self.backoff_factor.or(Some(2.0)),
            backoff_cap_s: self.backoff_cap_s.or(Some(default.max.as_secs_f64())),
            jitter: self.jitter.or(Some(default.jitter)),
            on_timeout: self.on_timeout.or(Some(true)),
            ..self
        };
        policy.check()?;
        Ok(policy)
    }

    fn check(&self) -> Result<(), Invalid> {
        let field = |name: &str| format!("retry.{name}");
        let within =
            |name: &str, value: Option<f64>, ok: &dyn Fn(f64) -> bool, rule: &str| match value {
                Some(v) if !(v.is_finite() && ok(v)) => {
                    Err(Invalid::new(field(name), format!("{rule}, got {v}")))
                }
                _ => Ok(()),
            };
        within(
            "backoff_base_s",
            self.backoff_base_s,
            &|v| v > 0.0 && v <= MAX_BASE_S,
            &format!("must be over 0 and at most {MAX_BASE_S} seconds"),
        )?;
        within(
            "backoff_factor",
            self.backoff_factor,
            &|v| (1.0..=MAX_FACTOR).contains(&v),
            &format!("must be between 1 and {MAX_FACTOR}"),
        )?;
        within(
            "backoff_cap_s",
            self.backoff_cap_s,
            &|v| v > 0.0 && v <= MAX_CAP_S,
            &format!("must be over 0 and at most {MAX_CAP_S} seconds"),
        )?;
        if let (Some(base), Some(cap)) = (self.backoff_base_s, self.backoff_cap_s)
            && cap < base
        {
            return Err(Invalid::new(
                field("backoff_cap_s"),
                format!("must be at least backoff_base_s ({base}), got {cap}"),
            ));
        }
        within(
            "jitter",
            self.jitter,
            &|v| (0.0..=1.0).contains(&v),
            "must be between 0 and 1",
        )?;
        if self.on_exit_codes.is_some() && self.never_on_exit_codes.is_some() {
            return Err(Invalid::new(
                field("never_on_exit_codes"),
                "give on_exit_codes or never_on_exit_codes, not both",
            ));
        }
        for (name, codes) in [
            ("on_exit_codes", &self.on_exit_codes),
            ("never_on_exit_codes", &self.never_on_exit_codes),
        ] {
            let Some(codes) = codes else { continue };
            if codes.is_empty() || codes.len() > MAX_EXIT_CODES {
                return Err(Invalid::new(
                    field(name),
                    format!("must list 1 to {MAX_EXIT_CODES} exit codes"),
                ));
            }
            // A failed run's exit code: 0 is success, which never retries.
            if let Some(bad) = codes.iter().find(|c| !(1..=255).contains(*c)) {
                return Err(Invalid::new(
                    field(name),
                    format!("exit codes of a failed run are 1 to 255, got {bad}"),
                ));
            }
        }
        Ok(())
    }

    /// Whether a failed run gets another attempt (attempts permitting). `timed_out`: the
    /// run was stopped at its `timeout_s`, by its runner or by the server. A run that
    /// failed without an exit code for another reason (its runner lost, the process
    /// killed by a signal, it could not start) is not the command's verdict, so the
    /// exit-code lists do not judge it: it retries.
    pub fn retries(&self, exit_code: Option<i32>, timed_out: bool) -> bool {
        if timed_out {
            return self.on_timeout.unwrap_or(true);
        }
        match (exit_code, &self.on_exit_codes, &self.never_on_exit_codes) {
            (None, _, _) => true,
            (Some(code), Some(only), _) => only.contains(&code),
            (Some(code), None, Some(never)) => !never.contains(&code),
            (Some(_), None, None) => true,
        }
    }

    /// The wait before retry number `failures` (1 for the first): the base times the
    /// factor for each earlier retry, capped, then spread by the jitter for the random
    /// draw `unit` in `[0, 1)` (0.5: no spread). Fields left out count as the defaults
    /// of [`crate::after_run::TASK_RETRY`]; a stored policy has none left out.
    pub fn delay(&self, failures: u32, unit: f64) -> Duration {
        let default = crate::after_run::TASK_RETRY;
        let base = self.backoff_base_s.unwrap_or(default.initial.as_secs_f64());
        let cap = self.backoff_cap_s.unwrap_or(default.max.as_secs_f64());
        let factor = self.backoff_factor.unwrap_or(2.0);
        let jitter = self.jitter.unwrap_or(default.jitter);
        let exp = failures.saturating_sub(1).min(MAX_EXPONENT);
        let plain = (base * factor.powi(exp as i32)).min(cap);
        Duration::from_secs_f64(plain * (1.0 + jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0)))
    }
}

/// Past this many doublings every wait is at its cap anyway (the run-end statement clamps
/// the same way, so the two agree on any attempt count).
pub const MAX_EXPONENT: u32 = 30;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::after_run::TASK_RETRY;
    use proptest::prelude::*;

    fn codes(only: Option<&[i32]>, never: Option<&[i32]>) -> RetryPolicy {
        RetryPolicy {
            on_exit_codes: only.map(<[i32]>::to_vec),
            never_on_exit_codes: never.map(<[i32]>::to_vec),
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn which_failures_retry() {
        let only3 = codes(Some(&[3]), None);
        let never4 = codes(None, Some(&[4]));
        let no_timeout = RetryPolicy {
            on_timeout: Some(false),
            ..only3.clone()
        };
        // (policy, exit code, timed out, retries?, why)
        let table: [(&RetryPolicy, Option<i32>, bool, bool, &str); 11] = [
            (
                &RetryPolicy::default(),
                Some(1),
                false,
                true,
                "no lists: every failure",
            ),
            (&only3, Some(3), false, true, "a listed code"),
            (&only3, Some(4), false, false, "a code not listed"),
            (&never4, Some(4), false, false, "a code never to retry"),
            (&never4, Some(3), false, true, "any other code"),
            (
                &only3,
                None,
                false,
                true,
                "no exit code: not the command's verdict",
            ),
            (&never4, None, false, true, "no exit code, either list"),
            (&only3, None, true, true, "a timeout retries by default"),
            (&no_timeout, None, true, false, "on_timeout false"),
            (
                &no_timeout,
                Some(3),
                false,
                true,
                "on_timeout leaves exit codes alone",
            ),
            (
                &RetryPolicy::default(),
                None,
                true,
                true,
                "unresolved: on_timeout true",
            ),
        ];
        for (policy, exit, timed_out, want, why) in table {
            assert_eq!(policy.retries(exit, timed_out), want, "{why}");
        }
    }

    #[test]
    fn the_wait_grows_by_the_factor_up_to_the_cap() {
        let p = RetryPolicy {
            backoff_base_s: Some(1.0),
            backoff_factor: Some(3.0),
            backoff_cap_s: Some(20.0),
            jitter: Some(0.0),
            ..RetryPolicy::default()
        };
        let secs = |n| p.delay(n, 0.9).as_secs_f64();
        assert_eq!([secs(1), secs(2), secs(3), secs(4)], [1.0, 3.0, 9.0, 20.0]);
        assert_eq!(secs(u32::MAX), 20.0, "any attempt count stays at the cap");
        let constant = RetryPolicy {
            backoff_factor: Some(1.0),
            ..p.clone()
        };
        assert_eq!(constant.delay(7, 0.5), Duration::from_secs(1));
        assert_eq!(
            RetryPolicy::default().delay(2, 0.5),
            TASK_RETRY.delay(2, 0.5),
            "left out: the default backoff"
        );
    }

    #[test]
    fn resolving_fills_from_the_default_and_checks_every_field() {
        let resolved = RetryPolicy::default().resolved(&TASK_RETRY).unwrap();
        assert_eq!(resolved.backoff_base_s, Some(2.0));
        assert_eq!(resolved.backoff_cap_s, Some(300.0));
        assert_eq!(resolved.backoff_factor, Some(2.0));
        assert_eq!(resolved.on_timeout, Some(true));
        assert_eq!(resolved.on_exit_codes, None);

        let refused = |p: RetryPolicy| p.resolved(&TASK_RETRY).unwrap_err().field;
        let base = |v| RetryPolicy {
            backoff_base_s: Some(v),
            ..RetryPolicy::default()
        };
        assert_eq!(refused(base(0.0)), "retry.backoff_base_s");
        assert_eq!(refused(base(-1.0)), "retry.backoff_base_s");
        assert_eq!(refused(base(f64::NAN)), "retry.backoff_base_s");
        assert_eq!(
            refused(base(600.0)),
            "retry.backoff_cap_s",
            "above the default cap"
        );
        let factor = RetryPolicy {
            backoff_factor: Some(0.5),
            ..RetryPolicy::default()
        };
        assert_eq!(refused(factor), "retry.backoff_factor");
        let jitter = RetryPolicy {
            jitter: Some(1.5),
            ..RetryPolicy::default()
        };
        assert_eq!(refused(jitter), "retry.jitter");
        assert_eq!(
            refused(codes(Some(&[3]), Some(&[4]))),
            "retry.never_on_exit_codes"
        );
        assert_eq!(refused(codes(Some(&[]), None)), "retry.on_exit_codes");
        assert_eq!(refused(codes(Some(&[0]), None)), "retry.on_exit_codes");
        assert_eq!(
            refused(codes(None, Some(&[256]))),
            "retry.never_on_exit_codes"
        );
        assert!(codes(Some(&[1, 255]), None).resolved(&TASK_RETRY).is_ok());
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let e = serde_json::from_str::<RetryPolicy>(r#"{"on_exit_code": [3]}"#).unwrap_err();
        assert!(e.to_string().contains("on_exit_code"), "{e}");
    }

    proptest! {
        #[test]
        fn jitter_stays_within_its_bounds(
            base in 0.1f64..100.0,
            factor in 1.0f64..10.0,
            jitter in 0.0f64..=1.0,
            failures in 1u32..50,
            unit in 0.0f64..1.0,
        ) {
            let p = RetryPolicy {
                backoff_base_s: Some(base),
                backoff_factor: Some(factor),
                backoff_cap_s: Some(base * 50.0),
                jitter: Some(jitter),
                ..RetryPolicy::default()
            };
            let plain = p.delay(failures, 0.5).as_secs_f64();
            let spread = p.delay(failures, unit).as_secs_f64();
            prop_assert!(plain <= base * 50.0 + 1e-9, "capped");
            prop_assert!(spread >= plain * (1.0 - jitter) - 1e-6);
            prop_assert!(spread <= plain * (1.0 + jitter) + 1e-6);
        }
    }
}
