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
-- Every local function of a prelude costs each call of the script a closure
-- (prelude_guard), robust or not, so the record's work lives in the functions the
-- scripts call anyway, under 'if record' (a mutex that is not robust sends no
-- command for it), and a script gets only what it uses:
--   a new hold    reads held, dead, nr first (a key of another type fails there,
--                 before any write); nr: refused ({2, 0}), its keep re-armed;
--                 else write_hold (prelude_take): held := owner, dead := the old
--                 held or dead when there was one (EOWNERDEAD), keep := ARGV's;
--                 the record lives keep ms
--   a reentry     re-arms keep (write_hold)
--   the last release, when held is the releasing owner (a record another owner
--                 wrote since, after ours was forced, stays; give_back_hold,
--                 prelude_release):
--                 'clean'  deletes the record
--                 'back'   a hold given back that its owner never used (an acquire
--                          that failed after all): the record as that hold found
--                          it (deleted, or held removed and dead kept), so the next
--                          holder is told what this one would have been
--                 'lost'   the holder was told EOWNERDEAD and did not mark it
--                          consistent: held removed, nr := owner, for keep ms

-- The record, just written, lives keep ms from now, or for ever when keep is '0'
-- (an expiry it had before goes).
local function robust_keep(record, keep)
  if keep ~= '0' then
    redis.call('pexpire', record, keep)
  else
    redis.call('persist', record)
  end
end
