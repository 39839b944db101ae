//! Pipelines (docs/pipelines.md): jobs that wait for other jobs. The graph a submit
//! names is checked here — names, needs, cycles, size — and the rule that decides what
//! happens to a waiting job as its needs end is written here once; the store's trigger
//! (`tasks_resolve` in the pipelines migration) applies the same table in SQL, and
//! `tests/store_pipelines.rs` holds the two to each other case by case.

use crate::validate::Invalid;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// When a job is released, given how the jobs it needs ended (GitLab's `when`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReleaseRule {
    /// Every job it needs succeeded (the default); skipped as soon as one did not.
    #[default]
    OnSuccess,
    /// Every job it needs ended and at least one did not succeed; skipped when all did.
    OnFailure,
    /// Every job it needs ended, however.
    Always,
}

impl ReleaseRule {
    /// The rule as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseRule::OnSuccess => "on_success",
            ReleaseRule::OnFailure => "on_failure",
            ReleaseRule::Always => "always",
        }
    }

    /// The rule of a stored name (`None` for a name no release wrote).
    pub fn parse(s: &str) -> Option<ReleaseRule> {
        [
            ReleaseRule::OnSuccess,
            ReleaseRule::OnFailure,
            ReleaseRule::Always,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// What becomes of a waiting job once its needs' ends are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Some need has not ended and the rule may still be met: it keeps waiting.
    Wait,
    /// Released: queued to run.
    Release,
    /// Its rule can no longer be met: it ends `skipped`, never run.
    Skip,
}

/// The rule: `pending` needs not ended yet, `unmet` ended without succeeding.
pub fn verdict(rule: ReleaseRule, pending: i32, unmet: i32) -> Verdict {
    match rule {
        ReleaseRule::OnSuccess if unmet > 0 => Verdict::Skip,
        _ if pending > 0 => Verdict::Wait,
        ReleaseRule::OnFailure if unmet == 0 => Verdict::Skip,
        _ => Verdict::Release,
    }
}

/// A job's name: what `needs` and `BATON_NEEDS_<JOB>_<NAME>` call it.
pub fn check_job_name(name: &str) -> Result<(), Invalid> {
    crate::validate::check_name("jobs.name", name, 64, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'
    })
    .map_err(|e| Invalid::new(format!("jobs.{name}"), e.message))
}

/// What every variable a dependent gets from its needs' outputs starts with.
pub const NEEDS_PREFIX: &str = "BATON_NEEDS_";

/// The variable a dependent gets for output `output` of the job `job` it needs — the
/// same mapping the SQL of `tasks_give_needs_env` makes: upper case, anything but a letter or
/// digit as `_`.
pub fn needs_variable(job: &str, output: &str) -> String {
    let part = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("{NEEDS_PREFIX}{}_{}", part(job), part(output))
}

/// Each output value a dependent gets is cut to this many bytes…
pub const MAX_NEEDS_VALUE_BYTES: usize = 4096;
/// …and all of them together, names included, to this many: outputs past it (in the
/// order of their names) are left out. An environment must fit in an `exec`.
pub const MAX_NEEDS_ENV_BYTES: usize = 65536;

/// A graph's jobs in an order where each comes after every job it needs, with its layer
/// (0 for a job that needs nothing, else one more than the deepest job it needs); or the
/// job at fault: a need no job has, a job needing itself or a cycle, a name given twice,
/// more jobs than `max_jobs`.
pub fn check_graph(
    jobs: &[(String, Vec<String>)],
    max_jobs: usize,
) -> Result<Vec<(usize, usize)>, Invalid> {
    if jobs.is_empty() {
        return Err(Invalid::new("jobs", "a pipeline needs at least one job"));
    }
    if jobs.len() > max_jobs {
        return Err(Invalid::new(
            "jobs",
            format!(
                "{} jobs, over the limit of {max_jobs} per pipeline",
                jobs.len()
            ),
        ));
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, (name, needs)) in jobs.iter().enumerate() {
        check_job_name(name)?;
        if index.insert(name.as_str(), i).is_some() {
            return Err(Invalid::new(
                format!("jobs.{name}"),
                "two jobs have this name",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for need in needs {
            if !seen.insert(need) {
                return Err(Invalid::new(
                    format!("jobs.{name}.needs"),
                    format!("needs {need:?} twice"),
                ));
            }
        }
    }
    for (name, needs) in jobs {
        for need in needs {
            if !index.contains_key(need.as_str()) {
                return Err(Invalid::new(
                    format!("jobs.{name}.needs"),
                    format!("needs {need:?}, which is no job of this pipeline"),
                ));
            }
            if need == name {
                return Err(Invalid::new(
                    format!("jobs.{name}.needs"),
                    "a job cannot need itself",
                ));
            }
        }
    }
    // Kahn's algorithm: a job is placed once every job it needs is; what is left unplaced
    // lies on a cycle or behind one.
    let mut waiting: Vec<usize> = jobs.iter().map(|(_, needs)| needs.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    for (i, (_, needs)) in jobs.iter().enumerate() {
        for need in needs {
            dependents[index[need.as_str()]].push(i);
        }
    }
    let mut layer = vec![0usize; jobs.len()];
    let mut ready: Vec<usize> = (0..jobs.len()).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(jobs.len());
    while let Some(i) = ready.pop() {
        order.push((i, layer[i]));
        for &d in &dependents[i] {
            layer[d] = layer[d].max(layer[i] + 1);
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.push(d);
            }
        }
    }
    if order.len() < jobs.len() {
        let stuck = cycle_member(jobs, &index, &waiting);
        return Err(Invalid::new(
            format!("jobs.{stuck}.needs"),
            format!("{stuck:?} is on a cycle of needs"),
        ));
    }
    Ok(order)
}

/// A job on a cycle among those Kahn's algorithm could not place: walk needs from any
/// unplaced job, always to an unplaced need; the walk must come back to a job it passed,
/// and that one is on the cycle (a job merely behind a cycle is not named).
fn cycle_member<'a>(
    jobs: &'a [(String, Vec<String>)],
    index: &HashMap<&str, usize>,
    waiting: &[usize],
) -> &'a str {
    let unplaced = |i: usize| waiting[i] > 0;
    let mut at = (0..jobs.len()).find(|&i| unplaced(i)).unwrap_or(0);
    let mut visited: BTreeMap<usize, ()> = BTreeMap::new();
    while visited.insert(at, ()).is_none() {
        match jobs[at]
            .1
            .iter()
            .map(|n| index[n.as_str()])
            .find(|&n| unplaced(n))
        {
            Some(next) => at = next,
            None => break,
        }
    }
    &jobs[at].0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(jobs: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        jobs.iter()
            .map(|(n, needs)| (n.to_string(), needs.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn a_diamond_is_ordered_in_layers() {
        let jobs = graph(&[("d", &["b", "c"]), ("b", &["a"]), ("c", &["a"]), ("a", &[])]);
        let order = check_graph(&jobs, 10).unwrap();
        let layer_of = |name: &str| {
            let i = jobs.iter().position(|(n, _)| n == name).unwrap();
            order.iter().find(|(j, _)| *j == i).unwrap().1
        };
        assert_eq!(
            (layer_of("a"), layer_of("b"), layer_of("c"), layer_of("d")),
            (0, 1, 1, 2)
        );
        let position = |i: usize| order.iter().position(|(j, _)| *j == i).unwrap();
        for (i, (_, needs)) in jobs.iter().enumerate() {
            for need in needs {
                let n = jobs.iter().position(|(name, _)| name == need).unwrap();
                assert!(position(n) < position(i));
            }
        }
    }

    #[test]
    fn bad_graphs_name_the_job_at_fault() {
        let field = |jobs: &[(&str, &[&str])]| check_graph(&graph(jobs), 3).unwrap_err().field;
        assert_eq!(
            field(&[("a", &["b"]), ("b", &["a"])]).as_str(),
            "jobs.a.needs"
        );
        assert_eq!(field(&[("a", &["x"])]), "jobs.a.needs");
        assert_eq!(field(&[("a", &["a"])]), "jobs.a.needs");
        assert_eq!(field(&[("a", &[]), ("a", &[])]), "jobs.a");
        assert_eq!(field(&[("a", &[]), ("b", &["a", "a"])]), "jobs.b.needs");
        assert_eq!(field(&[("A", &[])]), "jobs.A");
        assert_eq!(
            field(&[("a", &[]), ("b", &[]), ("c", &[]), ("d", &[])]),
            "jobs"
        );
        assert_eq!(field(&[]), "jobs");
        // Behind a cycle is not on it: c needs the cycle a <-> b.
        let c_first = check_graph(&graph(&[("c", &["a"]), ("a", &["b"]), ("b", &["a"])]), 3);
        assert_ne!(c_first.unwrap_err().field, "jobs.c.needs");
    }

    #[test]
    fn the_rule_table() {
        use ReleaseRule::*;
        use Verdict::*;
        let cases = [
            (OnSuccess, 1, 0, Wait),
            (OnSuccess, 1, 1, Skip),
            (OnSuccess, 0, 0, Release),
            (OnSuccess, 0, 2, Skip),
            (OnFailure, 1, 0, Wait),
            (OnFailure, 1, 1, Wait),
            (OnFailure, 0, 0, Skip),
            (OnFailure, 0, 1, Release),
            (Always, 1, 1, Wait),
            (Always, 0, 0, Release),
            (Always, 0, 3, Release),
        ];
        for (rule, pending, unmet, expected) in cases {
            assert_eq!(
                verdict(rule, pending, unmet),
                expected,
                "{rule:?} {pending} {unmet}"
            );
        }
    }

    #[test]
    fn output_variables_are_upper_case_with_underscores() {
        assert_eq!(
            needs_variable("test-linux", "image.tag"),
            "BATON_NEEDS_TEST_LINUX_IMAGE_TAG"
        );
    }
}
