-- prelude_take: joined by the build in front of the exclusive locks' take scripts,
-- mutex_lock and fair_lock ('--#include prelude_take.lua', after prelude_robust,
-- whose robust_keep it calls).
-- write_hold(lock, owner, lease, record, keep, fresh, dead)
--   lock     the lock: HASH { <owner>: hold count }             (N)
--   owner    the owner taking a hold
--   lease    lease in ms, set on the lock
--   record   a robust mutex's record (prelude_robust), nil when the mutex is not
--            robust; keep: its time to live in ms, '0' for ever
--   fresh    false: a reentry, one more hold of the owner, and the record's keep
--            re-armed (a record kept for ever stays so); true: a new hold, the
--            owner's only one, and the record rewritten: held := owner, dead :=
--            dead (the owner that did not release it cleanly, as the caller read
--            the record before any write), or none when dead is false
-- Returns the owner's holds now.  Nothing here can fail: the caller read the lock
-- and the record, and read or drew the fencing token, before (prelude_guard).
local function write_hold(lock, owner, lease, record, keep, fresh, dead)
  local holds = 1
  if fresh then
    redis.call('hset', lock, owner, 1)
  else
    holds = redis.call('hincrby', lock, owner, 1)
  end
  redis.call('pexpire', lock, lease)
  if not record then
    return holds
  end
  if fresh then
    if dead then
      redis.call('hset', record, 'held', owner, 'dead', dead, 'keep', keep)
    else
      redis.call('hset', record, 'held', owner, 'keep', keep)
    end
    robust_keep(record, keep)
  elseif keep ~= '0' then
    redis.call('pexpire', record, keep)
  end
  return holds
end
