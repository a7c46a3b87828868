-- rwlock_wrunlock: give back one write hold.  At the last one, an owner that still
-- holds read holds keeps the lock in read mode (a downgrade) and the others are told
-- at once, so blocked readers enter with it (Redisson publishes nothing there);
-- otherwise the lock is deleted.  Both publish '1': every waiter wakes, since all
-- readers may enter together.
-- KEYS[1]  the lock: HASH { mode, <owner>: read holds,
--          <owner>:write: write holds }                           (N)
-- KEYS[2]  live readers: ZSET owner -> end of its lease, server ms (distlock_rwlock_readers:{N})
-- KEYS[3]  waiting writers: ZSET owner -> deadline, server ms     (distlock_rwlock_writers:{N})
-- KEYS[4]  release channel                                        (redisson_rwlock:{N})
-- ARGV[1]  owner
-- ARGV[2]  read holds the owner believes it has
-- ARGV[3]  write holds the owner believes it has (> 0)
-- ARGV[4]  publish command
-- Reply    {n, woken}              n: the owner's write holds left; woken: subscribers the
--                                  release message reached (0 when none was sent)
--          {-1, reads, writes}     the owner's counts differ from ARGV[2..3]; nothing
--                                  changed (writes 0: its write hold is gone, lost)
-- The lock, the readers and the waiting writers are read before anything is
-- written (prelude_guard).
-- Types    hash zset zset -
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_readers.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wfield = ARGV[1] .. ':write'

local _, reads, writes = live_holds(now, KEYS[1], KEYS[2], KEYS[3], KEYS[4],
                                    ARGV[4], ARGV[1])
if reads ~= tonumber(ARGV[2]) or writes ~= tonumber(ARGV[3]) or writes == 0 then
  return {-1, reads, writes}
end
writes = redis.call('hincrby', KEYS[1], wfield, -1)
if writes > 0 then
  return {writes, 0}
end
redis.call('hdel', KEYS[1], wfield)
if redis.call('hlen', KEYS[1]) <= 1 then
  redis.call('del', KEYS[1], KEYS[2])
  return {0, notify(ARGV[4], KEYS[4], '1')}
end
redis.call('hset', KEYS[1], 'mode', 'read')
local score = redis.call('zscore', KEYS[2], ARGV[1])
if score and redis.call('pttl', KEYS[1]) < tonumber(score) - now then
  redis.call('pexpire', KEYS[1], tonumber(score) - now)
end
return {0, notify(ARGV[4], KEYS[4], '1')}
