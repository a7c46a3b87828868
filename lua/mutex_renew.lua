-- mutex_renew: the watchdog; extend the lease of many mutex holds in one call.
-- KEYS     for each hold, its keys: its lock, HASH { <owner>: hold count }     (N)
--          and for a robust mutex its record too, HASH       (distlock_robust:{N})
-- ARGV[1]  lease in ms
-- ARGV     then for each hold: its owner, and its number of keys (1, or 2: robust)
-- Reply    one integer per hold: 1 renewed, 0 the owner no longer holds it (also
--          when its key is no lock any more)
-- A robust record lives its own keep (the lease plus the grace, set when it was
-- taken: see prelude_robust) past each renewal, so a hold longer than the grace
-- keeps it.
--#include prelude_batch.lua
return for_each_entry(function(owner, k, nkeys)
  if redis.call('hexists', KEYS[k], owner) == 1 then
    local keep = nkeys > 1 and redis.call('hget', KEYS[k + 1], 'keep')
    redis.call('pexpire', KEYS[k], ARGV[1])
    if keep and keep ~= '0' then
      redis.call('pexpire', KEYS[k + 1], keep)
    end
    return true
  end
  return false
end)
