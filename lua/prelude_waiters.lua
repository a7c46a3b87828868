-- prelude_waiters: joined by the build in front of the fair lock's scripts that
-- purge its queue (a script asks for it with '--#include prelude_waiters.lua').
-- drop_dead_waiters(now, queue, deadlines)
--   now        server time in ms, from TIME
--   queue      wait queue: LIST of owners, head first           (redisson_lock_queue:{N})
--   deadlines  waiter deadlines: ZSET owner -> server ms        (redisson_lock_timeout:{N})
-- Removes every waiter whose deadline passed from both, as Redisson's scripts do
-- first: a waiter that died leaves the queue instead of stalling it.
local function drop_dead_waiters(now, queue, deadlines)
  local dead = redis.call('zrangebyscore', deadlines, '-inf', now)
  for i = 1, #dead do
    redis.call('lrem', queue, 0, dead[i])
    redis.call('zrem', deadlines, dead[i])
  end
end
