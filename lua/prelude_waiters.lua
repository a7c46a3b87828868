-- prelude_waiters: joined by the build in front of the fair lock's scripts that
-- purge its queue or place a waiter in it ('--#include prelude_waiters.lua', after
-- prelude_guard).
-- The queue and the deadline ZSET are shared with Redisson's RFairLock, so both
-- clients must read every deadline alike.  Redisson's rule: a waiter is gone when it
-- heads the queue and its deadline has passed; a Redisson waiter's deadline is the
-- one ahead of it plus its wait time, and a Redisson waiter that takes the lock (or
-- gives up) takes its wait time off the deadlines behind it.  A distlock waiter's
-- deadline is the end of its window (the server's clock plus a short window) plus
-- Redisson's default wait time for each Redisson waiter ahead of it, which that
-- waiter will take off; its process pushes it forward while it lives
-- (waiter_renew).  Its mark in the marks ZSET (distlock_fair_waiters:{N}: owner ->
-- end of its window, server ms) tells distlock waiters from Redisson's; a waiter
-- that died is purged, mark and entry together, once its window ends, wherever it
-- stands in the queue.
--
-- No call walks the queue: a waiter's deadline less its mark is the Redisson wait
-- it still owes to those ahead (Redisson's own arithmetic takes a wait off it for
-- each that leaves), so a renewal moves the two by as much, reading its own entry
-- only; a waiter that heads the queue owes nothing.  One that joins owes a wait
-- for every Redisson waiter queued, all of them ahead of it: the entries less
-- distlock's live marks.  Each renewal is then two ZSET reads and two writes for
-- all the waiters of one process on one lock (prelude_places).
local REDISSON_WAIT = 300000   -- Redisson's default fairLockWaitTimeout, ms
-- A waiter behind others tries again after this many windows at the latest; its
-- turn is told it (a release's message, or the renewal: waiter_renew).
local BEHIND_WINDOWS = 12

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
