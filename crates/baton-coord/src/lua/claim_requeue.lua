-- Undo a lease: put the task back in its queue and drop the claim, in one step, and only
-- if the claim is still this node's lease. For a lease Postgres could not record, and for
-- a leased task its runner never started. The queue is indexed again, since a lease
-- drops the queues it empties. A grouped task's slot is freed (groups.lua): it queues
-- again like any other of its group.
--
-- KEYS[1] running hash   KEYS[2] owned set of the node   KEYS[3] the queue
-- ARGV[1] task id   ARGV[2] node id   ARGV[3] lease id   ARGV[4] score
-- ARGV[5] wake channel   ARGV[6] queue key without prefix   ARGV[7] queue meta JSON
-- ARGV[8] key prefix
local claim = redis.call('HGET', KEYS[1], ARGV[1])
local expected = ARGV[2] .. '|' .. ARGV[3] .. '|'
if not claim or string.sub(claim, 1, #expected) ~= expected then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
index_add(ARGV[8], ARGV[6], ARGV[7], ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[6])
group_release(ARGV[8], ARGV[1], redis.call('HGET', ARGV[8] .. 'grp', ARGV[1]), false)
return 1
