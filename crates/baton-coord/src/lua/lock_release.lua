-- Release a lock only if this owner still holds it: a holder that outlived its TTL must
-- not release the lock of whoever took it next.
--
-- KEYS[1] lock key   ARGV[1] owner token
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
