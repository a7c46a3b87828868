-- sem_acquire: take one permit of a leased semaphore as a hold of the owner.
-- KEYS[1]  sem: HASH { free }                                     (distlock_sem:{S})
-- KEYS[2]  holds: HASH owner -> permits                           (distlock_sem_holds:{S})
-- KEYS[3]  leases: ZSET owner -> lease end                        (distlock_sem_leases:{S})
-- KEYS[4]  channel                                                (distlock_sem_channel:{S})
-- ARGV[1]  lease in ms
-- ARGV[2]  owner
-- ARGV[3]  free permits of a semaphore that does not exist yet
-- ARGV[4]  publish command (see prelude_publish)
-- ARGV[5]  '1': the semaphore allows unowned posts, and a permit taken replaces
--          the owner's earlier hold, which is consumed (its taker is done with it:
--          a consumer holds only the item it works on); '0' or absent: added to it
-- Reply    {1, holds, had}  taken; holds is the owner's count after this call; had
--                      the holds it replaced (ARGV[5] '1'), else 0
--          {0, ms}     none free; ms until the first lease ends (when permits may
--                      come back), -1 when nobody holds any
-- The semaphore and the leases are read before anything is written; the holds
-- are read too when a lease ended, else the owner's count there is the first
-- write (prelude_guard).
-- Types    hash hash zset -
--#replicas
--#include prelude_number.lua
--#include prelude_publish.lua
--#include prelude_sem.lua
local now = sem_now()
local free, exists = sem_free(KEYS[1], ARGV[3])
local dead, back = sem_dead(KEYS[2], KEYS[3], now)
free = free + back
sem_drop(KEYS[2], KEYS[3], dead)
if free >= 1 then
  local n, had = 1, 0
  if ARGV[5] == '1' then
    had = number_in(KEYS[2], redis.call('hget', KEYS[2], ARGV[2]) or '0')
    redis.call('hset', KEYS[2], ARGV[2], 1)
  else
    n = redis.call('hincrby', KEYS[2], ARGV[2], 1)
  end
  redis.call('hset', KEYS[1], 'free', free - 1)
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[1]), ARGV[2])
  -- permits a dead holder gave back beyond this one: others may take them
  sem_tell(ARGV[4], KEYS[4], math.min(back - 1, free - 1))
  return {1, n, had}
end
if not exists then
  redis.call('hset', KEYS[1], 'free', free)
end
local first = redis.call('zrange', KEYS[3], 0, 0, 'withscores')
if first[2] then
  return {0, math.max(0, tonumber(first[2]) - now)}
end
return {0, -1}
