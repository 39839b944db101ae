-- The repair pass's recount of one concurrency group from Postgres (docs/flow-control.md):
-- after a Redis data loss the group's bookkeeping is rebuilt from the rows, and at any
-- time a slot held by no claim is freed and waiting tasks are let back into line.
--
-- ARGV[1] key prefix   ARGV[2] the group's key
-- ARGV[3 ..] pairs: task id, its group entry JSON, for every task of the group that
-- Postgres has queued, leased, running or cancelling
-- Returns {slots taken by a claim found outside the set, slots freed, tasks let back}.
local prefix, key = ARGV[1], ARGV[2]
local running = prefix .. 'running'
local run = prefix .. 'grun:' .. key
local added, freed = 0, 0
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  redis.call('HSET', prefix .. 'grp', id, ARGV[i + 1])
  -- A task with a claim holds a slot, whatever its row says (a lease is in Redis only
  -- until its start).
  if redis.call('HEXISTS', running, id) == 1 then
    added = added + redis.call('SADD', run, id)
  end
end
for _, id in ipairs(redis.call('SMEMBERS', run)) do
  if redis.call('HEXISTS', running, id) == 0 then
    redis.call('SREM', run, id)
    freed = freed + 1
  end
end
local promoted = group_promote(prefix, key)
return {added, freed, promoted}
