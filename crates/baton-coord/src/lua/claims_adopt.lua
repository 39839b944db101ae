-- Claims made under one lease for tasks Postgres has dispatched under another: Redis lost
-- that run's claim (a failover dropped its unreplicated writes), its task came back to a
-- queue, and a lease popped it again. Each such claim becomes the run's — the same node,
-- the run's lease, runner and boot — by one compare-and-set on the lease it was made
-- under, and the group slot taken with it stays, held by the run. Nothing is released
-- and nothing promoted: releasing it would free the slot of a task that runs, and let
-- another of its group run beside it.
--
-- KEYS[1] the running hash
-- ARGV[1] now (ms), then fives: task, the lease the claim is under, the run's lease,
--         its runner ('' unknown), its boot ('' unknown)
-- Returns how many claims were adopted.
local adopted = 0
for i = 2, #ARGV, 5 do
  local claim = redis.call('HGET', KEYS[1], ARGV[i])
  if claim then
    local node, lease = string.match(claim, '^([^|]*)|([^|]*)|')
    if lease == ARGV[i + 1] then
      redis.call('HSET', KEYS[1], ARGV[i],
        node .. '|' .. ARGV[i + 2] .. '|' .. ARGV[1] .. '|' .. ARGV[i + 3] .. '|' .. ARGV[i + 4])
      adopted = adopted + 1
    end
  end
end
return adopted
