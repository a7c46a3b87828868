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
-- all the waiters of one process on one lock.
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

-- scores_of(key, owners): the owners' scores in ZSET key, false where there is
-- none, in one ZMSCORE (Redis 6.2); one ZSCORE each before 6.2, or on a key
-- of another type, where the first ZSCORE fails as any command does, before the
-- caller writes (prelude_guard).
local function scores_of(key, owners)
  local ok, s = pcall(redis.call, 'zmscore', key, unpack(owners))
  if ok then
    return s
  end
  s = {}
  for i = 1, #owners do
    s[i] = redis.call('zscore', key, owners[i])
  end
  return s
end

-- Redisson waiters queued: every entry less distlock's live marks (a mark whose
-- window ended belongs to a waiter about to be purged, or already gone).  O(log W).
local function redisson_waiters(now, deadlines, marks)
  local n = redis.call('zcard', deadlines) -
            redis.call('zcount', marks, '(' .. now, '+inf')
  return n > 0 and n or 0
end

-- The marks outlive every deadline given, so that no distlock entry loses its
-- mark while it stands in the queue.
local function marks_outlive(marks, ms)
  if redis.call('pttl', marks) < ms then
    redis.call('pexpire', marks, ms)
  end
end

-- keep_places(now, window, deadlines, marks, owners, head)
--   owners   distlock waiters of one lock (their owners)
--   head     the queue's head (LINDEX 0), or false
-- Pushes each queued owner's mark to the end of a new window, and its deadline
-- by as much, but for the head, whose deadline is its mark (it owes no wait).
-- Returns one value per owner: false when it is not queued (no entry in the
-- deadline ZSET, which Redisson keeps with the queue's), else how far its
-- deadline moved.  Reads both ZSETs before it writes.
local function keep_places(now, window, deadlines, marks, owners, head)
  local d = scores_of(deadlines, owners)
  local m = scores_of(marks, owners)
  local mark = now + window
  local dargs, margs, moved, top = {}, {}, {}, window
  local owed = nil
  for i = 1, #owners do
    moved[i] = false
    if d[i] then
      local excess = 0
      if owners[i] ~= head then
        if m[i] then
          excess = tonumber(d[i]) - tonumber(m[i])
        else
          -- its mark was lost: owe the most it can, a wait per Redisson entry
          owed = owed or redisson_waiters(now, deadlines, marks) * REDISSON_WAIT
          excess = owed
        end
        if excess < 0 then
          excess = 0
        end
      end
      moved[i] = mark + excess - tonumber(d[i])
      dargs[#dargs + 1] = mark + excess
      dargs[#dargs + 1] = owners[i]
      margs[#margs + 1] = mark
      margs[#margs + 1] = owners[i]
      if window + excess > top then
        top = window + excess
      end
    end
  end
  if #margs > 0 then
    redis.call('zadd', marks, unpack(margs))
    redis.call('zadd', deadlines, unpack(dargs))
    marks_outlive(marks, top)
  end
  return moved
end

-- move_redisson_runs(now, queue, deadlines, marks, moved): the Redisson waiters
-- queued right behind a distlock waiter (up to the next distlock one) reckoned
-- their deadlines from its, and Redisson 3.17 sleeps until the deadline of the
-- one ahead: they move as far as it did (moved: owner -> ms).  Only a queue
-- with Redisson waiters in it is read, whole, once per call; one of distlock's
-- waiters alone costs two counts.
local function move_redisson_runs(now, queue, deadlines, marks, moved)
  if redisson_waiters(now, deadlines, marks) == 0 then
    return
  end
  local q = redis.call('lrange', queue, 0, -1)
  local by = 0
  for from = 1, #q, 1000 do
    local part = {}
    for i = from, math.min(from + 999, #q) do
      part[#part + 1] = q[i]
    end
    local m = scores_of(marks, part)
    for i = 1, #part do
      if m[i] then
        by = moved[part[i]] or 0
      elseif by ~= 0 then
        redis.call('zincrby', deadlines, by, part[i])
      end
    end
  end
end

-- join_queue(now, window, queue, deadlines, marks, owner): owner, not queued,
-- joins at the tail behind every Redisson waiter queued, owing each a wait.
-- The ZSETs are read before the first write; the queue was read by the caller.
local function join_queue(now, window, queue, deadlines, marks, owner)
  local owed = redisson_waiters(now, deadlines, marks) * REDISSON_WAIT
  redis.call('zadd', marks, now + window, owner)
  redis.call('zadd', deadlines, now + window + owed, owner)
  redis.call('rpush', queue, owner)
  marks_outlive(marks, window + owed)
end
