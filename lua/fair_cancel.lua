-- fair_cancel: a waiter gives up (timeout, error): it leaves the queue at once, and
-- if it was the head of a free lock, the next waiter is told.
-- KEYS[1]  the lock                                               (N)
-- KEYS[2]  wait queue: LIST of owners                             (redisson_lock_queue:{N})
-- KEYS[3]  waiter deadlines: ZSET                                 (redisson_lock_timeout:{N})
-- KEYS[4]  release channel (see fair_unlock for the head's own channel)
-- KEYS[5]  distlock's waiters: ZSET owner -> end of window       (distlock_fair_waiters:{N})
-- ARGV[1]  owner
-- ARGV[2]  publish command
-- ARGV[3]  message ('0')
-- Reply    1 it was queued, 0 it was not
-- The mark goes too, so that the marks count distlock's entries in the queue (see
-- prelude_waiters).  The queue and the marks are read first and the deadline goes
-- first, so nothing after the first write can fail (prelude_guard).
-- Types    hash list zset - zset
--#include prelude_publish.lua
local head = redis.call('lindex', KEYS[2], 0)
local marked = redis.call('zscore', KEYS[5], ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if marked then
  redis.call('zrem', KEYS[5], ARGV[1])
end
local removed = redis.call('lrem', KEYS[2], 0, ARGV[1])
if head == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
  local next_head = redis.call('lindex', KEYS[2], 0)
  if next_head then
    notify(ARGV[2], KEYS[4] .. ':' .. next_head, ARGV[3])
  end
end
return removed > 0 and 1 or 0
