-- rsem_acquire: take one permit of a Redisson-compatible semaphore (RSemaphore's
-- layout: the permit count in a plain string key).  Nothing records who took it.
-- KEYS[1]  the permits: STRING count                              (S)
-- ARGV[1]  permits of a semaphore that does not exist yet
-- Reply    1 taken, 0 none free
-- The count is read before it is written (prelude_guard).
-- Types    string
--#include prelude_number.lua
--#include prelude_rsem.lua
if permits(KEYS[1], ARGV[1]) >= 1 then
  redis.call('decrby', KEYS[1], 1)
  return 1
end
return 0
