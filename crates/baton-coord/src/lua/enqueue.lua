-- Submit's add (design.md §4.1), after the Postgres insert committed: the tasks go in
-- their queues, grouped ones registered with their groups, and parked leases are woken,
-- all in one step, so no lease sees a task without its group and no wake-up comes before
-- the entry it announces.
--
-- Fair shares between owners (docs/flow-control.md): within a priority, a queue hands
-- its tasks out in the order of their fair tags, not of their arrival. Each owner (the
-- token that submitted) has its next free tag in `<prefix>fair:<queue key>`; a task's
-- tag is the later of that and the queue's virtual time — the tag of its head, or the
-- task's own queued time if that is earlier or the queue is empty — and the owner's next
-- free tag becomes one past it. So an owner who queued 10,000 tasks at once holds tags
-- far ahead, and another owner's task, tagged at the head's, goes next: two owners with
-- work waiting take turns, whatever each queued. An owner with nothing waiting ahead of
-- the queue's time is tagged at that time: light owners keep their arrival order. The
-- tag stands where the score's age stood (queue_order.rs), so priority still comes
-- first and queues still compare by it. The state lives while the queue has work: an
-- emptied queue drops it (queue_index.lua's index_refresh).
--
-- ARGV[1] key prefix   ARGV[2] wake channel   ARGV[3] one priority step of the score
-- ARGV[4..] groups of six: task id, queue key (without prefix), queue meta JSON, score
-- by its queued time (queue_order::score), owner, group entry JSON ('' for none)

local prefix, step = ARGV[1], tonumber(ARGV[3])

-- A score's two parts: its priority's base (a multiple of the step) and its age.
local function parts(score)
  local base = math.floor(score / step) * step
  return base, score - base
end

local queues, order = {}, {}
for i = 4, #ARGV, 6 do
  local id, rel, meta, score, owner, group =
    ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], ARGV[i + 5]
  local q = queues[rel]
  if not q then
    local head = redis.call('ZRANGE', prefix .. rel, 0, 0, 'WITHSCORES')
    local head_age = false
    if #head > 0 then
      local _, age = parts(tonumber(head[2]))
      head_age = age
    end
    q = {meta = meta, head_age = head_age, next = {}, members = {}, best = false}
    queues[rel] = q
    table.insert(order, rel)
  end
  if group ~= '' then
    redis.call('HSET', prefix .. 'grp', id, group)
  end
  local base, age = parts(score)
  local now = age
  if q.head_age and q.head_age < now then now = q.head_age end
  local free = q.next[owner]
  if free == nil then
    free = tonumber(redis.call('HGET', prefix .. 'fair:' .. rel, owner)) or false
  end
  local tag = now
  if free and free > tag then tag = free end
  q.next[owner] = tag + 1
  local fair = base + tag
  table.insert(q.members, fair)
  table.insert(q.members, id)
  if not q.best or fair < q.best then q.best = fair end
end

-- ZADD in slices: Lua's unpack has a limit on how many values it spreads.
local SLICE = 1000
for _, rel in ipairs(order) do
  local q = queues[rel]
  for first = 1, #q.members, SLICE do
    local last = math.min(first + SLICE - 1, #q.members)
    redis.call('ZADD', prefix .. rel, unpack(q.members, first, last))
  end
  local next = {}
  for owner, free in pairs(q.next) do
    table.insert(next, owner)
    table.insert(next, free)
  end
  redis.call('HSET', prefix .. 'fair:' .. rel, unpack(next))
  index_add(prefix, rel, q.meta, q.best)
end
for _, rel in ipairs(order) do
  redis.call('PUBLISH', ARGV[2], rel)
end
return #order
