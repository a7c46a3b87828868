-- mutex_lock: take the exclusive lock for one owner, or say how long it stays taken.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  fencing counter: STRING                                (redisson_lock_token:{N})
-- ARGV[1]  lease in ms, set on every success
-- ARGV[2]  owner, "<client id>:<thread n>"
-- Reply    {1, holds, token}  taken; holds is the owner's count after this call
--          {0, pttl}          held by another owner; pttl is its remaining lease
-- What can fail comes first (prelude_guard): the lock is read before anything
-- is written, the counter is read (reentry) or drawn (a new hold) before the
-- lock is written.
-- Types    hash string
--#include prelude_token.lua
local holds = redis.call('hget', KEYS[1], ARGV[2])
if holds then
  local token = fencing_token(KEYS[2], false)
  holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, holds, token}
end
if redis.call('exists', KEYS[1]) == 0 then
  local token = fencing_token(KEYS[2], true)
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, 1, token}
end
return {0, redis.call('pttl', KEYS[1])}
