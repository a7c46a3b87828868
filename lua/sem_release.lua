-- sem_release: give one of the owner's permits of a leased semaphore back.
-- KEYS[1]  sem: HASH { free }                                     (distlock_sem:{S})
-- KEYS[2]  holds: HASH owner -> permits                           (distlock_sem_holds:{S})
-- KEYS[3]  leases: ZSET owner -> lease end                        (distlock_sem_leases:{S})
-- KEYS[4]  channel                                                (distlock_sem_channel:{S})
-- ARGV[1]  lease in ms, re-armed while holds remain
-- ARGV[2]  owner
-- ARGV[3]  publish command (see prelude_publish)
-- ARGV[4]  optional: the owner's count this call expects to find; when it differs
--          nothing changes (used to finish a release whose reply was lost)
-- Reply    {n, waiters}: n the owner's permits left, -1 it holds none (its lease
--          ended, it never took one, or a destroy consumed them), -2 ARGV[4] differs; waiters the
--          subscribers the message reached
--#include prelude_publish.lua
--#include prelude_sem.lua
local now = sem_now()
sem_reclaim(KEYS[1], KEYS[2], KEYS[3], now)
local n = redis.call('hget', KEYS[2], ARGV[2])
if not n or tonumber(n) <= 0 then
  -- a field of 0 is an owner whose permits a destroy consumed (sem_count 'drop')
  return {-1, 0}
end
if ARGV[4] and tonumber(n) ~= tonumber(ARGV[4]) then
  return {-2, 0}
end
n = redis.call('hincrby', KEYS[2], ARGV[2], -1)
if n <= 0 then
  redis.call('hdel', KEYS[2], ARGV[2])
  redis.call('zrem', KEYS[3], ARGV[2])
else
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[1]), ARGV[2])
end
redis.call('hincrby', KEYS[1], 'free', 1)
return {n, notify(ARGV[3], KEYS[4], '0')}
