-- Concurrency groups (docs/flow-control.md), prepended after the queue index to every
-- script that claims a grouped task or drops a claim, so a slot is taken in the same
-- step as the claim and freed in the same step as the claim's removal:
--   <prefix>grp              hash: task id -> {"key", "limit", "rel", "meta"} for each
--                            grouped task that is queued, parked or holds a lease
--   <prefix>grun:<key>       set: the group's tasks that hold a lease (a claim)
--   <prefix>gwait:<key>      sorted set: the group's parked tasks, by their queue score
-- A member of `grun` always has a claim: it is added with the claim and removed with it.
-- Tasks of no group have no `grp` entry and cost a lease one HMGET per round, whatever
-- their number.

-- Lets waiting tasks of `key` back into their queues, one per free slot: the best first,
-- each at the score it had, with a wake-up so a parked lease takes it. The limit is the
-- best waiting task's own (tasks of one key are meant to carry one limit).
local function group_promote(prefix, key)
  local wait = prefix .. 'gwait:' .. key
  local run = prefix .. 'grun:' .. key
  local promoted = 0
  while true do
    local best = redis.call('ZRANGE', wait, 0, 0, 'WITHSCORES')
    if #best == 0 then return promoted end
    local id, score = best[1], best[2]
    local raw = redis.call('HGET', prefix .. 'grp', id)
    redis.call('ZREM', wait, id)
    if raw then
      local info = cjson.decode(raw)
      if redis.call('SCARD', run) + promoted >= tonumber(info.limit) then
        redis.call('ZADD', wait, score, id)
        return promoted
      end
      redis.call('ZADD', prefix .. info.rel, score, id)
      index_add(prefix, info.rel, info.meta, score)
      redis.call('PUBLISH', prefix .. 'wake', info.rel)
      promoted = promoted + 1
    end
  end
end

-- The task `id` (whose `grp` entry is `raw`, or false for a task of no group) no longer
-- holds a lease: its slot is freed and the best waiting tasks of its group go back in
-- line. With `forget`, the task leaves its group's bookkeeping too (its run ended; a
-- retry is registered again when it is queued again).
local function group_release(prefix, id, raw, forget)
  if not raw then return end
  local info = cjson.decode(raw)
  redis.call('SREM', prefix .. 'grun:' .. info.key, id)
  if forget then
    redis.call('HDEL', prefix .. 'grp', id)
    redis.call('ZREM', prefix .. 'gwait:' .. info.key, id)
  end
  group_promote(prefix, info.key)
end
