-- waiter_renew: keep live waiters' queue entries from being purged.  A waiter's
-- deadline is the server's clock plus a short window; its process pushes it
-- forward while alive, so a dead waiter is dropped within one window.
-- KEYS     for each waiter, one key: the deadline ZSET { owner: deadline ms }
--          (redisson_lock_timeout:{N}, or distlock_rwlock_writers:{N})
-- ARGV[1]  window in ms
-- ARGV     then for each waiter: its owner, and its number of keys (1)
-- Reply    one integer per waiter: 1 pushed forward, 0 no longer queued
--#include prelude_batch.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[1])
return for_each_entry(function(owner, k, nkeys)
  if redis.call('zscore', KEYS[k], owner) then
    redis.call('zadd', KEYS[k], deadline, owner)
    return true
  end
  return false
end)
