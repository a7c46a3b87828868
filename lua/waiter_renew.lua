-- waiter_renew: keep live waiters' queue entries from being purged.  A waiter's
-- deadline is the server's clock plus a short window; its process pushes it
-- forward while alive, so a dead waiter is dropped within one window.
-- KEYS     for each waiter either one key, the deadline ZSET of a waiting writer
--          { owner: deadline ms } (distlock_rwlock_writers:{N}), or four keys, a
--          fair mutex's (see fair_lock): its deadline ZSET (redisson_lock_timeout:{N}),
--          wait queue (redisson_lock_queue:{N}), distlock waiters' ZSET
--          (distlock_fair_waiters:{N}) and release channel (redisson_lock__channel:{N})
-- ARGV[1]  window in ms
-- ARGV     then for each waiter: its owner, and its number of keys (1 or 4)
-- Reply    one integer per waiter: 1 pushed forward, 0 no longer queued.  A fair
--          waiter no longer queued (purged while its process could not renew it,
--          or removed by hand) is told on its own channel, in both pub/sub kinds
--          since the script does not know which one its process listens to, so
--          that it queues again at once rather than at its next bounded retry.
local REDISSON_WAIT = 300000   -- Redisson's default fairLockWaitTimeout, ms
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])

-- A fair waiter: as fair_lock sets it, Redisson's wait time for each Redisson
-- waiter ahead (those unmarked), and the Redisson waiters behind up to the next
-- distlock waiter moved along.
local function renew_fair(tset, queue, marks, owner)
  local q = redis.call('lrange', queue, 0, -1)
  local pos, ahead = nil, 0
  for i = 1, #q do
    if q[i] == owner then
      pos = i
      break
    end
    if not redis.call('zscore', marks, q[i]) then
      ahead = ahead + 1
    end
  end
  if not pos then
    return 0
  end
  local deadline = now + window + ahead * REDISSON_WAIT
  local old = redis.call('zscore', tset, owner)
  redis.call('zadd', tset, deadline, owner)
  if old and tonumber(old) ~= deadline then
    for i = pos + 1, #q do
      if redis.call('zscore', marks, q[i]) then
        break
      end
      if redis.call('zscore', tset, q[i]) then
        redis.call('zincrby', tset, deadline - tonumber(old), q[i])
      end
    end
  end
  redis.call('zadd', marks, now + window, owner)
  if redis.call('pttl', marks) < window then
    redis.call('pexpire', marks, window)
  end
  return 1
end

local renewed, k = {}, 1
for e = 1, (#ARGV - 1) / 2 do
  local owner, nkeys = ARGV[2 * e], tonumber(ARGV[2 * e + 1])
  if nkeys == 4 then
    renewed[e] = renew_fair(KEYS[k], KEYS[k + 1], KEYS[k + 2], owner)
    if renewed[e] == 0 then
      local chan = KEYS[k + 3] .. ':' .. owner
      redis.call('publish', chan, '0')
      redis.pcall('spublish', chan, '0')
    end
  elseif redis.call('zscore', KEYS[k], owner) then
    redis.call('zadd', KEYS[k], now + window, owner)
    renewed[e] = 1
  else
    renewed[e] = 0
  end
  k = k + nkeys
end
return renewed
