-- prelude_grant: joined by the build in front of the fair lock's scripts that let
-- it go, fair_unlock and fair_cancel ('--#include prelude_grant.lua', after
-- prelude_publish and prelude_token).  A release that leaves the fair lock free
-- while a distlock waiter heads the queue makes that waiter the holder in the same
-- script (a grant), and tells it so on its own channel: the waiter's waiting call
-- wakes holding the lock, with no script of its own (docs/design.md, "Grants").
-- Only a distlock waiter is granted: one with a live mark in the marks ZSET
-- (distlock_fair_waiters:{N}, prelude_waiters).  A Redisson waiter heads the
-- queue without a mark; it is told with '0' as Redisson's own release tells it,
-- and takes the lock itself.
--
-- The message: 'g<token>:<lease>', the fencing token drawn for the grant and the
-- lease in ms the lock was given (the releaser's: the script does not know the
-- waiter's; a waiter whose own lease differs renews at once to it).  A waiter
-- that misses it (its pub/sub link dropped) finds itself the holder at its next
-- try, which its waiter renewal brings on within a third of its window
-- (waiter_renew tells a waiter no longer queued): fair_lock then counts the hold
-- once, as granted (ARGV[7] 'fresh': the caller holds none).

-- listens(how, channel): whether a client of this server listens on channel, the
-- way notify's how publishes (PUBSUB NUMSUB / SHARDNUMSUB, which count this
-- server's subscribers only).  A waiter whose process died has none: its
-- connection went with it, and it is not granted a lock it would keep for a
-- whole lease (its entry goes within its window, as before).  One that listens
-- on another node of a cluster (?pubsub=plain) is not counted, and is only
-- woken: no message ever says 'granted' without the grant.
local function listens(how, channel)
  if how ~= 'publish' then
    local ok, n = pcall(redis.call, 'pubsub', 'shardnumsub', channel)
    if ok and n[2] > 0 then
      return true
    end
  end
  return how ~= 'spublish' and redis.call('pubsub', 'numsub', channel)[2] > 0
end

-- heir_of(now, queue, marks, chan, how): the queue's head when it is a
-- distlock waiter whose mark is live and that listens on its own channel
-- (chan .. ':' .. head), else false.  Reads only.
local function heir_of(now, queue, marks, chan, how)
  local head = redis.call('lindex', queue, 0)
  if not head then
    return false
  end
  local mark = redis.call('zscore', marks, head)
  return mark and tonumber(mark) > now and listens(how, chan .. ':' .. head) and head
end

-- grant(heir, token, digits, lock, queue, deadlines, marks, chan, lease, how)
--   heir   the queue's head (heir_of), lock free; token drawn for it already
--          (fencing_token, before the caller's first write: prelude_guard),
--          digits the draw's own when it gave them, else nil
-- The heir leaves the queue, its deadline and its mark, as its own take would
-- (fair_lock), and holds the lock once with the lease given.  A Redisson waiter
-- next in line is told to reckon its sleep again against this hold, as a take
-- tells it.
local function grant(heir, token, digits, lock, queue, deadlines, marks, chan, lease,
                     how)
  redis.call('lpop', queue)
  redis.call('zrem', deadlines, heir)
  redis.call('zrem', marks, heir)
  redis.call('hset', lock, heir, 1)
  redis.call('pexpire', lock, lease)
  local next_head = redis.call('lindex', queue, 0)
  if next_head and not redis.call('zscore', marks, next_head) then
    notify(how, chan .. ':' .. next_head, '0')
  end
  notify(how, chan .. ':' .. heir,
         'g' .. (digits or string.format('%.0f', token)) .. ':' .. lease)
end
