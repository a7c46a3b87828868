-- prelude_robust: joined by the build in front of the scripts of a robust mutex
-- ('--#include prelude_robust.lua'), which get its record as an extra key only
-- when the mutex is robust: a mutex that is not, and Redisson, never see it.
-- The record, distlock_robust:{N}, a HASH beside the lock in its slot:
--   held   the owner that took the lock last and has not released it cleanly:
--          set by every new hold, deleted with the lock by a clean release
--   dead   an owner that held it and did not release it cleanly (it died, its
--          lease ran out, its hold was forced): the lock's state may be broken;
--          with held, the holder was told EOWNERDEAD and has not released it yet
--   nr     the holder that, told EOWNERDEAD, released it without marking it
--          consistent: the lock is not recoverable, every new hold is refused
--          until an operator deletes the record (distlock unlock --reset)
--   keep   the record's time to live in ms while the lock is held (the lease plus
--          DISTLOCK_KEY_GRACE_MS), '0' for ever; renewals re-arm it
-- A new hold that finds a record (held or dead) is owner-dead: the last hold did
-- not end in a clean release.
--
-- robust_check(key): what a new hold would find, read before anything is written
--   (a key of another type fails here): nr (true when not recoverable), and the
--   owner that did not release it cleanly, or false
local function robust_check(key)
  local r = redis.call('hmget', key, 'held', 'dead', 'nr')
  return r[3] ~= false, r[1] or r[2] or false
end

-- robust_keep(key, keep): the record lives keep ms more ('0': for ever)
local function robust_keep(key, keep)
  if keep ~= '0' then
    redis.call('pexpire', key, keep)
  else
    redis.call('persist', key)
  end
end

-- robust_take(key, owner, dead, keep): a new hold of owner; dead: the owner that
-- did not release it cleanly, or false
local function robust_take(key, owner, dead, keep)
  if dead then
    redis.call('hset', key, 'held', owner, 'dead', dead, 'keep', keep)
    robust_keep(key, keep)
  else
    redis.call('hset', key, 'held', owner, 'keep', keep)
    if keep ~= '0' then
      redis.call('pexpire', key, keep)
    end
  end
end

-- robust_release(key, owner, held, how, keep): owner's last hold was given back;
-- held: the record's holder as the script read it before writing.  how 'clean'
-- deletes the record; 'back' (a hold given back that its owner never used: an
-- acquire that failed after all) leaves it as that hold found it, so the next
-- holder is told what this one would have been; 'lost' (the holder was told
-- EOWNERDEAD and did not mark it consistent) makes the lock not recoverable,
-- for keep ms ('0': for ever).  A record another owner wrote since (ours was
-- forced, and it took the lock) stays.
local function robust_release(key, owner, held, how, keep)
  if held ~= owner then
    return
  end
  if how == 'clean' or (how == 'back' and
                        redis.call('hexists', key, 'dead') == 0) then
    redis.call('del', key)
    return
  end
  if how == 'back' then
    redis.call('hdel', key, 'held')
    return
  end
  redis.call('hdel', key, 'held')
  redis.call('hset', key, 'nr', owner)
  robust_keep(key, keep)
end
