-- rwlock_rdlock: take one read hold of the read-write lock, or say how long to wait.
-- Readers share the lock; the write holder may read too.  Each read hold has its
-- own timeout key (Redisson's layout), and each reading owner has an entry in the
-- readers ZSET with the end of its longest lease, so that a reader that died stops
-- counting once its lease ends: every script drops such owners from the hash.
-- KEYS[1]  the lock: HASH { mode, <owner>: read holds,
--          <owner>:write: write holds }                           (N)
-- KEYS[2]  live readers: ZSET owner -> end of its lease, server ms (distlock_rwlock_readers:{N})
-- KEYS[3]  waiting writers: ZSET owner -> deadline, server ms     (distlock_rwlock_writers:{N})
-- KEYS[4]  release channel                                        (redisson_rwlock:{N})
-- KEYS[5]  the new hold's timeout key             ({N}:<owner>:rwlock_timeout:<ARGV[3] + 1>)
-- ARGV[1]  lease in ms
-- ARGV[2]  owner, "<client id>:<thread n>"
-- ARGV[3]  read holds the owner believes it has
-- ARGV[4]  write holds the owner believes it has
-- ARGV[5]  publish command: 'publish', 'spublish' or 'spublish+publish' (notify)
-- Reply    {1, holds}              taken; holds is the owner's read holds now
--          {0, wait_ms}            not taken: a writer holds it, or (new readers only)
--                                  a writer waits; try again within wait_ms or on a
--                                  message (-1: the lock has no expiry)
--          {-1, reads, writes}     the owner's counts in Redis differ from ARGV[3..4];
--                                  nothing changed
-- The lock, the readers and the waiting writers are read before anything is
-- written (prelude_guard); the hold's timeout key is set, whatever was there.
-- Types    hash zset zset - -
--#replicas
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_readers.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])

local mode, reads, writes = live_holds(now, KEYS[1], KEYS[2], KEYS[3], KEYS[4],
                                       ARGV[5], ARGV[2])
if reads ~= tonumber(ARGV[3]) or writes ~= tonumber(ARGV[4]) then
  return {-1, reads, writes}
end

local ok = (not mode) or mode == 'read' or (mode == 'write' and writes > 0)
local preferred = redis.call('exists', KEYS[3]) == 1
if ok and preferred and reads == 0 and writes == 0 then
  ok = false
end
if ok then
  if not mode then
    redis.call('del', KEYS[2])
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  reads = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[5], 1, 'px', lease)
  local pttl = redis.call('pttl', KEYS[1])
  if pttl < lease then
    redis.call('pexpire', KEYS[1], lease)
    pttl = lease
  end
  local score = redis.call('zscore', KEYS[2], ARGV[2])
  if not score or tonumber(score) < now + lease then
    redis.call('zadd', KEYS[2], now + lease, ARGV[2])
  end
  redis.call('pexpire', KEYS[2], pttl)
  return {1, reads}
end

local wait = redis.call('pttl', KEYS[1])
if wait == -2 then
  wait = -1
end
if preferred then
  local first = redis.call('zrange', KEYS[3], 0, 0, 'withscores')
  local left = tonumber(first[2]) - now
  if wait < 0 or left < wait then
    wait = left
  end
end
return {0, wait}
