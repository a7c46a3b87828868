-- rsem_acquire: take one permit of a Redisson-compatible semaphore (RSemaphore's
-- layout: the permit count in a plain string key).  Nothing records who took it.
-- KEYS[1]  the permits: STRING count                              (S)
-- ARGV[1]  permits of a semaphore that does not exist yet
-- Reply    1 taken, 0 none free
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[1])
end
local v = tonumber(redis.call('get', KEYS[1]))
if v >= 1 then
  redis.call('decrby', KEYS[1], 1)
  return 1
end
return 0
