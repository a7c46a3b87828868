-- mutex_renew: the watchdog; extend the lease of many locks in one call.
-- KEYS[i]    a lock: HASH { <owner>: hold count }                 (N of lock i)
-- ARGV[1]    lease in ms
-- ARGV[i+1]  the owner whose hold on KEYS[i] is renewed
-- Reply      array, one integer per lock: 1 renewed, 0 the owner no longer holds it
local renewed = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
