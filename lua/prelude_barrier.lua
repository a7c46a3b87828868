-- prelude_barrier: joined by the build in front of the barrier's scripts
-- ('--#include prelude_barrier.lua').  A barrier B keeps, named with Redisson's
-- brace rule so that they share B's cluster slot:
--   barrier  HASH { count, round, arrived, broken }            (distlock_barrier:{B})
--            broken: the last round that a dead member broke
--   members  ZSET member -> liveness deadline, server ms     (distlock_barrier_members:{B})
--            a member joins at its first wait; its renewal thread pushes its
--            deadline forward (waiter_renew) until it destroys its barrier
-- A round ends when count members have arrived.  A member whose deadline passed
-- breaks the round under way: the members waiting in it are told, and the next
-- round starts.

local function barrier_now()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drops dead members; when there were any, the round under way is broken and
-- the waiters told ('b').  Returns the round broken, or nil.
local function barrier_reap(barrier, members, chan, how, now)
  local dead = redis.call('zrangebyscore', members, '-inf', '(' .. now)
  if #dead == 0 then
    return nil
  end
  for _, m in ipairs(dead) do
    redis.call('zrem', members, m)
  end
  local round = tonumber(redis.call('hget', barrier, 'round') or '0')
  redis.call('hset', barrier, 'broken', round, 'round', round + 1, 'arrived', 0)
  notify(how, chan, 'b')
  return round
end
