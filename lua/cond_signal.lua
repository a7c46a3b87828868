-- cond_signal: mark the oldest live waiter (or all of them) signalled and wake them.
-- KEYS[1]  waiters: ZSET owner -> liveness deadline               (distlock_cond_waiters:{C})
-- KEYS[2]  queue: LIST of owners                                  (distlock_cond_queue:{C})
-- KEYS[3]  signalled: SET of owners                               (distlock_cond_signalled:{C})
-- KEYS[4]  the condition's channel                                (distlock_cond:{C})
-- ARGV[1]  how many to mark: a number, or 'all' (broadcast)
-- ARGV[2]  publish command (see prelude_publish)
-- Reply    the number of waiters marked, counting those that got the mark of a
--          waiter that died before taking it; 0 when no live waiter was there
--          (the signal is dropped, as a POSIX signal with no waiter is)
-- What can fail comes first (prelude_guard): signalled is read and waiters'
-- type checked before the queue, the first key written.
-- Types    zset list set -
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_cond.lua
local now = cond_now()
local n = tonumber(ARGV[1])
if ARGV[1] == 'all' then
  n = redis.call('llen', KEYS[2])
end
-- waiters is read only after the queue's first pop: its type is checked first
want(KEYS[1], 'zset')
local marked = cond_pass_on(KEYS[1], KEYS[2], KEYS[3], now)
marked = marked + cond_mark(KEYS[1], KEYS[2], KEYS[3], n, now)
if marked > 0 then
  notify(ARGV[2], KEYS[4], '1')
end
return marked
