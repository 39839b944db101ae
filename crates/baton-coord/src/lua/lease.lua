-- The Redis half of a lease request or runner exchange, in one step (design.md §4.3,
-- §4.7):
--   1. a retried request gets back what its first attempt leased, and nothing new;
--   2. the claim on each task the runner is about to start, for the node to check the
--      runner's lease against it before Postgres records the start;
--   3. up to N tasks the runner may take, popped best first across every queue it can
--      serve and each claimed for this node, so a node killed mid-lease leaves either
--      the queue entry or the claim, never neither.
-- Queues are found through the queue index (queue_index.lua): the label sets with work,
-- then the best queues of each the runner can serve. What a lease reads grows with the
-- number of label sets (capped at submit) and the number of tasks it takes, not with
-- the number of queues.
-- Flow control (docs/flow-control.md): a paused queue (its name in the `paused` set) is
-- never a candidate; a grouped task (groups.lua) whose group holds its limit of leases is
-- parked in the group's waiting line instead of handed out, and the queue it came from
-- is read on for the places left. Both cost a constant per lease (one SMEMBERS, one
-- HMGET per round), whatever the number of tasks of no group.
--
-- KEYS[1] running hash (task id -> "node|lease|claimed_at_ms|runner|boot")
-- KEYS[2] owned set of this node
-- KEYS[3] the request's replay key
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
  record = redis.call('GET', KEYS[3])
end
table.insert(out, record or '')

if starts > 0 then
  local ids = {}
  for i = 11, 10 + starts do table.insert(ids, ARGV[i]) end
  for _, claim in ipairs(redis.call('HMGET', KEYS[1], unpack(ids))) do
    table.insert(out, claim or '')
  end
end

local wanted = #ARGV - (10 + starts)
if record or wanted <= 0 then
  return out
end

-- Queues read past the `wanted` best of a label set when some of those gave nothing.
local SPARE_QUEUES = 8
-- Parked entries one lease may move to their groups' waiting lines: a bound on one
-- script's work when a queue holds thousands of tasks of a full group. Past it, a
-- wake-up for the queue tells every node it still holds work (no node may remember it
-- as empty), and the next lease parks on.
local MAX_PARKED = 256

local paused, paused_count = {}, 0
for _, q in ipairs(redis.call('SMEMBERS', prefix .. 'paused')) do
  paused[q] = true
  paused_count = paused_count + 1
end
local function open(rel)
  return not paused[string.match(rel, '^q:([^:]*):')]
end

local has_label = {}
for _, l in ipairs(cjson.decode(ARGV[6])) do has_label[l] = true end
local wanted_queues = cjson.decode(ARGV[7])

-- Candidate queues, with the score of their best entry: of each label set the runner
-- has every label of, its `wanted` best queues and a few more in case some of those
-- hold only stale entries (or, for a runner limited to named queues, those of them that
-- have work).
local candidates = {}
local sets = redis.call('HGETALL', prefix .. 'labelsets')
for i = 1, #sets, 2 do
  local ok = true
  for _, l in ipairs(cjson.decode(sets[i + 1]).labels) do
    if not has_label[l] then ok = false; break end
  end
  if ok then
    local part = sets[i]
    local ready = prefix .. 'ready:' .. part
    if #wanted_queues == 0 then
      -- Each paused queue may hide one place among the best: read that many more.
      local top = redis.call('ZRANGE', ready, 0, wanted + SPARE_QUEUES + paused_count - 1,
        'WITHSCORES')
      for j = 1, #top, 2 do
        if open(top[j]) then
          table.insert(candidates, {rel = top[j], head = tonumber(top[j + 1])})
        end
      end
    else
      for _, q in ipairs(wanted_queues) do
        local rel = 'q:' .. q .. ':' .. part
        local head = (not paused[q]) and redis.call('ZSCORE', ready, rel)
        if head then
          table.insert(candidates, {rel = rel, head = tonumber(head)})
        end
      end
    end
  end
end
table.sort(candidates, function(a, b)
  if a.head ~= b.head then return a.head < b.head end
  return a.rel < b.rel
end)

-- The best `wanted` entries of all lie in the `wanted` queues with the best heads: each
-- of those holds an entry (its head) at least as good as any entry of a queue after them.
-- An entry may turn out stale (its task already claimed) and a queue empty (emptied by a
-- node of the release before the index, which kept no index): then the next queues in
-- line are read for the places left, so stale entries never leave the runner with
-- nothing while other queues have work.
local taken, claimed, parked = 0, {}, 0
local lease_at = 11 + starts
local next_candidate = 1
while taken < wanted and next_candidate <= #candidates do
  local places = wanted - taken
  local entries = {}
  local last = math.min(#candidates, next_candidate + places - 1)
  for k = next_candidate, last do
    local rel = candidates[k].rel
    local top = redis.call('ZRANGE', prefix .. rel, 0, places - 1, 'WITHSCORES')
    if #top == 0 then
      index_refresh(prefix, rel)
    end
    for j = 1, #top, 2 do
      table.insert(entries, {id = top[j], score = tonumber(top[j + 1]), raw = top[j + 1], rel = rel})
    end
  end
  next_candidate = last + 1
  -- Best first: priority then age in the score; ties (same millisecond) to the smaller
  -- id, as inside one sorted set (UUIDv7 ids sort by creation).
  table.sort(entries, function(a, b)
    if a.score ~= b.score then return a.score < b.score end
    return a.id < b.id
  end)
  local removed, again = {}, {}
  local groups = {}
  if #entries > 0 then
    local ids = {}
    for k, e in ipairs(entries) do ids[k] = e.id end
    groups = redis.call('HMGET', prefix .. 'grp', unpack(ids))
  end
  for k, e in ipairs(entries) do
    if taken >= wanted then break end
    removed[e.rel] = removed[e.rel] or {}
    table.insert(removed[e.rel], e.id)
    local lease = ARGV[lease_at + taken]
    local claim = node .. '|' .. lease .. '|' .. now .. '|' .. ARGV[4] .. '|' .. ARGV[5]
    -- Claims are never overwritten: an entry whose task is already claimed is stale (it
    -- was re-added while a lease was in flight) and is dropped, not handed out.
    local ok = false
    if not groups[k] then
      ok = redis.call('HSETNX', KEYS[1], e.id, claim) == 1
    elseif redis.call('HEXISTS', KEYS[1], e.id) == 0 then
      -- A slot of its group is taken with the claim, or it waits for one.
      local info = cjson.decode(groups[k])
      local run = prefix .. 'grun:' .. info.key
      if redis.call('SCARD', run) < tonumber(info.limit) then
        redis.call('HSET', KEYS[1], e.id, claim)
        redis.call('SADD', run, e.id)
        ok = true
      else
        redis.call('ZADD', prefix .. 'gwait:' .. info.key, e.raw, e.id)
        parked = parked + 1
        again[e.rel] = true
      end
    end
    if ok then
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
    index_refresh(prefix, rel)
  end
  -- A queue that parked entries may hold more behind them: it is read again for the
  -- places left, before the queues after it.
  for rel, _ in pairs(again) do
    if parked < MAX_PARKED then
      table.insert(candidates, next_candidate, {rel = rel})
    else
      redis.call('PUBLISH', prefix .. 'wake', rel)
    end
  end
end
if taken > 0 then
  redis.call('SADD', KEYS[2], unpack(claimed))
  local leased = {}
  for i = 1 + 1 + starts, #out, 4 do
    table.insert(leased, out[i] .. ':' .. out[i + 1])
  end
  redis.call('SET', KEYS[3], table.concat(leased, ','), 'PX', ARGV[8])
end
return out
