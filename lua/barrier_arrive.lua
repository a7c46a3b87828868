-- barrier_arrive: a member arrives at the barrier for the round under way.
-- KEYS[1]  barrier: HASH { count, round, arrived, broken }        (distlock_barrier:{B})
-- KEYS[2]  members: ZSET member -> liveness deadline              (distlock_barrier_members:{B})
-- KEYS[3]  channel                                        (distlock_barrier_channel:{B})
-- ARGV[1]  member, "<client id>:b<object>"
-- ARGV[2]  count the caller expects; sets it for a barrier that does not exist yet
-- ARGV[3]  liveness window in ms
-- ARGV[4]  publish command (see prelude_publish)
-- Reply    {1, round}  the caller was the last: the round is over (it is the serial one)
--          {0, round}  arrived; wait until the round is over
--          {-1, round} a member died: round broken, the caller did not arrive
--          {-2, count} the barrier exists with another count
-- The barrier and its members are read before anything is written
-- (prelude_guard).
-- Types    hash zset -
--#include prelude_number.lua
--#include prelude_publish.lua
--#include prelude_barrier.lua
local now = barrier_now()
local count, round, arrived = barrier_read(KEYS[1])
local dead = barrier_dead(KEYS[2], now)
if count and count ~= tonumber(ARGV[2]) then
  return {-2, count}
end
if not count then
  if round then
    redis.call('del', KEYS[1])    -- what a broken round left of a deleted one
  end
  count, round, arrived = tonumber(ARGV[2]), 0, 0
  redis.call('hset', KEYS[1], 'count', ARGV[2], 'round', 0, 'arrived', 0)
end
local broken = barrier_break(KEYS[1], KEYS[2], KEYS[3], ARGV[4], dead, round)
redis.call('zadd', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
if broken then
  return {-1, broken}
end
arrived = (arrived or 0) + 1
if arrived >= count then
  redis.call('hset', KEYS[1], 'round', round + 1, 'arrived', 0)
  notify(ARGV[4], KEYS[3], '1')
  return {1, round}
end
redis.call('hset', KEYS[1], 'arrived', arrived)
return {0, round}
