-- Undo a lease: put the task back in its queue and drop the claim, in one step, and only
-- if the claim is still this node's lease. For a lease Postgres could not record, and for
-- a leased task its runner never started. The queue is registered again in the queues
-- hash, since the lease script drops the keys it finds empty.
--
-- KEYS[1] running hash   KEYS[2] owned set of the node   KEYS[3] the queue
-- KEYS[4] queues hash
-- ARGV[1] task id   ARGV[2] node id   ARGV[3] lease id   ARGV[4] score
-- ARGV[5] wake channel   ARGV[6] queue key without prefix   ARGV[7] queue meta JSON
local claim = redis.call('HGET', KEYS[1], ARGV[1])
local expected = ARGV[2] .. '|' .. ARGV[3] .. '|'
if not claim or string.sub(claim, 1, #expected) ~= expected then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[6], ARGV[7])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
