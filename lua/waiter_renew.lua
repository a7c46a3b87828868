-- waiter_renew: keep live waiters' queue entries from being purged.  A waiter's
-- deadline is the server's clock plus a short window; its process pushes it
-- forward while alive, so a dead waiter is dropped within one window.
-- KEYS     for each waiter either one key, the deadline ZSET of a waiting writer
--          { owner: deadline ms } (distlock_rwlock_writers:{N}) or of a plain mutex's
--          registered waiter (distlock_mutex_waiters:{N}, prelude_wake), or four keys, a
--          fair mutex's: its deadline ZSET (redisson_lock_timeout:{N}), wait queue
--          (redisson_lock_queue:{N}), distlock waiters' marks
--          (distlock_fair_waiters:{N}) and release channel (redisson_lock__channel:{N})
-- ARGV[1]  window in ms
-- ARGV     then for each waiter: its owner, and its number of keys (1 or 4)
-- Reply    one integer per waiter: 1 pushed forward, 0 no longer queued.  A fair
--          waiter no longer queued (purged while its process could not renew it,
--          or removed by hand) is told on its own channel, in both pub/sub kinds
--          since the script does not know which one its process listens to, so
--          that it queues again at once rather than at its next bounded retry.
--          A fair waiter's deadline is set as fair_lock sets it (prelude_waiters).
--          A fair waiter whose keys are of another type is told too, changing
--          nothing (prelude_guard): its next try fails and says which key.
-- The fair waiters of one lock are renewed together, in a few commands whatever
-- their number (keep_places; a queue with Redisson waiters in it is read whole
-- once, to move those behind ours: move_redisson_runs), and each such lock is
-- looked after on the way: its
-- dead waiters are purged (a waiter behind others does not try again on its own
-- to find a dead head), and a head that this purge made is told; so is a head
-- that is one of the call's waiters, whose try then finds out what no message
-- may have said (a holder whose lease ran out, a purge by a Redisson client).
--#include prelude_guard.lua
--#include prelude_batch.lua
--#include prelude_waiters.lua
--#include prelude_places.lua
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])

-- Tells owner on its own channel (chan .. ':' .. owner), both pub/sub kinds.
local function tell(chan, owner)
  chan = chan .. ':' .. owner
  redis.call('publish', chan, '0')
  redis.pcall('spublish', chan, '0')
end

-- One fair lock's waiters (g.owners, of entries g.entries); the result of each
-- entry into kept.  Fails (a key of another type) before it writes anything.
local function renew_lock(k, g, kept)
  local was = redis.call('lindex', KEYS[k + 1], 0)
  drop_dead_waiters(now, KEYS[k + 1], KEYS[k], KEYS[k + 2])
  local head = redis.call('lindex', KEYS[k + 1], 0)
  local moved = keep_places(now, window, KEYS[k], KEYS[k + 2], g.owners, head)
  local gone, by = {}, {}
  for i = 1, #g.owners do
    kept[g.entries[i]] = moved[i] ~= false
    if moved[i] then
      by[g.owners[i]] = moved[i]
    else
      gone[#gone + 1] = g.owners[i]
    end
  end
  move_redisson_runs(now, KEYS[k + 1], KEYS[k], KEYS[k + 2], by)
  if #gone > 0 then
    -- no mark without an entry: the marks count distlock's entries
    redis.call('zrem', KEYS[k + 2], unpack(gone))
    for i = 1, #gone do
      tell(KEYS[k + 3], gone[i])
    end
  end
  if head and (head ~= was or moved[g.index[head]]) then
    tell(KEYS[k + 3], head)
  end
end

-- Group the fair waiters by lock (their first key), in order of first sight.
local groups, order, kept, k = {}, {}, {}, 1
for e = 1, (#ARGV - 1) / 2 do
  local owner, nkeys = ARGV[2 * e], tonumber(ARGV[2 * e + 1])
  if nkeys == 4 then
    local g = groups[KEYS[k]]
    if not g then
      g = { k = k, owners = {}, entries = {}, index = {} }
      groups[KEYS[k]] = g
      order[#order + 1] = g
    end
    g.owners[#g.owners + 1] = owner
    g.entries[#g.entries + 1] = e
    g.index[owner] = #g.owners
  end
  k = k + nkeys
end
for _, g in ipairs(order) do
  local ok, err = pcall(renew_lock, g.k, g, kept)
  if not ok then
    if not is_wrong_type(err) then
      error(tostring(err):match('^[A-Z]+ ') and {err = err} or err, 0)
    end
    for i = 1, #g.owners do
      kept[g.entries[i]] = false
      tell(KEYS[g.k + 3], g.owners[i])
    end
  end
end

local e = 0
return for_each_entry(function(owner, k, nkeys)
  e = e + 1
  if nkeys == 4 then
    return kept[e]
  end
  -- a negative score is no deadline: a plain mutex holder's mark (prelude_wake),
  -- left by the take that ended this wait
  local score = redis.call('zscore', KEYS[k], owner)
  if score and tonumber(score) >= 0 then
    redis.call('zadd', KEYS[k], now + window, owner)
    -- a ZSET that expires (a plain mutex's waiters) outlives its waiters' windows
    local pttl = redis.call('pttl', KEYS[k])
    if pttl >= 0 and pttl < window then
      redis.call('pexpire', KEYS[k], window)
    end
    return true
  end
  return false
end)
