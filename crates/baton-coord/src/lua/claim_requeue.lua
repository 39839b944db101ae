-- Undo a lease this node could not record in Postgres: put the task back in its queue
-- and drop the claim, in one step, and only if the claim is still this node's lease.
--
-- KEYS[1] running hash   KEYS[2] owned set of the node   KEYS[3] the queue
-- ARGV[1] task id   ARGV[2] node id   ARGV[3] lease id   ARGV[4] score
-- ARGV[5] wake channel   ARGV[6] queue key without prefix
local claim = redis.call('HGET', KEYS[1], ARGV[1])
local expected = ARGV[2] .. '|' .. ARGV[3] .. '|'
if not claim or string.sub(claim, 1, #expected) ~= expected then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
