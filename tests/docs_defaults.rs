//! The defaults the documents state are the defaults the code has. Wherever a page names a
//! node or runner setting, by its name or its flag (`` `--drain-grace-s` ``), and gives its
//! value right after it — a table row (`` | `node_ttl_ms` | 10000 | ``), a parenthesis
//! (`` `presence_flush_ms` (15 s) ``) or a comma (`` `finalize_lock_ms`, 30 s ``) — the
//! value, read in its unit, must equal the
//! setting's default in `ServeConfig` or `RunnerConfig`. An operator reading a page is told
//! what the binary does, and a default changed in code shows every page that still says
//! the old one. Plain scanning of the pages against the defaults serialised: no server, no
//! store.

use regex::Regex;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The pages that state defaults, relative to the repository root (every `docs/*.md`
/// besides).
const PAGES: &[&str] = &["README.md", "ARCHITECTURE.md"];

/// Every numeric setting named `*_ms` or `*_s` in `config`, by its name, with its value:
/// nested sections (`[timings]`, `[limits]`) are flattened, as the pages name settings
/// without their section.
fn settings_of(config: &Value, into: &mut BTreeMap<String, f64>) {
    for (name, value) in config
        .as_object()
        .expect("a config serialises to an object")
    {
        match value {
            Value::Object(_) => settings_of(value, into),
            Value::Number(n) if name.ends_with("_ms") || name.ends_with("_s") => {
                into.insert(name.clone(), n.as_f64().unwrap());
            }
            _ => {}
        }
    }
}

fn defaults() -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let (mut node, mut runner) = (BTreeMap::new(), BTreeMap::new());
    let serve = baton_server::config::ServeConfig::default();
    settings_of(&serde_json::to_value(serve).unwrap(), &mut node);
    let agent = baton_runner::RunnerConfig::default();
    settings_of(&serde_json::to_value(agent).unwrap(), &mut runner);
    (node, runner)
}

/// A number and its unit (`30` `s`, `5` `min`, `7` `days`, `86,400` and none) in the unit
/// of a setting called `name`: milliseconds for `_ms`, seconds for `_s`; a number with no
/// unit is taken as already in it.
fn in_units_of(name: &str, number: &str, unit: &str) -> f64 {
    let number: f64 = number.replace([',', '_'], "").parse().unwrap();
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "min" => number * 60.0,
        "h" => number * 3600.0,
        "day" | "days" => number * 86_400.0,
        "" => return number,
        other => unreachable!("unit {other:?} is not matched by the pattern"),
    };
    if name.ends_with("_ms") {
        seconds * 1000.0
    } else {
        seconds
    }
}

/// One statement of a default found on a page.
#[derive(Debug)]
struct Stated {
    page: String,
    line: usize,
    name: String,
    for_runner: bool,
    value: f64,
    text: String,
}

/// A setting's name or flag in backticks, then its value: after `|` (a table's next
/// cell), `(` or `, `, with `default ` or not, bold or not. A value followed by a dash is a range, not a
/// default; a setting after `×` is a multiple, whose value is not the setting's.
fn pattern() -> Regex {
    Regex::new(
        r"(?x)
        (?P<times>×\s*)?
        `(?P<name>(?:--)?[a-z][a-z0-9_-]*[_-](?:ms|s))`\*{0,2}
        (?P<runner>\s\(runner\))?
        (?:\s*\|\s*|\s\((?:default\s)?|,\s(?:default\s)?)
        (?P<number>[0-9][0-9,_]*(?:\.[0-9]+)?)
        (?:\s?(?P<unit>ms|s|min|h|days|day)\b)?
        (?P<range>\s?[–-])?",
    )
    .unwrap()
}

fn statements(
    root: &Path,
    node: &BTreeMap<String, f64>,
    runner: &BTreeMap<String, f64>,
) -> Vec<Stated> {
    let mut pages: Vec<PathBuf> = PAGES.iter().map(|p| root.join(p)).collect();
    for entry in fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    let pattern = pattern();
    let mut found = Vec::new();
    for page in pages {
        let text = fs::read_to_string(&page).unwrap();
        let shown = page.strip_prefix(root).unwrap().display().to_string();
        for (i, line) in text.lines().enumerate() {
            for m in pattern.captures_iter(line) {
                // A flag names the setting of its words: `--drain-grace-s`, `drain_grace_s`.
                let name = &m["name"].trim_start_matches("--").replace('-', "_");
                let known = node.contains_key(name) || runner.contains_key(name);
                if !known || m.name("times").is_some() || m.name("range").is_some() {
                    continue;
                }
                let unit = m.name("unit").map_or("", |u| u.as_str());
                found.push(Stated {
                    page: shown.clone(),
                    line: i + 1,
                    name: name.clone(),
                    for_runner: m.name("runner").is_some() || !node.contains_key(name),
                    value: in_units_of(name, &m["number"], unit),
                    text: m[0].to_string(),
                });
            }
        }
    }
    found
}

#[test]
fn every_default_a_page_states_is_the_default_in_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (node, runner) = defaults();
    let found = statements(root, &node, &runner);
    let wrong: Vec<String> = found
        .iter()
        .filter_map(|s| {
            let (holder, defaults) = match s.for_runner {
                true => ("RunnerConfig", &runner),
                false => ("ServeConfig", &node),
            };
            let default = defaults[&s.name];
            (default != s.value).then(|| {
                format!(
                    "{}:{}: {:?} says {} = {}, {holder}'s default is {default}",
                    s.page, s.line, s.text, s.name, s.value
                )
            })
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "pages that state a default the code does not have:\n{}",
        wrong.join("\n")
    );
    // The check reads what it should: the settings table of failure-handling.md alone
    // states more than a dozen.
    let table = found
        .iter()
        .filter(|s| s.page.ends_with("failure-handling.md"))
        .count();
    assert!(
        table >= 15,
        "only {table} defaults found in docs/failure-handling.md"
    );
}

#[test]
fn the_pattern_reads_each_form_a_page_uses() {
    let mut node = BTreeMap::new();
    node.insert("node_ttl_ms".to_string(), 10_000.0);
    node.insert("retention_s".to_string(), 604_800.0);
    node.insert("webhook_timeout_ms".to_string(), 10_000.0);
    let mut runner = BTreeMap::new();
    runner.insert("fence_after_s".to_string(), 150.0);
    let dir = std::env::temp_dir().join(format!("baton-docs-defaults-{}", std::process::id()));
    fs::create_dir_all(dir.join("docs")).unwrap();
    fs::write(dir.join("README.md"), "").unwrap();
    fs::write(dir.join("ARCHITECTURE.md"), "").unwrap();
    fs::write(
        dir.join("docs/a.md"),
        "| `node_ttl_ms` | 10000 | x |\n\
         kept `retention_s` (7 days) and `fence_after_s` (runner) | 150 |\n\
         every 2 × `webhook_timeout_ms` (20 s), a wait `webhook_timeout_ms`, 10 s\n\
         a range `node_ttl_ms` (1–60 s), no value `node_ttl_ms` after\n\
         a flag `--node-ttl-ms`, default 10 s\n",
    )
    .unwrap();
    let found = statements(&dir, &node, &runner);
    let read: Vec<(&str, f64, bool)> = found
        .iter()
        .map(|s| (s.name.as_str(), s.value, s.for_runner))
        .collect();
    assert_eq!(
        read,
        [
            ("node_ttl_ms", 10_000.0, false),
            ("retention_s", 604_800.0, false),
            ("fence_after_s", 150.0, true),
            ("webhook_timeout_ms", 10_000.0, false),
            ("node_ttl_ms", 10_000.0, false),
        ]
    );
    fs::remove_dir_all(&dir).unwrap();
}
