-- Write the generation marker only if this rebuild still holds its lock. Redis that lost
-- its data again while the rebuild ran lost the lock with it (and whatever the rebuild
-- had written before): the marker must stay missing, so the next pass rebuilds.
--
-- KEYS[1] lock key   KEYS[2] epoch key   ARGV[1] owner token   ARGV[2] marker
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[2], ARGV[2])
  return 1
end
return 0
