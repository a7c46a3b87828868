-- sem_count: read, add to or set a leased semaphore's free permits.
-- KEYS[1]  sem: HASH { free }                                     (distlock_sem:{S})
-- KEYS[2]  holds: HASH owner -> permits                           (distlock_sem_holds:{S})
-- KEYS[3]  leases: ZSET owner -> lease end                        (distlock_sem_leases:{S})
-- KEYS[4]  channel                                                (distlock_sem_channel:{S})
-- ARGV[1]  'get', 'add' (a post by a thread holding nothing, allowed by the
--          semaphore's attributes: new permits), 'set' (free := ARGV[2]) or
--          'drop' (the holds of the owners ARGV[6..] are consumed: a destroy of a
--          semaphore with unowned posts; each field stays, at 0, until its lease
--          ends, so that a renewal already under way does not find it gone)
-- ARGV[2]  the permits to add or set
-- ARGV[3]  free permits of a semaphore that does not exist yet
-- ARGV[4]  the most free permits allowed
-- ARGV[5]  publish command (see prelude_publish)
-- ARGV[6..] 'drop': the owners
-- Reply    {free, held} after the call; {-1, held} when 'add' would pass ARGV[4]
--          (nothing changed)
--#include prelude_publish.lua
--#include prelude_sem.lua
local now = sem_now()
sem_create(KEYS[1], ARGV[3])
local back = sem_reclaim(KEYS[1], KEYS[2], KEYS[3], now)
local free = tonumber(redis.call('hget', KEYS[1], 'free'))
if ARGV[1] == 'drop' then
  for i = 6, #ARGV do
    if redis.call('hexists', KEYS[2], ARGV[i]) == 1 then
      redis.call('hset', KEYS[2], ARGV[i], 0)
    end
  end
end
local held = 0
for _, n in ipairs(redis.call('hvals', KEYS[2])) do
  held = held + tonumber(n)
end
local n = tonumber(ARGV[2])
if ARGV[1] == 'add' then
  if free + n > tonumber(ARGV[4]) then
    return {-1, held}
  end
  free = redis.call('hincrby', KEYS[1], 'free', n)
  back = back + n
elseif ARGV[1] == 'set' then
  redis.call('hset', KEYS[1], 'free', n)
  free = n
  back = n
end
sem_tell(ARGV[5], KEYS[4], math.min(back, free))
return {free, held}
