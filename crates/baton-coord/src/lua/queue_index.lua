-- The queue index (design.md §7), prepended to every script that adds to or takes from a
-- queue, so a lease reads only queues it could serve, best first, and never the rest:
--   <prefix>labelsets     hash: label-set part of a queue key -> a meta of that label set
--                         ({"queue", "labels"}), for each label set with work
--   <prefix>ready:<part>  sorted set: queue key -> the score of its best entry, for each
--                         queue of that label set with work
--   <prefix>queues        hash: queue key -> its meta, for each queue with work
-- Every add goes through index_add and every removal through index_refresh, in the same
-- script as the queue's own change, so the index
-- follows the queues exactly. What no script answers for — nodes of the release before
-- the index, keys changed by hand — the lease steps past (an empty queue leaves the
-- index when read) and the repair pass mends (queue_index_repair.lua).

local function label_part(rel)
  return string.match(rel, '^q:[^:]*:(.*)$')
end

-- Work was added to the queue `rel` at `score`: the queue is registered, its label set
-- too, and its head is no worse than `score`.
local function index_add(prefix, rel, meta, score)
  local part = label_part(rel)
  redis.call('HSET', prefix .. 'queues', rel, meta)
  redis.call('HSET', prefix .. 'labelsets', part, meta)
  redis.call('ZADD', prefix .. 'ready:' .. part, 'LT', score, rel)
end

-- Work was taken from the queue `rel`: its head is read again; an empty queue leaves the
-- index, and a label set none of whose queues has work leaves with it.
local function index_refresh(prefix, rel)
  local part = label_part(rel)
  local ready = prefix .. 'ready:' .. part
  local head = redis.call('ZRANGE', prefix .. rel, 0, 0, 'WITHSCORES')
  if #head == 0 then
    redis.call('HDEL', prefix .. 'queues', rel)
    redis.call('ZREM', ready, rel)
    if redis.call('EXISTS', ready) == 0 then
      redis.call('HDEL', prefix .. 'labelsets', part)
    end
  else
    redis.call('ZADD', ready, head[2], rel)
  end
end
