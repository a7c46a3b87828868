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
-- The leases and holds are read before anything is written, and the semaphore
-- is the first key written (prelude_guard).
-- Types    hash hash zset -
--#include prelude_number.lua
--#include prelude_publish.lua
--#include prelude_sem.lua
local now = sem_now()
local dead, back = sem_dead(KEYS[2], KEYS[3], now)
local n = redis.call('hget', KEYS[2], ARGV[2])
for _, owner in ipairs(dead) do
  if owner == ARGV[2] then
    n = nil                 -- its lease ended: its permits go back with the others
  end
end
n = n and number_in(KEYS[2], n)
local res
if not n or n <= 0 then
  -- a field of 0 is an owner whose permits a destroy consumed (sem_count 'drop')
  res = -1
elseif ARGV[4] and n ~= tonumber(ARGV[4]) then
  res = -2
else
  back = back + 1
end
if back > 0 then
  redis.call('hincrby', KEYS[1], 'free', back)
end
sem_drop(KEYS[2], KEYS[3], dead)
if res then
  return {res, 0}
end
n = redis.call('hincrby', KEYS[2], ARGV[2], -1)
if n <= 0 then
  redis.call('hdel', KEYS[2], ARGV[2])
  redis.call('zrem', KEYS[3], ARGV[2])
else
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[1]), ARGV[2])
end
return {n, notify(ARGV[3], KEYS[4], '0')}
