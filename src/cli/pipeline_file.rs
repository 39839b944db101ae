//! A pipeline file, as people write a CI file: a `name` and a mapping of `jobs`, each
//! job's key its name and its value the job's `needs` beside a task's fields.
//!
//! ```yaml
//! name: release
//! jobs:
//!   build:
//!     script: make
//!   deploy:
//!     needs: [build]
//!     env: {TARGET: prod}
//! ```
//!
//! It becomes the API's [`SubmitPipeline`], whose jobs are a list, in the file's order.
//! Everything wrong with a file is said with the file's name and the line and column of
//! the fault, before any request: a misspelt field where it is written (a task refuses
//! unknown fields, and so does each job here), a need no job has at the job that names
//! it.

use anyhow::Context;
use baton_client::{PipelineJobSpec, SubmitPipeline, SubmitTask};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};
use serde_saphyr::{Location, MessageFormatter, Spanned};
use std::fmt;
use std::io::Read;

/// Reads and checks the pipeline file at `path` (`-`: standard input).
pub fn read(path: &str) -> anyhow::Result<SubmitPipeline> {
    let (text, source) = if path == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the pipeline from standard input")?;
        (text, "<stdin>".to_string())
    } else {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        (text, path.to_string())
    };
    Ok(parse(&text, &source)?)
}

/// What is wrong with a pipeline file, said as a compiler says it: `FILE:LINE:COLUMN:
/// what`, a line an editor can jump to.
#[derive(Debug)]
pub struct FileError {
    file: String,
    at: Option<(u64, u64)>,
    message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, column)) => write!(f, "{}:{line}:{column}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for FileError {}

/// The pipeline `text` (YAML, or JSON, which is YAML) holds; `source` names it in errors.
pub fn parse(text: &str, source: &str) -> Result<SubmitPipeline, FileError> {
    let file: PipelineFile = serde_saphyr::from_str(text).map_err(|e| FileError {
        file: source.to_string(),
        at: e.location().and_then(line_column),
        // The message alone: the place is said once, in front, and the source lines
        // the error would quote are the user's own file.
        message: serde_saphyr::DefaultMessageFormatter
            .format_message(e.without_snippet())
            .into_owned(),
    })?;
    let graph: Vec<(String, Vec<String>)> = file
        .jobs
        .0
        .iter()
        .map(|j| (j.name.value.clone(), j.needs.clone()))
        .collect();
    // The same check the server makes (it also holds the size to its own limit): here it
    // can point at the job's line.
    if let Err(invalid) = baton_core::pipeline::check_graph(&graph, usize::MAX) {
        let job = file
            .jobs
            .0
            .iter()
            .filter(|j| is_about(&invalid.field, &j.name.value))
            .max_by_key(|j| j.name.value.len());
        return Err(FileError {
            file: source.to_string(),
            at: job.and_then(|j| line_column(j.name.referenced)),
            message: invalid.to_string(),
        });
    }
    Ok(SubmitPipeline {
        name: file.name,
        jobs: file
            .jobs
            .0
            .into_iter()
            .map(|j| PipelineJobSpec {
                name: j.name.value,
                needs: j.needs,
                task: j.task,
            })
            .collect(),
        idempotency_key: None,
    })
}

/// Whether an error's field (`jobs.deploy`, `jobs.deploy.needs`) is about job `name`.
fn is_about(field: &str, name: &str) -> bool {
    field
        .strip_prefix("jobs.")
        .and_then(|rest| rest.strip_prefix(name))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// A place in the file, when the parser knows it (line 0 is its "unknown").
fn line_column(at: Location) -> Option<(u64, u64)> {
    (at.line() > 0).then(|| (at.line(), at.column()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PipelineFile {
    #[serde(default)]
    name: Option<String>,
    jobs: Jobs,
}

/// A job as the file gives it; its name keeps its place for errors about the graph.
struct Job {
    name: Spanned<String>,
    needs: Vec<String>,
    task: SubmitTask,
}

/// The `jobs` mapping, read in the file's order (a map type would sort it, or need an
/// order-keeping one).
struct Jobs(Vec<Job>);

impl<'de> Deserialize<'de> for Jobs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct JobsVisitor;
        impl<'de> Visitor<'de> for JobsVisitor {
            type Value = Jobs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of job names to their fields")
            }
            // A message without a place, which the parser then gives as the list's own:
            // serde's default would take the place of the file's start.
            fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Jobs, A::Error> {
                Err(de::Error::custom(
                    "jobs is a mapping of job names to their fields, not a list",
                ))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Jobs, A::Error> {
                let mut jobs = Vec::new();
                while let Some(name) = map.next_key::<Spanned<String>>()? {
                    let (needs, task) = map.next_value_seed(JobFields(&name.value))?;
                    jobs.push(Job { name, needs, task });
                }
                Ok(Jobs(jobs))
            }
        }
        deserializer.deserialize_any(JobsVisitor)
    }
}

/// One job's fields: `needs`, and a task's, each task field checked where it is read (an
/// unknown or ill-typed one is reported at its own line, not at the end of the job).
struct JobFields<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for JobFields<'_> {
    type Value = (Vec<String>, SubmitTask);
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JobFields<'_> {
    type Value = (Vec<String>, SubmitTask);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "job {:?}'s fields (needs, script or command, ...)",
            self.0
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let job = self.0;
        let mut needs = Vec::new();
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "name" => {
                    return Err(de::Error::custom(format!(
                        "job {job:?}: a job's name is its key under jobs, not a field"
                    )));
                }
                "needs" => needs = map.next_value()?,
                _ => {
                    let value = map.next_value_seed(TaskField { job, key: &key })?;
                    fields.insert(key, value);
                }
            }
        }
        let task = SubmitTask::deserialize(Value::Object(fields))
            .map_err(|e| de::Error::custom(format!("job {job:?}: {e}")))?;
        Ok((needs, task))
    }
}

/// One of a task's fields, checked as a task with that field alone — which the task's
/// own rules take or refuse — while the parser still stands at it, so that its error
/// carries the field's line.
struct TaskField<'a> {
    job: &'a str,
    key: &'a str,
}

impl<'de> DeserializeSeed<'de> for TaskField<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let alone = Value::Object(Map::from_iter([(self.key.to_string(), value.clone())]));
        SubmitTask::deserialize(alone).map_err(|e| {
            // The task's list of what it knows is a job's but for `needs`.
            let said = e
                .to_string()
                .replacen("expected one of ", "expected `needs` or one of ", 1);
            de::Error::custom(format!("job {:?}: {said}", self.job))
        })?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::pipeline::ReleaseRule;

    const RELEASE: &str = "\
name: release
jobs:
  build:
    script: make
  test-linux:
    needs: [build]
    labels: [linux]
    command: [make, test]
  deploy:
    needs: [test-linux]
    when: on_success
    env: {TARGET: prod}
  announce:
    needs: [deploy, build]
    when: always
    script: echo done
";

    fn error(text: &str) -> String {
        parse(text, "p.yaml").unwrap_err().to_string()
    }

    #[test]
    fn jobs_keep_the_files_order_and_become_the_apis_list() {
        let pipeline = parse(RELEASE, "p.yaml").unwrap();
        assert_eq!(pipeline.name.as_deref(), Some("release"));
        let names: Vec<&str> = pipeline.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["build", "test-linux", "deploy", "announce"]);
        let [build, test, deploy, announce] = &pipeline.jobs[..] else {
            panic!("four jobs");
        };
        assert_eq!(build.task.script.as_deref(), Some("make"));
        assert!(build.needs.is_empty());
        assert_eq!(test.needs, ["build"]);
        assert_eq!(test.task.labels, ["linux"]);
        assert_eq!(
            test.task.command,
            Some(vec!["make".to_string(), "test".to_string()])
        );
        assert_eq!(deploy.task.when, Some(ReleaseRule::OnSuccess));
        assert_eq!(deploy.task.env["TARGET"], "prod");
        assert_eq!(
            announce.needs,
            ["deploy", "build"],
            "needs keep their order"
        );
        assert_eq!(announce.task.when, Some(ReleaseRule::Always));
        assert_eq!(pipeline.idempotency_key, None);

        // The request is what the API's own reading of it gives back.
        let json = serde_json::to_value(&pipeline).unwrap();
        let again: SubmitPipeline = serde_json::from_value(json).unwrap();
        assert_eq!(again, pipeline);
    }

    #[test]
    fn a_json_file_reads_the_same() {
        let json = r#"{"name": "release", "jobs": {"z": {"script": "make"},
            "a": {"needs": ["z"], "command": ["true"]}}}"#;
        let pipeline = parse(json, "p.json").unwrap();
        let names: Vec<&str> = pipeline.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["z", "a"], "not sorted");
        assert_eq!(pipeline.jobs[1].needs, ["z"]);
    }

    #[test]
    fn anchors_and_merge_keys_share_fields_between_jobs() {
        let text = "\
jobs:
  build: &defaults
    labels: [linux]
    script: make
  test:
    <<: *defaults
    needs: [build]
    script: make test
";
        let pipeline = parse(text, "p.yaml").unwrap();
        assert_eq!(pipeline.name, None, "the server names it");
        let test = &pipeline.jobs[1];
        assert_eq!(test.task.labels, ["linux"]);
        assert_eq!(test.task.script.as_deref(), Some("make test"));
    }

    #[test]
    fn unknown_fields_are_refused_where_they_are_written() {
        let said = error("jobs:\n  build:\n    script: make\n  test:\n    scritp: make test\n");
        assert!(said.starts_with("p.yaml:5:"), "{said}");
        assert!(
            said.contains("job \"test\"")
                && said.contains("unknown field `scritp`")
                && said.contains("expected `needs` or one of `queue`"),
            "{said}"
        );
        let said = error("name: x\njbos:\n  build:\n    script: make\n");
        assert!(
            said.starts_with("p.yaml:2:") && said.contains("jbos"),
            "{said}"
        );
        // A job's name is its key: a `name` field would say it twice, maybe differently.
        let said = error("jobs:\n  build:\n    name: other\n    script: make\n");
        assert!(
            said.starts_with("p.yaml:3:") && said.contains("its key"),
            "{said}"
        );
    }

    #[test]
    fn ill_typed_fields_are_refused_at_their_line() {
        let said = error("jobs:\n  build:\n    script: make\n    timeout_s: soon\n");
        assert!(
            said.starts_with("p.yaml:4:") && said.contains("job \"build\""),
            "{said}"
        );
        let said = error("jobs:\n  build:\n    script: make\n    when: sometimes\n");
        assert!(
            said.starts_with("p.yaml:4:") && said.contains("sometimes"),
            "{said}"
        );
        let said = error("jobs:\n  - build\n");
        assert!(
            said.starts_with("p.yaml:2:") && said.contains("mapping of job names"),
            "{said}"
        );
        let said = error("jobs:\n  build:\n");
        assert!(said.contains("job \"build\"'s fields"), "{said}");
        let said = error("jobs:\n  build:\n    script: [make\n");
        assert!(said.starts_with("p.yaml:3:"), "{said}");
    }

    #[test]
    fn a_bad_graph_is_named_at_the_job_at_fault() {
        let said = error(
            "jobs:\n  build:\n    script: make\n  test:\n    needs: [biuld]\n    script: t\n",
        );
        assert!(said.starts_with("p.yaml:4:3: jobs.test.needs:"), "{said}");
        assert!(said.contains("\"biuld\""), "{said}");
        let cycle = "\
jobs:
  a:
    needs: [c]
    script: x
  b:
    needs: [a]
    script: x
  c:
    needs: [b]
    script: x
";
        let said = error(cycle);
        assert!(said.contains("cycle"), "{said}");
        let line = said.split(':').nth(1).unwrap();
        assert!(["2", "5", "8"].contains(&line), "at a job on it: {said}");
        let said = error("jobs:\n  build:\n    script: x\n  build:\n    script: y\n");
        assert!(
            said.starts_with("p.yaml:4:") && said.contains("build"),
            "{said}"
        );
        let said = error("jobs: {}\n");
        assert!(said.contains("at least one job"), "{said}");
        let said = error("jobs:\n  Build:\n    script: x\n");
        assert!(said.starts_with("p.yaml:2:3: jobs.Build"), "{said}");
    }

    #[test]
    fn a_job_name_is_matched_whole() {
        assert!(is_about("jobs.test", "test"));
        assert!(is_about("jobs.test.needs", "test"));
        assert!(!is_about("jobs.test-linux.needs", "test"));
        assert!(!is_about("jobs", "test"));
    }
}
