-- fair_cancel: a waiter gives up (timeout, error): it leaves the queue at once, and
-- if it was the head of a free lock, the next waiter is told.
-- KEYS[1]  the lock                                               (N)
-- KEYS[2]  wait queue: LIST of owners                             (redisson_lock_queue:{N})
-- KEYS[3]  waiter deadlines: ZSET                                 (redisson_lock_timeout:{N})
-- KEYS[4]  release channel (see fair_unlock for the head's own channel)
-- ARGV[1]  owner
-- ARGV[2]  publish command
-- ARGV[3]  message ('0')
-- Reply    1 it was queued, 0 it was not
-- The deadlines go first: the queue is read already, so nothing after can fail
-- (prelude_guard).
-- Types    hash list zset -
--#include prelude_publish.lua
local head = redis.call('lindex', KEYS[2], 0)
redis.call('zrem', KEYS[3], ARGV[1])
local removed = redis.call('lrem', KEYS[2], 0, ARGV[1])
if head == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
  local next_head = redis.call('lindex', KEYS[2], 0)
  if next_head then
    notify(ARGV[2], KEYS[4] .. ':' .. next_head, ARGV[3])
  end
end
return removed > 0 and 1 or 0
