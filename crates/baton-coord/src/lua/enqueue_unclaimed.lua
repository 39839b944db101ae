-- Every Redis add other than submit's (requeue, promotion, repair): add each task to its
-- queue only if it holds no claim, so a task is never queued while it has a live lease
-- (design.md §4.2). Wakes parked leases for every queue that got work.
--
-- KEYS[1] queues hash   KEYS[2] running hash
-- ARGV[1] key prefix    ARGV[2] wake channel
-- ARGV[3..] groups of four: task id, queue key (without prefix), queue meta JSON, score
-- Returns how many were added.
local added, woken = 0, {}
for i = 3, #ARGV, 4 do
  local id, rel, meta, score = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('HEXISTS', KEYS[2], id) == 0 then
    redis.call('HSET', KEYS[1], rel, meta)
    redis.call('ZADD', ARGV[1] .. rel, score, id)
    woken[rel] = true
    added = added + 1
  end
end
for rel, _ in pairs(woken) do
  redis.call('PUBLISH', ARGV[2], rel)
end
return added
