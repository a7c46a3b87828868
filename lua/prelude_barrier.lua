-- prelude_barrier: joined by the build in front of the barrier's scripts
-- ('--#include prelude_barrier.lua', after prelude_number).  A barrier B keeps,
-- named with Redisson's brace rule so that they share B's cluster slot:
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

-- The barrier's count, round, arrived and broken, as numbers (nil where absent:
-- all nil when there is no barrier).  Fails on a hash that is no barrier (a
-- hash left by a round broken after its barrier was deleted, with no count, is
-- taken for none).  Read before anything is written (prelude_guard).
local function barrier_read(barrier)
  local v = redis.call('hmget', barrier, 'count', 'round', 'arrived', 'broken')
  if not v[1] and not v[2] and redis.call('exists', barrier) == 1 then
    error(redis.error_reply("WRONGTYPE key '" .. barrier .. "' is a hash that" ..
                            " is no barrier; nothing was changed"))
  end
  local n = {}
  for i = 1, 4 do
    n[i] = v[i] and number_in(barrier, v[i])
  end
  return n[1], n[2], n[3], n[4]
end

-- The members whose deadline passed: read only.
local function barrier_dead(members, now)
  return redis.call('zrangebyscore', members, '-inf', '(' .. now)
end

-- Drops the dead members (barrier_dead's); when there were any, the round under
-- way (round, nil when the barrier is gone) is broken and the waiters told ('b').
-- Returns the round broken, or nil.
local function barrier_break(barrier, members, chan, how, dead, round)
  if #dead == 0 then
    return nil
  end
  for _, m in ipairs(dead) do
    redis.call('zrem', members, m)
  end
  if round then
    redis.call('hset', barrier, 'broken', round, 'round', round + 1, 'arrived', 0)
  end
  notify(how, chan, 'b')
  return round
end
