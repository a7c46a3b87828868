-- prelude_waiters: joined by the build in front of the fair lock's scripts that
-- purge its queue or place a waiter in it ('--#include prelude_waiters.lua').
-- The queue and the deadline ZSET are shared with Redisson's RFairLock, so both
-- clients must read every deadline alike.  Redisson's rule: a waiter is gone when it
-- heads the queue and its deadline has passed; a Redisson waiter's deadline is the
-- one ahead of it plus its wait time, and a Redisson waiter that takes the lock (or
-- gives up) takes its wait time off the deadlines behind it.  A distlock waiter's
-- deadline is the server's clock plus a short window, plus Redisson's default wait
-- time for each Redisson waiter ahead of it, which that waiter will take off; its
-- process pushes it forward while it lives (waiter_renew), so a waiter that died is
-- purged within the window once it heads the queue.  Its mark in the marks ZSET
-- (distlock_fair_waiters:{N}: owner -> end of its window, server ms) tells distlock
-- waiters from Redisson's.
local REDISSON_WAIT = 300000   -- Redisson's default fairLockWaitTimeout, ms

-- drop_dead_waiters(now, queue, deadlines, marks)
--   now        server time in ms, from TIME
--   queue      wait queue: LIST of owners, head first           (redisson_lock_queue:{N})
--   deadlines  waiter deadlines: ZSET owner -> ms               (redisson_lock_timeout:{N})
--   marks      nil, or distlock's waiters                       (distlock_fair_waiters:{N})
-- Purges from the head by Redisson's rule, so that both clients agree on who is
-- gone; with marks also a distlock head whose window ended (its deadline can be
-- later when a Redisson waiter ahead left without taking its wait time off), and
-- marks whose window ended.  An entry without a deadline goes too: it would break
-- Redisson's scripts.
local function drop_dead_waiters(now, queue, deadlines, marks)
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      break
    end
    local score = redis.call('zscore', deadlines, head)
    local mark = marks and redis.call('zscore', marks, head)
    if score and tonumber(score) > now and not (mark and tonumber(mark) <= now) then
      break
    end
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, head)
  end
  if marks then
    redis.call('zremrangebyscore', marks, '-inf', now)
  end
end

-- keep_place(now, window, queue, deadlines, marks, owner, join)
--   window     a distlock waiter's window in ms
--   join       whether an owner not in the queue joins it at the tail
-- Sets owner's deadline and mark as described above, and moves the Redisson waiters
-- queued behind it (up to the next distlock waiter) by as much, since theirs were
-- reckoned from it.  Returns the queue as read (with owner appended when it
-- joined), or nil when owner is not queued and join is false.
local function keep_place(now, window, queue, deadlines, marks, owner, join)
  local q = redis.call('lrange', queue, 0, -1)
  local pos, ahead = nil, 0
  for i = 1, #q do
    if q[i] == owner then
      pos = i
      break
    end
    if not redis.call('zscore', marks, q[i]) then
      ahead = ahead + 1
    end
  end
  if not pos then
    if not join then
      return nil
    end
    redis.call('rpush', queue, owner)
    q[#q + 1] = owner
    pos = #q
  end
  local deadline = now + window + ahead * REDISSON_WAIT
  local old = redis.call('zscore', deadlines, owner)
  redis.call('zadd', deadlines, deadline, owner)
  if old and tonumber(old) ~= deadline then
    for i = pos + 1, #q do
      if redis.call('zscore', marks, q[i]) then
        break
      end
      if redis.call('zscore', deadlines, q[i]) then
        redis.call('zincrby', deadlines, deadline - tonumber(old), q[i])
      end
    end
  end
  redis.call('zadd', marks, now + window, owner)
  if redis.call('pttl', marks) < window then
    redis.call('pexpire', marks, window)
  end
  return q
end
