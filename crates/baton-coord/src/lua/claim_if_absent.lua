-- Claim a dispatched task that has no claim (the repair pass and the rebuild): never
-- overwrites an existing claim.
--
-- KEYS[1] running hash   KEYS[2] owned set of the claiming node
-- ARGV[1] task id   ARGV[2] node id   ARGV[3] lease id   ARGV[4] now (ms)
-- ARGV[5] runner id   ARGV[6] boot id ('' when unknown)
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1],
  ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[5] .. '|' .. ARGV[6])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
