-- Takes tasks out of their queues (they expired, were cancelled or ended elsewhere), and
-- keeps the queue index exact for each queue touched. An unclaimed grouped task leaves its
-- group's waiting line and bookkeeping too (a parked task is in no queue).
--
-- ARGV[1] key prefix
-- ARGV[2..] pairs: task id, queue key (without prefix)
local touched, ids = {}, {}
for i = 2, #ARGV, 2 do
  redis.call('ZREM', ARGV[1] .. ARGV[i + 1], ARGV[i])
  touched[ARGV[i + 1]] = true
  table.insert(ids, ARGV[i])
end
if #ids > 0 then
  local groups = redis.call('HMGET', ARGV[1] .. 'grp', unpack(ids))
  for j, id in ipairs(ids) do
    -- A claimed task keeps its slot until its claim goes (a cancel drops the entry,
    -- then the claim, whose removal frees the slot).
    if groups[j] and redis.call('HEXISTS', ARGV[1] .. 'running', id) == 0 then
      group_release(ARGV[1], id, groups[j], true)
    end
  end
end
for rel, _ in pairs(touched) do
  index_refresh(ARGV[1], rel)
end
return 0
