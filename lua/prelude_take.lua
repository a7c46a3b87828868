-- prelude_take: joined by the build in front of the exclusive locks' take scripts,
-- mutex_lock and fair_lock ('--#include prelude_take.lua', after prelude_token and
-- prelude_robust, whose functions it calls).
-- take_again(lock, owner, lease, counter, record, keep)
--   lock     the lock: HASH { <owner>: hold count }             (N)
--   owner    the owner, which holds the lock already (a reentry)
--   lease    lease in ms, re-armed
--   counter  fencing counter (prelude_token): read, not drawn
--   record   a robust mutex's record (prelude_robust), re-armed for keep ms
--            unless keep is '0' (kept for ever); nil when the mutex is not robust
-- Returns the reply of a reentry, {1, holds, token}: the owner's count now and the
-- last token drawn.  The counter is read before anything is written (prelude_guard).
local function take_again(lock, owner, lease, counter, record, keep)
  local token = fencing_token(counter, false)
  local holds = redis.call('hincrby', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  if record and keep ~= '0' then
    redis.call('pexpire', record, keep)
  end
  return {1, holds, token}
end

-- robust_take(record, owner, dead, keep): a new hold of owner in a robust mutex's
-- record (prelude_robust); dead is the owner that did not release it cleanly (the
-- record's held or dead as read before any write), or false.  The record lives
-- keep ms from now, or for ever when keep is '0'.
local function robust_take(record, owner, dead, keep)
  if dead then
    redis.call('hset', record, 'held', owner, 'dead', dead, 'keep', keep)
  else
    redis.call('hset', record, 'held', owner, 'keep', keep)
  end
  robust_keep(record, keep)
end
