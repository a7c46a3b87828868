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
-- The semaphore, holds and leases are read before anything is written
-- (prelude_guard).
-- Types    hash hash zset -
--#include prelude_number.lua
--#include prelude_publish.lua
--#include prelude_sem.lua
local now = sem_now()
local stored, exists = sem_free(KEYS[1], ARGV[3])
local dead, back = sem_dead(KEYS[2], KEYS[3], now)
local gone, dropped = {}, {}
for _, owner in ipairs(dead) do
  gone[owner] = true
end
if ARGV[1] == 'drop' then
  for i = 6, #ARGV do
    dropped[ARGV[i]] = true
  end
end
local all, held = redis.call('hgetall', KEYS[2]), 0
for i = 1, #all, 2 do
  local v = number_in(KEYS[2], all[i + 1])
  if not gone[all[i]] and not dropped[all[i]] then
    held = held + v
  end
end
local free = stored + back
local n, told, res = tonumber(ARGV[2]), back, nil
if ARGV[1] == 'add' then
  if free + n > tonumber(ARGV[4]) then
    res = -1
  else
    free = free + n
    told = back + n
  end
elseif ARGV[1] == 'set' then
  free, told = n, n
end
-- every key is read: nothing below can fail
if not exists or free ~= stored then
  redis.call('hset', KEYS[1], 'free', free)
end
sem_drop(KEYS[2], KEYS[3], dead)
for i = 1, #all, 2 do
  if dropped[all[i]] and not gone[all[i]] then
    redis.call('hset', KEYS[2], all[i], 0)
  end
end
if res then
  return {res, held}
end
sem_tell(ARGV[5], KEYS[4], math.min(told, free))
return {free, held}
