//! A boot id for each start of the agent, later than every earlier boot's of this state
//! directory. The server orders boots by their ids (UUIDv7, `is_later_boot`) to tell a
//! restart — whose runs died with the old boot, ended at once as `runner restarted` —
//! from an older boot's presence written late. The time in a v7 id is this machine's wall
//! clock, which may be stepped back between two boots (an NTP correction, a VM restored):
//! a fresh id would then sort before the last one, the restart would go unseen, and the
//! runs it lost would wait out their whole timeout (found by the drill: a runner whose
//! clock was stepped back an hour, killed, had its finished run ended `timed_out`). So
//! the last boot's id is kept, and a new one is never earlier.

use std::path::Path;
use uuid::{NoContext, Timestamp, Uuid};

const LAST_BOOT_FILE: &str = "last-boot";

/// The milliseconds since the epoch a v7 id carries (0 for any other).
fn millis_of(id: Uuid) -> u64 {
    id.get_timestamp()
        .map(|t| {
            let (secs, nanos) = t.to_unix();
            secs * 1000 + u64::from(nanos) / 1_000_000
        })
        .unwrap_or(0)
}

/// A v7 id made now, or a millisecond after `last` if the clock says earlier.
fn after(last: Option<Uuid>, now: Uuid) -> Uuid {
    let Some(last) = last else { return now };
    let floor = millis_of(last) + 1;
    if millis_of(now) >= floor {
        return now;
    }
    Uuid::new_v7(Timestamp::from_unix(
        NoContext,
        floor / 1000,
        ((floor % 1000) * 1_000_000) as u32,
    ))
}

/// This start's boot id, kept in `state_dir` as the last one.
pub(crate) fn next(state_dir: &Path) -> std::io::Result<Uuid> {
    let path = state_dir.join(LAST_BOOT_FILE);
    let last = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| s.trim().parse::<Uuid>().ok());
    let boot = after(last, Uuid::now_v7());
    std::fs::create_dir_all(state_dir)?;
    // Like every file of the state dir, the agent's alone.
    crate::owner_only::write(&path, boot.to_string().as_bytes())?;
    Ok(boot)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boot_after_the_clock_went_back_is_still_later() {
        let dir = std::env::temp_dir().join(format!("baton-boots-{}", Uuid::new_v4()));
        let first = next(&dir).unwrap();
        // As if the last boot had been made an hour ahead of the clock now.
        let ahead = Uuid::new_v7(Timestamp::from_unix(
            NoContext,
            millis_of(first) / 1000 + 3600,
            0,
        ));
        crate::owner_only::write(&dir.join(LAST_BOOT_FILE), ahead.to_string().as_bytes()).unwrap();
        let second = next(&dir).unwrap();
        assert!(second > ahead, "{second} sorts after {ahead}");
        assert_eq!(millis_of(second), millis_of(ahead) + 1);
        let third = next(&dir).unwrap();
        assert!(third > second);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_boot_on_a_clock_that_moved_on_is_made_now() {
        let earlier = Uuid::new_v7(Timestamp::from_unix(NoContext, 1_000_000, 0));
        let now = Uuid::now_v7();
        assert_eq!(after(Some(earlier), now), now);
        assert_eq!(after(None, now), now);
    }
}
