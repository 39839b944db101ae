-- Submit's add (design.md §4.1), after the Postgres insert committed: the tasks go in
-- their queues, grouped ones registered with their groups, and parked leases are woken,
-- all in one step, so no lease sees a task without its group and no wake-up comes before
-- the entry it announces.
--
-- Fair shares between owners (docs/flow-control.md): a task's score carries its fair tag
-- where its age stood (queue_order.rs) — the later of its queued time and its owner's
-- next free tag in that queue at that priority, which then moves `spacing` past it. An owner who queues
-- faster than one task per `spacing` gets tags ahead of the clock: 10,000 at once are
-- spread over 10,000 spacings. Another owner's task, tagged at its queued time, goes
-- before all of those still ahead of it, and two owners with work waiting take turns,
-- whatever each queued. An owner slower than that is tagged at its queued time, as
-- before. No tag is ever earlier than its task's queued time, so a task put back by its
-- queued time (a retry, a delayed task's release, a requeue) never waits behind work that
-- came after it, in its queue or in any other a runner serves. Priority still comes first.
--
-- `<prefix>fair:<queue key>` holds each owner's next free tag per priority
-- (`<owner>|<priority>`); it expires when the last of them has passed, when it could
-- change no tag.
--
-- ARGV[1] key prefix   ARGV[2] wake channel   ARGV[3] one priority step of the score
-- ARGV[4] spacing (ms)   ARGV[5] the age clock's epoch (ms since the Unix epoch)
-- ARGV[6..] groups of six: task id, queue key (without prefix), queue meta JSON, score
-- by its queued time (queue_order::score), owner, group entry JSON ('' for none)

local prefix, step = ARGV[1], tonumber(ARGV[3])
local spacing, epoch = tonumber(ARGV[4]), tonumber(ARGV[5])
-- Tags stay below one priority step, so no tag reaches into the next priority.
local last_tag = step - 1

-- A score's two parts: its priority's base (a multiple of the step) and its age.
local function parts(score)
  local base = math.floor(score / step) * step
  return base, score - base
end

local queues, order = {}, {}
for i = 6, #ARGV, 6 do
  local id, rel, meta, score, owner, group =
    ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4], ARGV[i + 5]
  local q = queues[rel]
  if not q then
    q = {meta = meta, next = {}, members = {}, best = false}
    queues[rel] = q
    table.insert(order, rel)
  end
  if group ~= '' then
    redis.call('HSET', prefix .. 'grp', id, group)
  end
  local base, age = parts(score)
  -- One line per owner and priority: priorities never compete, so an owner's tasks of
  -- one priority do not push back its tasks of another.
  local line = owner .. '|' .. string.format('%d', -base / step)
  local free = q.next[line]
  if free == nil then
    free = tonumber(redis.call('HGET', prefix .. 'fair:' .. rel, line)) or age
  end
  local tag = math.min(math.max(age, free), last_tag)
  q.next[line] = tag + spacing
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
  local fair_key = prefix .. 'fair:' .. rel
  local next, latest = {}, 0
  for line, free in pairs(q.next) do
    table.insert(next, line)
    table.insert(next, free)
    if free > latest then latest = free end
  end
  redis.call('HSET', fair_key, unpack(next))
  -- Kept until the latest next free tag has passed, never shortened.
  local until_ms = epoch + latest + 1000
  if redis.call('PEXPIRETIME', fair_key) < until_ms then
    redis.call('PEXPIREAT', fair_key, until_ms)
  end
  index_add(prefix, rel, q.meta, q.best)
end
for _, rel in ipairs(order) do
  redis.call('PUBLISH', ARGV[2], rel)
end
return #order
