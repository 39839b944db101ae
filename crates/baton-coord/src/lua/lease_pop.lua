-- Pop up to N tasks a runner may take, best first across every queue it can serve, and
-- claim each for this node -- all in one step, so a node killed mid-lease leaves either
-- the queue entry or the claim, never neither.
--
-- KEYS[1] queues hash (queue key -> {"queue", "labels"})
-- KEYS[2] running hash (task id -> "node|lease|claimed_at_ms")
-- KEYS[3] owned set of this node
-- KEYS[4] the request's replay key (design.md §4.7)
-- ARGV[1] key prefix          ARGV[2] node id        ARGV[3] now (ms)
-- ARGV[4] runner labels (JSON array)
-- ARGV[5] runner queues (JSON array; empty means every queue)
-- ARGV[6] replay TTL (ms): what this request leased is recorded under KEYS[4] for that
--         long, so a retry of the request gets the same tasks back
-- ARGV[7..] one fresh lease id per task wanted
-- Returns a flat list: task id, lease id, queue key (without prefix), score; per task.

local prefix, node, now = ARGV[1], ARGV[2], ARGV[3]

local has_label = {}
for _, l in ipairs(cjson.decode(ARGV[4])) do has_label[l] = true end
local wanted_queues = cjson.decode(ARGV[5])
local serves_queue = nil
if #wanted_queues > 0 then
  serves_queue = {}
  for _, q in ipairs(wanted_queues) do serves_queue[q] = true end
end

-- Queues whose label set is a subset of the runner's labels.
local candidates = {}
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local meta = cjson.decode(entries[i + 1])
  if serves_queue == nil or serves_queue[meta.queue] then
    local ok = true
    for _, l in ipairs(meta.labels) do
      if not has_label[l] then ok = false; break end
    end
    if ok then table.insert(candidates, entries[i]) end
  end
end

local out = {}
for n = 7, #ARGV do
  local best_key, best_id, best_score = nil, nil, nil
  for _, rel in ipairs(candidates) do
    local key = prefix .. rel
    while true do
      local top = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      if #top == 0 then break end
      -- Claims are never overwritten: an entry whose task is already claimed is stale
      -- (it was re-added while a lease was in flight) and is dropped, not handed out.
      if redis.call('HEXISTS', KEYS[2], top[1]) == 1 then
        redis.call('ZREM', key, top[1])
      else
        local score = tonumber(top[2])
        -- Ties (same priority, same millisecond) go to the smaller id, as they do
        -- inside one sorted set: UUIDv7 ids sort by creation.
        if best_score == nil or score < best_score
            or (score == best_score and top[1] < best_id) then
          best_key, best_id, best_score = rel, top[1], score
        end
        break
      end
    end
  end
  if best_key == nil then break end
  local lease = ARGV[n]
  redis.call('ZREM', prefix .. best_key, best_id)
  redis.call('HSET', KEYS[2], best_id, node .. '|' .. lease .. '|' .. now)
  redis.call('SADD', KEYS[3], best_id)
  table.insert(out, best_id)
  table.insert(out, lease)
  table.insert(out, best_key)
  table.insert(out, string.format('%.17g', best_score))
end
if #out > 0 then
  local leased = {}
  for i = 1, #out, 4 do
    table.insert(leased, out[i] .. ':' .. out[i + 1])
  end
  redis.call('SET', KEYS[4], table.concat(leased, ','), 'PX', ARGV[6])
end
return out
