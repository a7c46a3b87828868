-- rwlock_wrlock: take one write hold of the read-write lock, or say how long to wait.
-- A taken write lock (0 -> 1) draws a new fencing token.  A writer that waits on a
-- writer-preferring lock enters the waiting writers ZSET, which keeps new readers out;
-- its process pushes its deadline forward (waiter_renew), so a writer that died stops
-- blocking readers within one window.
-- KEYS[1]  the lock: HASH { mode, <owner>: read holds,
--          <owner>:write: write holds }                           (N)
-- KEYS[2]  live readers: ZSET owner -> end of its lease, server ms (distlock_rwlock_readers:{N})
-- KEYS[3]  waiting writers: ZSET owner -> deadline, server ms     (distlock_rwlock_writers:{N})
-- KEYS[4]  release channel                                        (redisson_rwlock:{N})
-- KEYS[5]  fencing counter                                        (redisson_lock_token:{N})
-- ARGV[1]  lease in ms
-- ARGV[2]  owner
-- ARGV[3]  read holds the owner believes it has
-- ARGV[4]  write holds the owner believes it has
-- ARGV[5]  'try'; 'wait'; or 'prefer': wait, and be a waiting writer while refused
-- ARGV[6]  waiting writer window in ms
-- ARGV[7]  publish command
-- ARGV[8]  the counter's time to live in ms when a new hold draws a token (the
--          lease plus DISTLOCK_KEY_GRACE_MS), '0': for ever
-- Reply    {1, holds, token}       taken; holds is the owner's write holds now
--          {0, wait_ms}            held by others; try again within wait_ms or on a
--                                  message (-1: the lock has no expiry)
--          {-1, reads, writes, token}  the owner's counts differ from ARGV[3..4]; nothing
--                                  changed (token: the counter's value)
--          {-2}                    the owner holds read holds only: no upgrade
-- The lock, the readers and the waiting writers are read before anything is
-- written, and the counter is read (reentry) or drawn (a new hold) before the
-- lock is written (prelude_guard).
-- Types    hash zset zset - string
--#replicas
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_token.lua
--#include prelude_readers.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local wfield = ARGV[2] .. ':write'

local mode, reads, writes = live_holds(now, KEYS[1], KEYS[2], KEYS[3], KEYS[4],
                                       ARGV[7], ARGV[2], KEYS[5], 'string')
if reads ~= tonumber(ARGV[3]) or writes ~= tonumber(ARGV[4]) then
  return {-1, reads, writes, fencing_token(KEYS[5], false)}
end

if writes > 0 then
  local token = fencing_token(KEYS[5], false)
  writes = redis.call('hincrby', KEYS[1], wfield, 1)
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
  return {1, writes, token}
end
if reads > 0 then
  return {-2}
end
if not mode then
  local token = fencing_token(KEYS[5], true, ARGV[8])
  redis.call('del', KEYS[2])
  redis.call('hset', KEYS[1], 'mode', 'write', wfield, 1)
  redis.call('pexpire', KEYS[1], lease)
  redis.call('zrem', KEYS[3], ARGV[2])
  return {1, 1, token}
end

if ARGV[5] == 'prefer' then
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[6]), ARGV[2])
end
local wait = redis.call('pttl', KEYS[1])
return {0, wait >= 0 and wait or -1}
