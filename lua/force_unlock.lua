-- force_unlock: remove a lock whatever its holders (an operator's `distlock unlock
-- --force`), and wake its waiters as a final release would.  Holders are not told:
-- their watchdog finds the hold gone and reports it lost.
-- KEYS[1]  the lock: HASH, a mutex, fair mutex or read-write lock  (N)
-- KEYS[2]  release channel                                        (redisson_lock__channel:{N})
-- KEYS[3]  read-write lock release channel                        (redisson_rwlock:{N})
-- KEYS[4]  fair wait queue: LIST of owners, head first            (redisson_lock_queue:{N})
-- KEYS[5]  fair waiter deadlines: ZSET owner -> server ms         (redisson_lock_timeout:{N})
-- KEYS[6]  live readers: ZSET, deleted too                        (distlock_rwlock_readers:{N})
-- KEYS[7]  a plain mutex's registered waiters: ZSET (prelude_wake) (distlock_mutex_waiters:{N})
-- KEYS[8..] read-hold timeout keys of the holders the caller saw, deleted too
--          ({N}:<owner>:rwlock_timeout:<k>; any may be missing)
-- ARGV[1]  publish command: 'publish', 'spublish' or 'spublish+publish' (notify)
-- Reply    1 the lock existed and is gone, 0 there was no lock, -1 N is not a HASH
--          (not a lock): nothing changed
-- Messages: '0' on KEYS[2] (what a mutex release sends), '1' on KEYS[3] when it was a
-- read-write lock (wakes every waiter), and for a fair lock '0' on the channel of the
-- queue's head (KEYS[2] .. ':' .. head, as fair_unlock), after dropping dead waiters,
-- and to one registered waiter of a plain mutex on its own channel (mutex_unlock).
-- The dead waiters are dropped before the lock is deleted, so that a queue or
-- deadlines of another type fail the script before it has written (prelude_guard).
-- Types    - - - list zset - zset
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_waiters.lua
--#include prelude_wake.lua
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return -1
end
local rw = redis.call('hexists', KEYS[1], 'mode') == 1
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
want(KEYS[7], 'zset')
drop_dead_waiters(now, KEYS[4], KEYS[5])

redis.call('del', KEYS[1])
redis.call('del', KEYS[6])
for i = 8, #KEYS do
  redis.call('del', KEYS[i])
end
notify(ARGV[1], KEYS[2], '0')
if rw then
  notify(ARGV[1], KEYS[3], '1')
end
local head = redis.call('lindex', KEYS[4], 0)
if head then
  notify(ARGV[1], KEYS[2] .. ':' .. head, '0')
end
if redis.call('exists', KEYS[7]) == 1 then
  wake_waiter(KEYS[7], ARGV[1])
end
return 1
