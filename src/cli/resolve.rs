//! Naming a thing the way its table shows it. A task's short id goes to the server as it
//! is (the path takes it); schedules, runners and tokens the CLI finds itself, in their
//! listing: by whole id, by short id (the last 12 hex digits of the id), and a schedule
//! also by its name; a pipeline by short id among the newest pipelines. One match is the
//! answer; none or several is an error that says which, before anything is changed.

use anyhow::bail;
use baton_client::{Client, SHORT_ID_LEN, short_id};
use uuid::Uuid;

/// A whole id needs no listing: the server answers 404 for one it does not know.
fn whole(given: &str) -> Option<Uuid> {
    Uuid::parse_str(given).ok()
}

/// What is being named, as the errors word it.
struct Kind {
    /// `schedule`.
    noun: &'static str,
    /// The command that lists them: `baton schedule list`.
    list: &'static str,
    /// How it may be named: `id, short id or name`.
    by: &'static str,
}

const SCHEDULE: Kind = Kind {
    noun: "schedule",
    list: "baton schedule list",
    by: "id, short id or name",
};
const PIPELINE: Kind = Kind {
    noun: "pipeline",
    list: "baton pipeline list",
    by: "id or short id (the newest 1000 pipelines are searched)",
};
const RUNNER: Kind = Kind {
    noun: "runner",
    list: "baton runners list",
    by: "id or short id",
};
const TOKEN: Kind = Kind {
    noun: "token",
    list: "baton token list",
    by: "id or short id",
};
const REGISTRATION_TOKEN: Kind = Kind {
    noun: "registration token",
    list: "baton registration-token list",
    by: "id or short id",
};

/// The one candidate `given` names, by short id or by name.
fn pick<'a>(
    kind: &Kind,
    given: &str,
    candidates: impl IntoIterator<Item = (Uuid, Option<&'a str>)>,
) -> anyhow::Result<Uuid> {
    let short = (given.len() == SHORT_ID_LEN && given.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| given.to_ascii_lowercase());
    let mut found: Vec<(Uuid, Option<&str>)> = candidates
        .into_iter()
        .filter(|(id, name)| short.as_deref() == Some(&short_id(*id)) || *name == Some(given))
        .collect();
    found.dedup_by_key(|(id, _)| *id);
    match found.as_slice() {
        [] => bail!(
            "no {} {given:?}: give its {}, as `{}` shows it",
            kind.noun,
            kind.by,
            kind.list
        ),
        [(id, _)] => Ok(*id),
        several => {
            let listed: Vec<String> = several
                .iter()
                .map(|(id, name)| match name {
                    Some(name) => format!("{id} ({name})"),
                    None => id.to_string(),
                })
                .collect();
            bail!(
                "{given:?} names {} {}s: {}; give the whole id",
                several.len(),
                kind.noun,
                listed.join(", ")
            )
        }
    }
}

/// A schedule by whole id, short id or name.
pub async fn schedule(client: &Client, given: &str) -> anyhow::Result<Uuid> {
    if let Some(id) = whole(given) {
        return Ok(id);
    }
    let list = client.schedules().await?;
    let candidates = list.schedules.iter().map(|s| (s.id, Some(s.name.as_str())));
    pick(&SCHEDULE, given, candidates)
}

/// How far back a short pipeline id is looked for: pipelines are paged, newest first, and
/// a short id is what the tables of recent ones show.
const PIPELINE_PAGES: usize = 5;
const PIPELINE_PAGE: i64 = 200;
// What `PIPELINE.by` tells the user.
const _: () = assert!(PIPELINE_PAGES as i64 * PIPELINE_PAGE == 1000);

/// A pipeline by whole id, or by short id among the newest
/// `PIPELINE_PAGES * PIPELINE_PAGE`.
pub async fn pipeline(client: &Client, given: &str) -> anyhow::Result<Uuid> {
    if let Some(id) = whole(given) {
        return Ok(id);
    }
    if given.len() != SHORT_ID_LEN || !given.bytes().all(|b| b.is_ascii_hexdigit()) {
        return pick(&PIPELINE, given, std::iter::empty());
    }
    let mut before = None;
    for _ in 0..PIPELINE_PAGES {
        let page = client.pipeline_list(before, Some(PIPELINE_PAGE)).await?;
        let candidates = page.pipelines.iter().map(|p| (p.id, None));
        // Stops at the first page that names it: a short id is 48 random bits.
        if let Ok(id) = pick(&PIPELINE, given, candidates) {
            return Ok(id);
        }
        match page.next_cursor {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    pick(&PIPELINE, given, std::iter::empty())
}

/// A runner by whole id or short id.
pub async fn runner(client: &Client, given: &str) -> anyhow::Result<baton_core::RunnerId> {
    if let Some(id) = whole(given) {
        return Ok(id.into());
    }
    let list = client.runners().await?;
    let candidates = list.runners.iter().map(|r| (r.id.uuid(), None));
    Ok(pick(&RUNNER, given, candidates)?.into())
}

/// An API token by whole id or short id.
pub async fn token(client: &Client, given: &str) -> anyhow::Result<Uuid> {
    if let Some(id) = whole(given) {
        return Ok(id);
    }
    let list = client.tokens().await?;
    let candidates = list.tokens.iter().map(|t| (t.id, None));
    pick(&TOKEN, given, candidates)
}

/// A registration token by whole id or short id.
pub async fn registration_token(client: &Client, given: &str) -> anyhow::Result<Uuid> {
    if let Some(id) = whole(given) {
        return Ok(id);
    }
    let list = client.registration_tokens().await?;
    let candidates = list.registration_tokens.iter().map(|t| (t.id, None));
    pick(&REGISTRATION_TOKEN, given, candidates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_match_by_short_id_or_name_none_and_several_are_said() {
        let a: Uuid = "019afc6e-0000-7000-8000-aaaaaaaaaaaa".parse().unwrap();
        let b: Uuid = "019afc6e-0000-7000-8000-bbbbbbbbbbbb".parse().unwrap();
        let c: Uuid = "019afc6f-0000-7000-8000-bbbbbbbbbbbb".parse().unwrap();
        let all = || {
            [
                (a, Some("nightly")),
                (b, Some("hourly")),
                (c, Some("aaaaaaaaaaaa")),
            ]
        };
        let pick = |given: &str| pick(&SCHEDULE, given, all());
        assert_eq!(pick("nightly").unwrap(), a);
        let both = pick("aaaaaaaaaaaa").unwrap_err().to_string();
        assert!(
            both.contains("names 2 schedules"),
            "a short id and a name: {both}"
        );
        let none = pick("weekly").unwrap_err().to_string();
        assert!(
            none.contains("no schedule \"weekly\"") && none.contains("baton schedule list"),
            "{none}"
        );
        let several = pick("bbbbbbbbbbbb").unwrap_err().to_string();
        assert!(
            several.contains(&b.to_string())
                && several.contains(&c.to_string())
                && several.contains("whole id"),
            "{several}"
        );
        assert_eq!(pick("hourly").unwrap(), b);
        assert_eq!(
            pick("AAAAAAAAAAAA").unwrap(),
            a,
            "a short id in either case"
        );
    }
}
