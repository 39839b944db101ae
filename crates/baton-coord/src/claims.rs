//! Claims: which node owns each dispatched task, and which runner (and boot) holds its
//! lease. Every leased, running or cancelling task has exactly one; a claim is only ever
//! removed by compare-and-delete on its lease.
//!
//! A task leased but not yet started exists only here: Postgres still calls it `queued`
//! until the runner's start is recorded under the claim's lease (design.md §4.3).

use crate::queue::parse_uuid;
use crate::{Coord, CoordError, Enqueue};
use baton_core::LeaseId;
use baton_core::RunnerId;
use redis::Script;
use std::sync::LazyLock;
use uuid::Uuid;

static TAKE_OVER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/claims_take_over.lua")));
static ADOPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/claims_adopt.lua")));
static CLAIM_IF_ABSENT: LazyLock<Script> =
    LazyLock::new(|| crate::queue::indexing(include_str!("lua/claim_if_absent.lua")));
pub(crate) static RUNS_END: LazyLock<Script> =
    LazyLock::new(|| crate::queue::indexing(include_str!("lua/runs_end.lua")));

/// A dispatched task as the caller read its row: what [`Coord::claim_if_absent`] claims
/// it under.
#[derive(Debug, Clone, Copy)]
pub struct DispatchedRow<'a> {
    /// The task's place in Redis, as its row has it: its queue, and its group's entry,
    /// which the claim registers again when a failover lost it with the claim.
    pub entry: &'a Enqueue,
    /// The lease its row has.
    pub lease_id: LeaseId,
    /// The runner its row names.
    pub runner: Option<RunnerId>,
    /// The runner's boot its row names.
    pub boot: Option<Uuid>,
    /// Its run has started (`running` or `cancelling`, not only `leased`).
    pub started: bool,
}

/// What [`Coord::claim_if_absent`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimedIfAbsent {
    /// Nothing: it had a claim, or it is not started and its queue holds it.
    No,
    /// Claimed.
    Claimed,
    /// Claimed, taking its entry out of its queue and a slot of its group: the entry of
    /// a started run, as a failover brings back — or, if the run ended and its task was
    /// queued again after the caller read its row (a retry with a short backoff), the
    /// entry of that new turn. The caller reads the row again and, if it is no longer
    /// that run, puts the claim back ([`Coord::claim_release`]) and the entry
    /// ([`Coord::enqueue_unclaimed`]).
    TookItsEntry,
}

/// One entry of the `running` hash: `node|lease|claimed_at_ms|runner|boot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The node that answers for the task.
    pub node: String,
    /// The lease the task was handed out under: the fencing token of its run.
    pub lease_id: LeaseId,
    /// When the claim was made, in ms of the cluster's clock.
    pub claimed_at_ms: i64,
    /// The runner the lease was handed to, and its boot (absent in claims written by the
    /// repair pass for rows that had none).
    pub runner: Option<RunnerId>,
    /// The boot of `runner` the lease went to.
    pub boot: Option<Uuid>,
}

impl Claim {
    /// Parses `node|lease|claimed_at_ms[|runner|boot]`.
    pub fn parse(value: &str) -> Result<Claim, CoordError> {
        let malformed = || CoordError::Internal(format!("malformed claim {value:?}"));
        let parts: Vec<&str> = value.split('|').collect();
        let (node, lease, at, runner, boot) = match parts.as_slice() {
            [node, lease, at] => (*node, *lease, *at, "", ""),
            [node, lease, at, runner, boot] => (*node, *lease, *at, *runner, *boot),
            _ => return Err(malformed()),
        };
        Ok(Claim {
            node: node.to_string(),
            lease_id: parse_uuid(lease)?,
            claimed_at_ms: at.parse().map_err(|_| malformed())?,
            runner: optional_uuid(runner)?,
            boot: optional_uuid(boot)?,
        })
    }
}

/// A run whose Redis bookkeeping follows its end in Postgres: its claim goes (if still
/// under `lease_id`), and a retry waits in the delayed set until `retry_at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnded {
    /// The task whose run ended.
    pub task: Uuid,
    /// The lease the run held: the claim goes only if it is still under it.
    pub lease_id: LeaseId,
    /// When its retry is due, in ms, if it retries.
    pub retry_at_ms: Option<i64>,
}

/// A claim to hand to the run Postgres has on its task (`lua/claims_adopt.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimAdopt {
    /// The task.
    pub task: Uuid,
    /// The lease the claim is under now: it is adopted only if still so.
    pub from: LeaseId,
    /// The run's lease, as its row has it.
    pub lease_id: LeaseId,
    /// The run's runner and boot, as its row has them.
    pub runner: Option<RunnerId>,
    /// The boot of `runner`.
    pub boot: Option<Uuid>,
}

impl Coord {
    /// Hands each claim made under `from` to the run Postgres has on its task, keeping
    /// its group slot (design.md §4.2: a claim names the lease of the task's run).
    /// Returns how many were adopted.
    pub async fn claims_adopt(
        &self,
        now_ms: i64,
        adoptions: &[ClaimAdopt],
    ) -> Result<usize, CoordError> {
        if adoptions.is_empty() {
            return Ok(0);
        }
        let mut inv = ADOPT.prepare_invoke();
        inv.key(self.keys.running()).arg(now_ms);
        for a in adoptions {
            inv.arg(a.task.to_string())
                .arg(a.from.to_string())
                .arg(a.lease_id.to_string())
                .arg(optional_text(a.runner))
                .arg(optional_text(a.boot));
        }
        let mut conn = self.conn().await?;
        Ok(inv.invoke_async::<usize>(&mut conn).await?)
    }

    /// The claim on `task`, if a node holds one.
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

    /// The claims on `tasks` that exist, by task.
    pub async fn claims_by_task(
        &self,
        tasks: &[Uuid],
    ) -> Result<std::collections::HashMap<Uuid, Claim>, CoordError> {
        let claims = self.claims_get(tasks).await?;
        // HMGET answers in the order of the fields it was given.
        Ok(tasks
            .iter()
            .copied()
            .zip(claims)
            .filter_map(|(task, claim)| Some((task, claim?)))
            .collect())
    }

    /// Drops the claim on `task` if it is still under `lease_id` (design.md §4.2). Returns
    /// whether a claim was dropped.
    pub async fn claim_release(&self, task: Uuid, lease_id: LeaseId) -> Result<bool, CoordError> {
        let ended = RunEnded {
            task,
            lease_id,
            retry_at_ms: None,
        };
        Ok(self.runs_ended(&[ended], &[]).await? == 1)
    }

    /// After Postgres recorded the end of these runs (or refused these leases): their
    /// claims go, retries wait in the delayed set, and log followers of `logs_done` on
    /// every node hear that those logs are complete, all in one script. Returns how many
    /// claims were dropped.
    pub async fn runs_ended(
        &self,
        runs: &[RunEnded],
        logs_done: &[Uuid],
    ) -> Result<usize, CoordError> {
        if runs.is_empty() && logs_done.is_empty() {
            return Ok(0);
        }
        let wake = if logs_done.is_empty() {
            String::new()
        } else {
            crate::Wake::Logs(logs_done.to_vec()).payload()
        };
        let mut inv = RUNS_END.prepare_invoke();
        inv.key(self.keys.running())
            .key(self.keys.delayed())
            .arg(self.keys.prefix())
            .arg(self.keys.wake())
            .arg(wake);
        for run in runs {
            inv.arg(run.task.to_string())
                .arg(run.lease_id.to_string())
                .arg(run.retry_at_ms.map(|ms| ms.to_string()).unwrap_or_default());
        }
        let mut conn = self.conn().await?;
        Ok(inv.invoke_async::<usize>(&mut conn).await?)
    }

    /// Claims a dispatched task that has no claim, for `node` (repair and rebuild), under
    /// the lease its row has. Nothing when it already had one, or when its queue holds it
    /// and it has not `started`: it was requeued after the caller read its row. A started
    /// run its queue holds (a copy a Redis failover brought back) is claimed, its entry
    /// taken out and its group slot taken (`claim_if_absent.lua`) — unless the run ended
    /// and was queued again since the caller's read, which the caller then asks Postgres
    /// ([`ClaimedIfAbsent::TookItsEntry`]).
    pub async fn claim_if_absent(
        &self,
        row: &DispatchedRow<'_>,
        node: &str,
        now_ms: i64,
    ) -> Result<ClaimedIfAbsent, CoordError> {
        let queue_key = row.entry.key_rel();
        let mut conn = self.conn().await?;
        let done: i32 = CLAIM_IF_ABSENT
            .key(self.keys.running())
            .key(self.keys.owned(node))
            .key(self.keys.queue(&queue_key))
            .arg(row.entry.task_id.to_string())
            .arg(node)
            .arg(row.lease_id.to_string())
            .arg(now_ms)
            .arg(optional_text(row.runner))
            .arg(optional_text(row.boot))
            .arg(if row.started { "1" } else { "0" })
            .arg(self.keys.prefix())
            .arg(&queue_key)
            .arg(row.entry.group_entry().unwrap_or_default())
            .invoke_async(&mut conn)
            .await?;
        Ok(match done {
            0 => ClaimedIfAbsent::No,
            1 => ClaimedIfAbsent::Claimed,
            _ => ClaimedIfAbsent::TookItsEntry,
        })
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

/// An id a claim may lack (the runner, the boot of a claim of the previous format): an
/// empty field in the claim's text.
fn optional_text(id: Option<impl std::fmt::Display>) -> String {
    id.map(|id| id.to_string()).unwrap_or_default()
}

/// The id of a field written by [`optional_text`].
fn optional_uuid<Id: From<Uuid>>(field: &str) -> Result<Option<Id>, CoordError> {
    (!field.is_empty()).then(|| parse_uuid(field)).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_parse() {
        let (lease, runner, boot) = (LeaseId::random(), RunnerId::random(), Uuid::new_v4());
        let claim = Claim::parse(&format!("node-a|{lease}|1700|{runner}|{boot}")).unwrap();
        assert_eq!(
            claim,
            Claim {
                node: "node-a".into(),
                lease_id: lease,
                claimed_at_ms: 1700,
                runner: Some(runner),
                boot: Some(boot),
            }
        );
        let unknown_holder = Claim::parse(&format!("node-a|{lease}|1700||")).unwrap();
        assert_eq!((unknown_holder.runner, unknown_holder.boot), (None, None));
        let older_format = Claim::parse(&format!("node-a|{lease}|1700")).unwrap();
        assert_eq!(older_format.runner, None);
        assert!(Claim::parse("node-a|not-a-uuid|1").is_err());
        assert!(Claim::parse("node-a").is_err());
        assert!(Claim::parse(&format!("node-a|{lease}|1|{runner}")).is_err());
    }
}
