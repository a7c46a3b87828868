-- prelude_sem: joined by the build in front of the leased semaphore's scripts
-- ('--#include prelude_sem.lua', after prelude_number).  A semaphore S keeps, named
-- with Redisson's brace rule so that they share S's cluster slot:
--   sem     HASH { free: permits nobody holds }              (distlock_sem:{S})
--   holds   HASH owner -> permits it holds                   (distlock_sem_holds:{S})
--   leases  ZSET owner -> end of its lease, server ms        (distlock_sem_leases:{S})
-- The semaphore's total is free plus every hold; taking and giving back move a
-- permit between the two, a lease that ends moves its owner's permits back to free,
-- and only an explicit set or an unowned post changes the total.
-- Each script reads what it needs first and writes after (prelude_guard): sem_free
-- and sem_dead only read, sem_drop and the scripts' own writes come after them.

local function sem_now()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The free permits as read from sem, and whether it exists: a semaphore that
-- does not exist yet has initial.  Fails on a hash that keeps no count there.
local function sem_free(sem, initial)
  local free = redis.call('hget', sem, 'free')
  if free then
    return number_in(sem, free), true
  end
  if redis.call('exists', sem) == 1 then
    error(redis.error_reply("WRONGTYPE key '" .. sem .. "' is a hash without" ..
                            " 'free', not a semaphore; nothing was changed"))
  end
  return tonumber(initial), false
end

-- The owners whose lease ended, and how many permits they hold (to go back to
-- free): read only.
local function sem_dead(holds, leases, now)
  local dead, back = redis.call('zrangebyscore', leases, '-inf', '(' .. now), 0
  for _, owner in ipairs(dead) do
    back = back + number_in(holds, redis.call('hget', holds, owner) or '0')
  end
  return dead, back
end

-- Drops the owners sem_dead found, once the caller has read everything.
local function sem_drop(holds, leases, dead)
  for _, owner in ipairs(dead) do
    redis.call('hdel', holds, owner)
    redis.call('zrem', leases, owner)
  end
end

-- Tells up to n waiters (one message each: every process wakes one of its
-- waiting threads per message).
local function sem_tell(how, chan, n)
  for _ = 1, math.min(n, 64) do
    notify(how, chan, '0')
  end
end
