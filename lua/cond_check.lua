-- cond_check: a waiter looks for its mark, taking it when there; or leaves.
-- KEYS[1]  waiters: ZSET owner -> liveness deadline               (distlock_cond_waiters:{C})
-- KEYS[2]  queue: LIST of owners                                  (distlock_cond_queue:{C})
-- KEYS[3]  signalled: SET of owners                               (distlock_cond_signalled:{C})
-- KEYS[4]  the condition's channel                                (distlock_cond:{C})
-- ARGV[1]  owner
-- ARGV[2]  '1': leave when not signalled (a timed wait ends), '0': stay
-- ARGV[3]  publish command (see prelude_publish)
-- Reply    1 signalled (the mark is taken and the waiter is gone), 0 not signalled
--          (still waiting, or gone when ARGV[2] is '1'), -1 not registered any more
--          (dropped as dead: its renewals did not come in time)
-- Signalled and waiters are read before anything is written, then the queue
-- goes first (prelude_guard).
-- Types    zset list set -
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_cond.lua
local now = cond_now()
local passed = cond_pass_on(KEYS[1], KEYS[2], KEYS[3], now)
local res
if redis.call('srem', KEYS[3], ARGV[1]) == 1 then
  redis.call('zrem', KEYS[1], ARGV[1])
  res = 1
elseif redis.call('zscore', KEYS[1], ARGV[1]) then
  if ARGV[2] == '1' then
    redis.call('lrem', KEYS[2], 0, ARGV[1])
    redis.call('zrem', KEYS[1], ARGV[1])
  end
  res = 0
else
  redis.call('lrem', KEYS[2], 0, ARGV[1])
  res = -1
end
if passed > 0 then
  notify(ARGV[3], KEYS[4], '1')
end
return res
