-- The Redis half of a lease request or runner exchange, in one step (design.md §4.3,
-- §4.7):
--   1. a retried request gets back what its first attempt leased, and nothing new;
--   2. the claim on each task the runner is about to start, for the node to check the
--      runner's lease against it before Postgres records the start;
--   3. up to N tasks the runner may take, popped best first across every queue it can
--      serve and each claimed for this node, so a node killed mid-lease leaves either
--      the queue entry or the claim, never neither.
-- A queue key whose sorted set it finds empty is dropped from the queues hash (every add
-- registers it again), so an idle runner's poll reads one hash of live queues: two
-- commands with this script's own.
--
-- KEYS[1] queues hash (queue key -> {"queue", "labels"})
-- KEYS[2] running hash (task id -> "node|lease|claimed_at_ms|runner|boot")
-- KEYS[3] owned set of this node
-- KEYS[4] the request's replay key
-- ARGV[1] key prefix   ARGV[2] node id   ARGV[3] now (ms)
-- ARGV[4] runner id    ARGV[5] boot id
-- ARGV[6] runner labels (JSON array)   ARGV[7] runner queues (JSON array; empty: all)
-- ARGV[8] replay TTL (ms)   ARGV[9] '1' to look the request up first (a resend, marked
-- or not)
-- ARGV[10] S, the number of task ids whose claims to report
-- ARGV[11 .. 10+S] those task ids
-- ARGV[11+S ..] one fresh lease id per task wanted
-- Returns: {replayed record or '', S claims (or ''), then per popped task: id, lease,
-- queue key (without prefix), score}.

local prefix, node, now = ARGV[1], ARGV[2], ARGV[3]
local starts = tonumber(ARGV[10])
local out = {}

local record = false
if ARGV[9] == '1' then
  record = redis.call('GET', KEYS[4])
end
table.insert(out, record or '')

if starts > 0 then
  local ids = {}
  for i = 11, 10 + starts do table.insert(ids, ARGV[i]) end
  for _, claim in ipairs(redis.call('HMGET', KEYS[2], unpack(ids))) do
    table.insert(out, claim or '')
  end
end

local wanted = #ARGV - (10 + starts)
if record or wanted <= 0 then
  return out
end

local has_label = {}
for _, l in ipairs(cjson.decode(ARGV[6])) do has_label[l] = true end
local wanted_queues = cjson.decode(ARGV[7])
local serves_queue = nil
if #wanted_queues > 0 then
  serves_queue = {}
  for _, q in ipairs(wanted_queues) do serves_queue[q] = true end
end

-- Queues whose label set is a subset of the runner's labels: the top `wanted` entries
-- of each, merged.
local entries = {}
local fetched = {}
local live = redis.call('HGETALL', KEYS[1])
for i = 1, #live, 2 do
  local meta = cjson.decode(live[i + 1])
  local ok = serves_queue == nil or serves_queue[meta.queue]
  if ok then
    for _, l in ipairs(meta.labels) do
      if not has_label[l] then ok = false; break end
    end
  end
  if ok then
    local rel = live[i]
    local top = redis.call('ZRANGE', prefix .. rel, 0, wanted - 1, 'WITHSCORES')
    fetched[rel] = #top / 2
    if #top == 0 then
      redis.call('HDEL', KEYS[1], rel)
    end
    for j = 1, #top, 2 do
      table.insert(entries, {id = top[j], score = tonumber(top[j + 1]), raw = top[j + 1], rel = rel})
    end
  end
end
-- Best first: priority then age in the score; ties (same millisecond) to the smaller id,
-- as inside one sorted set (UUIDv7 ids sort by creation).
table.sort(entries, function(a, b)
  if a.score ~= b.score then return a.score < b.score end
  return a.id < b.id
end)

local taken, removed, claimed = 0, {}, {}
local lease_at = 11 + starts
for _, e in ipairs(entries) do
  if taken >= wanted then break end
  removed[e.rel] = removed[e.rel] or {}
  table.insert(removed[e.rel], e.id)
  local lease = ARGV[lease_at + taken]
  -- Claims are never overwritten: an entry whose task is already claimed is stale (it
  -- was re-added while a lease was in flight) and is dropped, not handed out.
  if redis.call('HSETNX', KEYS[2], e.id,
      node .. '|' .. lease .. '|' .. now .. '|' .. ARGV[4] .. '|' .. ARGV[5]) == 1 then
    taken = taken + 1
    table.insert(claimed, e.id)
    table.insert(out, e.id)
    table.insert(out, lease)
    table.insert(out, e.rel)
    table.insert(out, e.raw)
  end
end
for rel, ids in pairs(removed) do
  redis.call('ZREM', prefix .. rel, unpack(ids))
  -- Everything it held was fetched, and now it is gone.
  if #ids == fetched[rel] and fetched[rel] < wanted then
    redis.call('HDEL', KEYS[1], rel)
  end
end
if taken > 0 then
  redis.call('SADD', KEYS[3], unpack(claimed))
  local leased = {}
  for i = 1 + 1 + starts, #out, 4 do
    table.insert(leased, out[i] .. ':' .. out[i + 1])
  end
  redis.call('SET', KEYS[4], table.concat(leased, ','), 'PX', ARGV[8])
end
return out
