-- mutex_unlock: give back one hold; the last one deletes the lock and tells waiters.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  release channel                                        (redisson_lock__channel:{N})
-- KEYS[3]  registered waiters: ZSET (prelude_wake)                (distlock_mutex_waiters:{N});
--          left out with ARGV[5] by a release that is not robust, expects no count
--          and whose hold left no mark (the usual one: two arguments fewer)
-- KEYS[4]  a robust mutex only: its record, HASH (prelude_robust)  (distlock_robust:{N})
-- ARGV[1]  lease in ms, re-armed while holds remain
-- ARGV[2]  owner
-- ARGV[3]  publish command: 'publish', 'spublish' or 'spublish+publish' (notify)
-- ARGV[4]  message published on the final release ('0')
-- ARGV[5]  '1' when the owner's fresh hold left its mark among the waiters (or it
--          does not know), '0' or none when it did not: the waiters are not read then
-- ARGV[6]  optional: the owner's count this call expects to find; when given (not
--          '') and the count differs, nothing changes (used to finish a release whose
--          reply was lost)
-- ARGV[7]  robust only: how the last hold ends, 'clean' (the record goes), 'back'
--          (a hold its owner never used: the record as that hold found it) or
--          'lost' (told EOWNERDEAD, never marked consistent: not recoverable)
-- ARGV[8]  robust only: the record's time to live in ms once not recoverable
--          (the lease plus DISTLOCK_KEY_GRACE_MS), '0' for ever
-- Reply    {n, waiters}: n is the owner's holds left (0: released and published),
--          -1 the owner holds nothing (expired, forced, or never taken), or
--          -2 ARGV[6] was given and the count differs from it; waiters is the
--          number of subscribers the release message reached on N's channel, plus
--          1 when a registered waiter was woken on its own (0 unless released)
-- The final release publishes on N's channel, for Redisson's waiters and distlock's
-- that listen there, and, when the owner left its mark, wakes one registered waiter
-- (prelude_wake).
-- Types    hash - zset hash
--#include prelude_publish.lua
--#include prelude_robust.lua
--#include prelude_release.lua
-- with ARGV[5], one read of the waiters (also their type, before any write): the
-- lowest entry is the owner's mark when it left one, the only mark there is then
local first = ARGV[5] == '1' and redis.call('zrange', KEYS[3], '0', '0', 'withscores')
                              or {}
local held = KEYS[4] and redis.call('hget', KEYS[4], 'held')
local holds = give_back_hold(KEYS[1], ARGV[2], ARGV[1], ARGV[6],
                             redis.call('hget', KEYS[1], ARGV[2]),
                             KEYS[4], held, ARGV[7], ARGV[8])
if holds ~= 0 then
  return {holds, 0}
end
local woken = notify(ARGV[3], KEYS[2], ARGV[4])
-- -1: prelude_wake's MARK, included only below, where the release wakes a
-- registered waiter: a prelude's function costs each call that passes its
-- definition a closure, and most releases end here
if first[1] ~= ARGV[2] or tonumber(first[2]) ~= -1 then
  -- no mark: it took the lock while nobody was registered, and whoever
  -- registered since listens on N's channel
  return {0, woken}
end
--#include prelude_wake.lua
redis.call('zrem', KEYS[3], ARGV[2])
return {0, woken + wake_waiter(KEYS[3], ARGV[3])}
