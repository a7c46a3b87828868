-- mutex_probe: read one owner's standing on a lock, changing nothing.  Used after a
-- reply was lost, to learn whether the call that lost it took effect.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  fencing counter                                        (redisson_lock_token:{N})
-- KEYS[3]  a robust mutex only: its record, HASH (prelude_robust)  (distlock_robust:{N})
-- ARGV[1]  owner
-- Reply    {holds, pttl, token, dead, now}: holds is 0 when the owner has none; dead
--          is 1 when the record says the owner holds it owner-dead (its hold found
--          the last holder had not released it cleanly), 2 when the lock is not
--          recoverable, else 0; now is the server's clock in microseconds (TIME),
--          which tells how old a token is (a token is at least the clock at its
--          draw: prelude_token)
-- Types    hash string hash
--#include prelude_token.lua
local holds = redis.call('hget', KEYS[1], ARGV[1])
local token = fencing_token(KEYS[2], false)
local dead = 0
if KEYS[3] then
  local r = redis.call('hmget', KEYS[3], 'held', 'dead', 'nr')
  if r[3] then
    dead = 2
  elseif r[1] == ARGV[1] and r[2] then
    dead = 1
  end
end
local t = redis.call('time')
return {tonumber(holds or '0'), redis.call('pttl', KEYS[1]), token, dead,
        tonumber(t[1]) * 1000000 + tonumber(t[2])}
