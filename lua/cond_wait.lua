-- cond_wait: register the caller as a waiter of a condition, while it holds the
-- condition's mutex; the caller then releases the mutex through the lock's own path.
-- Any signaller that takes the mutex after that release finds the waiter here.
-- KEYS[1]  the mutex: HASH { <owner>: hold count }                (M)
-- KEYS[2]  waiters: ZSET owner -> liveness deadline               (distlock_cond_waiters:{C})
-- KEYS[3]  queue: LIST of owners                                  (distlock_cond_queue:{C})
-- KEYS[4]  signalled: SET of owners                               (distlock_cond_signalled:{C})
-- KEYS[5]  the condition's channel                                (distlock_cond:{C})
-- ARGV[1]  owner, "<client id>:<thread n>"
-- ARGV[2]  liveness window in ms
-- ARGV[3]  publish command (see prelude_publish)
-- Reply    1 registered; -1 the owner does not hold the mutex (nothing changed)
-- What can fail comes first (prelude_guard): the mutex, signalled and the queue
-- are read before anything is written, and waiters, unread when nobody waits, is
-- the first key written.
-- Types    hash zset list set -
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_cond.lua
if not redis.call('hget', KEYS[1], ARGV[1]) then
  return -1
end
local now = cond_now()
local passed = cond_pass_on(KEYS[2], KEYS[3], KEYS[4], now)
-- dead waiters nobody signalled would stay for ever otherwise
for _, owner in ipairs(redis.call('lrange', KEYS[3], 0, -1)) do
  if not cond_live(KEYS[2], owner, now) then
    redis.call('lrem', KEYS[3], 0, owner)
    redis.call('zrem', KEYS[2], owner)
  end
end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
redis.call('srem', KEYS[4], ARGV[1])
redis.call('lrem', KEYS[3], 0, ARGV[1])
redis.call('rpush', KEYS[3], ARGV[1])
if passed > 0 then
  notify(ARGV[3], KEYS[5], '1')
end
return 1
