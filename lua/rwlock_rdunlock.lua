-- rwlock_rdunlock: give back one read hold.  While other holders remain, the lock
-- lives as long as the longest live one; the last one deletes the lock and tells
-- waiters: '0' wakes one waiter per process (Redisson's message), '1' all of them,
-- sent instead when writers wait, so that a writer is woken rather than a reader
-- the preference keeps out.
-- KEYS[1]  the lock: HASH { mode, <owner>: read holds,
--          <owner>:write: write holds }                           (N)
-- KEYS[2]  live readers: ZSET owner -> end of its lease, server ms (distlock_rwlock_readers:{N})
-- KEYS[3]  waiting writers: ZSET owner -> deadline, server ms     (distlock_rwlock_writers:{N})
-- KEYS[4]  release channel                                        (redisson_rwlock:{N})
-- KEYS[5]  the released hold's timeout key            ({N}:<owner>:rwlock_timeout:<ARGV[2]>)
-- ARGV[1]  owner
-- ARGV[2]  read holds the owner believes it has (> 0)
-- ARGV[3]  write holds the owner believes it has
-- ARGV[4]  publish command
-- Reply    {n, woken}              n: the owner's read holds left; woken: subscribers the
--                                  release message reached (0 when none was sent)
--          {-1, reads, writes}     the owner's counts differ from ARGV[2..3]; nothing
--                                  changed (reads 0: its holds are gone, lost)
-- Other owners' timeout keys are never read: their liveness is the readers ZSET, so
-- every key touched is in KEYS.  (Redisson's own unlock reads them instead; distlock
-- keeps them, renewed, for it.)
-- The lock, the readers and the waiting writers are read before anything is
-- written (prelude_guard); the hold's timeout key is deleted, whatever it is.
-- Types    hash zset zset - -
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_readers.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local mode, reads, writes = live_holds(now, KEYS[1], KEYS[2], KEYS[3], KEYS[4],
                                       ARGV[4], ARGV[1])
if reads ~= tonumber(ARGV[2]) or writes ~= tonumber(ARGV[3]) or reads == 0 then
  return {-1, reads, writes}
end
redis.call('del', KEYS[5])
reads = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if reads == 0 then
  redis.call('hdel', KEYS[1], ARGV[1])
  redis.call('zrem', KEYS[2], ARGV[1])
end
if mode ~= 'read' then
  return {reads, 0}        -- the owner still holds the write lock
end

if redis.call('hlen', KEYS[1]) > 1 then
  -- Others still read: the lock lives until the last of their leases ends.  A
  -- holder not in the readers ZSET (a Redisson client) renews the lock itself, so
  -- then the expiry is left alone.
  local last, foreign = 0, false
  local fields = redis.call('hkeys', KEYS[1])
  for i = 1, #fields do
    if fields[i] ~= 'mode' then
      local score = redis.call('zscore', KEYS[2], fields[i])
      if not score then
        foreign = true
        break
      end
      if tonumber(score) > last then
        last = tonumber(score)
      end
    end
  end
  if not foreign and last > now then
    redis.call('pexpire', KEYS[1], last - now)
    redis.call('pexpire', KEYS[2], last - now)
  end
  return {reads, 0}
end

redis.call('del', KEYS[1], KEYS[2])
local msg = redis.call('exists', KEYS[3]) == 1 and '1' or '0'
return {0, notify(ARGV[4], KEYS[4], msg)}
