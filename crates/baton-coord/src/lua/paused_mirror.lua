-- The repair pass's mirror of the paused queues from Postgres (docs/flow-control.md).
-- Postgres was read after the mark was: a pause or resume the API wrote to Redis since
-- moved the mark on, and its write is newer than that read, so this one writes nothing
-- (written, the read would undo a pause until the next pass, or hold a resumed queue).
--
-- ARGV[1] key prefix   ARGV[2] the mark read before Postgres ('' when it was missing)
-- ARGV[3] the wake channel   ARGV[4] the payload that wakes every parked lease
-- ARGV[5 ..] the queues Postgres has paused
-- Returns 1 when the set was changed, 0 when it matched or the mark had moved.
local prefix, mark, channel, wake_all = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local paused = prefix .. 'paused'
if (redis.call('GET', prefix .. 'paused:mark') or '') ~= mark then
  return 0
end
local want = {}
local wanted = 0
for i = 5, #ARGV do
  want[ARGV[i]] = true
  wanted = wanted + 1
end
local now = redis.call('SMEMBERS', paused)
local resumed = false
for _, queue in ipairs(now) do
  if not want[queue] then
    resumed = true
  end
end
if not resumed and #now == wanted then
  return 0
end
redis.call('DEL', paused)
for i = 5, #ARGV do
  redis.call('SADD', paused, ARGV[i])
end
if resumed then
  redis.call('PUBLISH', channel, wake_all)
end
return 1
