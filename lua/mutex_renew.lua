-- mutex_renew: the watchdog; extend the lease of many mutex holds in one call.
-- KEYS     for each hold, one key: its lock, HASH { <owner>: hold count }     (N)
-- ARGV[1]  lease in ms
-- ARGV     then for each hold: its owner, and its number of keys (1)
-- Reply    one integer per hold: 1 renewed, 0 the owner no longer holds it (also
--          when its key is no lock any more)
--#include prelude_batch.lua
return for_each_entry(function(owner, k, nkeys)
  if redis.call('hexists', KEYS[k], owner) == 1 then
    redis.call('pexpire', KEYS[k], ARGV[1])
    return true
  end
  return false
end)
