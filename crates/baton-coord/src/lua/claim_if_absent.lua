-- Claim a dispatched task that has no claim (the repair pass and the rebuild): never
-- overwrites an existing claim, and never claims a task its queue holds. The repair read
-- the task's row a moment ago; if it was requeued since (claim dropped, entry added, in
-- one step), a claim planted now would make the next lease drop the entry as stale and
-- strand the task, queued in Postgres with neither an entry nor a live lease.
--
-- KEYS[1] running hash   KEYS[2] owned set of the claiming node
-- KEYS[3] the task's queue
-- ARGV[1] task id   ARGV[2] node id   ARGV[3] lease id   ARGV[4] now (ms)
-- ARGV[5] runner id   ARGV[6] boot id ('' when unknown)
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 0
end
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1],
  ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
