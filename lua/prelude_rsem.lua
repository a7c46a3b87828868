-- prelude_rsem: joined by the build in front of the Redisson-compatible
-- semaphore's scripts ('--#include prelude_rsem.lua', after
-- prelude_number.lua, whose number_in it uses).

-- The permits at key, a number; a semaphore that does not exist yet is made
-- first, with initial (a number as a string).
local function permits(key, initial)
  local v = redis.call('get', key)
  if v then
    return number_in(key, v)
  end
  redis.call('set', key, initial)
  return tonumber(initial)
end
