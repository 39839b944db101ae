-- Drop a claim once its task is finished (or its lease was refused), compare-and-delete
-- on the lease: a claim taken since under another lease is left alone. Any node may
-- release, so the owner's set is named by the claim itself.
--
-- KEYS[1] running hash
-- ARGV[1] task id   ARGV[2] lease id   ARGV[3] key prefix
local claim = redis.call('HGET', KEYS[1], ARGV[1])
if not claim then return 0 end
local node, lease = string.match(claim, '^([^|]*)|([^|]*)|')
if lease ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SREM', ARGV[3] .. 'owned:' .. node, ARGV[1])
return 1
