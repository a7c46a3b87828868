-- prelude_wake: joined by the build in front of the scripts that release a plain
-- mutex or let one of its waiters go ('--#include prelude_wake.lua', after
-- prelude_publish).  A distlock thread that waits for a plain mutex registers in
-- its waiters ZSET (distlock_mutex_waiters:{N}: owner -> end of its window, server
-- ms; its process pushes it forward while it waits, waiter_renew) and listens on a
-- channel of its own, the ZSET's name with ':<owner>' appended (in N's slot).  A
-- distlock owner that takes the lock while waiters are registered leaves its mark
-- there instead (score -1): it will wake one of them when it lets go, so they need
-- not listen on N's channel, which Redisson's waiters and every release still use.
-- A release then wakes one registered waiter rather than every process with one.
local MARK = -1

-- Whether the lock's holder left its mark, so that its release will wake a
-- registered waiter: the lock has one owner, whose score among the waiters is
-- MARK (mutex_lock and mutex_cancel read it so, written out: every function of a
-- prelude costs each call of a script that includes it a closure, and this file
-- holds the one its scripts all use).

-- wake_waiter(waiters, how)
-- The lock is free: wakes one live registered waiter on its own channel, with
-- notify's how.  A waiter whose channel nobody hears (its process died, or it
-- has not subscribed yet: it tries again once it has) leaves the ZSET and the
-- next is told, a few at most; expired entries are dropped.  Returns the
-- subscribers reached (0 or 1).
local function wake_waiter(waiters, how)
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('zremrangebyscore', waiters, '0', now)
  for _ = 1, 3 do
    local w = redis.call('zrangebyscore', waiters, '(' .. now, '+inf', 'limit', 0, 1)
    if #w == 0 then
      return 0
    end
    if notify(how, waiters .. ':' .. w[1], '0') > 0 then
      return 1
    end
    redis.call('zrem', waiters, w[1])
  end
  return 0
end
