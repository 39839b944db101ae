-- Adopt a dead node's claims, all or none, and only while it is still dead: exactly one
-- live node ends up owning each orphan (design.md invariant 5).
--
-- KEYS[1] running hash   KEYS[2] owned set of the dead node   KEYS[3] owned set of the
-- adopter   KEYS[4] liveness key of the dead node
-- ARGV[1] dead node id   ARGV[2] adopter node id
-- Returns the adopted task ids, or false if the node is alive after all.
if redis.call('EXISTS', KEYS[4]) == 1 then
  return false
end
local prefix = ARGV[1] .. '|'
local adopted = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local claim = redis.call('HGET', KEYS[1], id)
  if claim and string.sub(claim, 1, #prefix) == prefix then
    redis.call('HSET', KEYS[1], id, ARGV[2] .. '|' .. string.sub(claim, #prefix + 1))
    redis.call('SADD', KEYS[3], id)
    table.insert(adopted, id)
  end
end
redis.call('DEL', KEYS[2])
return adopted
