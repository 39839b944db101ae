-- Presence heard by one node since its last write, merged so that it only moves forward:
-- two nodes flush their buffers at their own pace, and an older stamp written late (a
-- node that was slow, or retrying after an outage) must not make a runner look silent
-- longer than it is. One read and one write for the whole batch, whatever its size.
--
-- KEYS[1] presence hash (runner id -> "at_ms|boot id")
-- ARGV groups of three: runner id, at (ms), boot id
-- Returns how many stamps moved forward.
local ids = {}
for i = 1, #ARGV, 3 do
  table.insert(ids, ARGV[i])
end
local held = redis.call('HMGET', KEYS[1], unpack(ids))
local fields = {}
for n, id in ipairs(ids) do
  local at = tonumber(ARGV[3 * n - 1])
  local held_at = held[n] and tonumber(string.match(held[n], '^(%d+)|'))
  if not held_at or held_at <= at then
    table.insert(fields, id)
    table.insert(fields, ARGV[3 * n - 1] .. '|' .. ARGV[3 * n])
  end
end
if #fields > 0 then
  redis.call('HSET', KEYS[1], unpack(fields))
end
return #fields / 2
