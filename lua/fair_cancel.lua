-- fair_cancel: a waiter gives up (timeout, error): it leaves the queue at once, and
-- if it was the head of a free lock, the next waiter is told.  A waiter that was
-- granted the lock (prelude_grant) as it gave up passes the grant on: the lock goes
-- to the next distlock head, or is let go and the next head told, as a release
-- would, so that no lock is left held by a caller that will never unlock it.
-- KEYS[1]  the lock                                               (N)
-- KEYS[2]  wait queue: LIST of owners                             (redisson_lock_queue:{N})
-- KEYS[3]  waiter deadlines: ZSET                                 (redisson_lock_timeout:{N})
-- KEYS[4]  release channel (see fair_unlock for the head's own channel)
-- KEYS[5]  distlock's waiters: ZSET owner -> end of window       (distlock_fair_waiters:{N})
-- KEYS[6]  fencing counter                                        (redisson_lock_token:{N})
-- ARGV[1]  owner
-- ARGV[2]  publish command
-- ARGV[3]  message ('0')
-- ARGV[4]  lease in ms of a grant passed on
-- ARGV[5]  time to live in ms of the counter a grant draws ('0': for ever)
-- ARGV[6]  'fresh': the caller holds the lock not at all, so a hold of it is a
--          grant (a waiter's call never holds the lock it waits for); '' else
-- Reply    {queued, granted}: queued 1 it was queued, 0 it was not; granted the
--          token of a grant it passed on (its message may still be on its way:
--          the caller ignores it), 0 none
-- The mark goes too, so that the marks count distlock's entries in the queue (see
-- prelude_waiters).  The queue, the marks, the lock and the counter are read
-- first and a new heir's token drawn before the first other write, so nothing after
-- the first write can fail (prelude_guard).
-- Types    hash list zset - zset string
--#include prelude_publish.lua
--#include prelude_token.lua
--#include prelude_grant.lua
local head = redis.call('lindex', KEYS[2], 0)
local marked = redis.call('zscore', KEYS[5], ARGV[1])
local granted = ARGV[6] == 'fresh' and redis.call('hget', KEYS[1], ARGV[1]) == '1' and
                fencing_token(KEYS[6], false)
local heir, token, digits = false, nil, nil
if granted then
  local t = redis.call('time')
  heir = heir_of(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
                 KEYS[2], KEYS[5], KEYS[4], ARGV[2])
  if heir then
    token, digits = fencing_token(KEYS[6], true, ARGV[5])
  end
end
redis.call('zrem', KEYS[3], ARGV[1])
if marked then
  redis.call('zrem', KEYS[5], ARGV[1])
end
local removed = redis.call('lrem', KEYS[2], 0, ARGV[1])
if granted then
  redis.call('del', KEYS[1])
  if heir then
    grant(heir, token, digits, KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[4], ARGV[4], ARGV[2])
  end
end
if not heir and (granted or head == ARGV[1]) and redis.call('exists', KEYS[1]) == 0 then
  local next_head = redis.call('lindex', KEYS[2], 0)
  if next_head then
    notify(ARGV[2], KEYS[4] .. ':' .. next_head, ARGV[3])
  end
end
return {removed > 0 and 1 or 0, granted or 0}
