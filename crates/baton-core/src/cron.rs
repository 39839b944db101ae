//! When a schedule fires: a cron expression read in an IANA time zone.
//!
//! Expressions have five fields (minute hour day-of-month month day-of-week), an optional
//! leading seconds field, or a macro (`@hourly`, `@daily`, `@weekly`, `@monthly`,
//! `@yearly`); `croner` parses and matches them. Day of month and day of week combine as
//! in Vixie cron (either may match).
//!
//! The expression is matched against the zone's wall clock, and each wall-clock time
//! fires at most once:
//! - **a gap** (spring forward: 02:30 does not exist in Europe/Berlin on the last Sunday
//!   of March) fires at the first instant after the gap (03:00 local), as Vixie cron does;
//! - **a repeat** (fall back: 02:30 happens twice on the last Sunday of October) fires on
//!   the first pass only, so an hourly schedule does not run twice in that hour.
//!
//! A tick is named by its instant in UTC; that instant is what makes a tick's task
//! unique (`schedule.rs`).

use crate::validate::Invalid;
use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// How far past a missing wall-clock time its gap's end is looked for. Gaps last 30
/// minutes to two hours in the tz database; a day (a skipped calendar day, as Samoa's in
/// 2011) bounds every one.
const LONGEST_GAP_MINUTES: i64 = 24 * 60;

/// The longest cron expression taken: far past any real one (`0 0 1,15 * MON-FRI` is
/// 18), short enough that the parser's work on it is bounded.
pub const MAX_CRON_CHARS: usize = 200;

/// The longest zone name taken: the tz database's longest is 32 characters.
pub const MAX_ZONE_CHARS: usize = 64;

/// A parsed expression and its zone: the one thing that computes fire times.
#[derive(Debug, Clone)]
pub struct CronClock {
    cron: Cron,
    zone: Tz,
}

/// Parses an expression (`field` names it in the error).
pub fn parse_cron(field: &str, expression: &str) -> Result<Cron, Invalid> {
    if expression.trim().is_empty() || expression.chars().count() > MAX_CRON_CHARS {
        return Err(Invalid::new(
            field,
            format!("must be a cron expression of 1-{MAX_CRON_CHARS} characters"),
        ));
    }
    let parser = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build();
    parser.parse(expression).map_err(|e| {
        Invalid::new(
            field,
            format!(
                "{expression:?} is not a valid cron expression ({e}): use five fields \
                 (minute hour day month weekday), six with seconds first, or @hourly, \
                 @daily, @weekly, @monthly, @yearly"
            ),
        )
    })
}

/// Parses an IANA zone name such as `Europe/Berlin` or `UTC`.
pub fn parse_zone(field: &str, name: &str) -> Result<Tz, Invalid> {
    if name.chars().count() > MAX_ZONE_CHARS {
        return Err(Invalid::new(
            field,
            format!("must be an IANA time zone name of at most {MAX_ZONE_CHARS} characters"),
        ));
    }
    name.parse::<Tz>().map_err(|_| {
        Invalid::new(
            field,
            format!("{name:?} is not an IANA time zone name (such as UTC or Europe/Berlin)"),
        )
    })
}

impl CronClock {
    /// A clock for `expression` (five fields) in the IANA time zone `zone`.
    pub fn new(expression: &str, zone: &str) -> Result<CronClock, Invalid> {
        Ok(CronClock {
            cron: parse_cron("cron", expression)?,
            zone: parse_zone("timezone", zone)?,
        })
    }

    /// The first tick strictly after `after`, or `None` when the expression never matches
    /// again (say, 30 February).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Ticks fall on whole seconds: search from the second `after` falls in.
        let mut wall = after
            .with_timezone(&self.zone)
            .naive_local()
            .with_nanosecond(0)?;
        // A bounded number of wall-clock candidates: each is either an instant after
        // `after` or a repeat already fired, and a repeat lasts an hour or two.
        for _ in 0..10_000 {
            wall = self.next_wall_after(wall)?;
            if let Some(at) = self.instant_of(wall, after) {
                return Some(at);
            }
        }
        None
    }

    /// The next `n` ticks after `after`.
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        std::iter::successors(self.next_after(after), |t| self.next_after(*t))
            .take(n)
            .collect()
    }

    /// The next wall-clock time the expression matches, as if the zone had no DST.
    fn next_wall_after(&self, wall: NaiveDateTime) -> Option<NaiveDateTime> {
        let as_if_utc = Utc.from_utc_datetime(&wall);
        self.cron
            .find_next_occurrence(&as_if_utc, false)
            .ok()
            .map(|t| t.naive_utc())
    }

    /// The instant a matching wall-clock time fires at, if after `after`: the first pass
    /// of a repeated time (a later pass is a repeat: never fired), the end of a gap for a
    /// time that does not exist.
    fn instant_of(&self, wall: NaiveDateTime, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let at = match self.zone.from_local_datetime(&wall) {
            LocalResult::Single(t) => t.with_timezone(&Utc),
            LocalResult::Ambiguous(first, _) => first.with_timezone(&Utc),
            LocalResult::None => self.end_of_gap(wall)?,
        };
        (at > after).then_some(at)
    }

    /// The first instant after the gap `wall` falls in: the first whole minute past it
    /// that exists in the zone.
    fn end_of_gap(&self, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
        let minute = wall.with_second(0)?.with_nanosecond(0)?;
        (1..=LONGEST_GAP_MINUTES).find_map(|m| {
            self.zone
                .from_local_datetime(&(minute + Duration::minutes(m)))
                .earliest()
                .map(|t| t.with_timezone(&Utc))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn five_fields_six_with_seconds_and_macros_parse() {
        for ok in [
            "*/5 * * * *",
            "30 2 * * *",
            "*/10 * * * * *",
            "@hourly",
            "@daily",
            "0 9 * * MON-FRI",
        ] {
            assert!(parse_cron("cron", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "* * *",
            "61 * * * *",
            "* * * * * * 2030",
            "@fortnightly",
            "banana",
        ] {
            let e = parse_cron("cron", bad).unwrap_err();
            assert_eq!(e.field, "cron", "{bad}");
        }
    }

    #[test]
    fn zones_are_iana_names() {
        assert!(parse_zone("timezone", "Europe/Berlin").is_ok());
        assert!(parse_zone("timezone", "UTC").is_ok());
        assert_eq!(
            parse_zone("timezone", "Mars/Olympus").unwrap_err().field,
            "timezone"
        );
    }

    #[test]
    fn every_zone_of_the_tz_database_fits_the_length_limit() {
        for zone in chrono_tz::TZ_VARIANTS {
            assert!(
                parse_zone("timezone", zone.name()).is_ok(),
                "{}",
                zone.name()
            );
        }
        let long = "Z".repeat(MAX_ZONE_CHARS + 1);
        let e = parse_zone("timezone", &long).unwrap_err();
        assert!(e.message.contains("at most"), "{}", e.message);
    }

    #[test]
    fn an_expression_longer_than_the_limit_is_refused_by_its_length() {
        let too_long = format!("{}{}", " ".repeat(MAX_CRON_CHARS), "* * * * *");
        let e = parse_cron("cron", &too_long).unwrap_err();
        assert!(
            e.message.contains(&format!("1-{MAX_CRON_CHARS}")),
            "{}",
            e.message
        );
    }

    #[test]
    fn every_second_and_every_minute_in_utc() {
        let every_second = CronClock::new("* * * * * *", "UTC").unwrap();
        assert_eq!(
            every_second.next_after(utc("2026-12-03T10:00:00.400Z")),
            Some(utc("2026-12-03T10:00:01Z"))
        );
        let every_minute = CronClock::new("* * * * *", "UTC").unwrap();
        assert_eq!(
            every_minute.upcoming(utc("2026-12-03T10:00:00Z"), 2),
            vec![utc("2026-12-03T10:01:00Z"), utc("2026-12-03T10:02:00Z")]
        );
    }

    /// 2027-03-28: Berlin goes from 02:00 CET straight to 03:00 CEST. 02:30 does not exist
    /// that day; it fires at 03:00 CEST (01:00 UTC), once, and on the next day at 02:30
    /// CEST (00:30 UTC) again.
    #[test]
    fn berlin_spring_forward_fires_at_the_end_of_the_gap() {
        let clock = CronClock::new("30 2 * * *", "Europe/Berlin").unwrap();
        let ticks = clock.upcoming(utc("2027-03-26T12:00:00Z"), 3);
        assert_eq!(
            ticks,
            vec![
                utc("2027-03-27T01:30:00Z"), // 02:30 CET
                utc("2027-03-28T01:00:00Z"), // the gap: 03:00 CEST
                utc("2027-03-29T00:30:00Z"), // 02:30 CEST
            ]
        );
    }

    /// 2026-10-25: Berlin goes from 03:00 CEST back to 02:00 CET, so 02:30 happens twice.
    /// It fires on the first pass (02:30 CEST, 00:30 UTC) only.
    #[test]
    fn berlin_fall_back_fires_once_on_the_first_pass() {
        let clock = CronClock::new("30 2 * * *", "Europe/Berlin").unwrap();
        let ticks = clock.upcoming(utc("2026-10-24T12:00:00Z"), 3);
        assert_eq!(
            ticks,
            vec![
                utc("2026-10-25T00:30:00Z"), // 02:30 CEST, first pass
                utc("2026-10-26T01:30:00Z"), // 02:30 CET, next day
                utc("2026-10-27T01:30:00Z"),
            ]
        );
        // Asked from within the repeated hour (after its first pass), the repeat is not a
        // tick: the next is the next day.
        assert_eq!(
            clock.next_after(utc("2026-10-25T01:10:00Z")),
            Some(utc("2026-10-26T01:30:00Z"))
        );
    }

    /// An hourly schedule on the fall-back day runs once per wall-clock hour: the
    /// repeated 02:xx hour fires once.
    #[test]
    fn hourly_in_the_repeated_hour_fires_once() {
        let clock = CronClock::new("0 * * * *", "Europe/Berlin").unwrap();
        let ticks = clock.upcoming(utc("2026-10-24T23:30:00Z"), 4);
        assert_eq!(
            ticks,
            vec![
                utc("2026-10-25T00:00:00Z"), // 02:00 CEST
                utc("2026-10-25T02:00:00Z"), // 03:00 CET (02:00 CET is the repeat)
                utc("2026-10-25T03:00:00Z"),
                utc("2026-10-25T04:00:00Z"),
            ]
        );
    }

    #[test]
    fn an_expression_that_never_matches_has_no_next() {
        let clock = CronClock::new("0 0 30 2 *", "UTC").unwrap();
        assert_eq!(clock.next_after(utc("2026-01-01T00:00:00Z")), None);
    }
}
