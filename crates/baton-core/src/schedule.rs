//! What a schedule does when its ticks fall due: which ticks fire, which were missed, and
//! what the overlap policy makes of a previous run that has not finished.
//!
//! A tick is **on time** when a node handles it within the misfire grace of its instant;
//! later than that it was **missed** (no node was up, or none could reach Postgres), and
//! the catch-up policy decides: `skip` fires none of the missed ticks, `latest` fires the
//! latest of them, `all` fires every one. Whatever the policy, a missed tick older than
//! the catch-up window never fires. Every tick is recorded either way: as a task, or as
//! skipped with its reason.

use crate::cron::CronClock;
use chrono::{DateTime, Duration, Utc};

/// What to do with a tick while the previous run is unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Overlap {
    /// Start it anyway: runs may overlap.
    Allow,
    /// Skip the tick (recorded as skipped).
    Skip,
    /// Cancel the previous run, then start this one.
    Cancel,
    /// Hold one tick until the previous run finishes; further ticks meanwhile are
    /// skipped.
    Queue,
}

/// What to do with ticks missed while no node could fire them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum CatchUp {
    /// Fire none of the missed ticks.
    Skip,
    /// Fire the latest missed tick within the window.
    Latest,
    /// Fire every missed tick within the window.
    All,
}

macro_rules! named_policy {
    ($ty:ident, $field:literal, $($variant:ident = $name:literal),+) => {
        impl $ty {
            /// Every name, as the API accepts them.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The name, as stored and as the API writes it.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }

            /// The policy named `name`, or why it is none.
            pub fn parse(name: &str) -> Result<$ty, crate::Invalid> {
                match name {
                    $($name => Ok($ty::$variant),)+
                    other => Err(crate::Invalid::new(
                        $field,
                        format!("{other:?} is not one of {}", Self::NAMES.join(", ")),
                    )),
                }
            }
        }
    };
}
named_policy!(
    Overlap,
    "overlap",
    Allow = "allow",
    Skip = "skip",
    Cancel = "cancel",
    Queue = "queue"
);
named_policy!(
    CatchUp,
    "catch_up",
    Skip = "skip",
    Latest = "latest",
    All = "all"
);

/// How far a pass looks at missed ticks one by one; a longer outage of a fast schedule
/// is skipped past in one step, its count then a lower bound.
const MAX_TICKS_PER_PASS: usize = 100_000;

/// The ticks due at `now` from `next` on, sorted out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DueTicks {
    /// Ticks to fire, oldest first, each with whether it was missed (a catch-up).
    pub fire: Vec<(DateTime<Utc>, bool)>,
    /// Missed ticks that do not fire: the first, the last and how many.
    pub skipped: Option<SkippedRange>,
    /// The next tick not yet due (`None`: the schedule has ended).
    pub next: Option<DateTime<Utc>>,
}

/// The missed ticks a schedule skipped, recorded as one range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedRange {
    /// The first tick skipped.
    pub first: DateTime<Utc>,
    /// The last tick skipped.
    pub last: DateTime<Utc>,
    /// How many ticks were skipped.
    pub count: u64,
}

/// The catch-up rules a schedule carries.
#[derive(Debug, Clone, Copy)]
pub struct CatchUpRule {
    /// What to do with missed ticks.
    pub policy: CatchUp,
    /// How old a missed tick may be and still fire.
    pub window: Duration,
    /// Lateness up to which a tick counts as on time.
    pub grace: Duration,
}

/// Sorts the ticks from `next` up to `now` (and before `end`) into those that fire and
/// those skipped as missed, and finds the tick after them.
pub fn due_ticks(
    clock: &CronClock,
    next: DateTime<Utc>,
    now: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
    rule: CatchUpRule,
) -> DueTicks {
    let within_end = |t: &DateTime<Utc>| end.is_none_or(|e| *t <= e);
    let mut on_time = Vec::new();
    let mut missed = Vec::new();
    let mut tick = Some(next).filter(within_end);
    let mut jumped = false;
    while let Some(t) = tick.filter(|t| *t <= now) {
        if now - t <= rule.grace {
            on_time.push(t);
        } else {
            missed.push(t);
        }
        tick = if !jumped && missed.len() >= MAX_TICKS_PER_PASS {
            // Far behind: the missed ticks past these are skipped without being counted.
            jumped = true;
            clock.next_after(now - rule.grace)
        } else {
            clock.next_after(t)
        }
        .filter(within_end);
    }
    let missed_count = missed.len() as u64;
    let (caught_up, skipped) = catch_up(&missed, missed_count, now, rule);
    let mut fire: Vec<(DateTime<Utc>, bool)> = caught_up.into_iter().map(|t| (t, true)).collect();
    fire.extend(on_time.into_iter().map(|t| (t, false)));
    DueTicks {
        fire,
        skipped,
        next: tick,
    }
}

/// Of the missed ticks, those that fire and the range that does not.
fn catch_up(
    missed: &[DateTime<Utc>],
    count: u64,
    now: DateTime<Utc>,
    rule: CatchUpRule,
) -> (Vec<DateTime<Utc>>, Option<SkippedRange>) {
    let in_window = |t: &DateTime<Utc>| now - *t <= rule.window;
    let firing: Vec<DateTime<Utc>> = match rule.policy {
        CatchUp::Skip => Vec::new(),
        CatchUp::Latest => missed
            .last()
            .copied()
            .filter(in_window)
            .into_iter()
            .collect(),
        CatchUp::All => missed.iter().copied().filter(in_window).collect(),
    };
    let rest: Vec<DateTime<Utc>> = missed
        .iter()
        .copied()
        .filter(|t| !firing.contains(t))
        .collect();
    let skipped = match (rest.first(), rest.last()) {
        (Some(first), Some(last)) => Some(SkippedRange {
            first: *first,
            last: *last,
            count: count - firing.len() as u64,
        }),
        _ => None,
    };
    (firing, skipped)
}

/// What the overlap policy makes of the ticks firing in one pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OverlapPlan {
    /// Ticks that become tasks now.
    pub start: Vec<(DateTime<Utc>, bool)>,
    /// The tick held for later (`queue`), replacing `buffered`.
    pub buffered: Option<DateTime<Utc>>,
    /// Ticks skipped because a run was unfinished.
    pub skipped: Vec<DateTime<Utc>>,
    /// Cancel the unfinished runs before starting.
    pub cancel_previous: bool,
}

/// Applies `overlap` to `ticks` (oldest first), given whether a previous run is
/// unfinished and the tick held from an earlier pass. A held tick starts once nothing is
/// unfinished, before the new ones.
pub fn plan_overlap(
    overlap: Overlap,
    ticks: &[(DateTime<Utc>, bool)],
    unfinished: bool,
    buffered: Option<DateTime<Utc>>,
) -> OverlapPlan {
    let mut plan = OverlapPlan::default();
    let mut busy = unfinished;
    if let Some(held) = buffered {
        if busy {
            plan.buffered = Some(held);
        } else {
            plan.start.push((held, false));
            busy = true;
        }
    }
    match overlap {
        Overlap::Allow => plan.start.extend_from_slice(ticks),
        Overlap::Cancel => {
            if let Some((last, rest)) = ticks.split_last() {
                plan.skipped.extend(rest.iter().map(|(t, _)| *t));
                plan.start.push(*last);
                plan.cancel_previous = busy;
            }
        }
        Overlap::Skip | Overlap::Queue => {
            for tick in ticks {
                if !busy {
                    plan.start.push(*tick);
                    busy = true;
                } else if overlap == Overlap::Queue && plan.buffered.is_none() {
                    plan.buffered = Some(tick.0);
                } else {
                    plan.skipped.push(tick.0);
                }
            }
        }
    }
    plan
}

/// A tick's delay within `jitter_s`, the same on every node for the same tick: spreads
/// the schedules that share a minute without making a tick's task differ by who fired it.
pub fn jitter_of(schedule: u128, tick: DateTime<Utc>, jitter_s: u32) -> Duration {
    if jitter_s == 0 {
        return Duration::zero();
    }
    // splitmix64 over the schedule and the tick.
    let mut x = (schedule as u64) ^ ((schedule >> 64) as u64) ^ tick.timestamp_millis() as u64;
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    Duration::milliseconds((x % (u64::from(jitter_s) * 1000)) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u32) -> DateTime<Utc> {
        format!("2026-12-03T10:00:{s:02}Z").parse().unwrap()
    }

    fn every_second() -> CronClock {
        CronClock::new("* * * * * *", "UTC").unwrap()
    }

    fn rule(policy: CatchUp) -> CatchUpRule {
        CatchUpRule {
            policy,
            window: Duration::seconds(30),
            grace: Duration::seconds(2),
        }
    }

    #[test]
    fn on_time_ticks_fire_and_the_next_is_after_now() {
        let due = due_ticks(&every_second(), t(10), t(11), None, rule(CatchUp::Skip));
        assert_eq!(due.fire, vec![(t(10), false), (t(11), false)]);
        assert_eq!(due.skipped, None);
        assert_eq!(due.next, Some(t(12)));
    }

    #[test]
    fn missed_ticks_follow_the_catch_up_policy() {
        // Ticks 0..=20 due at 20 s: 18..=20 on time, 0..=17 missed.
        let skip = due_ticks(&every_second(), t(0), t(20), None, rule(CatchUp::Skip));
        assert_eq!(
            skip.fire,
            vec![(t(18), false), (t(19), false), (t(20), false)]
        );
        assert_eq!(
            skip.skipped,
            Some(SkippedRange {
                first: t(0),
                last: t(17),
                count: 18
            })
        );

        let latest = due_ticks(&every_second(), t(0), t(20), None, rule(CatchUp::Latest));
        assert_eq!(latest.fire[0], (t(17), true));
        assert_eq!(latest.fire.len(), 4);
        assert_eq!(
            latest.skipped,
            Some(SkippedRange {
                first: t(0),
                last: t(16),
                count: 17
            })
        );

        let all = due_ticks(&every_second(), t(0), t(20), None, rule(CatchUp::All));
        assert_eq!(all.fire.len(), 21);
        assert!(all.fire[..18].iter().all(|(_, late)| *late));
        assert_eq!(all.skipped, None);
        assert_eq!(all.next, Some(t(21)));
    }

    #[test]
    fn missed_ticks_older_than_the_window_never_fire() {
        let mut r = rule(CatchUp::All);
        r.window = Duration::seconds(5);
        let due = due_ticks(&every_second(), t(0), t(20), None, r);
        // 15..=17 missed within the window, 18..=20 on time.
        assert_eq!(due.fire.first(), Some(&(t(15), true)));
        assert_eq!(due.fire.len(), 6);
        assert_eq!(
            due.skipped,
            Some(SkippedRange {
                first: t(0),
                last: t(14),
                count: 15
            })
        );
    }

    #[test]
    fn ticks_after_the_end_do_not_fire_and_leave_no_next() {
        let due = due_ticks(
            &every_second(),
            t(10),
            t(20),
            Some(t(11)),
            rule(CatchUp::All),
        );
        assert_eq!(
            due.fire.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            vec![t(10), t(11)]
        );
        assert_eq!(due.next, None);
    }

    #[test]
    fn overlap_policies() {
        let ticks = [(t(1), false), (t(2), false)];
        let allow = plan_overlap(Overlap::Allow, &ticks, true, None);
        assert_eq!(allow.start, ticks.to_vec());

        let skip = plan_overlap(Overlap::Skip, &ticks, true, None);
        assert!(skip.start.is_empty());
        assert_eq!(skip.skipped, vec![t(1), t(2)]);
        let skip_idle = plan_overlap(Overlap::Skip, &ticks, false, None);
        assert_eq!(skip_idle.start, vec![(t(1), false)]);
        assert_eq!(skip_idle.skipped, vec![t(2)]);

        let cancel = plan_overlap(Overlap::Cancel, &ticks, true, None);
        assert_eq!(cancel.start, vec![(t(2), false)]);
        assert!(cancel.cancel_previous);
        assert_eq!(cancel.skipped, vec![t(1)]);

        let queue = plan_overlap(Overlap::Queue, &ticks, true, None);
        assert!(queue.start.is_empty());
        assert_eq!(queue.buffered, Some(t(1)));
        assert_eq!(queue.skipped, vec![t(2)]);
    }

    #[test]
    fn a_held_tick_starts_once_the_previous_run_is_done() {
        let held = plan_overlap(Overlap::Queue, &[], true, Some(t(1)));
        assert_eq!(held.buffered, Some(t(1)));
        assert!(held.start.is_empty());
        let released = plan_overlap(Overlap::Queue, &[(t(3), false)], false, Some(t(1)));
        assert_eq!(released.start, vec![(t(1), false)]);
        assert_eq!(released.buffered, Some(t(3)));
    }

    #[test]
    fn policy_names_round_trip_and_unknown_ones_name_the_field() {
        for name in Overlap::NAMES {
            assert_eq!(Overlap::parse(name).unwrap().as_str(), *name);
        }
        assert_eq!(CatchUp::parse("sometimes").unwrap_err().field, "catch_up");
        assert_eq!(Overlap::parse("merge").unwrap_err().field, "overlap");
    }

    #[test]
    fn jitter_is_bounded_and_the_same_for_the_same_tick() {
        for s in 0..50 {
            let j = jitter_of(42, t(s), 7);
            assert!(j >= Duration::zero() && j < Duration::seconds(7));
            assert_eq!(j, jitter_of(42, t(s), 7));
        }
        assert_eq!(jitter_of(42, t(1), 0), Duration::zero());
    }
}
