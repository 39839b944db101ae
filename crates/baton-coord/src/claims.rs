//! Claims: which node owns each dispatched task. Every leased, running or cancelling task
//! has exactly one; a claim is only ever removed by compare-and-delete on its lease.

use crate::queue::{CLAIM_RELEASE, parse_uuid};
use crate::{Coord, CoordError};
use uuid::Uuid;

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
