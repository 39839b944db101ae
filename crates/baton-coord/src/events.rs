//! The event history: one Redis stream every node appends to and reads from, so a client
//! that reconnects to another node with the id of the last event it saw gets every event
//! since (docs/events.md). One entry holds the events of one write — a group commit's
//! transitions, a cancel, a runner joining — so a batch of a thousand transitions costs
//! one `XADD`, not a thousand. Entries older than the retention are trimmed by the
//! appends themselves (`MINID`, exactly: an event is held for the whole retention and no
//! longer), and a resume from a position trimmed away is told so rather than given a
//! history with a hole in it.

use crate::{Coord, CoordError};
use redis::Value;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A stream entry id (`<ms>-<seq>`): entries are ordered by it, on every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EntryId {
    /// The entry's time part, in ms.
    pub ms: u64,
    /// The entry's sequence within its ms.
    pub seq: u64,
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl FromStr for EntryId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (ms, seq) = s.split_once('-').ok_or("an entry id is <ms>-<seq>")?;
        Ok(EntryId {
            ms: ms.parse().map_err(|_| "an entry id's time is a number")?,
            seq: seq
                .parse()
                .map_err(|_| "an entry id's sequence is a number")?,
        })
    }
}

/// One entry: the events one write appended, as the JSON array it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// Where it sits in the stream.
    pub id: EntryId,
    /// The events, a JSON array.
    pub events: String,
}

/// What the stream holds: the newest entry id it ever gave (`None`: never appended to,
/// or lost with Redis's data) and its oldest entry still held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistoryBounds {
    /// The newest entry id the stream ever gave.
    pub last: Option<EntryId>,
    /// The oldest entry it still holds.
    pub first: Option<EntryId>,
    /// Whether anything was ever trimmed away.
    pub trimmed: bool,
}

impl HistoryBounds {
    /// Whether everything after entry `seen` is still held. Entries go only by being
    /// trimmed, oldest first: while `seen` itself is held, so is all that follows it. Once
    /// `seen` is gone, whatever came between it and the oldest held may have gone with
    /// it, so it is not held — unless nothing came after it at all. A Redis that lost
    /// its data (or a position made up) does not know `seen`, and does not hold it.
    pub fn holds_since(&self, seen: EntryId) -> bool {
        if seen == EntryId::default() {
            // From before the first entry: all of it, unless some went.
            return !self.trimmed;
        }
        let Some(last) = self.last else {
            return false;
        };
        if seen > last {
            return false;
        }
        seen == last || self.first.is_some_and(|first| seen >= first)
    }
}

/// The stream's field holding an entry's events.
const FIELD: &str = "e";

impl Coord {
    /// Appends one entry (`events`: a JSON array), trimming what is older than
    /// `retention` by Redis's own clock. Returns the entry's id.
    pub async fn history_append(
        &self,
        events: &str,
        retention: Duration,
        now_ms: u64,
    ) -> Result<EntryId, CoordError> {
        let mut conn = self.conn().await?;
        let min_id = now_ms.saturating_sub(retention.as_millis() as u64);
        let id: String = redis::cmd("XADD")
            .arg(self.keys.events())
            .arg("MINID")
            .arg(min_id)
            .arg("*")
            .arg(FIELD)
            .arg(events)
            .query_async(&mut conn)
            .await?;
        id.parse()
            .map_err(|e: String| CoordError::Internal(format!("XADD answered {id}: {e}")))
    }

    /// Up to `count` entries from `from` (itself included with `inclusive`), oldest
    /// first.
    pub async fn history_from(
        &self,
        from: EntryId,
        inclusive: bool,
        count: usize,
    ) -> Result<Vec<HistoryEntry>, CoordError> {
        let mut conn = self.conn().await?;
        let start = if inclusive {
            from.to_string()
        } else {
            format!("({from}")
        };
        let reply: Value = redis::cmd("XRANGE")
            .arg(self.keys.events())
            .arg(start)
            .arg("+")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await?;
        entries(reply)
    }

    /// Entries after `after`, waiting up to `block` for one to come (`XREAD BLOCK`; keep
    /// it under the command timeout).
    pub async fn history_wait(
        &self,
        after: EntryId,
        block: Duration,
        count: usize,
    ) -> Result<Vec<HistoryEntry>, CoordError> {
        let mut conn = self.conn().await?;
        let reply: Value = redis::cmd("XREAD")
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(block.as_millis() as u64)
            .arg("STREAMS")
            .arg(self.keys.events())
            .arg(after.to_string())
            .query_async(&mut conn)
            .await?;
        // `[[key, entries]]`, or nil when nothing came in time.
        match reply {
            Value::Nil => Ok(Vec::new()),
            Value::Array(streams) | Value::Set(streams) => match streams.into_iter().next() {
                Some(Value::Array(mut pair)) if pair.len() == 2 => entries(pair.remove(1)),
                _ => Ok(Vec::new()),
            },
            Value::Map(streams) => match streams.into_iter().next() {
                Some((_, found)) => entries(found),
                None => Ok(Vec::new()),
            },
            other => Err(CoordError::Internal(format!("XREAD answered {other:?}"))),
        }
    }

    /// Whether the history still holds entry `seen` itself (the position before the first
    /// entry always is). A failover that lost the old master's last entries loses the
    /// ones a subscriber saw too; once the new master appends, ids alone no longer tell,
    /// since the new entries come after the lost ones.
    pub async fn history_has(&self, seen: EntryId) -> Result<bool, CoordError> {
        if seen == EntryId::default() {
            return Ok(true);
        }
        let mut conn = self.conn().await?;
        let held: Vec<Value> = redis::cmd("XRANGE")
            .arg(self.keys.events())
            .arg(seen.to_string())
            .arg(seen.to_string())
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await?;
        Ok(!held.is_empty())
    }

    /// The newest id given and the oldest held (`XINFO STREAM`).
    pub async fn history_bounds(&self) -> Result<HistoryBounds, CoordError> {
        let mut conn = self.conn().await?;
        let reply: Result<Value, redis::RedisError> = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(self.keys.events())
            .query_async(&mut conn)
            .await;
        let fields = match reply {
            Ok(v) => pairs(v),
            // No such key: nothing was ever appended (or Redis lost it).
            Err(e)
                if e.code() == Some("ERR")
                    && e.detail().is_some_and(|d| d.contains("no such key")) =>
            {
                return Ok(HistoryBounds::default());
            }
            Err(e) => return Err(e.into()),
        };
        let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        let id_in = |v: &Value| {
            text(v)
                .and_then(|s| s.parse::<EntryId>().ok())
                .filter(|id| *id != EntryId::default())
        };
        // `first-entry` is `[id, [fields]]`, or nil when the stream is empty.
        let first = match field("first-entry") {
            Some(Value::Array(entry)) => entry.first().and_then(id_in),
            _ => None,
        };
        let count = |name: &str| match field(name) {
            Some(Value::Int(n)) => *n,
            _ => 0,
        };
        Ok(HistoryBounds {
            last: field("last-generated-id").and_then(id_in),
            first,
            trimmed: count("entries-added") > count("length"),
        })
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// A flat `[k, v, k, v]` reply (RESP2) or a map (RESP3) as pairs.
fn pairs(v: Value) -> Vec<(String, Value)> {
    match v {
        Value::Map(map) => map
            .into_iter()
            .filter_map(|(k, v)| Some((text(&k)?, v)))
            .collect(),
        Value::Array(flat) => {
            let mut out = Vec::new();
            let mut it = flat.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                if let Some(k) = text(&k) {
                    out.push((k, v));
                }
            }
            out
        }
        _ => Vec::new(),
    }
}

/// `[[id, [field, value, …]], …]` as entries; an entry without our field is skipped.
fn entries(reply: Value) -> Result<Vec<HistoryEntry>, CoordError> {
    let Value::Array(items) = reply else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Array(mut pair) = item else {
            continue;
        };
        if pair.len() != 2 {
            continue;
        }
        let fields = pairs(pair.remove(1));
        let id = text(&pair[0])
            .and_then(|s| s.parse::<EntryId>().ok())
            .ok_or_else(|| CoordError::Internal("a stream entry without an id".into()))?;
        if let Some(events) = fields
            .iter()
            .find(|(k, _)| k == FIELD)
            .and_then(|(_, v)| text(v))
        {
            out.push(HistoryEntry { id, events });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> EntryId {
        s.parse().unwrap()
    }

    #[test]
    fn entry_ids_order_by_time_then_sequence() {
        assert!(id("5-9") < id("6-0"));
        assert!(id("6-0") < id("6-1"));
        assert_eq!(id("17-3").to_string(), "17-3");
        assert!("17".parse::<EntryId>().is_err());
        assert!("a-1".parse::<EntryId>().is_err());
    }

    #[test]
    fn a_position_is_held_while_it_is_itself_held() {
        let bounds = HistoryBounds {
            last: Some(id("100-0")),
            first: Some(id("50-0")),
            trimmed: true,
        };
        assert!(bounds.holds_since(id("50-0")));
        assert!(bounds.holds_since(id("100-0")));
        assert!(!bounds.holds_since(id("49-0")), "trimmed away");
        assert!(
            !bounds.holds_since(id("101-0")),
            "newer than anything given"
        );
        assert!(!HistoryBounds::default().holds_since(id("1-0")), "unknown");
        let emptied = HistoryBounds {
            last: Some(id("100-0")),
            first: None,
            trimmed: true,
        };
        assert!(emptied.holds_since(id("100-0")), "nothing came after it");
        assert!(!emptied.holds_since(id("99-0")));
        // From the very start: held while nothing was trimmed (a new, empty history too).
        assert!(HistoryBounds::default().holds_since(EntryId::default()));
        assert!(!emptied.holds_since(EntryId::default()));
    }
}
