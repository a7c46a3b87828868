-- mutex_renew: the watchdog; extend the lease of many mutex holds in one call.
-- KEYS     for each hold, one key: its lock, HASH { <owner>: hold count }     (N)
-- ARGV[1]  lease in ms
-- ARGV     then for each hold: its owner, and its number of keys (1)
-- Reply    one integer per hold: 1 renewed, 0 the owner no longer holds it
local renewed, k = {}, 1
for e = 1, (#ARGV - 1) / 2 do
  local owner, nkeys = ARGV[2 * e], tonumber(ARGV[2 * e + 1])
  if redis.call('hexists', KEYS[k], owner) == 1 then
    redis.call('pexpire', KEYS[k], ARGV[1])
    renewed[e] = 1
  else
    renewed[e] = 0
  end
  k = k + nkeys
end
return renewed
