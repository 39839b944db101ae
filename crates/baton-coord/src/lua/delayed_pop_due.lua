-- Take up to N due entries from the delayed set, atomically, so two nodes never promote
-- the same batch. (Postgres' compare-and-set would make it harmless; this saves the work.)
--
-- KEYS[1] delayed sorted set (score = run_at in ms)
-- ARGV[1] now (ms)   ARGV[2] most to take
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
end
return due
