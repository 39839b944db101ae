-- After Postgres recorded the end of runs (or refused leases): drop their claims,
-- compare-and-delete on the lease so a claim taken since under another lease stays; put
-- retries in the delayed set; tell log followers on every node, in one message. One step
-- for a whole batch of runs (design.md §4: Redis follows Postgres). A dropped claim of a
-- grouped task frees its slot (groups.lua); the batch's group entries are read with one
-- HMGET, so runs of no group cost nothing more.
--
-- KEYS[1] running hash   KEYS[2] delayed sorted set
-- ARGV[1] key prefix   ARGV[2] wake channel   ARGV[3] wake payload ('' for none)
-- ARGV[4 ..] triples: task id, lease id, retry at (ms; '' when it does not retry)
-- Returns how many claims were dropped.
local ids = {}
for i = 4, #ARGV, 3 do table.insert(ids, ARGV[i]) end
local dropped, by_owner, retries = {}, {}, {}
if #ids > 0 then
  local claims = redis.call('HMGET', KEYS[1], unpack(ids))
  local groups = redis.call('HMGET', ARGV[1] .. 'grp', unpack(ids))
  for j = 1, #ids do
    local i = 4 + (j - 1) * 3
    local claim = claims[j]
    if claim then
      local node, lease = string.match(claim, '^([^|]*)|([^|]*)|')
      if lease == ARGV[i + 1] then
        table.insert(dropped, ARGV[i])
        by_owner[node] = by_owner[node] or {}
        table.insert(by_owner[node], ARGV[i])
        group_release(ARGV[1], ARGV[i], groups[j], true)
      end
    else
      -- No claim: whatever held its slot is gone; the group entry stays, as the task
      -- may be queued again already (the repair pass drops it once the task is final).
      group_release(ARGV[1], ARGV[i], groups[j], false)
    end
    if ARGV[i + 2] ~= '' then
      table.insert(retries, ARGV[i + 2])
      table.insert(retries, ARGV[i])
    end
  end
end
if #dropped > 0 then
  redis.call('HDEL', KEYS[1], unpack(dropped))
  for owner, owned in pairs(by_owner) do
    redis.call('SREM', ARGV[1] .. 'owned:' .. owner, unpack(owned))
  end
end
if #retries > 0 then
  redis.call('ZADD', KEYS[2], unpack(retries))
end
if ARGV[3] ~= '' then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return #dropped
