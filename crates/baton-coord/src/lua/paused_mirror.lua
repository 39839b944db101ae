-- The repair pass's mirror of the paused queues from Postgres (docs/flow-control.md).
-- Each pause or resume the API writes to Redis sets its queue's mark to a fresh token in
-- the same transaction. The marks were read before Postgres was: a queue whose mark has
-- moved since was written after that read, and its newer copy stays (written over, a
-- pause would be undone until the next pass, or a resumed queue held). Every other queue
-- is made as Postgres has it.
--
-- ARGV[1] key prefix   ARGV[2] the wake channel   ARGV[3] the payload that wakes every
-- parked lease   ARGV[4] n, the number of marks read
-- ARGV[5 .. 4 + 2n] pairs: queue, its mark as read
-- ARGV[5 + 2n ..] the queues Postgres has paused
-- Returns {queues changed, queues left as a newer write has them}.
local prefix, channel, wake_all = ARGV[1], ARGV[2], ARGV[3]
local paused, marks = prefix .. 'paused', prefix .. 'paused:marks'
local n = tonumber(ARGV[4])
local read = {}
for i = 5, 4 + 2 * n, 2 do
  read[ARGV[i]] = ARGV[i + 1]
end
local want = {}
for i = 5 + 2 * n, #ARGV do
  want[ARGV[i]] = true
end
local queues = {}
for q in pairs(want) do
  queues[q] = true
end
for _, q in ipairs(redis.call('SMEMBERS', paused)) do
  queues[q] = true
end
local changed, newer, resumed = 0, 0, false
for q in pairs(queues) do
  if (redis.call('HGET', marks, q) or false) ~= (read[q] or false) then
    newer = newer + 1
  elseif want[q] then
    changed = changed + redis.call('SADD', paused, q)
  elseif redis.call('SREM', paused, q) == 1 then
    changed = changed + 1
    resumed = true
  end
end
if resumed then
  redis.call('PUBLISH', channel, wake_all)
end
return {changed, newer}
