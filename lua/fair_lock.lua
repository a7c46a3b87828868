-- fair_lock: take the fair (FIFO) lock, or join its queue and say how long to wait.
-- The queue is shared with Redisson's RFairLock; how both clients read its deadlines,
-- and how a distlock waiter's deadline survives Redisson's arithmetic: see
-- prelude_waiters.  A live waiter's process pushes its deadline forward
-- (waiter_renew), so one that died is purged within its window.  Its work is
-- O(log W) in the queue's length W: it reads the head and its own entry only.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  wait queue: LIST of owners, head first                 (redisson_lock_queue:{N})
-- KEYS[3]  waiter deadlines: ZSET owner -> ms                     (redisson_lock_timeout:{N})
-- KEYS[4]  fencing counter                                        (redisson_lock_token:{N})
-- KEYS[5]  release channel (N's; a waiter's own channel is this name with
--          ':<owner>' appended: see fair_unlock)
-- KEYS[6]  distlock's waiters: ZSET owner -> end of window, server ms
--                                                                 (distlock_fair_waiters:{N})
-- KEYS[7]  a robust mutex only: its record, HASH (prelude_robust)  (distlock_robust:{N})
-- ARGV[1]  lease in ms
-- ARGV[2]  owner
-- ARGV[3]  waiter window in ms
-- ARGV[4]  'try': never join the queue; 'wait': join it (once) when the lock is taken
-- ARGV[5]  publish command: 'publish', 'spublish' or 'spublish+publish' (notify)
-- ARGV[6]  time to live in ms of the counter and the record, set when they are
--          written: the lease plus DISTLOCK_KEY_GRACE_MS; '0': kept for ever
-- ARGV[7]  'fresh': the caller holds none of the lock (its client says so), so that
--          a hold found in its name is a grant whose message it missed
--          (prelude_grant): counted once, with the token drawn for it; '' else
-- Reply    {1, holds, token}  taken (holds: the owner's count after this call)
--          {1, 1, token, dead}  robust: taken, but the last holder, dead, did not
--                             release it cleanly (EOWNERDEAD)
--          {2, 0}             robust: not recoverable, not taken (nor queued)
--          {0, wait_ms, seen} not taken; wait at most this long before trying again
--                             (the lock's lease when the caller heads the queue, else
--                             BEHIND_WINDOWS windows: a waiter behind others is
--                             told when its turn comes); seen: the fencing
--                             counter then, so that the caller takes no grant
--                             drawn before this answer (prelude_grant)
-- What can fail comes first (prelude_guard): the lock and the marks are read at
-- once, the queue and the deadlines before anybody is dropped or queued, and the
-- counter is read (reentry) or drawn (a new hold) before the lock is written; it
-- is checked too before a dead waiter is dropped.
-- Types    hash list zset string - zset hash
--#replicas
--#include prelude_guard.lua
--#include prelude_publish.lua
--#include prelude_token.lua
--#include prelude_waiters.lua
--#include prelude_robust.lua
--#include prelude_take.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[3])
local mine = redis.call('hexists', KEYS[1], ARGV[2]) == 1
local nr, dead = false, false
if KEYS[7] then
  local r = redis.call('hmget', KEYS[7], 'held', 'dead', 'nr')
  nr, dead = r[3] ~= false, r[1] or r[2]
end
drop_dead_waiters(now, KEYS[2], KEYS[3], KEYS[6], {KEYS[4], 'string'})

if mine then
  local token = fencing_token(KEYS[4], false)
  -- a grant claimed (not robust: a robust release grants nothing)
  if not KEYS[7] and ARGV[7] == 'fresh' and redis.call('hget', KEYS[1], ARGV[2]) == '1' then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, 1, token}
  end
  return {1, write_hold(KEYS[1], ARGV[2], ARGV[1], KEYS[7], ARGV[6], false), token}
end

local head = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (not head or head == ARGV[2]) then
  if nr then
    -- refused, and not queued (a queued caller leaves with fair_cancel, which
    -- tells the next in line); the mark lives on while lockers come by
    if ARGV[6] ~= '0' then
      redis.call('pexpire', KEYS[7], ARGV[6])
    end
    return {2, 0}
  end
  local token = fencing_token(KEYS[4], true, ARGV[6])
  if head then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    -- a Redisson waiter next in line sleeps on a bound reckoned behind us:
    -- tell it to reckon again against our lease.  A distlock one sleeps
    -- until our release tells it.
    local next_head = redis.call('lindex', KEYS[2], 0)
    if next_head and not redis.call('zscore', KEYS[6], next_head) then
      notify(ARGV[5], KEYS[5] .. ':' .. next_head, '0')
    end
  end
  -- (not queued, the owner has no deadline: the purge and the queue keep
  -- an entry and its deadline together)
  redis.call('zrem', KEYS[6], ARGV[2])
  write_hold(KEYS[1], ARGV[2], ARGV[1], KEYS[7], ARGV[6], true, dead)
  if dead then
    return {1, 1, token, dead}
  end
  return {1, 1, token}
end

local pttl = redis.call('pttl', KEYS[1])
-- not taken: the counter goes with the answer.  A grant to this caller
-- drew a token no greater (prelude_grant), and this try found it gone (its
-- hold ended with its lease while the caller did not listen): its message,
-- read after this answer, must not pass for a grant to this wait.
local seen = tonumber(redis.call('get', KEYS[4]) or '0') or 0
if ARGV[4] == 'try' then
  return {0, pttl > 0 and pttl or 0, seen}
end

-- join the queue unless queued: the renewal keeps our place (see prelude_waiters)
if not redis.call('zscore', KEYS[3], ARGV[2]) then
  -- behind every Redisson waiter queued, we owe each a wait: the entries
  -- less distlock's live marks.  The ZSETs are read before the first write.
  local owed = (redis.call('zcard', KEYS[3]) -
                redis.call('zcount', KEYS[6], '(' .. now, '+inf')) * REDISSON_WAIT
  if owed < 0 then
    owed = 0
  end
  redis.call('zadd', KEYS[6], now + window, ARGV[2])
  redis.call('zadd', KEYS[3], now + window + owed, ARGV[2])
  redis.call('rpush', KEYS[2], ARGV[2])
  -- the marks outlive every deadline, so that no entry loses its mark
  if redis.call('pttl', KEYS[6]) < window + owed then
    redis.call('pexpire', KEYS[6], window + owed)
  end
  head = head or ARGV[2]
end
if head == ARGV[2] then
  if pttl >= 0 then
    return {0, pttl, seen}
  end
  return {0, window, seen}
end
-- behind others: our release's message wakes us once we head the queue, or
-- the renewal once the lock is free and nobody told us (waiter_renew), which
-- also purges a dead head; this bound is only the last resort
return {0, window * BEHIND_WINDOWS, seen}
