-- barrier_check: a member that arrived looks whether its round is over; or leaves
-- it (its timed wait ended); or leaves the barrier (destroyed).
-- KEYS[1]  barrier: HASH { count, round, arrived, broken }        (distlock_barrier:{B})
-- KEYS[2]  members: ZSET member -> liveness deadline              (distlock_barrier_members:{B})
-- KEYS[3]  channel                                        (distlock_barrier_channel:{B})
-- ARGV[1]  member
-- ARGV[2]  the round it arrived in
-- ARGV[3]  'look', 'leave' (the round, when not over) or 'quit' (the barrier)
-- ARGV[4]  publish command (see prelude_publish)
-- Reply    1 the round is over, -1 it was broken by a member that died (or the
--          barrier was deleted), 0 not over
--          (and the caller no longer counts in it, when it left)
-- The barrier and its members are read before anything is written
-- (prelude_guard).  Dead members of a barrier that is gone are dropped without
-- making the barrier anew.
-- Types    hash zset -
--#include prelude_number.lua
--#include prelude_publish.lua
--#include prelude_barrier.lua
local now = barrier_now()
if ARGV[3] == 'quit' then
  redis.call('zrem', KEYS[2], ARGV[1])
  return 0
end
local _, round, arrived, broken = barrier_read(KEYS[1])
local dead = barrier_dead(KEYS[2], now)
if round and barrier_break(KEYS[1], KEYS[2], KEYS[3], ARGV[4], dead, round) then
  broken, round, arrived = round, round + 1, 0
elseif not round then
  barrier_break(KEYS[1], KEYS[2], KEYS[3], ARGV[4], dead, nil)
  return -1
end
local r = tonumber(ARGV[2])
if round > r then
  if broken == r then
    return -1
  end
  return 1
end
if ARGV[3] == 'leave' then
  redis.call('hset', KEYS[1], 'arrived', (arrived or 0) - 1)
end
return 0
