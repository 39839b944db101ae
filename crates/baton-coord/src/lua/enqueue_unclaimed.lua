-- Every Redis add other than submit's (requeue, promotion, repair): add each task to its
-- queue only if it holds no claim, so a task is never queued while it has a live lease
-- (design.md §4.2). Wakes parked leases for every queue that got work. A grouped task is
-- registered with its group (groups.lua), and one parked in its group's waiting line is
-- left there: it is in line already.
--
-- KEYS[1] running hash
-- ARGV[1] key prefix    ARGV[2] wake channel
-- ARGV[3..] groups of five: task id, queue key (without prefix), queue meta JSON, score,
-- group entry JSON ('' for a task of no group)
-- Returns how many were added.
local added, woken = 0, {}
for i = 3, #ARGV, 5 do
  local id, rel, meta, score, group = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local parked = false
  if group ~= '' then
    parked = redis.call('ZSCORE', ARGV[1] .. 'gwait:' .. cjson.decode(group).key, id)
  end
  if not parked and redis.call('HEXISTS', KEYS[1], id) == 0 then
    if group ~= '' then
      redis.call('HSET', ARGV[1] .. 'grp', id, group)
    end
    redis.call('ZADD', ARGV[1] .. rel, score, id)
    index_add(ARGV[1], rel, meta, score)
    woken[rel] = true
    added = added + 1
  end
end
for rel, _ in pairs(woken) do
  redis.call('PUBLISH', ARGV[2], rel)
end
return added
