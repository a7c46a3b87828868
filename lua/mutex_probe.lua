-- mutex_probe: read one owner's standing on a lock, changing nothing.  Used after a
-- reply was lost, to learn whether the call that lost it took effect.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  fencing counter                                        (redisson_lock_token:{N})
-- ARGV[1]  owner
-- Reply    {holds, pttl, token}: holds is 0 when the owner has none
-- Types    hash string
--#include prelude_token.lua
local holds = redis.call('hget', KEYS[1], ARGV[1])
local token = fencing_token(KEYS[2], false)
return {tonumber(holds or '0'), redis.call('pttl', KEYS[1]), token}
