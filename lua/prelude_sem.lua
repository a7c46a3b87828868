-- prelude_sem: joined by the build in front of the leased semaphore's scripts
-- ('--#include prelude_sem.lua').  A semaphore S keeps, named with Redisson's brace
-- rule so that they share S's cluster slot:
--   sem     HASH { free: permits nobody holds }              (distlock_sem:{S})
--   holds   HASH owner -> permits it holds                   (distlock_sem_holds:{S})
--   leases  ZSET owner -> end of its lease, server ms        (distlock_sem_leases:{S})
-- The semaphore's total is free plus every hold; taking and giving back move a
-- permit between the two, a lease that ends moves its owner's permits back to free,
-- and only an explicit set or an unowned post changes the total.

local function sem_now()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Creates the semaphore with initial free permits unless it exists.
local function sem_create(sem, initial)
  if redis.call('exists', sem) == 0 then
    redis.call('hset', sem, 'free', initial)
  end
end

-- Gives the permits of owners whose lease ended back; returns how many.
local function sem_reclaim(sem, holds, leases, now)
  local back = 0
  for _, owner in ipairs(redis.call('zrangebyscore', leases, '-inf', '(' .. now)) do
    back = back + tonumber(redis.call('hget', holds, owner) or '0')
    redis.call('hdel', holds, owner)
    redis.call('zrem', leases, owner)
  end
  if back > 0 then
    redis.call('hincrby', sem, 'free', back)
  end
  return back
end

-- Tells up to n waiters (one message each: every process wakes one of its
-- waiting threads per message).
local function sem_tell(how, chan, n)
  for _ = 1, math.min(n, 64) do
    notify(how, chan, '0')
  end
end
