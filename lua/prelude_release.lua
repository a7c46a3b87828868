-- prelude_release: joined by the build in front of the exclusive locks' release
-- scripts, mutex_unlock and fair_unlock ('--#include prelude_release.lua', after
-- prelude_robust).
-- give_back_hold(lock, owner, lease, expected, holds, record, held, how, keep)
--   lock      the lock: HASH { <owner>: hold count }             (N)
--   owner     the owner giving one hold back
--   lease     lease in ms, re-armed while holds remain
--   expected  nil or '', or the owner's count the call expects to find: when it differs
--             nothing changes (used to finish a release whose reply was lost)
--   holds     the owner's count as the caller read it (HGET lock owner) before it
--             wrote anything, so that a lock of another type fails the script
--             before any write (prelude_guard)
--   record    a robust mutex's record (prelude_robust), nil when the mutex is not
--             robust; the last hold ends it when held, its held as read before
--             any write, is owner, as how says ('clean', 'back' or 'lost', see
--             prelude_robust); keep: its time to live in ms once not
--             recoverable, '0' for ever
-- Returns the owner's holds left: 0 when that was the last one, the lock is then
-- deleted (and the record ended) and the caller tells waiters; -1 the owner holds
-- nothing (expired, forced, or never taken); -2 the count differs from expected.
local function give_back_hold(lock, owner, lease, expected, holds, record, held, how,
                              keep)
  if not holds then
    return -1
  end
  if expected and expected ~= '' and tonumber(holds) ~= tonumber(expected) then
    return -2
  end
  holds = redis.call('hincrby', lock, owner, -1)
  if holds > 0 then
    redis.call('pexpire', lock, lease)
  else
    redis.call('del', lock)
    if record and held == owner then
      if how == 'clean' or (how == 'back' and
                            redis.call('hexists', record, 'dead') == 0) then
        redis.call('del', record)
      elseif how == 'back' then
        redis.call('hdel', record, 'held')
      else
        redis.call('hdel', record, 'held')
        redis.call('hset', record, 'nr', owner)
        robust_keep(record, keep)
      end
    end
  end
  return holds
end
