//! The Lua scripts of crates/baton-coord/src/lua/ that touch the queue, the claims and the
//! group, each one atomic step on [`Redis`], as Redis runs a script. Only what a task of
//! one queue and one group meets is kept: no queue index, no replay record, no wake-ups.

use super::state::{Claim, Lease, MAX_TASKS, Node, Redis, Task, bit};

impl Redis {
    /// Redis after an empty restart: nothing, not even the generation marker.
    pub const EMPTY: Redis = Redis {
        queue: 0,
        claims: [None; MAX_TASKS],
        grp: 0,
        grun: 0,
        gwait: 0,
        paused: false,
        epoch: false,
    };

    fn has(set: u8, t: Task) -> bool {
        set & bit(t) != 0
    }

    /// `lease.lua`, for a runner that wants one task: the queue's head is read, one entry
    /// a round. A claimed task's entry is stale and dropped (and with one place wanted
    /// the round ends there); a grouped task takes a slot with its claim, or is parked
    /// in `gwait` and the queue is read on; a task with no `grp` entry is claimed with
    /// no slot. A paused queue is never a candidate. Returns the task claimed.
    pub fn lease(&mut self, node: Node, lease: Lease, limit: u8) -> Option<Task> {
        if self.paused {
            return None;
        }
        while self.queue != 0 {
            let t = self.queue.trailing_zeros() as Task;
            self.queue &= !bit(t);
            if self.claims[t].is_some() {
                return None;
            }
            if Self::has(self.grp, t) {
                if self.grun.count_ones() < u32::from(limit) {
                    self.grun |= bit(t);
                } else {
                    self.gwait |= bit(t);
                    continue;
                }
            }
            self.claims[t] = Some(Claim { node, lease });
            return Some(t);
        }
        None
    }

    /// `group_promote` in groups.lua: waiting tasks back in their queue, one per free
    /// slot, best first; a waiting task with no `grp` entry leaves the line (the repair
    /// queues it again).
    fn group_promote(&mut self, limit: u8) {
        let mut promoted = 0;
        while self.gwait != 0 {
            let t = self.gwait.trailing_zeros() as Task;
            self.gwait &= !bit(t);
            if Self::has(self.grp, t) {
                if self.grun.count_ones() + promoted >= u32::from(limit) {
                    self.gwait |= bit(t);
                    return;
                }
                self.queue |= bit(t);
                promoted += 1;
            }
        }
    }

    /// `group_release` in groups.lua: the task's slot is freed and waiting tasks let
    /// back; with `forget` it leaves the group's bookkeeping too.
    fn group_release(&mut self, t: Task, forget: bool, limit: u8) {
        if !Self::has(self.grp, t) {
            return;
        }
        self.grun &= !bit(t);
        if forget {
            self.grp &= !bit(t);
            self.gwait &= !bit(t);
        }
        self.group_promote(limit);
    }

    /// `runs_end.lua` for one run with no retry (`claim_release` too): the claim goes
    /// only under its own lease, with its group entry (`forget`); a task with no claim
    /// has its slot freed, its entry kept.
    pub fn runs_end(&mut self, t: Task, lease: Lease, limit: u8) {
        match self.claims[t] {
            Some(claim) if claim.lease == lease => {
                self.claims[t] = None;
                self.group_release(t, true, limit);
            }
            Some(_) => {}
            None => self.group_release(t, false, limit),
        }
    }

    /// `claim_requeue.lua`: only the node's claim under the lease; back in the queue,
    /// its slot freed.
    pub fn claim_requeue(&mut self, t: Task, node: Node, lease: Lease, limit: u8) {
        if self.claims[t] != Some(Claim { node, lease }) {
            return;
        }
        self.claims[t] = None;
        self.queue |= bit(t);
        self.group_release(t, false, limit);
    }

    /// `claims_adopt.lua`: the claim made under `from` becomes the run's (same node),
    /// its slot kept; nothing released, nothing promoted.
    pub fn claims_adopt(&mut self, t: Task, from: Lease, to: Lease) {
        if let Some(claim) = &mut self.claims[t]
            && claim.lease == from
        {
            claim.lease = to;
        }
    }

    /// `claims_take_over.lua`: every claim of the dead node becomes the adopter's.
    pub fn claims_take_over(&mut self, dead: Node, adopter: Node) {
        for claim in self.claims.iter_mut().flatten() {
            if claim.node == dead {
                claim.node = adopter;
            }
        }
    }

    /// `queue_remove.lua`: the entry goes; an unclaimed grouped task leaves its group
    /// (its waiting line and its entry), and the line moves up.
    pub fn queue_remove(&mut self, t: Task, limit: u8) {
        self.queue &= !bit(t);
        if Self::has(self.grp, t) && self.claims[t].is_none() {
            self.group_release(t, true, limit);
        }
    }

    /// `enqueue.lua`, submit's add: in the queue, registered with its group.
    pub fn enqueue(&mut self, t: Task) {
        self.grp |= bit(t);
        self.queue |= bit(t);
    }

    /// `enqueue_unclaimed.lua`: queued only if unclaimed and not parked; registered with
    /// its group.
    pub fn enqueue_unclaimed(&mut self, t: Task) {
        if Self::has(self.gwait, t) || self.claims[t].is_some() {
            return;
        }
        self.grp |= bit(t);
        self.queue |= bit(t);
    }

    /// `claim_if_absent.lua`, for a started run: never over a claim; a run its queue
    /// holds is claimed with its entry taken out when `queued_runs` (the fix), left
    /// alone otherwise. A slot of its group is taken with the claim, and a copy in the
    /// group's waiting line leaves it. (The model has no retries, so the check that the
    /// run has not ended and been queued again since the read, `undo_if_moved_on`, has
    /// nothing to find here.)
    pub fn claim_if_absent(&mut self, t: Task, node: Node, lease: Lease, queued_runs: bool) {
        if self.claims[t].is_some() {
            return;
        }
        if Self::has(self.queue, t) {
            if !queued_runs {
                return;
            }
            self.queue &= !bit(t);
        }
        self.claims[t] = Some(Claim { node, lease });
        if Self::has(self.grp, t) {
            self.grun |= bit(t);
            self.gwait &= !bit(t);
        }
    }

    /// `groups_repair.lua`: every unfinished task of the group registered; a claimed one
    /// holds a slot, a slot held by no claim is freed; waiting tasks let back.
    pub fn groups_repair(&mut self, unfinished: u8, limit: u8) {
        self.grp |= unfinished;
        for t in 0..MAX_TASKS {
            if Self::has(unfinished, t) && self.claims[t].is_some() {
                self.grun |= bit(t);
            }
            if Self::has(self.grun, t) && self.claims[t].is_none() {
                self.grun &= !bit(t);
            }
        }
        self.group_promote(limit);
    }
}
