-- prelude_places: joined by the build in front of waiter_renew, after
-- prelude_guard, prelude_batch and prelude_waiters ('--#include prelude_places.lua'):
-- how the renewal keeps distlock waiters' places in a fair queue (the deadlines:
-- see prelude_waiters).  Apart from prelude_waiters, whose scripts run on every
-- fair lock and unlock: each local function here costs each call of a script
-- that joins it a closure (prelude_guard).

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
