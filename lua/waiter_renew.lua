-- waiter_renew: keep live waiters' queue entries from being purged.  A waiter's
-- deadline is the server's clock plus a short window; its process pushes it
-- forward while alive, so a dead waiter is dropped within one window.
-- KEYS     for each waiter either one key, the deadline ZSET of a waiting writer
--          { owner: deadline ms } (distlock_rwlock_writers:{N}), or four keys, a
--          fair mutex's: its deadline ZSET (redisson_lock_timeout:{N}), wait queue
--          (redisson_lock_queue:{N}), distlock waiters' marks
--          (distlock_fair_waiters:{N}) and release channel (redisson_lock__channel:{N})
-- ARGV[1]  window in ms
-- ARGV     then for each waiter: its owner, and its number of keys (1 or 4)
-- Reply    one integer per waiter: 1 pushed forward, 0 no longer queued.  A fair
--          waiter no longer queued (purged while its process could not renew it,
--          or removed by hand) is told on its own channel, in both pub/sub kinds
--          since the script does not know which one its process listens to, so
--          that it queues again at once rather than at its next bounded retry.
--          A fair waiter's deadline is set as fair_lock sets it (prelude_waiters).
--          A fair waiter whose keys are of another type is told too, changing
--          nothing (prelude_guard): its next try fails and says which key.
--#include prelude_guard.lua
--#include prelude_batch.lua
--#include prelude_waiters.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
return for_each_entry(function(owner, k, nkeys)
  if nkeys == 4 then
    local ok, q = pcall(keep_place, now, window, KEYS[k + 1], KEYS[k], KEYS[k + 2],
                        owner, false)
    if ok and q then
      return true
    end
    if not ok and not is_wrong_type(q) then
      error(tostring(q):match('^[A-Z]+ ') and {err = q} or q, 0)
    end
    local chan = KEYS[k + 3] .. ':' .. owner
    redis.call('publish', chan, '0')
    redis.pcall('spublish', chan, '0')
    return false
  end
  if redis.call('zscore', KEYS[k], owner) then
    redis.call('zadd', KEYS[k], now + window, owner)
    return true
  end
  return false
end)
