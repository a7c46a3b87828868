-- rwlock_renew: the watchdog for read-write holds; extend the lock's lease and
-- the owner's own read-hold keys, many owners in one call.
-- KEYS     for each owner: the lock, HASH { mode, <owner>: read holds,
--          <owner>:write: write holds } (N), then the owner's read-hold keys
--          {N}:<owner>:rwlock_timeout:1 .. :k
-- ARGV[1]  lease in ms
-- ARGV     then for each owner: the owner, and its number of keys (1 + k)
-- Reply    one integer per owner: 1 renewed, 0 it holds nothing any more
local lease = tonumber(ARGV[1])
local renewed, k = {}, 1
for e = 1, (#ARGV - 1) / 2 do
  local owner, nkeys = ARGV[2 * e], tonumber(ARGV[2 * e + 1])
  local lock = KEYS[k]
  if redis.call('hexists', lock, owner) == 1 or
     redis.call('hexists', lock, owner .. ':write') == 1 then
    -- never shorten: other readers' holds may need the lock to live longer
    if redis.call('pttl', lock) < lease then
      redis.call('pexpire', lock, lease)
    end
    for i = k + 1, k + nkeys - 1 do
      if redis.call('exists', KEYS[i]) == 1 then
        redis.call('pexpire', KEYS[i], lease)
      end
    end
    renewed[e] = 1
  else
    renewed[e] = 0
  end
  k = k + nkeys
end
return renewed
