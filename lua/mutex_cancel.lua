-- mutex_cancel: a registered waiter of the plain mutex gives up (its deadline, an
-- error): it leaves the waiters ZSET, and passes on a wake-up that may have been
-- sent to it, so that the others are not left asleep.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  registered waiters: ZSET (prelude_wake)                (distlock_mutex_waiters:{N})
-- ARGV[1]  owner
-- ARGV[2]  publish command (notify)
-- Reply    1 when another waiter was woken, else 0.  One is woken when the owner
--          was registered and the lock is free, or held by an owner that will not
--          wake a registered waiter (a Redisson client, a distlock one that took it
--          while none was registered): a release may have picked this owner after
--          it stopped listening, and its wake-up would be lost.
-- Both keys are read before the one write (prelude_guard).
-- Types    hash zset
--#include prelude_publish.lua
--#include prelude_wake.lua
local score = redis.call('zscore', KEYS[2], ARGV[1])
if not score or tonumber(score) == MARK then
  return 0
end
local holders = redis.call('hkeys', KEYS[1])
redis.call('zrem', KEYS[2], ARGV[1])
if #holders == 1 and tonumber(redis.call('zscore', KEYS[2], holders[1])) == MARK then
  return 0
end
return wake_waiter(KEYS[2], ARGV[2])
