-- The repair pass's check of the queue index against the queues themselves: every queue
-- registered with work is indexed at its true head, and nothing else is. The scripts keep
-- the index exact; this undoes what no script can answer for (keys deleted by hand, a
-- restore from an older snapshot of some keys). Reads every queue: for the repair pass,
-- not the hot path.
--
-- ARGV[1] key prefix
-- Returns how many index entries it changed.
local prefix = ARGV[1]
local changed = 0
local live = redis.call('HGETALL', prefix .. 'queues')
local registered = {}
for i = 1, #live, 2 do
  local rel, meta = live[i], live[i + 1]
  registered[rel] = true
  local part = label_part(rel)
  local head = redis.call('ZRANGE', prefix .. rel, 0, 0, 'WITHSCORES')
  if #head > 0 then
    if redis.call('HSETNX', prefix .. 'labelsets', part, meta) == 1 then
      changed = changed + 1
    end
    local indexed = redis.call('ZSCORE', prefix .. 'ready:' .. part, rel)
    if indexed ~= head[2] then
      changed = changed + 1
    end
  else
    -- Registered with no work: it leaves the registry (and the index).
    changed = changed + 1
  end
  index_refresh(prefix, rel)
end
local sets = redis.call('HKEYS', prefix .. 'labelsets')
for _, part in ipairs(sets) do
  local ready = prefix .. 'ready:' .. part
  for _, rel in ipairs(redis.call('ZRANGE', ready, 0, -1)) do
    if not registered[rel] then
      -- Indexed but not registered: registered again if it holds work (the label set's
      -- meta under this queue's name), dropped otherwise.
      if redis.call('EXISTS', prefix .. rel) == 1 then
        local meta = cjson.decode(redis.call('HGET', prefix .. 'labelsets', part))
        meta.queue = string.match(rel, '^q:([^:]*):')
        redis.call('HSET', prefix .. 'queues', rel, cjson.encode(meta))
      end
      index_refresh(prefix, rel)
      changed = changed + 1
    end
  end
  if redis.call('EXISTS', ready) == 0 then
    redis.call('HDEL', prefix .. 'labelsets', part)
  end
end
return changed
