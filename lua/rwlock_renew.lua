-- rwlock_renew: the watchdog for read-write holds; extend the lock's lease, the
-- owner's entry in the readers ZSET and its own read-hold keys, many owners in one
-- call.  The lock is never shortened: other owners' holds may need it longer.
-- KEYS     for each owner: the lock, HASH { mode, <owner>: read holds,
--          <owner>:write: write holds } (N), then the readers ZSET
--          (distlock_rwlock_readers:{N}), then the owner's read-hold keys
--          {N}:<owner>:rwlock_timeout:1 .. :k (any of them may be missing; an
--          owner may also pass the lock alone)
-- ARGV[1]  lease in ms
-- ARGV     then for each owner: the owner, and its number of keys (1, or 2 + k)
-- Reply    one integer per owner: 1 renewed, 0 it holds nothing any more (also when
--          its lock or readers are of another type: nothing is changed for it)
--#include prelude_batch.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
return for_each_entry(function(owner, k, nkeys)
  local lock = KEYS[k]
  local reads = redis.call('hexists', lock, owner) == 1
  if not reads and redis.call('hexists', lock, owner .. ':write') == 0 then
    return false
  end
  -- the readers are read before the lock is written (prelude_guard)
  local readers = nkeys >= 2 and reads and KEYS[k + 1]
  local score = readers and redis.call('zscore', readers, owner)
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
  if readers then
    if not score or tonumber(score) < now + lease then
      redis.call('zadd', readers, now + lease, owner)
    end
    if redis.call('pttl', readers) < lease then
      redis.call('pexpire', readers, lease)
    end
  end
  for i = k + 2, k + nkeys - 1 do
    if redis.call('exists', KEYS[i]) == 1 then
      redis.call('pexpire', KEYS[i], lease)
    end
  end
  return true
end)
