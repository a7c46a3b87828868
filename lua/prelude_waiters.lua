-- prelude_waiters: joined by the build in front of the fair lock's scripts that
-- purge its queue or place a waiter in it ('--#include prelude_waiters.lua', after
-- prelude_guard).
-- The queue and the deadline ZSET are shared with Redisson's RFairLock, so both
-- clients must read every deadline alike.  Redisson's rule: a waiter is gone when it
-- heads the queue and its deadline has passed; a Redisson waiter's deadline is the
-- one ahead of it plus its wait time, and a Redisson waiter that takes the lock (or
-- gives up) takes its wait time off the deadlines behind it.  A distlock waiter's
-- deadline is the server's clock plus a short window, plus Redisson's default wait
-- time for each Redisson waiter ahead of it, which that waiter will take off; its
-- process pushes it forward while it lives (waiter_renew).  Its mark in the marks
-- ZSET (distlock_fair_waiters:{N}: owner -> end of its window, server ms) tells
-- distlock waiters from Redisson's; a waiter that died is purged, mark and entry
-- together, once its window ends, wherever it stands in the queue.
local REDISSON_WAIT = 300000   -- Redisson's default fairLockWaitTimeout, ms

-- drop_dead_waiters(now, queue, deadlines, marks, also)
--   now        server time in ms, from TIME
--   queue      wait queue: LIST of owners, head first           (redisson_lock_queue:{N})
--   deadlines  waiter deadlines: ZSET owner -> ms               (redisson_lock_timeout:{N})
--   marks      nil, or distlock's waiters                       (distlock_fair_waiters:{N})
--   also       nil, or {key, type, ...}: keys the caller touches only after this
--              call, whose types are checked before it drops anybody (prelude_guard:
--              nothing written before what can fail)
-- With marks, first every distlock waiter whose window ended, wherever it stands
-- (its deadline can be later, by the Redisson waits added for the entries ahead of
-- it).  Then from the head by Redisson's rule, so that both clients agree on who
-- is gone.  An entry without a deadline goes too: it would break Redisson's
-- scripts.  The usual call drops nobody and writes nothing.
local function check_before_drop(queue, deadlines, also)
  want(queue, 'list')
  want(deadlines, 'zset')
  for i = 1, #(also or {}), 2 do
    want(also[i], also[i + 1])
  end
end

local function drop_dead_waiters(now, queue, deadlines, marks, also)
  local checked = false
  if marks then
    -- a distlock waiter whose window ended is gone wherever it stands: with
    -- its mark dropped and its entry left, it would pass for a Redisson
    -- waiter, and one queued behind it would add a Redisson wait to its own
    -- deadline
    local gone = redis.call('zrangebyscore', marks, '-inf', now)
    if #gone > 0 then
      check_before_drop(queue, deadlines, also)
      checked = true
      for i = 1, #gone do
        redis.call('lrem', queue, 0, gone[i])
        redis.call('zrem', deadlines, gone[i])
      end
      redis.call('zremrangebyscore', marks, '-inf', now)
    end
  end
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      break
    end
    local score = redis.call('zscore', deadlines, head)
    if score and tonumber(score) > now then
      break
    end
    if not checked then
      check_before_drop(queue, deadlines, also)
      checked = true
    end
    redis.call('lpop', queue)
    redis.call('zrem', deadlines, head)
  end
end

-- keep_place(now, window, queue, deadlines, marks, owner, join)
--   window     a distlock waiter's window in ms
--   join       whether an owner not in the queue joins it at the tail
-- Sets owner's deadline and mark as described above, and moves the Redisson waiters
-- queued behind it (up to the next distlock waiter) by as much, since theirs were
-- reckoned from it.  Returns the queue as read (with owner appended when it
-- joined), or nil when owner is not queued and join is false.  Every key is read
-- before the first write but marks, which may be unread when owner heads the
-- queue: its write comes first (prelude_guard).
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
  if not pos and not join then
    return nil
  end
  local old = redis.call('zscore', deadlines, owner)
  local deadline = now + window + ahead * REDISSON_WAIT
  redis.call('zadd', marks, now + window, owner)
  if not pos then
    redis.call('rpush', queue, owner)
    q[#q + 1] = owner
    pos = #q
  end
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
  -- the marks outlive every deadline given here, so that no distlock entry
  -- loses its mark while it stands in the queue
  if redis.call('pttl', marks) < deadline - now then
    redis.call('pexpire', marks, deadline - now)
  end
  return q
end
