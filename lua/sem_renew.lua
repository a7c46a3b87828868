-- sem_renew: the watchdog; extend the leases of many semaphore holders in one call.
-- KEYS     for each holder two keys: holds, HASH owner -> permits
--          (distlock_sem_holds:{S}), and leases, ZSET owner -> lease end
--          (distlock_sem_leases:{S})
-- ARGV[1]  lease in ms
-- ARGV     then for each holder: its owner, and its number of keys (2)
-- Reply    one integer per holder: 1 renewed, 0 it holds nothing any more.  A lease
--          that has ended is not renewed: any call may have given its permits back.
--          Keys of another type count as 0 and change nothing (prelude_batch).
--#include prelude_batch.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return for_each_entry(function(owner, k, nkeys)
  local ends = redis.call('zscore', KEYS[k + 1], owner)
  if ends and tonumber(ends) >= now and redis.call('hexists', KEYS[k], owner) == 1 then
    redis.call('zadd', KEYS[k + 1], now + tonumber(ARGV[1]), owner)
    return true
  end
  return false
end)
