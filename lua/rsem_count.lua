-- rsem_count: read, add to or set a Redisson-compatible semaphore's permits, telling
-- waiters as RSemaphore's release does (the count after the call, on redisson_sc:{S}).
-- KEYS[1]  the permits: STRING count                              (S)
-- KEYS[2]  channel                                                (redisson_sc:{S})
-- ARGV[1]  'get', 'add' (a post) or 'set'
-- ARGV[2]  the permits to add or set
-- ARGV[3]  permits of a semaphore that does not exist yet
-- ARGV[4]  the most permits allowed
-- ARGV[5]  publish command (see prelude_publish)
-- Reply    the permits after the call; -1 when 'add' would pass ARGV[4] (nothing
--          changed)
-- The count is read before it is written (prelude_guard).
-- Types    string -
--#include prelude_number.lua
--#include prelude_publish.lua
--#include prelude_rsem.lua
local v = permits(KEYS[1], ARGV[3])
local n = tonumber(ARGV[2])
if ARGV[1] == 'add' then
  if v + n > tonumber(ARGV[4]) then
    return -1
  end
  v = redis.call('incrby', KEYS[1], n)
elseif ARGV[1] == 'set' then
  redis.call('set', KEYS[1], n)
  v = n
else
  return v
end
if v > 0 then
  notify(ARGV[5], KEYS[2], tostring(v))
end
return v
