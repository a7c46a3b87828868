-- fair_unlock: give back one hold of the fair lock; the last one deletes the lock
-- and wakes the head of the queue only, on its own channel.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  wait queue: LIST of owners                             (redisson_lock_queue:{N})
-- KEYS[3]  waiter deadlines: ZSET owner -> ms                     (redisson_lock_timeout:{N})
-- KEYS[4]  release channel (N's; the head's own channel is this name with
--          ':<owner>' appended, the one name not in KEYS: the script learns the
--          owner only from the queue; it shares KEYS[4]'s hash tag, so its slot)
-- KEYS[5]  a robust mutex only: its record, HASH (prelude_robust)  (distlock_robust:{N})
-- ARGV[1]  lease in ms, re-armed while holds remain
-- ARGV[2]  owner
-- ARGV[3]  publish command: 'publish', 'spublish' or 'spublish+publish' (notify)
-- ARGV[4]  message ('0')
-- ARGV[5]  optional: the owner's count this call expects ('' none; see mutex_unlock)
-- ARGV[6]  robust only: 'clean' or 'lost', ARGV[7] the record's time to live in ms
--          once not recoverable (see mutex_unlock)
-- Reply    {n, woken}: n is the holds left (0: released), -1 the owner holds nothing,
--          -2 the count differs from ARGV[5]; woken is 1 when a head was told
-- The lock is read before the purge writes anything (prelude_guard).
-- Types    hash list zset - hash
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_waiters.lua
--#include prelude_robust.lua
--#include prelude_release.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call('hget', KEYS[1], ARGV[2])
local rheld = KEYS[5] and redis.call('hget', KEYS[5], 'held')
drop_dead_waiters(now, KEYS[2], KEYS[3])

local holds = give_back_hold(KEYS[1], ARGV[2], ARGV[1], ARGV[5], held,
                             KEYS[5], rheld, ARGV[6], ARGV[7])
if holds ~= 0 then
  return {holds, 0}
end
local head = redis.call('lindex', KEYS[2], 0)
if head then
  notify(ARGV[3], KEYS[4] .. ':' .. head, ARGV[4])
  return {0, 1}
end
return {0, 0}
