//! Every citation of the contract resolves: each `design.md §X` / `design.md §X.Y` and
//! each `design.md invariant N` (or `invariants N and M`) written anywhere in the tree
//! names a heading (`## X.`, `### X.Y`) or an invariant (the numbered list of §3) that
//! `docs/design.md` has, and no citation points at the team's shared copy, which the
//! repository cannot see. Plain string scanning of the files as they are: no server, no
//! store, nothing built but this test.
//!
//! Citations may wrap: `design.md` at the end of a comment line and `§4.7` or
//! `invariant 7` at the start of the next (after `//!`, `///`, `//`, `--`, `#` or `*`)
//! count as one, as do lists (`§4.1, §4.5, §4.6`). A bare mention of the file, naming no
//! section, is no citation.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// The file every citation must resolve in, relative to the repository root.
const DESIGN: &str = "docs/design.md";
/// How a citation begins.
const NEEDLE: &str = "design.md";
/// The team's copy outside the repository: nothing in the tree may point there.
const OLD_PATH: &str = "shared/design.md";
/// The kinds of file that carry citations (comments in code, scripts and SQL; docs).
const EXTENSIONS: &[&str] = &["rs", "lua", "sh", "md", "yaml", "yml", "sql", "toml"];
/// Build output, vendored packages and git's own files: not ours to cite from.
const SKIP_DIRS: &[&str] = &["target", "node_modules", ".git"];
/// This file holds example citations of every form, in its own tests below.
const THIS_FILE: &str = "tests/design_citations.rs";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Cite {
    Section(String),
    Invariant(u32),
    /// `design.md §` or `design.md invariant` followed by no number.
    Malformed(String),
}

impl fmt::Display for Cite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cite::Section(n) => write!(f, "§{n}"),
            Cite::Invariant(n) => write!(f, "invariant {n}"),
            Cite::Malformed(s) => write!(f, "a citation with no number: {s:?}"),
        }
    }
}

/// The numbers `docs/design.md` offers: its section headings and its invariants.
#[derive(Debug, Default)]
struct Contract {
    sections: BTreeSet<String>,
    invariants: BTreeSet<u32>,
}

impl Contract {
    fn parse(text: &str) -> Contract {
        let mut contract = Contract::default();
        let mut in_fence = false;
        let mut in_invariants = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                in_fence = !in_fence;
                continue;
            }
            if in_fence {
                continue;
            }
            // `### ` first: `## ` is not a prefix of it (its third character is `#`).
            let heading = line
                .strip_prefix("### ")
                .or_else(|| line.strip_prefix("## "));
            if let Some(title) = heading {
                let number = title
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .trim_end_matches('.');
                let numbered =
                    !number.is_empty() && number.chars().all(|c| c.is_ascii_digit() || c == '.');
                if numbered {
                    contract.sections.insert(number.to_string());
                }
                if line.starts_with("## ") {
                    in_invariants = numbered && number == "3";
                }
                continue;
            }
            if in_invariants
                && let Some((number, _)) = line.split_once(". ")
                && !number.is_empty()
                && number.chars().all(|c| c.is_ascii_digit())
            {
                contract.invariants.insert(number.parse().expect("digits"));
            }
        }
        contract
    }

    fn resolves(&self, cite: &Cite) -> bool {
        match cite {
            Cite::Section(n) => self.sections.contains(n),
            Cite::Invariant(n) => self.invariants.contains(n),
            Cite::Malformed(_) => false,
        }
    }
}

/// Spaces, then at most one line break followed by a comment marker: a citation that
/// wraps onto the next comment line goes on there.
fn skip_gap(s: &str) -> &str {
    let s = s.trim_start_matches([' ', '\t']);
    let Some(next) = s.strip_prefix('\n').or_else(|| s.strip_prefix("\r\n")) else {
        return s;
    };
    let mut next = next.trim_start_matches([' ', '\t']);
    for marker in ["//!", "///", "//", "--", "#", "*"] {
        if let Some(rest) = next.strip_prefix(marker) {
            next = rest;
            break;
        }
    }
    next.trim_start_matches([' ', '\t'])
}

/// What separates the items of a list of citations: `, `, ` and `, ` or `.
fn list_gap(s: &str) -> &str {
    let mut s = skip_gap(s);
    if let Some(rest) = s.strip_prefix(',') {
        s = skip_gap(rest);
    }
    for word in ["and", "or"] {
        if let Some(rest) = s.strip_prefix(word)
            && rest.starts_with(char::is_whitespace)
        {
            s = skip_gap(rest);
        }
    }
    s
}

/// A section number at the start of `s` (`4.3` of `4.3,`; `3` of `3.`; `4` of `4's`),
/// and what follows it.
fn section_number(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (s[..end].trim_end_matches('.'), &s[end..])
}

fn leading_digits(s: &str) -> &str {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    &s[..end]
}

fn snippet(s: &str) -> String {
    s.chars().take(30).collect()
}

/// Every citation in `text`, with the line its `design.md` is on.
fn citations(text: &str) -> Vec<(usize, Cite)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(NEEDLE).map(|i| from + i) {
        from = at + NEEDLE.len();
        let line = 1 + text[..at].matches('\n').count();
        let rest = skip_gap(&text[from..]);
        if let Some(mut rest) = rest.strip_prefix('§') {
            loop {
                let (number, after) = section_number(rest);
                if number.is_empty() {
                    found.push((line, Cite::Malformed(snippet(rest))));
                    break;
                }
                found.push((line, Cite::Section(number.to_string())));
                match list_gap(after).strip_prefix('§') {
                    Some(next) => rest = next,
                    None => break,
                }
            }
        } else if let Some(rest) = rest
            .strip_prefix("invariants")
            .or_else(|| rest.strip_prefix("invariant"))
        {
            let mut rest = skip_gap(rest);
            loop {
                let digits = leading_digits(rest);
                if digits.is_empty() {
                    found.push((line, Cite::Malformed(snippet(rest))));
                    break;
                }
                found.push((line, Cite::Invariant(digits.parse().expect("digits"))));
                let after = list_gap(&rest[digits.len()..]);
                if after.starts_with(|c: char| c.is_ascii_digit()) {
                    rest = after;
                } else {
                    break;
                }
            }
        }
    }
    found
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The repository's files of the kinds in [`EXTENSIONS`], relative to `root`, sorted.
/// Symbolic links are not followed.
fn sources(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.expect("directory entry");
            let path = entry.path();
            let kind = entry.file_type().expect("file type");
            let name = entry.file_name().to_string_lossy().into_owned();
            if kind.is_dir() {
                // `.baton-*`: the local state `baton dev` and runners leave in a checkout.
                if !SKIP_DIRS.contains(&name.as_str()) && !name.starts_with(".baton") {
                    walk(root, &path, out);
                }
            } else if kind.is_file()
                && path
                    .extension()
                    .is_some_and(|ext| EXTENSIONS.iter().any(|e| ext == *e))
            {
                let rel = path.strip_prefix(root).expect("under the root");
                let rel: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(rel.join("/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn read(root: &Path, rel: &str) -> String {
    let bytes = fs::read(root.join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"));
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn every_citation_names_a_section_or_an_invariant_of_the_design() {
    let root = root();
    let design = root.join(DESIGN);
    assert!(
        design.is_file(),
        "{DESIGN} is missing: the code cites it ({})",
        design.display()
    );
    let contract = Contract::parse(&read(&root, DESIGN));
    assert!(
        !contract.sections.is_empty() && !contract.invariants.is_empty(),
        "{DESIGN} has no numbered headings or no invariants under `## 3.`: {contract:?}"
    );

    let mut total = 0;
    let mut unresolved = Vec::new();
    for rel in sources(&root) {
        if rel == THIS_FILE {
            continue;
        }
        for (line, cite) in citations(&read(&root, &rel)) {
            total += 1;
            if !contract.resolves(&cite) {
                unresolved.push(format!("  {rel}:{line}: {cite}"));
            }
        }
    }
    // A scanner that finds nothing would pass vacuously; the tree holds dozens.
    assert!(
        total >= 20,
        "only {total} citations of {NEEDLE} found: is the scanner still reading the tree?"
    );
    assert!(
        unresolved.is_empty(),
        "{} of {total} citations name nothing in {DESIGN} (sections there: {}; invariants: {}):\n{}",
        unresolved.len(),
        contract
            .sections
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        contract
            .invariants
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        unresolved.join("\n")
    );
}

#[test]
fn no_citation_points_at_the_teams_shared_copy() {
    let root = root();
    let mut stale = Vec::new();
    for rel in sources(&root) {
        if rel == THIS_FILE {
            continue;
        }
        let text = read(&root, &rel);
        for (i, line) in text.lines().enumerate() {
            if line.contains(OLD_PATH) {
                stale.push(format!("  {rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the contract is {DESIGN} in this repository; these point at the shared copy:\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_scanner_reads_every_form_in_use() {
    let sections =
        |text: &str| -> Vec<Cite> { citations(text).into_iter().map(|(_, c)| c).collect() };
    let s = |n: &str| Cite::Section(n.to_string());

    assert_eq!(
        sections("keeps (design.md §4.3, §4.7) here"),
        [s("4.3"), s("4.7")]
    );
    assert_eq!(
        sections("-- in one step (design.md §4.3,\n-- §4.7):\n--   1. a retried"),
        [s("4.3"), s("4.7")]
    );
    assert_eq!(
        sections("//! The repair pass (design.md §4.1, §4.5, §4.6): whatever"),
        [s("4.1"), s("4.5"), s("4.6")]
    );
    assert_eq!(sections("//! keeps design.md §4's order"), [s("4")]);
    assert_eq!(sections("the invariants of design.md §3."), [s("3")]);
    assert_eq!(
        sections("atomically (design.md §4.3, first half). What"),
        [s("4.3")]
    );
    assert_eq!(
        sections("Actions follow design.md §4: Postgres first"),
        [s("4")]
    );
    assert_eq!(sections("(design.md §4.10)."), [s("4.10")]);
    assert_eq!(
        sections("//! a status a client can act on (design.md\n//! invariant 7). A client"),
        [Cite::Invariant(7)]
    );
    assert_eq!(
        sections("/// the JSON error body of design.md\n/// invariant 7.\n"),
        [Cite::Invariant(7)]
    );
    assert_eq!(
        sections("(design.md invariants 2 and 5)"),
        [Cite::Invariant(2), Cite::Invariant(5)]
    );
    assert_eq!(
        sections("design.md invariants 2, 5 or 6."),
        [Cite::Invariant(2), Cite::Invariant(5), Cite::Invariant(6)]
    );
    assert!(sections("is `design.md`, shared with the team.").is_empty());
    assert!(sections("see design.md\n\nfn main() {}").is_empty());
    let no_number = sections("design.md § here");
    assert!(
        matches!(no_number.as_slice(), [Cite::Malformed(_)]),
        "{no_number:?}"
    );
    let no_number = sections("design.md invariant X");
    assert!(
        matches!(no_number.as_slice(), [Cite::Malformed(_)]),
        "{no_number:?}"
    );
    let lines: Vec<usize> = citations("a\nb design.md §2\nc\nd design.md §5")
        .iter()
        .map(|(line, _)| *line)
        .collect();
    assert_eq!(lines, [2, 4]);

    let contract = Contract::parse(
        "# Title\n\n## 2. Concepts\n\n```\n## 9. in a fence\n```\n\n## 3. Invariants\n\n\
         1. **One.** text\n   2. wrapped, not an item\n2. **Two.**\n\n## 4. Rules\n\n\
         ### 4.1 Submit\n\n1. not an invariant\n### 4.10 Outages\n",
    );
    let want: BTreeSet<String> = ["2", "3", "4", "4.1", "4.10"].map(String::from).into();
    assert_eq!(contract.sections, want);
    assert_eq!(contract.invariants, BTreeSet::from([1, 2]));
    assert!(contract.resolves(&s("4.10")) && !contract.resolves(&s("4.2")));
    assert!(!contract.resolves(&Cite::Invariant(3)));
}
