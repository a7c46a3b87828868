-- mutex_unlock: give back one hold; the last one deletes the lock and tells waiters.
-- KEYS[1]  the lock: HASH { <owner>: hold count }                 (N)
-- KEYS[2]  release channel                                        (redisson_lock__channel:{N})
-- ARGV[1]  lease in ms, re-armed while holds remain
-- ARGV[2]  owner
-- ARGV[3]  publish command: 'publish', 'spublish' or 'spublish+publish' (notify)
-- ARGV[4]  message published on the final release ('0')
-- ARGV[5]  optional: the owner's count this call expects to find; when given and the
--          count differs, nothing changes (used to finish a release whose reply was lost)
-- Reply    {n, waiters}: n is the owner's holds left (0: released and published),
--          -1 the owner holds nothing (expired, forced, or never taken), or
--          -2 ARGV[5] was given and the count differs from it; waiters is the
--          number of subscribers the release message reached (0 otherwise)
-- Types    hash -
--#include prelude_publish.lua
--#include prelude_release.lua
local holds = give_back_hold(KEYS[1], ARGV[2], ARGV[1], ARGV[5],
                             redis.call('hget', KEYS[1], ARGV[2]))
if holds ~= 0 then
  return {holds, 0}
end
return {0, notify(ARGV[3], KEYS[2], ARGV[4])}
