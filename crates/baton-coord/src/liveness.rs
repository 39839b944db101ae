//! Node liveness and runner presence. A node proves it is alive by refreshing a key with a
//! TTL; a node whose key expired is dead to the others, whatever it believes itself.

use crate::{Coord, CoordError};
use baton_core::RunnerId;
use redis::Script;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;
use std::time::Duration;
use uuid::Uuid;

static PRESENCE_FORWARD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/presence_forward.lua")));

/// What a node advertises in its liveness key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node's id, new at each start.
    pub id: String,
    /// The address it serves on, for operators.
    pub addr: String,
    /// When it started, in ms since the Unix epoch.
    pub started_at_ms: i64,
    /// It opens sealed `secret_env` values (every node from the release that seals
    /// them); a node of an earlier release says nothing, and would hand them out sealed.
    #[serde(default)]
    pub opens_sealed_secrets: bool,
}

impl Coord {
    /// Sets (or refreshes) the node's liveness key for `ttl`. Returns whether the key
    /// was still there: if not, others may have declared this node dead.
    pub async fn node_beat(&self, info: &NodeInfo, ttl: Duration) -> Result<bool, CoordError> {
        let mut conn = self.conn().await?;
        let previous: Option<String> = redis::cmd("SET")
            .arg(self.keys.node(&info.id))
            .arg(serde_json::to_string(info).expect("node info serialises"))
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .arg("GET")
            .query_async(&mut conn)
            .await?;
        Ok(previous.is_some())
    }

    /// Deletes the node's liveness key: a clean exit, so others need not wait for its TTL.
    pub async fn node_leave(&self, node: &str) -> Result<(), CoordError> {
        let mut conn = self.conn().await?;
        redis::cmd("DEL")
            .arg(self.keys.node(node))
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    /// Every node whose liveness key has not expired.
    pub async fn nodes_live(&self) -> Result<Vec<NodeInfo>, CoordError> {
        let keys = self
            .scan(&format!("{}*", glob_escape(&self.keys.node(""))))
            .await?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let values: Vec<Option<String>> =
            redis::cmd("MGET").arg(&keys).query_async(&mut conn).await?;
        Ok(values
            .into_iter()
            .flatten()
            .filter_map(|v| serde_json::from_str(&v).ok())
            .collect())
    }

    /// When each of `runners` was last heard from, and under which boot, as far as Redis
    /// knows (nothing after Redis lost its data).
    pub async fn presence_get(
        &self,
        runners: &[RunnerId],
    ) -> Result<Vec<Option<(i64, Uuid)>>, CoordError> {
        if runners.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let values: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.keys.presence())
            .arg(runners.iter().map(RunnerId::to_string).collect::<Vec<_>>())
            .query_async(&mut conn)
            .await?;
        Ok(values
            .into_iter()
            .map(|v| {
                let v = v?;
                let (at, boot) = v.split_once('|')?;
                Some((at.parse().ok()?, Uuid::parse_str(boot).ok()?))
            })
            .collect())
    }

    /// Every runner's presence: (runner, last seen in ms, boot id).
    pub async fn presence_all(&self) -> Result<Vec<(RunnerId, i64, Uuid)>, CoordError> {
        let mut conn = self.conn().await?;
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.keys.presence())
            .query_async(&mut conn)
            .await?;
        Ok(all
            .into_iter()
            .filter_map(|(runner, value)| {
                let (at, boot) = value.split_once('|')?;
                Some((
                    Uuid::parse_str(&runner).ok()?.into(),
                    at.parse().ok()?,
                    Uuid::parse_str(boot).ok()?,
                ))
            })
            .collect())
    }

    /// Forgets the presence of `runners` (deleted ones, for the janitor).
    pub async fn presence_remove(&self, runners: &[RunnerId]) -> Result<(), CoordError> {
        if runners.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn().await?;
        redis::cmd("HDEL")
            .arg(self.keys.presence())
            .arg(runners.iter().map(RunnerId::to_string).collect::<Vec<_>>())
            .query_async::<()>(&mut conn)
            .await?;
        Ok(())
    }

    /// Records when runners were heard from, and under which boot, in Redis only (an
    /// idle runner's polls cost no Postgres write): one script (one read, one write) for
    /// every runner a node heard since its last write, in batches that stay within what a
    /// script may unpack. A stamp older than the one Redis holds is not written.
    pub async fn presence_write(&self, seen: &[(RunnerId, i64, Uuid)]) -> Result<(), CoordError> {
        const BATCH: usize = 1000;
        if seen.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn().await?;
        for batch in seen.chunks(BATCH) {
            let mut invocation = PRESENCE_FORWARD.key(self.keys.presence());
            for (runner, at_ms, boot) in batch {
                invocation
                    .arg(runner.to_string())
                    .arg(at_ms)
                    .arg(boot.to_string());
            }
            invocation.invoke_async::<i64>(&mut conn).await?;
        }
        Ok(())
    }
}

/// Escapes Redis glob metacharacters, so a prefix like `{baton}:` matches literally.
pub(crate) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn glob_escape_quotes_metacharacters() {
        assert_eq!(super::glob_escape("{baton}:node:"), "{baton}:node:");
        assert_eq!(super::glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
