//! Time at the command line's edge. A time given is RFC 3339, as the API takes it; a time
//! shown in a table is the reader's local time with its zone, to the second, and a span
//! reads as the console shows it (`850ms`, `12.3s`, `4m 05s`). JSON output keeps the
//! API's RFC 3339 untouched.

use chrono::{DateTime, Local, TimeDelta, Utc};

/// An example every message about a bad time shows, so the fix is one copy away.
const EXAMPLE: &str = "2026-12-01T08:00:00Z";

/// Reads a time flag (`--run-at`, `--created-after`, ...): RFC 3339 only, with a zone,
/// so that the same words mean the same moment on every machine.
pub fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!("expected an RFC 3339 time with a zone, e.g. {EXAMPLE} or 2026-12-01T09:00:00+01:00 ({e})")
        })
}

/// `2026-12-07 04:40:21 UTC`, or `... +01:00` where the local zone is ahead of UTC.
/// (chrono's local zone has an offset but no name; UTC is the one worth spelling out,
/// as servers and containers run in it.)
pub fn local(at: DateTime<Utc>) -> String {
    let here = at.with_timezone(&Local);
    format!("{} {}", here.format("%Y-%m-%d %H:%M:%S"), zone(&here))
}

/// A time to the millisecond, for log lines, in the same zone as [`local`].
pub fn local_precise(at: DateTime<Utc>) -> String {
    let here = at.with_timezone(&Local);
    format!("{} {}", here.format("%Y-%m-%d %H:%M:%S%.3f"), zone(&here))
}

fn zone(here: &DateTime<Local>) -> String {
    match here.offset().local_minus_utc() {
        0 => "UTC".to_string(),
        _ => here.format("%:z").to_string(),
    }
}

/// [`local`], or `-` for none.
pub fn local_or_dash(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "-".to_string(), local)
}

/// A span as the console writes it: `850ms`, `12.3s`, `4m 05s`, `2h 03m`, `3d 4h`.
pub fn span(d: TimeDelta) -> String {
    let ms = d.num_milliseconds().max(0);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    match s {
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_the_console_writes_them() {
        let ms = TimeDelta::milliseconds;
        for (given, shown) in [
            (ms(-5), "0ms"),
            (ms(850), "850ms"),
            (ms(12_340), "12.3s"),
            (ms(245_000), "4m 05s"),
            (ms(7_380_000), "2h 03m"),
            (ms(273_600_000), "3d 4h"),
        ] {
            assert_eq!(span(given), shown);
        }
    }

    #[test]
    fn a_time_flag_is_rfc_3339_and_a_refusal_shows_an_example() {
        assert_eq!(
            parse_time("2026-12-01T09:00:00+01:00").unwrap(),
            parse_time(EXAMPLE).unwrap()
        );
        for bad in ["tomorrow", "2026-12-01 08:00", "2026-12-01T08:00:00"] {
            let said = parse_time(bad).unwrap_err();
            assert!(
                said.contains("RFC 3339") && said.contains(EXAMPLE),
                "{said}"
            );
        }
    }

    #[test]
    fn a_shown_time_names_its_zone() {
        let at = parse_time(EXAMPLE).unwrap();
        let shown = local(at);
        let here = at.with_timezone(&Local);
        assert!(
            shown.starts_with(&here.format("%Y-%m-%d %H:%M:%S ").to_string()),
            "{shown}"
        );
        assert!(shown.ends_with("UTC") || shown.ends_with(&here.format("%:z").to_string()));
        assert_eq!(local_or_dash(None), "-");
    }
}
