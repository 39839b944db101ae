//! Claims: which node owns each dispatched task. Every leased, running or cancelling task
//! has exactly one; a claim is only ever removed by compare-and-delete on its lease.

use crate::queue::{CLAIM_RELEASE, parse_uuid};
use crate::{Coord, CoordError};
use redis::Script;
use std::sync::LazyLock;
use uuid::Uuid;

static TAKE_OVER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/claims_take_over.lua")));
static CLAIM_IF_ABSENT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/claim_if_absent.lua")));

/// One entry of the `running` hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub node: String,
    pub lease_id: Uuid,
    pub claimed_at_ms: i64,
}

impl Claim {
    /// Parses `node|lease|claimed_at_ms`.
    pub fn parse(value: &str) -> Result<Claim, CoordError> {
        let mut parts = value.splitn(3, '|');
        let (Some(node), Some(lease), Some(at)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(CoordError::Internal(format!("malformed claim {value:?}")));
        };
        Ok(Claim {
            node: node.to_string(),
            lease_id: parse_uuid(lease)?,
            claimed_at_ms: at
                .parse()
                .map_err(|_| CoordError::Internal(format!("malformed claim time {value:?}")))?,
        })
    }
}

impl Coord {
    pub async fn claim_get(&self, task: Uuid) -> Result<Option<Claim>, CoordError> {
        let mut conn = self.conn().await?;
        let value: Option<String> = redis::cmd("HGET")
            .arg(self.keys.running())
            .arg(task.to_string())
            .query_async(&mut conn)
            .await?;
        value.as_deref().map(Claim::parse).transpose()
    }

    /// The claims on `tasks`, in order (`None` where there is none).
    pub async fn claims_get(&self, tasks: &[Uuid]) -> Result<Vec<Option<Claim>>, CoordError> {
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn().await?;
        let values: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(self.keys.running())
            .arg(tasks.iter().map(Uuid::to_string).collect::<Vec<_>>())
            .query_async(&mut conn)
            .await?;
        values
            .iter()
            .map(|v| v.as_deref().map(Claim::parse).transpose())
            .collect()
    }

    /// Drops the claim on `task` if it is still under `lease_id` (design.md §4.2). Returns
    /// whether a claim was dropped.
    pub async fn claim_release(&self, task: Uuid, lease_id: Uuid) -> Result<bool, CoordError> {
        let mut conn = self.conn().await?;
        let done: i32 = CLAIM_RELEASE
            .key(self.keys.running())
            .arg(task.to_string())
            .arg(lease_id.to_string())
            .arg(self.keys.prefix())
            .invoke_async(&mut conn)
            .await?;
        Ok(done == 1)
    }

    /// Claims a dispatched task that has no claim, for `node` (repair and rebuild). False
    /// when it already had one.
    pub async fn claim_if_absent(
        &self,
        task: Uuid,
        node: &str,
        lease_id: Uuid,
        now_ms: i64,
    ) -> Result<bool, CoordError> {
        let mut conn = self.conn().await?;
        let done: i32 = CLAIM_IF_ABSENT
            .key(self.keys.running())
            .key(self.keys.owned(node))
            .arg(task.to_string())
            .arg(node)
            .arg(lease_id.to_string())
            .arg(now_ms)
            .invoke_async(&mut conn)
            .await?;
        Ok(done == 1)
    }

    /// Every claim, for the repair pass.
    pub async fn claims_all(&self) -> Result<Vec<(Uuid, Claim)>, CoordError> {
        let mut conn = self.conn().await?;
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(self.keys.running())
            .query_async(&mut conn)
            .await?;
        all.iter()
            .map(|(id, claim)| Ok((parse_uuid(id)?, Claim::parse(claim)?)))
            .collect()
    }

    /// The nodes that hold claims (have an `owned:` set), live or not.
    pub async fn claim_owners(&self) -> Result<Vec<String>, CoordError> {
        let prefix = self.keys.owned("");
        let keys = self
            .scan(&format!("{}*", crate::liveness::glob_escape(&prefix)))
            .await?;
        Ok(keys
            .into_iter()
            .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
            .collect())
    }

    /// Moves every claim of `dead` to `adopter`, atomically and only while `dead`'s
    /// liveness key is absent. `None` when `dead` turned out to be alive.
    pub async fn claims_take_over(
        &self,
        dead: &str,
        adopter: &str,
    ) -> Result<Option<Vec<Uuid>>, CoordError> {
        let mut conn = self.conn().await?;
        let adopted: Option<Vec<String>> = TAKE_OVER
            .key(self.keys.running())
            .key(self.keys.owned(dead))
            .key(self.keys.owned(adopter))
            .key(self.keys.node(dead))
            .arg(dead)
            .arg(adopter)
            .invoke_async(&mut conn)
            .await?;
        adopted
            .map(|ids| ids.iter().map(|s| parse_uuid(s)).collect())
            .transpose()
    }

    /// How many claims a node holds.
    pub async fn claims_count(&self, node: &str) -> Result<u64, CoordError> {
        let mut conn = self.conn().await?;
        Ok(redis::cmd("SCARD")
            .arg(self.keys.owned(node))
            .query_async(&mut conn)
            .await?)
    }

    /// The task ids a node holds claims on.
    pub async fn claims_of(&self, node: &str) -> Result<Vec<Uuid>, CoordError> {
        let mut conn = self.conn().await?;
        let ids: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys.owned(node))
            .query_async(&mut conn)
            .await?;
        ids.iter().map(|s| parse_uuid(s)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_parse() {
        let lease = Uuid::new_v4();
        let claim = Claim::parse(&format!("node-a|{lease}|1700")).unwrap();
        assert_eq!(
            claim,
            Claim {
                node: "node-a".into(),
                lease_id: lease,
                claimed_at_ms: 1700
            }
        );
        assert!(Claim::parse("node-a|not-a-uuid|1").is_err());
        assert!(Claim::parse("node-a").is_err());
    }
}
