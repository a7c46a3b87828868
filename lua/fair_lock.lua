-- fair_lock: take the fair (FIFO) lock, or join its queue and say how long to wait.
-- The queue and the deadline ZSET are shared with Redisson's RFairLock, so both
-- clients must read every deadline alike.  Redisson's rule: a waiter is gone when it
-- heads the queue and its deadline has passed; a Redisson waiter's deadline is the
-- one ahead of it plus its wait time, and a Redisson waiter that takes the lock (or
-- gives up) takes its wait time off the deadlines behind it.  A distlock waiter's
-- deadline is the server's clock plus a short window, plus Redisson's default wait
-- time (5 min) for each Redisson waiter ahead of it, which that waiter will take
-- off; its process pushes it forward while it lives (waiter_renew), so a waiter that
-- died is purged within the window once it heads the queue.  Its own mark in
-- distlock_fair_waiters:{N} tells distlock waiters from Redisson's.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  wait queue: LIST of owners, head first                 (redisson_lock_queue:{N})
-- KEYS[3]  waiter deadlines: ZSET owner -> ms                     (redisson_lock_timeout:{N})
-- KEYS[4]  fencing counter                                        (redisson_lock_token:{N})
-- KEYS[5]  release channel (N's; a waiter's own channel is this name with
--          ':<owner>' appended: see fair_unlock)
-- KEYS[6]  distlock's waiters: ZSET owner -> end of window, server ms
--                                                                 (distlock_fair_waiters:{N})
-- ARGV[1]  lease in ms
-- ARGV[2]  owner
-- ARGV[3]  waiter window in ms
-- ARGV[4]  'try': never join the queue; 'wait': join it (once) when the lock is taken
-- ARGV[5]  publish command: 'publish', or 'spublish' on a cluster
-- Reply    {1, holds, token}  taken (holds: the owner's count after this call)
--          {0, wait_ms}       not taken; wait at most this long before trying again
--                             (the lock's lease when the caller heads the queue, else
--                             the sooner of that and the head's deadline, when a
--                             dead head is purged)
local REDISSON_WAIT = 300000   -- Redisson's default fairLockWaitTimeout, ms
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[3])

-- purge from the head: Redisson's rule, and a distlock waiter whose window ended
-- (its deadline can be later when a Redisson waiter ahead left without taking its
-- wait time off); an entry without a deadline would break Redisson's scripts
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then
    break
  end
  local score = redis.call('zscore', KEYS[3], head)
  local mark = redis.call('zscore', KEYS[6], head)
  if score and tonumber(score) > now and not (mark and tonumber(mark) <= now) then
    break
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
end
redis.call('zremrangebyscore', KEYS[6], '-inf', now)

if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, holds, tonumber(redis.call('get', KEYS[4]) or '0')}
end

local head = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (not head or head == ARGV[2]) then
  if head then
    redis.call('lpop', KEYS[2])
    -- the next in line is now the head: it sleeps on a bound reckoned
    -- behind us, so tell it to reckon again against our lease
    local next_head = redis.call('lindex', KEYS[2], 0)
    if next_head then
      redis.call(ARGV[5], KEYS[5] .. ':' .. next_head, '0')
    end
  end
  redis.call('zrem', KEYS[3], ARGV[2])
  redis.call('zrem', KEYS[6], ARGV[2])
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, 1, redis.call('incr', KEYS[4])}
end

local pttl = redis.call('pttl', KEYS[1])
if ARGV[4] == 'try' then
  return {0, pttl > 0 and pttl or 0}
end

-- join the queue (once), then set our deadlines; Redisson waiters queued behind us
-- reckon theirs from ours, so they move with it, up to the next distlock waiter
local q = redis.call('lrange', KEYS[2], 0, -1)
local pos, ahead = nil, 0
for i = 1, #q do
  if q[i] == ARGV[2] then
    pos = i
    break
  end
  if not redis.call('zscore', KEYS[6], q[i]) then
    ahead = ahead + 1
  end
end
if not pos then
  redis.call('rpush', KEYS[2], ARGV[2])
  q[#q + 1] = ARGV[2]
  pos = #q
end
local deadline = now + window + ahead * REDISSON_WAIT
local old = redis.call('zscore', KEYS[3], ARGV[2])
redis.call('zadd', KEYS[3], deadline, ARGV[2])
if old and tonumber(old) ~= deadline then
  for i = pos + 1, #q do
    if redis.call('zscore', KEYS[6], q[i]) then
      break
    end
    if redis.call('zscore', KEYS[3], q[i]) then
      redis.call('zincrby', KEYS[3], deadline - tonumber(old), q[i])
    end
  end
end
redis.call('zadd', KEYS[6], now + window, ARGV[2])
if redis.call('pttl', KEYS[6]) < window then
  redis.call('pexpire', KEYS[6], window)
end

head = q[1]
if head == ARGV[2] then
  if pttl >= 0 then
    return {0, pttl}
  end
  return {0, window}
end
-- behind others: until the head's deadline (a dead head is purged then), or the
-- lock's lease end, after which the head takes it and we may be next in line
local wait = tonumber(redis.call('zscore', KEYS[3], head)) - now
local mark = redis.call('zscore', KEYS[6], head)
if mark and tonumber(mark) - now < wait then
  wait = tonumber(mark) - now
end
if pttl >= 0 and pttl < wait then
  wait = pttl
end
return {0, wait}
