-- fair_unlock: give back one hold of the fair lock; the last one deletes the lock
-- and grants it to the head of the queue when that is a distlock waiter, else
-- wakes the head only, on its own channel (prelude_grant).
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  wait queue: LIST of owners                             (redisson_lock_queue:{N})
-- KEYS[3]  waiter deadlines: ZSET owner -> ms                     (redisson_lock_timeout:{N})
-- KEYS[4]  release channel (N's; the head's own channel is this name with
--          ':<owner>' appended, the one name not in KEYS: the script learns the
--          owner only from the queue; it shares KEYS[4]'s hash tag, so its slot)
-- KEYS[5]  distlock's waiters: ZSET owner -> end of window       (distlock_fair_waiters:{N})
-- KEYS[6]  fencing counter                                        (redisson_lock_token:{N})
-- KEYS[7]  a robust mutex only: its record, HASH (prelude_robust)  (distlock_robust:{N})
-- ARGV[1]  lease in ms, re-armed while holds remain, and a grant's
-- ARGV[2]  owner
-- ARGV[3]  publish command: 'publish', 'spublish' or 'spublish+publish' (notify)
-- ARGV[4]  message ('0')
-- ARGV[5]  the owner's count this call expects ('' none; see mutex_unlock)
-- ARGV[6]  robust only: 'clean', 'lost' or 'back' (see mutex_unlock); '' else
-- ARGV[7]  time to live in ms of the counter a grant draws (prelude_token) and of a
--          robust record once not recoverable: the lease plus DISTLOCK_KEY_GRACE_MS;
--          '0': kept for ever
-- Reply    {n, woken}: n is the holds left (0: released), -1 the owner holds nothing,
--          -2 the count differs from ARGV[5]; woken is 1 when a head was told (or
--          granted the lock)
-- A robust mutex's release grants nothing: the new holder's record is its take's.
-- The lock is read before the purge writes anything, the heir's token drawn before
-- the lock is written (prelude_guard).
-- Types    hash list zset - zset string hash
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_token.lua
--#include prelude_waiters.lua
--#include prelude_robust.lua
--#include prelude_release.lua
--#include prelude_grant.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call('hget', KEYS[1], ARGV[2])
local rheld = KEYS[7] and redis.call('hget', KEYS[7], 'held')
drop_dead_waiters(now, KEYS[2], KEYS[3], nil, {KEYS[5], 'zset', KEYS[6], 'string'})
-- the last hold, given to a distlock head: its token first, what can fail
local heir = not KEYS[7] and held == '1' and (ARGV[5] == '' or tonumber(ARGV[5]) == 1) and
             heir_of(now, KEYS[2], KEYS[5], KEYS[4], ARGV[3])
local token, digits
if heir then
  token, digits = fencing_token(KEYS[6], true, ARGV[7])
end

local holds = give_back_hold(KEYS[1], ARGV[2], ARGV[1], ARGV[5], held,
                             KEYS[7], rheld, ARGV[6], ARGV[7])
if holds ~= 0 then
  return {holds, 0}
end
if heir then
  grant(heir, token, digits, KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[4], ARGV[1], ARGV[3])
  return {0, 1}
end
local head = redis.call('lindex', KEYS[2], 0)
if head then
  notify(ARGV[3], KEYS[4] .. ':' .. head, ARGV[4])
  return {0, 1}
end
return {0, 0}
