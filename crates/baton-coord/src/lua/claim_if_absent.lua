-- Claim a dispatched task that has no claim (the repair pass and the rebuild): never
-- overwrites an existing claim. A task its queue holds is claimed only when its run has
-- started (ARGV[7] = '1'): then the entry is a copy a Redis failover or restart brought
-- back while the task runs, and is taken out — dropped as stale instead, with the
-- unclaimed task's group bookkeeping, it let the next lease start another task of the
-- group beside the run. A task not started is left to its
-- queue: the repair read its row a moment ago, and if it was requeued since (claim
-- dropped, entry added, in one step), a claim planted now would make the next lease drop
-- the entry as stale and strand it. A started run goes back to its queue only through
-- `scheduled` and its promotion, which a short retry backoff can fit between the read and
-- this script: so a claim that took an entry says so (2), and the caller reads the row
-- again and undoes it if the row is no longer that run.
--
-- KEYS[1] running hash   KEYS[2] owned set of the claiming node
-- KEYS[3] the task's queue (with the prefix)
-- ARGV[1] task id   ARGV[2] node id   ARGV[3] lease id   ARGV[4] now (ms)
-- ARGV[5] runner id   ARGV[6] boot id ('' when unknown)   ARGV[7] '1' if it started
-- ARGV[8] key prefix   ARGV[9] the queue's key without the prefix
-- ARGV[10] the task's group entry from its row ('' for a task of no group)
-- Returns 0 (not claimed), 1 (claimed), 2 (claimed, taking its entry out of its queue or
-- its group's waiting line).
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 0
end
local took = 1
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  if ARGV[7] ~= '1' then
    return 0
  end
  redis.call('ZREM', KEYS[3], ARGV[1])
  index_refresh(ARGV[8], ARGV[9])
  took = 2
end
redis.call('HSET', KEYS[1], ARGV[1],
  ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6])
redis.call('SADD', KEYS[2], ARGV[1])
-- A slot of its group is taken with the claim, as a lease takes one; a copy parked in
-- the group's waiting line leaves it. A group entry lost with the claim (a task
-- submitted and leased within what the failover dropped) is registered again from the
-- row: without it the claim would hold no slot, and the group would look freer still.
local raw = redis.call('HGET', ARGV[8] .. 'grp', ARGV[1])
if not raw and ARGV[10] ~= '' then
  raw = ARGV[10]
  redis.call('HSET', ARGV[8] .. 'grp', ARGV[1], raw)
end
if raw then
  local key = cjson.decode(raw).key
  redis.call('SADD', ARGV[8] .. 'grun:' .. key, ARGV[1])
  if redis.call('ZREM', ARGV[8] .. 'gwait:' .. key, ARGV[1]) == 1 then
    took = 2
  end
end
return took
