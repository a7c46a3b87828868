-- mutex_lock: take the exclusive lock for one owner, or say how long it stays taken.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  fencing counter: STRING                                (redisson_lock_token:{N})
-- KEYS[3]  registered waiters: ZSET owner -> end of its window, server ms, or -1
--          for the holder's mark (prelude_wake)                   (distlock_mutex_waiters:{N})
-- KEYS[4]  a robust mutex only: its record, HASH (prelude_robust)  (distlock_robust:{N})
-- ARGV[1]  lease in ms, set on every success
-- ARGV[2]  owner, "<client id>:<thread n>"
-- ARGV[3]  '0' for a try; else a waiter's window in ms: refused, the owner registers
--          as a waiter
-- ARGV[4]  time to live in ms of the counter and the record, set when they are
--          written: the lease plus DISTLOCK_KEY_GRACE_MS; '0': kept for ever
-- Reply    {1, holds, token}  taken again (reentry); holds is the owner's count now
--          {1, 1, token[, 1]} taken fresh; the 1 when the owner left its mark
--                             among the registered waiters, for its release
--          {0, pttl, wakes}   held by another owner; pttl is its remaining lease;
--                             wakes is 1 when its release will wake a registered
--                             waiter on its own channel (the holder left its mark),
--                             0 when a waiter must listen on N's channel
--          {1, 1, token, mark, dead}  robust: taken fresh, but the last holder, dead,
--                             did not release it cleanly (EOWNERDEAD); mark 0 or 1
--          {2, 0}             robust: not recoverable, not taken (nor registered)
-- A fresh hold taken while waiters are registered leaves the owner's mark (its own
-- entry as a waiter, if any, becomes the mark).
-- What can fail comes first (prelude_guard): the lock, the waiters and the record
-- are read before anything is written, the counter is read (reentry) or drawn (a
-- new hold) before the lock is written.
-- Types    hash string zset hash
--#replicas
--#include prelude_token.lua
--#include prelude_robust.lua
--#include prelude_take.lua
if redis.call('hget', KEYS[1], ARGV[2]) then
  local token = fencing_token(KEYS[2], false)
  return {1, write_hold(KEYS[1], ARGV[2], ARGV[1], KEYS[4], ARGV[4], false), token}
end
-- one call tells the usual case, a free lock and nobody registered (0)
local n = redis.call('exists', KEYS[1], KEYS[3])
if n == 0 or (n == 1 and redis.call('exists', KEYS[1]) == 0) then
  -- with waiters registered, the ZSET's type is read before any write
  local waiting = n == 1 and #redis.call('zrange', KEYS[3], '0', '0') > 0
  local dead = false
  if KEYS[4] then
    local r = redis.call('hmget', KEYS[4], 'held', 'dead', 'nr')
    if r[3] then
      -- refused, not registered; the mark lives on while lockers come by
      if ARGV[4] ~= '0' then
        redis.call('pexpire', KEYS[4], ARGV[4])
      end
      return {2, 0}
    end
    dead = r[1] or r[2]
  end
  local token = fencing_token(KEYS[2], true, ARGV[4])
  write_hold(KEYS[1], ARGV[2], ARGV[1], KEYS[4], ARGV[4], true, dead)
  if waiting then
    redis.call('zremrangebyscore', KEYS[3], '-1', '-1')
    redis.call('zadd', KEYS[3], '-1', ARGV[2])
  end
  if dead then
    return {1, 1, token, waiting and 1 or 0, dead}
  end
  if not waiting then
    return {1, 1, token}
  end
  return {1, 1, token, 1}
end
if ARGV[3] == '0' then
  return {0, redis.call('pttl', KEYS[1])}
end
-- whether the holder left its mark (prelude_wake's holder_wakes, written out:
-- a prelude's function costs every call of the script a closure)
local wakes = 0
local holders = redis.call('hkeys', KEYS[1])
if #holders == 1 and tonumber(redis.call('zscore', KEYS[3], holders[1])) == -1 then
  wakes = 1
end
local t = redis.call('time')
local window = tonumber(ARGV[3])
redis.call('zadd', KEYS[3], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) +
           window, ARGV[2])
if redis.call('pttl', KEYS[3]) < window then
  redis.call('pexpire', KEYS[3], window)
end
return {0, redis.call('pttl', KEYS[1]), wakes}
