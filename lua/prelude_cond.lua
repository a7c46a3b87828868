-- prelude_cond: joined by the build in front of the condition variable's scripts
-- ('--#include prelude_cond.lua', after prelude_guard).  A condition C keeps three
-- keys, all named after C with Redisson's brace rule so that they share C's
-- cluster slot:
--   waiters    ZSET owner -> liveness deadline, server ms  (distlock_cond_waiters:{C})
--              pushed forward by the waiter's renewal thread (waiter_renew)
--   queue      LIST of owners not yet signalled, oldest first (distlock_cond_queue:{C})
--   signalled  SET of owners signalled and not yet woken    (distlock_cond_signalled:{C})
-- A signalled waiter stays in waiters until it has taken its mark, so that a mark
-- whose waiter died is seen (its deadline passes) and given to the next waiter.

local function cond_now()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Whether owner waits and its process was alive recently enough.
local function cond_live(waiters, owner, now)
  local d = redis.call('zscore', waiters, owner)
  return d ~= false and d ~= nil and tonumber(d) >= now
end

-- Marks up to n of the oldest live waiters signalled; dead ones met on the way
-- are dropped.  Returns how many were marked.  The caller has read (or checked)
-- waiters and signalled before: the queue is the first key written
-- (prelude_guard).
local function cond_mark(waiters, queue, signalled, n, now)
  local marked = 0
  while marked < n do
    local owner = redis.call('lpop', queue)
    if not owner then
      break
    end
    if cond_live(waiters, owner, now) then
      redis.call('sadd', signalled, owner)
      marked = marked + 1
    else
      redis.call('zrem', waiters, owner)
    end
  end
  return marked
end

-- Marks whose waiter died before taking them go to the next live waiters, so
-- that a dead waiter never swallows a signal.  Returns how many were marked anew.
-- It reads signalled, and waiters when anybody is marked, and writes only when a
-- waiter died: then after checking the queue's type.
local function cond_pass_on(waiters, queue, signalled, now)
  local dead = {}
  for _, owner in ipairs(redis.call('smembers', signalled)) do
    if not cond_live(waiters, owner, now) then
      dead[#dead + 1] = owner
    end
  end
  if #dead == 0 then
    return 0
  end
  want(queue, 'list')
  for _, owner in ipairs(dead) do
    redis.call('srem', signalled, owner)
    redis.call('zrem', waiters, owner)
  end
  return cond_mark(waiters, queue, signalled, #dead, now)
end
